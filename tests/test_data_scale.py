"""The data path at scale (`benchmarks/data_path_scale.py` measures it on millions of pairs): files checked a line at a
time into arrays, the tokenizer trained from a stream of batches (a fixed sample of a large split, cached for the next
run), tokenization through the `datasets` cache that a second run reads instead of tokenizing again, lengths from
Arrow, and the token sampler cut with array operations."""

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tracemalloc

import datasets
import numpy as np
import pyarrow as pa
import pytest
from transformers import DataCollatorForSeq2Seq
from transformers.tokenization_utils_tokenizers import TokenizersBackend

from hf_unified_mt.training import tokenization
from hf_unified_mt.training.batching import MaxTokensBatchSampler
from hf_unified_mt.training.data import (
    _scan_delimited,
    _scan_json,
    handle_overlong,
    load_parallel_data,
    sequence_lengths,
    tokenize_corpus,
)
from hf_unified_mt.training.tokenization import load_tokenizer, train_tokenizer_on_corpus, training_sample
from mt_checks import ROOT


def load_benchmark():
    spec = importlib.util.spec_from_file_location("data_path_scale", ROOT / "benchmarks" / "data_path_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    """10,000 synthetic pairs, built as the benchmark builds its millions."""
    path = tmp_path_factory.mktemp("corpus") / "train.tsv"
    load_benchmark().build_corpus(path, 10_000, "tsv")
    return path


def traced_peak_mib(function, *args, **kwargs):
    """The result of `function` and the peak of the Python memory it allocated (tracemalloc; numpy arrays count)."""
    tracemalloc.start()
    try:
        result = function(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak / 2**20


@pytest.fixture
def encode_calls(monkeypatch):
    """Counts the batches the package's tokenizers encode."""
    calls = []
    encode = TokenizersBackend._encode_plus

    def counting(self, *args, **kwargs):
        calls.append(1)
        return encode(self, *args, **kwargs)

    monkeypatch.setattr(TokenizersBackend, "_encode_plus", counting)
    return calls


def data_path(corpus_file, cache_dir):
    """What train.py does with a train file, up to the batches of the first epoch."""
    corpus = load_parallel_data(train_file=str(corpus_file), source_field="es", target_field="en", cache_dir=cache_dir)
    tokenizer = train_tokenizer_on_corpus(corpus["train"], vocab_size=500, max_pairs=5000, cache=True)
    tokenized = tokenize_corpus(corpus, tokenizer, keep_columns=("line",), attention_mask=False)
    kept, report = handle_overlong(tokenized["train"], "train", 64, 64, "skip", corpus)
    sampler = MaxTokensBatchSampler(sequence_lengths(kept, "input_ids"), sequence_lengths(kept, "labels"), 2048)
    return tokenizer, tokenized["train"], kept, report, sampler


def test_a_synthetic_corpus_goes_through_the_data_path_and_a_second_run_reads_the_cache(
    corpus_file, tmp_path, encode_calls, monkeypatch
):
    cache_dir = str(tmp_path / "cache")
    tokenizer, tokenized, kept, report, sampler = data_path(corpus_file, cache_dir)
    assert encode_calls  # tokenized
    assert tokenized.column_names == ["line", "input_ids", "labels"]  # no copy of the texts, no all-ones masks
    assert tokenized.features["input_ids"] == datasets.List(datasets.Value("int32"))
    assert report.total == 10_000 and len(kept) == 10_000 - report.overlong
    batches = list(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(len(kept)))
    collated = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)(kept.select(batches[0]).to_list())
    assert collated["input_ids"].numel() + collated["labels"].numel() <= 2048
    assert collated["attention_mask"].sum() == (collated["input_ids"] != tokenizer.pad_token_id).sum()

    # The same data path again (new objects, as in a new process): the tokenizer and the tokenized split come from the
    # cache; nothing is trained or tokenized.
    encode_calls.clear()

    def no_training(*args, **kwargs):
        raise AssertionError("the tokenizer was trained again")

    monkeypatch.setattr(tokenization, "_train_backend", no_training)
    again, tokenized_again, kept_again, _, sampler_again = data_path(corpus_file, cache_dir)
    assert not encode_calls
    assert again.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()
    assert tokenized_again.cache_files == tokenized.cache_files
    assert list(sampler_again) == batches


def test_a_tokenizer_loaded_from_disk_finds_the_tokens_of_the_one_trained(corpus_file, tmp_path, encode_calls):
    """A resumed run loads the tokenizer from its checkpoint: its tokenization is the trained one's, cached."""
    corpus = load_parallel_data(train_file=str(corpus_file), source_field="es", target_field="en", cache_dir=tmp_path)
    train = datasets.DatasetDict(train=corpus["train"].select(range(1000)))
    trained = train_tokenizer_on_corpus(train["train"], vocab_size=300)
    first = tokenize_corpus(train, trained)["train"]
    trained.save_pretrained(tmp_path / "tokenizer")
    encode_calls.clear()
    loaded = tokenize_corpus(train, load_tokenizer(str(tmp_path / "tokenizer")))["train"]
    assert not encode_calls and loaded.cache_files == first.cache_files
    # another tokenizer tokenizes anew
    other = train_tokenizer_on_corpus(train["train"], vocab_size=400)
    assert tokenize_corpus(train, other)["train"].cache_files != first.cache_files and encode_calls


def test_a_cached_tokenizer_that_cannot_be_read_is_trained_again(corpus_file, tmp_path, caplog):
    corpus = load_parallel_data(train_file=str(corpus_file), source_field="es", target_field="en", cache_dir=tmp_path)
    train = corpus["train"].select(range(500))
    trained = train_tokenizer_on_corpus(train, vocab_size=200, cache=True)
    cache_file = tokenization.tokenizer_cache_file(
        train,
        dict(
            vocab_size=200, tokenizer_type="bpe", min_frequency=2, source_column="source", target_column="target",
            max_pairs=None,
        ),
    )  # fmt: skip
    assert cache_file.is_file() and cache_file.is_relative_to(tmp_path)  # beside the split's cache files
    cache_file.write_text('{"version": ')  # cut short
    with caplog.at_level("WARNING"):
        again = train_tokenizer_on_corpus(train, vocab_size=200, cache=True)
    assert "training it again" in caplog.text
    assert again.backend_tokenizer.to_str() == trained.backend_tokenizer.to_str()
    assert json.loads(cache_file.read_text())["model"]["type"] == "BPE"  # written anew


def test_the_tokenizer_trains_on_a_fixed_sample_of_a_large_split(monkeypatch):
    assert training_sample(1000, None) is None and training_sample(1000, 1000) is None
    sample = training_sample(1000, 10)
    assert len(sample) == len(set(sample.tolist())) == 10 and (np.diff(sample) > 0).all()
    assert (training_sample(1000, 10) == sample).all()  # the same sample in every run
    with pytest.raises(ValueError, match="max_pairs must be positive"):
        training_sample(1000, 0)

    class Read(Exception):
        pass

    read = []

    def spy(texts, *args, **kwargs):
        read.extend(texts)
        raise Read

    monkeypatch.setattr(tokenization, "_train_backend", spy)
    pairs = datasets.Dataset.from_dict(
        {"source": [f"fuente {i}" for i in range(50)], "target": [f"objetivo {i}" for i in range(50)]}
    )
    with pytest.raises(Read):
        train_tokenizer_on_corpus(pairs, vocab_size=100, max_pairs=10)
    rows = training_sample(50, 10).tolist()
    assert read == [f"fuente {i}" for i in rows] + [f"objetivo {i}" for i in rows]


def test_tokenizer_training_reads_the_split_a_batch_at_a_time():
    words = np.array([f"palabra{i:02d}" * 2 for i in range(50)])
    rng = np.random.default_rng(0)

    def column():
        return pa.array([" ".join(row) for row in words[rng.integers(0, 50, (40_000, 5))]])

    pairs = datasets.Dataset(pa.table({"source": column(), "target": column()}))
    all_texts_mib = 2 * 40_000 * (49 + 5 * 19) / 2**20  # the sentences as Python strings: 11 MiB
    tokenizer, peak = traced_peak_mib(train_tokenizer_on_corpus, pairs, vocab_size=100)
    text = "palabra07palabra07 palabra42palabra42"
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text
    assert peak < all_texts_mib / 2  # 10,000 pairs at a time


def test_checking_a_file_keeps_no_python_object_per_record(tmp_path):
    rows = 40_000
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("es\ten\n" + "".join(f"uno {i}\tone {i}\n" for i in range(rows)))
    (header, lines), peak = traced_peak_mib(_scan_delimited, tsv, "\t", False, "es", "en", "utf-8", 20)
    assert header == ["es", "en"] and lines.dtype == np.int64 and (lines == np.arange(2, rows + 2)).all()
    assert peak < 1  # the line numbers as 8-byte integers (0.3 MiB); a list of Python ints takes 1.4 MiB

    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text("".join(json.dumps({"es": f"uno {i}", "en": f"one {i}"}) + "\n" for i in range(rows)))
    (unit, lines), peak = traced_peak_mib(_scan_json, jsonl, "es", "en", "utf-8", 20)
    assert unit == "line" and (lines == np.arange(1, rows + 1)).all()
    assert peak < 1  # the records as Python dicts would take over 10 MiB


def test_sequence_lengths_come_from_arrow_as_int64_arrays():
    rows = 200_000
    lengths = np.random.default_rng(0).integers(1, 40, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.ones(offsets[-1], dtype=np.int32)))
    dataset = datasets.Dataset(pa.table({"input_ids": ids}))
    computed, peak = traced_peak_mib(sequence_lengths, dataset, "input_ids")
    assert isinstance(computed, np.ndarray) and computed.dtype == np.int64 and (computed == lengths).all()
    assert peak < 5  # the 200,000 lengths (1.6 MiB); the rows as Python lists would take over 40 MiB

    selected = dataset.select(np.flatnonzero(lengths > 20)[::-1])
    computed, peak = traced_peak_mib(sequence_lengths, selected, "input_ids")
    assert (computed == lengths[np.flatnonzero(lengths > 20)[::-1]]).all() and peak < 5
    small = dataset.select(range(5)).filter(lambda row: len(row["input_ids"]) % 2 == 0)
    assert sequence_lengths(small, "input_ids").tolist() == [len(row["input_ids"]) for row in small]


def reference_batches(sources, targets, order, max_tokens, max_sentences, multiple):
    """The greedy cut one example at a time (how MaxTokensBatchSampler cut before it used array operations)."""

    def rounded(length):
        return -(-length // multiple) * multiple if multiple else length

    batches, batch, longest_source, longest_target = [], [], 0, 0
    for index in order.tolist():
        source = max(longest_source, rounded(int(sources[index])))
        target = max(longest_target, rounded(int(targets[index])))
        size = len(batch) + 1
        if batch and (size * (source + target) > max_tokens or (max_sentences is not None and size > max_sentences)):
            batches.append(batch)
            batch, source, target = [], rounded(int(sources[index])), rounded(int(targets[index]))
        batch.append(index)
        longest_source, longest_target = source, target
    return batches + ([batch] if batch else [])


@pytest.mark.parametrize("seed", range(6))
def test_the_sampler_cuts_batches_as_the_example_by_example_greedy_cut(seed):
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 3000))
    sources, targets = rng.integers(1, 120, count), rng.integers(1, 120, count)
    max_tokens = int(rng.integers(260, 5000))
    max_sentences = [None, int(rng.integers(1, 80))][seed % 2]
    multiple = [None, 8, 3][seed % 3]
    sampler = MaxTokensBatchSampler(
        sources, targets, max_tokens, max_sentences, shuffle=False, pad_to_multiple_of=multiple
    )
    order = sampler._sorted_indices(None)
    expected = reference_batches(sources, targets, order, max_tokens, max_sentences, multiple)
    assert [batch.tolist() for batch in sampler._greedy_batches(order)] == expected
    assert list(sampler) == expected


@pytest.mark.subprocess
def test_the_benchmark_runs_train_py_twice_and_the_second_run_reads_the_cache(tmp_path):
    """`benchmarks/data_path_scale.py` at 3,000 pairs: the second identical train.py command trains no tokenizer and
    tokenizes nothing (datasets loads its cache), and the JSON holds each stage, the memory and the disk."""
    output = tmp_path / "result.json"
    command = [
        sys.executable, str(ROOT / "benchmarks" / "data_path_scale.py"), "--pairs", "3000", "--work_dir",
        str(tmp_path / "work"), "--output", str(output), "--", "--tokenizer_max_train_pairs", "1000",
        "--tokenizer_vocab_size", "300", "--use_cpu",
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads(output.read_text())
    first, second = document["runs"]["first"], document["runs"]["second"]
    assert set(first["stages"]) == {"load_splits", "get_tokenizer", "prepare_model", "prepare_data", "build_trainer",
                                    "token_sampler"}  # fmt: skip
    assert 0 < first["first_update_s"] and first["peak_memory_tree_mib"]["pss"] > 0
    assert not first["tokenized_cache_hit"] and second["tokenized_cache_hit"]
    assert second["tokenized_train_cache_files"] == first["tokenized_train_cache_files"]
    assert document["summary"]["cache_hit"] and document["train_py"][0] == "training/train.py"

    first_log, second_log = ((tmp_path / "work" / f"{name}.log").read_text() for name in ("first", "second"))
    assert "on a random sample of 1,000 of the 3,000 (--tokenizer_max_train_pairs) training pairs" in first_log
    assert "Loading the tokenizer trained on these pairs" in second_log
    assert "Caching processed dataset at" in first_log and "Caching processed dataset at" not in second_log
    assert "Loading cached processed dataset at" in second_log


def test_train_py_keeps_no_texts_of_the_train_split_and_checks_the_tokenizer_sample(corpus_file, tmp_path, monkeypatch):
    run = importlib.import_module("hf_unified_mt.training.run")
    base = ["--use_cpu", "--report_to", "none", "--max_steps", "2", "--output_dir", str(tmp_path / "out")]
    limits = ["--max_source_length", "1000", "--max_target_length", "1000"]
    model_args, data_args, training_args = run.parse_arguments([*base, *limits])
    assert model_args.tokenizer_max_train_pairs == 1_000_000  # Marian samples 2,000,000 lines (1,000,000 pairs)
    corpus = load_parallel_data(
        train_file=str(corpus_file), validation_file=str(corpus_file), source_field="es", target_field="en"
    )
    raw = {"train": corpus["train"].select(range(300)), "validation": corpus["validation"].select(range(20))}
    tokenizer = train_tokenizer_on_corpus(raw["train"], vocab_size=200)
    data = run.prepare_data(corpus, raw, tokenizer, data_args, training_args)
    assert data.splits["train"].column_names == ["input_ids", "labels"] and "train" not in data.texts
    assert list(data.texts["validation"]["source"]) == list(raw["validation"]["source"])

    monkeypatch.setattr(run, "load_splits", lambda *a, **k: pytest.fail("data was loaded"))
    with pytest.raises(run.UsageError, match="--tokenizer_max_train_pairs must be at least 1, not 0"):
        run.main([*base, "--tokenizer_max_train_pairs", "0"])
