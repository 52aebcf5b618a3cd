#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""CPU generation throughput of one architecture with PyTorch (float32, int8) and ONNX Runtime (float32, int8),
measured side by side in one run on a randomly initialised preset.

Tokens/s counts generated target tokens per input sentence (not per beam); every configuration decodes exactly
`--new-tokens` tokens (min = max), so the work is identical across backends. Prints a table and writes JSON.

    python benchmarks/onnx_inference_speed.py --arch unified_transformer --preset small --threads 2 \
        --output benchmarks/results/onnx_inference_speed.json
"""

import argparse
import functools
import json
import platform
import tempfile
from pathlib import Path

import torch
from bench_timing import median_times
from transformers import AutoModelForSeq2SeqLM

import hf_unified_mt
from hf_unified_mt.deployment.inference import quantize_int8
from hf_unified_mt.deployment.onnx_export import export_onnx
from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM


SETTINGS = {"batch 1 greedy": (1, 1), "batch 16 beam 4": (16, 4)}


def generate(model, input_ids: torch.Tensor, kwargs: dict) -> torch.Tensor:
    return model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="unified_transformer")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for PyTorch and ONNX Runtime alike.")
    parser.add_argument("--source-length", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default=None, help="JSON file for the results.")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = hf_unified_mt.get_config(args.arch, args.preset)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    models = {"torch float32": model, "torch int8": quantize_int8(model)}
    with tempfile.TemporaryDirectory() as folder:
        export_onnx(model, folder, int8=True)
        models["onnx float32"] = ORTModelForSeq2SeqLM.from_pretrained(folder, num_threads=args.threads)
        models["onnx int8"] = ORTModelForSeq2SeqLM.from_pretrained(folder, int8=True, num_threads=args.threads)

    results = {}
    for setting, (batch, beams) in SETTINGS.items():
        ids = torch.randint(4, config.vocab_size, (batch, args.source_length))
        ids[:, -1] = config.eos_token_id
        kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, num_beams=beams, do_sample=False)
        calls = {name: functools.partial(generate, m, ids, kwargs) for name, m in models.items()}
        with torch.inference_mode():
            seconds = median_times(calls, args.repeats)
        results[setting] = {name: batch * args.new_tokens / value for name, value in seconds.items()}

    names = list(models)
    print(f"{args.arch} {args.preset}, {args.threads} threads, tokens/s (median of {args.repeats})")
    print(f"| setting | {' | '.join(names)} |")
    print(f"|---|{'---:|' * len(names)}")
    for setting, speeds in results.items():
        print(f"| {setting} | {' | '.join(f'{speeds[name]:,.0f}' for name in names)} |")
    if args.output:
        record = {
            "arch": args.arch,
            "preset": args.preset,
            "threads": args.threads,
            "source_length": args.source_length,
            "new_tokens": args.new_tokens,
            "repeats": args.repeats,
            "machine": platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "tokens_per_second": results,
        }
        Path(args.output).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
