#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Inference speed and parameters of the Multi-Unit Transformer for 1, 2, 4, 6 units (paper 002, §5.7, Figure 2b).

The paper reports, on GPU with decoding batch 30 and beam 4: 890 tokens/s with one unit, 863 (-3.1 %) with four,
830 (-6.7 %) with six. This script measures, side by side in one run (configurations interleaved, the fastest of
`--repeats` rounds, in CPU time of the process with one thread (the default), wall-clock time with more, on real
source sentences of the embedded Spanish→English corpus):

* parameters, and their ratio to the one-unit model;
* the encoder forward time (where the units are) with the units computed as batched tensor operations over stacked
  weights (`batched_units=True`, the default) and as a Python loop over the units with the same weights;
* beam-search translation speed, generated tokens per second (beam hypotheses not counted, every sentence decoded to
  exactly `--new_tokens` tokens since the models are untrained), relative to one unit.

Prints a table and writes `benchmarks/results/multi_unit_speed.json`::

    python benchmarks/multi_unit_speed.py                    # presets base (the paper's size), small, tiny; CPU
    python benchmarks/multi_unit_speed.py --presets base --threads 16 --num_sentences 30
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import time
from pathlib import Path

import torch

import hf_unified_mt
from hf_unified_mt.modeling_multi_unit_transformer import MultiUnitTransformerForConditionalGeneration
from hf_unified_mt.training.tokenization import train_tokenizer


PAPER_TOKENS_PER_SECOND = {1: 890, 4: 863, 6: 830}  # read from §5.7 / Figure 2(b)
RESULTS = Path(__file__).resolve().parent / "results" / "multi_unit_speed.json"


def read_column(path: Path, field: str, limit: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n").split("\t")
        column = header.index(field)
        return [line.rstrip("\n").split("\t")[column] for _, line in zip(range(limit), handle)]


def source_batch(num_sentences: int, vocab_size: int):
    """`num_sentences` Spanish sentences of the validation split, tokenized with a BPE tokenizer trained on 5,000
    training pairs."""
    corpus = Path(hf_unified_mt.__file__).parent / "corpora" / "bible_es_en"
    texts = read_column(corpus / "train.tsv.gz", "es", 5000) + read_column(corpus / "train.tsv.gz", "en", 5000)
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size)
    sentences = read_column(corpus / "valid.tsv.gz", "es", num_sentences)
    return tokenizer, tokenizer(sentences, return_tensors="pt", padding=True)


def timed(fn) -> tuple[float, float]:
    """(CPU seconds of this process, wall-clock seconds). With one thread the CPU time is the time the computation
    takes, whatever else the machine runs; the wall-clock time also counts the waits for a core."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def measure(args, preset: str, tokenizer, batch) -> dict:
    """All unit counts of one preset, interleaved rounds; returns the rows and the raw timings."""
    models = {}
    for units in args.units:
        torch.manual_seed(0)
        config = hf_unified_mt.get_config(
            "multi_unit_transformer", preset, vocab_size=len(tokenizer), num_units=units, **args.config_overrides
        )
        models[units] = MultiUnitTransformerForConditionalGeneration(config).eval()

    def set_batched(model, batched: bool) -> None:
        for layer in model.model.encoder.layers:
            layer.self_attn.batched = layer.ffn.batched = batched

    def encode(model):
        model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])

    def translate(model):
        model.generate(
            **batch,
            num_beams=args.num_beams,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            early_stopping=False,
        )

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
                    timings[(units, mode, "enc")].append(timed(lambda model=model: encode(model)))
                    timings[(units, mode, "gen")].append(timed(lambda model=model: translate(model)))

    # Fastest of the interleaved rounds (on a shared machine other jobs only ever add time), in CPU time with one
    # thread, in wall-clock time with several (the CPU time would add up the threads).
    clock = 0 if args.threads == 1 else 1
    best = {key: min(times[clock] for times in values) for key, values in timings.items() if values}
    generated = batch["input_ids"].shape[0] * args.new_tokens
    base_units = args.units[0]
    base_params = sum(p.numel() for p in models[base_units].parameters())
    rows = []
    for units, model in models.items():
        params = sum(p.numel() for p in model.parameters())
        row = {
            "units": units,
            "parameters": params,
            "parameters_ratio": params / base_params,
            "encoder_ms_batched": 1000 * best[(units, "batched", "enc")],
            "encoder_ratio": best[(units, "batched", "enc")] / best[(base_units, "batched", "enc")],
            "generate_s_batched": best[(units, "batched", "gen")],
            "tokens_per_second": generated / best[(units, "batched", "gen")],
            "speed_ratio": best[(base_units, "batched", "gen")] / best[(units, "batched", "gen")],
            "paper_speed_ratio": (
                PAPER_TOKENS_PER_SECOND[units] / PAPER_TOKENS_PER_SECOND[1]
                if units in PAPER_TOKENS_PER_SECOND
                else None
            ),
        }
        if units > 1:
            row["encoder_ms_loop"] = 1000 * best[(units, "loop", "enc")]
            row["encoder_loop_over_batched"] = best[(units, "loop", "enc")] / best[(units, "batched", "enc")]
            row["generate_s_loop"] = best[(units, "loop", "gen")]
            row["generate_loop_over_batched"] = best[(units, "loop", "gen")] / best[(units, "batched", "gen")]
        rows.append(row)
    config = models[base_units].config
    return {
        "preset": preset,
        "d_model": config.d_model,
        "encoder_ffn_dim": config.encoder_ffn_dim,
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "vocab_size": config.vocab_size,
        "rows": rows,
        "raw_seconds_cpu_wall": {
            f"{units}/{mode}/{what}": values for (units, mode, what), values in timings.items() if values
        },
    }


def format_run(run: dict) -> str:
    header = (
        f"{'units':>5} {'params':>8} {'×params':>7} {'enc ms':>8} {'×enc':>6} {'enc loop/batched':>16} "
        f"{'tok/s':>7} {'speed':>6} {'gen loop/batched':>16} {'paper speed':>11}"
    )
    lines = [
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
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["base", "small", "tiny"])
    parser.add_argument("--config_overrides", type=json.loads, default={})
    parser.add_argument("--units", type=int, nargs="+", default=[1, 2, 4, 6])
    parser.add_argument("--num_sentences", type=int, default=8)
    parser.add_argument("--new_tokens", type=int, default=25)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 by default: on a shared, busy machine multi-threaded CPU timings of "
        "small ops are dominated by waiting for the other threads)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    tokenizer, batch = source_batch(args.num_sentences, args.vocab_size)
    runs = [measure(args, preset, tokenizer, batch) for preset in args.presets]
    print(
        f"MUTE inference on CPU ({args.threads} thread(s)): {args.num_sentences} sentences × "
        f"{batch['input_ids'].shape[1]} source positions, beam {args.num_beams}, {args.new_tokens} new tokens, "
        f"{'CPU' if args.threads == 1 else 'wall-clock'} time, fastest of {args.repeats} interleaved rounds"
    )
    for run in runs:
        print()
        print(format_run(run))
    print(
        "\nspeed = generated tokens/s relative to 1 unit (paper: GPU, batch 30, beam 4); ×enc = encoder time "
        "relative to 1 unit; loop/batched = time of the Python loop over units / batched units"
    )

    result = {
        "config_overrides": args.config_overrides,
        "num_sentences": args.num_sentences,
        "source_positions": batch["input_ids"].shape[1],
        "num_beams": args.num_beams,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "threads": args.threads,
        "clock": "process CPU time" if args.threads == 1 else "wall-clock",
        "device": "cpu",
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "paper_tokens_per_second": PAPER_TOKENS_PER_SECOND,
        "runs": runs,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
