#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Candidates for the README's main job, trained by the main job's own recipe and compared at its budget.

The main job (`training/configs/cpu_default.yaml`) trains for 10 minutes of wall-clock on 2 CPU threads and scores
400 test verses with beam 4, so it compares models at equal training time by construction: a dearer model makes
fewer updates. Each candidate is that recipe with its model changed (`--arch`, `--preset`, `--config_overrides`);
the runs alternate between candidates within each seed, so that a drift of the machine's speed falls on all of them.
Finished runs are skipped (the JSON is rewritten after each run, and each run's own folder stays under
`--output_dir`).

    python benchmarks/studies/main_job_candidates.py                    # every candidate, seeds 1 and 2 (about 1 hour)
    python benchmarks/studies/main_job_candidates.py --summary          # the table of the committed JSON

Each candidate is compared with the main job's model by the ablation study's paired bootstrap: seed-averaged ΔBLEU
with a 95% interval over the test verses (the same resampled verses for every seed and both models). Each run's
test translations are kept gzipped beside the JSON (`main_job_candidates/<candidate>-seed<N>.test.txt.gz`), so the
comparison can be recomputed from committed files.

Run it on an otherwise idle machine: a time budget measures the machine as well as the model.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import ROOT, machine, print_table, write_result
from harness.main_job import (
    MAIN_JOB,
    MAIN_JOB_SHAPE,
    add_study_arguments,
    in_turn,
    keep_translations,
    read_translations,
    test_references,
    train_main_job,
)

from hf_unified_mt.analysis.significance import delta_fields, paired_bootstrap_delta


# name -> (description, train.py options over the main job's)
CANDIDATES = {
    "prime": ("Prime 3+3, d 192 (the main job)", []),
    "prime-dual": (
        "dual encoder B+P 3+3 (self-attention + Prime encoders summed), Transformer decoder, d 192",
        [
            "--arch",
            "multi_encoder_transformer",
            "--preset",
            "small-prime-dual",
            "--config_overrides",
            json.dumps(
                dict(
                    MAIN_JOB_SHAPE,
                    encoder_branches=[
                        dict(type="self_attention", layers=3),
                        dict(type="prime", layers=3, conv_kernel_sizes=[3, 15]),
                    ],
                )
            ),
        ],
    ),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--summary", action="store_true", help="Print the table of --output and exit")
    add_study_arguments(parser, "main_job_candidates", seeds=[1, 2])
    return parser.parse_args(argv)


def run_one(candidate: str, seed: int, args) -> dict:
    """Train and score one candidate with one seed (train.py in a child process, as a user runs it)."""
    folder = args.output_dir / f"{candidate}-seed{seed}"
    options = [*CANDIDATES[candidate][1], "--seed", str(seed), "--num_sample_translations", "0", *args.train_options]
    results, state = train_main_job(folder, options, f"{candidate} seed {seed}")
    if results["test"]["skipped_overlong"]:
        raise RuntimeError(f"{folder}: {results['test']['skipped_overlong']} test verses skipped, not the main job's")
    keep_translations(args.output, candidate, seed, folder)
    return dict(
        candidate=candidate,
        seed=seed,
        parameters=results["num_parameters"],
        updates=state["global_step"],
        train_minutes=round(results["train"]["train_runtime"] / 60, 2),
        test_bleu=round(results["test"]["bleu"], 2),
        test_chrf=round(results["test"]["chrf"], 2),
        test_verses=results["test"]["num_sentences"],
    )


def compare_with_main_job(runs: list[dict], output: Path, samples: int) -> list[dict]:
    """Each candidate against the first (the main job's model) on the seeds both have: seed-averaged ΔBLEU with its
    95% paired-bootstrap interval over the test verses, and the verdict."""
    control = runs[0]["candidate"]
    seeds: dict[str, set[int]] = {}
    for row in runs:
        seeds.setdefault(row["candidate"], set()).add(row["seed"])
    references = test_references(runs[0]["test_verses"])
    comparisons = []
    for name, candidate_seeds in seeds.items():
        common = sorted(candidate_seeds & seeds[control])
        if name == control or not common:
            continue
        delta, low, high = paired_bootstrap_delta(
            [read_translations(output, control, seed) for seed in common],
            [read_translations(output, name, seed) for seed in common],
            references,
            samples,
        )
        comparisons.append(
            dict(
                control=control,
                candidate=name,
                seeds=common,
                **delta_fields(delta, low, high),
            )
        )
    return comparisons


def summary_table(result: dict) -> str:
    """Per candidate: BLEU per seed, their mean, ΔBLEU against the main job's model, updates and parameters."""
    deltas = {row["candidate"]: row for row in result.get("comparisons", [])}
    lines = [
        "| candidate | parameters | updates | test BLEU per seed | mean | ΔBLEU vs the main job (95%) |",
        "|---|---:|---|---|---:|---|",
    ]
    for name, description in result["candidates"].items():
        rows = [row for row in result["runs"] if row["candidate"] == name]
        if not rows:
            continue
        bleu = [row["test_bleu"] for row in rows]
        delta = deltas.get(name)
        versus = (
            f"{delta['delta_bleu']:+.2f} ({delta['interval'][0]:+.2f}, {delta['interval'][1]:+.2f}), {delta['verdict']}"
            if delta
            else "–"
        )
        lines.append(
            f"| {description} | {rows[0]['parameters'] / 1e6:.2f}M | "
            f"{', '.join(str(row['updates']) for row in rows)} | {', '.join(f'{b:.2f}' for b in bleu)} | "
            f"{statistics.mean(bleu):.2f} | {versus} |"
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.summary:
        return print_table(args.output, summary_table)
    runs = []
    for candidate, seed in in_turn(args.candidates, args.seeds):
        runs.append(run_one(candidate, seed, args))
        result = dict(
            recipe=str(MAIN_JOB.relative_to(ROOT)),
            train_options=args.train_options,
            machine=machine(),
            candidates={name: CANDIDATES[name][0] for name in args.candidates},
            runs=runs,
            comparisons=compare_with_main_job(runs, args.output, args.bootstrap_samples),
        )
        write_result(args.output, result, argv, indent=1)
    print(summary_table(result))
    return result


if __name__ == "__main__":
    main()
