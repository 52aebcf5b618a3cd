#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Speed and implementation efficiency of every architecture against a MarianMT of the same parameter count,
measured side by side in one run.

For each architecture (its `small` preset, or `--preset`), a `MarianMTModel` of the same width and depth whose FFN
width is solved to match the parameter count; both are timed in interleaved rounds on
* a training step (forward, backward, Adam step) on one fixed batch of `--train-batch` × `--source-length` tokens,
* greedy decoding of exactly `--new-tokens` tokens at batch 1 and `--decode-batch`.
Model FLOPs are counted once per measured call with `torch.utils.flop_counter.FlopCounterMode` (on an eager-attention
copy, so that every model's attention is counted the same way), giving achieved FLOP/s; the efficiency column is
the architecture's achieved FLOP/s over MarianMT's (≥ 0.9 means it wastes no more than 10% over MarianMT even where
it does more work, as MUTE's units or MPT's passes do).

    python benchmarks/speed_vs_marian.py                   # table on stdout, JSON to benchmarks/results/
    python benchmarks/speed_vs_marian.py --archs unified_transformer --repeats 5
"""

import argparse
import copy
import json
import platform
from pathlib import Path

import torch
from bench_timing import median_times, synchronize
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSeq2SeqLM, MarianMTModel

import hf_unified_mt
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching


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
    parser.add_argument(
        "--compile",
        action="store_true",
        help="Also time each model's training step under torch.compile against eager (adds columns)",
    )
    parser.add_argument(
        "--keep-dropout",
        action="store_true",
        help="Keep each preset's dropouts in training (MarianMT: dropout 0.1) instead of none for all",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "speed_vs_marian.json")
    return parser.parse_args(argv)


def switch_off_dropout(config) -> None:
    """Every dropout probability of the config (the papers' attention, activation, kernel and branch dropouts besides
    `dropout`) set to 0, as for the MarianMT: the comparison times the architectures' compute, not a recipe's random
    masks (which the FLOP counter does not count; see `--keep-dropout`)."""
    for name, value in config.to_dict().items():
        if name.endswith("dropout") and isinstance(value, float):
            setattr(config, name, 0.0)
    for spec in getattr(config, "encoder_branches", None) or []:
        if "dropout" in spec:
            spec["dropout"] = 0.0


def build_pair(arch: str, args, overrides: dict | None = None):
    """The architecture's model and a MarianMT of the same width, depth and parameter count (FFN width solved);
    `overrides` are config fields set on top of the preset (e.g. the main job's narrower shape)."""
    config = hf_unified_mt.get_config(arch, args.preset, vocab_size=args.vocab_size, **(overrides or {}))
    if not args.keep_dropout:
        switch_off_dropout(config)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config)
    marian_config = marian_config_matching(
        count_parameters(model),
        args.vocab_size,
        d_model=config.d_model,
        layers=config.encoder_layers,
        heads=config.encoder_attention_heads,
        dropout=0.1 if args.keep_dropout else 0.0,
    )
    marian = MarianMTModel(marian_config)
    return {arch: model.to(args.device), "marian": marian.to(args.device)}


def batch(args, size: int, vocab: int):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, vocab, (size, args.source_length), generator=generator)
    ids[:, -1] = 2  # </s>
    return ids.to(args.device), torch.ones_like(ids)


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
    tasks = {
        "train": lambda m: training_call(m, args),
        "decode_b1": lambda m: decoding_call(m, args, 1),
        "decode_bN": lambda m: decoding_call(m, args, args.decode_batch),
    }
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
        f"| architecture (`{args.preset}`) | params | training step | decode batch 1 "
        f"| decode batch {args.decode_batch} "
        "| FLOP/s eff. train | eff. decode 1 | eff. decode N |",
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
    rows = [measure(arch, args) for arch in args.archs]
    table = format_table(rows, args)
    print(table)
    print("(speed: MarianMT's time / the architecture's, > 1 = faster; eff.: achieved FLOP/s over MarianMT's)")
    hardware = dict(
        platform=platform.platform(),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        device=args.device,
        gpu=torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    args.output.write_text(json.dumps(dict(settings=settings, hardware=hardware, rows=rows, table=table), indent=1))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
