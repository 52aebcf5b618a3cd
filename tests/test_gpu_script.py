"""`benchmarks/gpu_training_and_decoding.py --phase arms`: Prime and the same-size MarianMT, eager, compiled and
compiled with CUDA graphs, at two token budgets, in one call under one time budget. Run here on a CPU at tiny size
(the GPU run is one call of the device tool, its command in the script's docstring); no speed is asserted."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mt_checks import ROOT
from test_benchmarks import benchmark_script


SCRIPT = ROOT / "benchmarks" / "gpu_training_and_decoding.py"
TINY = [
    "--device", "cpu", "--preset", "tiny", "--max-pairs", "200", "--vocab-size", "200", "--budgets", "256,512",
    "--length-buckets", "16,32,64", "--steps", "3", "--profiled", "1", "--min-arm-seconds", "1", "--time-budget", "600",
]  # fmt: skip


@pytest.fixture(scope="module")
def script():
    return benchmark_script("gpu_training_and_decoding")


def run_script(*arguments: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(SCRIPT), *arguments]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=environment, timeout=900)


@pytest.mark.subprocess
def test_one_call_runs_every_arm_and_tabulates_it(tmp_path, script):
    output = tmp_path / "arms.json"
    arguments = [*TINY, "--compile-backend", "eager", "--work-dir", str(tmp_path / "work"), "--output", str(output)]
    completed = run_script("--phase", "arms", *arguments)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(output.read_text())
    assert result["complete"] and result["budgets"] == [256, 512] and result["bf16_matmul_peak_tflops"] > 0
    assert result["data"]["budgets"]["256"]["shapes"] == [[8, 16], [4, 32], [2, 64]]
    arms = [(arm["model"], arm["mode"]) for arm in result["arms"]]
    assert arms == [(model, mode) for mode in ("eager", "graphs", "compiled") for model in ("prime", "marian")]
    for arm in result["arms"]:
        if arm["mode"] == "graphs":
            assert arm["status"] == "skipped" and arm["error"] == "no CUDA: CUDA graphs need a GPU"
            continue
        assert arm["status"] == "done" and arm["exit_code"] == 0, arm
        assert set(arm["budgets"]) == {"256", "512"}
        for entry in arm["budgets"].values():
            assert entry["status"] == "done" and entry["timed_updates"] == 3 and entry["shapes"] == 3
            assert entry["tokens_per_second"] > 0 and 0 < entry["mfu_measured_peak"] < 1
            assert 0 < entry["padding_share"] < 1 and math.isfinite(entry["mean_loss"])
            assert entry["kernels_per_step"] > 0 and entry["kernels_counted_by"].startswith("CPU stand-in")
        if arm["mode"] == "compiled":  # one graph per kind of layer (encoder, decoder) for every batch shape
            assert arm["compile"]["graphs_compiled"] == 2 and arm["compile"]["graph_breaks"] == 0, arm["compile"]
            assert arm["compile"]["compile_seconds"] > 0
    prime, marian = (result["arms"][i]["parameters"] for i in (0, 1))
    assert abs(prime / marian - 1) < 0.02
    assert all(best["prime_over_marian"] > 0 for best in result["summary"].values())

    table = run_script("--phase", "table", "--output", str(output))
    assert table.returncode == 0, table.stderr[-3000:]
    assert table.stdout == script.arms_table(result)
    rows = [line for line in table.stdout.splitlines() if line.startswith(("| Prime `tiny` |", "| MarianMT"))]
    assert len(rows) == 2 * 2 * 2 + 2  # eager and compiled at two budgets per model, a row per skipped arm
    assert "skipped: no CUDA: CUDA graphs need a GPU" in table.stdout and "is a stand-in" in table.stdout
    assert "MarianMT, same size, compiled: 2 graphs compiled in " in table.stdout


@pytest.mark.subprocess
def test_a_failing_arm_is_recorded_and_the_next_arm_runs(tmp_path, script):
    output = tmp_path / "arms.json"
    arguments = [*TINY, "--models", "prime", "--modes", "compiled,eager", "--compile-backend", "no_such_backend"]
    completed = run_script("--phase", "arms", *arguments, "--work-dir", str(tmp_path / "work"), "--output", str(output))
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(output.read_text())
    compiled, eager = result["arms"]
    assert compiled["status"] == "failed" and "no_such_backend" in compiled["error"] and compiled["exit_code"] != 0
    assert eager["status"] == "done" and result["complete"]
    assert "| Prime `tiny` | compiled | | | | | | | | | failed: " in script.arms_table(result)


def test_an_arm_past_its_time_is_stopped_with_the_processes_it_started(tmp_path, script):
    started = tmp_path / "worker.pid"
    code = (
        "import subprocess, sys, time; "
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(started)!r}, 'w').write(str(worker.pid)); time.sleep(60)"
    )
    start = time.monotonic()
    returncode, stopped = script.run_with_limit([sys.executable, "-c", code], 3.0)
    assert stopped and returncode != 0 and time.monotonic() - start < 30
    status = Path(f"/proc/{int(started.read_text())}/status")
    assert not status.exists() or "State:\tZ" in status.read_text()  # gone, or a zombie left to be reaped


def test_a_stopped_arm_keeps_the_budgets_it_finished(tmp_path, script, monkeypatch):
    """The arm's process wrote one finished budget and started the next, then outlived its time."""
    record = {
        "model": "prime",
        "mode": "graphs",
        "status": "running",
        "budgets": {"16384": {"status": "done", "tflops_per_second": 50.0}, "65536": {"status": "running"}},
    }
    output = tmp_path / "arm_prime_graphs.json"
    writes = f"import json, time; json.dump({record!r}, open({str(output)!r}, 'w')); time.sleep(60)"
    monkeypatch.setattr(script, "arm_command", lambda *arguments: [sys.executable, "-c", writes])
    args = SimpleNamespace(work_dir=tmp_path, grace_seconds=0.0, spec_peak=1000e12)
    merged = script.run_arm(args, "prime", "graphs", 3.0, 800e12)
    assert merged["status"] == "partial" and "its share of --time-budget" in merged["error"]
    assert merged["budgets"]["65536"]["status"] == "timed out"
    assert merged["budgets"]["16384"]["mfu_measured_peak"] == pytest.approx(50 / 800)
    assert merged["budgets"]["16384"]["mfu_spec_peak"] == pytest.approx(50 / 1000)
    assert script.arm_seconds(100.0, [1.0, 2.0, 2.0]) == pytest.approx(20.0) and script.arm_seconds(-5, [1.0]) == 0


def test_batches_come_in_one_shape_per_bucket_and_hold_every_pair_once(script):
    source = np.array([3, 10, 17, 40, 5, 30, 200, 16])
    target = np.array([4, 12, 15, 33, 20, 2, 5, 17])
    batches = script.bucket_batches(source, target, 128, [16, 32, 64], seed=0)
    assert {(rows, length) for rows, length, _ in batches} == {(4, 16), (2, 32), (1, 64)}
    assert sorted(np.concatenate([pairs for *_, pairs in batches]).tolist()) == [0, 1, 2, 3, 4, 5, 7]  # 6 is too long
    for rows, length, pairs in batches:
        assert 1 <= len(pairs) <= rows and max(source[pairs].max(), target[pairs].max()) <= length
        smaller = [bucket for bucket in (16, 32, 64) if bucket < length]
        assert not smaller or np.maximum(source[pairs], target[pairs]).min() > smaller[-1]  # the shortest that fits

    corpus = {
        "source_ids": np.array([5, 6, 2, 7, 2], dtype=np.int32),
        "source_lengths": np.array([3, 2]),
        "target_ids": np.array([8, 9, 10, 2, 11, 2], dtype=np.int32),
        "target_lengths": np.array([4, 2]),
        "special_ids": np.array([20, 0, 1, 2]),
    }
    corpus["source_offsets"], corpus["target_offsets"] = np.array([0, 3, 5]), np.array([0, 4, 6])
    batch = script.padded_batch(3, 5, np.array([1, 0]), corpus, "cpu")
    tensors = batch["tensors"]
    assert batch["shape"] == (3, 5) and (batch["source_tokens"], batch["target_tokens"]) == (5, 6)
    assert tensors["input_ids"].tolist() == [[7, 2, 0, 0, 0], [5, 6, 2, 0, 0], [2, 0, 0, 0, 0]]  # a pad row: one token
    assert tensors["attention_mask"].tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]
    assert tensors["labels"].tolist() == [[11, 2, -100, -100, -100], [8, 9, 10, 2, -100], [-100] * 5]
    assert tensors["decoder_input_ids"].tolist() == [[1, 11, 0, 0, 0], [1, 8, 9, 10, 0], [1, 0, 0, 0, 0]]
    assert all(tensor.dtype == torch.long for tensor in tensors.values())


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--budgets", "100", "--length-buckets", "16,64"], "--budgets 100 holds no pair of the longest bucket (64"),
        (["--length-buckets", "32,16"], "--length-buckets must increase"),
        (["--modes", "eager,bogus"], "choose each of eager, graphs, compiled at most once"),
        (["--budgets", "16384,0"], "every value must be positive"),
        (["--time-budget", "0"], "--time-budget must be positive"),
    ],
)
def test_bad_arms_options_are_refused_with_the_reason(script, capsys, arguments, message):
    with pytest.raises(SystemExit):
        script.parse_args(["--phase", "arms", *arguments])
    assert message in capsys.readouterr().err


def test_the_arm_phase_is_only_started_by_the_arms_phase(script, capsys):
    with pytest.raises(SystemExit):
        script.parse_args(["--phase", "arm", "--arm", "prime/eager"])
    assert "--phase arm is started by --phase arms" in capsys.readouterr().err
