#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The tables of the finished studies, rendered from their committed JSON (`benchmarks/results/<name>.json`).

The studies' measuring scripts are retired: docs/history.md ("Finished studies") names, for each result, the command
that made it and the commit whose tree holds the script. What stays is each docs table, printed from its JSON:

    python benchmarks/studies/tables.py main_job_runs            # also reads main_job_full_validation.json
    python benchmarks/studies/tables.py main_job_decoding_round3

Tables (`TABLES`): main_job_candidates, main_job_recipe_search, main_job_decoding (and _round2, _round3), main_job_runs,
onnx_step_floor, gpu_step_profile, gpu_training_16384 and gpu_training_65536 (training through train.py on one GPU),
gpu_decoding, training_step_profile, training_step_changes, decoding_profiles (where decoding time goes, six profiles).
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


def gpu_labelled_rows(result: dict, section: str):
    """(label, row) of Prime and the MarianMT in one section of a GPU result, in the tables' order."""
    labels = {"prime": f"Prime `{result['preset']}`", "marian": "MarianMT, same size"}
    return [(label, result[section][name]) for name, label in labels.items()]


def gpu_training_table(result: dict) -> str:
    """Training through train.py on one GPU: tokens/s and MFU of Prime against the same-size MarianMT."""
    training = result["training"]
    peak, spec = result["bf16_matmul_peak_tflops"], result["spec_peak_tflops"]
    lines = [
        f"Training, bf16, `Seq2SeqTrainer` (train.py), {result['device']}, {training['prime']['timed_updates']} "
        f"updates after {result['settings']['warmup_steps']} of warm-up, "
        f"`--max_tokens {result['settings']['max_tokens']}`; "
        f"measured bf16 GEMM peak {peak:.0f} TFLOP/s (data sheet {spec:.0f}):",
        "",
        "| model | parameters | s/update | tokens/s | achieved TFLOP/s | MFU (measured peak) | MFU (data sheet) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in gpu_labelled_rows(result, "training"):
        lines.append(
            f"| {label} | {row['parameters'] / 1e6:.1f}M | {row['seconds_per_update_median']:.3f} | "
            f"{row['tokens_per_second']:,.0f} | {row['tflops_per_second']:.1f} | {row['mfu_measured_peak']:.1%} | "
            f"{row['mfu_spec_peak']:.1%} |"
        )
    lines += [
        "",
        f"Prime / MarianMT tokens per second: **{training['prime_over_marian_tokens_per_second']:.2f}x**.",
    ]
    return "\n".join(lines) + "\n"


def gpu_decoding_table(result: dict) -> str:
    """Decoding with `generate()` on one GPU: sentences and new tokens per second, Prime against the MarianMT."""
    decoding = result["decoding"]
    lines = [
        f"Decoding, PyTorch `generate()`, {decoding['dtype']}, {result['device']}, batch {decoding['batch']}, beam "
        f"{decoding['beams']}, exactly {decoding['new_tokens']} new tokens per sentence, median of "
        f"{len(decoding['prime']['rounds'])} interleaved rounds:",
        "",
        "| model | sentences/s | new tokens/s |",
        "|---|---:|---:|",
    ]
    for label, row in gpu_labelled_rows(result, "decoding"):
        lines.append(f"| {label} | {row['sentences_per_second']:,.1f} | {row['new_tokens_per_second']:,.0f} |")
    lines += ["", f"Prime / MarianMT: **{decoding['prime_over_marian']:.2f}x**."]
    return "\n".join(lines) + "\n"


# training_step_profile.json: the operator categories in the table's order (the profile sorted every operator into one)
STEP_CATEGORIES = (
    "linear layers (mm, addmm)",
    "batched matmuls (attention, convolution bands)",
    "softmax",
    "casts and copies",
    "layer norm",
    "loss and embeddings",
    "optimizer (AdamW)",
    "everything else (elementwise, reshapes, autograd)",
)


def step_profile_table(result: dict) -> str:
    """The main job's CPU training step by operator category, per precision and padding setting."""
    settings = result["settings"]
    names = list(settings)
    peaks, record = result["gemm_peak_gflops"], result["machine"]
    lines = [
        f"GEMM peak float32 {peaks['float32']:.0f} GFLOP/s, bfloat16 {peaks['bfloat16']:.0f} GFLOP/s; "
        f"{record['threads']} threads, torch {record['versions']['torch']}.",
        "",
        "| share of the step's operator time | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
        "| seconds per step | " + " | ".join(f"{settings[n]['seconds_per_step']:.3f}" for n in names) + " |",
        "| GFLOP/s (share of its precision's peak; without the padding's FLOPs) | "
        + " | ".join(
            f"{settings[n]['gflops_per_second']:.0f} ({settings[n]['share_of_peak']:.0%}; "
            f"{settings[n]['useful_share_of_peak']:.0%})"
            for n in names
        )
        + " |",
        "| padded tokens per step | "
        + " | ".join(f"{settings[n]['padded_tokens_per_step']:.0f}" for n in names)
        + " |",
    ]
    for category in STEP_CATEGORIES:
        cells = []
        for name in names:
            share = settings[name]["categories"].get(category, 0.0)
            cells.append(f"{share:.0%} ({share * settings[name]['profiled_seconds_per_step'] * 1000:.0f} ms)")
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def step_changes_table(result: dict) -> str:
    """The main job's bf16 training step with each of its speed-ups undone, timed side by side."""
    lines = [
        f"The main job's bf16 training step on {result['batches']} batches of a run's shapes (about "
        f"{result['padded_tokens_per_step']:.0f} padded tokens each), each variant in the same interleaved rounds; "
        f"bf16 GEMM peak {result['gemm_peak_gflops']['bfloat16']:.0f} GFLOP/s; {result['machine']['threads']} threads, "
        f"torch {result['machine']['versions']['torch']}.",
        "",
        "| training step | s/step | speed-up | GFLOP/s (share of the bf16 peak) |",
        "|---|---:|---:|---:|",
    ]
    for name, row in result["variants"].items():
        lines.append(
            f"| {name} | {row['seconds_per_step']:.3f} | {row['speedup_over_before']:.2f}x | "
            f"{row['gflops_per_second']:.0f} ({row['share_of_bf16_peak']:.0%}) |"
        )
    return "\n".join(lines) + "\n"


# inference_vs_ctranslate2_profile*.json: one column per decoding loop and setting
DECODING_PROFILES = [
    (label, f"inference_vs_ctranslate2_profile{kind}_{setting}")
    for setting in ("greedy", "beam")
    for label, kind in (("generate() loop", ""), ("native loop", "_native"), ("search graph", "_graph"))
]


def decoding_profiles_table(*documents: dict) -> str:
    """ONNX Runtime int8's breakdown of one `generate()` call in each of `DECODING_PROFILES`, side by side: one column
    per profile, headed by its setting and its decoding loop."""
    entries, columns = [], []
    for (label, _), document in zip(DECODING_PROFILES, documents, strict=True):
        [entry] = [e for e in document["profile"] if e["model"].endswith("ONNX Runtime int8")]
        setting = "batch 1 greedy" if entry["setting"] == "greedy" else "batch {batch}, beam {beams}".format(**entry)
        entries.append(entry)
        columns.append(f"{setting}, {label}")
    rows = [
        ("tokens/s (profiled call)", lambda e: f"{e['tokens_per_second']:,.0f}"),
        ("encoder graph", lambda e: f"{e['share_encoder_graph']:.0%}"),
        (
            "decoder's graph (step graph runs, or the search graph's one run)",
            lambda e: f"{e['share_decoder_graph']:.0%}",
        ),
        ("outside the graphs (Python: search, beams, cache hand-over)", lambda e: f"{e['share_outside_graphs']:.0%}"),
        (
            "decoder node time per step (search graph: its loop's nodes)",
            lambda e: f"{e['decoder_node_seconds_per_step'] * 1e3:.2f} ms",
        ),
    ]
    lines = ["| ONNX Runtime int8, one call | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {label} | " + " | ".join(value(e) for e in entries) + " |" for label, value in rows]
    return "\n".join(lines)


def read(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


TABLES = {  # a table's name -> how it renders, then the results it reads
    "main_job_runs": (runs_table, "main_job_runs", "main_job_full_validation"),
    "main_job_candidates": (candidates_table, "main_job_candidates"),
    "main_job_recipe_search": (recipe_search_table, "main_job_recipe_search"),
    "onnx_step_floor": (step_floor_table, "onnx_step_floor"),
    "gpu_step_profile": (gpu_step_profile_table, "gpu_step_profile"),
    "gpu_training_16384": (gpu_training_table, "gpu_training_and_decoding"),
    "gpu_training_65536": (gpu_training_table, "gpu_training_and_decoding_65536"),
    "gpu_decoding": (gpu_decoding_table, "gpu_training_and_decoding"),
    "training_step_profile": (step_profile_table, "training_step_profile"),
    "training_step_changes": (step_changes_table, "training_step_changes"),
    "decoding_profiles": (decoding_profiles_table, *(name for _, name in DECODING_PROFILES)),
}


def table(name: str) -> str:
    """The docs table of a finished study: `name` is its committed result (`main_job_decoding_round2`:
    `benchmarks/results/<name>.json`) or one of `TABLES`."""
    if name in TABLES:
        render, *sources = TABLES[name]
        return render(*map(read, sources))
    if name.startswith("main_job_decoding") and (RESULTS / f"{name}.json").exists():
        return decoding_table(read(name))
    raise SystemExit(f"no finished study wrote {name}.json")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the result's name: benchmarks/results/<name>.json")
    print(table(parser.parse_args(argv).name))


if __name__ == "__main__":
    main()
