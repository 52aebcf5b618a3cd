#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Cost of the Multi-Pass Transformer (paper 004) for P = 1, 2, 3 encoder passes, relative to P = 1.

Measures, side by side in one run, (1) one encoder forward and (2) end-to-end `generate()` (encoder once + decoding)
for models with 1, 2 and 3 passes and identical weights (hard connections add no parameters), plus the 3-pass model
translating from its first and second pass (`encoder_pass=`), the cheaper translations the paper offers from the same
weights (§3.2). Every configuration decodes exactly `--new-tokens` tokens (min = max), so decoding work is identical.
Models are timed in turn within every repeat, so load changes on a shared machine hit them alike; medians are
reported.

    python benchmarks/multi_pass_cost.py --preset base --threads 1 --output benchmarks/results/multi_pass_cost.json
"""

import argparse
import json
import platform
import sys
from pathlib import Path

import torch
from bench_timing import median_times

import hf_unified_mt


def build_models(preset: str, vocab_size: int, overrides: dict, device: str) -> dict[str, tuple]:
    """name -> (model, generate/encoder kwargs). All models share the weights of the 3-pass model."""
    torch.manual_seed(0)
    configs = {
        p: hf_unified_mt.get_config("multi_pass_transformer", preset, vocab_size=vocab_size, num_passes=p, **overrides)
        for p in (1, 2, 3)
    }
    models = {p: hf_unified_mt.MultiPassTransformerForConditionalGeneration(config) for p, config in configs.items()}
    for p in (1, 2):
        models[p].load_state_dict(models[3].state_dict(), strict=True)
    for model in models.values():
        model.to(device).eval()
        model.generation_config.forced_eos_token_id = None
    return {
        "P=1": (models[1], {}),
        "P=2": (models[2], {}),
        "P=3": (models[3], {}),
        "P=3, read pass 1": (models[3], {"encoder_pass": 1}),
        "P=3, read pass 2": (models[3], {"encoder_pass": 2}),
    }


def encoder_call(model, kwargs: dict, input_ids, attention_mask):
    return lambda: model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def generate_call(model, kwargs: dict, input_ids):
    return lambda: model.generate(input_ids, **kwargs)


def time_interleaved(calls: dict, repeats: int, device: str) -> dict[str, float]:
    """Median seconds of `repeats` calls of each function, after one warm-up round, timed in turn every round."""
    with torch.inference_mode():
        return median_times(calls, repeats, device)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base", help="multi_pass_transformer preset (default: the paper's base)")
    parser.add_argument(
        "--config-overrides",
        type=json.loads,
        default={},
        help="JSON of config fields, e.g. '{\"hard_connections\": [0, 4, 1, 5, 2, 3]}'",
    )
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--source-length", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (default: torch's). On a shared, busy machine 1 thread is far less noisy.",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results/multi_pass_cost.json"))
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    variants = build_models(args.preset, args.vocab_size, args.config_overrides, args.device)
    config = variants["P=3"][0].config
    rows = []
    for batch_size in args.batch_sizes:
        generator = torch.Generator().manual_seed(batch_size)
        input_ids = torch.randint(4, args.vocab_size, (batch_size, args.source_length), generator=generator)
        input_ids[:, -1] = config.eos_token_id
        input_ids = input_ids.to(args.device)
        attention_mask = torch.ones_like(input_ids)

        seconds = time_interleaved(
            {
                name: encoder_call(model, kwargs, input_ids, attention_mask)
                for name, (model, kwargs) in variants.items()
            },
            args.repeats,
            args.device,
        )
        print(f"encoder, batch {batch_size}: done", file=sys.stderr, flush=True)
        for name in variants:
            rows.append(
                dict(
                    measure="encoder",
                    variant=name,
                    batch_size=batch_size,
                    num_beams=None,
                    seconds=seconds[name],
                    ratio_to_p1=seconds[name] / seconds["P=1"],
                )
            )

        for num_beams in args.beams:
            generate_kwargs = dict(
                attention_mask=attention_mask,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                num_beams=num_beams,
                do_sample=False,
                early_stopping=False,
            )
            seconds = time_interleaved(
                {
                    name: generate_call(model, {**generate_kwargs, **kwargs}, input_ids)
                    for name, (model, kwargs) in variants.items()
                },
                args.repeats,
                args.device,
            )
            print(f"generate, batch {batch_size}, beams {num_beams}: done", file=sys.stderr, flush=True)
            for name in variants:
                rows.append(
                    dict(
                        measure="generate",
                        variant=name,
                        batch_size=batch_size,
                        num_beams=num_beams,
                        seconds=seconds[name],
                        ratio_to_p1=seconds[name] / seconds["P=1"],
                    )
                )

    header = f"{'measure':<9} {'variant':<17} {'batch':>5} {'beams':>5} {'ms':>10} {'vs P=1':>7}"
    print(header)
    print("-" * len(header))
    for row in rows:
        beams = "-" if row["num_beams"] is None else row["num_beams"]
        print(
            f"{row['measure']:<9} {row['variant']:<17} {row['batch_size']:>5} {beams:>5} "
            f"{1000 * row['seconds']:>10.1f} {row['ratio_to_p1']:>7.2f}"
        )

    parameters = {name: sum(p.numel() for p in model.parameters()) for name, (model, _) in variants.items()}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    result = dict(
        benchmark="multi_pass_cost",
        preset=args.preset,
        config_overrides=args.config_overrides,
        vocab_size=args.vocab_size,
        source_length=args.source_length,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        device=args.device,
        parameters=parameters,
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
