"""Issue 31: outputs line up with inputs, every option is checked before any work, user errors are one clear line,
and nothing is lost or truncated silently (translate.py, score.py, train.py's checks, data loading, the pipeline)."""

import gzip
import importlib
import json
import os
import subprocess
import sys

import pytest
import torch

import hf_unified_mt
from conftest import make_tokenizer, tiny_config
from mt_checks import ROOT, TRAINING, load_script


LINE_SEPARATORS = "\u2028\u2029\u0085\x0b\x0c\x1c"  # str.splitlines() splits on each of these


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A tiny Unified Transformer (16 positions) and its tokenizer, saved like train.py's output_dir."""
    directory = tmp_path_factory.mktemp("model") / "mt"
    torch.manual_seed(0)
    config = tiny_config(max_position_embeddings=16)
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(config).eval()
    model.generation_config.update(
        max_new_tokens=4, num_beams=1, decoder_start_token_id=1, bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    model.save_pretrained(directory)
    make_tokenizer().save_pretrained(directory)
    return directory


def run_script(name, *arguments):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, str(TRAINING / f"{name}.py"), *map(str, arguments)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# ---------------------------------------------------------------------------------------------- item 2: lines


def test_split_lines_splits_on_newline_only():
    from hf_unified_mt.deployment.inference import split_lines

    text = f"a{LINE_SEPARATORS}b\r\nc\n\nd"
    assert split_lines(text) == [f"a{LINE_SEPARATORS}b", "c", "", "d"]
    assert split_lines(text + "\n") == split_lines(text)
    assert split_lines("") == [] and split_lines("\n") == [""]


def test_translate_py_gives_one_output_line_per_input_line(saved_model, tmp_path):
    translate_script = load_script("translate")
    source = tmp_path / "input.es"
    lines = [f"hola{sep}mundo" for sep in LINE_SEPARATORS] + ["", "el gato"]
    source.write_bytes("\r\n".join(lines).encode("utf-8") + b"\r\n")  # Windows line ends
    output = tmp_path / "out.en"
    translate_script.main([str(saved_model), "--input", str(source), "--output", str(output), "--no_progress"])
    written = output.read_bytes().decode("utf-8")
    assert written.count("\n") == len(lines) and "\r" not in written
    assert written.split("\n")[len(LINE_SEPARATORS)] == ""  # the empty line stays empty, in place


def test_score_py_refuses_files_of_different_lengths(saved_model, tmp_path):
    score_script = load_script("score")
    sources, references = tmp_path / "s.es", tmp_path / "r.en"
    sources.write_text("hola\u2028mundo\nel gato\n", encoding="utf-8")  # two lines, not three
    references.write_text("hello world\nthe cat\n", encoding="utf-8")
    results = score_script.main(
        [
            str(saved_model),
            "--source_file",
            str(sources),
            "--reference_file",
            str(references),
            "--output_dir",
            str(tmp_path / "eval"),
            "--no_progress",
        ]
    )
    assert results["num_sentences"] == 2
    assert len((tmp_path / "eval" / "hypotheses_s.txt").read_text(encoding="utf-8").split("\n")) == 3
    references.write_text("hello world\nthe cat\nextra\n", encoding="utf-8")
    with pytest.raises(score_script.UsageError, match="has 2 lines but .* has 3"):
        score_script.main([str(saved_model), "--source_file", str(sources), "--reference_file", str(references)])


# ---------------------------------------------------------------------------------------------- translate.py


def test_translate_py_max_new_tokens_zero_is_refused(saved_model, tmp_path):
    from hf_unified_mt.deployment.inference import translate

    translate_script = load_script("translate")
    with pytest.raises(translate_script.UsageError, match="--max_new_tokens must be at least 1, not 0"):
        translate_script.main([str(saved_model), "--max_new_tokens", "0"])
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(tiny_config())
    with pytest.raises(ValueError, match="max_new_tokens must be at least 1"):
        translate(model, make_tokenizer(), ["hola"], max_new_tokens=0)


def test_translate_py_checks_paths_and_encoding_before_loading_the_model(saved_model, tmp_path, monkeypatch):
    translate_script = load_script("translate")
    monkeypatch.setattr(translate_script, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    source = tmp_path / "in.es"
    source.write_text("hola\n", encoding="utf-8")
    cases = [
        ([str(tmp_path / "missing.es")], "input file .*missing.es does not exist"),
        (["--output", str(tmp_path / "no" / "such" / "out.en")], "the folder .*no/such does not exist"),
        (["--num_beams", "0"], "--num_beams must be at least 1"),
        (["--encoding", "klingon"], "unknown encoding"),
    ]
    for extra, message in cases:
        arguments = [str(saved_model)] + (
            ["--input", extra[0]] if not extra[0].startswith("-") else ["--input", str(source), *extra]
        )
        with pytest.raises(translate_script.UsageError, match=message):
            translate_script.main(arguments)
    with pytest.raises(translate_script.UsageError, match="model directory .*no-model does not exist"):
        translate_script.main([str(tmp_path / "no-model"), "--input", str(source)])
    latin1 = tmp_path / "latin1.es"
    latin1.write_bytes("hola\nadiós\n".encode("latin-1"))
    with pytest.raises(translate_script.UsageError, match=r"latin1.es, line 2: .* --encoding"):
        translate_script.main([str(saved_model), "--input", str(latin1)])


def test_translate_and_score_run_on_the_threads_asked_for(saved_model, tmp_path):
    """`--threads N` sets PyTorch's CPU threads (which ONNX Runtime sessions created afterwards also take); fewer than
    one is refused before anything is loaded."""
    translate_script, score_script = load_script("translate"), load_script("score")
    source = tmp_path / "in.es"
    source.write_text("hola\n", encoding="utf-8")
    with pytest.raises(translate_script.UsageError, match="--threads must be at least 1, not 0"):
        translate_script.main([str(saved_model), "--input", str(source), "--threads", "0"])
    with pytest.raises(score_script.UsageError, match="--threads must be at least 1, not 0"):
        score_script.main([str(saved_model), "--threads", "0"])
    threads = torch.get_num_threads()
    try:
        translate_script.main([str(saved_model), "--input", str(source), "--output", str(tmp_path / "out.en")]
                              + ["--threads", "1", "--no_progress"])  # fmt: skip
        assert torch.get_num_threads() == 1
        assert (tmp_path / "out.en").read_text(encoding="utf-8").count("\n") == 1
    finally:
        torch.set_num_threads(threads)


def test_translate_py_reads_other_encodings(saved_model, tmp_path):
    translate_script = load_script("translate")
    latin1 = tmp_path / "latin1.es"
    latin1.write_bytes("hola\nadiós\n".encode("latin-1"))
    translate_script.main(
        [
            str(saved_model),
            "--input",
            str(latin1),
            "--encoding",
            "latin-1",
            "--output",
            str(tmp_path / "out.en"),
            "--no_progress",
        ]
    )
    assert len((tmp_path / "out.en").read_text(encoding="latin-1").split("\n")) == 3


def test_translate_py_user_errors_are_one_line_without_traceback(tmp_path):
    source = tmp_path / "in.es"
    source.write_text("hola\n", encoding="utf-8")
    result = run_script("translate", tmp_path / "missing-model", "--input", source)
    assert result.returncode == 2
    assert result.stderr.strip() == f"translate.py: error: model directory {tmp_path / 'missing-model'} does not exist"


def test_an_over_long_line_is_named_or_translated_truncated(saved_model, tmp_path, caplog):
    translate_script = load_script("translate")
    source = tmp_path / "in.es"
    source.write_text("hola\n" + "el gato " * 10 + "\nmundo\n", encoding="utf-8")
    output = tmp_path / "out.en"
    with pytest.raises(translate_script.UsageError, match=r"line 2 \(21 tokens\).*--max_source_length 16"):
        translate_script.main([str(saved_model), "--input", str(source), "--output", str(output)])
    assert not output.exists()
    with caplog.at_level("WARNING"):
        translate_script.main(
            [
                str(saved_model),
                "--input",
                str(source),
                "--output",
                str(output),
                "--max_source_length",
                "16",
                "--no_progress",
            ]
        )
    assert "Truncated 1 source sentence(s) to max_source_length=16 tokens: line 2 (21 tokens)" in caplog.text
    assert len(output.read_text(encoding="utf-8").split("\n")) == 4


# ---------------------------------------------------------------------------------------------- train.py options


TRAIN_BASE = ["--use_cpu", "--report_to", "none", "--max_steps", "2"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--arch", "transformer"], r"unknown --arch 'transformer'; choose from marian, "),
        (["--arch", "marian", "--preset", "huge"], r"unknown --preset 'huge' for --arch marian; choose from base"),
        (["--arch", "marian", "--config_overrides", '{"d_modle": 64}'], "unknown MarianConfig option.*d_modle"),
        (["--config_overrides", '{"encoder_layer": 2}'], "--config_overrides: .*encoder_layer"),
        (["--generation_num_beams", "0"], "--generation_num_beams must be at least 1, not 0"),
        (["--generation_no_repeat_ngram_size", "-1"], "--generation_no_repeat_ngram_size must be at least 0, not -1"),
        (["--max_source_length", "0"], "--max_source_length must be at least 2"),
        (["--learning_rate=-1e-3"], "--learning_rate must be positive"),
        (["--per_device_train_batch_size", "0"], "--per_device_train_batch_size must be at least 1"),
        (["--max_tokens", "0"], "--max_tokens must be at least 1"),
        (["--max_test_samples", "0"], "--max_test_samples must be at least 1"),
        (["--max_steps", "0"], "--max_steps must be positive"),
        (["--train_file", "no/such/train.tsv"], "--train_file no/such/train.tsv: no such file"),
        (["--overlong", "drop"], "--overlong must be skip or error"),
    ],
)
def test_train_py_validates_every_option_before_any_work(arguments, message, monkeypatch, tmp_path):
    from hf_unified_mt.training.arguments import UsageError

    train_script = importlib.import_module("hf_unified_mt.training.run")
    monkeypatch.setattr(train_script, "load_splits", lambda *a, **k: pytest.fail("data was loaded"))
    with pytest.raises(UsageError, match=message):
        train_script.main([*TRAIN_BASE, "--output_dir", str(tmp_path / "out"), *arguments])


def test_train_py_lists_every_bad_option_at_once(monkeypatch, tmp_path):
    from hf_unified_mt.training.arguments import UsageError

    train_script = importlib.import_module("hf_unified_mt.training.run")
    with pytest.raises(UsageError) as error:
        train_script.main(
            [*TRAIN_BASE, "--output_dir", str(tmp_path / "out"), "--learning_rate", "-1", "--generation_num_beams", "0"]
        )
    assert "2 problems" in str(error.value)


def test_train_py_prints_data_errors_without_traceback_or_argument_dump(tmp_path):
    bad = tmp_path / "train.tsv"
    bad.write_text("es\ten\nhola\thello\nsolo\t\n", encoding="utf-8")
    result = run_script(
        "train",
        "--train_file",
        bad,
        "--source_field",
        "es",
        "--target_field",
        "en",
        "--output_dir",
        tmp_path / "out",
        *TRAIN_BASE,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"train.py: error: {bad}: 1 problem(s) found:\n  {bad}, line 3: empty target" in result.stderr
    assert "Traceback" not in result.stderr and "Training arguments" not in result.stdout + result.stderr
    result = run_script("train", "--arch", "nope", "--output_dir", tmp_path / "out")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "train.py: error: unknown --arch 'nope'; choose from marian" in result.stderr


# ---------------------------------------------------------------------------------------------- data


@pytest.mark.parametrize("arch", ["unified_transformer", "marian"])
def test_attn_implementation_chooses_the_training_kernel_and_is_not_saved(tmp_path, arch):
    from hf_unified_mt.training.arguments import parse_arguments

    train_script = importlib.import_module("hf_unified_mt.training.run")
    arguments = [*TRAIN_BASE, "--arch", arch, "--preset", "tiny", "--output_dir", str(tmp_path / "out")]
    model = train_script.prepare_model(*parse_arguments(arguments), make_tokenizer())
    assert model.config._attn_implementation == "sdpa"  # the model's default
    arguments += ["--attn_implementation", "eager"]
    model = train_script.prepare_model(*parse_arguments(arguments), make_tokenizer())
    assert model.config._attn_implementation == "eager"
    model.save_pretrained(tmp_path / "saved")
    assert "attn_implementation" not in (tmp_path / "saved" / "config.json").read_text()  # a runtime choice
    with pytest.raises(ValueError, match="--attn_implementation must be eager or sdpa, not 'flash'"):
        parse_arguments([*arguments, "--attn_implementation", "flash"])


def test_overlong_skip_keeps_test_pairs_truncated_and_names_an_emptied_split(tmp_path):
    from hf_unified_mt.training.arguments import parse_arguments
    from hf_unified_mt.training.data import DataValidationError, load_parallel_data

    train_script = importlib.import_module("hf_unified_mt.training.run")
    path = tmp_path / "test.tsv"
    path.write_text("es\ten\nhola\thello\n" + "el gato " * 10 + "\tthe cat\nmundo\tworld\n", encoding="utf-8")
    model_args, data_args, training_args = parse_arguments(
        [
            *TRAIN_BASE,
            "--output_dir",
            str(tmp_path / "out"),
            "--overlong",
            "skip",
            "--max_source_length",
            "8",
            "--max_target_length",
            "8",
        ]
    )
    corpus = load_parallel_data(test_file=str(path), validation_file=str(path), source_field="es", target_field="en")
    data = train_script.prepare_data(
        corpus, {"test": corpus["test"], "validation": corpus["validation"]}, make_tokenizer(), data_args, training_args
    )
    assert len(data.splits["test"]) == 3 and len(data.texts["test"]["source"]) == 3  # one line per test pair
    assert data.truncated == {"test": 1} and data.skipped == {"test": 0, "validation": 1}
    assert max(len(ids) for ids in data.splits["test"]["input_ids"]) == 8
    assert data.splits["test"]["input_ids"][1][-1] == 2  # still ends with </s>
    assert data.texts["test"]["source"][1] == "el gato " * 10  # scored against the full pair

    data_args.max_source_length = 1
    with pytest.raises(DataValidationError, match=r"split 'validation' is empty: all 3 of its pairs are longer"):
        train_script.prepare_data(
            corpus, {"validation": corpus["validation"]}, make_tokenizer(), data_args, training_args
        )


def test_repeated_header_inside_a_tsv_is_refused(tmp_path):
    from hf_unified_mt.training.data import DataValidationError, load_parallel_file

    path = tmp_path / "both.tsv"
    path.write_text("es\ten\nhola\thello\nes\ten\nmundo\tworld\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match=r"both.tsv, line 3: repeats the header line \(es, en\)"):
        load_parallel_file(path, "es", "en")
    csv_path = tmp_path / "both.csv"
    csv_path.write_text("es,en\nhola,hello\nes,en\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match="line 3: repeats the header"):
        load_parallel_file(csv_path, "es", "en")


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".jsonl"])
def test_utf16_files_load_with_their_encoding(tmp_path, suffix):
    from hf_unified_mt.training.data import DataValidationError, load_parallel_file

    if suffix == ".jsonl":
        text = "".join(json.dumps({"es": s, "en": t}, ensure_ascii=False) + "\n" for s, t in [("año", "year")] * 2)
    else:
        separator = "\t" if suffix == ".tsv" else ","
        text = f"es{separator}en\nhola{separator}hello\naño\u2028nuevo{separator}new year\n"
    path = tmp_path / f"data{suffix}"
    path.write_bytes(text.encode("utf-16"))
    dataset, _ = load_parallel_file(path, "es", "en", encoding="utf-16")
    assert "año" in dataset["source"][-1] and len(dataset) == 2
    with pytest.raises(DataValidationError, match="UTF-16 byte-order mark: pass --encoding utf-16"):
        load_parallel_file(path, "es", "en")


def test_compressed_file_without_its_suffix_gets_a_hint(tmp_path):
    from hf_unified_mt.training.data import DataValidationError, load_parallel_file

    path = tmp_path / "train.tsv"
    path.write_bytes(gzip.compress(b"es\ten\nhola\thello\n"))
    with pytest.raises(DataValidationError, match=r"train.tsv is gz-compressed .* rename it to train.tsv.gz") as error:
        load_parallel_file(path, "es", "en")
    assert "cannot be decoded" not in str(error.value)


# ---------------------------------------------------------------------------------------------- resume


def test_a_checkpoint_with_a_truncated_trainer_state_is_skipped(tmp_path, caplog):
    from hf_unified_mt.training.checkpoints import last_complete_checkpoint

    for step in (10, 20):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (tmp_path / "checkpoint-20" / "trainer_state.json").write_text('{"global_step": 20, "log_hi')
    with caplog.at_level("WARNING"):
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")
    assert "checkpoint-20 is incomplete (its trainer_state.json cannot be read" in caplog.text


def test_logged_loss_sum_weighs_each_logging_interval():
    from hf_unified_mt.training.batching import logged_loss_sum

    history = [
        {"loss": 4.0, "step": 2},
        {"eval_bleu": 1.0, "step": 2},
        {"loss": 1.0, "step": 3},
        {"loss": 9.0, "step": 9},
    ]
    assert logged_loss_sum(history, 3) == pytest.approx(9.0)  # 4 + 4 + 1 over steps 1..3
    assert logged_loss_sum([], 3) is None


def test_a_file_run_does_not_record_the_default_corpus(tmp_path):
    from hf_unified_mt.training.arguments import parse_arguments

    train_script = importlib.import_module("hf_unified_mt.training.run")
    path = tmp_path / "train.tsv"
    path.write_text("es\ten\nhola\thello\n", encoding="utf-8")
    model = torch.nn.Linear(1, 1)
    model.config = hf_unified_mt.get_config("unified_transformer", "tiny")
    for extra, corpus in (([], "bible_es_en"), (["--train_file", str(path)], None)):
        arguments = parse_arguments([*TRAIN_BASE, "--output_dir", str(tmp_path / "out"), *extra])
        described = train_script.describe_run(
            *arguments, model, make_tokenizer(), train_script.PreparedData({}, {}, {})
        )
        assert described["training_arguments"]["corpus"] == corpus


def test_translate_and_score_run_int8(saved_model, tmp_path):
    """`--int8` (issue 33): the quantised model translates one line per input line and scores; it refuses a GPU
    device or another dtype before any work."""
    translate_script, score_script = load_script("translate"), load_script("score")
    source, output = tmp_path / "input.es", tmp_path / "out.en"
    source.write_text("hola mundo\nel gato\n", encoding="utf-8")
    translate_script.main(
        [
            str(saved_model),
            "--input",
            str(source),
            "--output",
            str(output),
            "--no_progress",
            "--int8",
            "--num_beams",
            "2",
        ]
    )
    assert output.read_text(encoding="utf-8").count("\n") == 2
    references = tmp_path / "r.en"
    references.write_text("hello world\nthe cat\n", encoding="utf-8")
    results = score_script.main(
        [
            str(saved_model),
            "--source_file",
            str(source),
            "--reference_file",
            str(references),
            "--output_dir",
            str(tmp_path / "eval"),
            "--no_progress",
            "--int8",
        ]
    )
    assert results["num_sentences"] == 2
    with pytest.raises(translate_script.UsageError, match="--int8"):
        translate_script.main([str(saved_model), "--int8", "--dtype", "bfloat16"])
