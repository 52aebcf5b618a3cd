# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""What the Hub folder needs from a checkpoint, checked before anything is built: `inspect_checkpoint` returns a
`Checkpoint` or raises one `HubUploadError` naming everything that is missing or refused.

A checkpoint is the `output_dir` of `training/train.py` (or a folder written by `save_pretrained` with the tokenizer
and the test scores beside it): weights (`model.safetensors`, or a sharded index and its shards), `config.json` with
`auto_map` and `custom_pipelines`, every model code file `auto_map` names and every file they import (`from .module
import ...`), the translation pipeline file, `generation_config.json`, the tokenizer, and `results.json` /
`test_results.json` with the test scores. Every file name read from the checkpoint's own files (`auto_map`,
`custom_pipelines`, relative imports, `weight_map`) must name a file of the checkpoint folder itself, and no file may
be a link leading out of it. No model is loaded: the parameter count is read from the safetensors headers.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..deployment.onnx_format import MANIFEST_FILE, is_onnx_export
from ..utils.files import contained_path
from . import HubUploadError
from .card import MODEL_CARDS_DIR, available_templates


WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"
GENERATION_CONFIG_NAME = "generation_config.json"
RESULTS_NAME = "results.json"
TEST_RESULTS_NAME = "test_results.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
OPTIONAL_TOKENIZER_FILES = ("special_tokens_map.json", "added_tokens.json", "chat_template.jinja")

# `from .module import X` / `import .module`: the only imports allowed between the model code files.
_RELATIVE_IMPORT = re.compile(r"^\s*(?:from\s+\.(\w+)\s+import|import\s+\.(\w+))", re.MULTILINE)
_PACKAGE_IMPORT = re.compile(r"^\s*(?:from|import)\s+hf_unified_mt\b", re.MULTILINE)


@dataclass
class Checkpoint:
    """What the Hub folder is built from: the checkpoint's files and settings, as `inspect_checkpoint` read them."""

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


def inspect_checkpoint(path: str | os.PathLike, cards_dir: Path = MODEL_CARDS_DIR) -> Checkpoint:
    """Check that `path` holds everything the Hub folder needs; raise one `HubUploadError` naming all that is
    missing. Every file name read from the checkpoint's own files (`auto_map`, `custom_pipelines`, relative imports,
    `weight_map`) must name a file of the checkpoint folder itself, and no file it reads may be a link leading out of
    it. Its `model_type` must have a card template in `cards_dir`."""
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
        elif model_type not in available_templates(cards_dir):
            problems.append(
                f"config.json model_type = {model_type!r} is not an architecture of hf_unified_mt with a model card "
                f"template in {cards_dir} (templates exist for: {', '.join(available_templates(cards_dir)) or 'none'})"
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
