# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The ablation study's report, rebuilt from its result files alone: per arm the mean and standard deviation over
seeds, per comparison the seed-averaged BLEU difference with its paired-bootstrap interval and sacreBLEU's paired test
per seed (`significance`), the tables (`ablation_table.md`, `summary.json`), the validation curves
(`validation_curves.png`), and the generated block of each study size in the study's document."""

from __future__ import annotations

import gzip
import json
import math
import os
import statistics
from pathlib import Path

import numpy as np

from hf_unified_mt.analysis.ablation_arms import ARMS, ARMS_BY_KEY, COMPARISONS, PAPER_ORDER, PAPER_TITLES
from hf_unified_mt.analysis.significance import paired_bootstrap_delta, sacrebleu_paired_tests, verdict
from hf_unified_mt.utils.files import atomic_write, contained_path, write_text


def load_runs(results_dir: Path) -> dict[str, dict[int, dict]]:
    """{arm: {seed: record}} from the result files, each with its translations."""
    runs: dict[str, dict[int, dict]] = {}
    for path in sorted((results_dir / "runs").glob("*.json")):
        record = json.loads(path.read_text())
        translations = contained_path(path.parent, record["test"]["translations"], f"{path}'s translations file")
        with gzip.open(translations, "rt", encoding="utf-8") as handle:
            record["hypotheses"] = handle.read().split("\n")[: record["test"]["num_verses"]]
        runs.setdefault(record["arm"], {})[record["seed"]] = record
    for arm in ARMS:  # an arm that reuses another's runs, at the sizes it has (000's Transformer: not at base)
        reused = runs.get(arm.same_runs_as, {})
        if reused and all(r.get("recipe", {}).get("size", "small") in arm.presets for r in reused.values()):
            runs[arm.key] = reused
    return runs


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else float("nan"))


def runs_delta(
    a: dict[int, dict], b: dict[int, dict], seeds: list[int], references: list[str], samples: int
) -> tuple[float, float, float]:
    """`paired_bootstrap_delta` of two arms' runs ({seed: record}) on the given seeds."""
    return paired_bootstrap_delta(
        [a[s]["hypotheses"] for s in seeds], [b[s]["hypotheses"] for s in seeds], references, samples
    )


# Below this mean test BLEU an arm has not learned to translate yet (still on the unigram plateau): a difference to
# such an arm says when training took off, not which mechanism translates better.
LEARNED_BLEU = 1.0


def not_learned(arm_runs: dict[int, dict], seeds: list[int]) -> bool:
    return statistics.fmean(arm_runs[s]["test"]["bleu"] for s in seeds) < LEARNED_BLEU


def compare_arms(runs: dict, references: list[str], samples: int) -> list[dict]:
    """Every comparison of `COMPARISONS` whose two arms share seeds: ΔBLEU with its interval, sacreBLEU's paired test
    per seed, the verdict, and which arms have not learned."""
    comparisons = []
    for paper, control, mechanism, claim in COMPARISONS:
        a, b = runs.get(control, {}), runs.get(mechanism, {})
        seeds = sorted(set(a) & set(b))
        if not seeds:
            continue
        delta, low, high = runs_delta(a, b, seeds, references, samples)
        p_values, signature = sacrebleu_paired_tests(a, b, references, samples)
        comparisons.append(
            dict(
                paper=paper,
                control=control,
                mechanism=mechanism,
                claim=claim,
                seeds=seeds,
                delta_bleu=delta,
                delta_ci95=[low, high],
                p_values=p_values,
                paired_test_signature=signature,
                verdict=verdict(delta, low, high),
                not_learned=[key for key, arm_runs in ((control, a), (mechanism, b)) if not_learned(arm_runs, seeds)],
            )
        )
    return comparisons


def build_report(args) -> dict:
    runs = load_runs(args.results_dir)
    subset = json.loads((args.results_dir / "test_subset.json").read_text())
    references = subset["references"]
    arms = []
    for arm in ARMS:
        seeds = runs.get(arm.key, {})
        if not seeds:
            continue
        records = [seeds[s] for s in sorted(seeds)]
        bleu, chrf = _mean_sd([r["test"]["bleu"] for r in records]), _mean_sd([r["test"]["chrf"] for r in records])
        arms.append(
            dict(
                arm=arm.key,
                paper=arm.paper,
                label=arm.label,
                seeds=sorted(seeds),
                num_parameters=records[0]["num_parameters"],
                bleu=bleu,
                chrf=chrf,
                validation_ce=_mean_sd([r["validation_cross_entropy"][-1][1] for r in records]),
                updates=records[0]["updates"],
                epochs=records[0]["epochs"],
                training_minutes=statistics.fmean(r["wall_minutes"]["training"] for r in records),
            )
        )
    cost = measured_training_cost(args.results_dir, args.size)
    for row in arms:
        network = ARMS_BY_KEY[row["arm"]].same_runs_as or row["arm"]  # an arm reusing another's runs costs as much
        row["cost_ratio"] = cost["ratios"].get(network) if cost else None
    comparisons = compare_arms(runs, references, args.bootstrap_samples)
    first = next(iter(next(iter(runs.values())).values())) if runs else None
    summary = dict(
        recipe=first["recipe"] if first else None,
        hardware=first["hardware"] if first else None,
        test_subset=subset["description"],
        bleu_signature=first["test"]["bleu_signature"] if first else None,
        chrf_signature=first["test"]["chrf_signature"] if first else None,
        arms=arms,
        comparisons=comparisons,
        training_cost=cost and {key: cost[key] for key in ("reference", "machine", "threads", "commit")},
    )
    write_text(args.results_dir / "summary.json", json.dumps(summary, indent=1, ensure_ascii=False))
    table = format_tables(summary)
    write_text(args.results_dir / "ablation_table.md", table)
    print(table)
    if plot_curves(runs, args.results_dir / "validation_curves.png"):
        print(f"wrote {args.results_dir / 'validation_curves.png'}")
    if args.report_doc is not None:
        update_report_doc(args.report_doc, args.size, report_block(summary, args.results_dir, args.report_doc))
    return summary


def measured_training_cost(results_dir: Path, size: str) -> dict | None:
    """The arms' training cost per update measured side by side (`benchmarks/training_cost.py`, written beside the
    results as `training_cost.json`), as ratios to its reference arm; None where it was not measured at this size.
    The runs' own training minutes are no substitute: each ran on whatever else its machine did meanwhile."""
    path = results_dir / "training_cost.json"
    if not path.exists():
        return None
    measured = json.loads(path.read_text())
    if measured["size"] != size:
        return None
    ratios = {row["arm"]: row["ratio"] for row in measured["arms"]}
    return dict(measured, ratios=ratios)


def report_markers(size: str) -> tuple[str, str]:
    """The comment lines that enclose the generated block of study size `size` in the study's document."""
    command = "benchmarks/ablation_study.py --report_only" + ("" if size == "small" else f" --size {size}")
    return (
        f"<!-- generated by `{command}` from the result files: edit the script, not this block -->",
        f"<!-- end of the generated block ({size}) -->",
    )


def report_block(summary: dict, results_dir: Path, doc: Path) -> str:
    """What goes between the markers: the tables of `format_tables` and the validation curves, linked from `doc`."""
    block = format_tables(summary)
    figure = results_dir / "validation_curves.png"
    if figure.exists():
        link = Path(os.path.relpath(figure.resolve(), doc.resolve().parent)).as_posix()
        block += f"\n![Validation cross-entropy against updates]({link})\n"
    return block


def generated_block(text: str, size: str) -> str | None:
    """The generated block of study size `size` in a document's text (None where the markers are missing)."""
    begin, end = report_markers(size)
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"


def update_report_doc(doc: Path, size: str, block: str) -> bool:
    """Replaces the generated block of `size` in `doc` by `block`; the text around it is left as it is."""
    begin, end = report_markers(size)
    text = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if generated_block(text, size) is None:
        print(f"{doc} has no generated block for size {size} (lines {begin!r} and {end!r}): not updated")
        return False
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    write_text(doc, f"{head}{begin}\n{block.strip(chr(10))}\n{end}{tail}")
    print(f"updated the generated block ({size}) of {doc}")
    return True


def _pm(pair: tuple[float, float], digits: int = 2) -> str:
    mean, sd = pair
    return f"{mean:.{digits}f}" + ("" if math.isnan(sd) else f" ± {sd:.{digits}f}")


def _verdict_text(row: dict) -> str:
    failed = row["not_learned"]
    if len(failed) == 2:
        return f"none: neither arm has learned (BLEU < {LEARNED_BLEU:g})"
    if failed:
        side = "A" if failed[0] == row["control"] else "B"
        return f"{row['verdict']} ({side} has not learned: BLEU < {LEARNED_BLEU:g})"
    return row["verdict"]


def format_tables(summary: dict) -> str:
    cost = summary.get("training_cost")
    cost_header = f" cost × {cost['reference']} |" if cost else ""
    lines = [
        "| arm | model | params | seeds | updates (epochs) | val. CE | test BLEU | test chrF | train min |"
        + cost_header,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if cost else ""),
    ]
    for row in summary["arms"]:
        ratio = row.get("cost_ratio")
        cost_cell = (" – |" if ratio is None else f" {ratio:.2f} |") if cost else ""
        lines.append(
            f"| {row['arm']} | {row['label']} | {row['num_parameters'] / 1e6:.2f}M | {len(row['seeds'])} | "
            f"{row['updates']} ({row['epochs']:.1f}) | {_pm(row['validation_ce'], 3)} | {_pm(row['bleu'])} | "
            f"{_pm(row['chrf'])} | {row['training_minutes']:.0f} |" + cost_cell
        )
    lines += [
        "",
        "| paper | B vs A | paper's claim | seeds | ΔBLEU (95% CI) | p per seed | verdict |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for row in summary["comparisons"]:
        low, high = row["delta_ci95"]
        p_values = ", ".join(f"{p:.3f}" for p in row["p_values"].values())
        lines.append(
            f"| {row['paper']} | {row['mechanism']} vs {row['control']} | {row['claim']} | {len(row['seeds'])} | "
            f"{row['delta_bleu']:+.2f} ({low:+.2f}, {high:+.2f}) | {p_values} | {_verdict_text(row)} |"
        )
    if summary["comparisons"]:
        lines += ["", f"Paired test: `{summary['comparisons'][0]['paired_test_signature']}`"]
    hardware = summary["hardware"] or {}
    if (hardware.get("concurrent_runs") or 1) > 1:
        lines += [
            f"Training minutes: {hardware['concurrent_runs']} runs shared one {hardware['gpu']} at once; they "
            f"are not speeds."
        ]
    if cost:
        lines += [
            f"Cost: seconds per update relative to {cost['reference']}, measured side by side in one run "
            f"(`benchmarks/training_cost.py`, {cost['threads']} threads on {cost['machine']['cpus']} CPUs of "
            f"{cost['machine']['processor']}, commit {str(cost['commit'])[:7]}); train min are each run's own clock."
        ]
    lines += [
        f"BLEU: `{summary['bleu_signature']}`; chrF: `{summary['chrf_signature']}`; test: {summary['test_subset']}",
        "",
    ]
    return "\n".join(lines)


def plot_curves(runs: dict, path: Path) -> bool:
    """Validation cross-entropy against updates, one panel per paper, one colour per arm, one line per seed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'hf-unified-mt[plot]'): no plot")
        return False
    papers = [p for p in PAPER_ORDER if any(ARMS_BY_KEY[a].paper == p for a in runs)]
    papers = sorted(papers)
    figure, axes = plt.subplots(1, len(papers), figsize=(4.2 * len(papers), 3.8), squeeze=False)
    for axis, paper in zip(axes[0], papers):
        for colour, arm in enumerate(a for a in ARMS if a.paper == paper and a.key in runs):
            for index, seed in enumerate(sorted(runs[arm.key])):
                curve = np.array(runs[arm.key][seed]["validation_cross_entropy"])
                axis.plot(
                    curve[:, 0],
                    curve[:, 1],
                    color=f"C{colour}",
                    alpha=0.8,
                    marker=".",
                    linestyle=("-", "--", ":", "-.")[index % 4],
                    label=f"{arm.key} seed {seed}",
                )
        axis.set_title(f"{paper}: {PAPER_TITLES[paper]}" if paper != "ref" else PAPER_TITLES[paper], fontsize=9)
        axis.set_xlabel("updates")
        axis.set_ylabel("validation cross-entropy (nats/token)")
        axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=110)
    plt.close(figure)
    return True
