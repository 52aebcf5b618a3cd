"""Issue 45, item 9: the generated length stays within the model's positions. `translate()`'s default length
(`2 x source + 10`, or the checkpoint's `max_new_tokens`) is capped at `max_position_embeddings` instead of failing the
whole run; a `max_new_tokens` the decoder cannot reach is refused, naming the option, before anything is translated
(translate.py and score.py: one line, exit status 2)."""

import pytest
import torch

import hf_unified_mt
from conftest import make_tokenizer, tiny_config
from mt_checks import load_script
from test_reliability import run_script


LIMIT = 16
LONG_LINE = "el gato ve al perro en la casa grande"  # 10 tokens: it fits, but 2 x 10 + 10 new tokens do not


def endless_model(**generation):
    """A tiny model with 16 positions that never emits `</s>`: every output runs to its length limit."""
    torch.manual_seed(0)
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(tiny_config(max_position_embeddings=LIMIT))
    model.generation_config.update(
        num_beams=1, suppress_tokens=[2], decoder_start_token_id=1, bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    model.generation_config.update(**generation)
    return model.eval()


@pytest.fixture(scope="module")
def saved_endless(tmp_path_factory):
    """`endless_model()` saved like train.py's output_dir, with no `max_new_tokens` in its generation config."""
    directory = tmp_path_factory.mktemp("endless") / "mt"
    endless_model().save_pretrained(directory)
    make_tokenizer().save_pretrained(directory)
    return directory


def spy_on_generate(model):
    """Records the `max_new_tokens` of each `generate()` call of `model`."""
    calls = []
    generate = model.generate

    def recording(*args, **kwargs):
        calls.append(kwargs.get("max_new_tokens"))
        return generate(*args, **kwargs)

    model.generate = recording
    return calls


# ---------------------------------------------------------------------------------------------- translate()


def test_translate_caps_the_default_length_at_the_model_limit():
    from hf_unified_mt.deployment.inference import translate

    model = endless_model()
    calls = spy_on_generate(model)
    assert len(translate(model, make_tokenizer(), ["hola", LONG_LINE], batch_size=1)) == 2
    assert sorted(calls) == [2 * 2 + 10, LIMIT]  # "hola </s>": 14, within the limit; the long line: capped at 16


def test_translate_caps_a_checkpoint_max_new_tokens_beyond_the_model():
    from hf_unified_mt.deployment.inference import translate

    model = endless_model(max_new_tokens=40)
    calls = spy_on_generate(model)
    assert len(translate(model, make_tokenizer(), [LONG_LINE])) == 1
    assert calls == [LIMIT]


def test_translate_refuses_max_new_tokens_beyond_the_model_before_translating():
    from hf_unified_mt.deployment.inference import translate

    model = endless_model()
    calls = spy_on_generate(model)
    with pytest.raises(ValueError, match=r"max_new_tokens=17 .*max_position_embeddings=16"):
        translate(model, make_tokenizer(), ["hola", LONG_LINE], max_new_tokens=17)
    assert calls == []
    assert len(translate(model, make_tokenizer(), [LONG_LINE], max_new_tokens=LIMIT)) == 1
    assert calls == [LIMIT]


# ---------------------------------------------------------------------------------------------- translate.py


def test_translate_py_translates_a_line_whose_default_length_exceeds_the_model(saved_endless, tmp_path):
    translate_script = load_script("translate")
    source, output = tmp_path / "in.es", tmp_path / "out.en"
    source.write_text(f"hola\n{LONG_LINE}\n\nmundo\n", encoding="utf-8")
    translate_script.main([str(saved_endless), "--input", str(source), "--output", str(output), "--no_progress"])
    assert output.read_text(encoding="utf-8").count("\n") == 4  # one line per input line


def test_translate_py_refuses_max_new_tokens_beyond_the_model(saved_endless, tmp_path, monkeypatch):
    translate_script = load_script("translate")
    source, output = tmp_path / "in.es", tmp_path / "out.en"
    source.write_text("hola\n", encoding="utf-8")

    def refuse(*args, **kwargs):
        raise AssertionError("translated before the options were checked")

    monkeypatch.setattr(translate_script, "translate", refuse)
    arguments = [str(saved_endless), "--input", str(source), "--output", str(output), "--max_new_tokens", "500"]
    with pytest.raises(translate_script.UsageError, match=r"^--max_new_tokens 500 .*max_position_embeddings=16"):
        translate_script.main(arguments)
    assert not output.exists()
    result = run_script("translate", *arguments)
    assert result.returncode == 2 and not output.exists()
    # stderr also holds transformers' weight-loading progress bar; the error is one line, the last
    assert result.stderr.strip().splitlines()[-1].startswith("translate.py: error: --max_new_tokens 500 is more than")
    assert "Traceback" not in result.stderr and result.stderr.count("error") == 1


# ---------------------------------------------------------------------------------------------- score.py


def test_score_py_caps_the_default_length_and_refuses_max_new_tokens_beyond_the_model(saved_endless, tmp_path):
    score_script = load_script("score")
    sources, references = tmp_path / "s.es", tmp_path / "r.en"
    sources.write_text(f"hola\n{LONG_LINE}\n", encoding="utf-8")
    references.write_text("hello\nthe cat sees the dog in the big house\n", encoding="utf-8")
    arguments = [str(saved_endless), "--source_file", str(sources), "--reference_file", str(references)]
    arguments += ["--output_dir", str(tmp_path / "eval"), "--no_progress"]
    results = score_script.main(arguments)
    assert results["num_sentences"] == 2
    with pytest.raises(score_script.UsageError, match=r"^--max_new_tokens 17 .*max_position_embeddings=16"):
        score_script.main([*arguments, "--max_new_tokens", "17"])
