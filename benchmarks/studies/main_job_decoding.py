#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Decoding options for the README's main job, chosen on validation: does a repetition or length constraint help?

The main job's translations of long held-out verses repeat names and phrases ("Mahlah, Mahlah, Mahali"): of the
longest quarter of the test sources, about 85% of its translations repeat a word trigram, against 29% of the
references. `generate()` has constraints for it (`no_repeat_ngram_size`, `repetition_penalty`) and a length
preference (`length_penalty`). Each option here decodes the validation verses with beam 4 with models the recipe
search trained (`main_job_recipe_search.py`, one per seed); the option with the best mean validation BLEU is then
compared with plain beam search on the test verses (paired bootstrap over the verses, all seeds), and the trigram
repetitions of the longest quarter are counted as the recipe search counts them.

    python benchmarks/studies/main_job_decoding.py                      # the current recipe's models, seeds 1 and 2
    python benchmarks/studies/main_job_decoding.py --table              # the docs table of the committed JSON

A second round starts from the first round's pick, with the main job's own models (`main_job_runs.py`):

    python benchmarks/studies/main_job_decoding.py --round 2 --runs_dir outputs/main_job_runs --arm bf16 \
        --output benchmarks/results/main_job_decoding_round2.json

A third round keeps beam 4 and tries the length preference and repetition options around the second round's control,
with the models of the main job's configuration (three seeds):

    python benchmarks/studies/main_job_decoding.py --round 3 --runs_dir outputs/main_job_runs \
        --arm bf16-max-tokens-3200 --seeds 1 2 3 --output benchmarks/results/main_job_decoding_round3.json
"""

import argparse
import statistics
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import RESULTS, ROOT, machine, print_table, write_result
from harness.main_job import repetition_share
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_unified_mt  # noqa: F401  (registers the package's architectures with the Auto classes)
from hf_unified_mt.analysis.significance import delta_fields, paired_bootstrap_delta
from hf_unified_mt.deployment.inference import translate
from hf_unified_mt.training.data import load_parallel_data
from hf_unified_mt.training.metrics import compute_translation_scores


# name -> generate() options added to beam search with 4 beams (the main job's decoding)
OPTIONS = {
    "beam 4": {},
    "no_repeat_ngram_size 3": {"no_repeat_ngram_size": 3},
    "no_repeat_ngram_size 4": {"no_repeat_ngram_size": 4},
    "repetition_penalty 1.2": {"repetition_penalty": 1.2},
    "length_penalty 0.6": {"length_penalty": 0.6},
}
# the second round: around the first round's pick (no repeated 4-grams), which is its control
NO_REPEAT_4 = {"no_repeat_ngram_size": 4}
ROUND_2 = {
    "no_repeat_ngram_size 4": NO_REPEAT_4,
    "no_repeat_ngram_size 5": {"no_repeat_ngram_size": 5},
    "no_repeat_ngram_size 4, repetition_penalty 1.1": {**NO_REPEAT_4, "repetition_penalty": 1.1},
    "no_repeat_ngram_size 4, repetition_penalty 1.2": {**NO_REPEAT_4, "repetition_penalty": 1.2},
    "no_repeat_ngram_size 4, beam 6": {**NO_REPEAT_4, "num_beams": 6},
}
# the third: the recipe's beam 4 with no repeated 4-grams again (the target is stated at beam 4), now with the length
# preference and the repetition options around it, on the models of the main job's configuration
ROUND_3 = {
    "no_repeat_ngram_size 4": NO_REPEAT_4,
    "no_repeat_ngram_size 4, length_penalty 0.8": {**NO_REPEAT_4, "length_penalty": 0.8},
    "no_repeat_ngram_size 4, length_penalty 1.2": {**NO_REPEAT_4, "length_penalty": 1.2},
    "no_repeat_ngram_size 4, length_penalty 1.5": {**NO_REPEAT_4, "length_penalty": 1.5},
    "no_repeat_ngram_size 4, repetition_penalty 1.2": {**NO_REPEAT_4, "repetition_penalty": 1.2},
    "no_repeat_ngram_size 5": {"no_repeat_ngram_size": 5},
    "no_repeat_ngram_size 5, repetition_penalty 1.2": {"no_repeat_ngram_size": 5, "repetition_penalty": 1.2},
}
ROUNDS = {1: (OPTIONS, "beam 4"), 2: (ROUND_2, "no_repeat_ngram_size 4"), 3: (ROUND_3, "no_repeat_ngram_size 4")}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", default="linear-2e-3-dropout-0", help="The recipe search's arm whose models decode")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--round", type=int, default=1, choices=sorted(ROUNDS), help="1: against plain beam search")
    parser.add_argument("--options", nargs="+", help="Options of the round to try (default: all of them)")
    parser.add_argument("--runs_dir", type=Path, default=ROOT / "outputs" / "main_job_recipe_search")
    parser.add_argument("--verses", type=int, default=400, help="Validation and test verses (the main job's 400)")
    parser.add_argument("--bootstrap_samples", type=int, default=1000)
    parser.add_argument("--output", type=Path, default=RESULTS / "main_job_decoding.json")
    parser.add_argument("--table", action="store_true", help="Print the docs table of --output and exit")
    return parser.parse_args(argv)


def decode(model, tokenizer, sources: list[str], options: dict) -> tuple[list[str], float]:
    start = time.perf_counter()
    hypotheses = translate(model, tokenizer, sources, batch_size=32, **{"num_beams": 4, **options})
    return hypotheses, time.perf_counter() - start


def table(result: dict) -> str:
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
        f"{', '.join(f'{v:.2f}' for v in test['beam_bleu'])}, ΔBLEU {test['delta_bleu']:+.2f} "
        f"({test['interval'][0]:+.2f}, {test['interval'][1]:+.2f}), {test['verdict']}; translations of the longest "
        f"quarter of the sources that repeat a word trigram: {test['pick_repeats']:.1%} against "
        f"{test['beam_repeats']:.1%} (references {test['reference_repeats']:.1%})."
    )
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.table:
        return print_table(args.output, table)
    options, control = ROUNDS[args.round]
    unknown = sorted(set(args.options or []) - set(options))
    if unknown:
        raise SystemExit(f"round {args.round} has no option(s) {unknown}; choose from {sorted(options)}")
    names = [control, *(name for name in (args.options or options) if name != control)]
    corpus = load_parallel_data()
    validation = corpus["validation"][: args.verses]
    test = corpus["test"][: args.verses]
    models = {}
    for seed in args.seeds:
        folder = args.runs_dir / f"{args.arm}-seed{seed}"
        if not (folder / "model.safetensors").exists():
            raise SystemExit(f"{folder} holds no trained model: run main_job_recipe_search.py --arms {args.arm} first")
        models[seed] = (AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder))

    scores = {}
    for name in names:
        rows = scores[name] = {"bleu": [], "seconds": []}
        for seed, (model, tokenizer) in models.items():
            hypotheses, seconds = decode(model, tokenizer, validation["source"], options[name])
            rows["bleu"].append(round(compute_translation_scores(hypotheses, validation["target"])["bleu"], 2))
            rows["seconds"].append(round(seconds, 1))
            print(f"[{name}, seed {seed}] validation BLEU {rows['bleu'][-1]} ({seconds:.0f} s)", flush=True)
        rows["mean_bleu"] = round(statistics.mean(rows["bleu"]), 2)

    pick = max((name for name in scores if name != control), key=lambda name: scores[name]["mean_bleu"])
    on_test = {
        name: [decode(model, tokenizer, test["source"], options[name])[0] for model, tokenizer in models.values()]
        for name in (control, pick)
    }
    references = list(test["target"])
    delta, low, high = paired_bootstrap_delta(on_test[control], on_test[pick], references, args.bootstrap_samples)

    def bleu(translations):
        return [round(compute_translation_scores(t, references)["bleu"], 2) for t in translations]

    def repeats(translations):
        return round(statistics.mean(repetition_share(t, list(test["source"])) for t in translations), 3)

    result = dict(
        arm=args.arm,
        seeds=args.seeds,
        verses=args.verses,
        validation=scores,
        test=dict(
            control=control,
            pick=pick,
            beam_bleu=bleu(on_test[control]),  # the control's (plain beam search in round 1)
            pick_bleu=bleu(on_test[pick]),
            **delta_fields(delta, low, high),
            beam_repeats=repeats(on_test[control]),
            pick_repeats=repeats(on_test[pick]),
            reference_repeats=round(repetition_share(references, list(test["source"])), 3),
        ),
        machine=machine(),
    )
    write_result(args.output, result, argv, indent=1)
    print(table(result))
    return result


if __name__ == "__main__":
    main()
