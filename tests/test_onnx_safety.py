"""ONNX exports that never serve stale graphs, never overwrite a model, and fail on one line (issue 45).

Two tiny checkpoints of different architectures are saved once, and each is exported once with the command
(`python -m hf_unified_mt.deployment.onnx_export`, run in-process); the scenarios copy those folders and change them
as a user would (re-export, fine-tune into, plant stale files) instead of exporting again.
"""

import ast
import hashlib
import inspect
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from conftest import make_tokenizer, tiny_config


pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from hf_unified_mt.deployment import onnx_export as onnx_export_module  # noqa: E402
from hf_unified_mt.deployment import onnx_runtime  # noqa: E402
from hf_unified_mt.deployment.onnx_export import export_onnx  # noqa: E402
from hf_unified_mt.deployment.onnx_format import (  # noqa: E402
    DECODER_FILE,
    ENCODER_FILE,
    INT8_QUANTIZATION,
    MANIFEST_FILE,
    int8_file_name,
)
from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM  # noqa: E402
from mt_checks import ROOT, load_script  # noqa: E402
from test_model_contract import TINY  # noqa: E402


INT8_FILES = [int8_file_name(name) for name in (ENCODER_FILE, DECODER_FILE)]
PER_ROW_FILES = [int8_file_name(name, "per_row") for name in (ENCODER_FILE, DECODER_FILE)]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(folder: Path) -> dict[str, str]:
    """Every file of `folder` (recursively) with its hash."""
    return {str(path.relative_to(folder)): sha256(path) for path in sorted(folder.rglob("*")) if path.is_file()}


def save_checkpoint(folder: Path, arch: str, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config(arch, "tiny", **TINY))
    model.save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    return folder


def run_export(capsys, *arguments) -> tuple[int, str]:
    """`onnx_export` in-process: (exit status, stderr)."""
    capsys.readouterr()
    try:
        onnx_export_module.main([str(argument) for argument in arguments])
        status = 0
    except SystemExit as exit:
        status = exit.code
    return status, capsys.readouterr().err


def assert_one_line_error(status: int, err: str, *needles: str) -> None:
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("onnx_export: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        "unified": save_checkpoint(root / "unified", "unified_transformer"),
        "deep": save_checkpoint(root / "deep", "deep_transformer"),
    }


@pytest.fixture(scope="module")
def exports(checkpoints, tmp_path_factory):
    """The unified checkpoint exported with `--int8`, the deep one without (read-only: tests copy them)."""
    root = tmp_path_factory.mktemp("exports")
    onnx_export_module.main([str(checkpoints["unified"]), str(root / "unified"), "--int8"])
    onnx_export_module.main([str(checkpoints["deep"]), str(root / "deep")])
    return {"unified": root / "unified", "deep": root / "deep"}


def source_file(tmp_path: Path) -> str:
    path = tmp_path / "input.es"
    path.write_text("hola mundo\n", encoding="utf-8")
    return str(path)


def copy_of(folder: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(folder, tmp_path / name))


def logits(model, vocab: int = 30):
    ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 1]])
    mask = (ids != 1).long()
    decoder_input_ids = torch.tensor([[0, 5, 6], [0, 7, 8]])
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits[..., :vocab]


# --------------------------------------------------------------------------------------------------------------------
# Item 1: stale int8 graphs


def test_reexport_without_int8_leaves_no_int8_graphs_of_the_first_model(checkpoints, exports, tmp_path, capsys):
    folder = copy_of(exports["unified"], tmp_path)
    assert all((folder / name).is_file() for name in INT8_FILES)
    status, err = run_export(capsys, checkpoints["deep"], folder, "--overwrite")
    assert status == 0, err
    assert "replacing the earlier export" in err and "encoder.int8.onnx" in err
    assert not any((folder / name).exists() for name in INT8_FILES)
    assert not (folder / "configuration_unified_transformer.py").exists(), "the first model's code is left behind"
    assert json.loads((folder / "config.json").read_text())["model_type"] == "deep_transformer"
    # int8 now quantises the deep model's graphs: its int8 logits follow the deep model's float logits
    quantized = ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    for name in (ENCODER_FILE, DECODER_FILE):
        assert manifest["graphs"][int8_file_name(name)]["quantized_from"] == sha256(folder / name)
    reference = AutoModelForSeq2SeqLM.from_pretrained(checkpoints["deep"], dtype=torch.float32).eval()
    correlation = torch.corrcoef(torch.stack([logits(quantized).flatten(), logits(reference).flatten()]))[0, 1]
    assert correlation > 0.99


def test_int8_graphs_of_another_export_are_refused(exports, tmp_path):
    folder = copy_of(exports["deep"], tmp_path)
    for name in INT8_FILES:  # the int8 graphs of the unified model's export, left in the deep model's folder
        shutil.copyfile(exports["unified"] / name, folder / name)
    ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)  # the float graphs are the deep model's: fine
    with pytest.raises(ValueError, match=r"encoder\.int8\.onnx .*not .*quantised from .*encoder\.onnx") as error:
        ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    assert "--int8" in str(error.value) and "\n" not in str(error.value)
    translate_script = load_script("translate")
    with pytest.raises(translate_script.UsageError, match=r"encoder\.int8\.onnx"):
        translate_script.main([str(folder), "--backend", "onnx", "--int8", "--input", source_file(tmp_path)])


def test_int8_graphs_made_at_load_are_recorded(exports, tmp_path):
    folder = copy_of(exports["deep"], tmp_path)
    ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    for name in (ENCODER_FILE, DECODER_FILE):
        assert manifest["graphs"][int8_file_name(name)] == {
            "sha256": sha256(folder / int8_file_name(name)),
            "quantized_from": sha256(folder / name),
            "int8_mode": "dynamic",
            "quantization": INT8_QUANTIZATION["dynamic"],
        }
        assert int8_file_name(name) in manifest["files"]
    ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)  # and are used as they are


# --------------------------------------------------------------------------------------------------------------------
# Item 8: the per-row (batch-independent) int8 mode, whose graphs are its own


@pytest.fixture(scope="module")
def per_row_export(checkpoints, tmp_path_factory):
    """The unified checkpoint exported with `--int8 --int8_mode per_row` (read-only: tests copy it)."""
    folder = tmp_path_factory.mktemp("per-row") / "unified"
    onnx_export_module.main([str(checkpoints["unified"]), str(folder), "--int8", "--int8_mode", "per_row"])
    return folder


def test_a_per_row_int8_export_records_its_graphs_and_writes_no_dynamic_ones(per_row_export):
    folder = per_row_export
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert set(manifest["graphs"]) == {ENCODER_FILE, DECODER_FILE, *PER_ROW_FILES}
    assert PER_ROW_FILES == ["encoder.int8.per_row.onnx", "decoder_step.int8.per_row.onnx"]
    for name in (ENCODER_FILE, DECODER_FILE):
        assert manifest["graphs"][int8_file_name(name, "per_row")] == {
            "sha256": sha256(folder / int8_file_name(name, "per_row")),
            "quantized_from": sha256(folder / name),
            "int8_mode": "per_row",
            "quantization": {"quantizer": "MatMulNBits", "bits": 8, "block_size": 32, "accuracy_level": 4},
        }
    assert not any((folder / name).exists() for name in INT8_FILES)
    assert sorted(manifest["files"]) == sorted(p.name for p in folder.iterdir() if p.name != MANIFEST_FILE)


def test_int8_graphs_of_the_other_mode_are_never_used(exports, per_row_export, tmp_path, monkeypatch):
    opened = []
    session = onnx_runtime._session
    monkeypatch.setattr(
        onnx_runtime, "_session", lambda path, threads: opened.append(path.name) or session(path, threads)
    )
    # a folder with the dynamic graphs quantises per-row ones for int8="per_row", and records them
    folder = copy_of(exports["unified"], tmp_path, "dynamic")
    ORTModelForSeq2SeqLM.from_pretrained(folder, int8="per_row", num_threads=1)
    assert opened == PER_ROW_FILES
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert {*INT8_FILES, *PER_ROW_FILES} <= set(manifest["graphs"]) and set(PER_ROW_FILES) <= set(manifest["files"])
    # and the other way round
    opened.clear()
    ORTModelForSeq2SeqLM.from_pretrained(copy_of(per_row_export, tmp_path, "per-row"), int8=True, num_threads=1)
    assert opened == INT8_FILES
    opened.clear()
    ORTModelForSeq2SeqLM.from_pretrained(copy_of(per_row_export, tmp_path, "per-row-2"), int8="per_row", num_threads=1)
    assert opened == PER_ROW_FILES

    # the dynamic graphs given per-row names (unrecorded, then recorded under the other mode) are refused
    folder = copy_of(exports["unified"], tmp_path, "renamed")
    for name in (ENCODER_FILE, DECODER_FILE):
        shutil.copyfile(folder / int8_file_name(name), folder / int8_file_name(name, "per_row"))
    with pytest.raises(ValueError, match=r"encoder\.int8\.per_row\.onnx is not recorded") as error:
        ORTModelForSeq2SeqLM.from_pretrained(folder, int8="per_row", num_threads=1)
    assert "--int8 --int8_mode per_row" in str(error.value) and "\n" not in str(error.value)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    for name in (ENCODER_FILE, DECODER_FILE):
        manifest["graphs"][int8_file_name(name, "per_row")] = manifest["graphs"][int8_file_name(name)]
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"encoder\.int8\.per_row\.onnx was quantised in dynamic mode"):
        ORTModelForSeq2SeqLM.from_pretrained(folder, int8="per_row", num_threads=1)
    for name in (ENCODER_FILE, DECODER_FILE):  # recorded as per row, with another quantiser's settings
        manifest["graphs"][int8_file_name(name, "per_row")]["int8_mode"] = "per_row"
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"encoder\.int8\.per_row\.onnx was quantised with .*quantize_dynamic"):
        ORTModelForSeq2SeqLM.from_pretrained(folder, int8="per_row", num_threads=1)
    # per-row graphs of another model are refused like dynamic ones
    folder = copy_of(exports["deep"], tmp_path, "deep")
    for name in PER_ROW_FILES:
        shutil.copyfile(per_row_export / name, folder / name)
    with pytest.raises(ValueError, match=r"encoder\.int8\.per_row\.onnx .*not .*quantised from .*encoder\.onnx"):
        ORTModelForSeq2SeqLM.from_pretrained(folder, int8="per_row", num_threads=1)
    with pytest.raises(ValueError, match=r"int8 must be .*'dynamic'.*'per_row'"):
        ORTModelForSeq2SeqLM.from_pretrained(folder, int8="per_tensor", num_threads=1)


def test_reexport_leaves_no_per_row_graphs_of_the_first_model(checkpoints, per_row_export, tmp_path, capsys):
    folder = copy_of(per_row_export, tmp_path)
    status, err = run_export(capsys, checkpoints["deep"], folder, "--overwrite")
    assert status == 0, err
    assert "encoder.int8.per_row.onnx" in err
    assert not any((folder / name).exists() for name in [*PER_ROW_FILES, *INT8_FILES])


def test_int8_mode_options_are_refused_where_they_do_not_apply(checkpoints, exports, tmp_path, capsys):
    status, err = run_export(capsys, checkpoints["deep"], tmp_path / "out", "--int8_mode", "per_row")
    assert_one_line_error(status, err, "--int8_mode", "--int8")
    assert not (tmp_path / "out").exists()
    translate_script, score_script = load_script("translate"), load_script("score")
    for script, extra in ((translate_script, ["--input", source_file(tmp_path)]), (score_script, ["--no_progress"])):
        with pytest.raises(script.UsageError, match="--int8_mode .*--int8"):
            script.main([str(exports["unified"]), "--backend", "onnx", "--int8_mode", "per_row", *extra])
        with pytest.raises(script.UsageError, match="--int8_mode per_row .*ONNX Runtime.*--backend onnx"):
            script.main([str(checkpoints["deep"]), "--int8", "--int8_mode", "per_row", *extra])


@pytest.mark.subprocess
def test_per_row_quantisation_leaves_the_logging_of_the_process_as_it_was(exports, tmp_path):
    """ONNX Runtime's `matmul_nbits_quantizer` calls `logging.basicConfig(level=INFO)` when imported: in a process
    that has not configured logging (`onnx_export`, a user's script), every later INFO record would be printed."""
    import subprocess
    import sys

    from test_training import run_env

    script = f"""
import logging
from hf_unified_mt.deployment.onnx_format import quantize_onnx_int8
quantize_onnx_int8({str(exports["deep"] / ENCODER_FILE)!r}, {str(tmp_path / "encoder.onnx")!r}, "per_row")
logging.getLogger("user").info("an INFO record the user did not ask to see")
print(logging.getLogger().handlers, logging.getLevelName(logging.getLogger().level))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=run_env(), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip() == "[] WARNING" and result.stderr == ""


def test_translate_py_per_row_int8_gives_the_same_lines_whatever_the_batch(per_row_export, tmp_path):
    folder = copy_of(per_row_export, tmp_path)
    words = "hola mundo el gato ve al perro la casa es grande y pequeña".split()
    lines = [" ".join(words[(i * 7 + j) % len(words)] for j in range(1 + i % 9)) for i in range(30)]
    source = tmp_path / "input.es"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    translate_script = load_script("translate")
    outputs = {}
    for size in (1, 7, 30):
        output = tmp_path / f"batch{size}.en"
        arguments = [str(folder), "--backend", "onnx", "--int8", "--int8_mode", "per_row", "--num_beams", "2"]
        arguments += ["--input", str(source), "--output", str(output), "--batch_size", str(size), "--no_progress"]
        translate_script.main([*arguments, "--max_new_tokens", "8"])
        outputs[size] = output.read_text(encoding="utf-8")
    assert len(outputs[1].splitlines()) == 30
    assert outputs[7] == outputs[1] and outputs[30] == outputs[1]


# --------------------------------------------------------------------------------------------------------------------
# Item 2: graphs that do not match the weights and config beside them


def test_manifest_records_the_weights_config_and_graphs(checkpoints, exports):
    manifest = json.loads((exports["unified"] / MANIFEST_FILE).read_text())
    assert manifest["complete"] is True
    assert manifest["source"]["weights"] == {"model.safetensors": sha256(checkpoints["unified"] / "model.safetensors")}
    assert manifest["config"]["config.json"] == sha256(exports["unified"] / "config.json")
    assert set(manifest["graphs"]) == {ENCODER_FILE, DECODER_FILE, *INT8_FILES}
    for name, entry in manifest["graphs"].items():
        assert entry["sha256"] == sha256(exports["unified"] / name)
    assert sorted(manifest["files"]) == sorted(p.name for p in exports["unified"].iterdir() if p.name != MANIFEST_FILE)


def test_weights_trained_into_an_export_folder_are_refused(exports, tmp_path):
    """Fine-tuning into the folder (a new model.safetensors beside the graphs): the graphs no longer are that model."""
    folder = copy_of(exports["deep"], tmp_path)
    torch.manual_seed(1)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config("deep_transformer", "tiny", **TINY))
    model.save_pretrained(folder)
    with pytest.raises(ValueError, match=r"model\.safetensors") as error:
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    assert "onnx_export" in str(error.value) and "\n" not in str(error.value)
    translate_script = load_script("translate")
    with pytest.raises(translate_script.UsageError, match=r"model\.safetensors"):
        translate_script.main([str(folder), "--backend", "onnx", "--input", source_file(tmp_path)])


def test_the_exported_weights_beside_the_graphs_are_accepted(checkpoints, exports, tmp_path):
    folder = copy_of(exports["deep"], tmp_path)
    shutil.copyfile(checkpoints["deep"] / "model.safetensors", folder / "model.safetensors")
    ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)


def test_a_changed_config_is_refused(exports, tmp_path):
    folder = copy_of(exports["deep"], tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["decoder_attention_type"] = "aan"
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    with pytest.raises(ValueError, match=r"config\.json"):
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)


def test_graphs_of_another_export_are_refused(exports, tmp_path):
    folder = copy_of(exports["deep"], tmp_path)
    shutil.copyfile(exports["unified"] / ENCODER_FILE, folder / ENCODER_FILE)
    with pytest.raises(ValueError, match=r"encoder\.onnx"):
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)


def test_an_export_without_manifest_is_refused(exports, tmp_path):
    folder = copy_of(exports["deep"], tmp_path)
    (folder / MANIFEST_FILE).unlink()
    with pytest.raises(ValueError, match=rf"no {re.escape(MANIFEST_FILE)}.*onnx_export"):
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)


# --------------------------------------------------------------------------------------------------------------------
# Item 3: exporting into a folder the exporter did not make


@pytest.mark.parametrize("overwrite", [False, True])
def test_export_never_writes_into_a_checkpoint(checkpoints, tmp_path, capsys, overwrite):
    target = copy_of(checkpoints["unified"], tmp_path, "unified-ck")
    before = snapshot(target)
    status, err = run_export(capsys, checkpoints["deep"], target, *(["--overwrite"] if overwrite else []))
    assert_one_line_error(status, err, "model.safetensors")
    assert snapshot(target) == before
    # nor into the checkpoint it exports
    status, err = run_export(capsys, target, target, *(["--overwrite"] if overwrite else []))
    assert_one_line_error(status, err, "model.safetensors")
    assert snapshot(target) == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_export_never_writes_into_a_folder_of_other_files(checkpoints, tmp_path, capsys, overwrite):
    target = tmp_path / "notes"
    target.mkdir()
    (target / "notes.txt").write_text("mine\n")
    status, err = run_export(capsys, checkpoints["deep"], target, *(["--overwrite"] if overwrite else []))
    assert_one_line_error(status, err, MANIFEST_FILE)
    assert snapshot(target) == {"notes.txt": sha256(target / "notes.txt")}


def test_reexport_needs_overwrite_and_keeps_files_it_did_not_write(checkpoints, exports, tmp_path, capsys):
    folder = copy_of(exports["deep"], tmp_path)
    status, err = run_export(capsys, checkpoints["deep"], folder)
    assert_one_line_error(status, err, "--overwrite")
    (folder / "eval_test.json").write_text("{}\n")
    before = snapshot(folder)
    status, err = run_export(capsys, checkpoints["deep"], folder, "--overwrite")
    assert_one_line_error(status, err, "eval_test.json")
    assert snapshot(folder) == before


def test_a_failed_export_leaves_the_previous_export_as_it_was(checkpoints, exports, tmp_path, monkeypatch):
    folder = copy_of(exports["deep"], tmp_path)
    before = snapshot(folder)

    def fail(*args, **kwargs):
        raise ValueError("The exported graphs do not reproduce the PyTorch model")

    monkeypatch.setattr(onnx_export_module, "verify_export", fail)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoints["unified"], dtype=torch.float32)
    with pytest.raises(ValueError, match="do not reproduce"):
        export_onnx(model, folder, make_tokenizer(), overwrite=True)
    assert snapshot(folder) == before
    ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    with pytest.raises(ValueError, match="do not reproduce"):
        export_onnx(model, tmp_path / "new", make_tokenizer())
    assert not (tmp_path / "new").exists()


# --------------------------------------------------------------------------------------------------------------------
# Items 10 and 12: one line and exit status 2, with the hint the user needs


def test_scripts_given_an_export_without_backend_onnx_name_the_option(exports, tmp_path):
    score_script, translate_script = load_script("score"), load_script("translate")
    with pytest.raises(score_script.UsageError, match="ONNX export.*--backend onnx"):
        score_script.main([str(exports["deep"]), "--no_progress"])
    with pytest.raises(translate_script.UsageError, match="ONNX export.*--backend onnx"):
        translate_script.main([str(exports["deep"]), "--input", source_file(tmp_path)])


def test_onnx_export_refusals_are_one_line(checkpoints, exports, tmp_path, capsys):
    status, err = run_export(capsys, exports["deep"], tmp_path / "out")
    assert_one_line_error(status, err, "ONNX export", "not a saved PyTorch model")
    existing = tmp_path / "file.txt"
    existing.write_text("x\n")
    status, err = run_export(capsys, checkpoints["deep"], existing)
    assert_one_line_error(status, err, "is a file")
    assert existing.read_text() == "x\n"
    status, err = run_export(capsys, checkpoints["deep"], existing / "out")
    assert_one_line_error(status, err, "cannot create")
    without_tokenizer = tmp_path / "no-tokenizer"
    without_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(checkpoints["deep"] / name, without_tokenizer / name)
    status, err = run_export(capsys, without_tokenizer, tmp_path / "out")
    assert_one_line_error(status, err, "tokenizer")
    assert not (tmp_path / "out").exists()


def test_an_export_without_tokenizer_says_so(exports, tmp_path):
    folder = copy_of(exports["deep"], tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    translate_script = load_script("translate")
    with pytest.raises(translate_script.UsageError, match="has no tokenizer.*export") as error:
        translate_script.main([str(folder), "--backend", "onnx", "--input", source_file(tmp_path)])
    assert not str(error.value).rstrip().endswith(":"), "the message is cut off"


# --------------------------------------------------------------------------------------------------------------------
# Item 13


def test_export_writes_a_clean_tokenizer_config(exports):
    config = json.loads((exports["unified"] / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & set(config)


def _documented_calls(text: str) -> list[str]:
    return [match.group(0) for match in re.finditer(r"export_onnx\([^()\n]*\)", text)]


def test_documented_export_onnx_calls_bind_to_its_signature():
    """Every `export_onnx(...)` call shown in the docstrings and docs/deployment.md passes the output folder and the
    tokenizer where the signature takes them."""
    from hf_unified_mt.deployment import onnx_runtime

    texts = [onnx_export_module.__doc__, export_onnx.__doc__, onnx_runtime.__doc__]
    texts.append((ROOT / "docs" / "deployment.md").read_text(encoding="utf-8"))
    calls = [call for text in texts for call in _documented_calls(text)]
    assert len(calls) >= 2
    signature = inspect.signature(export_onnx)
    model, tokenizer = object(), object()

    def value(node):  # the model and tokenizer as themselves, other names and literals as what they would be
        if isinstance(node, ast.Name):
            return {"model": model, "tokenizer": tokenizer}.get(node.id, f"<{node.id}>")
        return ast.literal_eval(node)

    checked = 0
    for call in calls:
        node = ast.parse(call, mode="eval").body
        args, kwargs = [value(a) for a in node.args], {k.arg: value(k.value) for k in node.keywords}
        if ... in args:
            continue  # `export_onnx(..., overwrite=True)`: an ellipsis, not a call
        bound = signature.bind(*args, **kwargs)
        assert bound.arguments["model"] is model, call
        assert isinstance(bound.arguments["output_dir"], str), call
        assert bound.arguments.get("tokenizer", tokenizer) is tokenizer, call
        checked += 1
    assert checked >= 2
