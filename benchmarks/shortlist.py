#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The vocabulary shortlist on trained models (issue 64): its speed against our own search without it and against
CTranslate2 with and without its vocabulary map (`use_vmap`), and its BLEU cost on the 400 test verses.

For each `--model LABEL=DIR` (a trained checkpoint with its tokenizer): the shortlist is built from the embedded
corpus's training split in the model's tokens (`shortlist.build_shortlist`, default sizes), the model exported with it
(`export_onnx(..., shortlist=...)`, int8 graphs too), and a MarianMT of the same width, depth and parameter count
converted to CTranslate2 int8 twice, without and with the same table as its vocabulary map (in its token names; the
MarianMT has random weights: CTranslate2 is timed, not scored). Speed: the first `--batch` test verses of each setting
(batch 1 greedy, 16 and 64 with 4 beams), exactly `--new-tokens` tokens, ONNX Runtime int8 search graphs and
CTranslate2 int8 each on 1 and 2 threads, interleaved rounds, `--runs` runs back to back; a cell is the median over
runs of the median per-round time of the faster thread count, with its range. BLEU: ONNX Runtime float32 and int8,
without and with the shortlist, beam search as the model's generation config says (score.py's settings).

    python benchmarks/shortlist.py --model main_job=outputs/default --runs 3
    python benchmarks/shortlist.py --table
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch
from harness import (
    RESULTS,
    add_result_arguments,
    embedded_pairs,
    fixed_length,
    interleaved_times,
    load_check,
    machine,
    print_table,
    write_result,
)
from harness.backends import convert_to_ctranslate2, ctranslate2_names
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianMTModel

import hf_unified_mt  # noqa: F401  (registers the architectures)
from hf_unified_mt.deployment.inference import translate
from hf_unified_mt.deployment.onnx_export import export_onnx
from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM
from hf_unified_mt.deployment.shortlist import Shortlist, build_shortlist
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching
from hf_unified_mt.training.metrics import compute_translation_scores


SETTINGS = {"b1 greedy": (1, 1), "b16 beam4": (16, 4), "b64 beam4": (64, 4)}
BACKENDS = ("ours", "ours+shortlist", "ct2", "ct2+vmap")  # ONNX Runtime int8 search graphs; CTranslate2 int8
THREADS = (1, 2)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=[], metavar="LABEL=DIR", help="A trained checkpoint")
    parser.add_argument("--new-tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5, help="Interleaved rounds per run")
    parser.add_argument("--runs", type=int, default=3, help="Whole speed measurements back to back")
    parser.add_argument("--test-verses", type=int, default=400)
    parser.add_argument("--no-bleu", action="store_true", help="Speed only")
    parser.add_argument("--no-speed", action="store_true", help="BLEU only (needs no quiet machine)")
    parser.add_argument("--workdir", type=Path, help="Keep the exports and conversions here")
    add_result_arguments(parser, RESULTS / "shortlist.json")
    return parser.parse_args(argv)


def ct2_vocabulary_map(shortlist: Shortlist, vocab_size: int, path: Path) -> Path:
    """The shortlist in the token names of the converted MarianMT: the same ids, CTranslate2's file format."""
    names = ctranslate2_names(vocab_size)
    lines = ["\t" + " ".join(names[int(i)] for i in shortlist.always)]
    lines += [f"{names[key[0]]}\t" + " ".join(names[int(i)] for i in ids) for key, ids in shortlist.rules.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def ct2_translators(model, tokenizer, shortlist: Shortlist, directory: Path) -> dict:
    """(backend, threads) -> CTranslate2 int8 translator of a same-size random MarianMT, without and with the map."""
    import ctranslate2

    vocab_size, config = len(tokenizer), model.config
    marian = MarianMTModel(
        marian_config_matching(
            count_parameters(model), vocab_size, config.d_model, config.encoder_layers, config.encoder_attention_heads
        )
    )
    directory.mkdir(parents=True, exist_ok=True)
    vmap = ct2_vocabulary_map(shortlist, vocab_size, directory / "vmap.txt")
    converted = convert_to_ctranslate2(marian, directory, ("int8",), vmap)
    folders = {"ct2": converted["int8"], "ct2+vmap": converted["int8+vmap"]}
    return {
        (backend, threads): ctranslate2.Translator(str(folder), device="cpu", intra_threads=threads, inter_threads=1)
        for backend, folder in folders.items()
        for threads in THREADS
    }


def coverage(shortlist: Shortlist, tokenizer, split: str = "validation", size: int = 16) -> dict:
    """How many of a split's reference tokens are among the candidates, per batch of `size` and per sentence, and the
    mean number of candidates of each: what the shortlist can translate at best, whatever the model."""
    sources, references = embedded_pairs(split)
    found = {size: [], 1: []}
    candidates = {size: [], 1: []}
    for start in range(0, len(sources) - size + 1, size):
        batch = tokenizer(sources[start : start + size], return_tensors="np", padding=True)
        targets = tokenizer(text_target=references[start : start + size], add_special_tokens=False)["input_ids"]
        ids, mask = batch["input_ids"], batch["attention_mask"]
        allowed = shortlist.candidates(ids, mask)
        candidates[size].append(len(allowed))
        found[size] += [np.isin(row, allowed) for row in targets]
        for row in range(size):
            allowed = shortlist.candidates(ids[row : row + 1], mask[row : row + 1])
            candidates[1].append(len(allowed))
            found[1].append(np.isin(targets[row], allowed))
    return {
        f"batch {n}": dict(
            reference_tokens_covered=round(float(np.concatenate(found[n]).mean()), 4),
            candidates=round(float(np.mean(candidates[n])), 1),
        )
        for n in (1, size)
    }


def bleu_rows(folder: Path, tokenizer, sources, references) -> list[dict]:
    """BLEU of the ONNX Runtime search graphs, float32 and int8, without and with the folder's shortlist."""
    rows, plain = [], {}
    for int8 in (False, True):
        for shortlisted in (False, True):
            runtime = ORTModelForSeq2SeqLM.from_pretrained(folder, int8=int8, shortlist=True if shortlisted else None)
            hypotheses = translate(runtime, tokenizer, sources, batch_size=32)
            scores = compute_translation_scores(hypotheses, references)
            if not shortlisted:
                plain[int8] = hypotheses
            rows.append(
                dict(
                    backend=f"onnx {'int8' if int8 else 'float32'}" + (" + shortlist" if shortlisted else ""),
                    bleu=round(scores["bleu"], 2),
                    chrf=round(scores["chrf"], 2),
                    lines_differing_without_shortlist=sum(a != b for a, b in zip(hypotheses, plain[int8])),
                )
            )
    return rows


def speed_calls(folder: Path, translators: dict, shortlist, tokenizer, sources, args) -> tuple[dict, dict]:
    """setting -> {(backend, threads): call}, and setting -> the shortlist's candidates for its batch."""
    runtimes = {
        (backend, threads): ORTModelForSeq2SeqLM.from_pretrained(
            folder, int8=True, num_threads=threads, shortlist=shortlist if backend == "ours+shortlist" else None
        )
        for backend in BACKENDS[:2]
        for threads in THREADS
    }
    calls, candidates, names = {}, {}, ctranslate2_names(len(tokenizer))
    for setting, (size, beams) in SETTINGS.items():
        batch = tokenizer(sources[:size], return_tensors="pt", padding=True)
        ids, mask = batch["input_ids"], batch["attention_mask"]
        ct2_tokens = [[names[i] for i in row[keep.bool()].tolist()] for row, keep in zip(ids, mask)]
        runtime = runtimes["ours+shortlist", 1]
        candidates[setting] = len(shortlist.candidates(ids.numpy(), mask.numpy(), runtime._required_ids({})))
        options = fixed_length(args.new_tokens, beams)
        ct2_options = dict(beam_size=beams, min_decoding_length=args.new_tokens, max_decoding_length=args.new_tokens)
        setting_calls = {}
        for (backend, threads), runtime in runtimes.items():
            setting_calls[backend, threads] = lambda r=runtime, i=ids, m=mask, o=options: r.generate(
                input_ids=i, attention_mask=m, **o
            )
        for (backend, threads), translator in translators.items():
            use = backend == "ct2+vmap"
            setting_calls[backend, threads] = lambda t=translator, x=ct2_tokens, u=use, o=ct2_options: (
                t.translate_batch(x, use_vmap=u, **o)
            )
        calls[setting] = setting_calls
    return calls, candidates


def measure_model(label: str, path: Path, args, workdir: Path) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=torch.float32).eval()
    train_sources, train_targets = embedded_pairs("train")
    shortlist = build_shortlist(tokenizer, train_sources, train_targets)
    folder = export_onnx(
        model, workdir / label, tokenizer, int8=True, verify=False, overwrite=True, shortlist=shortlist
    )
    sources, references = embedded_pairs("test", args.test_verses)
    result = dict(
        label=label,
        model=str(path),
        architecture=model.config.model_type,
        vocabulary=len(tokenizer),
        shortlist=repr(shortlist),
        coverage=coverage(shortlist, tokenizer),
        bleu=[] if args.no_bleu else bleu_rows(folder, tokenizer, sources, references),
    )
    if args.no_speed:
        return result
    translators = ct2_translators(model, tokenizer, shortlist, workdir / f"{label}-ct2")
    calls, candidates = speed_calls(folder, translators, shortlist, tokenizer, sources, args)
    result["candidates"] = candidates
    runs = []
    for _ in range(args.runs):
        run = {}
        for setting, setting_calls in calls.items():
            times = interleaved_times({f"{b}@{t}": call for (b, t), call in setting_calls.items()}, args.repeats)
            run[setting] = {name: statistics.median(values) for name, values in times.items()}
        runs.append(run)
    result["runs"] = runs
    result["speed"] = speed_cells(runs)
    return result


def speed_cells(runs: list[dict]) -> dict:
    """setting -> backend -> {seconds: median over runs of the faster thread count's median, min, max, threads}, and
    the ratios of interest per run (median, min, max)."""
    cells = {}
    for setting in runs[0]:
        best = []
        for run in runs:
            best.append({b: min((run[setting][f"{b}@{t}"], t) for t in THREADS) for b in BACKENDS})
        cell = {
            backend: dict(
                seconds=statistics.median(r[backend][0] for r in best),
                min=min(r[backend][0] for r in best),
                max=max(r[backend][0] for r in best),
                threads=[r[backend][1] for r in best],
            )
            for backend in BACKENDS
        }
        ratios = {
            "shortlist_speedup": ("ours", "ours+shortlist"),
            "vs_ct2": ("ct2", "ours"),
            "vs_ct2_both_shortlisted": ("ct2+vmap", "ours+shortlist"),
            "ct2_vmap_speedup": ("ct2", "ct2+vmap"),
        }
        for name, (slow, fast) in ratios.items():
            values = [r[slow][0] / r[fast][0] for r in best]
            cell[name] = dict(median=statistics.median(values), min=min(values), max=max(values))
        cells[setting] = cell
    return cells


def ratio(cell: dict) -> str:
    return f"{cell['median']:.2f} ({cell['min']:.2f}-{cell['max']:.2f})"


def render(result: dict) -> str:
    """The speed table (ratios: median over runs, with their range) and the BLEU table, of what the JSON holds."""
    lines = []
    if any("speed" in model for model in result["models"]):
        lines += [
            "| model | setting | candidates | shortlist speed-up (ours) | ours / CT2 | ours+shortlist / CT2+vmap | "
            "CT2 vmap speed-up |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
    for model in result["models"]:
        for setting, cell in model.get("speed", {}).items():
            lines.append(
                f"| {model['label']} | {setting} | {model['candidates'][setting]} of {model['vocabulary']} | "
                f"{ratio(cell['shortlist_speedup'])} | {ratio(cell['vs_ct2'])} | "
                f"{ratio(cell['vs_ct2_both_shortlisted'])} | {ratio(cell['ct2_vmap_speedup'])} |"
            )
    if not any(model["bleu"] for model in result["models"]):  # a speed run: quality is the BLEU run's
        return "\n".join(lines)
    lines += [
        "",
        "| model | shortlist | validation reference tokens among the candidates: one sentence / a batch of 16 |",
        "|---|---|---:|",
    ]
    for model in result["models"]:
        one, sixteen = model["coverage"]["batch 1"], model["coverage"]["batch 16"]
        lines.append(
            f"| {model['label']} | {model['shortlist']} | {one['reference_tokens_covered']:.1%} of "
            f"{one['candidates']:,.0f} candidates / {sixteen['reference_tokens_covered']:.1%} of "
            f"{sixteen['candidates']:,.0f} |"
        )
    lines += [
        "",
        "| model | backend | BLEU | chrF | lines differing without the shortlist |",
        "|---|---|---:|---:|---:|",
    ]
    for model in result["models"]:
        for row in model["bleu"]:
            lines.append(
                f"| {model['label']} | {row['backend']} | {row['bleu']:.2f} | {row['chrf']:.2f} | "
                f"{row['lines_differing_without_shortlist']} |"
            )
    return "\n".join(lines).strip()


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        return print_table(args.output, render)
    if not args.model:
        raise SystemExit("give at least one --model LABEL=DIR")
    load = load_check()
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or Path(scratch)
        models = []
        for item in args.model:
            label, _, path = item.partition("=")
            models.append(measure_model(label, Path(path), args, workdir))
            print(render({"models": models}), flush=True)
    result = dict(
        machine=machine(threads=max(THREADS), packages=("onnxruntime", "ctranslate2")),
        load_before=load,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        runs=args.runs,
        models=models,
    )
    write_result(args.output, result, argv)
    print(render(result))
    return result


if __name__ == "__main__":
    main()
