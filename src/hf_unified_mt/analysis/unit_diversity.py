# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Unit-diversity analysis of paper 002 (Multi-Unit Transformer, §5.6, Eq. 21, Table 6).

The encoder of each model reads the source sentences of a dataset in eval mode (no bias-module noise, no dropout).
In every multi-unit encoder layer, for every real source token and every pair of units i < j, the diversity of two
unit outputs o_i, o_j is

    DIV = exp(-cos(o_i, o_j))                                                           (Eq. 21; Li et al. 2018)

in (e^-1, e): e^-1 = 0.368 for identical outputs, 1 for orthogonal ones, larger the more they disagree. It is
computed for three outputs, as in Table 6:

* Att Pos.: the attention weights of the token's query over the source positions (averaged over the unit's heads, so
  that the score does not depend on how heads happen to be numbered in each unit);
* Att Sub.: the output of the unit's self-attention (after its output projection, before the residual);
* FFN Sub.: the output of the unit's FFN (before the residual).

Scores are averaged over the unit pairs and the real tokens of the whole dataset, per layer and over all layers.
Prints a table and writes `unit_diversity.json` to `--output_dir`.

Models are directories of saved models (e.g. from `training/train.py --arch multi_unit_transformer`; their tokenizer
is used when they have one) or preset specifications `PRESET[:field=value,...]` of `--arch`, freshly initialised with
`--seed` (a sanity check of the tool, not of the paper: Table 6 measures trained models)::

    python training/unit_diversity.py --models outputs/mute outputs/mute-bias-seq --output_dir outputs/diversity
    python training/unit_diversity.py --models small small:use_bias_module=true,use_sequential_dependency=true

The data default to the validation split of the embedded Spanish→English corpus (`--data_file` for another TSV(.gz)
with a header; `--source_field` picks the column). Without `--tokenizer` (and without a tokenizer in the model
directory) a BPE tokenizer of `--tokenizer_vocab_size` is trained on the fly on the corpus' train split.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerBase

import hf_unified_mt
from hf_unified_mt.analysis.model_specs import parse_model_spec
from hf_unified_mt.training.tokenization import train_tokenizer
from hf_unified_mt.utils.files import write_text


MEASURES = ("att_pos", "att_sub", "ffn_sub")
HEADERS = {"att_pos": "Att Pos.", "att_sub": "Att Sub.", "ffn_sub": "FFN Sub."}
DEFAULT_MODELS = ["small", "small:use_bias_module=true", "small:use_bias_module=true,use_sequential_dependency=true"]


# ------------------------------------------------------------------------------------------------ data and models


def corpus_dir() -> Path:
    """The embedded Bible corpus of the package."""
    return Path(hf_unified_mt.__file__).parent / "training" / "corpora" / "bible_es_en"


def read_column(path: Path, field: str, limit: int | None = None) -> list[str]:
    """One column of a TSV(.gz) file with a header row."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n").split("\t")
        if field not in header:
            raise ValueError(f"{path}: no column {field!r} in the header {header}")
        column = header.index(field)
        texts = []
        for number, line in enumerate(handle, start=2):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != len(header):
                raise ValueError(f"{path}, line {number}: {len(fields)} fields, the header has {len(header)}")
            texts.append(fields[column])
            if limit is not None and len(texts) == limit:
                break
    return texts


def load_tokenizer(args, model_dir: str | None) -> PreTrainedTokenizerBase | None:
    for candidate in (args.tokenizer, model_dir):
        if candidate and (Path(candidate) / "tokenizer.json").exists():
            return AutoTokenizer.from_pretrained(candidate, local_files_only=True)
    return None


def build_model(spec: str, arch: str, vocab_size: int, seed: int, tokenizer) -> nn.Module:
    if os.path.isdir(spec):
        return AutoModelForSeq2SeqLM.from_pretrained(spec)
    preset, overrides = parse_model_spec(spec)
    token_ids = dict(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(seed)
    config = hf_unified_mt.get_config(arch, preset, vocab_size=vocab_size, **token_ids, **overrides)
    return AutoModelForSeq2SeqLM.from_config(config)


# ------------------------------------------------------------------------------------------------ the measure


def pairwise_diversity(unit_outputs: torch.Tensor, valid: torch.Tensor) -> tuple[float, int]:
    """Σ over real tokens and unit pairs i < j of exp(-cos(o_i, o_j)) (Eq. 21), and the number of terms.

    `unit_outputs` `[I, B, T, n]`, `valid` `[B, T]` bool."""
    units = unit_outputs.shape[0]
    if units < 2:
        return 0.0, 0
    normalised = nn.functional.normalize(unit_outputs.float(), dim=-1)
    cosine = torch.einsum("ibtn,jbtn->btij", normalised, normalised)
    pairs = torch.triu(torch.ones(units, units, dtype=torch.bool, device=cosine.device), diagonal=1)
    diversity = torch.exp(-cosine[..., pairs])  # [B, T, pairs]
    diversity = diversity[valid]
    return diversity.sum().item(), diversity.numel()


class DiversityRecorder:
    """Forward hooks on the units' self-attention and FFN modules of every multi-unit encoder layer."""

    def __init__(self, encoder: nn.Module):
        self.layers = [
            layer
            for layer in encoder.layers
            if hasattr(layer, "self_attn") and hasattr(layer, "ffn") and getattr(layer, "num_units", 0)
        ]
        if not self.layers:
            raise ValueError(f"{type(encoder).__name__} has no multi-unit layers to analyse")
        self.sums = [dict.fromkeys(MEASURES, 0.0) for _ in self.layers]
        self.counts = [dict.fromkeys(MEASURES, 0) for _ in self.layers]
        self.valid: torch.Tensor | None = None
        self.handles = []
        for index, layer in enumerate(self.layers):
            self.handles.append(layer.self_attn.register_forward_hook(self._attention_hook(index)))
            self.handles.append(layer.ffn.register_forward_hook(self._ffn_hook(index)))

    def _add(self, index: int, measure: str, unit_outputs: torch.Tensor) -> None:
        total, count = pairwise_diversity(unit_outputs, self.valid)
        self.sums[index][measure] += total
        self.counts[index][measure] += count

    def _attention_hook(self, index: int):
        def hook(module, args, output):
            outputs, _, unit_weights = output  # [I, B, T, d], mean map [B, H, T, S], per unit [B, I, H, T, S]
            per_unit = unit_weights.mean(dim=2).transpose(0, 1)
            self._add(index, "att_pos", per_unit)
            self._add(index, "att_sub", outputs)

        return hook

    def _ffn_hook(self, index: int):
        def hook(module, args, output):
            self._add(index, "ffn_sub", output)

        return hook

    def results(self) -> dict:
        layers = []
        for index, (sums, counts) in enumerate(zip(self.sums, self.counts)):
            scores = {m: (sums[m] / counts[m] if counts[m] else None) for m in MEASURES}
            layers.append({"layer": index, "num_units": self.layers[index].num_units, **scores})
        mean = {}
        for measure in MEASURES:
            values = [layer[measure] for layer in layers if layer[measure] is not None]
            mean[measure] = sum(values) / len(values) if values else None
        return {"layers": layers, "mean": mean}

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


@torch.no_grad()
def unit_diversity(
    model: nn.Module, tokenizer, sentences: list[str], batch_size: int = 32, max_length: int = 128, device: str = "cpu"
) -> dict:
    """Eq. (21) per layer over `sentences` (the encoder in eval mode)."""
    model = model.to(device).eval()
    encoder = model.get_encoder()
    recorder = DiversityRecorder(encoder)
    tokens = 0
    try:
        # Sorted by length so that batches carry little padding; the scores do not depend on the batching.
        ordered = sorted(sentences, key=lambda s: len(tokenizer(s)["input_ids"]))
        for start in range(0, len(ordered), batch_size):
            batch = tokenizer(
                ordered[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=max_length,
            ).to(device)
            recorder.valid = batch["attention_mask"].bool()
            tokens += int(recorder.valid.sum())
            encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    finally:
        recorder.remove()
    return {**recorder.results(), "num_sentences": len(sentences), "num_tokens": tokens}


# ------------------------------------------------------------------------------------------------ report


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_table(results: dict[str, dict]) -> str:
    """One row per model and layer, plus the mean over layers (the figure Table 6 reports)."""
    name_width = max(len("model"), *(len(name) for name in results))
    header = f"{'model':<{name_width}}  {'layer':>5}  " + "  ".join(f"{HEADERS[m]:>8}" for m in MEASURES)
    lines = [header, "-" * len(header)]
    for name, result in results.items():
        for layer in result["layers"] + [{"layer": "mean", **result["mean"]}]:
            scores = "  ".join(f"{_fmt(layer[m]):>8}" for m in MEASURES)
            lines.append(f"{name:<{name_width}}  {layer['layer']:>5}  {scores}")
    lines.append(f"(exp(-cos) over unit pairs and real source tokens; identical units give {math.exp(-1):.3f})")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--models",
        nargs="+",
        default=DEFAULT_MODELS,
        help="Saved model directories or preset specs PRESET[:field=value,...]",
    )
    parser.add_argument("--arch", default="multi_unit_transformer", help="Architecture of the preset specs")
    parser.add_argument("--seed", type=int, default=0, help="Initialisation seed of preset models")
    parser.add_argument(
        "--data_file",
        type=Path,
        default=None,
        help="TSV(.gz) with a header (default: the embedded corpus' validation split)",
    )
    parser.add_argument("--source_field", default="es")
    parser.add_argument("--target_field", default="en", help="Used with --source_field to train a tokenizer")
    parser.add_argument("--max_sentences", type=int, default=500, help="Sentences of the data file to analyse")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_length", type=int, default=128, help="Truncate sentences to this many tokens")
    parser.add_argument("--tokenizer", default=None, help="Directory of a saved tokenizer")
    parser.add_argument(
        "--tokenizer_vocab_size", type=int, default=8000, help="Size of the tokenizer trained on the fly"
    )
    parser.add_argument(
        "--tokenizer_training_pairs",
        type=int,
        default=None,
        help="Train the on-the-fly tokenizer on the first N pairs of the train split (default: all)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/unit_diversity"))
    return parser


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    data_file = args.data_file or corpus_dir() / "valid.tsv.gz"
    sentences = read_column(data_file, args.source_field, args.max_sentences)
    trained_tokenizer = None
    results = {}
    for spec in args.models:
        tokenizer = load_tokenizer(args, spec if os.path.isdir(spec) else None)
        if tokenizer is None:
            if trained_tokenizer is None:
                train_file = corpus_dir() / "train.tsv.gz" if args.data_file is None else data_file
                texts = read_column(train_file, args.source_field, args.tokenizer_training_pairs)
                texts += read_column(train_file, args.target_field, args.tokenizer_training_pairs)
                trained_tokenizer = train_tokenizer(texts, vocab_size=args.tokenizer_vocab_size)
            tokenizer = trained_tokenizer
        model = build_model(spec, args.arch, len(tokenizer), args.seed, tokenizer)
        results[spec] = unit_diversity(model, tokenizer, sentences, args.batch_size, args.max_length, args.device)
    print(format_table(results))
    args.output_dir.mkdir(parents=True, exist_ok=True)
    report = {"data_file": str(data_file), "source_field": args.source_field, "models": results}
    write_text(args.output_dir / "unit_diversity.json", json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
