# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Generation with the ONNX graphs of `onnx_export.py` in ONNX Runtime, through transformers' own `generate()`.

It reads the folder the exporter wrote in one pass of `onnx_folder.open_export` (an interrupted export finished, the
folder checked against its manifest, the int8 graphs quantised on first use of a mode, the cache layout read), whose
names are `onnx_format.py`'s: the runtime imports nothing from the exporter, nor the exporter from it. A saved
PyTorch model is exported on the fly by `onnx_backend.load_onnx_model`.

    model = ORTModelForSeq2SeqLM.from_pretrained("outputs/mt-onnx")          # or int8=True, int8="per_row"
    tokenizer = AutoTokenizer.from_pretrained("outputs/mt-onnx")
    ids = model.generate(**tokenizer(["En el principio"], return_tensors="pt"), num_beams=4)

`ORTModelForSeq2SeqLM` is a parameter-free `PreTrainedModel` with `GenerationMixin`: its encoder runs `encoder.onnx`,
its `forward` runs `decoder_step.onnx` once per new target position. The decoder cache is the one the PyTorch models
use, an `EncoderDecoderCache` of `StatefulDecoderCacheLayer`s (`cache_mt.py`), holding the tensors the step graph
returns; so greedy search, beam search (`reorder_cache`), batch expansion and every other decoding mode of
`generate()` handle it exactly as they do for the PyTorch model. The cross-attention keys and values come from the
encoder graph once per sentence, inside the encoder output (`ORTEncoderOutput.cross_key_values`), which `generate()`
expands with the beams like the rest of it (the step graph takes either; the native loops below bind one copy per
sentence, which its beams share).

Greedy and beam search do not go through that per-step machinery: once `generate()` has prepared a call, the model's
`_sample` and `_beam_search` run the native loops of `onnx_search.py` (the step graph over bound ONNX Runtime
buffers, the same tokens as `generate()`'s loops) when the call's options allow it (greedy or beam search, length
penalty, minimum and maximum lengths, early stopping, returned sequences, no-repeat n-grams, repetition penalty,
forced, suppressed and bad tokens), and transformers' loops otherwise (sampling, streamers, scores and other outputs
in `return_dict_in_generate`, custom logits processors or stopping criteria), saying so once per model and reason
(`logging.INFO`). `native_search=False` (`from_pretrained` or the attribute) always takes transformers' loops.

Where the options allow (greedy or beam search with minimum lengths, no-repeat n-grams, length penalty, early stopping,
returned sequences), the native search does not even loop in Python: the whole search runs as one ONNX Runtime run of
a search graph (`onnx_search_graph.py`: an ONNX `Loop` around the step graph), built from the step graph's file on
first use, with the same tokens. `search_graphs=False` keeps the loop in Python.

A vocabulary shortlist (`from_pretrained(..., shortlist=...)`, `shortlist.py`) restricts each call's target tokens
to its batch's candidates: the search graphs project onto the candidate columns only (`onnx_shortlist.py`), the other
paths give every other token the logit -inf, which is the same distribution; without one, nothing changes.

`generate()`'s preparation of a call (copying and validating the generation config, inspecting signatures, building
processors) took a third of a 20-token call at batch 1. So a call the native loop took is kept as a plan (its
prepared generation config, logits processors and stopping criteria) under its options and the model's generation
config, and a later call with the same options and only `input_ids` and `attention_mask` besides runs the encoder
graph and the native loop directly (`ORTModelForSeq2SeqLM.generate`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import AutoConfig, GenerationConfig, PreTrainedModel
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

import hf_unified_mt  # noqa: F401  (registers the configs and the stateful cache layer)

from ..modeling_mt_common import CACHE_FIELD, CallersLengthMixin, check_right_padded
from .onnx_folder import manifest_stamp, open_export, weights_files
from .onnx_format import DECODER_FILE, ENCODER_INPUTS, TOKENIZER_FILES, CacheLayout, is_onnx_export
from .onnx_search import StepRunner, beam_search, greedy_search, plan_key, stopping_limits, unsupported_options
from .onnx_search_graph import SearchGraphs, graph_call
from .shortlist import SHORTLIST_FILE, Shortlist


logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ORTEncoderOutput(BaseModelOutput):
    """The encoder output, plus the cross-attention keys and values of every decoder layer, concatenated along the
    heads: `[batch, 2 * sum(heads), source, head_dim]` (layer 0's keys, its values, layer 1's keys, ...), one tensor so
    that `generate()` expands it with the beams."""

    cross_key_values: torch.FloatTensor | None = None


# ONNX Runtime's graph optimisations that the sessions leave out. `SkipLayerNormFusion` fuses each residual `Add` with
# the `LayerNormalization` after it into one `SkipLayerNormalization` node, whose CPU kernel (ONNX Runtime 1.32) took
# 5x the time of the two nodes it replaces on `[16, 30, 192]` (510 µs against 102) and 3.4x on `[64, 1, 192]`; left
# unfused, the main job's model decoded 1.02-1.05x as fast at batch 1, 16 and 64 (docs/deployment.md, "Lean step
# graphs").
DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)


def inference_session(source: str | bytes, options):
    """An ONNX Runtime CPU session of `source` (a path or a serialised graph) under `options`, with the package's graph
    optimisations: ONNX Runtime's, less `DISABLED_OPTIMIZERS` (read at each call)."""
    import onnxruntime

    return onnxruntime.InferenceSession(
        source, options, providers=["CPUExecutionProvider"], disabled_optimizers=list(DISABLED_OPTIMIZERS)
    )


def _session(graph: Path | bytes, num_threads: int | None):
    """A CPU session of the graph in a file (or serialised) on `num_threads` threads (default: PyTorch's thread count),
    whose idle threads sleep rather than spin: on a machine shared with other work, spinning threads took the cores
    from it (translating 40 verses with beam 4 on 2 busy cores: 6.7 s with spinning, 3.2 s without); the package's
    graph optimisations (`inference_session`)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = num_threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return inference_session(graph if isinstance(graph, bytes) else str(graph), options)


def _refuse_maps(output_attentions: bool | None, output_hidden_states: bool | None) -> None:
    if output_attentions or output_hidden_states:
        raise ValueError("The ONNX graphs return no attention maps or hidden states; run the PyTorch model for them")


def _read_shortlist(path: Path, shortlist) -> Shortlist | None:
    """The `shortlist` argument of `from_pretrained` as a `Shortlist` (None: none), read in the folder's tokenizer."""
    if shortlist is None or shortlist is False or isinstance(shortlist, Shortlist):
        return shortlist or None
    file = path / SHORTLIST_FILE if shortlist is True else Path(shortlist)
    if not file.is_file():
        if shortlist is True:
            raise ValueError(
                f"{path} has no {SHORTLIST_FILE}: export it with --shortlist_pairs, or pass a shortlist file"
            )
        raise ValueError(f"the shortlist file {file} does not exist")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"{path} has no tokenizer, which a shortlist file's tokens are read with")
    from transformers import AutoTokenizer

    return Shortlist.read(file, AutoTokenizer.from_pretrained(path))


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(tensor.detach().cpu().numpy())


class ORTEncoder(nn.Module):
    """`encoder.onnx` behind the call `generate()` makes to a model's encoder."""

    main_input_name = "input_ids"

    def __init__(self, session, layout: CacheLayout):
        super().__init__()
        self.session = session
        self.layout = layout

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool = True,
        **kwargs,
    ) -> ORTEncoderOutput:
        _refuse_maps(output_attentions, output_hidden_states)
        fixed = self.layout.encoder_kwargs
        extra = sorted(name for name, value in kwargs.items() if value is not None and fixed.get(name) != value)
        if extra:
            raise ValueError(
                f"The ONNX encoder takes `input_ids` and `attention_mask` only, not {extra} (the options fixed at "
                f"export are {fixed or 'none'})"
            )
        if input_ids.ndim != 2 or input_ids.shape[1] == 0:
            raise ValueError(
                f"`input_ids` must be [batch, source] with at least one position, not {list(input_ids.shape)}"
            )
        if input_ids.shape[1] > self.layout.max_source_length:
            raise ValueError(
                f"The source has {input_ids.shape[1]} positions but the exported encoder takes at most "
                f"{self.layout.max_source_length}; shorten the input"
            )
        check_right_padded(attention_mask)  # as the PyTorch encoders: right-padded, a token in every row
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        outputs = self.session.run(
            None, dict(zip(ENCODER_INPUTS, (_numpy(input_ids.long()), _numpy(attention_mask.long()))))
        )
        cross = torch.cat([torch.from_numpy(array) for array in outputs[1:]], dim=1)
        return ORTEncoderOutput(last_hidden_state=torch.from_numpy(outputs[0]), cross_key_values=cross)


class ORTModelForSeq2SeqLM(PreTrainedModel, CallersLengthMixin, GenerationMixin):
    """A model of this package exported with `export_onnx`, run by ONNX Runtime on CPU (see the module docstring)."""

    main_input_name = "input_ids"
    _is_stateful = True  # generate() refuses assisted decoding, which would crop the recurrent state

    def __init__(
        self,
        config,
        encoder_session,
        decoder_session,
        layout: CacheLayout,
        generation_config=None,
        native_search: bool = True,
        search_graphs: bool = True,
        decoder_file: Path | None = None,
        shortlist: Shortlist | None = None,
        float_decoder_file: Path | None = None,
    ):
        """`decoder_file`: the step graph's file, which the search graphs are built from (default: the one
        `decoder_session` was loaded from); `float_decoder_file` its float original where it is int8 (the shortlisted
        search graphs read the output weights from it). `shortlist`: the vocabulary shortlist of every call."""
        super().__init__(config)
        self.native_search = native_search
        self.search_graphs = search_graphs
        self.shortlist = shortlist
        self._candidates = None  # the candidate ids of the call under way (a shortlist's), sorted
        self._blocked = None  # the other ids, whose logits the loops set to -inf
        step_file = decoder_file or getattr(decoder_session, "_model_path", None)
        threads = decoder_session.get_session_options().intra_op_num_threads
        self._search_graphs = SearchGraphs(
            step_file,
            len(layout.cross_names()),
            lambda graph: _session(graph, threads),
            config.vocab_size,
            float_step_file=float_decoder_file,
        )
        self._fallbacks_said = set()
        self._plans = {}  # plan key (`onnx_search.plan_key`) -> a prepared call the native loop took
        self._planning = None  # the key of the call generate() is preparing
        self.encoder = ORTEncoder(encoder_session, layout)
        self.decoder_session = decoder_session
        self.layout = layout
        self.decoder_input_names = [node.name for node in decoder_session.get_inputs()]
        self._cross = None  # (encoder output's cross_key_values, their arrays): see `_cross_arrays`
        if generation_config is not None:
            self.generation_config = generation_config

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        int8: bool | str = False,
        num_threads: int | None = None,
        native_search: bool = True,
        search_graphs: bool = True,
        shortlist: bool | str | os.PathLike | Shortlist | None = None,
        **kwargs,
    ) -> ORTModelForSeq2SeqLM:
        """Loads a folder written by `export_onnx`, after checking it against its manifest (`onnx_folder.check_export`:
        a `ValueError` if the graphs do not match the config, weights or float graphs beside them). `int8=True` (or
        "dynamic") runs ONNX Runtime's dynamic int8 quantisation of the graphs (`*.int8.onnx`), whose output depends
        on the batch; `int8="per_row"` its weight-only int8 (`*.int8.per_row.onnx`, `MatMulNBits`), whose output does
        not. Each mode reads only its own graphs, quantised next to the float ones on first use and recorded in the
        manifest. `native_search=False` decodes through transformers' loops only; `search_graphs=False` runs greedy
        and beam search in the native loop of `onnx_search.py` rather than as one graph (`onnx_search_graph.py`).
        `shortlist`: a vocabulary shortlist for every call (`shortlist.py`): True for the folder's own (`vmap.txt`,
        written by `onnx_export --shortlist_pairs`), a vocabulary map file (CTranslate2's format, in the tokens of
        the folder's tokenizer) or a `Shortlist`; None (the default) scores the whole vocabulary.

        A folder another process writes into meanwhile (an export replacing this one, int8 graphs quantised) is read
        again once it has: each load reads one export, the earlier or the new one, never half of each. An export that
        was killed while its files were being moved into place is finished first, where the folder can be written
        (`onnx_folder.finish_interrupted_export`)."""
        if kwargs:
            raise TypeError(f"ORTModelForSeq2SeqLM.from_pretrained() got unexpected arguments {sorted(kwargs)}")
        path = Path(path)
        tries = 3
        for attempt in range(tries):
            stamp = manifest_stamp(path)
            try:
                model = cls._load_export(path, int8, num_threads, native_search, search_graphs, shortlist)
            except (OSError, ValueError):
                if attempt + 1 < tries and manifest_stamp(path) != stamp:
                    continue  # the folder changed while it was read: read it again
                raise
            if model is not None and manifest_stamp(path) == stamp:
                return model
        raise ValueError(
            f"{path} changed while it was being loaded, {tries} times (another process is exporting or quantising "
            "into it): load it again once that process is done"
        )

    @classmethod
    def _load_export(
        cls, path: Path, int8: bool | str, num_threads, native_search: bool, search_graphs: bool, shortlist=None
    ):
        """One reading of the export in `path` for `from_pretrained`: the files `onnx_folder.open_export` checked and
        the config beside them, as a model; None where int8 graphs were quantised into the folder first (the folder,
        and its manifest, then have to be read again)."""
        export = open_export(path, int8)
        if export is None:
            return None
        config = AutoConfig.from_pretrained(path)
        generation_config = None
        if (path / "generation_config.json").is_file():
            generation_config = GenerationConfig.from_pretrained(path)
        shortlist = _read_shortlist(path, shortlist)
        encoder, decoder = (_session(file, num_threads) for file in (export.encoder, export.decoder))
        model = cls(
            config,
            encoder,
            decoder,
            export.layout,
            generation_config,
            native_search=native_search,
            search_graphs=search_graphs,
            decoder_file=export.decoder,
            shortlist=shortlist,
            float_decoder_file=path / DECODER_FILE,
        )
        model._scratch = export.scratch  # the int8 graphs of a read-only folder, which the search graphs are built from
        return model

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def get_encoder(self, modality: str | None = None):
        return self.encoder

    def new_cache(self) -> EncoderDecoderCache:
        return EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))

    # ------------------------------------------------------------------ the native search loops
    def _native_runner(self, generation_config, logits_processor, stopping_criteria, synced_gpus, streamer, kwargs):
        """A `StepRunner` for a call `generate()` prepared, or None where the native loops do not take its options
        (said once per reason, at INFO level)."""
        if not self.native_search:
            return None
        reasons = unsupported_options(
            generation_config, logits_processor, stopping_criteria, synced_gpus, streamer, kwargs
        )
        if reasons:
            said = ", ".join(reasons)
            self._say_once(
                f"ONNX Runtime decoding goes through transformers' generate() loop, not the native one, for: {said}"
            )
            return None
        encoder_outputs = kwargs["encoder_outputs"]
        attention_mask = kwargs.get("attention_mask")
        if attention_mask is None:
            attention_mask = torch.ones(encoder_outputs.last_hidden_state.shape[:2], dtype=torch.long)
        cross_key_values = encoder_outputs.cross_key_values
        expand = max(generation_config.num_beams, generation_config.num_return_sequences)
        if not self.layout.beams_share_cross_attention:
            return self._step_runner(attention_mask, cross_key_values)
        # generate() repeated each sentence's encoder output for its beams (`repeat_interleave`): one copy each
        return self._step_runner(attention_mask[::expand], cross_key_values[::expand], expand)

    def _say_once(self, message: str) -> None:
        """Logs `message` at INFO level, once per model."""
        if message not in self._fallbacks_said:
            self._fallbacks_said.add(message)
            logger.info(message)

    def _step_runner(
        self, attention_mask: torch.Tensor, cross_key_values: torch.Tensor, rows_per_sentence: int = 1
    ) -> StepRunner:
        """The decoder step graph bound to one call's source mask and cross-attention keys and values, each row of
        which `rows_per_sentence` consecutive rows (a sentence's beams) share."""
        cross = self._cross_arrays(cross_key_values)
        self._cross = None  # the runner holds them; do not keep the call's tensors on the model
        runner = StepRunner(
            self.decoder_session,
            self.layout,
            _numpy(attention_mask.long()),
            cross,
            self.config.max_position_embeddings,
            rows_per_sentence=rows_per_sentence,
        )
        runner.blocked = self._blocked
        return runner

    def _required_ids(self, kwargs: dict) -> list[int]:
        """The ids a shortlisted call must keep: the start, </s>, padding and forced tokens of the call."""
        ids = []
        for name in ("decoder_start_token_id", "eos_token_id", "pad_token_id", "forced_bos_token_id", "bos_token_id"):
            for source in (kwargs, self.generation_config, self.config):
                value = kwargs.get(name) if source is kwargs else getattr(source, name, None)
                if value is not None:
                    ids += [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
                    break
        return ids

    # generate()'s own keyword arguments, which a plan never repeats
    _GENERATE_ARGUMENTS = (
        "generation_config",
        "logits_processor",
        "stopping_criteria",
        "prefix_allowed_tokens_fn",
        "synced_gpus",
        "assistant_model",
        "streamer",
        "negative_prompt_ids",
        "negative_prompt_attention_mask",
        "custom_generate",
    )

    def generate(self, inputs: torch.Tensor | None = None, **kwargs):
        """transformers' `generate()`; a call that repeats the options of one the native loop took before runs that
        call's plan instead (see the module docstring): the same tokens, without preparing the call again."""
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if self.shortlist is not None and self._candidates is None and isinstance(input_ids, torch.Tensor):
            mask = kwargs.get("attention_mask")
            self._candidates = self.shortlist.candidates(
                input_ids.numpy(), None if mask is None else np.asarray(mask), self._required_ids(kwargs)
            )
            self._blocked = np.setdiff1d(np.arange(self.config.vocab_size), self._candidates)
            try:
                return self.generate(inputs, **kwargs)
            finally:
                self._candidates = self._blocked = None
        options = {k: v for k, v in kwargs.items() if k not in ("input_ids", "attention_mask")}
        key = None
        if self.native_search and isinstance(input_ids, torch.Tensor) and input_ids.ndim == 2:
            if not any(kwargs.get(name) is not None for name in self._GENERATE_ARGUMENTS):
                key = plan_key(self.generation_config, options)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            self._planning = key
            try:
                output = super().generate(inputs, **kwargs)
            finally:
                self._planning = None
            if key in self._plans:  # also under the key of the generation config as the call left it
                self._plans.setdefault(plan_key(self.generation_config, options), self._plans[key])
            return output
        with torch.no_grad():
            return self._run_plan(plan, input_ids, kwargs.get("attention_mask"))

    def _keep_plan(self, search: str, input_ids, generation_config, logits_processor, stopping_criteria, kwargs):
        """Keeps the call generate() prepared as the plan of its options, where a plan can repeat it: one start
        token per row, and nothing in the model inputs but the encoder output and its mask."""
        if self._planning is None or input_ids.shape[1] != 1:
            return
        if not set(kwargs) <= {"encoder_outputs", "attention_mask", "use_cache", "cache", "past_key_values"}:
            return
        if len(self._plans) >= 32:
            self._plans.clear()
        self._plans[self._planning] = dict(
            search=search,
            start=int(input_ids[0, 0]),
            generation_config=generation_config,
            logits_processor=logits_processor,
            stopping_criteria=stopping_criteria,
        )

    def _run_plan(self, plan: dict, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """A planned call: the encoder graph (its output repeated for the beams where the step graph takes it per
        row), then the native loop."""
        config = plan["generation_config"]
        encoder_outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape, dtype=torch.long)
        expand = max(config.num_beams, config.num_return_sequences)
        if self.layout.beams_share_cross_attention:
            runner = self._step_runner(attention_mask, encoder_outputs.cross_key_values, expand)
        else:
            cross = encoder_outputs.cross_key_values
            runner = self._step_runner(*(x.repeat_interleave(expand, dim=0) for x in (attention_mask, cross)))
        start = torch.full((input_ids.shape[0] * expand, 1), plan["start"], dtype=torch.long)
        return self._search(
            plan["search"], runner, start, config, plan["logits_processor"], plan["stopping_criteria"], plan=plan
        )

    def _search(self, search, runner, input_ids, generation_config, logits_processor, stopping_criteria, plan=None):
        """Greedy or beam search: as one search graph where it takes the call, else the native loop in Python. A
        `plan` keeps its call's `graph_call`, the same for every call of the plan."""
        max_length, eos = stopping_limits(stopping_criteria)
        pad = generation_config._pad_token_tensor
        if self.search_graphs:
            kept = plan if plan is not None else {}
            if "graph_call" not in kept:
                positions = self.config.max_position_embeddings
                kept["graph_call"] = graph_call(
                    search, input_ids, logits_processor, max_length, eos, pad, generation_config, positions
                )
            call, why = kept["graph_call"]
            why = why or self._search_graphs.missing(call, self._candidates is not None)
            if why is None:  # the whole search in one ONNX Runtime run
                return self._search_graphs.run(call, runner, input_ids, self._candidates)
            self._say_once(
                f"ONNX Runtime {search} search runs in the native loop in Python, not as one graph, for: {why}"
            )
        if search == "greedy":
            return greedy_search(runner, input_ids, logits_processor, max_length, eos, pad)
        return beam_search(
            runner,
            input_ids,
            logits_processor,
            max_length,
            eos,
            pad,
            num_beams=generation_config.num_beams,
            length_penalty=generation_config.length_penalty,
            early_stopping=generation_config.early_stopping,
            num_return_sequences=generation_config.num_return_sequences,
        )

    def _sample(
        self,
        input_ids,
        logits_processor,
        stopping_criteria,
        generation_config,
        synced_gpus=False,
        streamer=None,
        **model_kwargs,
    ):
        """Greedy search natively (`onnx_search.greedy_search`) where the options allow, else transformers' loop."""
        runner = self._native_runner(
            generation_config, logits_processor, stopping_criteria, synced_gpus, streamer, model_kwargs
        )
        if runner is None:
            return super()._sample(
                input_ids,
                logits_processor,
                stopping_criteria,
                generation_config,
                synced_gpus=synced_gpus,
                streamer=streamer,
                **model_kwargs,
            )
        self._keep_plan("greedy", input_ids, generation_config, logits_processor, stopping_criteria, model_kwargs)
        return self._search("greedy", runner, input_ids, generation_config, logits_processor, stopping_criteria)

    def _beam_search(
        self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False, **model_kwargs
    ):
        """Beam search natively (`onnx_search.beam_search`) where the options allow, else transformers' loop."""
        runner = self._native_runner(
            generation_config, logits_processor, stopping_criteria, synced_gpus, None, model_kwargs
        )
        if runner is None:
            return super()._beam_search(
                input_ids,
                logits_processor,
                stopping_criteria,
                generation_config,
                synced_gpus=synced_gpus,
                **model_kwargs,
            )
        self._keep_plan("beam", input_ids, generation_config, logits_processor, stopping_criteria, model_kwargs)
        return self._search("beam", runner, input_ids, generation_config, logits_processor, stopping_criteria)

    # ------------------------------------------------------------------ the decoder step
    def _cache_inputs(self, cache: EncoderDecoderCache, batch: int) -> list[np.ndarray]:
        """The flat cache the step graph takes (`CacheLayout.cache_names("past")`); empty keys and zero states at the
        first step, what the PyTorch layers start from."""
        arrays = []
        for spec, layer in zip(self.layout.layers, cache.self_attention_cache.layers):
            if spec.keys:
                if layer.is_initialized:
                    arrays += [_numpy(layer.keys), _numpy(layer.values)]
                else:
                    arrays += [np.zeros((batch, spec.heads, 0, spec.head_dim), dtype=np.float32)] * 2
            for name, shape in spec.states.items():
                state = layer.states.get(name)
                arrays.append(_numpy(state) if state is not None else np.zeros((batch, *shape), dtype=np.float32))
        return arrays

    def _store_cache(self, cache: EncoderDecoderCache, present: list[np.ndarray], batch: int) -> None:
        """Puts the step graph's `present.*` outputs into the cache layers, as the PyTorch layers would hold them."""
        flat = iter(present)
        for spec, layer in zip(self.layout.layers, cache.self_attention_cache.layers):
            if spec.keys:
                keys, values = torch.from_numpy(next(flat)), torch.from_numpy(next(flat))
                if not layer.is_initialized:
                    layer.lazy_initialization(keys, values)
                layer.keys, layer.values = keys, values
            else:  # a layer without keys counts the position (`StatefulDecoderCacheLayer.advance`)
                layer.advance(torch.empty(batch, 1, spec.heads * spec.head_dim), spec.heads)
            layer.states = {name: torch.from_numpy(next(flat)) for name in spec.states}

    def _step(
        self,
        token: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        cross: list[np.ndarray],
        cache: EncoderDecoderCache,
    ) -> torch.Tensor:
        layers = cache.self_attention_cache.layers
        past = layers[0].get_seq_length()
        if past + 1 > self.config.max_position_embeddings:
            raise ValueError(
                f"The target sequence has {past + 1} positions but the model supports at most "
                f"`max_position_embeddings`={self.config.max_position_embeddings}; generate fewer tokens"
            )
        batch = token.shape[0]
        feeds = [_numpy(token), encoder_attention_mask, np.arange(past, dtype=np.int64), *cross]
        feeds += self._cache_inputs(cache, batch)
        outputs = self.decoder_session.run(None, dict(zip(self.decoder_input_names, feeds)))
        self._store_cache(cache, outputs[1:], batch)
        if self._blocked is not None:
            outputs[0][:, self._blocked] = -np.inf
        return torch.from_numpy(outputs[0])

    def _cross_arrays(self, cross_key_values: torch.Tensor) -> list[np.ndarray]:
        """The step graph's `cross.{i}.key` / `cross.{i}.value` inputs, split from the encoder output once per
        `generate()` call (kept while the same tensor comes back at every step)."""
        if self._cross is None or self._cross[0] is not cross_key_values:
            pairs = cross_key_values.split([2 * heads for heads in self.layout.cross_heads], dim=1)
            self._cross = (cross_key_values, [_numpy(part) for pair in pairs for part in pair.chunk(2, dim=1)])
        return self._cross[1]

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        encoder_outputs: ORTEncoderOutput | None = None,
        cache: EncoderDecoderCache | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        use_cache: bool | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """Logits `[batch, new positions, vocab]` for the `decoder_input_ids` that follow what `cache` holds: one step
        graph run per new position (one per call in `generate()` with the cache; the whole prefix without it)."""
        _refuse_maps(output_attentions, output_hidden_states)
        extra = sorted(name for name, value in kwargs.items() if value is not None)
        if extra:
            raise ValueError(f"The ONNX model does not take {extra}")
        if decoder_attention_mask is not None and not bool(decoder_attention_mask.all()):
            raise ValueError(
                "The ONNX decoder step takes no padding inside the target: give no `decoder_attention_mask`"
            )
        if decoder_input_ids is None:
            raise ValueError("The ONNX model needs `decoder_input_ids`")
        cache = cache if cache is not None else past_key_values
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        if attention_mask is None:
            attention_mask = torch.ones(encoder_outputs.last_hidden_state.shape[:2], dtype=torch.long)
        if cache is None or use_cache is False:
            cache = self.new_cache()
        past = cache.self_attention_cache.layers[0].get_seq_length()
        new_tokens = decoder_input_ids[:, past:] if decoder_input_ids.shape[1] > past else decoder_input_ids
        cross = self._cross_arrays(encoder_outputs.cross_key_values)
        mask = _numpy(attention_mask.long())
        logits = [self._step(new_tokens[:, i : i + 1], mask, cross, cache) for i in range(new_tokens.shape[1])]
        return Seq2SeqLMOutput(
            logits=torch.stack(logits, dim=1),
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            **{CACHE_FIELD: cache if use_cache is not False else None},
        )


def onnx_backend_problem(int8: bool, device: str | None, dtype: str = "float32") -> str | None:
    """What stands against running ONNX Runtime with these options (the scripts' one-line errors), or None."""
    import importlib.util

    missing = [name for name in ("onnx", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        return f"--backend onnx needs {' and '.join(missing)}: pip install 'hf-unified-mt[onnx]'"
    if (device or "cpu") != "cpu" or dtype != "float32":
        return "--backend onnx runs float32 graphs on CPU: leave --device and --dtype at their defaults"
    return None


def torch_backend_problem(path: str | os.PathLike) -> str | None:
    """Why `--backend torch` cannot load `path` when it is an ONNX export (the scripts' one-line errors), or None."""
    if os.path.isdir(path) and is_onnx_export(path) and not weights_files(path):
        return f"{path} is an ONNX export (onnx_export), which has no PyTorch weights: pass --backend onnx"
    return None
