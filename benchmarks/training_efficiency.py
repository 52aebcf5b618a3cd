#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""How close a CPU training step comes to this machine's limit, in float32 and under bfloat16 autocast: the
matrix-product peak per precision, then one training step (forward, backward, AdamW) on one fixed batch of the main
job's shape for the main job's model, Prime `small` and a same-size MarianMT beside each, in interleaved rounds; model
FLOPs from `torch.utils.flop_counter` on an eager-attention copy (docs/benchmarks.md, "Training on CPU").

    python benchmarks/training_efficiency.py                  # table on stdout, JSON to benchmarks/results/
    python benchmarks/training_efficiency.py --table          # the table of docs/benchmarks.md from the JSON

(The step by operator, `--profile`, and the step with each of its speed-ups undone, `--changes`, are retired: their
results and tables stay, `benchmarks/studies/tables.py training_step_profile`; docs/history.md, "Finished studies".)
"""

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch
from harness import RESULTS, interleaved_times, machine, main_job_settings, matmul_peak, read_result, write_result
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSeq2SeqLM, MarianMTModel

import hf_unified_mt
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gemm-size", type=int, default=1024)
    parser.add_argument("--max-tokens", type=int, default=2500, help="padded source + target tokens per batch")
    parser.add_argument("--length", type=int, default=32, help="tokens per row, each side")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=["main_job", "small"], choices=["main_job", "small", "tiny"])
    parser.add_argument("--table", action="store_true", help="print the docs table of the committed JSON and stop")
    parser.add_argument("--output", type=Path, default=RESULTS / "training_efficiency.json")
    return parser.parse_args(argv)


def gemm_peaks(size: int) -> dict[str, float]:
    return {"float32": matmul_peak(torch.float32, size), "bfloat16": matmul_peak(torch.bfloat16, size)}


def prime_config(name: str):
    """The Prime config of `name`: the README main job's (its preset and overrides), `small`, or `tiny` (tests)."""
    if name == "main_job":
        recipe, overrides = main_job_settings()
        return hf_unified_mt.get_config(
            recipe["arch"], recipe["preset"], vocab_size=recipe["tokenizer_vocab_size"], **overrides
        )
    return hf_unified_mt.get_config("unified_transformer", name, vocab_size=8000 if name == "small" else 99)


def build_models(name: str) -> dict:
    """Prime and the MarianMT of the same width, depth, heads and parameter count, seeded, dropout as configured."""
    config = prime_config(name)
    torch.manual_seed(0)
    prime = AutoModelForSeq2SeqLM.from_config(config)
    size = dict(d_model=config.d_model, layers=config.encoder_layers, heads=config.encoder_attention_heads)
    marian = MarianMTModel(marian_config_matching(count_parameters(prime), config.vocab_size, **size))
    return {f"{name}/prime": prime, f"{name}/marian": marian}


def random_batch(vocab: int, rows: int, source: int, target: int, generator: torch.Generator) -> dict:
    """`rows` random sources of `source` ids and labels of `target` ids, unpadded."""
    ids = torch.randint(4, vocab, (rows, source), generator=generator)
    labels = torch.randint(4, vocab, (rows, target), generator=generator)
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)


def fixed_batch(vocab_size: int, args) -> dict:
    rows = max(1, args.max_tokens // (2 * args.length))
    return random_batch(vocab_size, rows, args.length, args.length, torch.Generator().manual_seed(0))


def train_on(model, optimizer, batches: list, bf16: bool) -> None:
    """One update per batch: forward, backward, optimizer step, under bf16 autocast or in float32."""
    for batch in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def training_step(model, batch: dict, bf16: bool):
    """One update: forward, backward, AdamW (the Trainer's optimizer), under bf16 autocast or in float32."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    return lambda: train_on(model, optimizer, [batch], bf16)


def step_flops(model, batch: dict) -> int:
    """Model FLOPs of one forward + backward on an eager-attention copy (the optimizer's are negligible)."""
    clone = copy.deepcopy(model)
    clone.set_attn_implementation("eager")
    with FlopCounterMode(display=False) as counter:
        clone(**batch).loss.backward()
    return counter.get_total_flops()


def shape_cost(args, name: str = "main_job", steps: int = 24) -> dict:
    """Seconds per step of `name`'s Prime model on one fixed batch shape (`--length` tokens each side) against `steps`
    batches of other shapes (about the same padded tokens each, lengths 20-43 and 33-44 as a run's token-budget batches
    have), then those shapes again, in float32 and bfloat16: what a run's many batch shapes cost each precision."""
    torch.manual_seed(0)
    prime = AutoModelForSeq2SeqLM.from_config(prime_config(name))  # (no MarianMT here)
    optimizer = torch.optim.AdamW(prime.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)

    def make(rows: int, source: int, target: int) -> dict:
        return random_batch(prime.config.vocab_size, rows, source, target, generator)

    rows = max(1, args.max_tokens // (2 * args.length))
    fixed = [make(rows, args.length, args.length) for _ in range(steps)]
    shapes = [(20 + i, 44 - i // 2) for i in range(steps)]  # distinct (source, target) lengths
    varied = [make(max(1, args.max_tokens // (s + t)), s, t) for s, t in shapes]
    prime.train()

    def seconds_per_step(batches: list, bf16: bool) -> float:
        start = time.perf_counter()
        train_on(prime, optimizer, batches, bf16)
        return (time.perf_counter() - start) / len(batches)

    result = {}
    for precision, bf16 in (("float32", False), ("bfloat16", True)):
        seconds_per_step(fixed[:1], bf16)  # warm-up of the fixed shape
        result[precision] = {
            "fixed_shape": seconds_per_step(fixed[1:], bf16),
            "new_shapes": seconds_per_step(varied, bf16),
            "same_shapes_again": seconds_per_step(varied, bf16),
        }
    return result


def measure(args) -> dict:
    torch.set_num_threads(args.threads)
    peaks = gemm_peaks(args.gemm_size)
    rows, calls = {}, {}
    for name in args.models:
        for key, model in build_models(name).items():
            batch = fixed_batch(model.config.vocab_size, args)
            flops = step_flops(model, batch)
            rows[key] = {"parameters": count_parameters(model), "flops_per_step": flops}
            for precision, bf16 in (("float32", False), ("bfloat16", True)):
                calls[f"{key}/{precision}"] = training_step(model, batch, bf16)
    times = interleaved_times(calls, args.repeats)
    for call, values in times.items():
        key, precision = call.rsplit("/", 1)
        seconds = statistics.median(values)
        achieved = rows[key]["flops_per_step"] / seconds
        rows[key][precision] = {
            "seconds_per_step": seconds,
            "rounds": values,
            "gflops_per_second": achieved / 1e9,
            "share_of_peak": achieved / peaks[precision],
        }
    for row in rows.values():
        row["bf16_speedup"] = row["float32"]["seconds_per_step"] / row["bfloat16"]["seconds_per_step"]
    new_shapes = shape_cost(args, args.models[0])
    return {
        "new_shapes": {"model": args.models[0], **new_shapes},
        "machine": machine(threads=args.threads),
        "settings": {"max_tokens": args.max_tokens, "length": args.length, "repeats": args.repeats},
        "gemm_peak_gflops": {precision: value / 1e9 for precision, value in peaks.items()},
        "models": rows,
    }


LABELS = {"main_job": "main job (Prime 3+3, d 192)", "small": "Prime `small` (4+4, d 256)", "tiny": "Prime `tiny`"}


def table(result: dict) -> str:
    peaks = result["gemm_peak_gflops"]
    lines = [
        f"One training step on a fixed batch of {result['settings']['max_tokens']} padded tokens (rows of "
        f"{result['settings']['length']} + {result['settings']['length']}); GEMM peak float32 {peaks['float32']:.0f} "
        f"GFLOP/s, bfloat16 {peaks['bfloat16']:.0f} GFLOP/s; {result['machine']['threads']} threads, torch "
        f"{result['machine']['versions']['torch']}.",
        "",
        "| model | parameters | fp32 s/step | fp32 GFLOP/s (share of peak) | bf16 s/step "
        "| bf16 GFLOP/s (share of peak) | bf16 speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, row in result["models"].items():
        name, kind = key.split("/")
        label = LABELS[name] if kind == "prime" else f"MarianMT, same size as {LABELS[name].split(' (')[0]}"
        fp32, bf16 = row["float32"], row["bfloat16"]
        lines.append(
            f"| {label} | {row['parameters'] / 1e6:.2f}M | {fp32['seconds_per_step']:.3f} | "
            f"{fp32['gflops_per_second']:.0f} ({fp32['share_of_peak']:.0%}) | {bf16['seconds_per_step']:.3f} | "
            f"{bf16['gflops_per_second']:.0f} ({bf16['share_of_peak']:.0%}) | {row['bf16_speedup']:.2f}x |"
        )
    shapes = result.get("new_shapes")
    if shapes:
        label = LABELS[shapes["model"]].split(" (")[0]
        lines += [
            "",
            f"Seconds per step of the {label}'s model on one batch shape, on batches of shapes it has not seen before "
            "(about the same tokens each), and on those shapes again:",
            "",
            "| precision | one shape | new shapes | the same shapes again |",
            "|---|---:|---:|---:|",
        ]
        for precision in ("float32", "bfloat16"):
            row = shapes[precision]
            lines.append(
                f"| {precision} | {row['fixed_shape']:.3f} | {row['new_shapes']:.3f} | {row['same_shapes_again']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        print(table(read_result(args.output)), end="")
        return
    result = measure(args)
    write_result(args.output, result, argv)
    print(table(result), end="")


if __name__ == "__main__":
    main()
