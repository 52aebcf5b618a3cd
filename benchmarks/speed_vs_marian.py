#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Speed and implementation efficiency of every architecture against a MarianMT of the same parameter count,
side by side in one run (docs/benchmarks.md, "Speed against a same-size MarianMT"): a training step and greedy
decoding at batch 1 and `--decode-batch`, in interleaved rounds; model FLOPs counted on an eager-attention copy give
achieved FLOP/s, and the efficiency column is the architecture's over MarianMT's.

    python benchmarks/speed_vs_marian.py                   # table on stdout, JSON to benchmarks/results/
    python benchmarks/speed_vs_marian.py --archs unified_transformer --repeats 5

(Operator tables of one task, `--profile TASK`, are retired: the tables it wrote stay in `benchmarks/results/profiles/`;
docs/history.md, "Finished studies".)
"""

import argparse
import copy
from pathlib import Path

import torch
from harness import RESULTS, load_check, machine, median_times, synchronize, write_result
from harness.models import batch, build_pair
from torch.utils.flop_counter import FlopCounterMode

import hf_unified_mt
from hf_unified_mt.training.baselines import count_parameters


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", nargs="+", default=list(hf_unified_mt.ARCHITECTURES))
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--train-batch", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--decode-batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="Also time the training step under torch.compile")
    parser.add_argument("--keep-dropout", action="store_true", help="Keep the presets' dropouts (MarianMT: 0.1)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", type=Path, default=RESULTS / "speed_vs_marian.json")
    return parser.parse_args(argv)


def training_call(model, args):
    """One update on a fixed batch (targets: the sources, as lengths are what matters here)."""
    input_ids, mask = batch(args, args.train_batch, model.config.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step():
        model.train()
        loss = model(input_ids=input_ids, attention_mask=mask, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def decoding_call(model, args, size: int):
    input_ids, mask = batch(args, size, model.config.vocab_size)
    kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, num_beams=1, do_sample=False)

    @torch.inference_mode()
    def decode():
        model.eval()
        return model.generate(input_ids, attention_mask=mask, **kwargs)

    return decode


def call_makers(args) -> dict:
    """The timed tasks: name -> function of a model giving the call to time."""
    return {
        "train": lambda m: training_call(m, args),
        "decode_b1": lambda m: decoding_call(m, args, 1),
        "decode_bN": lambda m: decoding_call(m, args, args.decode_batch),
    }


def count_flops(model, make_call) -> int:
    """FLOPs of one call on an eager-attention copy (CPU SDPA kernels are invisible to the FLOP counter)."""
    clone = copy.deepcopy(model)
    clone.set_attn_implementation("eager")
    call = make_call(clone)
    with FlopCounterMode(display=False) as counter:
        call()
    return counter.get_total_flops()


def measure(arch: str, args) -> dict:
    models = build_pair(arch, args)
    tasks = call_makers(args)
    row = dict(
        arch=arch,
        parameters={name: count_parameters(m) for name, m in models.items()},
        marian_ffn_dim=models["marian"].config.encoder_ffn_dim,
    )
    for task, make_call in tasks.items():
        calls = {name: make_call(model) for name, model in models.items()}
        seconds = median_times(calls, args.repeats, args.device)
        flops = {name: count_flops(model, make_call) for name, model in models.items()}
        row[task] = dict(
            seconds=seconds,
            flops=flops,
            speed_vs_marian=seconds["marian"] / seconds[arch],
            flops_per_second={name: flops[name] / seconds[name] for name in models},
            efficiency_vs_marian=(flops[arch] / seconds[arch]) / (flops["marian"] / seconds["marian"]),
        )
    if args.compile:
        # The training step of each model compiled (default Inductor backend) against the same model eager, timed in
        # interleaved rounds after the compiling warm-up round.
        compiled = {name: torch.compile(copy.deepcopy(model)) for name, model in models.items()}
        calls = {f"{name}.eager": training_call(model, args) for name, model in models.items()}
        calls.update({f"{name}.compiled": training_call(model, args) for name, model in compiled.items()})
        seconds = median_times(calls, args.repeats, args.device)
        row["train_compiled"] = dict(
            seconds=seconds,
            compiled_vs_eager={name: seconds[f"{name}.eager"] / seconds[f"{name}.compiled"] for name in models},
        )
    synchronize(args.device)
    return row


def format_table(rows: list[dict], args) -> str:
    lines = [
        f"| architecture (`{args.preset}`) | params | training step | decode batch 1 | decode batch {args.decode_batch}"
        " | FLOP/s eff. train | eff. decode 1 | eff. decode N |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    if args.compile:
        lines[0] += " compiled/eager train (arch) | compiled/eager train (MarianMT) |"
        lines[1] += "---:|---:|"
    for row in rows:
        compiled = row.get("train_compiled", {}).get("compiled_vs_eager", {})
        lines.append(
            f"| {row['arch']} | {row['parameters'][row['arch']] / 1e6:.2f}M | {row['train']['speed_vs_marian']:.2f}× | "
            f"{row['decode_b1']['speed_vs_marian']:.2f}× | {row['decode_bN']['speed_vs_marian']:.2f}× | "
            f"{row['train']['efficiency_vs_marian']:.2f} | {row['decode_b1']['efficiency_vs_marian']:.2f} | "
            f"{row['decode_bN']['efficiency_vs_marian']:.2f} |"
            + (f" {compiled[row['arch']]:.2f}× | {compiled['marian']:.2f}× |" if compiled else "")
        )
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    load = load_check()
    rows = [measure(arch, args) for arch in args.archs]
    table = format_table(rows, args)
    print(table)
    print("(speed: MarianMT's time / the architecture's, > 1 = faster; eff.: achieved FLOP/s over MarianMT's)")
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    record = dict(machine(), load_average_before=load)
    write_result(args.output, dict(settings=settings, machine=record, rows=rows, table=table), argv, indent=1)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
