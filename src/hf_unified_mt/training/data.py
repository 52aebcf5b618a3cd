# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Parallel data for machine translation: loading, validation and preprocessing.

Three sources of sentence pairs are supported, all returned as a [`ParallelCorpus`] whose splits have the columns
`source`, `target` and `line` (where the pair came from):

* the corpus embedded in this package (`"bible_es_en"`, the default; see `corpora/bible_es_en/README.md`);
* local TSV, CSV, JSON or JSON-lines files (optionally gzipped), read with `datasets.load_dataset`;
* a dataset on the Hugging Face Hub, with the names of its source and target fields.

Local files are checked record by record before they are loaded, and any problem (a missing column, an empty source
or target, bytes that do not decode, a wrong number of fields) raises a [`DataValidationError`] naming the file, the
line and the problem. Rows are never dropped silently: the only rows removed are over-long pairs, and only when the
user asks for it (`overlong="skip"`, see [`handle_overlong`]), with a count in the log.
"""

from __future__ import annotations

import bz2
import codecs
import csv
import gzip
import json
import logging
import lzma
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import datasets
import numpy as np
import pyarrow.compute as pc
from datasets.fingerprint import Hasher
from datasets.utils import tqdm as hf_tqdm
from transformers import PreTrainedTokenizerFast


logger = logging.getLogger(__name__)

CORPORA_DIR = Path(__file__).resolve().parent / "corpora"
DEFAULT_CORPUS = "bible_es_en"

# Corpora shipped inside the package: split name -> file name, and the default source/target fields.
EMBEDDED_CORPORA: dict[str, dict[str, Any]] = {
    "bible_es_en": {
        "files": {"train": "train.tsv.gz", "validation": "valid.tsv.gz", "test": "test.tsv.gz"},
        "source_field": "es",
        "target_field": "en",
    },
}

SPLITS = ("train", "validation", "test")
# Split names used by Hub datasets for the validation split, in order of preference.
VALIDATION_SPLIT_ALIASES = ("validation", "valid", "dev", "val")

# Nested "translation" dictionaries (`{"translation": {"de": ..., "en": ...}}`) are the Hub convention for
# translation datasets (wmt16, opus_books, ...); fields are looked up inside it when not found at the top level.
TRANSLATION_COLUMN = "translation"

OverlongPolicy = Literal["skip", "error", "truncate"]

# A step's progress bar appears once the step has lasted this many seconds (small files show none).
PROGRESS_DELAY_S = 2.0
# Lines between two updates of a file check's progress bar.
_PROGRESS_EVERY = 1 << 16


class DataValidationError(ValueError):
    """Raised when parallel data is malformed. The message names the file (or dataset), the line and the problem."""


@dataclass
class SplitOrigin:
    """Where the rows of one split come from, used to turn a `line` value into a readable location."""

    description: str
    unit: Literal["line", "record", "row"] = "line"

    def locate(self, line: int) -> str:
        return f"{self.description}, {self.unit} {line}"


@dataclass
class ParallelCorpus:
    """Sentence pairs split into train/validation/test.

    Attributes:
        splits (`datasets.DatasetDict`):
            One dataset per available split, with the columns `source`, `target` (strings) and `line` (the line,
            record or row number the pair came from, 1-based).
        source_field (`str`), target_field (`str`):
            The field names the source and target were read from.
        origins (`dict[str, SplitOrigin]`):
            For each split, the file or dataset it came from.
    """

    splits: datasets.DatasetDict
    source_field: str
    target_field: str
    origins: dict[str, SplitOrigin] = field(default_factory=dict)

    def locate(self, split: str, line: int) -> str:
        """A human-readable location such as `data/train.tsv, line 12`."""
        origin = self.origins.get(split, SplitOrigin(f"split '{split}'", "row"))
        return origin.locate(line)

    def __contains__(self, split: str) -> bool:
        return split in self.splits

    def __getitem__(self, split: str) -> datasets.Dataset:
        return self.splits[split]


# ---------------------------------------------------------------------------------------------------------------------
# Local files
# ---------------------------------------------------------------------------------------------------------------------

_COMPRESSION_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def infer_file_format(path: str | Path) -> Literal["tsv", "csv", "json", "jsonl"]:
    """The format of a data file from its extension: `.tsv`, `.csv`, `.json`, `.jsonl`, optionally compressed."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in _COMPRESSION_OPENERS:
        suffixes = suffixes[:-1]
    extension = suffixes[-1] if suffixes else ""
    formats = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}
    if extension not in formats:
        raise DataValidationError(
            f"{path}: cannot tell the file format from the extension '{extension or '(none)'}'. Use .tsv, .csv, .json "
            "or .jsonl (optionally followed by .gz, .bz2 or .xz)."
        )
    return formats[extension]


def _open_binary(path: Path):
    opener = _COMPRESSION_OPENERS.get(path.suffix.lower(), open)
    return opener(path, "rb")


# Magic bytes of compressed files, and byte-order marks of encodings that are not ASCII-compatible.
_COMPRESSION_MAGIC = {b"\x1f\x8b": ".gz", b"BZh": ".bz2", b"\xfd7zXZ\x00": ".xz"}
_BYTE_ORDER_MARKS = {
    b"\xff\xfe\x00\x00": "utf-32",
    b"\x00\x00\xfe\xff": "utf-32",
    b"\xff\xfe": "utf-16",
    b"\xfe\xff": "utf-16",
}


def describe_binary_start(head: bytes, path: str | Path, encoding: str, compressed: bool = False) -> str | None:
    """A hint for a file that does not decode: it is compressed but not named so, or it is UTF-16/32 read with
    another encoding. `head` is the file's first bytes (after decompression when `compressed`). None if neither."""
    if not compressed:
        for magic, suffix in _COMPRESSION_MAGIC.items():
            if head.startswith(magic):
                return (
                    f"{path} is {suffix[1:]}-compressed (it starts with the {suffix} magic bytes) but its name does "
                    f"not end in {suffix}: rename it to {Path(path).name}{suffix} (or decompress it)"
                )
    normalized = codecs.lookup(encoding).name
    for mark, name in _BYTE_ORDER_MARKS.items():
        if head.startswith(mark) and not normalized.startswith(name):
            return f"{path} starts with a {name.upper()} byte-order mark: pass --encoding {name}"
    return None


def _is_ascii_compatible(encoding: str) -> bool:
    """Whether `\\n` is the single byte 0x0A in `encoding` (not so in UTF-16/UTF-32), so that lines can be split on
    bytes before decoding."""
    return "\n".encode(encoding).endswith(b"\n") and len("\n".encode(encoding).lstrip(b"\xef\xbb\xbf")) == 1


def progress_bar(description: str, unit: str = " lines", total: int | None = None):
    """A `datasets` progress bar (hidden by `datasets.disable_progress_bars()`, as train.py's `--disable_tqdm` does)
    that appears only once its step has lasted `PROGRESS_DELAY_S` seconds."""
    return hf_tqdm(desc=description, unit=unit, unit_scale=True, total=total, delay=PROGRESS_DELAY_S)


def _decoded_lines(path: Path, encoding: str, problems: list[str], max_problems: int) -> Iterator[tuple[int, str]]:
    """Yield `(line_number, text)` for each physical line of `path`, recording undecodable lines as problems.

    Lines are split on `\\n` only (other Unicode line separators are text), and keep their line terminator so that
    CSV readers can rebuild quoted multi-line fields. Lines are read one at a time, with a progress bar.
    """
    with _open_binary(path) as handle:
        head = handle.read(8)
    hint = describe_binary_start(head, path, encoding, compressed=path.suffix.lower() in _COMPRESSION_OPENERS)
    if hint is not None:
        raise DataValidationError(hint)
    if not _is_ascii_compatible(encoding):
        # UTF-16/32: a line break is several bytes; decode the whole file, then split on "\n".
        with _open_binary(path) as handle:
            raw = handle.read()
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as error:
            line = raw[: error.start].decode(encoding, errors="replace").count("\n") + 1
            problems.append(
                f"{path}, line {line}: bytes that cannot be decoded as {encoding} ({error.reason}). Convert the file "
                f"to {encoding} or pass its encoding (--encoding)."
            )
            return
        text = text.removeprefix("\ufeff")
        pieces = text.split("\n")
        for line_number, piece in enumerate(pieces, start=1):
            if line_number == len(pieces):
                if piece:
                    yield line_number, piece
            else:
                yield line_number, piece + "\n"
        return
    with _open_binary(path) as handle, progress_bar(f"Checking {path.name}") as bar:
        for line_number, raw in enumerate(handle, start=1):
            if line_number % _PROGRESS_EVERY == 0:
                bar.update(_PROGRESS_EVERY)
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as error:
                bad = raw[error.start : error.end]
                problems.append(
                    f"{path}, line {line_number}: bytes {bad!r} at byte {error.start} of the line cannot be decoded "
                    f"as {encoding} ({error.reason}). Convert the file to {encoding} or pass its encoding "
                    "(--encoding)."
                )
                if len(problems) >= max_problems:
                    return
                continue
            if line_number == 1 and text.startswith("\ufeff"):
                text = text[1:]  # a UTF-8 byte-order mark; pandas strips it too
            yield line_number, text


def _check_text(value: Any, column: str, role: str) -> str | None:
    """Return a description of what is wrong with one source/target value, or `None` if it is usable."""
    if value is None:
        return f"missing {role} (column '{column}' is null)"
    if not isinstance(value, str):
        return f"{role} (column '{column}') is a {type(value).__name__}, not a string: {value!r}"
    if not value.strip():
        return f"empty {role} (column '{column}')"
    if "\r" in value or "\n" in value:
        return f"{role} (column '{column}') contains a line break; one segment per pair is expected"
    return None


def _lookup(record: dict, column: str) -> tuple[bool, Any]:
    if column in record:
        return True, record[column]
    nested = record.get(TRANSLATION_COLUMN)
    if isinstance(nested, dict) and column in nested:
        return True, nested[column]
    return False, None


def _scan_delimited(
    path: Path, delimiter: str, quoted: bool, source_field: str, target_field: str, encoding: str, max_problems: int
) -> tuple[list[str], np.ndarray]:
    """Check a TSV/CSV file record by record; return its header and the line at which each data record starts (an
    int64 array: no Python object per record is kept)."""
    problems: list[str] = []
    lines = _decoded_lines(path, encoding, problems, max_problems)
    line_numbers = array("q")

    if quoted:
        # CSV: let the csv module join quoted multi-line fields; remember where the current record starts.
        starts: list[int] = []  # the physical lines of the record being read

        def texts() -> Iterator[str]:
            for number, text in lines:
                starts.append(number)
                yield text

        reader = csv.reader(texts(), delimiter=delimiter)

        def csv_records() -> Iterator[tuple[int, list[str]]]:
            for row in reader:  # the reader reads no further than the end of the record it returns
                yield starts[0], row
                starts.clear()

        records = csv_records()
    else:
        # TSV: one record per line, no quoting (quotes are ordinary characters in text).
        def tsv_records() -> Iterator[tuple[int, list[str]]]:
            for number, text in lines:
                stripped = text.rstrip("\n").removesuffix("\r")
                if "\r" in stripped:
                    problems.append(f"{path}, line {number}: carriage return (\\r) inside the line")
                yield number, (stripped.split(delimiter) if stripped else [])

        records = tsv_records()

    header: list[str] | None = None
    for number, row in records:
        if header is None:
            header = row
            _raise_problems(path, problems, max_problems)  # e.g. an undecodable header line
            missing = [c for c in (source_field, target_field) if c not in header]
            if missing:
                raise DataValidationError(
                    f"{path}, line {number} (header): missing column(s) {', '.join(repr(c) for c in missing)}; the "
                    f"header has {header!r}. The first line must name the columns; choose the source and target "
                    "columns with --source_field/--target_field."
                )
            source_index, target_index = header.index(source_field), header.index(target_field)
            continue
        line_numbers.append(number)
        if not row or row == [""]:
            problems.append(f"{path}, line {number}: empty line")
        elif row == header:
            problems.append(
                f"{path}, line {number}: repeats the header line ({', '.join(header)}); were two files concatenated? "
                "Remove the extra header"
            )
        elif len(row) != len(header):
            separator = "tab" if delimiter == "\t" else repr(delimiter)
            problems.append(
                f"{path}, line {number}: expected {len(header)} {separator}-separated fields ({', '.join(header)}), "
                f"found {len(row)}"
            )
        else:
            for index, column, role in ((source_index, source_field, "source"), (target_index, target_field, "target")):
                issue = _check_text(row[index], column, role)
                if issue:
                    problems.append(f"{path}, line {number}: {issue}")
        if len(problems) >= max_problems:
            break

    if header is None and not problems:
        raise DataValidationError(f"{path}: the file is empty (no header line)")
    _raise_problems(path, problems, max_problems)
    if not line_numbers:
        raise DataValidationError(f"{path}: the file has a header but no sentence pairs")
    return header, np.frombuffer(line_numbers, dtype=np.int64)


def _scan_json(
    path: Path, source_field: str, target_field: str, encoding: str, max_problems: int
) -> tuple[Literal["line", "record"], np.ndarray]:
    """Check a JSON-lines file (one line at a time) or a JSON array of objects (read whole: prefer JSON lines for large
    corpora); return the unit and the position of each record (an int64 array)."""
    problems: list[str] = []
    with _open_binary(path) as handle:
        head = handle.read(4096)
    hint = describe_binary_start(head, path, encoding, compressed=path.suffix.lower() in _COMPRESSION_OPENERS)
    if hint is not None:
        raise DataValidationError(hint)
    first_char = head.decode(encoding, errors="ignore").lstrip("\ufeff \t\r\n")[:1]

    records: Iterator[tuple[int, Any]]
    if first_char == "[":
        unit: Literal["line", "record"] = "record"
        with _open_binary(path) as handle:
            raw = handle.read()
        try:
            items = json.loads(raw.decode(encoding))
        except UnicodeDecodeError as error:
            line = raw[: error.start].count(b"\n") + 1
            raise DataValidationError(
                f"{path}, line {line}: bytes that cannot be decoded as {encoding} ({error.reason})"
            ) from error
        except json.JSONDecodeError as error:
            raise DataValidationError(f"{path}, line {error.lineno}: invalid JSON ({error.msg})") from error
        del raw
        records = enumerate(items, start=1)
    else:
        unit = "line"

        def json_lines() -> Iterator[tuple[int, Any]]:
            for number, text in _decoded_lines(path, encoding, problems, max_problems):
                if not text.strip():
                    problems.append(f"{path}, line {number}: empty line")
                else:
                    try:
                        yield number, json.loads(text)
                    except json.JSONDecodeError as error:
                        problems.append(f"{path}, line {number}: invalid JSON ({error.msg} at column {error.colno})")
                if len(problems) >= max_problems:
                    return

        records = json_lines()

    positions = array("q")
    for number, record in records:
        positions.append(number)
        if not isinstance(record, dict):
            problems.append(f"{path}, {unit} {number}: expected a JSON object, found {type(record).__name__}")
        else:
            for column, role in ((source_field, "source"), (target_field, "target")):
                found, value = _lookup(record, column)
                if not found:
                    keys = sorted(record)
                    if isinstance(record.get(TRANSLATION_COLUMN), dict):
                        keys += sorted(f"{TRANSLATION_COLUMN}.{key}" for key in record[TRANSLATION_COLUMN])
                    problems.append(f"{path}, {unit} {number}: missing field '{column}' ({role}); found {keys}")
                else:
                    issue = _check_text(value, column, role)
                    if issue:
                        problems.append(f"{path}, {unit} {number}: {issue}")
        if len(problems) >= max_problems:
            break
    _raise_problems(path, problems, max_problems)
    if not positions:
        raise DataValidationError(f"{path}: the file contains no sentence pairs")
    return unit, np.frombuffer(positions, dtype=np.int64)


def _raise_problems(path: Path | str, problems: list[str], max_problems: int) -> None:
    if not problems:
        return
    stopped = f" (checking stopped after {max_problems}; there may be more)" if len(problems) >= max_problems else ""
    raise DataValidationError(f"{path}: {len(problems)} problem(s) found{stopped}:\n  " + "\n  ".join(problems))


def _select_fields(dataset: datasets.Dataset, source_field: str, target_field: str, origin: str) -> datasets.Dataset:
    """Reduce a loaded dataset to the columns `source` and `target`, looking inside a `translation` dict if needed."""
    if source_field == target_field:
        raise DataValidationError(f"{origin}: source and target field are both '{source_field}'")
    not_top_level = [c for c in (source_field, target_field) if c not in dataset.column_names]
    if not_top_level and TRANSLATION_COLUMN in dataset.column_names:

        def extract(batch):
            return {
                key: [pair.get(key) if isinstance(pair, dict) else None for pair in batch[TRANSLATION_COLUMN]]
                for key in not_top_level
            }

        dataset = dataset.map(extract, batched=True, desc="Reading translation pairs")
    missing = [c for c in (source_field, target_field) if c not in dataset.column_names]
    if missing:
        raise DataValidationError(
            f"{origin}: missing column(s) {', '.join(repr(c) for c in missing)}; available columns are "
            f"{dataset.column_names}. Choose them with --source_field/--target_field."
        )
    dataset = dataset.select_columns([source_field, target_field])
    # Rename through temporary names so that fields called "target"/"source" cannot collide.
    dataset = dataset.rename_columns({source_field: "__source__", target_field: "__target__"})
    return dataset.rename_columns({"__source__": "source", "__target__": "target"})


def load_parallel_file(
    path: str | Path,
    source_field: str,
    target_field: str,
    encoding: str = "utf-8",
    cache_dir: str | None = None,
    max_problems: int = 20,
) -> tuple[datasets.Dataset, SplitOrigin]:
    """Validate and load one local file of sentence pairs with `datasets.load_dataset`.

    Args:
        path: a `.tsv`, `.csv`, `.json` (array of objects or JSON lines) or `.jsonl` file, optionally `.gz`/`.bz2`/`.xz`
            compressed. TSV and CSV files need a header line naming the columns; TSV fields are not quoted.
        source_field, target_field: the column (or JSON key) names of the source and target text. For JSON, keys of a
            nested `"translation"` object are found too.
        encoding: the text encoding of the file.
        cache_dir: the `datasets` cache directory.
        max_problems: stop checking after this many problems and report them.

    Returns:
        The dataset with columns `source`, `target`, `line`, and its [`SplitOrigin`].

    Raises:
        [`DataValidationError`] naming the file, line and problem.
    """
    path = Path(path)
    if not path.is_file():
        raise DataValidationError(f"{path}: no such file")
    try:
        codecs.lookup(encoding)
    except LookupError as error:
        raise DataValidationError(f"{path}: unknown encoding {encoding!r}") from error
    file_format = infer_file_format(path)

    if file_format in ("tsv", "csv"):
        delimiter = "\t" if file_format == "tsv" else ","
        header, positions = _scan_delimited(
            path, delimiter, file_format == "csv", source_field, target_field, encoding, max_problems
        )
        unit: Literal["line", "record"] = "line"
        load_kwargs: dict[str, Any] = {
            "sep": delimiter,
            "quoting": csv.QUOTE_MINIMAL if file_format == "csv" else csv.QUOTE_NONE,
            "na_filter": False,  # "NA", "null", "nan" are text here, not missing values
            "encoding": encoding,
            "features": datasets.Features({column: datasets.Value("string") for column in header}),
        }
        builder = "csv"
    else:
        unit, positions = _scan_json(path, source_field, target_field, encoding, max_problems)
        load_kwargs = {"encoding": encoding}
        builder = "json"

    dataset = datasets.load_dataset(
        builder, data_files={"data": str(path)}, split="data", cache_dir=cache_dir, **load_kwargs
    )
    dataset = _select_fields(dataset, source_field, target_field, str(path))
    if len(dataset) != len(positions):
        raise DataValidationError(
            f"{path}: the file has {len(positions)} sentence pairs but datasets.load_dataset read {len(dataset)} rows; "
            "check the file for stray quotes or line breaks inside fields."
        )
    dataset = dataset.add_column("line", positions)
    return dataset, SplitOrigin(str(path), unit)


# ---------------------------------------------------------------------------------------------------------------------
# Hub datasets
# ---------------------------------------------------------------------------------------------------------------------


def _validate_loaded_split(dataset: datasets.Dataset, origin: SplitOrigin, max_problems: int) -> None:
    """Check every row of an already loaded split (used for Hub datasets, which have no file lines to point at)."""
    problems: list[str] = []
    batch_size = 10_000
    with progress_bar(f"Checking {origin.description}", " rows", total=len(dataset)) as bar:
        for start, batch in zip(range(0, len(dataset), batch_size), dataset.iter(batch_size)):
            for offset, (source, target) in enumerate(zip(batch["source"], batch["target"])):
                for value, role in ((source, "source"), (target, "target")):
                    issue = _check_text(value, role, role)
                    if issue:
                        problems.append(f"{origin.locate(start + offset + 1)}: {issue}")
                if len(problems) >= max_problems:
                    _raise_problems(origin.description, problems, max_problems)
            bar.update(len(batch["source"]))
    _raise_problems(origin.description, problems, max_problems)


def load_hub_dataset(
    dataset_name: str,
    source_field: str,
    target_field: str,
    dataset_config_name: str | None = None,
    cache_dir: str | None = None,
    max_problems: int = 20,
    **load_kwargs,
) -> tuple[datasets.DatasetDict, dict[str, SplitOrigin]]:
    """Load a translation dataset from the Hugging Face Hub (or any `datasets.load_dataset` path) and validate it.

    The splits `train`, `validation` (or `valid`/`dev`/`val`) and `test` are kept. Fields are looked up at the top
    level or inside a `translation` column (`{"translation": {"de": ..., "en": ...}}`, the Hub convention).
    """
    loaded = datasets.load_dataset(dataset_name, dataset_config_name, cache_dir=cache_dir, **load_kwargs)
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    splits, origins = {}, {}
    available = {"train": "train", "test": "test"}
    for alias in VALIDATION_SPLIT_ALIASES:
        if alias in loaded:
            available["validation"] = alias
            break
    name = f"Hub dataset '{dataset_name}'" + (f" ({dataset_config_name})" if dataset_config_name else "")
    for split, hub_split in available.items():
        if hub_split not in loaded:
            continue
        origin = SplitOrigin(f"{name}, split '{hub_split}'", "row")
        dataset = _select_fields(loaded[hub_split], source_field, target_field, origin.description)
        _validate_loaded_split(dataset, origin, max_problems)
        splits[split] = dataset.add_column("line", np.arange(1, len(dataset) + 1, dtype=np.int64))
        origins[split] = origin
    if not splits:
        raise DataValidationError(f"{name}: no train/validation/test split; found {list(loaded)}")
    return datasets.DatasetDict(splits), origins


# ---------------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------------


def embedded_corpus_files(corpus: str = DEFAULT_CORPUS) -> dict[str, Path]:
    """Paths of the files of a corpus shipped with the package, by split."""
    if corpus not in EMBEDDED_CORPORA:
        raise ValueError(f"Unknown embedded corpus {corpus!r}; available: {sorted(EMBEDDED_CORPORA)}")
    directory = CORPORA_DIR / corpus
    return {split: directory / name for split, name in EMBEDDED_CORPORA[corpus]["files"].items()}


def load_parallel_data(
    corpus: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    source_field: str | None = None,
    target_field: str | None = None,
    encoding: str = "utf-8",
    cache_dir: str | None = None,
    max_problems: int = 20,
) -> ParallelCorpus:
    """Load sentence pairs from a Hub dataset, local files, or the embedded corpus (in this order of precedence).

    With no arguments, the embedded Spanish→English Bible corpus is loaded (`es` → `en`; pass
    `source_field="en", target_field="es"` for the other direction).

    Returns:
        A [`ParallelCorpus`] whose splits have the columns `source`, `target` and `line`.
    """
    if dataset_name is not None:
        if not source_field or not target_field:
            raise ValueError("A Hub dataset needs source_field and target_field (e.g. 'de' and 'en').")
        splits, origins = load_hub_dataset(
            dataset_name, source_field, target_field, dataset_config_name, cache_dir, max_problems
        )
        return ParallelCorpus(splits, source_field, target_field, origins)

    files = {"train": train_file, "validation": validation_file, "test": test_file}
    files = {split: path for split, path in files.items() if path is not None}
    if not files:
        corpus = corpus or DEFAULT_CORPUS
        files = {split: str(path) for split, path in embedded_corpus_files(corpus).items()}
        source_field = source_field or EMBEDDED_CORPORA[corpus]["source_field"]
        target_field = target_field or EMBEDDED_CORPORA[corpus]["target_field"]
    if not source_field or not target_field:
        raise ValueError("Local files need source_field and target_field (the column names of source and target).")

    splits, origins = {}, {}
    for split, path in files.items():
        splits[split], origins[split] = load_parallel_file(
            path, source_field, target_field, encoding=encoding, cache_dir=cache_dir, max_problems=max_problems
        )
    return ParallelCorpus(datasets.DatasetDict(splits), source_field, target_field, origins)


# ---------------------------------------------------------------------------------------------------------------------
# Tokenization and length limits
# ---------------------------------------------------------------------------------------------------------------------


# Token ids and attention masks as the tokenized splits store them (Python ints would be stored as int64).
TOKEN_IDS_FEATURE = datasets.List(datasets.Value("int32"))
ATTENTION_MASK_FEATURE = datasets.List(datasets.Value("int8"))


def preprocess_function(
    examples: dict[str, list],
    tokenizer,
    source_column: str = "source",
    target_column: str = "target",
    attention_mask: bool = True,
):
    """Tokenize a batch of pairs: sources with `tokenizer(...)` as `input_ids` (and their `attention_mask` unless
    `attention_mask=False`: a batch collator pads and builds the masks itself), targets with
    `tokenizer(text_target=...)` as `labels`.

    Nothing is truncated here; lengths are checked afterwards by [`handle_overlong`] so that over-long pairs are
    reported instead of being cut silently.
    """
    sources = tokenizer(examples[source_column], return_attention_mask=attention_mask)
    targets = tokenizer(text_target=examples[target_column], return_attention_mask=False)
    model_inputs = {"input_ids": sources["input_ids"]}
    if attention_mask:
        model_inputs["attention_mask"] = sources["attention_mask"]
    model_inputs["labels"] = targets["input_ids"]
    return model_inputs


def tokenization_fingerprint(dataset: datasets.Dataset, tokenizer, settings: dict[str, Any]) -> str | None:
    """The `datasets` fingerprint of `dataset` tokenized by [`preprocess_function`] with `tokenizer` and `settings`,
    from what the tokenizer computes (its `tokenizer.json` pipeline) rather than from the Python object: the tokenizer
    a run trains and the same one loaded from its output folder or a checkpoint find the same cache files.

    None, for `datasets` to hash the object itself, unless `tokenizer` is a plain `tokenizers`-backed tokenizer (the
    kind this package trains): subclasses may switch their pipeline between sources and targets.
    """
    if type(tokenizer) is not PreTrainedTokenizerFast:
        return None
    pipeline = json.loads(tokenizer.backend_tokenizer.to_str())
    for runtime_setting in ("truncation", "padding"):  # set and reset by each call
        pipeline.pop(runtime_setting, None)
    return Hasher.hash(
        [
            dataset._fingerprint,
            Hasher.hash(preprocess_function),
            pipeline,
            list(tokenizer.model_input_names),
            bool(getattr(tokenizer, "split_special_tokens", False)),
            settings,
        ]
    )


def tokenize_corpus(
    corpus: ParallelCorpus | datasets.DatasetDict | Mapping[str, datasets.Dataset],
    tokenizer,
    num_proc: int | None = None,
    keep_columns: Sequence[str] | Mapping[str, Sequence[str]] = ("line",),
    attention_mask: bool = True,
    batch_size: int = 1000,
) -> datasets.DatasetDict:
    """Tokenize every split with `datasets.Dataset.map`, in batches, into its cache (a later run that tokenizes the
    same split with the same tokenizer reads the cache instead: [`tokenization_fingerprint`]).

    Args:
        corpus: the splits, each with `source` and `target` columns.
        tokenizer: a `transformers` tokenizer.
        num_proc: processes to tokenize with (`datasets` splits each split into as many shards).
        keep_columns: the input columns to keep beside the token ids, for every split, or by split name (a split
            the mapping does not name keeps `line`).
        attention_mask: also store the sources' attention masks (all ones before padding).
        batch_size: pairs per call of the tokenizer.

    Returns:
        The splits with `input_ids` and `labels` (int32 lists), `attention_mask` (int8, if asked for) and the kept
        columns.
    """
    splits = corpus.splits if isinstance(corpus, ParallelCorpus) else corpus
    tokenized = {}
    for split, dataset in splits.items():
        keep = keep_columns.get(split, ("line",)) if isinstance(keep_columns, Mapping) else keep_columns
        kept = [c for c in dataset.column_names if c in keep]
        features = datasets.Features({column: dataset.features[column] for column in kept})
        features["input_ids"] = TOKEN_IDS_FEATURE
        if attention_mask:
            features["attention_mask"] = ATTENTION_MASK_FEATURE
        features["labels"] = TOKEN_IDS_FEATURE
        settings = {"keep": kept, "attention_mask": attention_mask, "features": features.to_dict()}
        tokenized[split] = dataset.map(
            preprocess_function,
            batched=True,
            batch_size=batch_size,
            num_proc=num_proc,
            fn_kwargs={"tokenizer": tokenizer, "attention_mask": attention_mask},
            remove_columns=[c for c in dataset.column_names if c not in kept],
            features=features,
            new_fingerprint=tokenization_fingerprint(dataset, tokenizer, settings),
            desc=f"Tokenizing {split}",
        )
    return datasets.DatasetDict(tokenized)


def sequence_lengths(dataset: datasets.Dataset, column: str) -> np.ndarray:
    """Lengths of the token lists in `column` as an int64 array, computed in Arrow on the memory-mapped table (no
    Python object per row); for a split selected by indices (`select`, `filter`), taken at those indices."""
    lengths = pc.list_value_length(dataset.data.column(column)).to_numpy()
    indices = dataset._indices  # the selection `select`/`filter` made, or None (no public accessor in datasets)
    if indices is not None:
        lengths = lengths[indices.column(0).to_numpy()]
    return lengths.astype(np.int64, copy=False)


@dataclass
class OverlongReport:
    """What [`handle_overlong`] found in one split."""

    split: str
    total: int
    overlong: int
    examples: list[str]


def handle_overlong(
    dataset: datasets.Dataset,
    split: str,
    max_source_length: int | None,
    max_target_length: int | None,
    policy: OverlongPolicy = "error",
    corpus: ParallelCorpus | None = None,
    max_examples: int = 5,
) -> tuple[datasets.Dataset, OverlongReport]:
    """Find tokenized pairs longer than the limits (in tokens, `</s>` included) and skip them or raise.

    Args:
        dataset: a tokenized split with `input_ids`, `labels` and (for locations) `line`.
        split: the split name, for messages.
        max_source_length, max_target_length: limits in tokens; `None` means no limit.
        policy: `"skip"` removes the over-long pairs and logs how many; `"error"` raises a [`DataValidationError`];
            `"truncate"` keeps every pair, cutting over-long sources and targets to the limits (the last token stays
            `</s>`), with a warning (used for the test split, whose translations must stay one per pair).
        corpus: used to name the file and line of the first over-long pairs.

    Returns:
        The (possibly filtered) dataset and an [`OverlongReport`].
    """
    if policy not in ("skip", "error", "truncate"):
        raise ValueError(f"overlong policy must be 'skip', 'error' or 'truncate', not {policy!r}")
    source_lengths = sequence_lengths(dataset, "input_ids")
    target_lengths = sequence_lengths(dataset, "labels")
    too_long = np.zeros(len(dataset), dtype=bool)
    if max_source_length is not None:
        too_long |= source_lengths > max_source_length
    if max_target_length is not None:
        too_long |= target_lengths > max_target_length
    bad_indices = np.flatnonzero(too_long)

    examples = []
    lines = dataset.select(bad_indices[:max_examples])["line"] if "line" in dataset.column_names else None
    for position, index in enumerate(bad_indices[:max_examples]):
        where = (
            corpus.locate(split, lines[position])
            if (corpus is not None and lines is not None)
            else f"{split} row {index + 1}"
        )
        examples.append(f"{where}: {source_lengths[index]} source / {target_lengths[index]} target tokens")
    report = OverlongReport(split, len(dataset), len(bad_indices), examples)
    if len(bad_indices) == 0:
        return dataset, report

    limits = f"max_source_length={max_source_length}, max_target_length={max_target_length}"
    if policy == "error":
        raise DataValidationError(
            f"{len(bad_indices)} of {len(dataset)} pairs in split '{split}' are longer than the limits ({limits}):\n  "
            + "\n  ".join(examples)
            + "\nRaise the limits, or pass --overlong skip to leave these pairs out."
        )
    if policy == "truncate":
        logger.warning(
            "Truncated %d of %d pairs in split '%s' to the limits (%s); first ones:\n  %s",
            len(bad_indices),
            len(dataset),
            split,
            limits,
            "\n  ".join(examples),
        )
        return _truncate_rows(dataset, bad_indices, max_source_length, max_target_length), report
    logger.warning(
        "Skipped %d of %d pairs in split '%s' longer than the limits (%s); first ones:\n  %s",
        len(bad_indices),
        len(dataset),
        split,
        limits,
        "\n  ".join(examples),
    )
    kept = dataset.select(np.flatnonzero(~too_long))
    if len(kept) == 0:
        raise DataValidationError(
            f"split '{split}' is empty: all {len(dataset)} of its pairs are longer than the limits ({limits}) and "
            "--overlong skip left them out:\n  " + "\n  ".join(examples) + "\nRaise --max_source_length / "
            "--max_target_length."
        )
    return kept, report


def _cut(ids: list[int], limit: int | None) -> list[int]:
    """`ids` cut to `limit` tokens, keeping its last token (`</s>`) at the end."""
    if limit is None or len(ids) <= limit:
        return ids
    return ids[: limit - 1] + ids[-1:]


def _truncate_rows(
    dataset: datasets.Dataset, indices: np.ndarray, max_source_length: int | None, max_target_length: int | None
) -> datasets.Dataset:
    selected = set(int(i) for i in indices)

    def cut(example, index):
        if index not in selected:
            return example
        example["input_ids"] = _cut(example["input_ids"], max_source_length)
        if "attention_mask" in example:
            example["attention_mask"] = example["attention_mask"][: len(example["input_ids"])]
        example["labels"] = _cut(example["labels"], max_target_length)
        return example

    return dataset.map(cut, with_indices=True, desc="Truncating over-long pairs")
