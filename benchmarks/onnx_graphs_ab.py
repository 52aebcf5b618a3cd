#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Two ONNX exports of the same model side by side: how much faster does a change to the graphs decode?

Loads both export folders with `ORTModelForSeq2SeqLM` (int8 by default, as search graphs) in one process and times
`generate()` on the same random sources at the three settings of `SETTINGS`, the two exports alternating within every
round, median of `--rounds` rounds, and checks that both decode the same tokens: ratios between separate runs of the
full benchmark move by more than such a change (docs/deployment.md).

    # the export before the change, from a worktree of the commit before it; the one after, from this checkout
    python -m hf_unified_mt.deployment.onnx_export outputs/default /tmp/before --int8   # (in the old worktree)
    python -m hf_unified_mt.deployment.onnx_export outputs/default /tmp/after --int8
    python benchmarks/onnx_graphs_ab.py /tmp/before /tmp/after --output benchmarks/results/onnx_graphs_ab.json
"""

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch
from harness import load_check, machine, read_result, write_result

from hf_unified_mt.deployment import onnx_runtime
from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM


SETTINGS = {"greedy_b1": (1, 1, 20), "beam4_b16": (16, 4, 5), "beam4_b64": (64, 4, 2)}  # batch, beams, calls


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, nargs="?", help="Export folder before the change")
    parser.add_argument("after", type=Path, nargs="?", help="Export folder after the change")
    parser.add_argument("--float32", action="store_true", help="Float32 graphs instead of int8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--source-length", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=20)
    for side in ("before", "after"):
        parser.add_argument(f"--{side}-native-loop", action="store_true", help=f"Decode {side!r} with the native loop")
        parser.add_argument(
            f"--{side}-all-optimizers", action="store_true", help=f"Every ONNX Runtime graph optimisation for {side!r}"
        )
    parser.add_argument("--output", type=Path, help="Write the result as JSON")
    parser.add_argument("--table", type=Path, nargs="+", help="Print the docs table of these result JSONs and exit")
    args = parser.parse_args(argv)
    if not args.table and (args.before is None or args.after is None):
        parser.error("give the export folders before and after the change (or --table JSON ...)")
    return args


def table(documents: list[dict]) -> str:
    """One row per setting of each result: tokens/s before and after (medians), the median after/before ratio over
    rounds, in how many rounds after was faster, and whether both decoded the same tokens."""

    def side(document, name):
        return document.get("decoding", {}).get(name, "")

    lines = [
        "| setting | threads | before | after | before, tok/s | after, tok/s | after/before | rounds faster "
        "| same tokens |",
        "|---|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for document in documents:
        for setting, row in document["settings"].items():
            rounds = row["rounds"]
            faster = sum(after < before for before, after in zip(rounds["before"], rounds["after"]))
            lines.append(
                f"| {setting} | {document['machine']['threads']} | {side(document, 'before')} | "
                f"{side(document, 'after')} | {row['tokens_per_second']['before']:,.0f} | "
                f"{row['tokens_per_second']['after']:,.0f} | {row['speedup']:.2f} | "
                f"{faster} of {len(rounds['after'])} | {'yes' if row['same_tokens'] else 'no'} |"
            )
    return "\n".join(lines)


@contextlib.contextmanager
def session_optimizers(args, name: str):
    """While loading and preparing one side: ONNX Runtime's every graph optimisation if `--{name}-all-optimizers`
    asks for it (the sessions are created at loading and at each setting's first call), else the package's."""
    if not getattr(args, f"{name}_all_optimizers"):
        yield
        return
    kept, onnx_runtime.DISABLED_OPTIMIZERS = onnx_runtime.DISABLED_OPTIMIZERS, ()
    try:
        yield
    finally:
        onnx_runtime.DISABLED_OPTIMIZERS = kept


def describe(args, name: str) -> str:
    decoding = "native loop" if getattr(args, f"{name}_native_loop") else "search graphs"
    return decoding + (", all optimisations" if getattr(args, f"{name}_all_optimizers") else "")


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.table:
        documents = [read_result(path) for path in args.table]
        print(table(documents))
        return documents
    load_before = load_check()
    models = {}
    for name, folder in (("before", args.before), ("after", args.after)):
        with session_optimizers(args, name):
            models[name] = ORTModelForSeq2SeqLM.from_pretrained(
                folder,
                int8=not args.float32,
                num_threads=args.threads,
                search_graphs=not getattr(args, f"{name}_native_loop"),
            )
    vocab = models["after"].config.vocab_size
    generator = torch.Generator().manual_seed(0)
    result = dict(
        before=str(args.before),
        after=str(args.after),
        decoding={name: describe(args, name) for name in models},
        int8=not args.float32,
        settings={},
    )
    for setting, (batch, beams, calls) in SETTINGS.items():
        ids = torch.randint(4, vocab - 1, (batch, args.source_length), generator=generator)
        ids[:, -1] = models["after"].config.eos_token_id
        options = dict(
            attention_mask=torch.ones_like(ids),
            num_beams=beams,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            no_repeat_ngram_size=0,
        )
        outputs = {}
        for name, model in models.items():  # prepares the plans and the sessions of the search graphs
            with session_optimizers(args, name):
                outputs[name] = model.generate(ids, **options)
        seconds = {name: [] for name in models}
        for _ in range(args.rounds):
            for name, model in models.items():
                start = time.perf_counter()
                for _ in range(calls):
                    model.generate(ids, **options)
                seconds[name].append((time.perf_counter() - start) / calls)
        tokens = batch * args.new_tokens
        result["settings"][setting] = dict(
            tokens_per_second={name: tokens / statistics.median(values) for name, values in seconds.items()},
            speedup=statistics.median(b / a for b, a in zip(seconds["before"], seconds["after"])),
            same_tokens=torch.equal(outputs["before"], outputs["after"]),
            rounds=seconds,
        )
        row = result["settings"][setting]
        print(
            f"{setting}: before {row['tokens_per_second']['before']:,.0f} tok/s, after "
            f"{row['tokens_per_second']['after']:,.0f} tok/s, after/before {row['speedup']:.3f}, "
            f"same tokens: {row['same_tokens']}",
            flush=True,
        )
    result["machine"] = dict(machine(threads=args.threads, packages=("onnxruntime",)), load_average_before=load_before)
    if args.output:
        write_result(args.output, result, argv, indent=1)
    return result


if __name__ == "__main__":
    main()
