# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The model card of the Hub folder: `README.md`, rendered with Jinja2 from `model_cards/<model_type>.md` (files
starting with `_` are parts the templates share; `model_cards/citations/` holds the BibTeX of the papers a composed
checkpoint uses), with `ModelCardData` metadata (`build_card_data`): the test BLEU and chrF with their sacreBLEU
signatures as `model-index` eval results. The card states the architecture and its options, the parameter count, the
training options and data (`describe_dataset`), the scores, the mechanisms of other papers the config composes
(`composed_mechanisms`), usage, limitations and licence.

The templates are the repository's `model_cards/` folder, at the top of the repository beside `hub_upload.py`, not
package data. `MODEL_CARDS_DIR` is that folder as seen from this file in a source checkout (three folders up), the
default of every function that reads a template (`cards_dir`); `hub_upload.py` passes the folder beside itself, so
that it finds the templates wherever the package is installed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import HubUploadError


if TYPE_CHECKING:
    import argparse

    from .checkpoint import Checkpoint


# The repository's `model_cards/` in a source checkout: src/hf_unified_mt/publishing/card.py -> the repository root.
MODEL_CARDS_DIR = Path(__file__).resolve().parents[3] / "model_cards"

DEFAULT_CORPUS = "bible_es_en"  # training/train.py's default (hf_unified_mt.training.data.DEFAULT_CORPUS)
DEFAULT_LICENSE = "apache-2.0"

# Keys of config.json shared by every architecture (transformers bookkeeping and the fields of MTConfig); the others
# are shown in the card as the architecture's own options.
COMMON_CONFIG_KEYS = frozenset(
    {
        "_name_or_path", "activation_dropout", "activation_function", "architectures", "attention_dropout", "auto_map",
        "bos_token_id", "chunk_size_feed_forward", "custom_pipelines", "d_model", "decoder_attention_heads",
        "decoder_ffn_dim", "decoder_layers", "decoder_start_token_id", "decoder_vocab_size", "dropout", "dtype",
        "encoder_attention_heads", "encoder_ffn_dim", "encoder_layers", "eos_token_id", "forced_eos_token_id",
        "id2label",
        "init_std", "is_encoder_decoder", "label2id", "layer_types", "max_position_embeddings", "model_type",
        "normalize_before", "output_attentions", "output_hidden_states", "pad_token_id", "problem_type", "return_dict",
        "scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings", "transformers_version",
        "use_cache",
        "vocab_size",
    }
)  # fmt: skip

# Training options shown in the card, in this order, when the checkpoint recorded them.
TRAINING_ARGUMENT_KEYS = (
    "arch", "preset", "config_overrides", "corpus", "dataset_name", "dataset_config_name", "train_file",
    "validation_file", "test_file", "source_field", "target_field", "max_train_samples", "tokenizer_type",
    "tokenizer_vocab_size",
    "max_source_length", "max_target_length", "overlong", "max_tokens", "max_sentences",
    "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "lr_scheduler_type",
    "warmup_steps", "max_steps", "num_train_epochs", "max_train_minutes", "optim", "adam_beta1", "adam_beta2",
    "adam_epsilon", "weight_decay", "max_grad_norm", "label_smoothing_factor", "bf16", "fp16", "seed",
    "eval_steps", "save_steps", "metric_for_best_model", "generation_num_beams",
)  # fmt: skip


def available_templates(cards_dir: Path = MODEL_CARDS_DIR) -> list[str]:
    """Model types with a card template (`<model_type>.md`; files starting with `_` are shared parts)."""
    return sorted(p.stem for p in cards_dir.glob("*.md") if not p.name.startswith("_") and p.name != "README.md")


def parse_signature(signature: str) -> dict[str, str]:
    """`"nrefs:1|case:mixed|tok:13a"` -> `{"nrefs": "1", "case": "mixed", "tok": "13a"}`."""
    pairs = (item.split(":", 1) for item in signature.split("|") if ":" in item)
    return {key: value for key, value in pairs}


def _display(value: Any) -> str:
    """A config or training value as it would be written in JSON (floats without trailing zeros)."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (bool, dict, list)) or value is None:
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def _table_cell(text: Any) -> str:
    """Escape `|` so that a value (a sacreBLEU signature, a JSON list) stays in one Markdown table cell."""
    return str(text).replace("|", "\\|")


def _training_arguments(checkpoint: Checkpoint, extra: dict[str, Any] | None) -> dict[str, Any]:
    """The training options: `results.json["training_arguments"]`, updated by `--training_args FILE`; `arch` and
    `preset` from results.json."""
    arguments: dict[str, Any] = {}
    for key in ("arch", "preset"):
        if checkpoint.results.get(key) is not None:
            arguments[key] = checkpoint.results[key]
    recorded = checkpoint.results.get("training_arguments")
    if isinstance(recorded, dict):
        arguments.update(recorded)
    if extra:
        arguments.update(extra)
    return arguments


def _training_rows(checkpoint: Checkpoint, arguments: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) rows of the card's hyperparameter table; local paths reduced to their file names."""
    rows = []
    uses_other_data = bool(arguments.get("train_file") or arguments.get("dataset_name"))
    for key in TRAINING_ARGUMENT_KEYS:
        value = arguments.get(key)
        if value is None or value == "" or (value is False and key in ("bf16", "fp16")):
            continue
        if key == "corpus" and uses_other_data:
            continue  # recorded as a default by older runs; the data came from the files or dataset
        if key.endswith("_file"):
            value = Path(str(value)).name
        rows.append((key, _display(value)))
    state = checkpoint.trainer_state
    train = checkpoint.results.get("train", {})
    epoch = train.get("epoch", state.get("epoch"))
    facts = {
        "steps trained": state.get("global_step"),
        "epochs": round(epoch, 2) if epoch is not None else None,
        "training pairs": train.get("train_samples"),
        "final training loss": round(train["train_loss"], 4) if "train_loss" in train else None,
        "training time": _duration(train["train_runtime"]) if "train_runtime" in train else None,
    }
    if "learning_rate" not in arguments:
        rates = [entry["learning_rate"] for entry in state.get("log_history", []) if "learning_rate" in entry]
        facts["peak learning rate (logged)"] = max(rates) if rates else None
    rows.extend((name, _display(value)) for name, value in facts.items() if value is not None)
    return rows


@dataclass
class DatasetInfo:
    id: str  # Hub dataset id, or the corpus / file name
    pretty_name: str
    config: str | None
    is_hub_dataset: bool
    is_bible: bool
    source_lang: str | None
    target_lang: str | None
    assumed: bool = False  # no record of the data: the default corpus was assumed


def _language_code(value: Any) -> str | None:
    return value if isinstance(value, str) and re.fullmatch(r"[a-z]{2,3}", value) else None


def describe_dataset(arguments: dict[str, Any], options: argparse.Namespace) -> DatasetInfo:
    """Which data the model was trained and tested on: `--dataset` (a Hub id) on the command line, else the recorded
    training arguments, else the default embedded corpus of `training/train.py`."""
    source_lang = options.source_lang or _language_code(arguments.get("source_field"))
    target_lang = options.target_lang or _language_code(arguments.get("target_field"))
    dataset_name = options.dataset or arguments.get("dataset_name")
    if dataset_name:
        config = options.dataset_config or arguments.get("dataset_config_name")
        if config and (source_lang is None or target_lang is None) and re.fullmatch(r"[a-z]{2,3}-[a-z]{2,3}", config):
            source_lang, target_lang = source_lang or config.split("-")[0], target_lang or config.split("-")[1]
        pretty = f"{dataset_name} ({config})" if config else dataset_name
        return DatasetInfo(dataset_name, pretty, config, True, False, source_lang, target_lang)
    if arguments.get("train_file"):
        name = Path(str(arguments["train_file"])).name
        files = [
            f"{split}: {Path(str(arguments[key])).name}"
            for split, key in (("train", "train_file"), ("validation", "validation_file"), ("test", "test_file"))
            if arguments.get(key)
        ]
        return DatasetInfo(name, f"local files ({'; '.join(files)})", None, False, False, source_lang, target_lang)
    corpus = arguments.get("corpus") or DEFAULT_CORPUS
    if corpus == DEFAULT_CORPUS:
        return DatasetInfo(
            corpus,
            "Bible es-en (Reina-Valera 1909 / text derived from the World English Bible)",
            "es-en",
            False,
            True,
            source_lang or "es",
            target_lang or "en",
            assumed="corpus" not in arguments,
        )
    return DatasetInfo(corpus, corpus, None, False, False, source_lang, target_lang)


PRIME_PAPER = (
    "Zhao, Xu, Zhang, Ren, Luo and Sun, *Unified Transformer for Sequence-to-Sequence Learning* (arXiv:1911.09483)"
)
DEEP_PAPER = (
    "Biao Zhang, Ivan Titov and Rico Sennrich, *Improving Deep Transformer with Depth-Scaled Initialization and "
    "Merged Attention*, EMNLP-IJCNLP 2019"
)
AAN_PAPER = (
    "Biao Zhang, Deyi Xiong and Jinsong Su, *Accelerating Neural Transformer via an Average Attention Network*, "
    "ACL 2018"
)


# The BibTeX the card adds for a composed mechanism's paper (model_cards/citations/): the architectures' entries are
# the ones their own cards cite.
PAPER_CITATIONS = {PRIME_PAPER: "unified_transformer.bib", DEEP_PAPER: "deep_transformer.bib", AAN_PAPER: "aan.bib"}


def composed_mechanisms(model_type: str, config: dict) -> list[tuple[str, str]]:
    """(mechanism, paper) for each mechanism of another paper than the architecture's own that the config uses: the
    compositions of the shared core, which the card credits beside the architecture's paper. Only the fields that the
    architecture reads count (a config.json written before configs refused other architectures' fields may hold
    one that the model never used)."""

    def prime(field: str, owner: str) -> bool:
        spec = config.get(field)
        return model_type == owner and isinstance(spec, dict) and spec.get("type") == "prime"

    prime_layers = "Prime layers (self-attention, dynamic depthwise convolution and FFN in parallel on one residual)"
    found = []
    branches = config.get("encoder_branches") if model_type == "multi_encoder_transformer" else None
    if any(isinstance(branch, dict) and branch.get("type") == "prime" for branch in branches or []):
        found.append((f"an encoder branch of {prime_layers}", PRIME_PAPER))
    if prime("encoder_layer", "multi_pass_transformer"):
        found.append((f"{prime_layers} in the encoder's passes", PRIME_PAPER))
    if prime("unit_layer", "multi_unit_transformer"):
        found.append((f"{prime_layers} as the encoder's units", PRIME_PAPER))
    if model_type != "unified_transformer" and config.get("init_law") == "km":
        found.append(("the Unified Transformer authors' initialisation (their code's `init_method='km'`)", PRIME_PAPER))
    attention = config.get("decoder_attention_type", "self")
    if model_type != "deep_transformer":
        if config.get("init_law") == "ds_init":
            found.append(("DS-Init: each layer's initialisation bound scaled by 1/sqrt(its depth), Eq. 15", DEEP_PAPER))
        if attention == "merged":
            found.append(("merged attention in the decoder (MAtt, Eq. 16-17)", DEEP_PAPER))
        elif attention == "merged_self":
            found.append(("the merged decoder sublayer with self-attention (Table 3, variant 6)", DEEP_PAPER))
    if attention == "aan":  # Zhang et al. 2018, which the Deep Transformer's paper compares against
        found.append(("the average attention network in the decoder", AAN_PAPER))
    return found


def composed_citations(composed: list[tuple[str, str]], cards_dir: Path = MODEL_CARDS_DIR) -> list[str]:
    """The BibTeX entries of the papers of `composed_mechanisms`, each once, in the order they are credited."""
    papers = list(dict.fromkeys(paper for _, paper in composed))
    return [(cards_dir / "citations" / PAPER_CITATIONS[paper]).read_text(encoding="utf-8").strip() for paper in papers]


def _training_pairs(checkpoint: Checkpoint) -> int | None:
    """How many training pairs the run used (`results.json`: after `--max_train_samples` and skipped over-long
    pairs), or None where it was not recorded."""
    value = (checkpoint.results.get("train") or {}).get("train_samples")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def build_card_data(checkpoint: Checkpoint, model_name: str, dataset: DatasetInfo, license: str):
    """`ModelCardData` with the test BLEU and chrF (rounded to 2 decimals, as sacreBLEU prints them) and their
    sacreBLEU signatures as `model-index` eval results."""
    from huggingface_hub import EvalResult, ModelCardData

    scores = checkpoint.test_scores
    common = dict(
        task_type="translation",
        task_name="Translation",
        dataset_type=dataset.id,
        dataset_name=dataset.pretty_name,
        dataset_config=dataset.config,
        dataset_split="test",
    )
    eval_results = [
        EvalResult(
            **common,
            metric_type=metric,
            metric_name=pretty,
            metric_value=round(float(scores[metric]), 2),
            metric_config=scores[f"{metric}_signature"],
            metric_args=parse_signature(scores[f"{metric}_signature"]),
        )
        for metric, pretty in (("bleu", "BLEU (sacreBLEU)"), ("chrf", "chrF (sacreBLEU)"))
    ]
    languages = [lang for lang in (dataset.source_lang, dataset.target_lang) if lang]
    return ModelCardData(
        language=languages or None,
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "hf-unified-mt", checkpoint.model_type, "custom_code"],
        datasets=[dataset.id] if dataset.is_hub_dataset else None,
        metrics=["bleu", "chrf"],
        model_name=model_name,
        eval_results=eval_results,
    )


def render_card(
    checkpoint: Checkpoint,
    repo_id: str,
    options: argparse.Namespace,
    training_arguments: dict[str, Any] | None = None,
    cards_dir: Path = MODEL_CARDS_DIR,
):
    """The `ModelCard` of the Hub folder, rendered from `cards_dir / f"{model_type}.md"` (Jinja2), and the
    `DatasetInfo` it describes. `options` are the command's (`--license`, `--dataset`, `--dataset_config`,
    `--source_lang`, `--target_lang`); `training_arguments` those of `--training_args`."""
    import jinja2
    from huggingface_hub import ModelCard

    template_name = f"{checkpoint.model_type}.md"
    if not (cards_dir / template_name).is_file():
        raise HubUploadError(
            f"no model card template {cards_dir / template_name} for model_type {checkpoint.model_type!r}; "
            f"templates exist for: {', '.join(available_templates(cards_dir)) or 'none'}"
        )
    arguments = _training_arguments(checkpoint, training_arguments)
    dataset = describe_dataset(arguments, options)
    model_name = repo_id.split("/")[-1]
    samples = (checkpoint.results.get("samples") or [])[:3]
    if dataset.is_bible:
        examples = ["Y dijo Dios: Sea la luz.", "En el principio era el Verbo."]
    else:
        examples = [sample["source"] for sample in samples[:2]] or ["..."]
    card_data = build_card_data(checkpoint, model_name, dataset, options.license)
    config = checkpoint.config
    scores = checkpoint.test_scores
    composed = composed_mechanisms(checkpoint.model_type, config)
    training_pairs = _training_pairs(checkpoint)
    context = dict(
        card_data=card_data.to_yaml(),
        repo_id=repo_id,
        model_name=model_name,
        model_type=checkpoint.model_type,
        architecture_class=(config.get("architectures") or [""])[0],
        config=config,
        architecture_options=[(k, _display(v)) for k, v in sorted(config.items()) if k not in COMMON_CONFIG_KEYS],
        composed=composed,
        composed_citations=composed_citations(composed, cards_dir),
        training_pairs=training_pairs,
        training_pairs_text=f"{training_pairs:,}" if training_pairs is not None else None,
        num_parameters=checkpoint.num_parameters,
        num_parameters_text=f"{checkpoint.num_parameters:,} ({checkpoint.num_parameters / 1e6:.2f} M)",
        preset=checkpoint.results.get("preset"),
        training_rows=_training_rows(checkpoint, arguments),
        training_arguments_recorded=isinstance(checkpoint.results.get("training_arguments"), dict)
        or bool(training_arguments),
        dataset=dataset,
        scores=scores,
        bleu=f"{scores['bleu']:.2f}",
        chrf=f"{scores['chrf']:.2f}",
        bleu_by_length=scores.get("bleu_by_source_length") or [],
        best_eval_bleu=checkpoint.results.get("best_eval_bleu"),
        samples=samples,
        examples=examples,
        generation=checkpoint.generation_config,
        num_beams=scores.get("num_beams", checkpoint.generation_config.get("num_beams", 1)),
        vocab_size=checkpoint.results.get("vocab_size", config.get("vocab_size")),
        license=options.license,
    )
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(cards_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    environment.filters["py"] = repr  # a Python literal in the usage snippets
    environment.filters["cell"] = _table_cell
    try:
        content = environment.get_template(template_name).render(**context)
    except jinja2.TemplateSyntaxError as error:
        raise HubUploadError(f"model card template {error.filename}, line {error.lineno}: {error}") from error
    except jinja2.TemplateError as error:
        raise HubUploadError(f"model card template {template_name}: {error}") from error
    return ModelCard(content), dataset
