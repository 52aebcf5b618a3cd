#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Publish a checkpoint trained with `training/train.py` to the Hugging Face Hub.

    python hub_upload.py outputs/unified-small --repo_id my-name/unified-transformer-es-en --private
    python hub_upload.py outputs/unified-small --repo_id my-name/unified-transformer-es-en --dry-run

Steps:

1. Check `--repo_id` with huggingface_hub's validator. Unless `--dry-run`: find the token (`HF_TOKEN`, or the login
   cached by `hf auth login`) and stop at once, with a clear message, if there is none.
2. Check the checkpoint: weights (`model.safetensors`, or a sharded index and its shards), `config.json` with
   `auto_map` and `custom_pipelines`, every model code file `auto_map` names and every file they import
   (`from .module import ...`), the translation pipeline file, `generation_config.json`, the tokenizer, and
   `results.json` / `test_results.json` with the test scores. Everything missing is reported in one error. Every file
   name read from the checkpoint's files (`auto_map`, `custom_pipelines`, imports, `weight_map`) must name a file of
   the checkpoint folder itself, and no file may be a link leading out of it. An ONNX export folder is refused with
   the model folder to pass instead.
3. Build the Hub folder: those files, `test_results.json`, and a `README.md` model card rendered from
   `model_cards/<model_type>.md` (architecture, parameter count, training arguments, data, BLEU/chrF with their
   sacreBLEU signatures as `model-index` metadata, citation, usage, limitations, licence). It is built in a new
   folder beside `--output_dir` (every file written through `hf_unified_mt.utils.files`: a temporary file renamed
   into place, never through a link) and moved there only once complete, so a failing run leaves `--output_dir` as
   it was.
4. Unless `--dry-run`: `create_repo(exist_ok=True)` and `upload_folder` with the commit message; then the folder is
   moved to `--output_dir`, if one was given.

No model is loaded to build the folder: files are copied from the checkpoint and the parameter count is read from the
safetensors headers. It is self-contained: `AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)`,
`AutoModel` (the base model) and `pipeline("translation", model=folder, trust_remote_code=True)` work where
`hf_unified_mt` is not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


ROOT = Path(__file__).resolve().parent
MODEL_CARDS_DIR = ROOT / "model_cards"

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
GENERATION_CONFIG_NAME = "generation_config.json"
RESULTS_NAME = "results.json"
TEST_RESULTS_NAME = "test_results.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
OPTIONAL_TOKENIZER_FILES = ("special_tokens_map.json", "added_tokens.json", "chat_template.jinja")

# Written into every folder this tool builds, listing the files it wrote: `--overwrite` replaces only such a folder,
# and removes only those files. Never uploaded.
MARKER_NAME = ".hub_upload_folder.json"
# The folder is built in a new folder beside --output_dir, named `.<name>.<random>` + this, and moved into place once
# complete; a failed run removes it.
STAGING_SUFFIX = ".hub_upload.partial"

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

# `from .module import X` / `import .module`: the only imports allowed between the model code files.
_RELATIVE_IMPORT = re.compile(r"^\s*(?:from\s+\.(\w+)\s+import|import\s+\.(\w+))", re.MULTILINE)
_PACKAGE_IMPORT = re.compile(r"^\s*(?:from|import)\s+hf_unified_mt\b", re.MULTILINE)


class HubUploadError(Exception):
    """A problem the user can fix (missing token, incomplete checkpoint, ...); reported without a traceback."""


# ---------------------------------------------------------------------------------------------------------------------
# Token
# ---------------------------------------------------------------------------------------------------------------------


def require_token() -> str:
    """The Hub token from `HF_TOKEN` or the cached login, or a `HubUploadError` saying how to provide one."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise HubUploadError(
            "no Hugging Face token found. Set the HF_TOKEN environment variable to a token with write access "
            "(https://huggingface.co/settings/tokens) or log in once with `hf auth login`; "
            "or pass --dry-run to only build the folder."
        )
    return token


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoint
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    """What `hub_upload.py` reads from a checkpoint directory."""

    path: Path
    config: dict[str, Any]
    generation_config: dict[str, Any]
    results: dict[str, Any]
    test_scores: dict[str, Any]
    weight_files: list[str]
    code_files: list[str]
    tokenizer_files: list[str]
    num_parameters: int
    trainer_state: dict[str, Any] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return self.config["model_type"]

    def files_to_copy(self) -> list[str]:
        return [
            CONFIG_NAME,
            GENERATION_CONFIG_NAME,
            *self.weight_files,
            *self.code_files,
            *self.tokenizer_files,
        ]


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise HubUploadError(f"{path} is not valid JSON: {error}") from error
    except (OSError, UnicodeDecodeError) as error:
        raise HubUploadError(f"cannot read {path}: {error}") from error


def _contained(
    folder: Path, name: Any, where: str, problems: list[str], value: Any = None, what: str = "file"
) -> Path | None:
    """`folder / name` for a file name that the checkpoint's own files give: `where` says where (`config.json
    auto_map['AutoModel']`), `value` is the value found there when the name is derived from it (a module's file from
    a `module.Class` reference). None, with the problem added to `problems`, unless `name` names a file of `folder`
    itself: no absolute path, no `..`, no sub-folder (the Hub folder is flat), no symbolic link leading out. A name
    that fails is never read, and nothing is written for it."""
    from hf_unified_mt.utils.files import contained_path

    shown = f"{where} = {(name if value is None else value)!r}"
    try:
        path = contained_path(folder, name, what)
    except ValueError as error:
        problems.append(f"{shown}: {error}; refusing to read or publish anything outside the checkpoint")
        return None
    if "/" in name:
        problems.append(f"{shown}: {what} {name!r} is not in the checkpoint folder itself (the Hub folder is flat)")
        return None
    return path


def _module_file(reference: str) -> str | None:
    """`"modeling_x.XForConditionalGeneration"` -> `"modeling_x.py"`; None for code in another repository
    (`"owner/repo--modeling_x.X"`)."""
    if "--" in reference:
        return None
    module = reference.rsplit(".", 1)[0]
    return f"{module}.py"


def _code_references(config: Any, source: str, problems: list[str]) -> list[tuple[str, str]]:
    """(field, `module.Class` reference) for every class that `auto_map` (and, for config.json, `custom_pipelines`)
    of the JSON object `config` from the file `source` names; malformed entries are added to `problems`."""
    references: list[tuple[str, str]] = []
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    if auto_map is not None and not isinstance(auto_map, dict):
        problems.append(f"{source} auto_map = {auto_map!r} is not a mapping of Auto classes to code references")
        auto_map = None
    for key, value in (auto_map or {}).items():
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, str) and item:
                references.append((f"{source} auto_map[{key!r}]", item))
            elif item is not None:
                problems.append(f"{source} auto_map[{key!r}] = {value!r} is not a `module.Class` reference")
    pipelines = config.get("custom_pipelines") if isinstance(config, dict) else None
    if pipelines is not None and not isinstance(pipelines, dict):
        problems.append(f"{source} custom_pipelines = {pipelines!r} is not a mapping of tasks to pipelines")
        pipelines = None
    for task, entry in (pipelines or {}).items():
        impl = entry.get("impl") if isinstance(entry, dict) else None
        if isinstance(impl, str) and impl:
            references.append((f"{source} custom_pipelines[{task!r}]['impl']", impl))
        else:
            problems.append(f"{source} custom_pipelines[{task!r}] = {entry!r} has no `impl` reference")
    return references


def _referenced_code_files(path: Path, references: list[tuple[str, str]], problems: list[str]) -> list[str]:
    """The module files that `references` point at, each checked to be a file name inside `path`."""
    files: list[str] = []
    seen: set[str] = set()  # each file checked (and reported) once
    for where, reference in references:
        if "." not in reference.rsplit("--", 1)[-1]:
            problems.append(f"{where} = {reference!r} is not a `module.Class` reference")
            continue
        name = _module_file(reference)
        if name is None or name in seen:
            continue
        seen.add(name)
        if _contained(path, name, where, problems, value=reference, what="module file") is not None:
            files.append(name)
    return files


def _collect_code_files(path: Path, roots: list[str], missing: list[str], problems: list[str]) -> list[str]:
    """`roots` and every module they import relatively, recursively, in discovery order."""
    found: list[str] = []
    refused: set[str] = set()
    queue = [(name, None) for name in roots]
    while queue:
        name, importer = queue.pop(0)
        if name in found or name in missing or name in refused:
            continue
        if (
            importer is not None
            and _contained(path, name, f"{importer}'s import", problems, what="module file") is None
        ):
            refused.add(name)
            continue
        file = path / name
        if not file.is_file():
            missing.append(name)
            continue
        found.append(name)
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            problems.append(f"cannot read {name}: {error}")
            continue
        if _PACKAGE_IMPORT.search(source):
            problems.append(
                f"{name} imports hf_unified_mt: the model code must import its siblings only as "
                "`from .module import Name`, or it will not load where the package is not installed"
            )
        for first, second in _RELATIVE_IMPORT.findall(source):
            queue.append((f"{first or second}.py", name))
    return found


def _shard_files(path: Path, index: Any, problems: list[str]) -> list[str]:
    """The shard files that `model.safetensors.index.json`'s `weight_map` names, each checked to be a safetensors
    file inside `path`."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        problems.append(f"{WEIGHTS_INDEX_NAME} has no weight_map (tensor name -> shard file)")
        return []
    shards: list[str] = []
    seen: list[Any] = []  # each value checked (and reported, for its first tensor) once
    for tensor, shard in weight_map.items():
        if shard in seen:
            continue
        seen.append(shard)
        where = f"{WEIGHTS_INDEX_NAME} weight_map[{tensor!r}]"
        if _contained(path, shard, where, problems, what="shard file") is None:
            continue
        if not shard.endswith(".safetensors"):
            problems.append(f"{where} = {shard!r} is not a .safetensors file")
            continue
        shards.append(shard)
    return sorted(shards)


def _safetensors_parameter_count(path: Path) -> int:
    """Number of values stored in a safetensors file, read from its header (no tensor is loaded). Tied weights are
    stored once, so this equals `sum(p.numel() for p in model.parameters())`."""
    try:
        with open(path, "rb") as handle:
            (header_size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_size))
        return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
    except (OSError, ValueError, struct.error, TypeError, KeyError, AttributeError) as error:
        raise HubUploadError(f"{path} is not a readable safetensors file: {error}") from error


def _test_scores(path: Path, results: dict[str, Any]) -> dict[str, Any] | None:
    scores = results.get("test") if isinstance(results, dict) else None
    if (path / TEST_RESULTS_NAME).is_file():
        recorded = _read_json(path / TEST_RESULTS_NAME)
        scores = {**(scores if isinstance(scores, dict) else {}), **(recorded if isinstance(recorded, dict) else {})}
    if not isinstance(scores, dict) or not all(
        key in scores for key in ("bleu", "chrf", "bleu_signature", "chrf_signature")
    ):
        return None
    return scores


def _refuse_onnx_export(path: Path) -> None:
    """An ONNX export folder (`python -m hf_unified_mt.deployment.onnx_export`) is not a checkpoint: say so, and name
    the saved model folder it was exported from when its manifest records one (read only for this message: a
    manifest that cannot be read still marks an export)."""
    from hf_unified_mt.deployment.onnx_format import MANIFEST_FILE, is_onnx_export

    if not is_onnx_export(path):
        return
    source = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        source = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8")).get("source").get("path")
    what = f"it has {MANIFEST_FILE}" if (path / MANIFEST_FILE).exists() else "it holds ONNX graphs"
    if isinstance(source, str) and source and Path(source).resolve() != path.resolve():
        hint = f" It was exported from {source}: pass that folder instead (python hub_upload.py {source} ...)."
    else:
        hint = (
            " Pass the saved model folder it was exported from instead (the output_dir of training/train.py, or a "
            "folder written by save_pretrained)."
        )
    raise HubUploadError(
        f"{path} is an ONNX export ({what}), not a saved model: hub_upload.py publishes the PyTorch checkpoint "
        f"(safetensors weights, model code, tokenizer, test scores), not ONNX graphs.{hint}"
    )


def inspect_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Check that `path` holds everything the Hub folder needs; raise one `HubUploadError` naming all that is
    missing. Every file name read from the checkpoint's own files (`auto_map`, `custom_pipelines`, relative imports,
    `weight_map`) must name a file of the checkpoint folder itself, and no file it reads may be a link leading out of
    it."""
    from hf_unified_mt.utils.files import contained_path

    path = Path(path)
    if not path.is_dir():
        raise HubUploadError(f"checkpoint directory {path} does not exist")
    _refuse_onnx_export(path)

    missing: list[str] = []
    problems: list[str] = []
    # The files of fixed names: a symbolic link among them may not lead out of the checkpoint.
    fixed = (CONFIG_NAME, GENERATION_CONFIG_NAME, *TOKENIZER_FILES, *OPTIONAL_TOKENIZER_FILES, RESULTS_NAME)
    fixed += (TEST_RESULTS_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME, "trainer_state.json")
    for name in fixed:
        if (path / name).is_symlink():
            try:
                contained_path(path, name, "the checkpoint's")
            except ValueError as error:
                problems.append(f"{error}: refusing to read or publish a file outside the checkpoint")
    if problems:
        raise HubUploadError("\n  ".join(problems))
    for name in (CONFIG_NAME, GENERATION_CONFIG_NAME, *TOKENIZER_FILES, RESULTS_NAME):
        if not (path / name).is_file():
            missing.append(name)

    # Weights: one safetensors file, or an index and its shards.
    weight_files: list[str] = []
    if (path / WEIGHTS_NAME).is_file():
        weight_files = [WEIGHTS_NAME]
    elif (path / WEIGHTS_INDEX_NAME).is_file():
        shards = _shard_files(path, _read_json(path / WEIGHTS_INDEX_NAME), problems)
        weight_files = [WEIGHTS_INDEX_NAME, *shards]
        missing.extend(shard for shard in shards if not (path / shard).is_file())
    else:
        legacy = [name for name in ("pytorch_model.bin", "model.bin") if (path / name).is_file()]
        missing.append(WEIGHTS_NAME + (f" (found only {legacy[0]}: re-save with safetensors)" if legacy else ""))

    config: dict[str, Any] = {}
    code_files: list[str] = []
    if (path / CONFIG_NAME).is_file():
        config = _read_json(path / CONFIG_NAME)
        if not isinstance(config, dict):
            raise HubUploadError(f"{path / CONFIG_NAME} is not a JSON object")
        model_type = config.get("model_type")
        if model_type is None:
            problems.append("config.json has no model_type")
        elif model_type not in available_templates():
            problems.append(
                f"config.json model_type = {model_type!r} is not an architecture of hf_unified_mt with a model card "
                f"template in {MODEL_CARDS_DIR} (templates exist for: {', '.join(available_templates()) or 'none'})"
            )
        if not config.get("auto_map"):
            problems.append(
                "config.json has no auto_map, so the model cannot load with trust_remote_code=True where "
                "hf_unified_mt is not installed (is this a hf_unified_mt model saved with save_pretrained?)"
            )
        if "translation" not in (config.get("custom_pipelines") or {}):
            problems.append(
                "config.json has no custom_pipelines['translation'], so pipeline('translation', ...) would not work "
                "(re-save the model with a current hf_unified_mt)"
            )
        references = _code_references(config, CONFIG_NAME, problems)
        tokenizer_config = TOKENIZER_FILES[1]
        if (path / tokenizer_config).is_file():  # a tokenizer with code of its own names it there
            tokenizer_settings = _read_json(path / tokenizer_config)
            if isinstance(tokenizer_settings, dict) and tokenizer_settings.get("auto_map") is not None:
                references += _code_references({"auto_map": tokenizer_settings["auto_map"]}, tokenizer_config, problems)
        code_files = _collect_code_files(path, _referenced_code_files(path, references, problems), missing, problems)

    generation_config = _read_json(path / GENERATION_CONFIG_NAME) if (path / GENERATION_CONFIG_NAME).is_file() else {}
    if not isinstance(generation_config, dict):
        problems.append(f"{GENERATION_CONFIG_NAME} is not a JSON object")
    results = _read_json(path / RESULTS_NAME) if (path / RESULTS_NAME).is_file() else {}
    if not isinstance(results, dict):
        problems.append(f"{RESULTS_NAME} is not a JSON object")
        results = {}
    test_scores = _test_scores(path, results) if (path / RESULTS_NAME).is_file() else {}
    if test_scores is None:
        missing.append(
            f"{TEST_RESULTS_NAME} (test BLEU/chrF with signatures; neither it nor results.json has them: train with "
            "--do_predict, the default)"
        )

    if missing or problems:
        lines = []
        if missing:
            lines.append(f"checkpoint {path} is missing: " + ", ".join(missing))
        lines.extend(problems)
        raise HubUploadError("\n  ".join(lines))

    trainer_state = _read_json(path / "trainer_state.json") if (path / "trainer_state.json").is_file() else {}
    return Checkpoint(
        path=path,
        config=config,
        generation_config=generation_config,
        results=results,
        test_scores=test_scores,
        weight_files=weight_files,
        code_files=code_files,
        tokenizer_files=[*TOKENIZER_FILES, *(n for n in OPTIONAL_TOKENIZER_FILES if (path / n).is_file())],
        num_parameters=sum(
            _safetensors_parameter_count(path / name) for name in weight_files if name.endswith(".safetensors")
        ),
        trainer_state=trainer_state if isinstance(trainer_state, dict) else {},
    )


# ---------------------------------------------------------------------------------------------------------------------
# Model card
# ---------------------------------------------------------------------------------------------------------------------


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
):
    """The `ModelCard` of the Hub folder, rendered from `model_cards/<model_type>.md` (Jinja2)."""
    import jinja2
    from huggingface_hub import ModelCard

    cards_dir = MODEL_CARDS_DIR
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


# ---------------------------------------------------------------------------------------------------------------------
# Folder and upload
# ---------------------------------------------------------------------------------------------------------------------


def _built_files(output_dir: Path) -> list[str] | None:
    """The files that hub_upload.py wrote into `output_dir` (from its marker), or None if it did not build it."""
    marker = output_dir / MARKER_NAME
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        files = json.loads(marker.read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(files, list) or not all(
        isinstance(name, str) and "/" not in name and "\\" not in name and name not in ("", ".", "..") for name in files
    ):
        return None
    return files


def check_output_dir(
    output_dir: Path, checkpoint_path: Path, overwrite: bool, staging: Path | None = None
) -> list[str]:
    """Check that the folder can be built at `output_dir`; return the files `--overwrite` will replace or remove
    (those that hub_upload.py wrote there itself). Nothing is changed here. `staging`, the folder being built, is not
    counted where it lies inside `output_dir`."""
    target, source = output_dir.resolve(), checkpoint_path.resolve()
    if target == source or target in source.parents:
        raise HubUploadError(
            f"--output_dir {output_dir} is the checkpoint directory {checkpoint_path}"
            + (" itself" if target == source else " or a folder containing it")
            + ": choose another folder (by default a dry run builds CHECKPOINT-hub next to it)"
        )
    if output_dir.is_symlink() and not output_dir.exists():
        raise HubUploadError(f"--output_dir {output_dir} is a symbolic link to nothing: remove it or choose another")
    if output_dir.exists() and not output_dir.is_dir():
        raise HubUploadError(f"--output_dir {output_dir} is a file, not a folder")
    if not output_dir.exists():
        return []
    present = sorted(p.name for p in output_dir.iterdir() if staging is None or p.name != staging.name)
    if not present:
        return []
    built = _built_files(output_dir)
    if not overwrite:
        hint = " (pass --overwrite to replace it)" if built is not None else ""
        raise HubUploadError(f"output directory {output_dir} is not empty{hint}")
    if built is None:
        raise HubUploadError(
            f"refusing to replace {output_dir}: it does not look like a Hub folder built by hub_upload.py (it has no "
            f"{MARKER_NAME}); --overwrite only replaces folders this tool built. Choose an empty or new --output_dir"
        )
    foreign = [name for name in present if name not in built and name != MARKER_NAME]
    if foreign:
        raise HubUploadError(
            f"refusing to replace {output_dir}: besides the files hub_upload.py wrote it holds "
            f"{', '.join(foreign)}, which it did not create. Move them away or choose another --output_dir"
        )
    return [name for name in present if name in built] + ([MARKER_NAME] if MARKER_NAME in present else [])


def _copy_file(source: Path, target: Path) -> None:
    """`source` copied to `target` through `atomic_write` (a new file renamed into place, never through a link)."""
    from hf_unified_mt.utils.files import atomic_write

    with open(source, "rb") as reader, atomic_write(target, "wb") as writer:
        shutil.copyfileobj(reader, writer, 1 << 20)


def _move_file(source: Path, target: Path) -> None:
    """Renames `source` to `target` (a link at `target` is replaced, never written through); copied through
    `atomic_write` where the two lie on different file systems."""
    try:
        os.replace(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        _copy_file(source, target)
        source.unlink()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _missing_folders(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, outermost first."""
    missing = []
    for candidate in (folder, *folder.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing.append(candidate)
    return missing[::-1]


def _folder_mode() -> int:
    """The permissions `mkdir` gives a new folder (0o777 less the umask)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o777 & ~umask


def stage_hub_folder(checkpoint: Checkpoint, card_text: str, output_dir: Path | None) -> Path:
    """Writes the Hub folder into a new folder of its own and returns it: beside `output_dir` (inside it where its
    parent cannot be written), or in the system's temporary folder without one. Every file goes through
    `hf_unified_mt.utils.files` (a temporary file renamed into place); on any failure the new folder is removed, so
    that nothing of the user's is touched until `install_hub_folder`."""
    from hf_unified_mt.utils.files import write_json, write_text

    if output_dir is None:
        staging = Path(tempfile.mkdtemp(prefix="hub_upload_"))
    else:
        staging = None
        for parent in (output_dir.parent, output_dir):
            try:
                staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", suffix=STAGING_SUFFIX, dir=parent))
                break
            except (PermissionError, FileNotFoundError):
                continue
        if staging is None:
            raise HubUploadError(f"cannot write the Hub folder beside or inside --output_dir {output_dir}")
    try:
        copied = checkpoint.files_to_copy()
        written = [*copied, TEST_RESULTS_NAME, "README.md"]
        write_json(staging / MARKER_NAME, {"built_by": "hub_upload.py", "files": written}, indent=2)
        for name in copied:  # file names of the checkpoint folder itself (inspect_checkpoint checked them)
            _copy_file(checkpoint.path / name, staging / name)
        _clean_tokenizer_config(staging / "tokenizer_config.json")
        write_json(staging / TEST_RESULTS_NAME, checkpoint.test_scores, indent=2, ensure_ascii=False)
        write_text(staging / "README.md", card_text, newline="")  # as huggingface_hub's ModelCard.save writes it
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise HubUploadError(f"cannot build the Hub folder: {error}") from error
        raise
    return staging


def _clean_tokenizer_config(path: Path) -> None:
    """A tokenizer saved after loading it from a folder records how it was loaded (`is_local`, ...): not published
    (`hf_unified_mt.deployment.tokenizer_files.LOAD_OPTIONS`); the rest is kept, written as `save_pretrained` writes
    it."""
    from hf_unified_mt.deployment.tokenizer_files import LOAD_OPTIONS
    from hf_unified_mt.utils.files import write_json

    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config, dict) and set(LOAD_OPTIONS) & config.keys():
        cleaned = {key: value for key, value in config.items() if key not in LOAD_OPTIONS}
        write_json(path, cleaned, indent=2, sort_keys=True, ensure_ascii=False)


def install_hub_folder(staging: Path, output_dir: Path, checkpoint_path: Path, overwrite: bool) -> Path:
    """Puts the folder built by `stage_hub_folder` at `output_dir` and returns `output_dir`. A new `output_dir` is the
    staged folder renamed; an existing one (empty, or built earlier by hub_upload.py, with `--overwrite`) gets each
    new file renamed over the old one, then loses the files of the earlier build that the new one lacks. Its marker
    lists the files of both builds meanwhile, so that a run stopped half-way leaves a folder `--overwrite` replaces."""
    from hf_unified_mt.utils.files import write_json

    earlier = check_output_dir(output_dir, checkpoint_path, overwrite, staging)  # again: it may have changed since
    files = json.loads((staging / MARKER_NAME).read_text(encoding="utf-8"))["files"]
    try:
        if not output_dir.exists() and not output_dir.is_symlink():
            os.chmod(staging, _folder_mode())
            try:
                os.rename(staging, output_dir)
                return output_dir
            except OSError:  # created meanwhile, or on another file system: file by file, once checked again
                earlier = check_output_dir(output_dir, checkpoint_path, overwrite, staging)
        if earlier:
            print(
                f"Replacing the Hub folder {output_dir} built earlier by hub_upload.py: replacing or removing "
                f"{', '.join(earlier)}",
                file=sys.stderr,
            )
        earlier_files = [name for name in earlier if name != MARKER_NAME]
        marker = {"built_by": "hub_upload.py", "files": sorted(set(earlier_files) | set(files))}
        write_json(output_dir / MARKER_NAME, marker, indent=2)
        for name in files:
            target = output_dir / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            _move_file(staging / name, target)
        for name in earlier_files:
            if name not in files:
                _remove(output_dir / name)
        write_json(output_dir / MARKER_NAME, {"built_by": "hub_upload.py", "files": files}, indent=2)
    except OSError as error:
        raise HubUploadError(f"cannot write the Hub folder into {output_dir}: {error}") from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def upload_folder(
    folder: Path,
    repo_id: str,
    token: str,
    commit_message: str,
    private: bool = False,
    endpoint: str | None = None,
    revision: str | None = None,
):
    """Create the model repository if needed and commit the folder to it; returns the `CommitInfo`."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    # private=None keeps the namespace's default visibility; an existing repository keeps its own.
    repo = api.create_repo(repo_id, repo_type="model", private=True if private else None, exist_ok=True)
    return api.upload_folder(
        repo_id=repo.repo_id,
        repo_type="model",
        folder_path=folder,
        commit_message=commit_message,
        revision=revision,
        ignore_patterns=[MARKER_NAME],
    )


# ---------------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------------


def repo_id_argument(value: str) -> str:
    """`--repo_id`, checked by huggingface_hub's own validator (`validate_repo_id`) before anything is built."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError as error:
        reason = re.sub(r"\s*Use `repo_type` argument if needed\.", "", str(error)).strip()
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Hub repository id: {reason} Give NAME or NAMESPACE/NAME, e.g. "
            "my-name/unified-transformer-es-en"
        ) from None
    return value


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hub_upload.py",
        description="Build the Hugging Face Hub folder of a checkpoint trained with training/train.py (model, code, "
        "tokenizer, translation pipeline, model card) and upload it.",
    )
    parser.add_argument("checkpoint", help="Checkpoint directory (the output_dir of training/train.py).")
    parser.add_argument(
        "--repo_id", type=repo_id_argument, help="Hub repository, e.g. my-name/unified-transformer-es-en."
    )
    parser.add_argument(
        "--dry-run",
        "--dry_run",
        dest="dry_run",
        action="store_true",
        help="Build the folder and stop (no token needed, nothing is sent).",
    )
    parser.add_argument(
        "--output_dir",
        help="Where to build the folder (default: CHECKPOINT-hub with --dry-run, a temporary directory otherwise).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"Replace a folder this script built earlier (recognised by its {MARKER_NAME}; the files it removes are "
        "listed). Any other folder is left alone.",
    )
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    parser.add_argument("--commit_message", help="Commit message (default: names the architecture and test BLEU).")
    parser.add_argument("--revision", help="Branch to commit to (default: main).")
    parser.add_argument("--endpoint", help="Hub endpoint (default: $HF_ENDPOINT or https://huggingface.co).")
    parser.add_argument("--license", default=DEFAULT_LICENSE, help="Licence of the weights (default: apache-2.0).")
    parser.add_argument("--dataset", help="Hub id of the training dataset, if not the recorded/default corpus.")
    parser.add_argument("--dataset_config", help="Its configuration, e.g. de-en.")
    parser.add_argument("--source_lang", help="Source language code for the card metadata (e.g. es).")
    parser.add_argument("--target_lang", help="Target language code (e.g. en).")
    parser.add_argument(
        "--training_args",
        help="JSON/YAML file with the training options (e.g. the config file "
        "given to train.py), if results.json does not record them.",
    )
    return parser.parse_args(argv)


def _read_training_args(path: str | None) -> dict[str, Any] | None:
    from hf_unified_mt.utils.options import read_option_file

    if path is None:
        return None
    try:
        return read_option_file(path)
    except (OSError, ValueError) as error:
        raise HubUploadError(f"--training_args {error}") from error


def main(argv: list[str] | None = None) -> Path:
    """Run the command; returns the Hub folder (which is deleted after an upload without --output_dir). A run that
    fails leaves `--output_dir` as it was: the folder is built beside it and moved into place only once it is complete
    (and, for an upload, once the upload succeeded)."""
    options = parse_arguments(argv)  # --repo_id is checked here, before anything else
    # 1. Token and repository first: no work is done for an upload that cannot happen.
    token = None
    if not options.dry_run:
        token = require_token()
        if not options.repo_id:
            raise HubUploadError("--repo_id is required to upload (e.g. --repo_id my-name/my-model)")

    # 2. Checkpoint.
    checkpoint = inspect_checkpoint(options.checkpoint)
    repo_id = options.repo_id or f"your-username/{Path(options.checkpoint).resolve().name}"
    training_arguments = _read_training_args(options.training_args)

    # 3. Folder (checked before anything is built: it is never the checkpoint or a folder that contains it, and an
    # existing one is replaced only if hub_upload.py built it).
    if options.output_dir:
        output_dir = Path(options.output_dir)
    elif options.dry_run:
        output_dir = Path(str(Path(options.checkpoint).resolve()) + "-hub")
    else:
        output_dir = None  # an upload without --output_dir keeps no folder
    if output_dir is not None:
        check_output_dir(output_dir, checkpoint.path, options.overwrite)
    card, dataset = render_card(checkpoint, repo_id, options, training_arguments)
    if dataset.assumed:
        print(
            f"warning: {checkpoint.path / RESULTS_NAME} does not record the training data; the card assumes the "
            f"default corpus {DEFAULT_CORPUS} (pass --dataset/--source_lang/--target_lang if that is wrong)",
            file=sys.stderr,
        )

    created = _missing_folders(output_dir.parent) if output_dir is not None else []
    staging = None
    try:
        if created:
            created[-1].mkdir(parents=True)
        staging = stage_hub_folder(checkpoint, str(card), output_dir)
        files = sorted(p.name for p in staging.iterdir() if p.name != MARKER_NAME)
        print(f"Hub folder {output_dir or '(temporary)'}: {len(files)} files ({', '.join(files)})")
        print(
            f"{checkpoint.model_type}, {checkpoint.num_parameters:,} parameters, test BLEU "
            f"{checkpoint.test_scores['bleu']:.2f}, chrF {checkpoint.test_scores['chrf']:.2f}"
        )
        if options.dry_run:
            folder = install_hub_folder(staging, output_dir, checkpoint.path, options.overwrite)
            print("Dry run: nothing uploaded.")
            return folder

        # 4. Upload, then keep the folder at --output_dir if one was given.
        message = options.commit_message or (
            f"Upload {checkpoint.config.get('architectures', [checkpoint.model_type])[0]} "
            f"(test BLEU {checkpoint.test_scores['bleu']:.2f}) with hub_upload.py"
        )
        endpoint = options.endpoint or os.environ.get("HF_ENDPOINT") or None
        commit = upload_folder(
            staging, repo_id, token, message, private=options.private, endpoint=endpoint, revision=options.revision
        )
        print(f"Uploaded to {commit.repo_url}: {commit.commit_url}")
        if output_dir is None:
            return staging
        return install_hub_folder(staging, output_dir, checkpoint.path, options.overwrite)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for folder in reversed(created):  # the parents this run created, if it left them empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    finally:
        if staging is not None and output_dir is None:
            shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except HubUploadError as error:
        print(f"hub_upload.py: error: {error}", file=sys.stderr)
        sys.exit(2)
