#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Where a bf16 training step's time goes on one GPU: Prime (`unified_transformer`, `--preset`) against a MarianMT of
the same width, depth, heads and parameter count, on one fixed batch (`--batch` sentences of `--length` source and
target tokens), forward + backward + AdamW under `torch.autocast(bfloat16)`, as `Seq2SeqTrainer --bf16` runs it.

Per model: wall-clock seconds per step (median of `--steps` after `--warmup` steps), and from `torch.profiler` over
`--profiled` steps the GPU's busy time (the union of kernel intervals), the number of kernels launched per step, and
the kernels taking the most GPU time. A GPU busy for a small share of the wall clock is waiting for the host to
launch work (launch-bound); a busy GPU with low FLOP/s runs inefficient kernels.

    python benchmarks/studies/gpu_step_profile.py --output $OUT/gpu_step_profile.json
"""

import argparse
import statistics
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import torch
from harness import RESULTS, machine, synchronize, write_result
from harness.profiling import busy_seconds
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForSeq2SeqLM, MarianConfig, MarianMTModel

import hf_unified_mt
from hf_unified_mt.presets import MARIAN_COMMON
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--length", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--profiled", type=int, default=3)
    parser.add_argument(
        "--scale", type=int, default=4, help="also time a batch this many times larger (launch-bound: barely slower)"
    )
    parser.add_argument(
        "--cudnn-attention",
        action="store_true",
        help="keep PyTorch's cuDNN backend of scaled_dot_product_attention (off by default: on the H100 with torch "
        "2.11 + CUDA 13 its backward failed with an illegal memory access, `mha_graph.execute(...)`)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", type=Path, default=RESULTS / "gpu_step_profile.json")
    return parser.parse_args(argv)


def build_models(preset: str, vocab_size: int) -> dict:
    config = hf_unified_mt.get_config("unified_transformer", preset, vocab_size=vocab_size)
    torch.manual_seed(0)
    prime = AutoModelForSeq2SeqLM.from_config(config)
    matching = marian_config_matching(
        count_parameters(prime),
        vocab_size,
        d_model=config.d_model,
        layers=config.encoder_layers,
        heads=config.encoder_attention_heads,
    )
    ffn = 8 * round(matching.encoder_ffn_dim / 8)
    marian_values = {**matching.to_dict(), **MARIAN_COMMON, "encoder_ffn_dim": ffn, "decoder_ffn_dim": ffn}
    marian = MarianMTModel(MarianConfig(**marian_values))
    return {"prime": prime, "marian": marian}


def profile_model(name: str, model, args) -> dict:
    device, device_type = args.device, args.device.split(":")[0]
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device_type == "cuda")
    generator = torch.Generator().manual_seed(0)

    def batch_of(sentences: int):
        ids = torch.randint(4, args.vocab_size, (sentences, args.length), generator=generator).to(device)
        labels = torch.randint(4, args.vocab_size, (sentences, args.length), generator=generator).to(device)
        return ids, torch.ones_like(ids), labels

    ids, mask, labels = batch_of(args.scale * args.batch)

    def step():
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    scaled_times = []
    for _ in range(max(3, args.steps // 4)):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        scaled_times.append(time.perf_counter() - start)
    ids, mask, labels = batch_of(args.batch)
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    synchronize(device)
    start = time.perf_counter()
    with profile(activities=activities) as profiler:
        for _ in range(args.profiled):
            step()
        synchronize(device)
    profiled_wall = time.perf_counter() - start
    events = profiler.events()
    kernels = [event for event in events if event.device_type == torch.autograd.DeviceType.CUDA]
    by_name = {}
    for event in kernels:
        by_name[event.name] = by_name.get(event.name, 0.0) + event.device_time / 1e6
    busy = busy_seconds(kernels)
    top = sorted(by_name.items(), key=lambda item: -item[1])[:12]
    model.to("cpu")
    return {
        "model": name,
        "parameters": count_parameters(model),
        "seconds_per_step_median": statistics.median(times),
        f"seconds_per_step_median_batch_x{args.scale}": statistics.median(scaled_times),
        "profiled_seconds_per_step": profiled_wall / args.profiled,
        "gpu_busy_seconds_per_step": busy / args.profiled,
        "gpu_busy_share": busy / profiled_wall if profiled_wall else None,
        "kernels_per_step": len(kernels) / args.profiled,
        "top_kernels_seconds_per_step": {kernel: seconds / args.profiled for kernel, seconds in top},
    }


def table(result: dict) -> str:
    """The markdown table of docs/benchmarks.md, from the JSON."""
    settings = result["settings"]
    scale = settings["scale"]
    lines = [
        f"One bf16 training step (forward, backward, AdamW) on {result['device']}, torch {result['torch']}, a fixed "
        f"batch of {settings['batch']} sentences x {settings['length']} source and target tokens:",
        "",
        f"| model | s/step | s/step, batch x{scale} | GPU busy per step (profiled) | kernels per step |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in (("prime", f"Prime `{settings['preset']}`"), ("marian", "MarianMT, same size")):
        row = result["models"][name]
        lines.append(
            f"| {label} | {row['seconds_per_step_median']:.3f} | {row[f'seconds_per_step_median_batch_x{scale}']:.3f} "
            f"| {row['gpu_busy_seconds_per_step'] * 1e3:.1f} ms | {row['kernels_per_step']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    if args.device.startswith("cuda") and not args.cudnn_attention:
        torch.backends.cuda.enable_cudnn_sdp(False)
    models = build_models(args.preset, args.vocab_size)
    result = {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "settings": {key: str(value) for key, value in vars(args).items()},
        "models": {name: profile_model(name, model, args) for name, model in models.items()},
        "machine": machine(),
    }
    write_result(args.output, result, argv)
    print(table(result))


if __name__ == "__main__":
    main()
