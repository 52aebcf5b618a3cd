#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""What each paper's mechanism costs against its own reference, measured side by side in one run: one command per
paper, each writing `benchmarks/results/<measure>.json` and printing its tables (`--table`: the tables of the JSON).
What each measures, against which figure of its paper: docs/benchmarks.md, "What each paper's mechanism costs".

* `generation_throughput` (paper 000, Table 3): `generate()` with fused and unfused projections, a same-size MarianMT;
* `deep_transformer_decoding` (paper 001, Table 3): MAtt and AAN against self-attention: `generate()`, each decoding
  step as the output grows, a training step;
* `multi_unit_speed` (paper 002 §5.7): 1-6 units, batched and looped, beam search on real sentences, CPU time;
* `multi_encoder_presets` (paper 003, Table 8): parameters, peak memory of a training step (a process per preset),
  training and beam-search speed of the Single to Quintuple presets;
* `multi_pass_cost` (paper 004): 1, 2, 3 passes of identical weights, and the 3-pass model read from passes 1 and 2.

Every `generate()` decodes exactly `--new-tokens` tokens; models are timed in interleaved rounds, medians reported.

    python benchmarks/paper_costs.py generation_throughput --preset base --output \
        benchmarks/results/generation_throughput_base.json
    python benchmarks/paper_costs.py deep_transformer_decoding --preset small --depths 4 --new-tokens 64
    python benchmarks/paper_costs.py multi_unit_speed                  # presets base, small, tiny; one thread
    python benchmarks/paper_costs.py multi_encoder_presets             # the paper's En-Vi size, one thread
    python benchmarks/paper_costs.py multi_pass_cost --threads 1
    python benchmarks/paper_costs.py multi_pass_cost --table           # the tables of the committed JSON
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from functools import partial

import torch
from harness import (
    RESULTS,
    add_result_arguments,
    embedded_pairs,
    fixed_length,
    interleaved_times,
    load_check,
    machine,
    median_times,
    read_result,
    synchronize,
    write_result,
)
from transformers import MarianMTModel

import hf_unified_mt
from hf_unified_mt.modeling_mt_common import CACHE_FIELD
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching
from hf_unified_mt.training.tokenization import train_tokenizer


DECODER_TYPES = ("self", "aan", "merged")
PAPER_002_TOKENS_PER_SECOND = {1: 890, 4: 863, 6: 830}  # read from paper 002 §5.7 / Figure 2(b)
PAPER_003_PRESETS = ["single", "dual", "triple", "quadruple", "quintuple"]
# Paper 003 Table 8, Sk-En / En-Vi / En-It row: (first figure, parameters in millions). The first figure's header was
# lost in the text extraction (§5.4 "Memory and Inference Cost": memory or time); it is shown for its ratios only.
PAPER_003_TABLE_8 = {"single": (11.8, 48), "dual": (16.7, 61), "triple": (26.4, 99), "quadruple": (27.6, 109)}
PAPER_003_TABLE_8["quintuple"] = (30.8, 135)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def random_batch(vocab_size: int, rows: int, length: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`rows` random sentences of `length` ids ending in the end-of-sequence id 2, and their all-ones mask."""
    ids = torch.randint(4, vocab_size, (rows, length), generator=torch.Generator().manual_seed(seed))
    ids[:, -1] = 2
    return ids.to(device), torch.ones_like(ids).to(device)


def for_decoding(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """The model on `device`, in eval mode, with no forced end of sequence (every output has the asked length)."""
    model.to(device).eval()
    model.generation_config.forced_eos_token_id = None
    return model


def run_settings(args) -> dict:
    """The measurement's options, as its JSON records them."""
    skipped = {"measure", "output", "table", "measure_memory_of"}
    return {key: value for key, value in vars(args).items() if key not in skipped}


# ------------------------------------------------------------------------------------------ paper 000, Table 3


def generation_throughput(args) -> dict:
    torch.manual_seed(0)
    unified = hf_unified_mt.UnifiedTransformerForConditionalGeneration(
        hf_unified_mt.get_config(
            "unified_transformer", args.preset, vocab_size=args.vocab_size, **args.config_overrides
        )
    )
    matched = marian_config_matching(
        count_parameters(unified), args.vocab_size, args.marian_d_model, args.marian_layers, args.marian_heads
    )
    marian = MarianMTModel(matched)
    models = {"unified (unfused)": unified, "unified (fused)": unified, "marian (matched)": marian}
    for model in (unified, marian):
        for_decoding(model, args.device)

    def call(name, model, ids, mask, num_beams):
        unified.config.fuse_projections_for_inference = name == "unified (fused)"  # negligible next to generate()
        return model.generate(ids, attention_mask=mask, **fixed_length(args.new_tokens, num_beams))

    rows = []
    for batch_size in args.batch_sizes:
        ids, mask = random_batch(args.vocab_size, batch_size, args.source_length, batch_size, args.device)
        for num_beams in args.beams:
            calls = {name: partial(call, name, model, ids, mask, num_beams) for name, model in models.items()}
            with torch.inference_mode():
                seconds = median_times(calls, args.repeats, args.device)
            for name, model in models.items():
                rows.append(
                    dict(
                        model=name,
                        parameters=count_parameters(model),
                        batch_size=batch_size,
                        num_beams=num_beams,
                        seconds=seconds[name],
                        tokens_per_second=batch_size * args.new_tokens / seconds[name],
                        speed_vs_unfused=seconds["unified (unfused)"] / seconds[name],
                    )
                )
    return dict(rows=rows)


def generation_throughput_tables(result: dict) -> str:
    header = f"{'model':<18} {'params':>11} {'batch':>5} {'beams':>5} {'tokens/s':>10} {'vs unfused':>10}"
    lines = [header, "-" * len(header)]
    for row in result["rows"]:
        lines.append(
            f"{row['model']:<18} {row['parameters']:>11,} {row['batch_size']:>5} {row['num_beams']:>5} "
            f"{row['tokens_per_second']:>10.1f} {row['speed_vs_unfused']:>10.2f}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ paper 001, Table 3


def deep_models(args, depth: int) -> dict[str, torch.nn.Module]:
    models = {}
    for decoder_attention_type in DECODER_TYPES:
        options = dict(vocab_size=args.vocab_size, encoder_layers=depth, decoder_layers=depth, **args.config_overrides)
        config = hf_unified_mt.get_config(
            "deep_transformer", args.preset, decoder_attention_type=decoder_attention_type, **options
        )
        torch.manual_seed(0)
        models[decoder_attention_type] = for_decoding(
            hf_unified_mt.DeepTransformerForConditionalGeneration(config), args.device
        )
    return models


def speedups(times: dict[str, list[float]]) -> dict[str, float]:
    """Median over rounds of (time of `self`) / (time of the model) in the same round."""
    return {name: statistics.median(s / t for s, t in zip(times["self"], values)) for name, values in times.items()}


def deep_generate(args, models, batch_size: int) -> list[dict]:
    ids, mask = random_batch(args.vocab_size, batch_size, args.source_length, batch_size, args.device)
    options = fixed_length(args.new_tokens, args.num_beams)
    calls = {name: partial(model.generate, ids, attention_mask=mask, **options) for name, model in models.items()}
    with torch.inference_mode():
        times = interleaved_times(calls, args.repeats, args.device)
    ratios = speedups(times)
    return [
        dict(
            decoder_attention_type=name,
            batch_size=batch_size,
            num_beams=args.num_beams,
            seconds=statistics.median(values),
            tokens_per_second=batch_size * args.new_tokens / statistics.median(values),
            speedup_vs_self=ratios[name],
        )
        for name, values in times.items()
    ]


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
                inputs = dict(
                    encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tokens, cache=cache
                )
                out = model(**inputs, use_cache=True)
                tokens = out.logits[:, -1].argmax(-1, keepdim=True)
                synchronize(device)
                times[name].append(time.perf_counter() - start)
                states[name] = (encoder_outputs, tokens, getattr(out, CACHE_FIELD))
    return times


def deep_steps(args, models) -> list[dict]:
    """Mean step time over the 8 steps before each output length in `args.step_lengths`, median over rounds; growth
    = last window / first window, and the ratio to `self` per window, both per round then median."""
    ids, mask = random_batch(args.vocab_size, args.step_batch_size, args.source_length, 7, args.device)
    lengths = args.step_lengths
    windows = {name: [] for name in models}  # per round: {length: seconds}
    for round_index in range(args.repeats + 1):
        profiles = step_profiles(models, ids, mask, max(lengths), args.device)
        for name, times in profiles.items():
            if round_index > 0:  # round 0 warms up
                windows[name].append({n: statistics.mean(times[max(0, n - 8) : n]) for n in lengths})
    return [
        dict(
            decoder_attention_type=name,
            batch_size=args.step_batch_size,
            ms_per_step={str(n): 1000 * statistics.median(run[n] for run in runs) for n in lengths},
            speedup_vs_self={
                str(n): statistics.median(s[n] / r[n] for s, r in zip(windows["self"], runs)) for n in lengths
            },
            growth=statistics.median(run[max(lengths)] / run[min(lengths)] for run in runs),
        )
        for name, runs in windows.items()
    ]


def deep_training(args, models) -> list[dict]:
    sentences = max(1, args.train_target_tokens // args.source_length)
    ids, mask = random_batch(args.vocab_size, sentences, args.source_length, 11, args.device)
    labels, _ = random_batch(args.vocab_size, sentences, args.source_length, 12, args.device)

    def step(model):
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()

    for model in models.values():
        model.train()
    times = interleaved_times({name: partial(step, model) for name, model in models.items()}, args.repeats, args.device)
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


def deep_transformer_decoding(args) -> dict:
    generate_rows, training_rows, parameters, step_rows = [], [], {}, []
    for depth in args.depths:
        models = deep_models(args, depth)
        parameters[str(depth)] = {name: count_parameters(model) for name, model in models.items()}
        for batch_size in args.batch_sizes:
            generate_rows += [dict(depth=depth, **row) for row in deep_generate(args, models, batch_size)]
            log(f"generate: depth {depth}, batch {batch_size} done")
        training_rows += [dict(depth=depth, **row) for row in deep_training(args, models)]
        log(f"training: depth {depth} done")
        if depth == args.step_depth:
            step_rows = deep_steps(args, models)
        del models
    if not step_rows:
        step_rows = deep_steps(args, deep_models(args, args.step_depth))
    return dict(parameters=parameters, generate=generate_rows, training=training_rows, step_profile=step_rows)


def deep_transformer_decoding_tables(result: dict) -> str:
    lines = [
        f"generate(): {result['new_tokens']} new tokens, beam {result['num_beams']}, source length "
        f"{result['source_length']}, preset {result['preset']}, device {result['device']}"
    ]
    header = f"{'depth':>5} {'decoder':>7} {'params':>12} {'batch':>5} {'tokens/s':>10} {'vs self':>8}"
    lines += [header, "-" * len(header)]
    for row in result["generate"]:
        name = row["decoder_attention_type"]
        lines.append(
            f"{row['depth']:>5} {name:>7} {result['parameters'][str(row['depth'])][name]:>12,} "
            f"{row['batch_size']:>5} {row['tokens_per_second']:>10.1f} {row['speedup_vs_self']:>8.2f}"
        )
    lines.append(f"\ntraining step (forward + backward, {result['training'][0]['target_tokens']} target tokens)")
    header = f"{'depth':>5} {'decoder':>7} {'seconds':>9} {'vs self':>8}"
    lines += [header, "-" * len(header)]
    for row in result["training"]:
        name = row["decoder_attention_type"]
        lines.append(f"{row['depth']:>5} {name:>7} {row['seconds']:>9.4f} {row['speedup_vs_self']:>8.2f}")
    steps = result["step_profile"]
    lines.append(
        f"\nms per decoding step near output length ({result['step_depth']} layers, batch {steps[0]['batch_size']}, "
        "greedy; in brackets: speed-up over self)"
    )
    header = f"{'decoder':>7} " + " ".join(f"{length:>15}" for length in steps[0]["ms_per_step"]) + f" {'growth':>7}"
    lines += [header, "-" * len(header)]
    for row in steps:
        cells = [f"{ms:>7.2f} ({row['speedup_vs_self'][n]:>4.2f}x)" for n, ms in row["ms_per_step"].items()]
        lines.append(f"{row['decoder_attention_type']:>7} " + " ".join(cells) + f" {row['growth']:>7.2f}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------- paper 002, §5.7


def corpus_batch(num_sentences: int, vocab_size: int):
    """`num_sentences` Spanish sentences of the validation split, tokenized with a BPE tokenizer trained on 5,000
    training pairs."""
    sources, targets = embedded_pairs("train", 5000)
    tokenizer = train_tokenizer(sources + targets, vocab_size=vocab_size)
    return tokenizer, tokenizer(embedded_pairs("validation", num_sentences)[0], return_tensors="pt", padding=True)


def cpu_and_wall(call) -> tuple[float, float]:
    """(CPU seconds of this process, wall-clock seconds) of `call()`. With one thread the CPU time is the time the
    computation takes, whatever else the machine runs; the wall-clock time also counts the waits for a core."""
    cpu, wall = time.process_time(), time.perf_counter()
    call()
    return time.process_time() - cpu, time.perf_counter() - wall


def multi_unit_preset(args, preset: str, tokenizer, batch) -> dict:
    """All unit counts of one preset, interleaved rounds; the rows and the raw timings."""
    models = {}
    for units in args.units:
        torch.manual_seed(0)
        config = hf_unified_mt.get_config(
            "multi_unit_transformer", preset, vocab_size=len(tokenizer), num_units=units, **args.config_overrides
        )
        models[units] = hf_unified_mt.MultiUnitTransformerForConditionalGeneration(config).eval()

    def set_batched(model, batched: bool) -> None:
        for layer in model.model.encoder.layers:
            layer.self_attn.batched = layer.ffn.batched = batched

    def encode(model):
        model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])

    def translate(model):
        model.generate(**batch, **fixed_length(args.new_tokens, args.num_beams))

    keys = [(units, mode, what) for units in args.units for mode in ("batched", "loop") for what in ("enc", "gen")]
    timings = {key: [] for key in keys}
    with torch.inference_mode():
        for model in models.values():  # warm-up
            set_batched(model, True)
            translate(model)
        for _ in range(args.repeats):  # interleaved rounds: load changes hit every configuration alike
            for units, model in models.items():
                for mode in ("batched", "loop") if units > 1 else ("batched",):
                    set_batched(model, mode == "batched")
                    timings[(units, mode, "enc")].append(cpu_and_wall(partial(encode, model)))
                    timings[(units, mode, "gen")].append(cpu_and_wall(partial(translate, model)))

    # Fastest of the interleaved rounds (on a shared machine other jobs only ever add time), in CPU time with one
    # thread, in wall-clock time with several (the CPU time would add up the threads).
    clock = 0 if args.threads == 1 else 1
    best = {key: min(times[clock] for times in values) for key, values in timings.items() if values}
    generated = batch["input_ids"].shape[0] * args.new_tokens
    first = args.units[0]
    rows = []
    for units, model in models.items():
        row = {
            "units": units,
            "parameters": count_parameters(model),
            "parameters_ratio": count_parameters(model) / count_parameters(models[first]),
            "encoder_ms_batched": 1000 * best[(units, "batched", "enc")],
            "encoder_ratio": best[(units, "batched", "enc")] / best[(first, "batched", "enc")],
            "generate_s_batched": best[(units, "batched", "gen")],
            "tokens_per_second": generated / best[(units, "batched", "gen")],
            "speed_ratio": best[(first, "batched", "gen")] / best[(units, "batched", "gen")],
            "paper_speed_ratio": (
                PAPER_002_TOKENS_PER_SECOND[units] / PAPER_002_TOKENS_PER_SECOND[1]
                if units in PAPER_002_TOKENS_PER_SECOND
                else None
            ),
        }
        if units > 1:
            row["encoder_ms_loop"] = 1000 * best[(units, "loop", "enc")]
            row["encoder_loop_over_batched"] = best[(units, "loop", "enc")] / best[(units, "batched", "enc")]
            row["generate_s_loop"] = best[(units, "loop", "gen")]
            row["generate_loop_over_batched"] = best[(units, "loop", "gen")] / best[(units, "batched", "gen")]
        rows.append(row)
    config = models[first].config
    shape = ("d_model", "encoder_ffn_dim", "encoder_layers", "decoder_layers", "vocab_size")
    return {
        "preset": preset,
        **{field: getattr(config, field) for field in shape},
        "rows": rows,
        "raw_seconds_cpu_wall": {f"{u}/{mode}/{what}": values for (u, mode, what), values in timings.items() if values},
    }


def multi_unit_speed(args) -> dict:
    tokenizer, batch = corpus_batch(args.num_sentences, args.vocab_size)
    return {
        "source_positions": batch["input_ids"].shape[1],
        "clock": "process CPU time" if args.threads == 1 else "wall-clock",
        "paper_tokens_per_second": PAPER_002_TOKENS_PER_SECOND,
        "runs": [multi_unit_preset(args, preset, tokenizer, batch) for preset in args.presets],
    }


def multi_unit_speed_tables(result: dict) -> str:
    lines = [
        f"MUTE inference on CPU ({result['threads']} thread(s)): {result['num_sentences']} sentences × "
        f"{result['source_positions']} source positions, beam {result['num_beams']}, {result['new_tokens']} new "
        f"tokens, {'CPU' if result['threads'] == 1 else 'wall-clock'} time, fastest of {result['repeats']} "
        "interleaved rounds"
    ]
    header = (
        f"{'units':>5} {'params':>8} {'×params':>7} {'enc ms':>8} {'×enc':>6} {'enc loop/batched':>16} "
        f"{'tok/s':>7} {'speed':>6} {'gen loop/batched':>16} {'paper speed':>11}"
    )
    for run in result["runs"]:
        lines += [
            "",
            f"preset {run['preset']}: d {run['d_model']}, FFN {run['encoder_ffn_dim']}, "
            f"{run['encoder_layers']}+{run['decoder_layers']} layers, vocab {run['vocab_size']}",
            header,
            "-" * len(header),
        ]
        for row in run["rows"]:
            loop_enc = f"{row['encoder_loop_over_batched']:.2f}" if "encoder_loop_over_batched" in row else "-"
            loop_gen = f"{row['generate_loop_over_batched']:.2f}" if "generate_loop_over_batched" in row else "-"
            paper = f"{row['paper_speed_ratio']:.3f}" if row["paper_speed_ratio"] else "-"
            lines.append(
                f"{row['units']:>5} {row['parameters'] / 1e6:>7.2f}M {row['parameters_ratio']:>7.2f} "
                f"{row['encoder_ms_batched']:>8.1f} {row['encoder_ratio']:>6.2f} {loop_enc:>16} "
                f"{row['tokens_per_second']:>7.1f} {row['speed_ratio']:>6.3f} {loop_gen:>16} {paper:>11}"
            )
    lines.append(
        "\nspeed = generated tokens/s relative to 1 unit (paper: GPU, batch 30, beam 4); ×enc = encoder time "
        "relative to 1 unit; loop/batched = time of the Python loop over units / batched units"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- paper 003, Table 8


def encoder_preset(preset: str, args) -> torch.nn.Module:
    options = dict(vocab_size=args.vocab_size, share_encoder_decoder_embeddings=False, **args.config_overrides)
    config = hf_unified_mt.get_config("multi_encoder_transformer", preset, **options)
    torch.manual_seed(0)
    model = hf_unified_mt.MultiEncoderTransformerForConditionalGeneration(config).to(args.device)
    model.generation_config.forced_eos_token_id = None
    return model


def training_batch(args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(4, args.vocab_size, (args.batch_size, args.source_length), generator=generator)
    target = torch.randint(4, args.vocab_size, (args.batch_size, args.target_length), generator=generator)
    source[:, -1] = target[:, -1] = 2
    return source.to(args.device), torch.ones_like(source).to(args.device), target.to(args.device)


def training_step(model, source, mask, target) -> None:
    model.train()
    model.zero_grad(set_to_none=True)
    model(input_ids=source, attention_mask=mask, labels=target).loss.backward()


def peak_memory_mib(preset: str, args) -> float:
    """Peak memory (MiB) of building the model and running one training step; runs in this (fresh) process."""
    batch = training_batch(args)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        training_step(encoder_preset(preset, args), *batch)
        return torch.cuda.max_memory_allocated() / 2**20
    with open("/proc/self/statm") as statm:
        before = int(statm.read().split()[1]) * resource.getpagesize()
    training_step(encoder_preset(preset, args), *batch)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before) / 2**20  # Linux: KiB


def multi_encoder_presets(args, argv: list[str]) -> dict:
    # Peak memory first, one fresh process per preset, before this process holds any model.
    command = [sys.executable, __file__, *argv, "--measure-memory-of"]
    memory = {
        name: float(subprocess.run([*command, name], capture_output=True, text=True, check=True).stdout.split()[-1])
        for name in args.presets
    }
    models = {name: encoder_preset(name, args) for name in args.presets}
    batch = training_batch(args)

    def generate(model):
        model.zero_grad(set_to_none=True)
        model.eval()
        with torch.inference_mode():
            model.generate(batch[0], attention_mask=batch[1], **fixed_length(args.new_tokens, args.num_beams))

    calls = {}
    for name, model in models.items():
        calls[f"{name}/train"] = partial(training_step, model, *batch)
        calls[f"{name}/generate"] = partial(generate, model)
    seconds = median_times(calls, args.repeats, args.device)
    rows = []
    tokens_per_step = args.batch_size * (args.source_length + args.target_length)
    for name, model in models.items():
        train, generated = seconds[f"{name}/train"], seconds[f"{name}/generate"]
        paper = PAPER_003_TABLE_8.get(name)
        rows.append(
            dict(
                preset=name,
                encoders=model.config.branch_letters,
                parameters=count_parameters(model),
                peak_train_memory_mib=memory[name],
                train_step_seconds=train,
                train_tokens_per_second=tokens_per_step / train,
                generate_seconds=generated,
                generate_tokens_per_second=args.batch_size * args.new_tokens / generated,
                paper_table8=dict(first_figure=paper[0], parameters_millions=paper[1]) if paper else None,
            )
        )
    reference = next((row for row in rows if row["preset"] == "single"), rows[0])
    for row in rows:
        row["parameters_vs_single"] = row["parameters"] / reference["parameters"]
        row["memory_vs_single"] = row["peak_train_memory_mib"] / reference["peak_train_memory_mib"]
        row["train_speed_vs_single"] = reference["train_step_seconds"] / row["train_step_seconds"]
        row["generate_speed_vs_single"] = reference["generate_seconds"] / row["generate_seconds"]
        if row["paper_table8"] and reference["paper_table8"]:
            paper = row["paper_table8"]
            paper["first_figure_vs_single"] = paper["first_figure"] / PAPER_003_TABLE_8["single"][0]
            paper["parameters_vs_single"] = paper["parameters_millions"] / PAPER_003_TABLE_8["single"][1]
    note = "peak of building the model + one training step (forward + backward, no optimizer state); "
    note += "CPU: growth of the peak RSS of a fresh process, CUDA: max_memory_allocated"
    return dict(memory_note=note, rows=rows)


def multi_encoder_presets_tables(result: dict) -> str:
    header = (
        f"{'preset':<10} {'encoders':<10} {'params':>12} {'x':>5} {'paper':>6} {'peak MiB':>9} {'x':>5} "
        f"{'train tok/s':>11} {'x':>5} {'gen tok/s':>9} {'x':>5} {'paper 1st':>9}"
    )
    lines = [header, "-" * len(header)]
    for row in result["rows"]:
        paper = row["paper_table8"] or {}
        lines.append(
            f"{row['preset']:<10} {row['encoders']:<10} {row['parameters']:>12,} {row['parameters_vs_single']:>5.2f} "
            f"{paper.get('parameters_millions', ''):>5}M {row['peak_train_memory_mib']:>9.0f} "
            f"{row['memory_vs_single']:>5.2f} {row['train_tokens_per_second']:>11.1f} "
            f"{row['train_speed_vs_single']:>5.2f} {row['generate_tokens_per_second']:>9.1f} "
            f"{row['generate_speed_vs_single']:>5.2f} {paper.get('first_figure_vs_single', float('nan')):>9.2f}"
        )
    lines.append(
        "x = relative to single (speeds: >1 faster); 'paper 1st' = Table 8's unlabelled first figure / Single's"
    )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- paper 004


def multi_pass_cost(args) -> dict:
    torch.manual_seed(0)
    models = {}
    for passes in (1, 2, 3):
        options = dict(vocab_size=args.vocab_size, num_passes=passes, **args.config_overrides)
        config = hf_unified_mt.get_config("multi_pass_transformer", args.preset, **options)
        models[passes] = hf_unified_mt.MultiPassTransformerForConditionalGeneration(config)
    for model in models.values():  # the 3-pass model's weights in all (hard connections add no parameters)
        model.load_state_dict(models[3].state_dict(), strict=True)
        for_decoding(model, args.device)
    variants = {
        "P=1": (models[1], {}),
        "P=2": (models[2], {}),
        "P=3": (models[3], {}),
        "P=3, read pass 1": (models[3], {"encoder_pass": 1}),
        "P=3, read pass 2": (models[3], {"encoder_pass": 2}),
    }
    rows = []

    def add_rows(measure: str, batch_size: int, num_beams: int | None, calls: dict) -> None:
        with torch.inference_mode():
            seconds = median_times(calls, args.repeats, args.device)
        log(f"{measure}, batch {batch_size}, beams {num_beams}: done")
        for name in variants:
            ratio = seconds[name] / seconds["P=1"]
            row = dict(measure=measure, variant=name, batch_size=batch_size, num_beams=num_beams)
            rows.append(dict(row, seconds=seconds[name], ratio_to_p1=ratio))

    for batch_size in args.batch_sizes:
        ids, mask = random_batch(args.vocab_size, batch_size, args.source_length, batch_size, args.device)
        encoders = {
            name: partial(model.get_encoder(), input_ids=ids, attention_mask=mask, **options)
            for name, (model, options) in variants.items()
        }
        add_rows("encoder", batch_size, None, encoders)
        for num_beams in args.beams:
            options = dict(attention_mask=mask, **fixed_length(args.new_tokens, num_beams))
            calls = {
                name: partial(model.generate, ids, **options, **extra) for name, (model, extra) in variants.items()
            }
            add_rows("generate", batch_size, num_beams, calls)
    parameters = {name: count_parameters(model) for name, (model, _) in variants.items()}
    return dict(parameters=parameters, rows=rows)


def multi_pass_cost_tables(result: dict) -> str:
    header = f"{'measure':<9} {'variant':<17} {'batch':>5} {'beams':>5} {'ms':>10} {'vs P=1':>7}"
    lines = [header, "-" * len(header)]
    for row in result["rows"]:
        beams = "-" if row["num_beams"] is None else row["num_beams"]
        lines.append(
            f"{row['measure']:<9} {row['variant']:<17} {row['batch_size']:>5} {beams:>5} "
            f"{1000 * row['seconds']:>10.1f} {row['ratio_to_p1']:>7.2f}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ command line


MEASURES = {
    "generation_throughput": generation_throughput,
    "deep_transformer_decoding": deep_transformer_decoding,
    "multi_unit_speed": multi_unit_speed,
    "multi_pass_cost": multi_pass_cost,
}

TABLES = {
    "generation_throughput": generation_throughput_tables,
    "deep_transformer_decoding": deep_transformer_decoding_tables,
    "multi_unit_speed": multi_unit_speed_tables,
    "multi_encoder_presets": multi_encoder_presets_tables,
    "multi_pass_cost": multi_pass_cost_tables,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    measures = parser.add_subparsers(dest="measure", required=True)
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    # (default vocabulary, new tokens, repeats, threads) per measure: each paper's setting
    defaults = {
        "generation_throughput": (8000, 30, 3, None),
        "deep_transformer_decoding": (8000, 30, 3, None),
        "multi_unit_speed": (8000, 25, 5, 1),
        "multi_encoder_presets": (4000, 20, 3, 1),
        "multi_pass_cost": (8000, 30, 5, None),
    }
    subparsers = {}
    for name, (vocab_size, new_tokens, repeats, threads) in defaults.items():
        sub = measures.add_parser(name)
        sub.add_argument("--config-overrides", type=json.loads, default={}, help="config fields of every model")
        sub.add_argument("--vocab-size", type=int, default=vocab_size)
        sub.add_argument("--new-tokens", type=int, default=new_tokens)
        sub.add_argument("--repeats", type=int, default=repeats)
        sub.add_argument("--threads", type=int, default=threads, help="torch CPU threads (default: torch's, or 1)")
        if name != "multi_unit_speed":  # MUTE's figure is the CPU's
            sub.add_argument("--device", default=default_device)
        add_result_arguments(sub, RESULTS / f"{name}.json")
        subparsers[name] = sub
    for name, preset in (("generation_throughput", "base"), ("deep_transformer_decoding", "base")):
        subparsers[name].add_argument("--preset", default=preset)
        subparsers[name].add_argument("--source-length", type=int, default=30)
        subparsers[name].add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    generation = subparsers["generation_throughput"]
    generation.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    generation.add_argument("--marian-d-model", type=int, default=512)
    generation.add_argument("--marian-layers", type=int, default=6)
    generation.add_argument("--marian-heads", type=int, default=8)
    deep = subparsers["deep_transformer_decoding"]
    deep.add_argument("--depths", type=int, nargs="+", default=[6, 12], help="layers per stack")
    deep.add_argument("--num-beams", type=int, default=4)
    deep.add_argument("--step-batch-size", type=int, default=32)
    deep.add_argument("--step-lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    deep.add_argument("--step-depth", type=int, default=6, help="depth of the per-step profile")
    deep.add_argument("--train-target-tokens", type=int, default=1000)
    units = subparsers["multi_unit_speed"]
    units.add_argument("--presets", nargs="+", default=["base", "small", "tiny"])
    units.add_argument("--units", type=int, nargs="+", default=[1, 2, 4, 6])
    units.add_argument("--num-sentences", type=int, default=8)
    units.add_argument("--num-beams", type=int, default=4)
    encoders = subparsers["multi_encoder_presets"]
    encoders.add_argument("--presets", nargs="+", default=PAPER_003_PRESETS)
    encoders.add_argument("--batch-size", type=int, default=8)
    encoders.add_argument("--source-length", type=int, default=24)
    encoders.add_argument("--target-length", type=int, default=24)
    encoders.add_argument("--num-beams", type=int, default=4)
    encoders.add_argument("--measure-memory-of", help=argparse.SUPPRESS)  # internal: the process of one preset
    passes = subparsers["multi_pass_cost"]
    passes.add_argument("--preset", default="base")
    passes.add_argument("--source-length", type=int, default=30)
    passes.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    passes.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    return parser.parse_args(argv)


def main(argv=None) -> dict | None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.table:
        print(TABLES[args.measure](read_result(args.output)))
        return None
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if getattr(args, "measure_memory_of", None):
        print(peak_memory_mib(args.measure_memory_of, args))
        return None
    load = load_check()
    if args.measure == "multi_encoder_presets":  # starts a process of its own per preset, with these arguments
        measured = multi_encoder_presets(args, argv)
    else:
        measured = MEASURES[args.measure](args)
    result = dict(benchmark=args.measure, **run_settings(args), **measured)
    result["machine"] = dict(machine(), load_average_before=load)
    print(TABLES[args.measure](result))
    write_result(args.output, result, argv)
    print(f"wrote {args.output}")
    return result


if __name__ == "__main__":
    main()
