#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Training cost of the ablation study's arms, measured side by side on one machine: seconds per update (forward,
backward, AdamW step) of each arm's model at the study's size, on one fixed batch of the study's shape, in
interleaved rounds, as a ratio to `--reference` (4+4 Prime by default): the study's equal-time arms train the cheaper
arm of a pair for that ratio times the updates (docs/ablation_study.md).

    python benchmarks/training_cost.py                      # stage-4 arms and their controls; table + JSON
    python benchmarks/training_cost.py --arms 000-prime 000-prime-8x8-dsinit --repeats 3
"""

import argparse
import os
import platform
import statistics
from pathlib import Path

import torch
from harness import interleaved_times, write_result
from transformers import AutoModelForSeq2SeqLM

import hf_unified_mt
from hf_unified_mt.analysis import ablation_arms as study_arms
from hf_unified_mt.analysis.provenance import code_version
from hf_unified_mt.training.baselines import count_parameters


HERE = Path(__file__).resolve().parent


def default_arms(size: str = "small") -> list[str]:
    """The stage-4 arms with a preset at `size` and every arm a stage-4 comparison sets them against, in the study's
    order."""
    keys = set()
    for _, control, mechanism, _ in study_arms.COMPARISONS:
        if 4 in (study_arms.ARMS_BY_KEY[control].stage, study_arms.ARMS_BY_KEY[mechanism].stage):
            keys |= {control, mechanism}
    # (an equal-time arm is another arm's network trained longer: its cost per update is measured under that arm)
    return [
        arm.key
        for arm in study_arms.ARMS
        if arm.key in keys and size in arm.presets and arm.same_runs_as is None and arm.equal_time_with is None
    ]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=None, help="study arm keys (default: stage 4 and its controls)")
    parser.add_argument("--reference", default="000-prime", help="the arm the ratios are relative to")
    parser.add_argument("--size", default="small", choices=("tiny", "small", "base"))
    parser.add_argument("--vocab-size", type=int, default=8000, help="the study's BPE vocabulary")
    parser.add_argument("--batch", type=int, default=64, help="sentences per update")
    parser.add_argument("--source-length", type=int, default=36)
    parser.add_argument("--target-length", type=int, default=40)
    parser.add_argument("--updates-per-round", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (after one warm-up round)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "ablations" / "training_cost.json")
    args = parser.parse_args(argv)
    args.arms = args.arms or default_arms(args.size)
    problems = [f"unknown arm {key!r}" for key in args.arms if key not in study_arms.ARMS_BY_KEY]
    problems += [
        f"arm {key!r} has no {args.size!r} preset"
        for key in args.arms
        if key in study_arms.ARMS_BY_KEY and args.size not in study_arms.ARMS_BY_KEY[key].presets
    ]
    problems += [
        f"arm {key!r} is a MarianMT baseline (not timed here)"
        for key in args.arms
        if key in study_arms.ARMS_BY_KEY and study_arms.ARMS_BY_KEY[key].arch == "marian"
    ]
    if args.reference not in args.arms:
        problems.append(f"--reference {args.reference!r} is not among the timed arms")
    for name in ("batch", "source_length", "target_length", "updates_per_round", "repeats", "threads"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be >= 1")
    if problems:
        parser.error("; ".join(problems))
    return args


def build_model(key: str, args):
    """The arm's model exactly as the study trains it (its preset, overrides and dropouts), seeded."""
    arm = study_arms.ARMS_BY_KEY[key]
    config = hf_unified_mt.get_config(arm.arch, arm.presets[args.size], vocab_size=args.vocab_size, **arm.overrides)
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(config)


def update_call(model, args):
    """`updates_per_round` updates on one fixed batch (random tokens of the study's batch shape)."""
    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    source = torch.randint(4, vocab, (args.batch, args.source_length), generator=generator)
    labels = torch.randint(4, vocab, (args.batch, args.target_length), generator=generator)
    source[:, -1] = labels[:, -1] = model.config.eos_token_id
    mask = torch.ones_like(source)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def updates():
        for _ in range(args.updates_per_round):
            model(input_ids=source, attention_mask=mask, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return updates


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    models = {key: build_model(key, args) for key in args.arms}
    calls = {key: update_call(model, args) for key, model in models.items()}
    times = interleaved_times(calls, args.repeats)
    per_update = {key: statistics.median(values) / args.updates_per_round for key, values in times.items()}
    reference = per_update[args.reference]
    rows = [
        dict(
            arm=key,
            label=study_arms.ARMS_BY_KEY[key].label,
            parameters=count_parameters(models[key]),
            seconds_per_update=round(per_update[key], 4),
            ratio=round(per_update[key] / reference, 3),
            # per-round ratios to the reference: their spread is the measurement's noise
            round_ratios=[round(t / r, 3) for t, r in zip(times[key], times[args.reference])],
        )
        for key in args.arms
    ]
    result = dict(
        machine=dict(processor=platform.processor() or platform.machine(), cpus=os.cpu_count()),
        threads=args.threads,
        torch=torch.__version__,
        transformers=__import__("transformers").__version__,
        commit=code_version()["commit"],
        size=args.size,
        batch=dict(sentences=args.batch, source_length=args.source_length, target_length=args.target_length),
        updates_per_round=args.updates_per_round,
        repeats=args.repeats,
        reference=args.reference,
        arms=rows,
    )
    print(f"| arm | parameters | s / update | × {args.reference} |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['arm']} | {row['parameters'] / 1e6:.1f}M | {row['seconds_per_update']:.3f} | {row['ratio']:.2f} |"
        )
    write_result(args.output, result, argv, indent=1)
    print(f"wrote {args.output}")
    return result


if __name__ == "__main__":
    main()
