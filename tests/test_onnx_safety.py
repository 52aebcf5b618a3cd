"""ONNX exports that never serve stale graphs, never overwrite a model, and fail on one line (issue 45).

Two tiny checkpoints of different architectures are saved once, and each is exported once with the command
(`python -m hf_unified_mt.training.onnx_export`, run in-process); the scenarios copy those folders and change them
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

from hf_unified_mt.training import onnx_export as onnx_export_module  # noqa: E402
from hf_unified_mt.training.onnx_export import (  # noqa: E402
    DECODER_FILE,
    ENCODER_FILE,
    MANIFEST_FILE,
    export_onnx,
    int8_file_name,
)
from hf_unified_mt.training.onnx_runtime import ORTModelForSeq2SeqLM  # noqa: E402
from mt_checks import ROOT, load_script  # noqa: E402
from test_model_contract import TINY  # noqa: E402


INT8_FILES = [int8_file_name(name) for name in (ENCODER_FILE, DECODER_FILE)]


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
        }
        assert int8_file_name(name) in manifest["files"]
    ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=1)  # and are used as they are


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
    from hf_unified_mt.training import onnx_runtime

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
