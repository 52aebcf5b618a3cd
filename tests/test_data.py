"""Loading and validating parallel data: the embedded corpus, local files, Hub-style datasets, length limits."""

import gzip
import json

import pytest

from hf_unified_mt.training.data import (
    DataValidationError,
    embedded_corpus_files,
    handle_overlong,
    load_hub_dataset,
    load_parallel_data,
    load_parallel_file,
    preprocess_function,
    sequence_lengths,
    tokenize_corpus,
)


def write(path, content):
    if isinstance(content, str):
        content = content.encode("utf-8")
    if path.suffix == ".gz":
        content = gzip.compress(content)
    path.write_bytes(content)
    return path


# ---------------------------------------------------------------------------------------------------------------------
# Embedded corpus
# ---------------------------------------------------------------------------------------------------------------------


def test_embedded_corpus_ships_with_readme_and_loads_every_row():
    files = embedded_corpus_files("bible_es_en")
    assert set(files) == {"train", "validation", "test"}
    readme = (files["train"].parent / "README.md").read_text()
    assert "public domain" in readme and "World English Bible" in readme

    corpus = load_parallel_data()  # the default
    assert {split: len(corpus[split]) for split in corpus.splits} == {"train": 27814, "validation": 928, "test": 2315}
    assert corpus["train"].column_names == ["source", "target", "line"]
    first = corpus["train"][0]
    assert first["source"].startswith("EN el principio crió Dios")
    assert first["target"].startswith("In the beginning, God created")
    assert first["line"] == 2  # line 1 is the header
    assert corpus.locate("test", 7).endswith("test.tsv.gz, line 7")


def test_embedded_corpus_reverse_direction():
    corpus = load_parallel_data(source_field="en", target_field="es", test_file=None)
    assert corpus["validation"][0]["source"] == load_parallel_data()["validation"][0]["target"]


# ---------------------------------------------------------------------------------------------------------------------
# Local files: valid
# ---------------------------------------------------------------------------------------------------------------------


def test_tsv_keeps_quotes_and_na_like_text(tmp_path):
    path = write(
        tmp_path / "pairs.tsv.gz",
        'id\tde\ten\n1\tEr sagte "ja".\tHe said "yes".\n2\tNA\tnull\n3\t"\tnan\n',
    )
    dataset, origin = load_parallel_file(path, "de", "en")
    assert dataset["source"] == ['Er sagte "ja".', "NA", '"']
    assert dataset["target"] == ['He said "yes".', "null", "nan"]
    assert dataset["line"] == [2, 3, 4]
    assert origin.locate(3) == f"{path}, line 3"


def test_csv_with_quoted_fields(tmp_path):
    path = write(tmp_path / "pairs.csv", 'src,tgt\n"uno, dos","one, two"\n"dice ""hola""",says "hi"\n')
    dataset, _ = load_parallel_file(path, "src", "tgt")
    assert dataset["source"] == ["uno, dos", 'dice "hola"']
    assert dataset["target"] == ["one, two", 'says "hi"']


def test_latin1_file_with_encoding_option(tmp_path):
    path = write(tmp_path / "latin.tsv", "es\ten\nañejo\taged\n".encode("latin-1"))
    with pytest.raises(DataValidationError, match=r"line 2: .*cannot be decoded as utf-8"):
        load_parallel_file(path, "es", "en")
    dataset, _ = load_parallel_file(path, "es", "en", encoding="latin-1")
    assert dataset["source"] == ["añejo"]


def test_jsonl_with_translation_dicts_and_json_array(tmp_path):
    lines = [
        {"id": 1, "translation": {"de": "Hallo", "en": "Hello"}},
        {"id": 2, "translation": {"de": "Ja", "en": "Yes"}},
    ]
    jsonl = write(tmp_path / "pairs.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    dataset, origin = load_parallel_file(jsonl, "de", "en")
    assert dataset["source"] == ["Hallo", "Ja"] and dataset["target"] == ["Hello", "Yes"]
    assert origin.unit == "line"

    array = write(tmp_path / "pairs.json", json.dumps([{"src": "a", "tgt": "b"}, {"src": "c", "tgt": "d"}]))
    dataset, origin = load_parallel_file(array, "src", "tgt")
    assert dataset["source"] == ["a", "c"] and origin.unit == "record"


def test_local_files_as_splits(tmp_path):
    train = write(tmp_path / "train.tsv", "es\ten\nuno\tone\ndos\ttwo\n")
    valid = write(tmp_path / "valid.jsonl", '{"es": "tres", "en": "three"}\n')
    corpus = load_parallel_data(train_file=str(train), validation_file=str(valid), source_field="es", target_field="en")
    assert set(corpus.splits) == {"train", "validation"}
    assert corpus["validation"]["target"] == ["three"]
    assert corpus.locate("train", 3) == f"{train}, line 3"


# ---------------------------------------------------------------------------------------------------------------------
# Local files: errors name the file, the line and the problem
# ---------------------------------------------------------------------------------------------------------------------


def test_tsv_problems_are_all_reported_with_lines(tmp_path):
    path = write(tmp_path / "bad.tsv", "es\ten\nhola\thello\n\nadiós\t  \n\tempty source\nx\ty\tz\nbien\tfine\n")
    with pytest.raises(DataValidationError) as error:
        load_parallel_file(path, "es", "en")
    message = str(error.value)
    assert str(path) in message
    assert f"{path}, line 3: empty line" in message
    assert f"{path}, line 4: empty target (column 'en')" in message
    assert f"{path}, line 5: empty source (column 'es')" in message
    assert f"{path}, line 6: expected 2 tab-separated fields (es, en), found 3" in message
    assert "line 7" not in message


def test_missing_column_names_the_header(tmp_path):
    path = write(tmp_path / "cols.tsv", "spanish\tenglish\nhola\thello\n")
    with pytest.raises(DataValidationError, match=r"line 1 \(header\): missing column\(s\) 'es', 'en'.*'spanish'"):
        load_parallel_file(path, "es", "en")


def test_undecodable_bytes_name_the_line(tmp_path):
    path = write(tmp_path / "enc.tsv.gz", b"es\ten\nhola\thello\nmal \xff\xfe\tbad\n")
    with pytest.raises(DataValidationError, match=r"enc\.tsv\.gz, line 3: bytes b'\\xff' .*cannot be decoded as utf-8"):
        load_parallel_file(path, "es", "en")


def test_csv_multiline_field_and_empty_value(tmp_path):
    path = write(tmp_path / "bad.csv", 'es,en\n"dos\nlíneas",two\nsolo,\n')
    with pytest.raises(DataValidationError) as error:
        load_parallel_file(path, "es", "en")
    assert "bad.csv, line 2: source (column 'es') contains a line break" in str(error.value)
    assert "bad.csv, line 4: empty target (column 'en')" in str(error.value)


def test_json_problems(tmp_path):
    path = write(tmp_path / "bad.jsonl", '{"es": "a", "en": "b"}\n{"es": "c"}\nnot json\n{"es": 3, "en": "x"}\n')
    with pytest.raises(DataValidationError) as error:
        load_parallel_file(path, "es", "en")
    message = str(error.value)
    assert "bad.jsonl, line 2: missing field 'en' (target)" in message
    assert "bad.jsonl, line 3: invalid JSON" in message
    assert "bad.jsonl, line 4: source (column 'es') is a int, not a string" in message


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(DataValidationError, match="no such file"):
        load_parallel_file(tmp_path / "nope.tsv", "es", "en")
    path = write(tmp_path / "pairs.xlsx", "x")
    with pytest.raises(DataValidationError, match="cannot tell the file format"):
        load_parallel_file(path, "es", "en")


# ---------------------------------------------------------------------------------------------------------------------
# Hub-style datasets (through datasets.load_dataset with a local builder; the Hub is not reachable here)
# ---------------------------------------------------------------------------------------------------------------------


def test_hub_path_with_translation_column_and_dev_split(tmp_path):
    rows = [{"translation": {"fr": f"phrase {i}", "en": f"sentence {i}"}} for i in range(3)]
    train = write(tmp_path / "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    dev = write(tmp_path / "dev.jsonl", json.dumps(rows[0]) + "\n")
    splits, origins = load_hub_dataset("json", "fr", "en", data_files={"train": str(train), "dev": str(dev)})
    assert set(splits) == {"train", "validation"}
    assert splits["train"]["source"] == ["phrase 0", "phrase 1", "phrase 2"]
    assert splits["validation"]["target"] == ["sentence 0"]
    assert origins["validation"].locate(1) == "Hub dataset 'json', split 'dev', row 1"


def test_hub_path_reports_empty_rows(tmp_path):
    train = write(tmp_path / "train.jsonl", '{"fr": "a", "en": "b"}\n{"fr": "c", "en": ""}\n')
    with pytest.raises(DataValidationError, match=r"split 'train', row 2: empty target"):
        load_hub_dataset("json", "fr", "en", data_files={"train": str(train)})
    with pytest.raises(DataValidationError, match=r"missing column\(s\) 'de'"):
        load_hub_dataset("json", "de", "en", data_files={"train": str(train)})


# ---------------------------------------------------------------------------------------------------------------------
# Tokenization and length limits
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_tokenizer():
    from hf_unified_mt.training.tokenization import train_tokenizer_on_corpus

    corpus = load_parallel_data()
    return train_tokenizer_on_corpus(corpus["train"].select(range(500)), vocab_size=400)


def test_preprocess_tokenizes_sources_and_targets(small_tokenizer):
    batch = preprocess_function({"source": ["Y dijo Dios"], "target": ["And God said"]}, small_tokenizer)
    assert batch["input_ids"][0][-1] == small_tokenizer.eos_token_id
    assert batch["labels"][0][-1] == small_tokenizer.eos_token_id
    assert small_tokenizer.decode(batch["labels"][0], skip_special_tokens=True) == "And God said"


def test_overlong_pairs_skip_or_error_with_locations(tmp_path, small_tokenizer):
    path = write(
        tmp_path / "train.tsv",
        "es\ten\nhola\thello\n" + "palabra " * 40 + "\tword\n" + "sí\t" + "yes " * 40 + "\nadiós\tbye\n",
    )
    corpus = load_parallel_data(train_file=str(path), source_field="es", target_field="en")
    tokenized = tokenize_corpus(corpus, small_tokenizer)
    train = tokenized["train"]
    assert set(train.column_names) == {"input_ids", "attention_mask", "labels", "line"}

    with pytest.raises(DataValidationError) as error:
        handle_overlong(train, "train", 20, 20, "error", corpus)
    message = str(error.value)
    assert "2 of 4 pairs in split 'train'" in message
    assert f"{path}, line 3:" in message and f"{path}, line 4:" in message

    kept, report = handle_overlong(train, "train", 20, 20, "skip", corpus)
    assert report.overlong == 2 and report.total == 4
    assert kept["line"] == [2, 5]
    assert list(sequence_lengths(kept, "input_ids")) == [len(x) for x in kept["input_ids"]]

    unchanged, report = handle_overlong(train, "train", None, None, "error", corpus)
    assert report.overlong == 0 and len(unchanged) == 4
