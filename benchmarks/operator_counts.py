# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Compute operators per training step, every architecture against a MarianMT of the same width, depth and parameter
count: counted on CPU as the aten operators that a forward + backward dispatches (a `TorchDispatchMode`), view and
aliasing operators and bare allocations left out, and separately those of one AdamW step in its three forms (one
loop per parameter, `foreach`, `fused`). On a GPU each counted operator is one or more kernel launches, and a small
model's step is launch-bound, so this count is what a GPU step's launch overhead grows with. Deterministic: no timing.

    python benchmarks/operator_counts.py                  # writes benchmarks/results/operator_counts.json
    python benchmarks/operator_counts.py --table          # the table, from the JSON

The batch is 4 sentences of 24 source and 24 target tokens (vocabulary 8,000, no padding), each model's preset
`base` (the GPU-size models) in training mode, after one warm-up step.
"""

import argparse
import sys
from pathlib import Path

import torch
from harness import RESULTS, machine, print_table, write_result
from harness.profiling import OperatorCount
from transformers import AutoModelForSeq2SeqLM, MarianMTModel

import hf_unified_mt
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching


RESULT = RESULTS / "operator_counts.json"
VOCAB = 8000


def batch(vocab_size: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(4, vocab_size - 1, (4, 24), generator=generator)
    target = torch.randint(4, vocab_size - 1, (4, 24), generator=generator)
    return dict(input_ids=source, attention_mask=torch.ones_like(source), labels=target)


def count_step(model, inputs: dict) -> dict:
    """Compute operators of one forward + backward and of one AdamW step in each form, after a warm-up step."""
    model.train()
    model(**inputs).loss.backward()  # warm-up: lazily built buffers
    model.zero_grad(set_to_none=True)
    with OperatorCount() as forward_backward:
        model(**inputs).loss.backward()
    optimizer_steps = {}
    for form, options in (("loop", dict(foreach=False)), ("foreach", dict(foreach=True)), ("fused", dict(fused=True))):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **options)
        optimizer.step()  # the first step creates the state
        with OperatorCount() as step:
            optimizer.step()
        optimizer_steps[form] = sum(step.counts.values())
    return {
        "forward_backward": sum(forward_backward.counts.values()),
        "optimizer_step": optimizer_steps,
        "parameter_tensors": sum(1 for _ in model.parameters()),
        "parameters": count_parameters(model),
        "operators": dict(forward_backward.counts.most_common()),
    }


def measure(architectures: list[str], preset: str) -> dict:
    rows = {}
    inputs = batch(VOCAB)
    for architecture in architectures:
        config = hf_unified_mt.get_config(architecture, preset, vocab_size=VOCAB)
        torch.manual_seed(0)
        ours = AutoModelForSeq2SeqLM.from_config(config)
        marian = MarianMTModel(
            marian_config_matching(
                count_parameters(ours),
                VOCAB,
                d_model=config.d_model,
                layers=config.encoder_layers,
                heads=config.encoder_attention_heads,
                max_position_embeddings=512,
            )
        )
        ours_count, marian_count = count_step(ours, inputs), count_step(marian, inputs)
        rows[architecture] = {
            "model": ours_count,
            "marian": marian_count,
            "ratio": round(ours_count["forward_backward"] / marian_count["forward_backward"], 3),
        }
        print(
            f"{architecture:28} {ours_count['forward_backward']:5d} against {marian_count['forward_backward']:5d} "
            f"({rows[architecture]['ratio']:.2f}x)",
            file=sys.stderr,
        )
    return {
        "what": "compute operators per training step (forward + backward; AdamW step), CPU dispatch count",
        "preset": preset,
        "batch": "4 x 24 source and 24 target tokens, no padding, vocabulary 8,000",
        "machine": machine(threads=1),
        "rows": rows,
    }


def table(result: dict) -> str:
    lines = [
        f"Compute operators per training step, preset `{result['preset']}` ({result['batch']}; torch "
        f"{result['machine']['versions']['torch']}):",
        "",
        "| architecture | forward + backward | same-size MarianMT | ratio | parameter tensors (ours / Marian) "
        "| AdamW step: loop / foreach / fused |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for architecture, row in result["rows"].items():
        ours, marian = row["model"], row["marian"]
        steps = ours["optimizer_step"]
        lines.append(
            f"| {architecture} | {ours['forward_backward']:,} | {marian['forward_backward']:,} | {row['ratio']:.2f}x "
            f"| {ours['parameter_tensors']} / {marian['parameter_tensors']} "
            f"| {steps['loop']:,} / {steps['foreach']:,} / {steps['fused']:,} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--architectures", nargs="+", default=list(hf_unified_mt.ARCHITECTURES))
    parser.add_argument("--preset", default="base")
    parser.add_argument("--output", type=Path, default=RESULT)
    parser.add_argument("--table", action="store_true", help="print the table of the JSON at --output and stop")
    args = parser.parse_args(argv)
    if args.table:
        print_table(args.output, table)
        return
    torch.set_num_threads(1)
    result = measure(args.architectures, args.preset)
    write_result(args.output, result, argv, indent=1)
    print(table(result))


if __name__ == "__main__":
    main()
