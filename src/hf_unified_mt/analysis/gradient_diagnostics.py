# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Gradient-norm diagnostics of paper 001 (Zhang, Titov & Sennrich 2019): Figure 1 and Table 1.

For one batch of real sentence pairs (about 3k target tokens, as in the paper) and one or more freshly initialised
or saved models, it computes, from a single backward pass of the cross-entropy loss:

* the gradient norm of each encoder and decoder layer (the norm of the gradient of all the layer's parameters,
  Figure 1): in a deep post-norm Transformer without DS-Init it shrinks from the top layer to the bottom one;
* for every residual block o = LN(r), r = z + f(z) (Eq. 10-11), the error-signal ratios of Eq. 14,
  β_LN = |δ_r| / |δ_o| (LayerNorm), β_RC = |δ_z| / |δ_r| (residual connection), β = |δ_z| / |δ_o| (whole block), and
  the output variance Var(r) of the residual connection (mean over tokens of the variance over channels), all also
  averaged over the layers of each stack and sublayer type (Table 1). Norms are over the whole batch tensor (padded
  positions carry no gradient). Pre-norm blocks (o = z + f(LN(z))) have no LayerNorm after the residual: there only
  β is given;
* the ratio of the lowest layer's gradient norm to the highest layer's, per stack.

Prints the tables, writes `gradient_diagnostics.json` and, when matplotlib is importable, `gradient_norms.png`
(Figure 1: gradient norm per layer, one line per model) to `--output_dir`.

Models are preset specifications `PRESET[:field=value,...]` of `--arch` (default `deep_transformer`), freshly
initialised with `--seed`, or directories of saved models (their tokenizer is used when they have one). Default: the
paper's Figure 1 comparison, the vanilla 12+12-layer post-norm Transformer (d 512, standard self-attention decoder)
without and with DS-Init::

    python training/gradient_diagnostics.py --output_dir outputs/gradient_diagnostics
    python training/gradient_diagnostics.py --models base:init_law=xavier base deep-12:init_law=xavier deep-12 \\
        --config_overrides '{"decoder_attention_type": "self"}' --max_target_tokens 3000
    python training/gradient_diagnostics.py --models outputs/my_run --tokenizer outputs/my_run

The data default to the train split of the embedded Spanish→English corpus (`--data_file` for another TSV with a
header; `--source_field/--target_field` pick the columns). Without `--tokenizer` (and without a tokenizer in the
model directory) a BPE tokenizer of `--tokenizer_vocab_size` is trained on the fly on that file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerBase

import hf_unified_mt
from hf_unified_mt.analysis.model_specs import parse_model_spec
from hf_unified_mt.modeling_decoder_variants import AAN, MergedAttention
from hf_unified_mt.modeling_mt_common import ResidualSublayer
from hf_unified_mt.training.tokenization import train_tokenizer
from hf_unified_mt.utils.files import atomic_write, write_text


CORPUS_FILE = Path("bible_es_en") / "train.tsv.gz"
CORPUS_LOCATIONS = (Path(hf_unified_mt.__file__).resolve().parent / "training" / "corpora",)
# Figure 1: the vanilla 12+12-layer post-norm Transformer without and with DS-Init.
DEFAULT_MODELS = [
    "deep-12:init_law=xavier,decoder_attention_type=self",
    "deep-12:init_law=ds_init,decoder_attention_type=self",
]


# ---------------------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------------------


def default_data_file() -> Path:
    """The embedded corpus's train split (package copy first, then the shared data directory)."""
    for location in CORPUS_LOCATIONS:
        if (location / CORPUS_FILE).exists():
            return location / CORPUS_FILE
    raise FileNotFoundError(f"{CORPUS_FILE} not found under {[str(p) for p in CORPUS_LOCATIONS]}; pass --data_file")


def read_pairs(path: Path, source_field: str, target_field: str) -> list[tuple[str, str]]:
    """Sentence pairs of a (gzipped) TSV file with a header line; no quoting."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n").split("\t")
        missing = [name for name in (source_field, target_field) if name not in header]
        if missing:
            raise ValueError(f"{path}: no column {missing} in the header {header}")
        source, target = header.index(source_field), header.index(target_field)
        pairs = []
        for number, line in enumerate(handle, start=2):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != len(header):
                raise ValueError(f"{path}, line {number}: {len(fields)} fields, expected {len(header)}")
            if fields[source].strip() and fields[target].strip():
                pairs.append((fields[source], fields[target]))
    return pairs


def build_batch(
    pairs: list[tuple[str, str]],
    tokenizer: PreTrainedTokenizerBase,
    max_target_tokens: int,
    max_length: int,
    seed: int,
) -> dict[str, torch.Tensor]:
    """A batch of randomly chosen pairs (fixed by `seed`) holding about `max_target_tokens` target tokens; sentences
    longer than `max_length` tokens are truncated. Labels are -100 on padding."""
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    sources, targets, target_tokens = [], [], 0
    for index in order:
        if target_tokens >= max_target_tokens:
            break
        source, target = pairs[index]
        sources.append(source)
        targets.append(target)
        target_tokens += min(len(tokenizer(target)["input_ids"]), max_length)
    batch = tokenizer(
        sources, text_target=targets, max_length=max_length, truncation=True, padding=True, return_tensors="pt"
    )
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    return {key: batch[key] for key in ("input_ids", "attention_mask", "labels")}


# ---------------------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------------------


def build_model(spec: str, arch: str, vocab_size: int, seed: int, config_overrides: dict) -> nn.Module:
    """A saved model (a directory) or a freshly initialised one from a preset spec."""
    if Path(spec).is_dir():
        return AutoModelForSeq2SeqLM.from_pretrained(spec)
    preset, overrides = parse_model_spec(spec)
    config = hf_unified_mt.get_config(arch, preset, vocab_size=vocab_size, **{**config_overrides, **overrides})
    torch.manual_seed(seed)
    return AutoModelForSeq2SeqLM.from_config(config)


def load_tokenizer(args) -> PreTrainedTokenizerBase | None:
    for candidate in [args.tokenizer] + [spec for spec in args.models if Path(spec).is_dir()]:
        if candidate and (Path(candidate) / "tokenizer.json").exists():
            return AutoTokenizer.from_pretrained(candidate, local_files_only=True)
    if args.tokenizer:
        raise FileNotFoundError(f"No tokenizer.json in {args.tokenizer}")
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Diagnostics
# ---------------------------------------------------------------------------------------------------------------------


def sublayer_kind(layer: nn.Module, attribute: str) -> str:
    """Table 1's column of a residual block: self / cross / ffn, or aan / merged for paper 001's decoder sublayers."""
    module = getattr(layer, attribute.removesuffix("_sublayer"), None)
    if isinstance(module, MergedAttention):
        return "merged"
    if isinstance(module, AAN):
        return "aan"
    return {"self_attn": "self", "encoder_attn": "cross", "ffn": "ffn"}.get(
        attribute.removesuffix("_sublayer"), attribute
    )


class BlockProbe:
    """Captures z (block input), r (residual output, LayerNorm input) and o (block output) of one residual block
    during the forward pass and keeps their gradients. `layer` is 1-based; `padding_mask` ([B, T], 1 = token) selects
    the positions over which Var(r) is averaged."""

    def __init__(self, stack: str, layer: int, kind: str, padding_mask: torch.Tensor | None = None):
        self.stack, self.layer, self.kind, self.padding_mask = stack, layer, kind, padding_mask
        self.tensors: dict[str, torch.Tensor] = {}

    def attach(self, block: ResidualSublayer) -> list:
        handles = [block.register_forward_hook(self._on_block)]
        if not block.pre_norm:
            handles.append(block.layer_norm.register_forward_hook(self._on_norm))
        return handles

    def _keep(self, name: str, tensor: torch.Tensor) -> None:
        if tensor.requires_grad:
            tensor.retain_grad()
        self.tensors[name] = tensor

    def _on_block(self, module, args, output):
        self._keep("z", args[0])
        self._keep("o", output)

    def _on_norm(self, module, args, output):
        self._keep("r", args[0])

    def measures(self) -> dict:
        grads = {name: tensor.grad for name, tensor in self.tensors.items()}
        if any(g is None for g in grads.values()):
            raise RuntimeError(f"{self.stack} layer {self.layer} {self.kind}: no gradient reached this block")
        norm = {name: g.float().norm().item() for name, g in grads.items()}
        result = dict(
            stack=self.stack,
            layer=self.layer,
            kind=self.kind,
            beta=_ratio(norm["z"], norm["o"]),
            beta_ln=None,
            beta_rc=None,
            var_r=None,
        )
        if "r" in norm:  # post-norm: Eq. (14)
            result["beta_ln"] = _ratio(norm["r"], norm["o"])
            result["beta_rc"] = _ratio(norm["z"], norm["r"])
            r = self.tensors["r"].detach().float()
            variances = r.var(dim=-1, unbiased=False)
            if self.padding_mask is not None:
                variances = variances[self.padding_mask.bool()]
            result["var_r"] = variances.mean().item()
        return result


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.nan


def _stacks(model: nn.Module) -> dict[str, nn.Module]:
    return {"encoder": model.get_encoder(), "decoder": model.get_decoder()}


def gradient_diagnostics(model: nn.Module, batch: dict[str, torch.Tensor], train_mode: bool = False) -> dict:
    """Per-layer gradient norms and per-block ratios (Eq. 14) of `model` on `batch` (input_ids, attention_mask,
    labels), from one forward/backward pass. The model's gradients are cleared before and after."""
    model.train(train_mode)
    model.zero_grad(set_to_none=True)
    target_mask = batch["labels"] != -100
    masks = {"encoder": batch["attention_mask"], "decoder": target_mask}
    probes, handles = [], []
    for stack_name, stack in _stacks(model).items():
        for index, layer in enumerate(stack.layers, start=1):
            for attribute, block in layer.named_children():
                if isinstance(block, ResidualSublayer):
                    probe = BlockProbe(stack_name, index, sublayer_kind(layer, attribute), masks[stack_name])
                    handles += probe.attach(block)
                    probes.append(probe)
    try:
        loss = model(**batch).loss
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()

    layer_norms = {}
    for stack_name, stack in _stacks(model).items():
        layer_norms[stack_name] = [
            math.sqrt(sum(p.grad.float().pow(2).sum().item() for p in layer.parameters() if p.grad is not None))
            for layer in stack.layers
        ]
    blocks = [probe.measures() for probe in probes]
    model.zero_grad(set_to_none=True)
    return dict(
        loss=loss.item(),
        source_tokens=int(batch["attention_mask"].sum()),
        target_tokens=int(target_mask.sum()),
        layer_gradient_norms=layer_norms,
        lowest_to_highest_layer=({name: _ratio(norms[0], norms[-1]) for name, norms in layer_norms.items()}),
        blocks=blocks,
        averages=average_blocks(blocks),
    )


def average_blocks(blocks: list[dict]) -> dict:
    """Table 1: each measure averaged over the layers of a stack, per sublayer type."""
    averages = {}
    for block in blocks:
        entry = averages.setdefault(block["stack"], {}).setdefault(block["kind"], {})
        for key in ("beta_ln", "beta_rc", "beta", "var_r"):
            if block[key] is not None:
                entry.setdefault(key, []).append(block[key])

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    return {
        stack: {kind: {key: mean(values) for key, values in entry.items()} for kind, entry in kinds.items()}
        for stack, kinds in averages.items()
    }


# ---------------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------------


def format_layer_table(results: dict[str, dict]) -> str:
    names = list(results)
    width = max(12, *(len(name) + 2 for name in names))
    lines = []
    for stack in ("encoder", "decoder"):
        depth = max(len(r["layer_gradient_norms"][stack]) for r in results.values())
        header = f"{stack + ' layer':<14}" + "".join(f"{name:>{width}}" for name in names)
        lines += [header, "-" * len(header)]
        for i in range(depth):
            cells = []
            for name in names:
                norms = results[name]["layer_gradient_norms"][stack]
                cells.append(f"{norms[i]:>{width}.4e}" if i < len(norms) else " " * width)
            lines.append(f"{i + 1:<14}" + "".join(cells))
        ratios = "".join(f"{results[n]['lowest_to_highest_layer'][stack]:>{width}.3f}" for n in names)
        lines += [f"{'lowest/highest':<14}" + ratios, ""]
    return "\n".join(lines)


def format_ratio_table(results: dict[str, dict]) -> str:
    """Table 1 layout: one block of rows per model and stack, one column per sublayer type."""
    lines = []
    width = max(12, *(len(f"{name} / encoder") + 2 for name in results))
    for name, result in results.items():
        for stack, kinds in result["averages"].items():
            columns = list(kinds)
            lines.append(f"{name + ' / ' + stack:<{width}}" + "".join(f"{kind:>10}" for kind in columns))
            for key, label in (("var_r", "Var(r)"), ("beta_ln", "beta_LN"), ("beta_rc", "beta_RC"), ("beta", "beta")):
                cells = "".join(
                    f"{kinds[kind][key]:>10.3f}" if key in kinds[kind] else f"{'-':>10}" for kind in columns
                )
                lines.append(f"{'  ' + label:<{width}}" + cells)
        lines.append("")
    return "\n".join(lines)


def plot(results: dict[str, dict], path: Path) -> bool:
    """Figure 1: gradient norm per layer, encoder above decoder. False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    for axis, stack in zip(axes, ("encoder", "decoder")):
        for name, result in results.items():
            norms = result["layer_gradient_norms"][stack]
            axis.plot(range(1, len(norms) + 1), norms, marker="o", label=name)
        axis.set_ylabel(f"{stack} gradient norm")
        axis.set_yscale("log")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel("layer (1 = lowest)")
    figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120)
    plt.close(figure)
    return True


# ---------------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--models",
        nargs="+",
        default=DEFAULT_MODELS,
        help="Preset specs PRESET[:field=value,...] or saved model directories (default: %(default)s)",
    )
    parser.add_argument("--arch", default="deep_transformer", help="Architecture of the preset specs")
    parser.add_argument(
        "--config_overrides",
        type=json.loads,
        default={},
        help="JSON of config fields applied to every preset spec (the spec's own fields win)",
    )
    parser.add_argument("--seed", type=int, default=0, help="Initialisation seed of preset models and batch choice")
    parser.add_argument(
        "--data_file",
        type=Path,
        default=None,
        help="TSV(.gz) with a header line (default: the embedded corpus's train split)",
    )
    parser.add_argument("--source_field", default="es")
    parser.add_argument("--target_field", default="en")
    parser.add_argument("--max_target_tokens", type=int, default=3000, help="Target tokens in the batch (paper: ~3k)")
    parser.add_argument("--max_length", type=int, default=128, help="Truncate sentences to this many tokens")
    parser.add_argument("--tokenizer", default=None, help="Directory of a saved tokenizer")
    parser.add_argument(
        "--tokenizer_vocab_size", type=int, default=8000, help="Vocabulary size of the tokenizer trained on the fly"
    )
    parser.add_argument(
        "--tokenizer_training_pairs",
        type=int,
        default=None,
        help="Train the on-the-fly tokenizer on the first N pairs only (default: all)",
    )
    parser.add_argument("--train_mode", action="store_true", help="Keep dropout on (default: off, deterministic)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/gradient_diagnostics"))
    return parser


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    data_file = args.data_file or default_data_file()
    pairs = read_pairs(data_file, args.source_field, args.target_field)
    tokenizer = load_tokenizer(args)
    if tokenizer is None:
        training_pairs = pairs[: args.tokenizer_training_pairs] if args.tokenizer_training_pairs else pairs
        tokenizer = train_tokenizer((text for pair in training_pairs for text in pair), args.tokenizer_vocab_size)
        print(f"trained a BPE tokenizer of {len(tokenizer)} types on {len(training_pairs)} pairs of {data_file}")

    results, batch = {}, None
    for spec in args.models:
        model = build_model(spec, args.arch, len(tokenizer), args.seed, args.config_overrides)
        vocab_size = min(model.config.vocab_size, getattr(model.config, "decoder_vocab_size", None) or math.inf)
        if len(tokenizer) > vocab_size:
            raise ValueError(
                f"{spec}: the tokenizer has {len(tokenizer)} types but the model's vocabulary is smaller; "
                "pass the tokenizer the model was trained with (--tokenizer)"
            )
        if batch is None:
            max_length = min(args.max_length, model.config.max_position_embeddings)
            batch = build_batch(pairs, tokenizer, args.max_target_tokens, max_length, args.seed)
        model.to(args.device)
        on_device = {key: value.to(args.device) for key, value in batch.items()}
        results[spec] = gradient_diagnostics(model, on_device, train_mode=args.train_mode)
        results[spec]["config"] = {
            key: getattr(model.config, key, None)
            for key in (
                "model_type",
                "d_model",
                "encoder_layers",
                "decoder_layers",
                "normalize_before",
                "decoder_attention_type",
                "init_law",
                "ds_init_mode",
                "ds_init_alpha",
            )
        }
        del model  # free it before building the next one

    first = next(iter(results.values()))
    print(
        f"batch: {batch['input_ids'].shape[0]} pairs, {first['source_tokens']} source / {first['target_tokens']} "
        f"target tokens from {data_file}\n"
    )
    print("Gradient norm per layer (Figure 1)\n")
    print(format_layer_table(results))
    print("Error-signal ratios of Eq. 14 averaged over layers (Table 1)\n")
    print(format_ratio_table(results))

    args.output_dir.mkdir(parents=True, exist_ok=True)
    report = dict(
        data_file=str(data_file),
        seed=args.seed,
        train_mode=args.train_mode,
        device=args.device,
        batch_pairs=int(batch["input_ids"].shape[0]),
        models=results,
    )
    json_path = args.output_dir / "gradient_diagnostics.json"
    write_text(json_path, json.dumps(report, indent=2))
    print(f"wrote {json_path}")
    png_path = args.output_dir / "gradient_norms.png"
    print(f"wrote {png_path}" if plot(results, png_path) else "matplotlib is not installed: no plot")
    return report


if __name__ == "__main__":
    main()
