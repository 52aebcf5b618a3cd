"""Issue 62: what the commands write. translate.py checks that its output can be encoded before writing it, and
replaces an output file only once it is complete (the input may be the output); score.py refuses a results folder it
cannot write before translating, and prints the scores before writing; the demo writes only a folder it made;
average_checkpoints.py saves into a new or empty folder, all at once; the analysis tools write atomically and read
only paths inside their folders; `--no_progress` hides the weight-loading bar; the Multi-Encoder's `tiny` preset has
the positions of the other `tiny` presets."""

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast
from transformers.utils import logging as transformers_logging

import hf_unified_mt
from conftest import make_tokenizer, tiny_config
from mt_checks import load_script


QUOTE = "\u2019"  # RIGHT SINGLE QUOTATION MARK: in cp1252, not in latin-1


@pytest.fixture(scope="module")
def quote_model(tmp_path_factory):
    """A tiny saved model whose every translation is `’ ’ ’`: its generation config suppresses every other token and
    the end of sequence before three tokens."""
    directory = tmp_path_factory.mktemp("quote") / "mt"
    vocab = {token: i for i, token in enumerate(["<pad>", "<s>", "</s>", "<unk>", QUOTE, "hola", "mundo"])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(tiny_config(vocab_size=len(vocab))).eval()
    model.generation_config.update(
        max_new_tokens=3,
        min_new_tokens=3,
        num_beams=1,
        suppress_tokens=[0, 1, 3, 5, 6],
        decoder_start_token_id=1,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model") / "mt"
    torch.manual_seed(0)
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(tiny_config(max_position_embeddings=16)).eval()
    model.generation_config.update(
        max_new_tokens=4, num_beams=1, decoder_start_token_id=1, bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    model.save_pretrained(directory)
    make_tokenizer().save_pretrained(directory)
    return directory


def read_only(folder: Path, monkeypatch) -> None:
    """`folder` made read-only; as root, who writes anywhere, `os.access` answers for it as it would for a user."""
    folder.chmod(0o555)
    if os.geteuid() == 0:
        access = os.access

        def user_access(path, mode, *args, **kwargs):
            if mode & os.W_OK and Path(path).resolve() == folder.resolve():
                return False
            return access(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", user_access)


# ---------------------------------------------------------------------------------------------- translate.py


def test_translate_py_refuses_an_output_its_encoding_cannot_hold_before_writing(quote_model, tmp_path):
    translate_script = load_script("translate")
    source = tmp_path / "text.es"
    source.write_bytes(b"hola\nmundo\n")
    with pytest.raises(translate_script.UsageError, match=r"output line 1: .*'\u2019' \(U\+2019\), which latin-1"):
        translate_script.main(
            [str(quote_model), "-i", str(source), "-o", str(source), "--encoding", "latin-1", "--no_progress"]
        )
    assert source.read_bytes() == b"hola\nmundo\n"  # the input, which was also the output, is intact
    assert sorted(path.name for path in tmp_path.iterdir()) == ["text.es"]  # and no temporary file is left

    translate_script.main(
        [str(quote_model), "-i", str(source), "-o", str(source), "--encoding", "cp1252", "--no_progress"]
    )
    assert source.read_bytes() == f"{QUOTE} {QUOTE} {QUOTE}\n".encode("cp1252") * 2


def test_translate_py_writes_stdout_in_its_encoding(quote_model, tmp_path, monkeypatch, capsysbinary):
    translate_script = load_script("translate")
    source = tmp_path / "text.es"
    source.write_bytes(b"hola\n")
    translate_script.main([str(quote_model), "-i", str(source), "--encoding", "cp1252", "--no_progress"])
    assert capsysbinary.readouterr().out == f"{QUOTE} {QUOTE} {QUOTE}\n".encode("cp1252")
    with pytest.raises(translate_script.UsageError, match="which latin-1 cannot encode; nothing was written"):
        translate_script.main([str(quote_model), "-i", str(source), "--encoding", "latin-1", "--no_progress"])
    assert capsysbinary.readouterr().out == b""


def test_translate_py_replaces_a_linked_output_not_its_target(saved_model, tmp_path):
    translate_script = load_script("translate")
    source, target, link = tmp_path / "in.es", tmp_path / "elsewhere.txt", tmp_path / "out.en"
    source.write_text("hola\n", encoding="utf-8")
    target.write_text("kept\n", encoding="utf-8")
    link.symlink_to(target)
    translate_script.main([str(saved_model), "-i", str(source), "-o", str(link), "--no_progress"])
    assert target.read_text(encoding="utf-8") == "kept\n"
    assert not link.is_symlink() and link.read_text(encoding="utf-8").count("\n") == 1


# ---------------------------------------------------------------------------------------------- score.py


def test_score_py_refuses_a_results_folder_it_cannot_write_before_translating(saved_model, tmp_path, monkeypatch):
    score_script = load_script("score")
    model = tmp_path / "model"
    model.mkdir()
    for path in saved_model.iterdir():
        (model / path.name).write_bytes(path.read_bytes())
    sources, references = tmp_path / "s.es", tmp_path / "r.en"
    sources.write_text("hola mundo\nel gato\n", encoding="utf-8")
    references.write_text("hello world\nthe cat\n", encoding="utf-8")
    pairs = [str(model), "--source_file", str(sources), "--reference_file", str(references), "--no_progress"]
    monkeypatch.setattr(score_script, "translate", lambda *a, **k: pytest.fail("translated before the check"))
    read_only(model, monkeypatch)
    try:
        with pytest.raises(score_script.UsageError, match=r"model directory .*model \(where results go by default\): "
                           r"it is not writable; pass --output_dir"):  # fmt: skip
            score_script.main(pairs)
        with pytest.raises(score_script.UsageError, match=r"cannot create --output_dir .*model/eval: .*not writable"):
            score_script.main([*pairs, "--output_dir", str(model / "eval")])
    finally:
        model.chmod(0o755)


def test_score_py_prints_the_scores_before_writing_them(saved_model, tmp_path, monkeypatch, capsys):
    score_script = load_script("score")
    sources, references = tmp_path / "s.es", tmp_path / "r.en"
    sources.write_text("hola mundo\nel gato\n", encoding="utf-8")
    references.write_text("hello world\nthe cat\n", encoding="utf-8")
    output = tmp_path / "eval"
    pairs = [str(saved_model), "--source_file", str(sources), "--reference_file", str(references), "--no_progress"]

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(score_script, "write_json", full_disk)
    with pytest.raises(score_script.UsageError, match=r"cannot write the results to .*eval: No space left on device"):
        score_script.main([*pairs, "--output_dir", str(output)])
    assert "BLEU =" in capsys.readouterr().out
    monkeypatch.undo()
    results = score_script.main([*pairs, "--output_dir", str(output)])
    assert json.loads((output / "eval_s.json").read_text(encoding="utf-8")) == json.loads(json.dumps(results))
    assert sorted(path.name for path in output.iterdir() if path.name.startswith(".")) == []


# ---------------------------------------------------------------------------------------------- --no_progress


@pytest.mark.parametrize("script", ["translate", "score"])
def test_no_progress_hides_the_weight_loading_bar(saved_model, tmp_path, capsys, script):
    module = load_script(script)
    source, references = tmp_path / "in.es", tmp_path / "r.en"
    source.write_text("hola\n", encoding="utf-8")
    references.write_text("hello\n", encoding="utf-8")
    if script == "translate":
        arguments = [str(saved_model), "-i", str(source), "-o", str(tmp_path / "out.en")]
    else:
        arguments = [str(saved_model), "--source_file", str(source), "--reference_file", str(references)]
        arguments += ["--output_dir", str(tmp_path / "eval")]
    if not transformers_logging.is_progress_bar_enabled():
        pytest.skip("progress bars are switched off in this environment (HF_HUB_DISABLE_PROGRESS_BARS)")
    module.main([*arguments, "--no_progress"])
    assert "Loading weights" not in capsys.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()  # switched back on for whatever runs next
    module.main(arguments)
    assert "Loading weights" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the demo


def test_the_demo_refuses_a_folder_it_did_not_make(tmp_path, capsys):
    from hf_unified_mt.training import demo

    checkpoint = tmp_path / "trained"
    checkpoint.mkdir()
    files = {"model.safetensors": b"trained weights", "config.json": b"{}", "results.json": b'{"test_bleu": 20.5}'}
    for name, data in files.items():
        (checkpoint / name).write_bytes(data)
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit) as stopped:
            demo.main(["--output", str(checkpoint), *extra])
        assert stopped.value.code == 2
        assert "not a folder the demo made" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in checkpoint.iterdir()} == files
    with pytest.raises(SystemExit):
        demo.main(["--output", str(checkpoint / "results.json")])
    assert "is a file, not a folder" in capsys.readouterr().err


def test_the_demo_replaces_only_its_own_folder(tmp_path):
    from hf_unified_mt.training import demo

    output = tmp_path / "demo"
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(tiny_config()).eval()
    saved = demo.save_demo(model, make_tokenizer(), output, demo.check_output(output))
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(saved)
    assert sorted(path.name for path in output.iterdir()) == sorted([*saved, demo.MARKER])
    with pytest.raises(ValueError, match="holds an earlier demo: pass --overwrite"):
        demo.check_output(output)

    # A file of the demo turned into a link that leads out: refused, the link's target left alone.
    outside = tmp_path / "outside.json"
    outside.write_text("kept", encoding="utf-8")
    (output / "config.json").unlink()
    (output / "config.json").symlink_to(outside)
    with pytest.raises(ValueError, match="'config.json' leads out of .* through a symbolic link"):
        demo.check_output(output, overwrite=True)
    assert outside.read_text(encoding="utf-8") == "kept"
    (output / "config.json").unlink()

    # An earlier demo's file that this one does not write goes.
    marker = json.loads((output / demo.MARKER).read_text(encoding="utf-8"))
    (output / "old_weights.bin").write_bytes(b"old")
    (output / demo.MARKER).write_text(json.dumps({**marker, "files": [*marker["files"], "old_weights.bin"]}))
    saved = demo.save_demo(model, make_tokenizer(), output, demo.check_output(output, overwrite=True))
    assert sorted(path.name for path in output.iterdir()) == sorted([*saved, demo.MARKER])

    (output / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(ValueError, match="besides the files the demo wrote it holds notes.txt"):
        demo.check_output(output, overwrite=True)
    (output / "notes.txt").unlink()
    (output / demo.MARKER).write_text(json.dumps({**marker, "files": ["../outside.json"]}))
    with pytest.raises(ValueError, match="is not a path inside"):
        demo.check_output(output, overwrite=True)


# ---------------------------------------------------------------------------------------------- average_checkpoints.py


def run_with_checkpoints(tmp_path, steps=(1, 2)):
    from transformers import AutoModelForSeq2SeqLM

    for step in steps:
        torch.manual_seed(step)
        folder = tmp_path / "run" / f"checkpoint-{step}"
        AutoModelForSeq2SeqLM.from_config(tiny_config()).save_pretrained(folder)
        make_tokenizer().save_pretrained(folder)
    return tmp_path / "run"


def test_average_checkpoints_writes_a_new_or_empty_folder_all_at_once(tmp_path, monkeypatch):
    average = load_script("average_checkpoints")
    run = run_with_checkpoints(tmp_path)
    output = tmp_path / "averaged"
    output.mkdir()
    (output / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"--output_dir .*averaged is not empty \(notes.txt\)"):
        average.main([str(run), "--output_dir", str(output)])
    (output / "notes.txt").unlink()

    def failing_save(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(average, "save_tokenizer", failing_save)
    with pytest.raises(OSError):
        average.main([str(run), "--output_dir", str(output)])
    assert list(output.iterdir()) == []  # no half-saved model
    monkeypatch.undo()
    average.main([str(run), "--output_dir", str(output)])
    assert {"model.safetensors", "config.json", "tokenizer.json", "averaged_checkpoints.json"} <= {
        path.name for path in output.iterdir()
    }
    assert not [path for path in output.iterdir() if path.name.startswith(".")]


def test_average_checkpoints_reads_only_shards_inside_the_checkpoint(tmp_path):
    average = load_script("average_checkpoints")
    run = run_with_checkpoints(tmp_path, steps=(1,))
    checkpoint = run / "checkpoint-1"
    (checkpoint / "model.safetensors").rename(tmp_path / "outside.safetensors")
    index = {"metadata": {}, "weight_map": {"model.shared.weight": "../../outside.safetensors"}}
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SystemExit, match=r"'../../outside.safetensors' is not a path inside"):
        average.load_weights(checkpoint)


# ---------------------------------------------------------------------------------------------- analysis tools


def test_the_connection_search_writes_its_state_atomically_not_through_links(tmp_path):
    from hf_unified_mt.analysis import search_connections as search

    output = tmp_path / "search"
    output.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("kept", encoding="utf-8")
    (output / (search.STATE_FILE + ".tmp")).symlink_to(outside)

    def fake_train_main(argv, callbacks):
        permutation = json.loads(argv[argv.index("--config_overrides") + 1])["hard_connections"]
        (output / "runs" / search.key_of(permutation) / "checkpoint-2").mkdir(parents=True)
        callbacks[0].on_evaluate(None, None, None, metrics={"eval_loss": float(sum(permutation[:1]))})

    options = ["--output_dir", str(output), "--preset", "tiny", "--coarse_samples", "1", "--refine_rounds", "0"]
    search.main(options, train_main=fake_train_main)
    assert outside.read_text(encoding="utf-8") == "kept"
    assert json.loads((output / search.STATE_FILE).read_text())["results"]


def test_the_ablation_report_reads_translations_only_inside_its_results(tmp_path):
    from hf_unified_mt.analysis import ablation_report

    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    record = {"arm": "004-p1", "seed": 1, "test": {"translations": "../../secret.txt.gz", "num_verses": 1}}
    (runs / "004-p1-seed1.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"translations file '../../secret.txt.gz' is not a path inside"):
        ablation_report.load_runs(tmp_path / "results")


# ---------------------------------------------------------------------------------------------- presets


def test_every_tiny_preset_has_the_same_positions():
    """The tiny training command (`--preset tiny` on a slice of the corpus) takes the same sentences with every
    architecture: the Multi-Encoder's `tiny` presets had 64 positions where the others have 128."""
    positions = {
        (arch, preset): hf_unified_mt.get_config(arch, preset, vocab_size=100).max_position_embeddings
        for arch in hf_unified_mt.available_presets()
        for preset in hf_unified_mt.available_presets()[arch]
        if preset == "tiny" or preset.startswith("tiny-")
    }
    assert set(positions.values()) == {128}, positions
