#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Generation throughput of the Unified Transformer (fused and unfused projections, paper 000 §3.3.1 / Table 3)
and of a MarianMTModel with the same parameter count, measured side by side in one run.

Prints a table and writes JSON. Tokens/s counts generated target tokens per input sentence (not per beam).
Every configuration decodes exactly `--new-tokens` tokens (min = max), so the work is identical across models.

    python benchmarks/generation_throughput.py --preset base --output benchmarks/results/generation_throughput.json

Paper 000 Table 3 setting (6-layer Prime-simple, d 512, vs a 6-layer Transformer of the same size):

    python benchmarks/generation_throughput.py --preset base-simple --config-overrides \
        '{"d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8, \
          "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048}'
"""

import argparse
import json
import platform
from functools import partial
from pathlib import Path

import torch
from bench_timing import median_times
from transformers import MarianMTModel

import hf_unified_mt
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching


def time_generations(
    models: dict, input_ids, attention_mask, new_tokens: int, num_beams: int, repeats: int, select
) -> dict[str, float]:
    """Median seconds per model of `repeats` timed generate() calls, after one warm-up call each. The models are
    timed in turn within every repeat, so that load changes on a shared machine hit them alike."""
    kwargs = dict(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=num_beams, do_sample=False, early_stopping=False
    )

    def call(name, model):
        select(name)  # sets one config flag: negligible next to generate()
        return model.generate(input_ids, attention_mask=attention_mask, **kwargs)

    with torch.inference_mode():
        return median_times({name: partial(call, name, model) for name, model in models.items()}, repeats)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base", help="Unified Transformer preset (default: the paper's base)")
    parser.add_argument(
        "--config-overrides",
        type=json.loads,
        default={},
        help='JSON of config fields, e.g. \'{"encoder_layers": 6, "use_convolution": false}\'',
    )
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--source-length", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--marian-d-model", type=int, default=512)
    parser.add_argument("--marian-layers", type=int, default=6)
    parser.add_argument("--marian-heads", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results/generation_throughput.json"))
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    unified = hf_unified_mt.UnifiedTransformerForConditionalGeneration(
        hf_unified_mt.get_config(
            "unified_transformer", args.preset, vocab_size=args.vocab_size, **args.config_overrides
        )
    )
    marian = MarianMTModel(
        marian_config_matching(
            count_parameters(unified), args.vocab_size, args.marian_d_model, args.marian_layers, args.marian_heads
        )
    )
    models = {"unified (unfused)": unified, "unified (fused)": unified, "marian (matched)": marian}
    for model in (unified, marian):
        model.to(args.device).eval()
        model.generation_config.forced_eos_token_id = None

    def select_variant(name: str) -> None:
        unified.config.fuse_projections_for_inference = name == "unified (fused)"

    rows = []
    for batch_size in args.batch_sizes:
        generator = torch.Generator().manual_seed(batch_size)
        input_ids = torch.randint(4, args.vocab_size, (batch_size, args.source_length), generator=generator)
        input_ids[:, -1] = 2
        input_ids, attention_mask = input_ids.to(args.device), torch.ones_like(input_ids).to(args.device)
        for num_beams in args.beams:
            seconds = time_generations(
                models, input_ids, attention_mask, args.new_tokens, num_beams, args.repeats, select=select_variant
            )
            for name, model in models.items():
                rows.append(
                    dict(
                        model=name,
                        parameters=count_parameters(model),
                        batch_size=batch_size,
                        num_beams=num_beams,
                        seconds=seconds[name],
                        tokens_per_second=batch_size * args.new_tokens / seconds[name],
                    )
                )
    # Ratios to the unfused Unified Transformer of the same batch/beam setting, measured in this run.
    for row in rows:
        reference = next(
            r
            for r in rows
            if r["model"] == "unified (unfused)"
            and r["batch_size"] == row["batch_size"]
            and r["num_beams"] == row["num_beams"]
        )
        row["speed_vs_unfused"] = row["tokens_per_second"] / reference["tokens_per_second"]

    header = f"{'model':<18} {'params':>11} {'batch':>5} {'beams':>5} {'tokens/s':>10} {'vs unfused':>10}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['model']:<18} {row['parameters']:>11,} {row['batch_size']:>5} {row['num_beams']:>5} "
            f"{row['tokens_per_second']:>10.1f} {row['speed_vs_unfused']:>10.2f}"
        )

    args.output.parent.mkdir(parents=True, exist_ok=True)
    result = dict(
        benchmark="generation_throughput",
        preset=args.preset,
        config_overrides=args.config_overrides,
        vocab_size=args.vocab_size,
        source_length=args.source_length,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        device=args.device,
        hardware=dict(
            platform=platform.platform(),
            processor=platform.processor(),
            torch=torch.__version__,
            threads=torch.get_num_threads(),
            gpu=torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        ),
        rows=rows,
    )
    args.output.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
