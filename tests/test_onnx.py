"""ONNX export and ONNX Runtime generation (`hf_unified_mt.deployment.onnx_export` / `onnx_runtime`, issue 33).

Each variant is exported once (module-scoped; an export traces two graphs, tens of seconds on a busy machine) from a
tiny model trained for a few steps, so that it decodes varied tokens rather than one token repeated. Against the
PyTorch model, in float32, on a batch with a right-padded row: the logits of a decoded prefix, and the tokens of
greedy and beam search (transformers' `generate()` running the ONNX Runtime sessions, with the beams reordering the
cache). The fast tier covers every architecture and every kind of recurrent cache state (Prime's convolution read
from the cached values and from its own window, running sums of average attention, the Multi-Encoder's LSTM /
ConvS2S / FNet / Static Expansion branches, Prime layers in the Multi-Pass passes); the other contract variants are
`slow`.
"""

import copy
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, GenerationMixin

from conftest import VOCAB_WORDS, make_tokenizer, tiny_config, train_to_reverse


# The `onnx` extra (CI installs it); without it the module is skipped, as the README's plain install has no exporter.
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from hf_unified_mt.deployment.inference import quantize_int8, translate  # noqa: E402
from hf_unified_mt.deployment.onnx_export import export_onnx  # noqa: E402
from hf_unified_mt.deployment.onnx_format import (  # noqa: E402
    DECODER_FILE,
    ENCODER_FILE,
    ENCODER_INPUTS,
    LAYOUT_FILE,
    CacheLayout,
    int8_file_name,
)
from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM  # noqa: E402
from mt_checks import load_script  # noqa: E402
from test_model_contract import PAD, TINY, VARIANTS, VOCAB, batch  # noqa: E402


ONNX_VARIANTS = {
    **VARIANTS,
    # Separate Projection: the convolution keeps its own window in the cache (`update_window`)
    "unified-prime-separate": ("unified_transformer", "tiny", dict(conv_weight_dropout=0.0, shared_projection=False)),
}
FAST = {
    "unified-prime",
    "unified-prime-separate",
    "deep-aan",
    "mute-merged",
    "multi-encoder-quintuple",
    "mpt-prime",
}
NAMES = [pytest.param(name, marks=() if name in FAST else pytest.mark.slow) for name in ONNX_VARIANTS]
DECODING = {"greedy": dict(num_beams=1), "beam": dict(num_beams=4, num_return_sequences=2)}
NEW_TOKENS = 10


def trained_model(name: str):
    """The variant's tiny model (eager attention), trained for 30 steps to reverse 16 sentences so that it decodes
    varied tokens (`train_to_reverse`, as the contract tests), in eval mode."""
    arch, preset, overrides = ONNX_VARIANTS[name]
    config = tiny_config(arch, preset, **{**TINY, **overrides})
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager")
    return train_to_reverse(model, steps=30, lr=1e-2, memorise=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """`exported(name)` -> (PyTorch model, ORTModelForSeq2SeqLM, export folder), each variant exported once."""
    cache = {}

    def get(name: str):
        if name not in cache:
            model = trained_model(name)
            folder = tmp_path_factory.mktemp(f"onnx-{name}")
            export_onnx(model, folder, make_tokenizer())
            cache[name] = (model, ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1), folder)
        return cache[name]

    return get


@pytest.mark.parametrize("name", NAMES)
def test_onnx_logits_match_pytorch(exported, name):
    model, runtime, _ = exported(name)
    ids, mask, target = batch()
    start = torch.full((ids.shape[0], 1), model.config.decoder_start_token_id)
    decoder_input_ids = torch.cat([start, target], dim=1)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    got = runtime(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("decoding", DECODING)
@pytest.mark.parametrize("name", NAMES)
def test_onnx_generate_matches_pytorch_token_for_token(exported, name, decoding):
    model, runtime, _ = exported(name)
    ids, mask, _ = batch()
    settings = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, **DECODING[decoding])
    expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    got = runtime.generate(input_ids=ids, attention_mask=mask, **settings)
    assert got.tolist() == expected.tolist()
    assert len(set(expected[:, 1:].flatten().tolist())) >= 3, "the model decodes too few distinct tokens to compare"
    # the padded row translates as it does alone
    alone = runtime.generate(input_ids=ids[1:, : int(mask[1].sum())], **settings)
    rows = DECODING[decoding].get("num_return_sequences", 1)
    assert alone.tolist() == got[rows:].tolist()


def test_onnx_export_folder_and_graphs(exported):
    _, runtime, folder = exported("unified-prime-separate")
    layout = json.loads((folder / LAYOUT_FILE).read_text())
    width = max(runtime.config.conv_kernel_sizes) - 1
    assert [(layer["keys"], layer["states"]) for layer in layout["layers"]] == [(True, {"prime_conv": [width, 16]})] * 2
    for name in (ENCODER_FILE, DECODER_FILE):
        graph = onnx.load(folder / name).graph
        onnx.checker.check_model(onnx.load(folder / name))
        for value in graph.input:
            dims = value.type.tensor_type.shape.dim
            assert not dims[0].HasField("dim_value") or value.name == "cache_positions", f"{name}: {value.name}"
    decoder = onnx.load(folder / DECODER_FILE).graph
    names = [f"past.{i}.{kind}" for i in range(2) for kind in ("key", "value", "state.prime_conv")]
    assert [value.name for value in decoder.input if value.name.startswith("past.")] == names
    assert [value.name for value in decoder.output][1:] == [name.replace("past", "present") for name in names]
    # the names are the contract's (`onnx_format`), which the runtime feeds and reads
    contract, encoder = CacheLayout.from_json(layout), onnx.load(folder / ENCODER_FILE).graph
    assert [value.name for value in encoder.input] == list(ENCODER_INPUTS)
    assert [value.name for value in encoder.output] == contract.encoder_output_names()
    assert [value.name for value in decoder.input] == contract.step_input_names()
    assert [value.name for value in decoder.output] == contract.step_output_names()
    assert {"config.json", "generation_config.json", "tokenizer.json"} <= {path.name for path in folder.iterdir()}


def test_onnx_refuses_what_the_graphs_cannot_carry(exported, tmp_path, monkeypatch):
    model, runtime, _ = exported("unified-prime")
    with pytest.raises(ValueError, match="float32 model, not torch.float16"):
        export_onnx(copy.deepcopy(model).half(), tmp_path)
    with pytest.raises(ValueError, match="encoder_pass is an option of the Multi-Pass"):
        export_onnx(model, tmp_path, encoder_pass=1)
    flex = copy.deepcopy(model)
    flex.config._attn_implementation = "flex_attention"
    with pytest.raises(ValueError, match="attn_implementation 'eager' and 'sdpa', not 'flex_attention'"):
        export_onnx(flex, tmp_path)
    with pytest.raises(ValueError, match="not a quantised one"):
        export_onnx(quantize_int8(model), tmp_path)
    with monkeypatch.context() as patch:
        patch.delattr(torch.onnx, "ops")  # a torch before 2.8
        with pytest.raises(ValueError, match=r"ONNX export needs torch >= 2.8 \(`torch.onnx.ops`"):
            export_onnx(model, tmp_path)
    assert not any(tmp_path.iterdir()), "nothing is written before the checks"
    ids = torch.randint(4, 99, (1, model.config.max_position_embeddings + 1))
    with pytest.raises(ValueError, match="exported encoder takes at most 64"):
        runtime.generate(input_ids=ids, max_new_tokens=2)
    with pytest.raises(ValueError, match="no attention maps"):
        runtime.generate(input_ids=ids[:, :5], max_new_tokens=2, output_attentions=True, return_dict_in_generate=True)


def test_onnx_int8_graphs_are_quantised_and_close(exported):
    model, runtime, folder = exported("unified-prime")
    quantized = ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    operators = {node.op_type for node in onnx.load(folder / "decoder_step.int8.onnx").graph.node}
    assert operators & {"MatMulInteger", "DynamicQuantizeMatMul", "DynamicQuantizeLinear"}
    ids, mask, target = batch()
    decoder_input_ids = torch.cat([torch.full((2, 1), model.config.decoder_start_token_id), target], dim=1)
    exact = runtime(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    approximate = quantized(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    assert not torch.equal(exact, approximate)
    correlation = np.corrcoef(exact.flatten().numpy(), approximate.flatten().numpy())[0, 1]
    assert correlation > 0.99


def thirty_lines() -> list[str]:
    """30 sentences of 1-12 words of the test vocabulary, of varied lengths (so batches of 7 mix lengths)."""
    generator = torch.Generator().manual_seed(3)
    words = VOCAB_WORDS[:20]
    lengths = torch.randint(1, 13, (30,), generator=generator).tolist()
    return [" ".join(words[i] for i in torch.randint(0, len(words), (n,), generator=generator)) for n in lengths]


def test_onnx_per_row_int8_translations_do_not_depend_on_the_batch(exported, tmp_path):
    """Dynamic int8 quantises each matmul's input with one scale for the whole batch, so a sentence's logits move
    with its neighbours; `int8="per_row"` (ONNX Runtime's weight-only int8, `MatMulNBits`, whose inputs are quantised
    per row in blocks) gives every line the same translation with batch sizes 1, 7 and 30, greedy and with beams, and
    a sentence the same logits alone as among others."""
    import shutil

    model, runtime, source = exported("unified-prime")
    folder = Path(shutil.copytree(source, tmp_path / "export"))
    dynamic_graphs = (folder / int8_file_name(ENCODER_FILE)).exists()  # made by an earlier test, or not
    per_row = ORTModelForSeq2SeqLM.from_pretrained(folder, int8="per_row", num_threads=1)
    for name in (ENCODER_FILE, DECODER_FILE):
        operators = {node.op_type for node in onnx.load(folder / int8_file_name(name, "per_row")).graph.node}
        assert "MatMulNBits" in operators, name
        assert not operators & {"DynamicQuantizeMatMul", "MatMulInteger", "DynamicQuantizeLinear"}, name
    assert (folder / int8_file_name(ENCODER_FILE)).exists() == dynamic_graphs, "the dynamic graphs are another mode's"

    tokenizer, lines = make_tokenizer(), thirty_lines()
    for num_beams in (1, 4):
        outputs = {
            size: translate(per_row, tokenizer, lines, num_beams=num_beams, batch_size=size, max_new_tokens=12)
            for size in (1, 7, 30)
        }
        assert len(set(outputs[1])) > 5, "the model should translate lines differently"
        assert outputs[7] == outputs[1] and outputs[30] == outputs[1], f"beam {num_beams}"

    # The longest line alone and with six shorter ones (so its own rows are the same): per row, the same logits;
    # dynamic int8 (the check can see a batch dependence), not.
    longest = max(lines, key=len)
    inputs = tokenizer([longest, *[line for line in lines if line != longest][:6]], return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[model.config.decoder_start_token_id, 5, 6, 7]] * 7)
    dynamic = ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    for quantized, independent in ((per_row, True), (dynamic, False)):
        alone = quantized(
            input_ids=inputs.input_ids[:1],
            attention_mask=inputs.attention_mask[:1],
            decoder_input_ids=decoder_input_ids[:1],
        ).logits[0]
        among = quantized(**inputs, decoder_input_ids=decoder_input_ids).logits[0]
        assert torch.equal(alone, among) == independent

    # int8 weights: close to the float graphs, not equal
    ids, mask, target = batch()
    decoder_input_ids = torch.cat([torch.full((2, 1), model.config.decoder_start_token_id), target], dim=1)
    exact = runtime(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    approximate = per_row(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    assert not torch.equal(exact, approximate)
    assert np.corrcoef(exact.flatten().numpy(), approximate.flatten().numpy())[0, 1] > 0.99


def test_translate_py_onnx_options_are_checked_before_loading(exported, tmp_path, monkeypatch):
    _, _, folder = exported("unified-prime")
    translate_script = load_script("translate")
    monkeypatch.setattr(translate_script, "load_onnx_model", lambda *a, **k: pytest.fail("the model was loaded"))
    for extra, message in (
        (["--device", "cuda"], "--backend onnx runs float32 graphs on CPU"),
        (["--dtype", "float16"], "--backend onnx runs float32 graphs on CPU"),
        (["--backend", "tensorrt"], None),
    ):
        arguments = [str(folder), "--backend", "onnx", *extra]
        if message is None:
            with pytest.raises(SystemExit):
                translate_script.main(arguments)
        else:
            with pytest.raises(translate_script.UsageError, match=message):
                translate_script.main(arguments)


@pytest.mark.subprocess
def test_translate_py_backend_onnx_translates_like_torch(tmp_path):
    """`translate.py --backend onnx` on a saved PyTorch model (exported for the run) gives the lines `--backend torch`
    gives, greedy and with beams."""
    import subprocess
    import sys

    from mt_checks import ROOT
    from test_training import run_env

    model = trained_model("unified-prime")
    model.save_pretrained(tmp_path / "model")
    make_tokenizer().save_pretrained(tmp_path / "model")
    source = tmp_path / "input.es"
    source.write_text("en el principio\n\ny dijo dios sea la luz\n", encoding="utf-8")
    outputs = {}
    for backend in ("torch", "onnx"):
        output = tmp_path / f"{backend}.en"
        command = [sys.executable, "training/translate.py", str(tmp_path / "model"), "--input", str(source)]
        command += ["--output", str(output), "--backend", backend, "--num_beams", "3", "--max_new_tokens", "8"]
        result = subprocess.run(command, cwd=ROOT, env=run_env(), capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        assert "Warning" not in result.stderr, result.stderr[-4000:]
        outputs[backend] = output.read_text(encoding="utf-8")
    assert outputs["onnx"] == outputs["torch"]
    assert outputs["torch"].split("\n")[1] == "" and outputs["torch"].split("\n")[0]


def test_score_py_backend_onnx_scores_the_pytorch_translations(exported, tmp_path):
    model, _, folder = exported("unified-prime")
    model.save_pretrained(tmp_path / "model")
    make_tokenizer().save_pretrained(tmp_path / "model")
    sources, references = tmp_path / "test.es", tmp_path / "test.en"
    sources.write_text("en el principio\ny dijo dios sea la luz\n", encoding="utf-8")
    references.write_text("in the beginning\nand god said let there be light\n", encoding="utf-8")
    score_script = load_script("score")
    hypotheses = {}
    for backend, path in (("torch", tmp_path / "model"), ("onnx", folder)):
        arguments = [str(path), "--source_file", str(sources), "--reference_file", str(references)]
        arguments += ["--backend", backend, "--num_beams", "3", "--max_new_tokens", "6", "--no_progress"]
        score_script.main([*arguments, "--output_dir", str(tmp_path / backend)])
        hypotheses[backend] = (tmp_path / backend / "hypotheses_test.txt").read_text(encoding="utf-8")
    assert hypotheses["onnx"] == hypotheses["torch"] and hypotheses["torch"].strip()


def test_onnx_runtime_runs_every_graph_without_shape_warnings(exported, capfd):
    """The graphs declare the shapes their nodes produce for every source length: an LSTM branch's output was
    declared with the traced example's length (5), so ONNX Runtime warned (`VerifyOutputSizes`) at every encoder call
    on another length."""
    ids, mask, _ = batch()
    assert ids.shape[1] != 5
    for name in sorted(FAST):
        _, runtime, _ = exported(name)
        capfd.readouterr()
        runtime.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, num_beams=2)
        err = capfd.readouterr().err
        assert "VerifyOutputSizes" not in err and "onnxruntime" not in err, f"{name}: {err[-2000:]}"


# ---------------------------------------------------------------- the native search loop (issue 47)
NATIVE_DECODING = {
    "greedy": dict(num_beams=1, max_new_tokens=12),
    "greedy-min-length": dict(num_beams=1, max_new_tokens=12, min_new_tokens=7),
    "beam": dict(num_beams=4, num_return_sequences=2, max_new_tokens=12, length_penalty=0.6),
    "beam-min-length-early-stopping": dict(
        num_beams=3,
        num_return_sequences=3,
        max_new_tokens=12,
        min_new_tokens=5,
        length_penalty=1.5,
        early_stopping=True,
    ),
    "beam-no-repeat-ngram": dict(num_beams=4, max_new_tokens=10, no_repeat_ngram_size=2, repetition_penalty=1.3),
    "greedy-no-repeat-ngram": dict(num_beams=1, max_new_tokens=14, no_repeat_ngram_size=2, min_new_tokens=3),
    "beam-no-repeat-ngram-never": dict(
        num_beams=4,
        num_return_sequences=2,
        max_new_tokens=11,
        no_repeat_ngram_size=3,
        early_stopping="never",
        length_penalty=1.2,
    ),
}
# The decodings the search graphs take (`onnx_search_graph.graph_call`); a repetition penalty takes the native loop.
GRAPH_DECODINGS = {name for name, settings in NATIVE_DECODING.items() if "repetition_penalty" not in settings}


def ragged_batch():
    """Four sources of 7, 5, 3 and 6 tokens, each ending in </s>, right-padded to 7."""
    generator = torch.Generator().manual_seed(5)
    lengths = [7, 5, 3, 6]
    ids = torch.full((len(lengths), max(lengths)), PAD)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.randint(4, VOCAB, (length,), generator=generator)
        ids[row, length - 1] = 2
        mask[row, :length] = 1
    return ids, mask


def refuse_per_step_runs(runtime, monkeypatch):
    """The native loop runs the step graph over bound buffers (`run_with_iobinding`), never through
    `InferenceSession.run`, which only transformers' `generate()` loop calls (`ORTModelForSeq2SeqLM.forward`)."""

    def refused(*args, **kwargs):
        raise AssertionError("the decoder step ran through generate()'s loop, not the native one")

    monkeypatch.setattr(runtime.decoder_session, "run", refused)


def refused_generate(*args, **kwargs):
    raise AssertionError("a call with the options of one before was prepared by generate() again")


def count_search_graph_runs(runtime, monkeypatch) -> list:
    """The calls that ran as one search graph (`SearchGraphs.run`), one entry each."""
    runs, original = [], runtime._search_graphs.run
    monkeypatch.setattr(runtime._search_graphs, "run", lambda *a, **k: runs.append(1) or original(*a, **k))
    return runs


@pytest.mark.parametrize("route", ["search-graph", "native-loop"])
@pytest.mark.parametrize("decoding", NATIVE_DECODING)
@pytest.mark.parametrize("name", NAMES)
def test_native_search_matches_pytorch_generate_token_for_token(exported, name, decoding, route, monkeypatch):
    """The native search, as one search graph (greedy and beam search inside an ONNX `Loop` around the step graph)
    and as the loop over bound ONNX Runtime buffers (`search_graphs=False`, and every call the graphs do not take),
    gives the PyTorch model's `generate()` tokens on a batch of four sources of different lengths, with every option
    it takes: beams, returned sequences, length penalty, minimum and maximum new tokens, early stopping, no-repeat
    n-grams, repetition penalty; sentences that end early are padded as `generate()` pads them."""
    model, runtime, _ = exported(name)
    ids, mask = ragged_batch()
    settings = NATIVE_DECODING[decoding]
    expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    refuse_per_step_runs(runtime, monkeypatch)
    monkeypatch.setattr(runtime, "search_graphs", route == "search-graph")
    graph_runs = count_search_graph_runs(runtime, monkeypatch)
    got = runtime.generate(input_ids=ids, attention_mask=mask, **settings)
    assert got.tolist() == expected.tolist()
    assert len(graph_runs) == (route == "search-graph" and decoding in GRAPH_DECODINGS)
    assert len(set(expected[:, 1:].flatten().tolist())) >= 3, "the model decodes too few distinct tokens to compare"
    # the same options again: the call's plan, without generate()'s preparation
    monkeypatch.setattr(GenerationMixin, "generate", refused_generate)
    assert runtime.generate(ids, attention_mask=mask, **settings).tolist() == expected.tolist()
    assert len(graph_runs) == 2 * (route == "search-graph" and decoding in GRAPH_DECODINGS)
    if decoding == "greedy":  # some sentences end before others, and are padded after their </s>
        ended = [row.index(2) for row in expected.tolist() if 2 in row]
        assert ended and min(ended) < expected.shape[1] - 1, expected


@pytest.mark.parametrize("name", ["unified-prime", "deep-aan"])
def test_beams_share_the_cross_attention_inputs_of_their_sentence(exported, name, monkeypatch):
    """The step graph takes the source mask and the cross-attention keys and values once per sentence, shared by the
    sentence's consecutive rows (its beams): the native loop binds them so, and the same graph still decodes rows that
    each bring their own copy (an export before `beams_share_cross_attention`, or transformers' loop) to the same
    tokens."""
    model, runtime, folder = exported(name)
    layout = json.loads((Path(folder) / LAYOUT_FILE).read_text())
    assert layout["beams_share_cross_attention"] is True
    ids, mask = ragged_batch()
    settings = dict(num_beams=4, num_return_sequences=2, max_new_tokens=12)
    expected = model.generate(input_ids=ids, attention_mask=mask, **settings).tolist()
    bound = []
    original = runtime._step_runner
    monkeypatch.setattr(runtime, "_step_runner", lambda *a: bound.append(original(*a)) or bound[-1], raising=False)
    assert runtime.generate(input_ids=ids, attention_mask=mask, **settings).tolist() == expected
    assert runtime.generate(ids, attention_mask=mask, **settings).tolist() == expected  # the call's plan
    assert [runner.static[0].shape[0] for runner in bound] == [4, 4] and {r.rows for r in bound} == {16}
    monkeypatch.setattr(runtime.layout, "beams_share_cross_attention", False)
    bound.clear()
    runtime._plans.clear()
    for _ in range(2):  # prepared by generate(), then the plan
        assert runtime.generate(ids, attention_mask=mask, **settings).tolist() == expected
    assert [runner.static[0].shape[0] for runner in bound] == [16, 16]


# Fused attention nodes per decoder layer of the step graph: the cross-attention, and the self-attention where the
# layer has one that attends as `MTAttention` does (AAN and merged attention have none; MUTE's relative-position
# self-attention attends its own way and keeps its own nodes).
FUSED_ATTENTIONS_PER_LAYER = {
    "unified-prime": 2,
    "unified-prime-separate": 2,
    "deep-aan": 1,
    "mute-merged": 1,
    "multi-encoder-quintuple": 2,
    "mpt-prime": 2,
}


@pytest.mark.parametrize("name", sorted(FUSED_ATTENTIONS_PER_LAYER))
def test_step_graph_attends_in_fused_attention_nodes(exported, name):
    """Every attention of the decoder step that the fused operator computes is one `com.microsoft.MultiHeadAttention`
    node (the outputs' agreement with PyTorch is the tests above): no attention `Softmax` is left beside them, and
    the causal mask, which a step's one position never needs, is not built."""
    model, _, folder = exported(name)
    graph = onnx.load(Path(folder) / DECODER_FILE).graph
    fused = [node for node in graph.node if node.op_type == "MultiHeadAttention"]
    assert {node.domain for node in fused} == {"com.microsoft"}
    assert len(fused) == FUSED_ATTENTIONS_PER_LAYER[name] * model.config.decoder_layers
    operators = {node.op_type for node in graph.node}
    assert "LessOrEqual" not in operators and "Where" not in operators
    if name.startswith("unified"):  # Prime's decoder convolution normalises all its kernels with one softmax
        assert sum(node.op_type == "Softmax" for node in graph.node) == model.config.decoder_layers
        # ... over logits that one padded product lays out (`padded_generator`): no padding, no stacking of cells
        assert "Pad" not in operators
    else:
        assert "Softmax" not in operators


@pytest.mark.parametrize("name", sorted(FUSED_ATTENTIONS_PER_LAYER))
def test_step_graph_transposes_no_activations(exported, name):
    """A step decodes one position per row, where splitting the heads of a projection (`MTAttention.split_heads`) and
    Prime's one-position convolution are reshapes of the same elements, not transposes: the step graph transposes
    nothing but constants (the tied output projection's weight), which ONNX Runtime folds when it loads the graph. The
    one exception: the Separate Projection's convolution window, which its cache keeps position-major (one transpose
    of it per layer)."""
    model, _, folder = exported(name)
    graph = onnx.load(Path(folder) / DECODER_FILE).graph
    constants = {tensor.name for tensor in graph.initializer}
    transposed = [
        node.input[0] for node in graph.node if node.op_type == "Transpose" and node.input[0] not in constants
    ]
    windows = model.config.decoder_layers if name == "unified-prime-separate" else 0
    assert len(transposed) == windows, transposed


def test_sessions_leave_out_the_skip_layer_norm_fusion(exported, tmp_path, monkeypatch):
    """ONNX Runtime would fuse each residual `Add` and the `LayerNormalization` after it into one
    `SkipLayerNormalization` node, whose CPU kernel is several times slower than the two (`DISABLED_OPTIMIZERS`). The
    name is one ONNX Runtime knows (with it left out the optimised graph keeps its `LayerNormalization` nodes, with the
    defaults they are fused), and every session of the runtime, the search graphs' included, leaves it out."""
    import onnxruntime

    from hf_unified_mt.deployment import onnx_runtime

    _, _, folder = exported("unified-prime")

    def optimized_operators(disabled) -> set[str]:
        options = onnxruntime.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
        options.log_severity_level = 3
        graph = str(Path(folder) / ENCODER_FILE)
        onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        return {node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node}

    assert "SkipLayerNormalization" in optimized_operators([])
    operators = optimized_operators(list(onnx_runtime.DISABLED_OPTIMIZERS))
    assert "SkipLayerNormalization" not in operators and "LayerNormalization" in operators

    disabled, session = [], onnxruntime.InferenceSession
    monkeypatch.setattr(
        onnxruntime,
        "InferenceSession",
        lambda *a, **k: disabled.append(k.get("disabled_optimizers")) or session(*a, **k),
    )
    runtime = ORTModelForSeq2SeqLM.from_pretrained(folder)
    ids, mask = ragged_batch()
    runtime.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4)
    assert len(disabled) == 3  # encoder, step and the greedy search graph
    assert all(set(onnx_runtime.DISABLED_OPTIMIZERS) <= set(names) for names in disabled)


def test_native_search_falls_back_to_generate_and_says_so_once(exported, monkeypatch, caplog):
    """An option the native loop does not take (sampling) runs transformers' `generate()` loop instead, with one
    INFO line naming the option, not one per call; with `top_k=1` sampling is greedy search, so the fallback's tokens
    are the PyTorch model's greedy tokens. With `native_search=False` the native loop is never used."""
    model, runtime, _ = exported("unified-prime")
    ids, mask = ragged_batch()
    expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8)
    with caplog.at_level(logging.INFO, logger="hf_unified_mt.deployment.onnx_runtime"):
        for _ in range(2):
            got = runtime.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=True, top_k=1)
            assert got.tolist() == expected.tolist()
    said = [record for record in caplog.records if "generate()" in record.getMessage()]
    assert len(said) == 1, [record.getMessage() for record in caplog.records]
    assert said[0].levelno == logging.INFO and "do_sample" in said[0].getMessage()

    refuse_per_step_runs(runtime, monkeypatch)  # and the supported options still take the native loop
    assert runtime.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8).tolist() == expected.tolist()
    # a changed generation config is not the plan of the same options before
    before, runtime.generation_config.no_repeat_ngram_size = runtime.generation_config.no_repeat_ngram_size, 1
    try:
        again = runtime.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8)
    finally:
        runtime.generation_config.no_repeat_ngram_size = before
    assert again.tolist() == model.generate(ids, attention_mask=mask, max_new_tokens=8, no_repeat_ngram_size=1).tolist()
    assert again.tolist() != expected.tolist()
    monkeypatch.undo()
    runtime.native_search = False
    try:
        with caplog.at_level(logging.INFO, logger="hf_unified_mt.deployment.onnx_runtime"):
            assert runtime.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8).tolist() == expected.tolist()
    finally:
        runtime.native_search = True
    assert len([record for record in caplog.records if "generate()" in record.getMessage()]) == 1


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_search_graph_no_repeat_ngram_bans_what_transformers_bans(size):
    """The search graphs' no-repeat n-gram ban (`onnx_search_graph.no_repeat_ngram`) sets the same scores to -inf as
    transformers' `NoRepeatNGramLogitsProcessor`, on rows of a 5-token vocabulary (so that n-grams repeat) of every
    length from 1 to 12, shorter than the n-gram included."""
    from onnx import TensorProto, helper
    from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

    from hf_unified_mt.deployment.onnx_search_graph import GraphWriter, no_repeat_ngram

    g = GraphWriter()
    banned = no_repeat_ngram(g, "scores", "sequences", g.op("Reshape", "length", g.const([])), size)
    g.op("Identity", banned, outputs=["banned"])
    graph = helper.make_graph(
        g.nodes,
        "ban",
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("sequences", TensorProto.INT64, None),
            helper.make_tensor_value_info("length", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("banned", TensorProto.FLOAT, None)],
    )
    import onnxruntime

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(size)
    processor = NoRepeatNGramLogitsProcessor(size)
    banned_any = 0
    for length in range(1, 13):
        sequences = torch.randint(0, 5, (6, length), generator=generator)
        scores = torch.randn(6, 7, generator=generator)
        expected = processor(sequences, scores.clone())
        got = session.run(None, dict(scores=scores.numpy(), sequences=sequences.numpy(), length=np.array([length])))
        assert torch.equal(torch.from_numpy(got[0]), expected), (size, length)
        banned_any += int(torch.isinf(expected).sum())
    assert banned_any > 0


def test_search_graphs_are_built_from_a_step_graph_that_stays_readable(exported, tmp_path, monkeypatch):
    """The search graphs are built from the step graph's file when a call first needs one: int8 graphs quantised
    into a scratch folder (the export folder read-only) stay there while the model lives, and a model whose step
    graph file has gone decodes with the native loop instead, to the same tokens."""
    import shutil

    import hf_unified_mt.deployment.onnx_runtime as onnx_runtime

    model, _, folder = exported("unified-prime")
    ids, mask = ragged_batch()
    settings = dict(num_beams=1, max_new_tokens=10)
    copy_folder = tmp_path / "export"
    shutil.copytree(folder, copy_folder)
    for quantized in copy_folder.glob("*.int8*.onnx"):  # left by other tests: quantised at load, as a first use is
        quantized.unlink()
    monkeypatch.setattr(onnx_runtime.os, "access", lambda *a, **k: False)  # the folder is read-only
    runtime = ORTModelForSeq2SeqLM.from_pretrained(copy_folder, int8=True, num_threads=1)
    monkeypatch.undo()
    assert not list(copy_folder.glob("*.int8.onnx")) and Path(runtime._search_graphs.step_file).is_file()
    graph_runs = count_search_graph_runs(runtime, monkeypatch)
    int8_tokens = runtime.generate(input_ids=ids, attention_mask=mask, **settings)
    assert len(graph_runs) == 1
    loop = ORTModelForSeq2SeqLM.from_pretrained(copy_folder, int8=True, num_threads=1, search_graphs=False)
    assert loop.generate(input_ids=ids, attention_mask=mask, **settings).tolist() == int8_tokens.tolist()

    runtime = ORTModelForSeq2SeqLM.from_pretrained(copy_folder, num_threads=1)
    (copy_folder / DECODER_FILE).unlink()  # the session holds the graph; the search graphs cannot be built now
    graph_runs = count_search_graph_runs(runtime, monkeypatch)
    expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    assert runtime.generate(input_ids=ids, attention_mask=mask, **settings).tolist() == expected.tolist()
    assert graph_runs == []


def test_a_call_the_search_graphs_do_not_take_says_so_once(exported, caplog):
    """A logits processor the search graphs do not write (a repetition penalty) runs the native loop in Python, with
    one INFO line naming it, not one per call; the tokens are still PyTorch's."""
    model, runtime, _ = exported("deep-aan")
    ids, mask = ragged_batch()
    settings = dict(num_beams=2, max_new_tokens=6, repetition_penalty=1.2)
    expected = model.generate(input_ids=ids, attention_mask=mask, **settings).tolist()
    runtime._fallbacks_said.clear()
    with caplog.at_level(logging.INFO, logger="hf_unified_mt.deployment.onnx_runtime"):
        for _ in range(2):
            assert runtime.generate(input_ids=ids, attention_mask=mask, **settings).tolist() == expected
    said = [record.getMessage() for record in caplog.records if "not as one graph" in record.getMessage()]
    assert said == ["ONNX Runtime beam search runs in the native loop in Python, not as one graph, for: "
                    "RepetitionPenaltyLogitsProcessor"]  # fmt: skip


@pytest.mark.parametrize(
    "settings",
    [
        dict(num_beams=1, max_new_tokens=9, eos_token_id=[2, 9]),
        dict(num_beams=3, num_return_sequences=2, max_new_tokens=9, eos_token_id=[2, 9], no_repeat_ngram_size=2),
        dict(num_beams=4, max_new_tokens=1),
        dict(num_beams=1, max_new_tokens=1, min_new_tokens=1),
    ],
    ids=["greedy-two-eos", "beam-two-eos", "beam-one-token", "greedy-one-token"],
)
def test_search_graphs_with_several_end_ids_and_one_new_token(exported, settings, monkeypatch):
    """Two </s> ids (more candidates kept per beam, either ends a row) and a single new token (the loop's first step
    is its last) give PyTorch's tokens through the search graphs."""
    model, runtime, _ = exported("unified-prime")
    ids, mask = ragged_batch()
    expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    if settings.get("eos_token_id") and settings["num_beams"] == 1:  # the second id ends a row, which is then padded
        assert any(9 in row[1:] and row.index(9) < len(row) - 1 for row in expected.tolist()), expected
    graph_runs = count_search_graph_runs(runtime, monkeypatch)
    assert runtime.generate(input_ids=ids, attention_mask=mask, **settings).tolist() == expected.tolist()
    assert len(graph_runs) == 1


def shortlisted_runtime(folder, shortlist, **options):
    return ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1, shortlist=shortlist, **options)


def test_shortlist_scores_only_the_candidates_in_the_search_graph_as_in_the_loops(exported, monkeypatch):
    """Issue 64: with a shortlist, every decoding path gives the tokens of the candidate set only, and the search
    graph (its projection restricted to the candidate columns) gives the native loop's tokens (every other logit at
    -inf): one search, in fewer columns. A shortlist of the whole vocabulary changes nothing."""
    from hf_unified_mt.deployment.shortlist import Shortlist

    _, runtime, folder = exported("unified-prime")
    ids, mask = ragged_batch()
    shortlist = Shortlist({(token,): [(token * 7) % VOCAB, (token * 11) % VOCAB] for token in range(4, VOCAB)}, [5])
    graph, loop = shortlisted_runtime(folder, shortlist), shortlisted_runtime(folder, shortlist, search_graphs=False)
    everything = shortlisted_runtime(folder, Shortlist({}, np.arange(VOCAB)))
    candidates = shortlist.candidates(ids, mask, graph._required_ids({}))
    assert len(candidates) < VOCAB // 2
    runs = count_search_graph_runs(graph, monkeypatch)
    for settings in (
        {"num_beams": 1},
        {"num_beams": 4, "num_return_sequences": 2},
        {"num_beams": 3, "no_repeat_ngram_size": 2},
    ):
        settings = dict(settings, max_new_tokens=NEW_TOKENS, min_new_tokens=3)
        tokens = graph.generate(input_ids=ids, attention_mask=mask, **settings)
        assert torch.equal(tokens, loop.generate(input_ids=ids, attention_mask=mask, **settings))
        assert np.isin(tokens.numpy(), candidates).all()
        full = runtime.generate(input_ids=ids, attention_mask=mask, **settings)
        assert torch.equal(everything.generate(input_ids=ids, attention_mask=mask, **settings), full)
    assert len(runs) == 3
    # greedy: a row whose translation without the shortlist holds candidates only is translated the same with it
    plain = runtime.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS)
    covering = Shortlist(shortlist.rules, [5, *plain[:2].flatten().tolist()])  # covers rows 0 and 1
    restricted = shortlisted_runtime(folder, covering).generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS
    )

    def rows(tokens):  # each row without the padding after its end
        return [row[: max(i for i, t in enumerate(row) if t != PAD) + 1] for row in tokens.tolist()]

    assert rows(restricted)[:2] == rows(plain)[:2] and rows(restricted) != rows(plain)
    # transformers' own loop (here: scores returned) masks the logits the same way
    outputs = loop.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, return_dict_in_generate=True, output_scores=True
    )
    assert np.isin(outputs.sequences.numpy(), candidates).all()
    blocked = np.setdiff1d(np.arange(VOCAB), candidates)
    assert all(bool(torch.isinf(score[:, blocked]).all()) for score in outputs.scores)


@pytest.mark.parametrize("name", NAMES)
def test_shortlisted_search_graphs_of_every_architecture_and_int8_mode(exported, name, tmp_path):
    """The output projection is found in every architecture's step graph, float and int8 (dynamic, per row), and the
    shortlisted graph decodes candidates only; in float32 and dynamic int8 (whose projection stays int8, on the
    candidate columns) it gives the native loop's tokens."""
    from hf_unified_mt.deployment.shortlist import Shortlist

    _, runtime, folder = exported(name)
    ids, mask = ragged_batch()
    shortlist = Shortlist({(token,): [(token * 5) % VOCAB] for token in range(4, VOCAB)}, [6, 7])
    candidates = shortlist.candidates(ids, mask, runtime._required_ids({}))
    settings = dict(num_beams=2, max_new_tokens=NEW_TOKENS)
    for int8 in (False, "dynamic", "per_row") if name == "unified-prime" else (False, "dynamic"):
        graph = shortlisted_runtime(folder, shortlist, int8=int8)
        tokens = graph.generate(input_ids=ids, attention_mask=mask, **settings)
        assert np.isin(tokens.numpy(), candidates).all()
        if int8 != "per_row":  # float32, and dynamic int8 on its own int8 columns: the loop's tokens
            loop = shortlisted_runtime(folder, shortlist, int8=int8, search_graphs=False)
            assert torch.equal(tokens, loop.generate(input_ids=ids, attention_mask=mask, **settings))


def test_export_writes_a_shortlist_that_the_folder_loads_and_the_scripts_check(exported, tmp_path):
    from hf_unified_mt.deployment.onnx_backend import shortlist_problem
    from hf_unified_mt.deployment.shortlist import SHORTLIST_FILE, Shortlist

    model, _, _ = exported("unified-prime")
    tokenizer = make_tokenizer()
    words = VOCAB_WORDS[:10]
    shortlist = Shortlist(
        {(tokenizer.convert_tokens_to_ids(w),): [tokenizer.convert_tokens_to_ids(w)] for w in words}, [4]
    )
    folder = export_onnx(model, tmp_path / "export", tokenizer, shortlist=shortlist, verify=False)
    assert SHORTLIST_FILE in json.loads((folder / "onnx_export.json").read_text())["files"]
    runtime = ORTModelForSeq2SeqLM.from_pretrained(folder, shortlist=True)
    assert runtime.shortlist.rules.keys() == shortlist.rules.keys()
    assert shortlist_problem("torch", True, folder) == "--shortlist works with --backend onnx"
    assert shortlist_problem("onnx", True, folder) is None
    assert "does not have" in shortlist_problem("onnx", True, tmp_path)
    assert "does not exist" in shortlist_problem("onnx", str(tmp_path / "none.txt"), folder)
    with pytest.raises(ValueError, match="export it with its tokenizer"):
        export_onnx(model, tmp_path / "other", shortlist=shortlist)
