"""ONNX exports that never serve stale graphs, never overwrite a model, and fail on one line (issue 45); that are
never written through a link, stay loadable when an export into their folder is killed or runs beside another, and
refuse a tampered manifest for what is wrong with it (issue 62).

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
from hf_unified_mt.deployment.onnx_int8 import quantize_onnx_int8
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


# --------------------------------------------------------------------------------------------------------------------
# Issue 62: nothing written through a link, an earlier export loadable until the new one is complete, one writer at a
# time, and manifests refused for what is wrong with them


def files_of(folder: Path) -> dict[str, str]:
    """The export's files (what its manifest and the runtime read) with their hashes, without what an interrupted
    writer left (its lock file, build folders, temporary files)."""
    return {
        name: sha
        for name, sha in snapshot(folder).items()
        if not name.startswith(".onnx_export.") and not name.endswith(".tmp")
    }


def test_nothing_is_written_through_a_link_in_an_export_folder(checkpoints, exports, tmp_path, capsys):
    """A link with the name of a file the exporter or the runtime writes (the pending manifest of earlier versions,
    the lock file, the tokenizer config) is replaced, its target outside the folder left as it was."""
    outside = tmp_path / "outside.json"
    outside.write_text('{"is_local": true}\n')

    folder = copy_of(exports["deep"], tmp_path, "export")
    (folder / "onnx_export.json.tmp").symlink_to(outside)
    status, err = run_export(capsys, checkpoints["deep"], folder, "--overwrite")
    assert status == 0, err
    assert outside.read_text() == '{"is_local": true}\n'
    assert files_of(folder) == files_of(exports["deep"]) and not (folder / "onnx_export.json.tmp").is_symlink()
    (folder / ".onnx_export.lock").symlink_to(outside)
    status, err = run_export(capsys, checkpoints["deep"], folder, "--overwrite")
    assert status == 0, err
    assert outside.read_text() == '{"is_local": true}\n'
    assert not [path.name for path in folder.iterdir() if path.is_symlink()]

    folder = copy_of(exports["deep"], tmp_path, "first-int8-load")
    (folder / "onnx_export.json.tmp").symlink_to(outside)
    ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    assert outside.read_text() == '{"is_local": true}\n'
    assert all((folder / name).is_file() for name in INT8_FILES)

    from hf_unified_mt.deployment.tokenizer_files import clean_tokenizer_config

    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer_config.json").symlink_to(outside)
    clean_tokenizer_config(folder)
    assert outside.read_text() == '{"is_local": true}\n'
    assert not (folder / "tokenizer_config.json").is_symlink()
    assert json.loads((folder / "tokenizer_config.json").read_text()) == {}


def _in_a_child_killed_at(step: int | None, action) -> str:
    """Runs `action` in a forked child process that kills itself with SIGKILL before its `step`-th rename or removal
    (`os.replace`, `os.unlink`, `os.rmdir`; None: never): "killed", "done", or how the child failed."""
    import os
    import signal
    import traceback

    pid = os.fork()
    if pid == 0:  # the child: file operations only, then _exit (no pytest teardown)
        try:
            count = [0]

            def counted(function):
                def call(*args, **kwargs):
                    if count[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    count[0] += 1
                    return function(*args, **kwargs)

                return call

            for name in ("replace", "unlink", "rmdir"):
                setattr(os, name, counted(getattr(os, name)))
            action()
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    return "done" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else f"failed ({status})"


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="kills a forked child process")
def test_an_export_killed_at_any_step_leaves_the_earlier_export_or_the_new_one(checkpoints, exports, tmp_path):
    """`--overwrite` of the unified export (with int8 graphs) by the deep checkpoint, in a child process killed with
    SIGKILL while it builds, and before each of its renames and removals from then on: afterwards the folder loads,
    as the earlier export until the new one has been moved in and as the new one from then on (never a mixture),
    and `--overwrite` takes it. The child copies the deep checkpoint's export into its build folder instead of
    tracing the graphs (`_write_export`), so that it only moves files."""
    import itertools
    import os
    import signal

    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoints["deep"], dtype=torch.float32)
    old, new = files_of(exports["unified"]), files_of(exports["deep"])

    def export(folder: Path, kill_while_building: bool = False):
        def write_export(model, build, *args):  # the deep export, its manifest last
            names = sorted(name for name in new if name != MANIFEST_FILE)
            for i, name in enumerate(names):
                shutil.copyfile(exports["deep"] / name, Path(build) / name)
                if kill_while_building and i == len(names) // 2:
                    os.kill(os.getpid(), signal.SIGKILL)
            shutil.copyfile(exports["deep"] / MANIFEST_FILE, Path(build) / MANIFEST_FILE)

        def run():
            onnx_export_module._write_export = write_export
            export_onnx(model, folder, overwrite=True, source=checkpoints["deep"])

        return run

    outcomes = []
    for step in itertools.chain([None], itertools.count()):
        folder = copy_of(exports["unified"], tmp_path, f"killed-{step}")
        result = _in_a_child_killed_at(step, export(folder, kill_while_building=step is None))
        if result == "done":
            break
        assert result == "killed", result
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
        loaded = files_of(folder)
        assert loaded in (old, new), (step, sorted(set(loaded) ^ set(new)))
        outcomes.append("old" if loaded == old else "new")
        assert onnx_export_module.check_output_dir(folder, overwrite=True)  # what it left is the exporter's own
    assert snapshot(folder) == new  # the export that was not killed left nothing else
    assert outcomes[:2] == ["old", "old"] and outcomes[-1] == "new" and len(outcomes) > 10, outcomes
    assert outcomes == sorted(outcomes, key=["old", "new"].index), outcomes  # the earlier export, then the new one


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="holds the lock in a forked child process")
def test_an_export_into_a_folder_another_process_writes_is_refused_naming_it(checkpoints, exports, tmp_path, capsys):
    """A second export into a folder while another process holds its lock fails on one line naming that process, and
    changes nothing; once that process is gone (killed: the operating system releases its lock), it goes ahead."""
    import os
    import signal

    from hf_unified_mt.deployment.onnx_folder import folder_lock
    from hf_unified_mt.deployment.onnx_format import LOCK_FILE

    folder = copy_of(exports["deep"], tmp_path)
    before = snapshot(folder)
    ready, release = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            with folder_lock(folder, "onnx_export exporting /models/first"):
                os.write(release, b"x")
                while True:
                    signal.pause()
        finally:
            os._exit(1)
    assert os.read(ready, 1) == b"x"
    try:
        status, err = run_export(capsys, checkpoints["unified"], folder, "--overwrite")
        assert_one_line_error(status, err, f"another process is writing into {folder}", f"pid {child}", "/models/first")
        assert {name: sha for name, sha in snapshot(folder).items() if name != LOCK_FILE} == before
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)  # loading the float graphs takes no lock
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    status, err = run_export(capsys, checkpoints["unified"], folder, "--overwrite")
    assert status == 0, err
    assert not (folder / LOCK_FILE).exists()
    assert json.loads((folder / "config.json").read_text())["model_type"] == "unified_transformer"


def test_first_int8_loads_at_once_quantise_the_graphs_once(exports, tmp_path, monkeypatch):
    """Three first `int8` loads of an export at the same time (threads: each takes the folder's lock like a process)
    all load, and the graphs are quantised once, recorded, with nothing left behind."""
    import threading

    from hf_unified_mt.deployment import onnx_folder

    folder = copy_of(exports["deep"], tmp_path)
    errors, quantised = [], []
    quantize = onnx_folder.quantize_onnx_int8

    def load():
        try:
            ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    def counting(source, target, mode="dynamic"):
        quantised.append(Path(target).name)
        return quantize(source, target, mode)

    monkeypatch.setattr(onnx_folder, "quantize_onnx_int8", counting)
    threads = [threading.Thread(target=load) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(quantised) == sorted(INT8_FILES)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert sorted(manifest["files"]) == sorted(path.name for path in folder.iterdir() if path.name != MANIFEST_FILE)
    for name in (ENCODER_FILE, DECODER_FILE):
        assert manifest["graphs"][int8_file_name(name)]["sha256"] == sha256(folder / int8_file_name(name))


@pytest.mark.subprocess
def test_first_int8_loads_in_three_processes_at_once(exports, tmp_path):
    """The same with three processes, each loading the fresh export with `int8=True` as `translate.py --int8` does."""
    import subprocess
    import sys

    from test_training import run_env

    folder = copy_of(exports["deep"], tmp_path)
    script = (
        "import sys\n"
        "from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM\n"
        "ORTModelForSeq2SeqLM.from_pretrained(sys.argv[1], int8=True, num_threads=1)\n"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(folder)], cwd=ROOT, env=run_env(), stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    errors = [process.communicate(timeout=600)[1].decode()[-2000:] for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0], errors
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert sorted(manifest["files"]) == sorted(path.name for path in folder.iterdir() if path.name != MANIFEST_FILE)
    assert set(INT8_FILES) <= set(manifest["graphs"])


def _not_json(path: Path) -> None:
    path.write_text("{not json")


def _not_utf8(path: Path) -> None:
    path.write_bytes(b"\xff\xfe{}")


def _not_onnx_exports(path: Path) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), "built_by": "someone"}))


def _lists_a_file_outside(path: Path, name: str = "../secret.txt") -> None:
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "files": [*manifest["files"], name]}))


def _unreadable(path: Path) -> None:  # a folder in its place: reading it fails, as for a file without permission
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    "tamper, says",
    [
        (_not_json, r"onnx_export\.json is not JSON \(Expecting property name"),
        (_not_utf8, r"onnx_export\.json is not JSON: it is not UTF-8 text"),
        (_not_onnx_exports, r'onnx_export\.json was not written by onnx_export \(it has no "built_by"'),
        (_lists_a_file_outside, r"onnx_export\.json lists '\.\./secret\.txt', a file outside"),
        (lambda path: _lists_a_file_outside(path, "/etc/passwd"), r"lists '/etc/passwd', a file outside"),
        (lambda path: _lists_a_file_outside(path, "sub/encoder.onnx"), r"lists 'sub/encoder\.onnx', which is not the"),
        (_unreadable, r"onnx_export\.json cannot be read \(Is a directory\)"),
    ],
    ids=["not-json", "not-utf8", "not-onnx-export", "dot-dot", "absolute", "subfolder", "unreadable"],
)
def test_a_tampered_manifest_is_refused_saying_what_is_wrong(checkpoints, exports, tmp_path, capsys, tamper, says):
    folder = copy_of(exports["deep"], tmp_path)
    tamper(folder / MANIFEST_FILE)
    with pytest.raises(ValueError, match=says) as error:
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    assert "has no onnx_export.json" not in str(error.value) and "\n" not in str(error.value)
    assert "export the model again into a new or empty folder" in str(error.value)
    translate_script = load_script("translate")
    with pytest.raises(translate_script.UsageError, match=says):
        translate_script.main([str(folder), "--backend", "onnx", "--input", source_file(tmp_path)])
    before = snapshot(folder)
    status, err = run_export(capsys, checkpoints["deep"], folder, "--overwrite")
    assert_one_line_error(status, err, f"refusing to export into {folder}", "move the folder away")
    assert re.search(says, err) and "has no onnx_export.json" not in err
    assert snapshot(folder) == before


def test_an_export_interrupted_while_moving_in_names_its_model_folder_where_it_cannot_be_finished(
    checkpoints, exports, tmp_path, monkeypatch
):
    """An export killed half way through moving its files in, in a folder this process cannot write: the error says
    so and gives the command that exports the model again, with the model's folder; a process that can write it
    finishes the move when it loads it."""
    from hf_unified_mt.deployment import onnx_folder

    folder = copy_of(exports["unified"], tmp_path, "export folder")  # a space: the command quotes the path
    build = onnx_folder.build_folder(folder)
    for path in exports["deep"].iterdir():
        shutil.copyfile(path, build / path.name)
    moved = []
    replace = onnx_folder.os.replace

    def killed_after_three(source, target):
        if len(moved) == 3:
            raise KeyboardInterrupt  # stands for the kill: nothing after it runs
        moved.append(target)
        replace(source, target)

    monkeypatch.setattr(onnx_folder.os, "replace", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        onnx_folder.replace_export(folder, build, json.loads((folder / MANIFEST_FILE).read_text())["files"])
    monkeypatch.undo()
    monkeypatch.setattr(onnx_folder.os, "access", lambda *a, **k: False)  # the folder is read-only
    with pytest.raises(ValueError, match="ended while its files were being moved into place") as error:
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    command = f"python -m hf_unified_mt.deployment.onnx_export {checkpoints['deep'].absolute()} '{folder}' --overwrite"
    assert command in str(error.value) and "MODEL" not in str(error.value)
    monkeypatch.undo()
    gone = copy_of(folder, tmp_path, "build folder gone")
    shutil.rmtree(gone / build.name)
    with pytest.raises(ValueError, match="the folder they were moved from is gone: export the model again") as error:
        ORTModelForSeq2SeqLM.from_pretrained(gone, num_threads=1)
    assert str(checkpoints["deep"].absolute()) in str(error.value)
    ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    assert files_of(folder) == files_of(exports["deep"]) and snapshot(folder) == files_of(exports["deep"])


def test_what_an_interrupted_first_export_left_is_taken_as_an_empty_folder(checkpoints, tmp_path, capsys):
    """A first export killed while building leaves its build folder and lock file: the folder is not an export yet
    (saying why), and an export into it, without --overwrite, goes ahead and removes them."""
    folder = tmp_path / "export"
    (folder / ".onnx_export.partial.k1ll3d00").mkdir(parents=True)
    (folder / ".onnx_export.partial.k1ll3d00" / ENCODER_FILE).write_bytes(b"half a graph")
    (folder / ".onnx_export.lock").write_text("pid 1, onnx_export exporting /models/first\n")
    with pytest.raises(ValueError, match="an export into it has not finished"):
        ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    status, err = run_export(capsys, checkpoints["deep"], folder)
    assert status == 0, err
    assert sorted(path.name for path in folder.iterdir() if path.name.startswith(".")) == []
    ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)


def test_the_reexport_command_quotes_paths_and_says_what_model_stands_for():
    from hf_unified_mt.deployment.onnx_folder import reexport_command

    manifest = {"source": {"path": "/models/my model"}}
    assert reexport_command(manifest, "out dir", int8="per_row") == (
        "python -m hf_unified_mt.deployment.onnx_export '/models/my model' 'out dir' --overwrite --int8 "
        "--int8_mode per_row"
    )
    assert reexport_command({"complete": False}, "out") == (
        "python -m hf_unified_mt.deployment.onnx_export MODEL out --overwrite, MODEL being the saved model it was "
        "exported from"
    )


def test_a_load_during_which_the_export_is_replaced_reads_the_new_one_whole(exports, tmp_path, monkeypatch):
    """Another process replaces the export while this one loads it (here: between the check of the folder and the
    reading of its config): the load reads the folder again and returns the new export, not the earlier one's cache
    layout with the new one's config and graphs."""
    from hf_unified_mt.deployment import onnx_folder

    folder = copy_of(exports["unified"], tmp_path)
    read_config = onnx_runtime.AutoConfig.from_pretrained
    replaced = []

    def replaced_meanwhile(path, *args, **kwargs):
        if not replaced:
            build = onnx_folder.build_folder(folder)
            for path_ in exports["deep"].iterdir():
                shutil.copyfile(path_, build / path_.name)
            manifest = json.loads((folder / MANIFEST_FILE).read_text())
            with onnx_folder.folder_lock(folder, "onnx_export exporting the deep model"):
                onnx_folder.replace_export(folder, build, manifest["files"])
            replaced.append(True)
        return read_config(path, *args, **kwargs)

    monkeypatch.setattr(onnx_runtime.AutoConfig, "from_pretrained", replaced_meanwhile)
    model = ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    assert replaced and model.config.model_type == "deep_transformer"
    deep = ORTModelForSeq2SeqLM.from_pretrained(exports["deep"], num_threads=1)
    assert model.layout == deep.layout
    assert torch.equal(logits(model), logits(deep))


def test_a_first_int8_load_that_was_killed_leaves_the_export_loadable(exports, tmp_path, monkeypatch):
    """What a first `int8` load killed part way leaves: its build folder and lock file (removed by the next one), or
    the int8 graphs recorded in the manifest but not yet moved into place (quantised again by the next one)."""
    from hf_unified_mt.deployment import onnx_folder

    folder = copy_of(exports["deep"], tmp_path, "killed-while-quantising")
    (folder / ".onnx_export.partial.k1ll3d00").mkdir()
    (folder / ".onnx_export.partial.k1ll3d00" / INT8_FILES[0]).write_bytes(b"half a graph")
    (folder / ".onnx_export.lock").write_text("pid 1, quantising its graphs to int8 (dynamic)\n")
    ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    assert [path.name for path in folder.iterdir() if path.name.startswith(".")] == []

    folder = copy_of(exports["deep"], tmp_path, "killed-while-moving")
    replace = onnx_folder.os.replace

    def killed_moving_in(source, target):
        if Path(target).parent == folder and Path(target).name in INT8_FILES:
            raise KeyboardInterrupt  # stands for the kill: the manifest records the graphs, which are not there
        replace(source, target)

    monkeypatch.setattr(onnx_folder.os, "replace", killed_moving_in)
    with pytest.raises(KeyboardInterrupt):
        ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    monkeypatch.undo()
    assert set(INT8_FILES) <= set(json.loads((folder / MANIFEST_FILE).read_text())["graphs"])
    assert not any((folder / name).exists() for name in INT8_FILES)
    ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=1)
    ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    for name in INT8_FILES:
        assert manifest["graphs"][name]["sha256"] == sha256(folder / name)
