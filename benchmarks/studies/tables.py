#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The tables of the finished studies, rendered from their committed JSON (`benchmarks/results/<name>.json`).

The studies' measuring scripts are retired: docs/history.md ("Finished studies") names, for each result, the command
that made it and the commit whose tree holds the script. What stays is each docs table, printed from its JSON:

    python benchmarks/studies/tables.py main_job_runs            # also reads main_job_full_validation.json
    python benchmarks/studies/tables.py main_job_decoding_round3

Results: main_job_candidates, main_job_recipe_search, main_job_decoding (and _round2, _round3), main_job_runs,
onnx_step_floor, gpu_step_profile.
"""

import argparse
import json
import statistics
from pathlib import Path


RESULTS = Path(__file__).resolve().parents[1] / "results"

# main_job_runs.json: each setting's label, in the table's order
RUN_SETTINGS = {
    "float32": "float32, 2,500 tokens",
    "bf16": "bf16 (eager attention, lengths padded to 8), 2,500 tokens",
    "bf16-max-tokens-2000": "bf16, 2,000 tokens",
    "bf16-max-tokens-3200": "the configuration: bf16, 3,200 tokens",
    "bf16-max-tokens-4000": "bf16, 4,000 tokens",
    "bf16-d256": "bf16, 3,200 tokens, 3+3 layers, d 256, FFN 1,024",
    "bf16-4+4": "bf16, 3,200 tokens, 4+4 layers, d 192",
    "bf16-4+2": "bf16, 3,200 tokens, 4+2 layers, d 192",
    "bf16-d160": "bf16, 3,200 tokens, 3+3 layers, d 160, FFN 640",
    "bf16-smoothing-0": "bf16, 3,200 tokens, smoothing 0",
    "bf16-warmup-500": "bf16, 3,200 tokens, warm-up 500",
    "bf16-average-0.25": "bf16, 3,200 tokens, weights averaged over the last quarter",
    "bf16-3200-faster-step": "the configuration, faster step (blockwise loss, stacked projections)",
    "bf16-3200-lr-2.5e-3": "bf16, 3,200 tokens, faster step, peak 2.5e-3",
    "bf16-3200-vocab-6000": "bf16, 3,200 tokens, faster step, BPE 6,000",
    "bf16-3200-vocab-8000": "bf16, 3,200 tokens, faster step, BPE 8,000",
    "bf16-marian-6000": "same-size MarianMT, bf16, 3,200 tokens, BPE 6,000, peak 1.5e-3",
}


def interval(row: dict) -> str:
    """A paired comparison's ΔBLEU, its 95% interval and verdict."""
    return f"{row['delta_bleu']:+.2f} ({row['interval'][0]:+.2f}, {row['interval'][1]:+.2f}), {row['verdict']}"


def comparison_line(row: dict, key: str = "arm") -> str:
    """A paired comparison of two arms on the test verses as one sentence of the docs."""
    line = (
        f"\n{row[key]} against {row['control']} on the test verses, seeds {', '.join(map(str, row['seeds']))}: "
        f"ΔBLEU {interval(row)}; translations of the longest quarter of the sources that repeat a word trigram: "
        + ", ".join(f"{name} {value:.1%}" for name, value in row["longest_quarter_repeating_a_trigram"].items())
    )
    if "longest_quarter_bleu" in row:  # comparisons made since it was recorded
        line += "; BLEU of the longest quarter (mean over seeds): " + ", ".join(
            f"{name} {value:.2f}" for name, value in row["longest_quarter_bleu"].items()
        )
    return line


def candidates_table(result: dict) -> str:
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
        versus = interval(deltas[name]) if name in deltas else "–"
        lines.append(
            f"| {description} | {rows[0]['parameters'] / 1e6:.2f}M | "
            f"{', '.join(str(row['updates']) for row in rows)} | {', '.join(f'{b:.2f}' for b in bleu)} | "
            f"{statistics.mean(bleu):.2f} | {versus} |"
        )
    return "\n".join(lines)


def recipe_search_table(result: dict) -> str:
    """Per arm, best validation BLEU first: validation BLEU and loss per seed, test BLEU per seed."""
    by_arm: dict[str, list[dict]] = {}
    for row in result["runs"]:
        by_arm.setdefault(row["arm"], []).append(row)
    lines = [
        f"| arm ({result['steps']} updates each) | validation BLEU | validation loss | test BLEU |",
        "|---|---|---|---|",
    ]
    for arm in sorted(by_arm, key=lambda arm: -statistics.mean(row["validation_bleu"] for row in by_arm[arm])):

        def cells(key, digits=2, rows=by_arm[arm]):
            values = [row[key] for row in rows]
            text = ", ".join(f"{value:.{digits}f}" for value in values)
            return text + (f" (mean {statistics.mean(values):.{digits}f})" if len(values) > 1 else "")

        lines.append(
            f"| {result['arms'][arm]} | {cells('validation_bleu')} | {cells('validation_loss', 3)} | "
            f"{cells('test_bleu')} |"
        )
    lines += [comparison_line(row) for row in result.get("comparisons", [])]
    return "\n".join(lines)


def decoding_table(result: dict) -> str:
    """Each decoding option's validation BLEU per seed, and the pick against the control on the test verses."""
    lines = [
        "| decoding (beam 4 unless named) | validation BLEU per seed (mean) | seconds per seed (validation) |",
        "|---|---|---|",
    ]
    for name, rows in sorted(result["validation"].items(), key=lambda item: -item[1]["mean_bleu"]):
        bleu = ", ".join(f"{value:.2f}" for value in rows["bleu"])
        seconds = ", ".join(f"{value:.0f}" for value in rows["seconds"])
        lines.append(f"| {name} | {bleu} ({rows['mean_bleu']:.2f}) | {seconds} |")
    test = result["test"]
    control, seeds = test.get("control", "beam 4"), ", ".join(map(str, result["seeds"]))
    lines.append(
        f"\nOn the test verses, {test['pick']} against {control} (seeds {seeds}): "
        f"BLEU {', '.join(f'{v:.2f}' for v in test['pick_bleu'])} against "
        f"{', '.join(f'{v:.2f}' for v in test['beam_bleu'])}, ΔBLEU {interval(test)}; translations of the longest "
        f"quarter of the sources that repeat a word trigram: {test['pick_repeats']:.1%} against "
        f"{test['beam_repeats']:.1%} (references {test['reference_repeats']:.1%})."
    )
    return "\n".join(lines)


def loss_curve_table(row: dict) -> str:
    updates = row["updates"]
    lines = [
        "| training loss at update | " + " | ".join(f"{update:,}" for update in updates) + " |",
        "|---|" + "---:|" * len(updates),
    ]
    for name in (row["control"], row["setting"]):
        for seed, losses in row["losses"][name].items():
            values = " | ".join(f"{losses[str(update)]:.3f}" for update in updates)
            lines.append(f"| {RUN_SETTINGS[name]}, seed {seed} | {values} |")
    return "\n".join(lines)


def runs_table(result: dict, full: dict | None = None) -> str:
    """The main job's runs per setting and seed; `full` adds each scored run's BLEU on every validation verse."""
    full_bleu = {(row["setting"], row["seed"]): row["bleu"] for row in (full or {}).get("runs", [])}
    lines = [
        "| setting | seed | updates in 10 minutes | validation BLEU (200 verses) | validation BLEU (all 928) "
        "| test BLEU | chrF |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    order = list(RUN_SETTINGS)
    for row in sorted(result["runs"], key=lambda row: (order.index(row["setting"]), row["seed"])):
        scored = full_bleu.get((row["setting"], row["seed"]))
        lines.append(
            f"| {RUN_SETTINGS[row['setting']]} | {row['seed']} | {row['updates']:,} | {row['validation_bleu']:.2f} | "
            f"{'–' if scored is None else f'{scored:.2f}'} | {row['test_bleu']:.2f} | {row['test_chrf']:.2f} |"
        )
    lines += [comparison_line(row, key="setting") for row in result.get("comparisons", [])]
    for row in result.get("loss_curves", []):
        lines += ["", loss_curve_table(row)]
    return "\n".join(lines)


def step_floor_table(result: dict) -> str:
    """A batch-1 greedy token of ONNX Runtime int8 against CTranslate2 int8's, and the runtime's fixed cost in it."""
    us = 1e6
    ours, ct2 = result["seconds_per_token"]["onnx-native-int8"], result["seconds_per_token"]["marian/ct2-int8"]
    graph = result["seconds_per_token"].get("onnx-graph-int8")  # measured since the search graphs
    step = result["decoder_step_seconds_per_run"] * result["decoder_step_runs_per_call"] / result["new_tokens"]
    encoder = result["encoder_seconds_per_call"] / result["new_tokens"]
    rows = [
        ("CTranslate2 int8, MarianMT of the same size: a whole token", ct2 * us),
        ("issue 47's batch-1 target (2x CTranslate2 int8): a whole token", result["target_seconds_per_token"] * us),
        *([("ONNX Runtime int8, search graph (the default): a whole token", graph * us)] if graph is not None else []),
        ("ONNX Runtime int8, native loop in Python: a whole token", ours * us),
        ("of which the decoder-step graph's run", step * us),
        ("of which the encoder graph's run (one per call, shared by its tokens)", encoder * us),
        ("of which outside both graphs (the search loop in Python)", (ours - step - encoder) * us),
        (
            f"ONNX Runtime's fixed cost of that run: 1 run + {result['decoder_step_nodes']} nodes x "
            f"{result['onnxruntime_node_seconds'] * us:.2f} µs",
            result["fixed_cost_floor_seconds_per_token"] * us,
        ),
    ]
    lines = ["| per generated token, batch 1 greedy | µs |", "|---|---:|"]
    lines += [f"| {label} | {value:.0f} |" for label, value in rows]
    return "\n".join(lines)


def gpu_step_profile_table(result: dict) -> str:
    """One bf16 training step on a GPU: seconds, GPU busy time and kernels per step, Prime against MarianMT."""
    settings = result["settings"]
    scale = settings["scale"]
    lines = [
        f"One bf16 training step (forward, backward, AdamW) on {result['device']}, torch {result['torch']}, a fixed "
        f"batch of {settings['batch']} sentences x {settings['length']} source and target tokens:",
        "",
        f"| model | s/step | s/step, batch x{scale} | GPU busy per step (profiled) | kernels per step |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in (("prime", f"Prime `{settings['preset']}`"), ("marian", "MarianMT, same size")):
        row = result["models"][name]
        lines.append(
            f"| {label} | {row['seconds_per_step_median']:.3f} | {row[f'seconds_per_step_median_batch_x{scale}']:.3f} "
            f"| {row['gpu_busy_seconds_per_step'] * 1e3:.1f} ms | {row['kernels_per_step']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def read(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def table(name: str) -> str:
    """The docs table of the committed result `name` (`main_job_decoding_round2`: `benchmarks/results/<name>.json`)."""
    if name == "main_job_runs":
        return runs_table(read(name), read("main_job_full_validation"))
    render = {
        "main_job_candidates": candidates_table,
        "main_job_recipe_search": recipe_search_table,
        "onnx_step_floor": step_floor_table,
        "gpu_step_profile": gpu_step_profile_table,
    }.get(name, decoding_table if name.startswith("main_job_decoding") else None)
    if render is None:
        raise SystemExit(f"no finished study wrote {name}.json")
    return render(read(name))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the result's name: benchmarks/results/<name>.json")
    print(table(parser.parse_args(argv).name))


if __name__ == "__main__":
    main()
