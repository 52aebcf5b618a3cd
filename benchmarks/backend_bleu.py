#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Test BLEU of trained models under every decoding backend of `training/score.py`: each row of `ROWS` scores the
first 400 test verses with beam 4 in a fresh `score.py` process (BLEU, chrF, their signature, the process's seconds:
loading, any int8 quantisation, translating and scoring), and counts the translations that differ from the PyTorch
float32 row's. Each model is exported to ONNX once (`python -m hf_unified_mt.deployment.onnx_export`), into a
temporary folder that every ONNX Runtime row reads (each int8 mode quantises its graphs there on first use). Each
model's training command, updates and own test BLEU (its `results.json`) are recorded beside its rows.

    python benchmarks/backend_bleu.py unified_transformer=outputs/default \
        deep_transformer=outputs/bleu_deep_transformer --train-command \
        "unified_transformer=python training/train.py training/configs/cpu_default.yaml"
    python benchmarks/backend_bleu.py --table          # the table of the committed JSON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, also when a test loads this file by its path

from harness import RESULTS, ROOT, add_result_arguments, load_check, machine, print_table, write_result


RESULT = RESULTS / "backend_bleu.json"
SCORE = ROOT / "training" / "score.py"
MAX_SAMPLES, NUM_BEAMS = 400, 4
# (backend, score.py options): one row each; the first is the reference the others are compared with
ROWS = (
    ("PyTorch float32", []),
    ("PyTorch int8", ["--int8"]),
    ("ONNX Runtime float32", ["--backend", "onnx"]),
    ("ONNX Runtime dynamic int8", ["--backend", "onnx", "--int8"]),
    ("ONNX Runtime per-row int8", ["--backend", "onnx", "--int8", "--int8_mode", "per_row"]),
)


def labelled(pairs: list[str], what: str) -> dict[str, str]:
    """`LABEL=VALUE` arguments as a dict."""
    if any("=" not in pair for pair in pairs):
        raise SystemExit(f"backend_bleu.py: error: {what} must be LABEL=VALUE")
    return dict(pair.split("=", 1) for pair in pairs)


def run(command: list[str], threads: int) -> tuple[subprocess.CompletedProcess, float]:
    """A process on `threads` threads, its output captured, and its seconds."""
    start = time.perf_counter()
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=environment)
    return done, round(time.perf_counter() - start, 1)


def messages(done: subprocess.CompletedProcess) -> list[str]:
    """What the process printed on stderr, each line once: warnings in normal use, or the error."""
    return list(dict.fromkeys(line.strip() for line in done.stderr.splitlines() if line.strip()))


def score(model: str, options: list[str], output_dir: Path, threads: int) -> tuple[dict, list[str] | None]:
    """One row: `score.py` on the test verses with `options`; its scores and seconds, and its translations (None if
    it failed: the row then holds the error)."""
    command = [sys.executable, str(SCORE), model, "--max_samples", str(MAX_SAMPLES), "--num_beams", str(NUM_BEAMS)]
    command += ["--output_dir", str(output_dir), "--no_progress", "--threads", str(threads), *options]
    done, seconds = run(command, threads)
    row = {"options": options, "seconds": seconds, "stderr": messages(done)}
    if done.returncode != 0:
        return {**row, "error": (row["stderr"] or [f"exit status {done.returncode}"])[-1]}, None
    scores = json.loads((output_dir / "eval_test.json").read_text())
    # one translation per "\n"-ended line (splitlines would also split at the Unicode line separators)
    hypotheses = (output_dir / "hypotheses_test.txt").read_text(encoding="utf-8").removesuffix("\n").split("\n")
    scored = {"bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2), "signature": scores["bleu_signature"]}
    return {**scored, **row}, hypotheses


def training_record(model_dir: Path) -> dict:
    """The model's updates (`trainer_state.json`) and its own test BLEU (`results.json`)."""
    results = json.loads((model_dir / "results.json").read_text())
    state = model_dir / "trainer_state.json"
    updates = json.loads(state.read_text())["global_step"] if state.is_file() else None
    return {"arch": results.get("arch"), "updates": updates, "training_test_bleu": round(results["test"]["bleu"], 2)}


def measure_model(label: str, model_dir: str, command: str | None, threads: int, work: Path) -> dict:
    """Every row of `ROWS` for one model, after one ONNX export shared by the ONNX Runtime rows."""
    record = {"label": label, "model_dir": model_dir, "training_command": command, **training_record(Path(model_dir))}
    export = work / label / "onnx"
    if any("onnx" in options for _, options in ROWS):
        module = "hf_unified_mt.deployment.onnx_export"
        done, record["export_seconds"] = run([sys.executable, "-m", module, model_dir, str(export)], threads)
        if done.returncode != 0:
            raise SystemExit(f"backend_bleu.py: the export of {model_dir} failed: {messages(done)[-1:]}")
    record["rows"], reference = [], None
    for index, (backend, options) in enumerate(ROWS):
        model = str(export) if "onnx" in options else model_dir
        row, hypotheses = score(model, options, work / label / backend.replace(" ", "_"), threads)
        reference = hypotheses if index == 0 else reference
        if hypotheses is not None:
            differing = None if reference is None else sum(a != b for a, b in zip(hypotheses, reference, strict=True))
            row["lines_differing_from_pytorch"] = differing
        record["rows"].append({"backend": backend, **row})
        print(f"{label} | {backend}: {row.get('bleu', row.get('error'))} ({row['seconds']} s)", flush=True)
    return record


def table(result: dict) -> str:
    """One markdown table: a model per line, a backend per column: BLEU (Δ vs PyTorch float32; lines differing)."""
    backends = list(dict.fromkeys(row["backend"] for model in result["models"] for row in model["rows"]))
    lines = [
        "| model (updates; its test BLEU) | " + " | ".join(backends) + " |",
        "|---|" + "---:|" * len(backends),
    ]
    for model in result["models"]:
        rows = {row["backend"]: row for row in model["rows"]}
        reference = rows[backends[0]].get("bleu")
        cells = []
        for backend in backends:
            row = rows.get(backend, {"error": "not run"})
            if "bleu" not in row:
                cells.append(f"failed: {row['error']}")
            else:
                delta = "?" if reference is None else f"{row['bleu'] - reference:+.2f}"
                differing = row["lines_differing_from_pytorch"]
                cells.append(f"{row['bleu']:.2f} ({delta}; {'?' if differing is None else differing})")
        name = f"{model['label']} ({model['updates']}; {model['training_test_bleu']:.2f})"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append(
        f"\nBLEU on the first {result['max_samples']} test verses, beam {result['num_beams']} (Δ vs "
        f"{backends[0]}; translations differing from it, of {result['max_samples']})."
    )
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help="LABEL=MODEL_DIR: a trained model (training/train.py's output)")
    parser.add_argument("--train-command", action="append", default=[], help="LABEL=COMMAND that trained it")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every score.py process")
    parser.add_argument("--note", default=None, help="a note to record with the result")
    add_result_arguments(parser, RESULT)
    return parser.parse_intermixed_args(argv)  # models and --train-command in any order


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.table:
        return print_table(args.output, table)
    if not args.models:
        raise SystemExit("backend_bleu.py: error: give at least one LABEL=MODEL_DIR")
    models, commands = labelled(args.models, "a model"), labelled(args.train_command, "--train-command")
    load = load_check()
    result = {
        "what": "test BLEU of each trained model under every backend of training/score.py",
        "command": f"python training/score.py MODEL --max_samples {MAX_SAMPLES} --num_beams {NUM_BEAMS} [OPTIONS]",
        "max_samples": MAX_SAMPLES,
        "num_beams": NUM_BEAMS,
        "machine": dict(machine(threads=args.threads), load_average_before=load),
        "note": args.note,
    }
    with tempfile.TemporaryDirectory(prefix="backend_bleu_") as work:
        result["models"] = [
            measure_model(label, path, commands.get(label), args.threads, Path(work)) for label, path in models.items()
        ]
    write_result(args.output, result, argv, indent=1)
    print(table(result))
    return result


if __name__ == "__main__":
    main()
