#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""A recipe search for the README's main job, at a fixed number of updates, chosen by validation.

The main job (`training/configs/cpu_default.yaml`) trains Prime 3+3 for 10 minutes on 2 CPU threads. Its model is
settled (`main_job_candidates.py`, the study's stage 4); its recipe (learning rate and schedule, warm-up, dropout,
label smoothing) was never tuned for this corpus and budget. Each arm here is the main job with some train.py
options changed, trained for exactly `--steps` updates (what the main job makes in its 10 minutes on a quiet 2-core
machine) instead of for 10 minutes, so that the arms compare learning per update whatever else the machine is doing:
arms that change the work per update (batch size, vocabulary, model size, precision) need their own update count,
measured on a quiet machine, and are compared at the main job's real budget instead.

Arms are ranked by validation BLEU (`--eval_samples` validation verses, beam 4) and validation loss; the test
verses are scored too, but only the final comparison (the winner against today's recipe, at the real 10-minute
budget, several seeds) looks at them. Finished runs are skipped; the JSON is rewritten after each run.

    python benchmarks/studies/main_job_recipe_search.py --arms base linear-2e-3 --seeds 1
    python benchmarks/studies/main_job_recipe_search.py --summary
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import ROOT, machine, print_table, read_result, write_result
from harness.main_job import (
    MAIN_JOB,
    MAIN_JOB_SHAPE,
    SAME_SIZE_MARIAN,
    add_study_arguments,
    compare,
    comparison_line,
    in_turn,
    keep_translations,
    train_main_job,
)

from hf_unified_mt.analysis.provenance import code_version


# The arms translate with plain beam search (no n-gram constraint), as the main job did when the search began; the
# constraint is chosen on validation afterwards, for the search's pick (benchmarks/studies/main_job_decoding.py).
PLAIN_BEAM_SEARCH = ("--generation_no_repeat_ngram_size", "0")
# The arms train in float32 on 2,500-token batches with a 4,000-token BPE vocabulary, as the main job did when the
# search began (it now trains in bfloat16 where the CPU has bf16 units, on 3,200-token batches, with 6,000 tokens:
# benchmarks/studies/main_job_runs.py compares those at equal time; the search compares recipes at equal updates).
AS_SEARCHED = ("--bf16_if_native", "false", "--max_tokens", "2500", "--tokenizer_vocab_size", "4000")


def recipe(schedule="inverse_sqrt", learning_rate="2e-3", warmup="300", *extra, **model) -> list[str]:
    """train.py options of one arm, spelled out in full over the main job's configuration file so that an arm means
    the same whatever that file holds today: the schedule, peak learning rate and warm-up, the main job's model with
    the recipe before this search (dropout and the convolution's weight dropout 0.1) changed by `model`, and plain
    beam search, in float32 on 2,500-token batches."""
    config = {**MAIN_JOB_SHAPE, "dropout": 0.1, "conv_weight_dropout": 0.1, **model}
    return [
        *("--lr_scheduler_type", schedule, "--learning_rate", learning_rate, "--warmup_steps", warmup),
        *("--config_overrides", json.dumps(config)),
        *PLAIN_BEAM_SEARCH,
        *AS_SEARCHED,
        *extra,
    ]


NO_DROPOUT = dict(dropout=0.0, conv_weight_dropout=0.0)


def marian_recipe(schedule="inverse_sqrt", learning_rate="2e-3", warmup="300", dropout=0.1) -> list[str]:
    """train.py options of a same-size MarianMT arm under the named recipe (MarianMT has no convolution)."""
    config = {**SAME_SIZE_MARIAN, "dropout": dropout}
    return [
        *("--arch", "marian", "--preset", "small"),
        *("--lr_scheduler_type", schedule, "--learning_rate", learning_rate, "--warmup_steps", warmup),
        *("--config_overrides", json.dumps(config)),
        *PLAIN_BEAM_SEARCH,
        *AS_SEARCHED,
    ]


# name -> (description, train.py options over the main job's configuration file)
ARMS = {
    "base": ("the recipe before this search: inverse_sqrt, peak 2e-3, warm-up 300, dropout 0.1", recipe()),
    "inverse_sqrt-4e-3": ("inverse_sqrt, peak 4e-3", recipe(learning_rate="4e-3")),
    "linear-2e-3": ("linear decay to 0 at the end, peak 2e-3", recipe("linear")),
    "linear-3e-3": ("linear decay to 0 at the end, peak 3e-3", recipe("linear", "3e-3")),
    "linear-4e-3": ("linear decay to 0 at the end, peak 4e-3", recipe("linear", "4e-3")),
    "linear-6e-3": ("linear decay to 0 at the end, peak 6e-3", recipe("linear", "6e-3")),
    "cosine-4e-3": ("cosine decay to 0 at the end, peak 4e-3", recipe("cosine", "4e-3")),
    "linear-4e-3-warmup-150": ("linear decay, peak 4e-3, warm-up 150", recipe("linear", "4e-3", "150")),
    "inverse_sqrt-2e-3-dropout-0": (
        "inverse_sqrt, peak 2e-3, no dropout (dropout and the convolution's weight dropout 0)",
        recipe(**NO_DROPOUT),
    ),
    "linear-2e-3-dropout-0": (
        "linear decay, peak 2e-3, no dropout (dropout and the convolution's weight dropout 0)",
        recipe("linear", **NO_DROPOUT),
    ),
    "linear-2e-3-dropout-0-smoothing-0.2": (
        "linear decay, peak 2e-3, no dropout, label smoothing 0.2",
        recipe("linear", "2e-3", "300", "--label_smoothing_factor", "0.2", **NO_DROPOUT),
    ),
    # second round, around the first round's pick (linear decay, peak 2e-3, warm-up 300, no dropout, smoothing 0.1)
    "linear-3e-3-dropout-0": ("linear decay, peak 3e-3, no dropout", recipe("linear", "3e-3", **NO_DROPOUT)),
    "linear-1.5e-3-dropout-0": ("linear decay, peak 1.5e-3, no dropout", recipe("linear", "1.5e-3", **NO_DROPOUT)),
    "linear-2e-3-dropout-0-warmup-100": (
        "linear decay, peak 2e-3, warm-up 100, no dropout",
        recipe("linear", "2e-3", "100", **NO_DROPOUT),
    ),
    "linear-2e-3-dropout-0-smoothing-0": (
        "linear decay, peak 2e-3, no dropout, no label smoothing",
        recipe("linear", "2e-3", "300", "--label_smoothing_factor", "0", **NO_DROPOUT),
    ),
    "linear-2e-3-dropout-0-vocab-2000": (
        "linear decay, peak 2e-3, no dropout, a 2,000-token BPE vocabulary (4,000 before)",
        recipe("linear", "2e-3", "300", "--tokenizer_vocab_size", "2000", **NO_DROPOUT),
    ),
    "linear-2e-3-dropout-0-vocab-8000": (
        "linear decay, peak 2e-3, no dropout, an 8,000-token BPE vocabulary (4,000 before)",
        recipe("linear", "2e-3", "300", "--tokenizer_vocab_size", "8000", **NO_DROPOUT),
    ),
    # does Prime's lead over a same-size Transformer hold under the new recipe? (the same change to both)
    "marian-base": ("same-size MarianMT, the recipe before this search", marian_recipe()),
    "marian-linear-2e-3-dropout-0": (
        "same-size MarianMT, linear decay, peak 2e-3, no dropout",
        marian_recipe("linear", dropout=0.0),
    ),
    # MarianMT stalls at a peak of 2e-3 (validation BLEU 1.8): its new recipe at the peaks it trains with
    "marian-linear-1e-3-dropout-0": (
        "same-size MarianMT, linear decay, peak 1e-3, no dropout",
        marian_recipe("linear", "1e-3", dropout=0.0),
    ),
    "marian-linear-1.5e-3-dropout-0": (
        "same-size MarianMT, linear decay, peak 1.5e-3, no dropout",
        marian_recipe("linear", "1.5e-3", dropout=0.0),
    ),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument(
        "--steps", type=int, default=1600, help="Updates per run (the main job's in 10 quiet minutes on 2 cores)"
    )
    parser.add_argument("--eval_samples", type=int, default=400, help="Validation verses that rank the arms")
    parser.add_argument("--summary", action="store_true", help="Print the table of --output and exit")
    parser.add_argument(
        "--merge", type=Path, nargs="+", default=[], help="Add the runs of these JSON files (parallel runners) and exit"
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("CONTROL", "ARM"),
        help="Paired bootstrap of ARM against CONTROL on the test verses, over the seeds both have; stored in --output",
    )
    add_study_arguments(parser, "main_job_recipe_search", seeds=[1])
    return parser.parse_args(argv)


def run_one(arm: str, seed: int, args) -> dict:
    """Train and score one arm with one seed (train.py in a child process, as a user runs it)."""
    folder = args.output_dir / f"{arm}-seed{seed}"
    options = [*ARMS[arm][1], "--max_steps", str(args.steps), "--max_train_minutes", "100000"]  # updates end it
    options += ["--eval_steps", str(args.steps), "--save_steps", str(args.steps)]  # one evaluation, at the end
    options += ["--max_eval_samples", str(args.eval_samples), "--num_sample_translations", "0"]
    results, state = train_main_job(folder, [*options, "--seed", str(seed), *args.train_options], f"{arm} seed {seed}")
    keep_translations(args.output, arm, seed, folder, replace=False)
    evaluation = [entry for entry in state["log_history"] if "eval_bleu" in entry][-1]
    return dict(
        arm=arm,
        seed=seed,
        updates=state["global_step"],
        train_minutes=round(results["train"]["train_runtime"] / 60, 2),
        train_loss=round(results["train"]["train_loss"], 4),
        validation_bleu=round(evaluation["eval_bleu"], 2),
        validation_loss=round(evaluation["eval_loss"], 4),
        test_bleu=round(results["test"]["bleu"], 2),
        test_chrf=round(results["test"]["chrf"], 2),
        threads=os.environ.get("OMP_NUM_THREADS"),
        code=code_version(),  # the code that recorded the run (the run itself, unless it was recorded earlier)
    )


def summary_table(result: dict) -> str:
    """Per arm, best validation BLEU first: validation BLEU and loss per seed, test BLEU per seed."""
    by_arm: dict[str, list[dict]] = {}
    for row in result["runs"]:
        by_arm.setdefault(row["arm"], []).append(row)
    order = sorted(by_arm, key=lambda arm: -statistics.mean(row["validation_bleu"] for row in by_arm[arm]))
    lines = [
        f"| arm ({result['steps']} updates each) | validation BLEU | validation loss | test BLEU |",
        "|---|---|---|---|",
    ]
    for arm in order:
        rows = by_arm[arm]

        def cells(key, digits=2, rows=rows):
            values = [row[key] for row in rows]
            text = ", ".join(f"{value:.{digits}f}" for value in values)
            return text + (f" (mean {statistics.mean(values):.{digits}f})" if len(values) > 1 else "")

        lines.append(
            f"| {result['arms'][arm]} | {cells('validation_bleu')} | {cells('validation_loss', 3)} | "
            f"{cells('test_bleu')} |"
        )
    lines += [comparison_line(row) for row in result.get("comparisons", [])]
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.summary:
        return print_table(args.output, summary_table)
    if args.merge or args.compare:
        result = read_result(args.output)
        for other in map(json.loads, (path.read_text() for path in args.merge)):
            if other["steps"] != result["steps"]:
                raise SystemExit(f"runs of {other['steps']} updates cannot join runs of {result['steps']}")
            known = {(row["arm"], row["seed"]) for row in result["runs"]}
            result["runs"] += [row for row in other["runs"] if (row["arm"], row["seed"]) not in known]
            result["arms"].update(other["arms"])
        result["arms"].update({name: ARMS[name][0] for name in result["arms"] if name in ARMS})
        for row in result["runs"]:
            folder = args.output_dir / f"{row['arm']}-seed{row['seed']}"
            keep_translations(args.output, row["arm"], row["seed"], folder, replace=False)
        if args.compare:
            comparison = compare(result, args.output, *args.compare, args.bootstrap_samples)
            result["comparisons"] = [
                row for row in result.get("comparisons", []) if [row["control"], row["arm"]] != args.compare
            ] + [comparison]
        write_result(args.output, result, argv, indent=1)
        print(summary_table(result))
        return result
    previous = read_result(args.output) if args.output.exists() else {"runs": [], "arms": {}}
    if previous["runs"] and previous.get("steps") != args.steps:
        raise SystemExit(f"{args.output} holds runs of {previous['steps']} updates, not {args.steps}")
    runs = [
        row
        for row in previous["runs"]
        if (row["arm"], row["seed"]) not in {(a, s) for a in args.arms for s in args.seeds}
    ]
    for arm, seed in in_turn(args.arms, args.seeds):
        runs.append(run_one(arm, seed, args))
        result = dict(
            recipe=str(MAIN_JOB.relative_to(ROOT)),
            steps=args.steps,
            eval_samples=args.eval_samples,
            train_options=args.train_options,
            machine=machine(),
            arms={**previous["arms"], **{name: ARMS[name][0] for name in args.arms}},
            runs=runs,
        )
        write_result(args.output, result, argv, indent=1)
    print(summary_table(result))
    return result


if __name__ == "__main__":
    main()
