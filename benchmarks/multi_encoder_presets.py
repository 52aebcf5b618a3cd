#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Cost of each added encoder in the Multi-Encoder Transformer (paper 003 §5.4, Table 8): parameters, peak memory of a
training step, training speed and beam-search generation speed of the Single / Dual / Triple / Quadruple / Quintuple
presets, relative to Single.

Speeds are measured side by side in one run: within every repeat the presets are timed in turn, so that load changes
on a shared machine hit them alike; each figure is the median over repeats, after one warm-up round. The peak memory of
one training step (forward + backward, no optimizer state) is measured in a fresh subprocess per preset: on CUDA with
`torch.cuda.max_memory_allocated`, on CPU as the growth of the peak resident set size over the process's size before
the model was built.

    python benchmarks/multi_encoder_presets.py --output benchmarks/results/multi_encoder_presets.json

The default is the paper's En-Vi size (d 512, 6+6 layers + M=12 / Q=18 / U=6 / V=6) with 4,000-type source and target
vocabularies (separate embeddings, output tied to the target one), on one CPU thread (on a busy machine, several
threads mostly measure contention).
"""

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from bench_timing import synchronize

import hf_unified_mt


ARCH = "multi_encoder_transformer"
PRESETS = ["single", "dual", "triple", "quadruple", "quintuple"]
# Paper 003 Table 8, Sk-En / En-Vi / En-It row: (first figure, parameters in millions). The first figure's header was
# lost in the text extraction (§5.4 "Memory and Inference Cost": memory or time); it is shown for its ratios only.
TABLE_8 = {
    "single": (11.8, 48),
    "dual": (16.7, 61),
    "triple": (26.4, 99),
    "quadruple": (27.6, 109),
    "quintuple": (30.8, 135),
}


def build(preset: str, args) -> torch.nn.Module:
    config = hf_unified_mt.get_config(
        ARCH, preset, vocab_size=args.vocab_size, share_encoder_decoder_embeddings=False, **args.config_overrides
    )
    torch.manual_seed(0)
    model = hf_unified_mt.MultiEncoderTransformerForConditionalGeneration(config).to(args.device)
    model.generation_config.forced_eos_token_id = None
    return model


def make_batch(args):
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(4, args.vocab_size, (args.batch_size, args.source_length), generator=generator)
    target = torch.randint(4, args.vocab_size, (args.batch_size, args.target_length), generator=generator)
    source[:, -1] = target[:, -1] = 2
    return source.to(args.device), torch.ones_like(source), target.to(args.device)


def training_step(model, source, mask, target) -> None:
    model.train()
    model.zero_grad(set_to_none=True)
    model(input_ids=source, attention_mask=mask, labels=target).loss.backward()


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def measure_peak_memory(preset: str, args) -> float:
    """Peak memory (MiB) of building the model and running one training step; runs in this (fresh) process."""
    source, mask, target = make_batch(args)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        model = build(preset, args)
        training_step(model, source, mask, target)
        return torch.cuda.max_memory_allocated() / 2**20
    before = current_rss_bytes()
    model = build(preset, args)
    training_step(model, source, mask, target)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return (peak - before) / 2**20


def peak_memory_in_subprocess(preset: str, argv: list[str]) -> float:
    result = subprocess.run(
        [sys.executable, __file__, *argv, "--measure-memory-of", preset], capture_output=True, text=True, check=True
    )
    return float(result.stdout.strip().splitlines()[-1])


def time_presets(models: dict, args, source, mask, target) -> dict[str, dict[str, float]]:
    """Median seconds of a training step and of a beam-search generate() call per preset."""
    generate_kwargs = dict(
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        num_beams=args.num_beams,
        do_sample=False,
        early_stopping=False,
    )
    times = {name: {"train": [], "generate": []} for name in models}
    for round_index in range(args.repeats + 1):  # round 0 warms up
        for name, model in models.items():
            synchronize(args.device)
            start = time.perf_counter()
            training_step(model, source, mask, target)
            synchronize(args.device)
            train_seconds = time.perf_counter() - start
            model.zero_grad(set_to_none=True)
            model.eval()
            start = time.perf_counter()
            with torch.inference_mode():
                model.generate(source, attention_mask=mask, **generate_kwargs)
            synchronize(args.device)
            if round_index > 0:
                times[name]["train"].append(train_seconds)
                times[name]["generate"].append(time.perf_counter() - start)
    return {name: {kind: statistics.median(values) for kind, values in runs.items()} for name, runs in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument(
        "--config-overrides",
        type=json.loads,
        default={},
        help="JSON of config fields applied to every preset, e.g. '{\"d_model\": 256}'",
    )
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--source-length", type=int, default=24)
    parser.add_argument("--target-length", type=int, default=24)
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results/multi_encoder_presets.json"))
    parser.add_argument("--measure-memory-of", help=argparse.SUPPRESS)  # internal: the subprocess of one preset
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.measure_memory_of:
        print(measure_peak_memory(args.measure_memory_of, args))
        return

    # Peak memory first, one fresh process per preset, before this process holds any model.
    forwarded = list(argv if argv is not None else sys.argv[1:])
    memory = {name: peak_memory_in_subprocess(name, forwarded) for name in args.presets}

    models = {name: build(name, args) for name in args.presets}
    source, mask, target = make_batch(args)
    seconds = time_presets(models, args, source, mask, target)

    rows = []
    tokens_per_step = args.batch_size * (args.source_length + args.target_length)
    for name, model in models.items():
        parameters = sum(p.numel() for p in model.parameters())
        rows.append(
            dict(
                preset=name,
                encoders=model.config.branch_letters,
                parameters=parameters,
                peak_train_memory_mib=memory[name],
                train_step_seconds=seconds[name]["train"],
                train_tokens_per_second=tokens_per_step / seconds[name]["train"],
                generate_seconds=seconds[name]["generate"],
                generate_tokens_per_second=args.batch_size * args.new_tokens / seconds[name]["generate"],
                paper_table8=(
                    dict(first_figure=TABLE_8[name][0], parameters_millions=TABLE_8[name][1])
                    if name in TABLE_8
                    else None
                ),
            )
        )
    reference = next((r for r in rows if r["preset"] == "single"), rows[0])
    for row in rows:
        row["parameters_vs_single"] = row["parameters"] / reference["parameters"]
        row["memory_vs_single"] = row["peak_train_memory_mib"] / reference["peak_train_memory_mib"]
        row["train_speed_vs_single"] = reference["train_step_seconds"] / row["train_step_seconds"]
        row["generate_speed_vs_single"] = reference["generate_seconds"] / row["generate_seconds"]
        if row["paper_table8"] and reference["paper_table8"]:
            paper = row["paper_table8"]
            paper["first_figure_vs_single"] = paper["first_figure"] / TABLE_8["single"][0]
            paper["parameters_vs_single"] = paper["parameters_millions"] / TABLE_8["single"][1]

    header = (
        f"{'preset':<10} {'encoders':<10} {'params':>12} {'x':>5} {'paper':>6} {'peak MiB':>9} {'x':>5} "
        f"{'train tok/s':>11} {'x':>5} {'gen tok/s':>9} {'x':>5} {'paper 1st':>9}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        paper = row["paper_table8"] or {}
        print(
            f"{row['preset']:<10} {row['encoders']:<10} {row['parameters']:>12,} {row['parameters_vs_single']:>5.2f} "
            f"{paper.get('parameters_millions', ''):>5}M {row['peak_train_memory_mib']:>9.0f} "
            f"{row['memory_vs_single']:>5.2f} {row['train_tokens_per_second']:>11.1f} "
            f"{row['train_speed_vs_single']:>5.2f} {row['generate_tokens_per_second']:>9.1f} "
            f"{row['generate_speed_vs_single']:>5.2f} {paper.get('first_figure_vs_single', float('nan')):>9.2f}"
        )
    print("x = relative to single (speeds: >1 faster); 'paper 1st' = Table 8's unlabelled first figure / Single's")

    args.output.parent.mkdir(parents=True, exist_ok=True)
    result = dict(
        benchmark="multi_encoder_presets",
        presets=args.presets,
        config_overrides=args.config_overrides,
        vocab_size=args.vocab_size,
        batch_size=args.batch_size,
        source_length=args.source_length,
        target_length=args.target_length,
        new_tokens=args.new_tokens,
        num_beams=args.num_beams,
        repeats=args.repeats,
        device=args.device,
        threads=args.threads,
        memory_note="peak of building the model + one training step (forward + backward, no optimizer state); "
        "CPU: growth of the peak RSS of a fresh process, CUDA: max_memory_allocated",
        hardware=dict(
            platform=platform.platform(),
            processor=platform.processor(),
            torch=torch.__version__,
            gpu=torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        ),
        rows=rows,
    )
    args.output.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
