"""`benchmarks/backend_bleu.py`: its rows, the table of its committed result, and the committed result's float32
claim (ONNX Runtime float32 scores each trained model exactly as PyTorch float32 does)."""

import json

from mt_checks import ROOT, benchmark_script


RESULT = ROOT / "benchmarks" / "results" / "backend_bleu.json"


def backend_bleu():
    """The script as a module (`mt_checks.benchmark_script`)."""
    return benchmark_script("backend_bleu")


def test_the_rows_are_every_backend_of_score_py():
    rows = dict(backend_bleu().ROWS)
    assert rows == {
        "PyTorch float32": [],
        "PyTorch int8": ["--int8"],
        "ONNX Runtime float32": ["--backend", "onnx"],
        "ONNX Runtime dynamic int8": ["--backend", "onnx", "--int8"],
        "ONNX Runtime per-row int8": ["--backend", "onnx", "--int8", "--int8_mode", "per_row"],
    }
    assert next(iter(rows)) == "PyTorch float32"  # the reference of the others


def test_the_committed_result_renders_its_table(capsys):
    module = backend_bleu()
    result = module.main(["--table"])
    printed = capsys.readouterr().out
    assert printed.strip() == module.table(result)
    lines = [line for line in printed.splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + len(result["models"])
    for backend, _ in module.ROWS:
        assert backend in lines[0]
    for model in result["models"]:
        assert model["label"] in printed and "python training/train.py" in model["training_command"]
        assert model["updates"] > 0 and model["training_test_bleu"] > 0


def test_onnx_runtime_float32_scores_as_pytorch_float32():
    result = json.loads(RESULT.read_text())
    assert len(result["models"]) == 5
    for model in result["models"]:
        rows = {row["backend"]: row for row in model["rows"]}
        assert set(rows) == {backend for backend, _ in backend_bleu().ROWS}, model["label"]
        reference, onnx = rows["PyTorch float32"], rows["ONNX Runtime float32"]
        assert onnx["bleu"] == reference["bleu"] and onnx["chrf"] == reference["chrf"], model["label"]
        assert onnx["lines_differing_from_pytorch"] == 0, model["label"]
