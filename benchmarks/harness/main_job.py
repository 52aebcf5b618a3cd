# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""What the studies of the README's main job share (`benchmarks/studies/main_job_*.py`): the main job's
configuration and model shape, one training run of it as a user runs it, the test translations each run keeps
gzipped beside its JSON, and the paired comparison of two arms on them (seed-averaged ΔBLEU with its 95%
paired-bootstrap interval, `hf_unified_mt.analysis.significance`; the word trigrams repeated in the translations of
the longest quarter of the sources)."""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

from harness import RESULTS, ROOT
from hf_unified_mt.analysis.significance import delta_fields, paired_bootstrap_delta


MAIN_JOB = ROOT / "training" / "configs" / "cpu_default.yaml"
MAIN_JOB_SHAPE = dict(d_model=192, encoder_layers=3, decoder_layers=3, encoder_ffn_dim=768, decoder_ffn_dim=768)
# The same-size Transformer beside the main job's model: a MarianMT of the same width, depth and heads, its FFN width
# solved for the same parameter count (4.18M with the 4k vocabulary, as benchmarks/training_efficiency.py builds it).
SAME_SIZE_MARIAN = dict(
    d_model=192, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=898, decoder_ffn_dim=898,
)  # fmt: skip


def add_study_arguments(parser: argparse.ArgumentParser, study: str, seeds: list[int]) -> None:
    """The options of every study of the main job: its seeds, where its runs go (`--output_dir`), its JSON
    (`--output`), the paired bootstrap's resamples and more train.py options (for the tests' tiny runs)."""
    parser.add_argument("--seeds", type=int, nargs="+", default=seeds)
    parser.add_argument("--output_dir", type=Path, default=ROOT / "outputs" / study)
    parser.add_argument("--output", type=Path, default=RESULTS / f"{study}.json")
    parser.add_argument("--bootstrap_samples", type=int, default=1000)
    parser.add_argument("--train_options", nargs=argparse.REMAINDER, default=[], help="More train.py options (tests)")


def in_turn(names: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """(name, seed) of every run, the names alternating within each seed, so that a drift of the machine's speed
    falls on all of them."""
    return [(name, seed) for seed in seeds for name in names]


def train_main_job(folder: Path, options: list[str], label: str) -> tuple[dict, dict]:
    """`training/train.py` on the main job's configuration with `options`, into `folder`, in a child process as a
    user runs it, unless `folder` already holds a finished run; the run's `results.json` and `trainer_state.json`."""
    if not (folder / "results.json").exists() or "test" not in json.loads((folder / "results.json").read_text()):
        command = [sys.executable, str(ROOT / "training" / "train.py"), str(MAIN_JOB), *options]
        print(f"[{label}] training", flush=True)
        subprocess.run([*command, "--output_dir", str(folder)], check=True, stdout=subprocess.DEVNULL)
    return (
        json.loads((folder / "results.json").read_text()),
        json.loads((folder / "trainer_state.json").read_text()),
    )


def translations_path(output: Path, name: str, seed: int) -> Path:
    """Where the test translations of run `name`, `seed` of the study whose JSON is `output` are kept."""
    return output.with_suffix("") / f"{name}-seed{seed}.test.txt.gz"


def keep_translations(output: Path, name: str, seed: int, folder: Path, replace: bool = True) -> None:
    """The run's test translations (`folder/test_translations.txt`), gzipped to `translations_path`."""
    kept = translations_path(output, name, seed)
    if replace or not kept.exists():
        kept.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(kept, "wt", encoding="utf-8") as handle:
            handle.write((folder / "test_translations.txt").read_text(encoding="utf-8"))


def read_translations(output: Path, name: str, seed: int) -> list[str]:
    with gzip.open(translations_path(output, name, seed), "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_references(num_verses: int) -> list[str]:
    """The main job's references: the first `num_verses` pairs of the embedded corpus's test split (train.py's
    `max_test_samples`)."""
    from hf_unified_mt.training.data import load_parallel_data

    return list(load_parallel_data()["test"]["target"][:num_verses])


def repeats_trigram(text: str) -> bool:
    words = text.split()
    trigrams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return len(trigrams) != len(set(trigrams))


def longest(sources: list[str], share: float = 0.25) -> list[int]:
    """The indices of the longest `share` of the sources, in words (at least one)."""
    return sorted(range(len(sources)), key=lambda i: -len(sources[i].split()))[: max(1, round(share * len(sources)))]


def repetition_share(translations: list[str], sources: list[str], share: float = 0.25) -> float:
    """The share of the translations of the longest `share` of the sources (in words) that repeat a word trigram:
    the "Mahlah, Mahlah, Mahali" failure of long held-out verses."""
    indices = longest(sources, share)
    return sum(repeats_trigram(translations[i]) for i in indices) / len(indices)


def longest_quarter_bleu(translations: list[str], references: list[str], sources: list[str]) -> float:
    """Corpus BLEU of the translations of the longest quarter of the sources (in words): whether a change costs the
    long held-out verses what it gains elsewhere."""
    import sacrebleu

    indices = longest(sources)
    return sacrebleu.corpus_bleu([translations[i] for i in indices], [[references[i] for i in indices]]).score


def compare(result: dict, output: Path, control: str, arm: str, samples: int, key: str = "arm") -> dict:
    """ARM against CONTROL on the test verses: seed-averaged ΔBLEU with its 95% paired-bootstrap interval (the same
    resampled verses for every seed and both arms), over the seeds both have (runs named by their field `key`)."""
    seeds = sorted(
        {row["seed"] for row in result["runs"] if row[key] == control}
        & {row["seed"] for row in result["runs"] if row[key] == arm}
    )
    if not seeds:
        raise SystemExit(f"no seed has runs of both {control} and {arm}")
    translations = {name: [read_translations(output, name, seed) for seed in seeds] for name in (control, arm)}
    references = test_references(len(translations[control][0]))
    delta, low, high = paired_bootstrap_delta(translations[control], translations[arm], references, samples)
    from hf_unified_mt.training.data import load_parallel_data

    sources = list(load_parallel_data()["test"]["source"][: len(references)])
    repeats = {
        name: round(statistics.mean(repetition_share(text, sources) for text in translations[name]), 3)
        for name in (control, arm)
    }
    longest_bleu = {
        name: round(statistics.mean(longest_quarter_bleu(text, references, sources) for text in translations[name]), 2)
        for name in (control, arm)
    }
    return {
        "control": control,
        key: arm,
        "seeds": seeds,
        **delta_fields(delta, low, high),
        "longest_quarter_repeating_a_trigram": dict(
            repeats, references=round(repetition_share(references, sources), 3)
        ),
        "longest_quarter_bleu": longest_bleu,
    }


def comparison_line(row: dict, key: str = "arm") -> str:
    """A comparison of `compare` as one sentence of the docs."""
    line = (
        f"\n{row[key]} against {row['control']} on the test verses, seeds {', '.join(map(str, row['seeds']))}: "
        f"ΔBLEU {row['delta_bleu']:+.2f} ({row['interval'][0]:+.2f}, {row['interval'][1]:+.2f}), {row['verdict']}; "
        "translations of the longest quarter of the sources that repeat a word trigram: "
        + ", ".join(f"{name} {value:.1%}" for name, value in row["longest_quarter_repeating_a_trigram"].items())
    )
    if "longest_quarter_bleu" in row:  # comparisons made since it was recorded
        line += "; BLEU of the longest quarter (mean over seeds): " + ", ".join(
            f"{name} {value:.2f}" for name, value in row["longest_quarter_bleu"].items()
        )
    return line
