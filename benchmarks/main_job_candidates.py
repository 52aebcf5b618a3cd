#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Candidates for the README's main job, trained by the main job's own recipe and compared at its budget.

The main job (`training/configs/cpu_default.yaml`) trains for 10 minutes of wall-clock on 2 CPU threads and scores
400 test verses with beam 4, so it compares models at equal training time by construction: a dearer model makes
fewer updates. Each candidate is that recipe with its model changed (`--arch`, `--preset`, `--config_overrides`);
the runs alternate between candidates within each seed, so that a drift of the machine's speed falls on all of them.
Finished runs are skipped (the JSON is rewritten after each run, and each run's own folder stays under
`--output_dir`).

    python benchmarks/main_job_candidates.py                    # every candidate, seeds 1 and 2 (about 1 hour)
    python benchmarks/main_job_candidates.py --summary          # the table of the committed JSON

Each candidate is compared with the main job's model by the ablation study's paired bootstrap: seed-averaged ΔBLEU
with a 95% interval over the test verses (the same resampled verses for every seed and both models). Each run's
test translations are kept gzipped beside the JSON (`main_job_candidates/<candidate>-seed<N>.test.txt.gz`), so the
comparison can be recomputed from committed files.

Run it on an otherwise idle machine: a time budget measures the machine as well as the model.
"""

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from hf_unified_mt.analysis.provenance import code_version
from hf_unified_mt.analysis.significance import delta_fields, paired_bootstrap_delta


HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MAIN_JOB = REPO / "training" / "configs" / "cpu_default.yaml"
MAIN_JOB_SHAPE = dict(d_model=192, encoder_layers=3, decoder_layers=3, encoder_ffn_dim=768, decoder_ffn_dim=768)

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
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--output_dir", type=Path, default=REPO / "outputs" / "main_job_candidates")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "main_job_candidates.json")
    parser.add_argument("--bootstrap_samples", type=int, default=1000)
    parser.add_argument("--summary", action="store_true", help="Print the table of --output and exit")
    parser.add_argument("--train_options", nargs=argparse.REMAINDER, default=[], help="More train.py options (tests)")
    return parser.parse_args(argv)


def run_one(candidate: str, seed: int, args) -> dict:
    """Train and score one candidate with one seed (train.py in a child process, as a user runs it)."""
    output = args.output_dir / f"{candidate}-seed{seed}"
    if not (output / "results.json").exists() or "test" not in json.loads((output / "results.json").read_text()):
        command = [sys.executable, str(REPO / "training" / "train.py"), str(MAIN_JOB), *CANDIDATES[candidate][1]]
        command += ["--output_dir", str(output), "--seed", str(seed)]
        command += ["--num_sample_translations", "0", *args.train_options]
        print(f"[{candidate} seed {seed}] training", flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    results = json.loads((output / "results.json").read_text())
    state = json.loads((output / "trainer_state.json").read_text())
    if results["test"]["skipped_overlong"]:
        raise RuntimeError(f"{output}: {results['test']['skipped_overlong']} test verses skipped, not the main job's")
    hypotheses = (output / "test_translations.txt").read_text(encoding="utf-8").splitlines()
    translations = translations_path(args.output, candidate, seed)
    translations.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(translations, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(hypotheses) + "\n")
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


def translations_path(output: Path, candidate: str, seed: int) -> Path:
    return output.with_suffix("") / f"{candidate}-seed{seed}.test.txt.gz"


def read_translations(output: Path, candidate: str, seed: int) -> list[str]:
    with gzip.open(translations_path(output, candidate, seed), "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_references(num_verses: int) -> list[str]:
    """The main job's references: the first `num_verses` pairs of the embedded corpus's test split (train.py's
    `max_test_samples`)."""
    from hf_unified_mt.training.data import load_parallel_data

    return list(load_parallel_data()["test"]["target"][:num_verses])


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
        result = json.loads(args.output.read_text())
        print(summary_table(result))
        return result
    runs = []
    for seed in args.seeds:
        for candidate in args.candidates:
            runs.append(run_one(candidate, seed, args))
            result = dict(
                recipe=str(MAIN_JOB.relative_to(REPO)),
                train_options=args.train_options,
                machine=dict(processor=platform.processor() or platform.machine(), cpus=os.cpu_count()),
                code=code_version(),  # the commit, and whether the code had uncommitted changes
                candidates={name: CANDIDATES[name][0] for name in args.candidates},
                runs=runs,
                comparisons=compare_with_main_job(runs, args.output, args.bootstrap_samples),
            )
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(summary_table(result))
    return result


if __name__ == "__main__":
    main()
