#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Where an architecture spends time that a same-size MarianMT does not: `torch.profiler` operator tables of the
same calls `speed_vs_marian.py` times (a training step, or greedy decoding at batch 1 / `--decode-batch`), for the
architecture and its matched MarianMT side by side, every dropout off in both.

    python benchmarks/profile_vs_marian.py --arch multi_unit_transformer --task train
    python benchmarks/profile_vs_marian.py --arch unified_transformer --task decode_b1 --output profile.txt
"""

import argparse
import sys
from pathlib import Path

import speed_vs_marian as bench
import torch


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--task", choices=["train", "decode_b1", "decode_bN"], default="train")
    parser.add_argument("--rows", type=int, default=15, help="Operators per table (by self CPU time)")
    parser.add_argument("--calls", type=int, default=3, help="Profiled calls, after two warm-up calls")
    parser.add_argument("--output", type=Path, help="Also write the tables to this file")
    args, rest = parser.parse_known_args(argv)
    settings = bench.parse_args(["--archs", args.arch, "--output", "/dev/null", *rest])
    if settings.device == "cpu":
        torch.set_num_threads(settings.threads)
    models = bench.build_pair(args.arch, settings)
    make_call = {
        "train": lambda m: bench.training_call(m, settings),
        "decode_b1": lambda m: bench.decoding_call(m, settings, 1),
        "decode_bN": lambda m: bench.decoding_call(m, settings, settings.decode_batch),
    }[args.task]
    sections = []
    for name, model in models.items():
        call = make_call(model)
        for _ in range(2):
            call()
        with torch.profiler.profile() as profile:
            for _ in range(args.calls):
                call()
        averages = profile.key_averages()
        total_ms = sum(event.self_cpu_time_total for event in averages) / 1e3 / args.calls
        table = averages.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=50)
        sections.append(
            f"== {name}: {args.task}, {total_ms:.1f} ms of operator time per call ({settings.threads} threads)\n{table}"
        )
    text = "\n".join(sections)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
