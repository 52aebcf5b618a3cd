# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Export of every architecture of the package to ONNX: an encoder graph and a decoder-step graph that takes and
returns the whole decoder cache as flat tensors.

    export_onnx(model, "outputs/mt-onnx", tokenizer)        # encoder.onnx, decoder_step.onnx, onnx_cache.json, ...
    model = ORTModelForSeq2SeqLM.from_pretrained("outputs/mt-onnx")   # onnx_runtime.py reads the folder
    model.generate(**tokenizer(["..."], return_tensors="pt"), num_beams=4)

The two graphs (`torch.onnx.export`, the `torch.export`-based exporter):

* `encoder.onnx`: `input_ids`, `attention_mask` `[batch, source]` -> `encoder_hidden_states` `[batch, source, d]` and,
  for every decoder layer i, the cross-attention keys and values `cross.{i}.key` / `cross.{i}.value`
  `[batch, heads, source, head_dim]`: they depend on the source only, so they are projected once per sentence
  instead of once per step (what the PyTorch cache does too).
* `decoder_step.onnx`: `decoder_input_ids` `[rows, 1]`, `encoder_attention_mask` `[batch, source]`,
  `cache_positions` `[past]` (the positions already decoded, 0 .. past - 1: the step's position is read from this
  length), the cross-attention keys/values `[batch, heads, source, head_dim]`, and the cache of
  the `StatefulDecoderCacheLayer`s (`cache_mt.py`) as flat tensors `past.{i}.key` / `past.{i}.value`
  `[rows, heads, past, head_dim]` and `past.{i}.state.{name}` (convolution windows, running sums and counts) ->
  `logits` `[rows, vocab]` and the cache after the step, `present.{i}.*`, in the same order. The rows are the
  sentences' hypotheses, `rows / batch` consecutive ones per sentence (its beams, or 1): they share their sentence's
  cross-attention keys and values, which are neither copied per beam nor reordered
  (`onnx_patcher.grouped_cross_attention`). Its attentions are ONNX Runtime's fused
  `com.microsoft.MultiHeadAttention` nodes (`onnx_patcher.multi_head_attention`), so the step graph runs in ONNX
  Runtime.

The cache layout (which layers keep keys, which named states of which shapes) is discovered by running one PyTorch
decoding step and written to `onnx_cache.json`; the runtime feeds empty keys and zero states at the first step,
which is exactly what the PyTorch layers start from (a zero convolution window is the causal zero padding, a zero
running sum and count continue as from nothing).

Every export folder has a manifest, `onnx_export.json`: the sha256 of the weights files it was exported from (when
known), of `config.json` and `onnx_cache.json`, and of every graph (the int8 ones with the float graph they were
quantised from and how), and the files the exporter wrote. The runtime refuses a folder whose files do not match it
(`onnx_folder.check_export`), and the exporter writes only into a new or empty folder, or, with `overwrite`, into a
folder it made itself; never into a saved model (`onnx_folder.check_output_dir`). One process at a time writes into an
export folder (`onnx_folder.folder_lock`); an export is built in a folder of its own inside it and moved into place
once complete and verified (`onnx_folder.replace_export`), so that the earlier export stays loadable until then.

This module traces the graphs, verifies them and writes the export; the module substitutions it traces under are
`onnx_patcher.py`'s, the file names, graph names and cache layout `onnx_format.py`'s and the folder's manifest, lock
and replacement `onnx_folder.py`'s (the last two the runtime reads too). It imports nothing from the runtime: the
export is verified by running its graphs in ONNX Runtime directly (`verify_export`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import warnings
from pathlib import Path

import torch

from ..cache_mt import StatefulDecoderCacheLayer
from ..utils.files import write_json
from .onnx_folder import (
    add_int8_graphs,
    build_folder,
    check_not_busy,
    check_output_dir,
    export_folder_contents,
    file_sha256,
    folder_lock,
    replace_export,
    weights_files,
    write_manifest,
)
from .onnx_format import (
    BUILT_BY,
    CONFIG_FILES,
    DECODER_FILE,
    ENCODER_FILE,
    ENCODER_INPUTS,
    INT8_MODES,
    LAYOUT_FILE,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    TOKENIZER_FILES,
    CacheLayout,
    LayerLayout,
    int8_mode,
    is_onnx_export,
)
from .onnx_patcher import (
    ExportDecoderStep,
    ExportEncoder,
    cross_attentions,
    eager_attention,
    exportable,
    step_attentions,
)
from .shortlist import SHORTLIST_FILE, build_shortlist, read_pairs
from .tokenizer_files import save_tokenizer


logger = logging.getLogger(__name__)

OPSET = 18
# The example shapes the graphs are traced with: 2, 3 and 5 are neither 0 nor 1 (which torch.export would specialise)
# nor equal to each other (which it could take for one dimension).
_EXAMPLE_BATCH, _EXAMPLE_SOURCE, _EXAMPLE_PAST = 2, 5, 3
# The step graph is traced with this many rows (hypotheses) per sentence: 2 x 2 rows, again neither 0, 1, 3 nor 5.
_EXAMPLE_BEAMS = 2


def _example_inputs(model, batch: int, source: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids avoiding the special tokens, the last row right-padded by one position."""
    generator = torch.Generator().manual_seed(0)
    low = max(int(t) for t in (model.config.pad_token_id, model.config.eos_token_id, 3) if t is not None) + 1
    ids = torch.randint(low, max(low + 1, model.config.vocab_size), (batch, source), generator=generator)
    ids = ids.clamp(max=model.config.vocab_size - 1)
    mask = torch.ones_like(ids)
    mask[-1, -1], ids[-1, -1] = 0, model.config.pad_token_id
    return ids, mask


@torch.no_grad()
def discover_cache_layout(model, encoder_kwargs: dict | None = None) -> CacheLayout:
    """Runs one PyTorch decoding step and reads what the cache holds afterwards. Also checks that the cross-attention
    keys the encoder graph computes (`onnx_patcher.cross_attentions`) are the ones the step cached."""
    ids, mask = _example_inputs(model, _EXAMPLE_BATCH, _EXAMPLE_SOURCE)
    encoder_kwargs = dict(encoder_kwargs or {})
    encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask, **encoder_kwargs)
    cache = model.get_decoder().new_cache()
    start = torch.full((ids.shape[0], 1), model.config.decoder_start_token_id, dtype=torch.long)
    model(attention_mask=mask, encoder_outputs=encoder_outputs, decoder_input_ids=start, cache=cache, use_cache=True)
    layers = []
    for i, layer in enumerate(cache.self_attention_cache.layers):
        if not isinstance(layer, StatefulDecoderCacheLayer):
            raise ValueError(f"decoder cache layer {i} is a {type(layer).__name__}, not a StatefulDecoderCacheLayer")
        has_keys = layer._keys_length() > 0
        _, heads, _, head_dim = layer.keys.shape
        states = {name: list(state.shape[1:]) for name, state in layer.states.items()}
        layers.append(LayerLayout(keys=has_keys, heads=heads, head_dim=head_dim, states=states))
    cross_heads, head_dims = [], set()
    for i, attention in enumerate(cross_attentions(model)):
        cached = cache.cross_attention_cache.layers[i]
        keys, values = attention.key_values(encoder_outputs.last_hidden_state, None, is_cross_attention=True)
        if not cached.is_initialized or not (torch.equal(keys, cached.keys) and torch.equal(values, cached.values)):
            raise ValueError(
                f"{type(model).__name__}: the cross-attention keys of decoder layer {i} are not those of its "
                "`encoder_attn`; the encoder graph cannot compute them"
            )
        cross_heads.append(keys.shape[1])
        head_dims.add(keys.shape[-1])
    return CacheLayout(
        layers=layers,
        cross_heads=cross_heads,
        cross_head_dim=head_dims.pop(),
        max_source_length=max_source_length(model),
        encoder_kwargs=encoder_kwargs,
        beams_share_cross_attention=True,  # `export_decoder_step` traces `onnx_patcher.grouped_cross_attention`
    )


def max_source_length(model) -> int:
    """The longest source the graphs take: `max_position_embeddings`, or the `max_source_length` a module declares
    (an FNet branch's `fft_length`) if shorter."""
    lengths = [module.max_source_length for module in model.modules() if hasattr(module, "max_source_length")]
    return min([model.config.max_position_embeddings, *lengths])


def _dims(model):
    limit = model.config.max_position_embeddings
    batch = torch.export.Dim("batch", min=1, max=4096)
    source = torch.export.Dim("source", min=1, max=max_source_length(model))
    past = torch.export.Dim("past", min=0, max=limit - 1)
    return batch, source, past


def export_encoder(model, path: str | os.PathLike, layout: CacheLayout) -> None:
    batch, source, _ = _dims(model)
    ids, mask = _example_inputs(model, _EXAMPLE_BATCH, _EXAMPLE_SOURCE)
    with exportable(model):
        program = torch.onnx.export(
            ExportEncoder(model, layout.encoder_kwargs).eval(),
            (ids, mask),
            input_names=list(ENCODER_INPUTS),
            output_names=layout.encoder_output_names(),
            dynamic_shapes=({0: batch, 1: source}, {0: batch, 1: source}),
            opset_version=OPSET,
            dynamo=True,
            optimize=False,
        )
    _save(program, path)


def _save(program, path: str | os.PathLike) -> None:
    """Folds the constants of an exported graph and saves it with its weights inside. Only constant folding: the
    exporter's full optimiser (`optimize=True`, onnxscript 0.7) drops the `+ 1e-9` of Static Expansion's L1
    normalisation, turning a row without positive weights into NaN instead of zeros."""
    from onnxscript import optimizer

    optimizer.fold_constants(program.model)
    optimizer.remove_unused_nodes(program.model)
    _forget_traced_lstm_shapes(program.model.graph)
    program.save(str(path), external_data=False)


def _forget_traced_lstm_shapes(graph) -> None:
    """Drops the shapes the exporter recorded for the values computed from an LSTM's outputs (the Multi-Encoder's
    LSTM branch), so that ONNX Runtime infers them from the graph's inputs. The exporter re-derives an LSTM node's
    shape by unrolling the traced example (5 source positions), so it recorded `[batch, 5, d]` for the branch's
    output where the graph gives `[batch, source, d]`; ONNX Runtime then warned (`VerifyOutputSizes`) at every
    encoder call on another length. The graph's declared outputs keep their (dynamic) shapes."""
    pending = [value for node in graph.all_nodes() if node.op_type == "LSTM" for value in node.outputs]
    seen = set()
    while pending:
        value = pending.pop()
        if value is None or id(value) in seen:
            continue
        seen.add(id(value))
        if not value.is_graph_output():
            value.shape = None
        pending += [output for consumer in value.consumers() for output in consumer.outputs]


def _zero_cache(layout: CacheLayout, batch: int, past: int, dtype: torch.dtype) -> list[torch.Tensor]:
    tensors = []
    for spec in layout.layers:
        if spec.keys:
            tensors += [torch.zeros(batch, spec.heads, past, spec.head_dim, dtype=dtype) for _ in range(2)]
        tensors += [torch.zeros(batch, *shape, dtype=dtype) for shape in spec.states.values()]
    return tensors


def export_decoder_step(model, path: str | os.PathLike, layout: CacheLayout) -> None:
    batch, source, past = _dims(model)
    rows = torch.export.Dim("rows", min=1, max=4096 * 64)  # the sentences' hypotheses (`_EXAMPLE_BEAMS` each here)
    dtype = next(model.parameters()).dtype
    _, mask = _example_inputs(model, _EXAMPLE_BATCH, _EXAMPLE_SOURCE)
    heads, head_dim = layout.cross_heads, layout.cross_head_dim
    cross = [
        torch.randn(_EXAMPLE_BATCH, heads[i], _EXAMPLE_SOURCE, head_dim, dtype=dtype)
        for i in range(len(layout.layers))
        for _ in range(2)
    ]
    cache = _zero_cache(layout, _EXAMPLE_BATCH * _EXAMPLE_BEAMS, _EXAMPLE_PAST, dtype)
    ids = torch.full((_EXAMPLE_BATCH * _EXAMPLE_BEAMS, 1), model.config.decoder_start_token_id, dtype=torch.long)
    positions = torch.arange(_EXAMPLE_PAST)
    dynamic = [{0: batch, 2: source}] * len(cross)
    for spec in layout.layers:
        if spec.keys:
            dynamic += [{0: rows, 2: past}] * 2
        dynamic += [{0: rows}] * len(spec.states)
    with step_attentions(model), exportable(model):
        program = torch.onnx.export(
            ExportDecoderStep(model, layout).eval(),
            (ids, mask, positions, *cross, *cache),
            input_names=layout.step_input_names(),
            output_names=layout.step_output_names(),
            dynamic_shapes=({0: rows}, {0: batch, 1: source}, {0: past}, tuple(dynamic)),
            opset_version=OPSET,
            dynamo=True,
            optimize=False,
        )
    _save(program, path)


def add_int8_mode_argument(parser) -> None:
    """`--int8_mode` of onnx_export, translate.py and score.py (read with `int8_option`)."""
    parser.add_argument(
        "--int8_mode",
        choices=INT8_MODES,
        default=None,
        help="How --int8 quantises: dynamic (the default; each matmul's input is quantised per batch, so a sentence's "
        "int8 translation can change with its neighbours) or per_row (ONNX Runtime's MatMulNBits, 8-bit weights, "
        "inputs quantised per row: the same translation whatever the batch; ONNX graphs only).",
    )


def int8_option(int8: bool, mode: str | None, backend: str = "onnx") -> bool | str:
    """The `int8=` value of the options `--int8` and `--int8_mode` (False, "dynamic" or "per_row"); a `ValueError`
    (one line) where the mode does not apply: without --int8, or per_row with PyTorch (`backend="torch"`)."""
    if mode is not None and not int8:
        raise ValueError(f"--int8_mode {mode} chooses how --int8 quantises: pass --int8 too")
    if mode == "per_row" and backend != "onnx":
        raise ValueError(
            "--int8_mode per_row is ONNX Runtime's weight-only int8 (MatMulNBits), which PyTorch does not have: "
            "pass --backend onnx"
        )
    return (mode or "dynamic") if int8 else False


def check_exportable(model, encoder_kwargs: dict) -> None:
    """The options the graphs cannot carry, as `ValueError`s naming them, before anything is traced."""
    if not hasattr(torch.onnx, "ops"):
        raise ValueError(
            f"ONNX export needs torch >= 2.8 (`torch.onnx.ops`, which writes ONNX Runtime's fused attention into the "
            f"step graph), not {torch.__version__}: pip install -U torch"
        )
    parameter = next(model.parameters())
    if parameter.dtype != torch.float32:
        raise ValueError(f"ONNX export takes a float32 model, not {parameter.dtype}: load it with dtype=torch.float32")
    if parameter.device.type != "cpu":
        raise ValueError(f"ONNX export runs on CPU: move the model there first (it is on {parameter.device})")
    quantized = [name for name, module in model.named_modules() if "quantized" in type(module).__module__]
    if quantized:
        raise ValueError(
            f"ONNX export takes a float32 model, not a quantised one ({quantized[0]}); export the float32 model and "
            "quantise the graphs (`export_onnx(..., int8=True)`)"
        )
    implementation = model.config._attn_implementation
    if implementation not in ("eager", "sdpa"):
        raise ValueError(
            f"ONNX export supports attn_implementation 'eager' and 'sdpa', not {implementation!r}: load the model "
            "with attn_implementation='sdpa'"
        )
    for flag in ("output_attentions", "output_hidden_states"):
        if getattr(model.config, flag, False):
            raise ValueError(f"ONNX export returns no attention maps or hidden states: set `config.{flag}=False`")
    if "encoder_pass" in encoder_kwargs and model.config.model_type != "multi_pass_transformer":
        raise ValueError(f"encoder_pass is an option of the Multi-Pass Transformer, not of {model.config.model_type}")


@contextlib.contextmanager
def _quiet_exporter():
    """The exporter's progress lines (stdout) and its known harmless notices: unused axis names, a pytree deprecation
    inside torch, torch's deprecated traced size checks, and optional torchvision operators that are not installed."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="# The axis name", category=UserWarning)
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`", category=FutureWarning)
            # torch's own traced size checks (the LSTM/FNet branches), deprecated inside torch
            warnings.filterwarnings("ignore", message="_check_is_size will be removed", category=FutureWarning)
            # nn.LSTM refreshes its `_flat_weights` list while traced (the parameters themselves are registered)
            warnings.filterwarnings("ignore", message=r"The tensor attributes .*_flat_weights", category=UserWarning)
            yield
    finally:
        registration.setLevel(level)


def _graph_logits(folder: Path, layout: CacheLayout, ids, mask, decoder_input_ids) -> torch.Tensor:
    """The logits `[rows, target, vocab]` the two graphs in `folder` give for `decoder_input_ids` `[rows, target]`
    after the source (`rows / batch` consecutive rows per sentence, which share its cross-attention inputs), one step
    per position with the cache the step graph returns, run in ONNX Runtime directly: the check does not go through
    `onnx_runtime.py`, which reads what this module writes."""
    import numpy as np
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    encoder, decoder = (
        onnxruntime.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])
        for name in (ENCODER_FILE, DECODER_FILE)
    )
    mask = mask.long().numpy()
    cross = encoder.run(None, dict(zip(ENCODER_INPUTS, (ids.long().numpy(), mask))))[1:]
    cache = [tensor.numpy() for tensor in _zero_cache(layout, decoder_input_ids.shape[0], 0, torch.float32)]
    names = [node.name for node in decoder.get_inputs()]
    logits = []
    for position in range(decoder_input_ids.shape[1]):
        token = decoder_input_ids[:, position : position + 1].long().numpy()
        feeds = [token, mask, np.arange(position, dtype=np.int64), *cross, *cache]
        step, *cache = decoder.run(None, dict(zip(names, feeds)))
        logits.append(torch.from_numpy(step))
    return torch.stack(logits, dim=1)


@torch.no_grad()
def verify_export(model, output_dir: str | os.PathLike, steps: int = 4, atol: float = 1e-4) -> float:
    """Decodes the example batch (one row padded) for `steps` positions with the graphs in ONNX Runtime and with the
    PyTorch model, feeding both the same tokens, and raises a `ValueError` when the logits differ by more than
    `atol` (times the largest logit, if above 1). The graphs decode each sentence once, and then as three rows (three
    hypotheses sharing its cross-attention inputs, each fed other tokens). Returns the largest difference."""
    output_dir = Path(output_dir)
    layout = CacheLayout.from_json(json.loads((output_dir / LAYOUT_FILE).read_text()))
    ids, mask = _example_inputs(model, _EXAMPLE_BATCH, _EXAMPLE_SOURCE)
    generator = torch.Generator().manual_seed(1)
    targets = torch.randint(0, model.config.decoder_vocab_size, (ids.shape[0], steps - 1), generator=generator)
    start = torch.full((ids.shape[0], 1), model.config.decoder_start_token_id, dtype=torch.long)
    decoder_input_ids = torch.cat([start, targets], dim=1)
    expected = model(
        input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids, **layout.encoder_kwargs
    ).logits
    got = _graph_logits(output_dir, layout, ids, mask, decoder_input_ids)
    difference = float((expected - got).abs().max())
    if layout.beams_share_cross_attention:
        beams = 3
        beam_ids = torch.cat([start.repeat_interleave(beams, 0), targets.repeat_interleave(beams, 0).roll(1, 0)], 1)
        beam_expected = model(
            input_ids=ids.repeat_interleave(beams, 0),
            attention_mask=mask.repeat_interleave(beams, 0),
            decoder_input_ids=beam_ids,
            **layout.encoder_kwargs,
        ).logits
        beam_got = _graph_logits(output_dir, layout, ids, mask, beam_ids)
        difference = max(difference, float((beam_expected - beam_got).abs().max()))
    if not difference <= atol * max(1.0, float(expected.abs().max())):
        raise ValueError(
            f"The exported graphs do not reproduce the PyTorch model: logits differ by up to {difference:.3g}; "
            "please report this with the model's config"
        )
    return difference


# ---------------------------------------------------------------------------------------------------------------------
# Writing the export: its files and manifest in a folder of its own, moved into the output folder once verified
# ---------------------------------------------------------------------------------------------------------------------


def _source_record(source: str | os.PathLike | None) -> dict:
    if source is None:
        return {"path": None, "weights": {}}
    source = Path(source)
    return {
        "path": str(source.absolute()),
        "weights": {name: file_sha256(source / name) for name in weights_files(source)},
    }


def _write_export(
    model, folder: Path, tokenizer, encoder_kwargs: dict, int8: str | None, verify: bool, source: dict, shortlist=None
) -> None:
    """Writes a complete, verified export into the empty `folder`, its manifest last."""
    import onnx

    was_training = model.training
    model.eval()
    fuse = getattr(model.config, "fuse_projections_for_inference", False) and hasattr(model, "fuse_projections")
    try:
        if fuse:
            model.fuse_projections()
        layout = discover_cache_layout(model, encoder_kwargs)
        with _quiet_exporter(), eager_attention(model), torch.no_grad():
            export_encoder(model, folder / ENCODER_FILE, layout)
            export_decoder_step(model, folder / DECODER_FILE, layout)
        for name in (ENCODER_FILE, DECODER_FILE):
            onnx.checker.check_model(str(folder / name), full_check=True)
        write_json(folder / LAYOUT_FILE, layout.to_json(), indent=2)
        model.config.save_pretrained(folder)
        if model.generation_config is not None:
            model.generation_config.save_pretrained(folder)
        if tokenizer is not None:
            save_tokenizer(tokenizer, folder)
        if shortlist is not None:
            shortlist.write(folder / SHORTLIST_FILE, tokenizer)
        write_manifest(
            folder,
            {
                "built_by": BUILT_BY,
                "format": MANIFEST_FORMAT,
                "complete": True,
                "model_type": model.config.model_type,
                "source": source,
                "config": {name: file_sha256(folder / name) for name in CONFIG_FILES},
                "graphs": {name: {"sha256": file_sha256(folder / name)} for name in (ENCODER_FILE, DECODER_FILE)},
                "tokenizer": tokenizer is not None,
                "files": sorted(path.name for path in folder.iterdir() if path.name != MANIFEST_FILE),
            },
        )
        if verify:
            verify_export(model, folder)
    finally:
        if fuse:
            model.unfuse_projections()
        model.train(was_training)
    if int8 is not None:
        add_int8_graphs(folder, mode=int8, lock=False)  # the folder is this export's own


def export_onnx(
    model,
    output_dir: str | os.PathLike,
    tokenizer=None,
    *,
    encoder_pass: int | None = None,
    int8: bool | str = False,
    verify: bool = True,
    overwrite: bool = False,
    source: str | os.PathLike | None = None,
    shortlist=None,
) -> Path:
    """Exports `model` (any architecture of the package, float32, on CPU) to `output_dir`: `encoder.onnx`,
    `decoder_step.onnx`, the cache layout `onnx_cache.json`, the config, the generation config, the tokenizer if
    given and the manifest `onnx_export.json`; `ORTModelForSeq2SeqLM.from_pretrained(output_dir)` loads it:

        export_onnx(model, "outputs/mt-onnx", tokenizer)

    Both graphs are checked with `onnx.checker`, and with `verify` the graphs' logits are compared with the model's
    (`verify_export`). `int8` also writes the graphs quantised to int8 by ONNX Runtime: True or "dynamic",
    `*.int8.onnx`; "per_row", `*.int8.per_row.onnx`, whose translations do not depend on the batch. `encoder_pass` fixes
    the Multi-Pass encoder's pass. `source`: the saved model folder `model` was loaded from, unchanged; the sha256 of
    its weights files go into the manifest. `shortlist`: a vocabulary shortlist (`shortlist.Shortlist`, e.g.
    `build_shortlist(tokenizer, sources, targets)` of the training corpus) written as the folder's `vmap.txt`, in the
    tokens of `tokenizer`, which `ORTModelForSeq2SeqLM.from_pretrained(output_dir, shortlist=True)` uses.

    `output_dir` must be new or empty, or, with `overwrite`, an earlier export (`check_output_dir`): never a saved
    model. The export is built and verified in a folder of its own inside it and then moved into place
    (`onnx_folder.replace_export`), so an export that fails or is killed leaves an earlier one loadable; an export
    into a folder another process is writing into (`onnx_folder.folder_lock`) is refused with a `ValueError` naming
    that process. Options the graphs cannot carry raise a `ValueError` naming them (`check_exportable`).
    Layers that fuse their projections for inference (`config.fuse_projections_for_inference`) are exported fused, as
    `generate()` runs them.
    """
    encoder_kwargs = {"encoder_pass": encoder_pass} if encoder_pass is not None else {}
    check_exportable(model, encoder_kwargs)
    if shortlist is not None and tokenizer is None:
        raise ValueError("a shortlist is written in the tokens of the tokenizer: export it with its tokenizer")
    int8 = int8_mode(int8)
    output_dir = Path(output_dir)
    check_output_dir(output_dir, overwrite)
    source_record = _source_record(source)
    created = not output_dir.exists()
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"cannot create the output folder {output_dir}: {error.strerror or error}") from error
    doing = f"onnx_export exporting {source_record['path'] or type(model).__name__}"
    try:
        with folder_lock(output_dir, doing, wait=False):
            # the folder as it is now that no other process writes into it
            earlier, leftovers = export_folder_contents(output_dir, overwrite)
            build = build_folder(output_dir)
            try:
                _write_export(model, build, tokenizer, encoder_kwargs, int8, verify, source_record, shortlist)
            except BaseException:
                shutil.rmtree(build, ignore_errors=True)
                raise
            if earlier:
                logger.info("Replacing the ONNX export in %s: removing %s", output_dir, ", ".join(earlier))
            replace_export(output_dir, build, [*earlier, *leftovers])
    except BaseException:
        if created:  # a folder this export made, unless another process writes into it
            with contextlib.suppress(OSError):
                output_dir.rmdir()
        raise
    return output_dir


def main(argv: list[str] | None = None) -> None:
    """`python -m hf_unified_mt.deployment.onnx_export MODEL OUTPUT_DIR [--int8 [--int8_mode per_row]]
    [--encoder_pass N] [--overwrite]`."""
    import argparse
    import sys

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    parser = argparse.ArgumentParser(description="Export a saved model of the package to ONNX (export_onnx).")
    parser.add_argument("model", help="Directory of a saved model and tokenizer.")
    parser.add_argument(
        "output_dir",
        help="Where to write the graphs, the config and the tokenizer: a new or empty folder (never a saved model).",
    )
    parser.add_argument("--int8", action="store_true", help="Also write the graphs quantised to int8 by ONNX Runtime.")
    add_int8_mode_argument(parser)
    parser.add_argument("--encoder_pass", type=int, default=None, help="Multi-Pass Transformer: the encoder pass.")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"Replace an earlier export in OUTPUT_DIR (recognised by its {MANIFEST_FILE}; the files it replaces are "
        "listed). Nothing else is ever replaced.",
    )
    parser.add_argument("--trust_remote_code", action="store_true", help="Allow custom code saved with the model.")
    parser.add_argument(
        "--shortlist_pairs",
        help=f"Build a vocabulary shortlist ({SHORTLIST_FILE}) from this training corpus (source<TAB>target lines).",
    )
    args = parser.parse_args(argv)

    def fail(message: str) -> None:
        parser.exit(2, f"onnx_export: error: {(str(message).splitlines() or [''])[0]}\n")

    try:
        int8 = int8_option(args.int8, args.int8_mode)
    except ValueError as error:
        fail(error)
    model_dir = Path(args.model)
    if not model_dir.is_dir():
        fail(f"{args.model} is a file, not a model folder" if model_dir.exists() else f"{args.model} does not exist")
    if not (model_dir / "config.json").is_file():
        fail(f"{args.model} is not a saved model: it has no config.json")
    if not weights_files(model_dir):
        if is_onnx_export(model_dir):
            fail(f"{args.model} is an ONNX export, not a saved PyTorch model: export the model it was made from")
        fail(f"{args.model} is not a saved model: it has no weights (model.safetensors)")
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        fail(f"{args.model} has no tokenizer ({' or '.join(TOKENIZER_FILES)}): save it with the model first")
    try:
        replaced = check_output_dir(args.output_dir, args.overwrite)
        check_not_busy(args.output_dir)  # before the model is loaded; export_onnx takes the lock
    except ValueError as error:
        fail(error)
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        model = AutoModelForSeq2SeqLM.from_pretrained(
            args.model, dtype=torch.float32, trust_remote_code=args.trust_remote_code
        )
    except (OSError, ValueError) as error:
        fail(f"cannot load the model {args.model}: {error}")
    shortlist = None
    if args.shortlist_pairs:
        try:
            shortlist = build_shortlist(tokenizer, *read_pairs(args.shortlist_pairs))
        except (OSError, ValueError) as error:
            fail(error)
    try:
        export_onnx(
            model,
            args.output_dir,
            tokenizer,
            encoder_pass=args.encoder_pass,
            int8=int8,
            overwrite=args.overwrite,
            source=args.model,
            shortlist=shortlist,
        )
    except (OSError, ValueError) as error:
        fail(error)
    if replaced:
        print(f"Wrote {args.output_dir}, replacing the earlier export's {', '.join(replaced)}", file=sys.stderr)
    else:
        print(f"Wrote {args.output_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
