#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""CPU inference speed of every architecture against CTranslate2 running a MarianMT of the same size, side by side in
one run (what it measures and how to read it: docs/deployment.md and docs/history.md, "Deployment").

For the main job's model and every architecture's `--preset`, a same-size `MarianMTModel` is converted to CTranslate2
float32 and int8; on one fixed batch every backend decodes exactly `--new-tokens` tokens at batch 1 greedy and at
`--batch-size` (and `--throughput-batch-size`) with `--beams` beams, on `--threads` threads, in interleaved rounds.
Backends: ours in PyTorch float32 and int8 and in ONNX Runtime (`harness.backends`; its int8 dynamic and per row), the
MarianMT in PyTorch and in CTranslate2. Random weights; needs the `bench` extra (CTranslate2). With `--runs N` the whole
interleaved measurement runs N times back to back (the same models, fresh rounds), and the headline cells are the
median over the runs with their range.

    python benchmarks/inference_vs_ctranslate2.py            # table on stdout, JSON to benchmarks/results/
    python benchmarks/inference_vs_ctranslate2.py --runs 3   # three runs back to back: medians and ranges
    python benchmarks/inference_vs_ctranslate2.py --quick    # tiny models, 1 round: checks that everything runs
    python benchmarks/inference_vs_ctranslate2.py --summary  # the deployment tables of the JSON at --output

(Where decoding time goes, `--profile`, is retired: its results and table stay, `benchmarks/studies/tables.py
decoding_profiles`; docs/history.md, "Finished studies".)
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
from harness import RESULTS, busy, interleaved_times, load_check, machine, read_result, write_result
from harness.backends import (
    ONNX_BACKENDS,
    GenerateFn,
    compiled_backend,
    convert_to_ctranslate2,
    ctranslate2_backend,
    onnx_backends,
    torch_backend,
)
from harness.models import build_models, source_batch, subjects
from transformers.utils import logging as transformers_logging

import hf_unified_mt
from hf_unified_mt.deployment.inference import quantize_int8
from hf_unified_mt.training.baselines import count_parameters


REFERENCE = "marian/ct2-int8"  # the backend every ratio is taken against
# With --threads above 1, our fastest backend and CTranslate2 int8 also run on one thread (backend name + ONE_THREAD):
# on the 2-core machine of the README, CTranslate2 int8 decodes up to 10x faster on one thread than on two at batch 1,
# so a comparison at two threads only would measure its threading, not its decoding (docs/deployment.md).
ONE_THREAD = "-1thread"
BEFORE = "pytorch-fp32"  # what a user ran before the ONNX backend
# the fastest backend now: the first of these a result JSON holds (results before the search graphs hold no graph rows)
AFTERS = ("onnx-graph-int8", "onnx-native-int8", "onnx-int8")
PER_ROW = "onnx-graph-int8-per-row"  # int8 whose translations do not depend on the batch (results since issue 64)
# `--quick`: tiny models and short sequences, one round; for the test that the script runs end to end.
QUICK = dict(preset="tiny", vocab_size=300, source_length=8, new_tokens=4, batch_size=4, beams=2, repeats=1)
QUICK.update(main_job_d_model=32, throughput_batch_size=6)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=list(hf_unified_mt.ARCHITECTURES))
    parser.add_argument("--preset", default="small")
    parser.add_argument("--no-main-job", action="store_true", help="Leave out the main job's model")
    parser.add_argument("--vocab-size", type=int, default=4000, help="Vocabulary of the `--preset` models")
    parser.add_argument("--source-length", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16, help="Batch of the beam-search setting")
    parser.add_argument("--beams", type=int, default=4, help="Beams of the beam-search setting")
    parser.add_argument("--throughput-batch-size", type=int, default=64, help="Batch of a third setting (0: none)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1, help="Whole measurements back to back; medians and ranges")
    parser.add_argument("--quick", action="store_true", help=f"Tiny everything, one round: {QUICK}")
    parser.add_argument("--compile", action="store_true", help="Add the decoding step under torch.compile")
    parser.add_argument("--summary", action="store_true", help="Print the deployment tables of the JSON at --output")
    parser.add_argument("--compare-runs", nargs="+", metavar="JSON", help="Print how these runs agree, per cell")
    parser.add_argument("--workdir", type=Path, help="Keep the saved and converted MarianMT models here")
    parser.add_argument("--output", type=Path, default=RESULTS / "inference_vs_ctranslate2.json")
    args = parser.parse_args(argv)
    args.main_job_d_model = None
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    for name in ("source_length", "new_tokens", "batch_size", "beams", "repeats", "threads", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.throughput_batch_size < 0:
        parser.error("--throughput-batch-size must be at least 0")
    unknown = sorted(set(args.archs) - set(hf_unified_mt.ARCHITECTURES))
    if unknown:
        parser.error(f"unknown architecture(s) {unknown}; known: {list(hf_unified_mt.ARCHITECTURES)}")
    # What `speed_vs_marian.build_pair` reads besides the preset and vocabulary.
    args.keep_dropout, args.device = False, "cpu"
    return args


# ---------------------------------------------------------------------------------------------------- timing


def int8_gemm_peak(threads: int, size: int = 1024, repeats: int = 10) -> float | None:
    """Multiply-adds per second of ONNX Runtime's int8 matrix product (`MatMulInteger`, uint8 x int8 -> int32, the
    kernel its dynamically quantised matmuls run) on `size`^3, `threads` threads, the best of `repeats` after two
    warm-ups: this machine's int8 limit, against which a backend's achieved multiply-adds are read. None without
    ONNX Runtime."""
    try:
        import numpy as np
        import onnx
        import onnxruntime
        from onnx import TensorProto, helper
    except ImportError:
        return None
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
        "int8_gemm",
        [
            helper.make_tensor_value_info("a", TensorProto.UINT8, [size, size]),
            helper.make_tensor_value_info("b", TensorProto.INT8, [size, size]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [size, size])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    session = onnxruntime.InferenceSession(
        onnx.shape_inference.infer_shapes(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    generator = np.random.default_rng(0)
    feeds = dict(
        a=generator.integers(0, 256, (size, size), dtype=np.uint8),
        b=generator.integers(-128, 128, (size, size), dtype=np.int8),
    )
    for _ in range(2):
        session.run(None, feeds)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feeds)
        best = min(best, time.perf_counter() - start)
    return size**3 / best


def multiply_adds(model: torch.nn.Module, input_ids, attention_mask, beams: int, new_tokens: int) -> int:
    """Multiply-adds of one `generate()` call of the PyTorch model on this workload (matrix products, counted by
    `torch.utils.flop_counter`): the work every backend of this model does for the call (the ONNX encoder's sliding-
    window convolution does a little less than the band matrix counted here)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        torch_backend(model, new_tokens)(input_ids, attention_mask, beams)
    return counter.get_total_flops() // 2


def settings_of(args) -> dict[str, dict]:
    """The decoding settings: batch 1 greedy, batch `--batch-size` with `--beams` beams, and (unless 0) batch
    `--throughput-batch-size` with `--beams` beams."""
    settings = {
        "greedy_b1": dict(batch=1, beams=1),
        f"beam{args.beams}_b{args.batch_size}": dict(batch=args.batch_size, beams=args.beams),
    }
    if args.throughput_batch_size:
        settings[f"beam{args.beams}_b{args.throughput_batch_size}"] = dict(
            batch=args.throughput_batch_size, beams=args.beams
        )
    return settings


def check_lengths(name: str, output, batch: int, new_tokens: int) -> None:
    """Every backend must decode exactly `new_tokens` tokens for every sentence, or tokens/s would compare unequal
    work."""
    if isinstance(output, torch.Tensor):
        lengths = {output.shape[1] - 1}  # generate() returns the decoder start token too
        rows = output.shape[0]
    elif isinstance(output, list):  # CTranslate2 TranslationResults
        lengths = {len(result.hypotheses[0]) for result in output}
        rows = len(output)
    else:
        return
    if lengths != {new_tokens} or rows != batch:
        raise RuntimeError(f"{name} decoded {rows} sentences of {sorted(lengths)} tokens, not {batch} of {new_tokens}")


def fastest_backend(names) -> str | None:
    """Our fastest backend now: the first of `AFTERS` among `names` (backends measured, or a setting's results)."""
    return next((name for name in AFTERS if name in names), None)


def one_thread_backends(
    ct2_int8: Path, vocab: int, backends: dict, new_tokens: int, onnx_folder: Path
) -> dict[str, GenerateFn]:
    """CTranslate2 int8 and our fastest backend (the first of `AFTERS` measured, exported in `onnx_folder`) again,
    on one thread."""
    found = {REFERENCE + ONE_THREAD: ctranslate2_backend(ct2_int8, vocab, 1, new_tokens)}
    ours = fastest_backend(backends)
    if ours is not None:
        from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM

        int8, options = ONNX_BACKENDS[ours]
        model = ORTModelForSeq2SeqLM.from_pretrained(onnx_folder, int8=int8, num_threads=1, **options)
        found[ours + ONE_THREAD] = torch_backend(model, new_tokens)
    return found


def best_against_best(times: dict[str, list[float]], tokens: int) -> dict | None:
    """Our fastest int8 backend against CTranslate2 int8, each on the thread count (`--threads` or one) on which it
    was faster (median seconds), and the median over rounds of CTranslate2's time over ours: what a user who tunes
    both for this machine gets. None when either side was not measured."""
    ours = fastest_backend(times)
    if ours is None or REFERENCE not in times:
        return None

    def fastest(name: str) -> str:
        candidates = [candidate for candidate in (name, name + ONE_THREAD) if candidate in times]
        return min(candidates, key=lambda candidate: statistics.median(times[candidate]))

    ours, theirs = fastest(ours), fastest(REFERENCE)
    return dict(
        ours=ours,
        ct2=theirs,
        ours_tokens_per_second=tokens / statistics.median(times[ours]),
        ct2_tokens_per_second=tokens / statistics.median(times[theirs]),
        vs_ct2_int8=statistics.median(r / s for r, s in zip(times[theirs], times[ours])),
    )


def measure_subject(subject: dict, args, workdir: Path, int8_peak: float | None = None) -> dict:
    """Tokens/s of every backend for one model and its same-size MarianMT, at both settings, in interleaved rounds,
    with the multiply-adds each achieved per second and, given `int8_peak`, their share of it."""
    model, marian = build_models(subject, args)
    vocab = marian.config.vocab_size
    converted = convert_to_ctranslate2(marian, workdir / subject["name"].replace(" ", "_").strip("()"))
    # a folder per model: the main job's and Prime `small` are both unified_transformer
    onnx_folder = workdir / "onnx" / subject["name"].replace(" ", "_").strip("()")
    backends = {
        "pytorch-fp32": torch_backend(model, args.new_tokens),
        **({"pytorch-fp32-compiled": compiled_backend(model, args.new_tokens)} if args.compile else {}),
        "pytorch-int8": torch_backend(quantize_int8(model), args.new_tokens),
        **onnx_backends(model, onnx_folder, args.threads, args.new_tokens),
        "marian/pytorch-fp32": torch_backend(marian, args.new_tokens),
        "marian/ct2-fp32": ctranslate2_backend(converted["float32"], vocab, args.threads, args.new_tokens),
        REFERENCE: ctranslate2_backend(converted["int8"], vocab, args.threads, args.new_tokens),
    }
    if args.threads > 1:
        backends.update(one_thread_backends(converted["int8"], vocab, backends, args.new_tokens, onnx_folder))
    row = dict(
        name=subject["name"],
        arch=subject["arch"],
        preset=subject["preset"],
        config_overrides=subject["overrides"],
        parameters=count_parameters(model),
        marian_parameters=count_parameters(marian),
        marian_ffn_dim=marian.config.encoder_ffn_dim,
        settings={},
        best_against_best={},
        compiled_equals_eager={},
        multiply_adds_per_call={},
    )
    for setting, spec in settings_of(args).items():
        input_ids, attention_mask = source_batch(args, spec["batch"], model.config.vocab_size)
        calls, outputs = {}, {}
        for name, generate in backends.items():
            outputs[name] = generate(input_ids, attention_mask, spec["beams"])
            check_lengths(name, outputs[name], spec["batch"], args.new_tokens)
            calls[name] = partial(generate, input_ids, attention_mask, spec["beams"])
        if "pytorch-fp32-compiled" in outputs:
            same = torch.equal(outputs["pytorch-fp32-compiled"], outputs["pytorch-fp32"])
            row["compiled_equals_eager"][setting] = same
            if not same:
                print(
                    f"note: {subject['name']}, {setting}: compiled decoding gives other ids than eager", file=sys.stderr
                )
        work = {
            "model": multiply_adds(model, input_ids, attention_mask, spec["beams"], args.new_tokens),
            "marian": multiply_adds(marian, input_ids, attention_mask, spec["beams"], args.new_tokens),
        }
        times = interleaved_times(calls, args.repeats)
        tokens = spec["batch"] * args.new_tokens
        row["settings"][setting] = {
            name: dict(
                seconds=statistics.median(seconds),
                tokens_per_second=tokens / statistics.median(seconds),
                vs_ct2_int8=statistics.median(r / s for r, s in zip(times[REFERENCE], seconds)),
                multiply_adds_per_second=work["marian" if name.startswith("marian/") else "model"]
                / statistics.median(seconds),
                rounds=seconds,
            )
            for name, seconds in times.items()
        }
        for result in row["settings"][setting].values():
            if int8_peak:
                result["share_of_int8_peak"] = result["multiply_adds_per_second"] / int8_peak
        row["multiply_adds_per_call"][setting] = work
        row["best_against_best"][setting] = best_against_best(times, tokens)
        print(f"  {subject['name']}, {setting}: done", file=sys.stderr)
    return row


def table_head(header: str, rule: str, cells: list[str]) -> list[str]:
    """A markdown table's header and rule: the first columns (`header`, `rule`), then a setting's `cells` each
    (numbers, aligned right)."""
    return [header + "".join(cells), rule + "".join("---:|" * cell.count("|") for cell in cells)]


def format_table(rows: list[dict], args) -> str:
    """Markdown: one row per model and backend, tokens/s and the ratio to CTranslate2 int8 for each setting."""
    names = list(settings_of(args))
    cells = [f" {name} tok/s | × ct2-int8 | of int8 peak |" for name in names]
    lines = table_head("| model | backend | params |", "|---|---|---:|", cells)
    for row in rows:
        for backend in row["settings"][names[0]]:
            params = row["marian_parameters"] if backend.startswith("marian/") else row["parameters"]
            line = f"| {row['name']} | {backend} | {params / 1e6:.2f}M |"
            for setting in names:
                result = row["settings"][setting][backend]
                share = result.get("share_of_int8_peak")
                line += f" {result['tokens_per_second']:,.0f} | {result['vs_ct2_int8']:.2f} |"
                line += f" {share:.1%} |" if share is not None else " - |"
            lines.append(line)
    return "\n".join(lines)


def setting_label(setting: str) -> str:
    """`greedy_b1` -> `batch 1 greedy`, `beam4_b16` -> `beam 4 batch 16`."""
    return setting.replace("greedy_b1", "batch 1 greedy").replace("_b", " batch ").replace("beam", "beam ")


def compared(row: dict, setting: str) -> tuple[str, str, float]:
    """(our backend, CTranslate2's, CTranslate2's time over ours) that the deployment tables compare: each side on its
    faster thread count where the run measured both (`best_against_best`), else our fastest backend and
    CTranslate2 int8 on `--threads` (JSONs before that)."""
    best = row.get("best_against_best", {}).get(setting)
    if best is None:
        ours = fastest_backend(row["settings"][setting])
        return ours, REFERENCE, row["settings"][setting][ours]["vs_ct2_int8"]
    return best["ours"], best["ct2"], best["vs_ct2_int8"]


def per_round_ratio(reference: dict, result: dict) -> float:
    """The median over rounds of `reference`'s time over `result`'s (two backends' results of one setting)."""
    return statistics.median(r / s for r, s in zip(reference["rounds"], result["rounds"]))


def headline_cells(row: dict, setting: str) -> dict:
    """What the deployment tables show of one run's model at one setting: our backend and CTranslate2's
    (`compared`), the tokens/s of both and of PyTorch float32 (before), the ratios of before and after to that
    CTranslate2 configuration, the shares of the int8 peak where measured, and, where the run has it, per-row int8
    (on `--threads`) against the same CTranslate2 configuration."""
    results = row["settings"][setting]
    ours, theirs, ratio = compared(row, setting)
    cells = dict(
        ours=ours,
        ct2=theirs,
        before_tokens_per_second=results[BEFORE]["tokens_per_second"],
        ours_tokens_per_second=results[ours]["tokens_per_second"],
        ct2_tokens_per_second=results[theirs]["tokens_per_second"],
        # before's ratio to the same CTranslate2 configuration as after's, per round
        before_vs_ct2_int8=per_round_ratio(results[theirs], results[BEFORE]),
        vs_ct2_int8=ratio,
    )
    if "share_of_int8_peak" in results[ours]:
        cells.update(
            ours_share_of_int8_peak=results[ours]["share_of_int8_peak"],
            ct2_share_of_int8_peak=results[theirs]["share_of_int8_peak"],
        )
    if PER_ROW in results:
        cells.update(
            per_row_tokens_per_second=results[PER_ROW]["tokens_per_second"],
            per_row_vs_ct2_int8=per_round_ratio(results[theirs], results[PER_ROW]),
        )
    return cells


def spread(values: list[float]) -> dict:
    """The median of `values` and their range."""
    return dict(median=statistics.median(values), min=min(values), max=max(values))


def run_medians(runs: list[list[dict]]) -> list[dict]:
    """The headline cells (`headline_cells`) of several runs' rows (the same models in each): per model and setting,
    each number's median over the runs with its range (`spread`), and each run's backend and CTranslate2
    configuration (`ours`, `ct2`: lists, one entry per run). Settings without an int8 backend of ours (no ONNX
    Runtime) have no headline and are left out."""
    medians = []
    for index, row in enumerate(runs[0]):
        settings = {}
        for setting in row["settings"]:
            if any(fastest_backend(run[index]["settings"][setting]) is None for run in runs):
                continue
            cells = [headline_cells(run[index], setting) for run in runs]
            entry = dict(ours=[cell["ours"] for cell in cells], ct2=[cell["ct2"] for cell in cells])
            for key in cells[0].keys() - entry.keys():
                if all(key in cell for cell in cells):
                    entry[key] = spread([cell[key] for cell in cells])
            settings[setting] = dict(sorted(entry.items()))
        medians.append(dict(name=row["name"], settings=settings))
    return medians


def summary_rows(document: dict) -> list[tuple[str, dict]]:
    """(model, its headline cells by setting) of a result JSON: one run's (`headline_cells`), or, for a JSON of
    several runs (`--runs`), their medians and ranges (`run_medians`)."""
    if "runs" in document:
        return [(row["name"], row["settings"]) for row in document["medians"]]
    return [
        (row["name"], {setting: headline_cells(row, setting) for setting in row["settings"]})
        for row in document["rows"]
    ]


def median_of(cell) -> float:
    """A headline number: one run's, or the median of several (`spread`)."""
    return cell["median"] if isinstance(cell, dict) else cell


def ratio_text(cell) -> str:
    """A ratio as the tables print it: `0.96`, or over several runs `0.96 (0.91-1.02)` (median, range)."""
    if isinstance(cell, dict):
        return f"{cell['median']:.2f} ({cell['min']:.2f}-{cell['max']:.2f})"
    return f"{cell:.2f}"


def one_thread(configuration) -> str:
    """`¹` where a backend (one run's name, or several runs' names) ran on one thread."""
    names = [configuration] if isinstance(configuration, str) else configuration
    return "¹" if any(name.endswith(ONE_THREAD) for name in names) else ""


def summary_table(document: dict) -> str:
    """The deployment table from a result JSON: per model and setting, tokens/s of PyTorch float32 `generate()`
    (before: the only backend) and of our fastest int8 backend (after), each with its ratio to CTranslate2 int8
    running the same-size MarianMT (the configuration `compared` picks), all from the same run; ¹ marks a figure
    measured on one thread. Of a JSON of several runs: the median tokens/s, and each ratio as its median with its
    range over the runs; ¹ marks a figure measured on one thread in at least one run."""
    rows = summary_rows(document)
    names = list(rows[0][1])
    cells = [f" {setting_label(name)}: before → after, tokens/s | × CT2 int8 |" for name in names]
    lines = table_head("| model |", "|---|", cells)
    marked = False
    for model, settings in rows:
        line = f"| {model} |"
        for setting in names:
            cell = settings[setting]
            mark_ours, mark_theirs = one_thread(cell["ours"]), one_thread(cell["ct2"])
            marked = marked or bool(mark_ours or mark_theirs)
            line += (
                f" {median_of(cell['before_tokens_per_second']):,.0f} →"
                f" {median_of(cell['ours_tokens_per_second']):,.0f}{mark_ours}"
                f" (CT2 int8: {median_of(cell['ct2_tokens_per_second']):,.0f}{mark_theirs}) |"
                f" {ratio_text(cell['before_vs_ct2_int8'])} → **{ratio_text(cell['vs_ct2_int8'])}** |"
            )
        lines.append(line)
    if marked:
        threads = document["settings"]["threads"]
        where = " in at least one run" if "runs" in document else ""
        lines.append(
            f"\n¹ on one thread{where}, faster than on {threads} for that backend there; unmarked figures ran on "
            f"{threads}."
        )
    if "runs" in document:
        lines.append(
            f"\nMedians over {len(document['runs'])} runs back to back; ratios with their range over the runs "
            "(min-max)."
        )
    return "\n".join(lines)


def int8_peak_text(document: dict) -> str | None:
    """The int8 GEMM peak of a result JSON in G multiply-adds/s: one run's, or the median and range of several; None
    where it was not measured."""
    if "runs" in document:
        peaks = [run["int8_gemm_peak_multiply_adds_per_second"] for run in document["runs"]]
        if not all(peaks):
            return None
        peak = spread([value / 1e9 for value in peaks])
        return f"{peak['median']:.0f} ({peak['min']:.0f}-{peak['max']:.0f})"
    peak = document.get("int8_gemm_peak_multiply_adds_per_second")
    return f"{peak / 1e9:.0f}" if peak else None


def limit_table(document: dict) -> str:
    """The second deployment table: per model and setting, the share of this machine's int8 GEMM peak (measured in the
    same run) that our fastest backend and CTranslate2 int8 achieve in multiply-adds per second (the configurations
    `compared` picks); over several runs, the medians."""
    rows = summary_rows(document)
    names = list(rows[0][1])
    lines = [
        f"Share of the int8 GEMM peak ({int8_peak_text(document)} G multiply-adds/s, ONNX Runtime `MatMulInteger`, "
        "measured in the same run) that each achieves:",
        "",
        *table_head("| model |", "|---|", [f" {setting_label(name)}: ours / CT2 int8 |" for name in names]),
    ]
    for model, settings in rows:
        line = f"| {model} |"
        for setting in names:
            cell = settings[setting]
            line += (
                f" {median_of(cell['ours_share_of_int8_peak']):.1%} / {median_of(cell['ct2_share_of_int8_peak']):.1%} |"
            )
        lines.append(line)
    return "\n".join(lines)


def per_row_table(document: dict) -> str | None:
    """Per-row int8 (ONNX Runtime, search graphs, on `--threads`: translations independent of the batch) against the
    same CTranslate2 configuration as the deployment table, per model and setting: tokens/s and CTranslate2's time over
    its (median over rounds; over several runs, the median and range). None for results without it."""
    rows = summary_rows(document)
    names = list(rows[0][1])
    if not all("per_row_tokens_per_second" in cell for _, settings in rows for cell in settings.values()):
        return None
    cells = [f" {setting_label(name)}: per-row int8 tokens/s | × CT2 int8 |" for name in names]
    lines = table_head("| model |", "|---|", cells)
    for model, settings in rows:
        line = f"| {model} |"
        for setting in names:
            cell = settings[setting]
            line += (
                f" {median_of(cell['per_row_tokens_per_second']):,.0f} (CT2 int8:"
                f" {median_of(cell['ct2_tokens_per_second']):,.0f}{one_thread(cell['ct2'])}) |"
                f" {ratio_text(cell['per_row_vs_ct2_int8'])} |"
            )
        lines.append(line)
    return "\n".join(lines)


def single_runs(documents: list[dict]) -> list[dict]:
    """The runs of result JSONs, in order: a JSON of several runs (`--runs`) gives each of its runs."""
    return [run for document in documents for run in document.get("runs", [document])]


def runs_table(documents: list[dict]) -> str:
    """How two or more runs of the benchmark agree (a JSON of several runs counts as its runs): per model and setting,
    each run's ratio to CTranslate2 int8 (the configuration `compared` picks), and the last run's ratio over the
    first's, with how much each side's own tokens/s moved between them (ours, CTranslate2's); where every run has
    per-row int8, its ratio to the same CTranslate2 configuration per run as well."""
    documents = single_runs(documents)
    first, last = documents[0], documents[-1]
    names = list(first["rows"][0]["settings"])
    per_row = all(
        PER_ROW in setting for document in documents for row in document["rows"] for setting in row["settings"].values()
    )
    cells = [f" {setting_label(name)}: × CT2 int8 per run | last / first (ours, CT2) |" for name in names]
    if per_row:
        cells += [f" {setting_label(name)}: per-row int8 × CT2 int8 per run |" for name in names]
    lines = table_head("| model |", "|---|", cells)
    for index, row in enumerate(first["rows"]):
        line = f"| {row['name']} |"
        for setting in names:
            ratios = [compared(document["rows"][index], setting)[2] for document in documents]
            moved = []
            for side in (0, 1):
                speeds = [
                    document["rows"][index]["settings"][setting][compared(document["rows"][index], setting)[side]]
                    for document in (first, last)
                ]
                moved.append(speeds[1]["tokens_per_second"] / speeds[0]["tokens_per_second"])
            line += f" {', '.join(f'{ratio:.2f}' for ratio in ratios)} |"
            line += f" {ratios[-1] / ratios[0]:.2f} ({moved[0]:.2f}, {moved[1]:.2f}) |"
        if per_row:
            for setting in names:
                ratios = [
                    headline_cells(document["rows"][index], setting)["per_row_vs_ct2_int8"] for document in documents
                ]
                line += f" {', '.join(f'{ratio:.2f}' for ratio in ratios)} |"
        lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- main


def measure_run(args, workdir: Path) -> dict:
    """One whole interleaved measurement: this machine's int8 GEMM peak, then every model (`subjects`) built afresh
    (the same seeded weights in every run) and timed at every setting (`measure_subject`); the table printed. The
    run's `rows`, `table` and `int8_gemm_peak_multiply_adds_per_second`."""
    int8_peak = int8_gemm_peak(args.threads)
    if int8_peak:
        print(f"int8 GEMM peak (ONNX Runtime MatMulInteger): {int8_peak / 1e9:.1f} G multiply-adds/s")
    rows = [measure_subject(subject, args, workdir, int8_peak) for subject in subjects(args)]
    table = format_table(rows, args)
    print(table)
    print(
        f"(tokens/s: generated tokens per source sentence; × ct2-int8: {REFERENCE}'s time over the backend's, "
        "median over rounds, > 1 = faster)"
    )
    return dict(rows=rows, table=table, int8_gemm_peak_multiply_adds_per_second=int8_peak)


def main(argv=None):
    args = parse_args(argv)
    if args.compare_runs:
        print(runs_table([read_result(path) for path in args.compare_runs]))
        return
    if args.summary:
        document = read_result(args.output)
        print(summary_table(document))
        if int8_peak_text(document):
            print()
            print(limit_table(document))
        per_row = per_row_table(document)
        if per_row:
            print()
            print(per_row)
        return
    torch.set_num_threads(args.threads)
    transformers_logging.disable_progress_bar()  # saving and reloading the MarianMT for the converter
    load_before = load_check()
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or Path(scratch)
        for index in range(args.runs):
            if args.runs > 1:
                print(f"run {index + 1} of {args.runs}", file=sys.stderr)
            runs.append(measure_run(args, workdir))
    load_after = os.getloadavg()[0]
    record = machine(packages=("ctranslate2", "onnxruntime"))
    record.update(
        ctranslate2_threads=dict(intra_threads=args.threads, inter_threads=1),
        load_average_before=load_before,
        load_average_after=load_after,
    )
    machine_busy = busy(load_before) or busy(load_after - args.threads)  # during the run, our own threads add load
    if machine_busy:
        print(
            f"note: the machine was busy (load average {load_before:.2f} before, {load_after:.2f} after): "
            "absolute numbers are not valid results",
            file=sys.stderr,
        )
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    output = args.output
    document = dict(settings=settings, machine=record, machine_busy=machine_busy)
    if args.runs == 1:
        document.update(runs[0])
    else:
        document.update(runs=runs, medians=run_medians([run["rows"] for run in runs]))
        print(summary_table(document))
    write_result(output, document, argv, indent=1)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
