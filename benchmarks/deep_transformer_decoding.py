#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Decoding and training speed of the deep Transformer's decoder sublayers (paper 001, Table 3): merged attention
(MAtt) and the original AAN against standard self-attention, at the same depth, measured side by side in one run.

Three measurements, each on freshly initialised models of every decoder type (`self`, `aan`, `merged`):

1. `generate()` time per depth (default 6 and 12 layers per stack), batch size (1 and 32) and beam size (4), every
   configuration decoding exactly `--new-tokens` tokens; speed = generated target tokens per second per sentence,
   ratio = speed over `self` of the same setting (the paper: MAtt 1.54x at 6 layers, 1.53x at 12, batch 32, beam 4;
   original AAN 1.35x).
2. Per-step decoding time as the output grows (incremental forward with the cache, batch `--step-batch-size`):
   mean time of the steps just before output lengths 16, 32, 64, 128, 256. `self` attends over all previous
   positions (and appends to its key/value cache), `aan`/`merged` update a running sum: their step time stays flat.
3. Training step time (forward + backward on about `--train-target-tokens` target tokens; the paper: 1K tokens,
   MAtt 1.12x faster).

Models are timed in turn within every repeat (after a warm-up round), so load changes on a shared machine hit them
alike; medians are reported. Prints tables and writes JSON:

    python benchmarks/deep_transformer_decoding.py --output benchmarks/results/deep_transformer_decoding.json
    python benchmarks/deep_transformer_decoding.py --preset big --depths 6 --device cuda
"""

import argparse
import json
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
from bench_timing import interleaved_times, synchronize

import hf_unified_mt
from hf_unified_mt.modeling_mt_common import CACHE_FIELD
from hf_unified_mt.training.baselines import count_parameters


TYPES = ("self", "aan", "merged")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def build_models(args, depth: int) -> dict[str, torch.nn.Module]:
    models = {}
    for decoder_attention_type in TYPES:
        config = hf_unified_mt.get_config(
            "deep_transformer",
            args.preset,
            vocab_size=args.vocab_size,
            encoder_layers=depth,
            decoder_layers=depth,
            decoder_attention_type=decoder_attention_type,
            **args.config_overrides,
        )
        torch.manual_seed(0)
        model = hf_unified_mt.DeepTransformerForConditionalGeneration(config).to(args.device).eval()
        model.generation_config.forced_eos_token_id = None
        models[decoder_attention_type] = model
    return models


def source_batch(args, batch_size: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, args.vocab_size, (batch_size, length), generator=generator)
    ids[:, -1] = 2
    return ids.to(args.device), torch.ones_like(ids).to(args.device)


def timed_rounds(models: dict, run, repeats: int, device: str) -> dict[str, list[float]]:
    """Seconds of `run(model)` for every model in each of `repeats` rounds, after a warm-up round. Within a round the
    models run back to back, so that per-round ratios cancel slow changes of the machine's speed."""
    return interleaved_times({name: partial(run, model) for name, model in models.items()}, repeats, device)


def speedups(times: dict[str, list[float]]) -> dict[str, float]:
    """Median over rounds of (time of `self`) / (time of the model) in the same round."""
    return {name: statistics.median(s / t for s, t in zip(times["self"], values)) for name, values in times.items()}


def time_generate(args, models, batch_size: int) -> list[dict]:
    ids, mask = source_batch(args, batch_size, args.source_length, seed=batch_size)
    kwargs = dict(
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        num_beams=args.num_beams,
        do_sample=False,
        early_stopping=False,
    )
    with torch.inference_mode():
        times = timed_rounds(
            models, lambda m: m.generate(ids, attention_mask=mask, **kwargs), args.repeats, args.device
        )
    ratios = speedups(times)
    rows = []
    for name, values in times.items():
        seconds = statistics.median(values)
        rows.append(
            dict(
                decoder_attention_type=name,
                batch_size=batch_size,
                num_beams=args.num_beams,
                seconds=seconds,
                tokens_per_second=batch_size * args.new_tokens / seconds,
                speedup_vs_self=ratios[name],
            )
        )
    return rows


def step_profiles(models: dict, ids, mask, steps: int, device: str) -> dict[str, list[float]]:
    """Seconds of each incremental decoding step (greedy tokens, encoder excluded) of every model. The models decode
    in lockstep (step t of each model, then step t + 1), so that they see the same machine speed at every length."""
    times = {name: [] for name in models}
    with torch.inference_mode():
        states = {}
        for name, model in models.items():
            start_tokens = torch.full((ids.shape[0], 1), model.config.decoder_start_token_id, device=ids.device)
            states[name] = (model.get_encoder()(input_ids=ids, attention_mask=mask), start_tokens, None)
        for _ in range(steps):
            for name, model in models.items():
                encoder_outputs, tokens, cache = states[name]
                synchronize(device)
                start = time.perf_counter()
                out = model(
                    encoder_outputs=encoder_outputs,
                    attention_mask=mask,
                    decoder_input_ids=tokens,
                    cache=cache,
                    use_cache=True,
                )
                tokens = out.logits[:, -1].argmax(-1, keepdim=True)
                synchronize(device)
                times[name].append(time.perf_counter() - start)
                states[name] = (encoder_outputs, tokens, getattr(out, CACHE_FIELD))
    return times


def time_steps(args, models) -> list[dict]:
    """Mean step time over the 8 steps before each output length in `args.step_lengths`, median over rounds; growth
    = last window / first window, and the ratio to `self` per window, both per round then median."""
    ids, mask = source_batch(args, args.step_batch_size, args.source_length, seed=7)
    lengths = args.step_lengths
    windows = {name: [] for name in models}  # per round: {length: seconds}
    for round_index in range(args.repeats + 1):
        profiles = step_profiles(models, ids, mask, max(lengths), args.device)
        if round_index == 0:
            continue  # warm-up
        for name, times in profiles.items():
            windows[name].append({n: statistics.mean(times[max(0, n - 8) : n]) for n in lengths})
    rows = []
    for name, runs in windows.items():
        rows.append(
            dict(
                decoder_attention_type=name,
                batch_size=args.step_batch_size,
                ms_per_step={str(n): 1000 * statistics.median(run[n] for run in runs) for n in lengths},
                speedup_vs_self={
                    str(n): statistics.median(s[n] / r[n] for s, r in zip(windows["self"], runs)) for n in lengths
                },
                growth=statistics.median(run[max(lengths)] / run[min(lengths)] for run in runs),
            )
        )
    return rows


def time_training(args, models) -> list[dict]:
    sentences = max(1, args.train_target_tokens // args.source_length)
    ids, mask = source_batch(args, sentences, args.source_length, seed=11)
    labels, _ = source_batch(args, sentences, args.source_length, seed=12)

    def step(model):
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()

    for model in models.values():
        model.train()
    times = timed_rounds(models, step, args.repeats, args.device)
    for model in models.values():
        model.zero_grad(set_to_none=True)
        model.eval()
    ratios = speedups(times)
    return [
        dict(
            decoder_attention_type=name,
            target_tokens=int(labels.numel()),
            seconds=statistics.median(values),
            speedup_vs_self=ratios[name],
        )
        for name, values in times.items()
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base", help="deep_transformer preset giving the width (default: base)")
    parser.add_argument(
        "--config-overrides", type=json.loads, default={}, help="JSON of config fields applied to every model"
    )
    parser.add_argument("--depths", type=int, nargs="+", default=[6, 12], help="Layers per stack")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--source-length", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--step-batch-size", type=int, default=32)
    parser.add_argument("--step-lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--step-depth", type=int, default=6, help="Depth of the per-step profile")
    parser.add_argument("--train-target-tokens", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results/deep_transformer_decoding.json"))
    args = parser.parse_args(argv)

    generate_rows, training_rows, parameters, step_rows = [], [], {}, []
    for depth in args.depths:
        models = build_models(args, depth)
        parameters[depth] = {name: count_parameters(model) for name, model in models.items()}
        for batch_size in args.batch_sizes:
            generate_rows += [dict(depth=depth, **row) for row in time_generate(args, models, batch_size)]
            log(f"generate: depth {depth}, batch {batch_size} done")
        training_rows += [dict(depth=depth, **row) for row in time_training(args, models)]
        log(f"training: depth {depth} done")
        if depth == args.step_depth:
            step_rows = time_steps(args, models)
            log("step profile done")
        del models
    if not step_rows:
        step_rows = time_steps(args, build_models(args, args.step_depth))

    print(
        f"generate(): {args.new_tokens} new tokens, beam {args.num_beams}, source length {args.source_length}, "
        f"preset {args.preset}, device {args.device}"
    )
    header = f"{'depth':>5} {'decoder':>7} {'params':>12} {'batch':>5} {'tokens/s':>10} {'vs self':>8}"
    print(header + "\n" + "-" * len(header))
    for row in generate_rows:
        name = row["decoder_attention_type"]
        print(
            f"{row['depth']:>5} {name:>7} {parameters[row['depth']][name]:>12,} {row['batch_size']:>5} "
            f"{row['tokens_per_second']:>10.1f} {row['speedup_vs_self']:>8.2f}"
        )

    print(f"\ntraining step (forward + backward, {training_rows[0]['target_tokens']} target tokens)")
    header = f"{'depth':>5} {'decoder':>7} {'seconds':>9} {'vs self':>8}"
    print(header + "\n" + "-" * len(header))
    for row in training_rows:
        name = row["decoder_attention_type"]
        print(f"{row['depth']:>5} {name:>7} {row['seconds']:>9.4f} {row['speedup_vs_self']:>8.2f}")

    print(
        f"\nms per decoding step near output length ({args.step_depth} layers, batch {args.step_batch_size}, greedy; "
        "in brackets: speed-up over self)"
    )
    header = f"{'decoder':>7} " + " ".join(f"{length:>15}" for length in args.step_lengths) + f" {'growth':>7}"
    print(header + "\n" + "-" * len(header))
    for row in step_rows:
        cells = [f"{ms:>7.2f} ({row['speedup_vs_self'][n]:>4.2f}x)" for n, ms in row["ms_per_step"].items()]
        print(f"{row['decoder_attention_type']:>7} " + " ".join(cells) + f" {row['growth']:>7.2f}")

    args.output.parent.mkdir(parents=True, exist_ok=True)
    result = dict(
        benchmark="deep_transformer_decoding",
        preset=args.preset,
        config_overrides=args.config_overrides,
        vocab_size=args.vocab_size,
        source_length=args.source_length,
        new_tokens=args.new_tokens,
        num_beams=args.num_beams,
        repeats=args.repeats,
        device=args.device,
        hardware=dict(
            platform=platform.platform(),
            processor=platform.processor(),
            torch=torch.__version__,
            threads=torch.get_num_threads(),
            gpu=torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
        ),
        parameters={str(depth): counts for depth, counts in parameters.items()},
        generate=generate_rows,
        training=training_rows,
        step_profile=step_rows,
    )
    args.output.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
