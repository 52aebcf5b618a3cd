"""Shared subword tokenizers: special tokens, </s> appending, round trip, saving/reloading, determinism."""

import importlib
import json

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from hf_unified_mt.training.data import load_parallel_data
from hf_unified_mt.training.tokenization import (
    SPECIAL_TOKENS,
    load_tokenizer,
    train_tokenizer,
    train_tokenizer_on_corpus,
)


@pytest.fixture(scope="module")
def train_slice():
    return load_parallel_data()["train"].select(range(1500))


@pytest.fixture(scope="module")
def bpe(train_slice):
    return train_tokenizer_on_corpus(train_slice, vocab_size=1000, tokenizer_type="bpe")


def test_special_tokens_and_vocab_size(bpe):
    assert isinstance(bpe, PreTrainedTokenizerFast)
    assert [bpe.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (bpe.pad_token_id, bpe.bos_token_id, bpe.eos_token_id, bpe.unk_token_id) == (0, 1, 2, 3)
    assert len(bpe) == 1000
    assert bpe.model_input_names == ["input_ids", "attention_mask"]


def test_eos_is_appended_to_sources_and_targets(bpe):
    source = bpe("Y dijo Dios: Sea la luz.")
    target = bpe(text_target="And God said, Let there be light.")
    assert source["input_ids"][-1] == bpe.eos_token_id and source["input_ids"].count(bpe.eos_token_id) == 1
    assert target["input_ids"][-1] == bpe.eos_token_id
    assert "token_type_ids" not in source
    batch = bpe(["uno", "uno dos tres"], padding=True)
    assert batch["input_ids"][0][-1] == bpe.pad_token_id  # right padding with <pad>=0


@pytest.mark.parametrize("text", ["Y dijo Dios: Sea la luz.", "Jehová es mi pastor; nada me faltará.", "¿Quién?  Él."])
def test_round_trip(bpe, text):
    ids = bpe(text)["input_ids"]
    assert bpe.decode(ids, skip_special_tokens=True) == text


def test_save_and_reload_with_auto_tokenizer(bpe, tmp_path):
    bpe.save_pretrained(tmp_path)
    assert (tmp_path / "tokenizer.json").is_file()
    for reloaded in (AutoTokenizer.from_pretrained(tmp_path, local_files_only=True), load_tokenizer(str(tmp_path))):
        assert isinstance(reloaded, PreTrainedTokenizerFast)
        text = "Y la tierra estaba desordenada y vacía."
        assert reloaded(text)["input_ids"] == bpe(text)["input_ids"]
        assert reloaded(text_target=text)["input_ids"][-1] == 2
        assert reloaded.pad_token == "<pad>" and reloaded.eos_token == "</s>"
        assert reloaded.model_input_names == ["input_ids", "attention_mask"]


def test_bpe_training_is_deterministic(train_slice, bpe):
    again = train_tokenizer_on_corpus(train_slice, vocab_size=1000, tokenizer_type="bpe")
    assert again.backend_tokenizer.to_str() == bpe.backend_tokenizer.to_str()


def test_unigram_tokenizer(train_slice, tmp_path):
    small = train_slice.select(range(400))
    unigram = train_tokenizer_on_corpus(small, vocab_size=600, tokenizer_type="unigram")
    assert [unigram.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    text = "Y dijo Dios: Sea la luz."
    ids = unigram(text)["input_ids"]
    assert ids[-1] == unigram.eos_token_id
    assert unigram.decode(ids, skip_special_tokens=True) == text
    unigram.save_pretrained(tmp_path)
    assert load_tokenizer(str(tmp_path))(text)["input_ids"] == ids
    # tokenizers' UnigramTrainer is reproducible in its pieces (its scores may differ in the 3rd decimal).
    again = train_tokenizer_on_corpus(small, vocab_size=600, tokenizer_type="unigram")
    pieces = {piece for piece, _ in json.loads(unigram.backend_tokenizer.to_str())["model"]["vocab"]}
    assert pieces == {piece for piece, _ in json.loads(again.backend_tokenizer.to_str())["model"]["vocab"]}


def test_bad_arguments():
    with pytest.raises(ValueError, match="bpe' or 'unigram"):
        train_tokenizer(["a b c"], vocab_size=100, tokenizer_type="wordpiece")
    with pytest.raises(ValueError, match="larger than the 4 special tokens"):
        train_tokenizer(["a b c"], vocab_size=4)


def test_saved_tokenizer_decodes_without_the_bpe_clean_up_warning(bpe, tmp_path):
    """The space clean-up of decode() is for WordPiece; transformers ignores it for BPE with a warning. The tokenizer is
    saved with it off, so reloading and decoding (also through the translation pipeline) is silent and exact."""
    import logging

    import torch
    from transformers.utils import logging as transformers_logging

    import hf_unified_mt

    bpe.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["clean_up_tokenization_spaces"] is False
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = transformers_logging.get_logger("transformers")
    logger.addHandler(handler)
    transformers_logging.warning_once.cache_clear()  # a warning shown earlier in the session would not repeat
    try:
        reloaded = load_tokenizer(str(tmp_path))
        text = "Y dijo Dios: Sea la luz ."
        assert reloaded.decode(reloaded(text)["input_ids"], skip_special_tokens=True) == text
        torch.manual_seed(0)
        model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(
            hf_unified_mt.get_config("unified_transformer", "tiny", vocab_size=len(reloaded))
        ).eval()
        hf_unified_mt.TranslationPipeline(model=model, tokenizer=reloaded, max_new_tokens=3)(["Sea la luz ."])
    finally:
        logger.removeHandler(handler)
    messages = [r.getMessage() for r in records]
    assert not [message for message in messages if "clean_up_tokenization_spaces" in message], messages


# --------------------------------------------------------------------------------------------------------------------
# A saved tokenizer_config.json records what the tokenizer is, not how it was loaded (issue 45, item 13): transformers
# 5 adds `is_local` / `local_files_only` to the config it saves for a tokenizer loaded from a folder.

LOAD_OPTIONS = {"is_local", "local_files_only"}


def saved_tokenizer(folder):
    from conftest import make_tokenizer

    make_tokenizer().save_pretrained(folder)
    return folder


def config_keys(folder) -> set[str]:
    return set(json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")))


def test_save_tokenizer_writes_no_load_options(tmp_path):
    from hf_unified_mt.deployment.tokenizer_files import save_tokenizer

    source = saved_tokenizer(tmp_path / "source")
    AutoTokenizer.from_pretrained(source).save_pretrained(tmp_path / "plain")
    assert LOAD_OPTIONS <= config_keys(tmp_path / "plain"), "transformers no longer adds them: drop the helper"
    loaded = AutoTokenizer.from_pretrained(source)
    save_tokenizer(loaded, tmp_path / "clean")
    assert not LOAD_OPTIONS & config_keys(tmp_path / "clean")
    assert config_keys(tmp_path / "clean") == config_keys(tmp_path / "plain") - LOAD_OPTIONS
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "clean")
    assert reloaded("hola mundo")["input_ids"] == loaded("hola mundo")["input_ids"]


def test_train_py_saves_a_loaded_tokenizer_without_load_options(tmp_path):
    """train.py's tokenizer, loaded from --tokenizer_name_or_path (or a checkpoint), is the Trainer's
    `processing_class`, whose `save_pretrained` writes it into every checkpoint and the output folder."""
    from types import SimpleNamespace

    source = saved_tokenizer(tmp_path / "source")
    model_args = SimpleNamespace(tokenizer_name_or_path=str(source), model_name_or_path=None)
    tokenizer = importlib.import_module("hf_unified_mt.training.run").get_tokenizer(model_args, None, None, None)
    tokenizer.save_pretrained(tmp_path / "checkpoint-1")
    assert not LOAD_OPTIONS & config_keys(tmp_path / "checkpoint-1")


def test_average_checkpoints_saves_the_tokenizer_without_load_options(tmp_path):
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from conftest import tiny_config
    from mt_checks import load_script

    for step in (1, 2):
        torch.manual_seed(step)
        AutoModelForSeq2SeqLM.from_config(tiny_config()).save_pretrained(tmp_path / "run" / f"checkpoint-{step}")
        saved_tokenizer(tmp_path / "run" / f"checkpoint-{step}")
    output = load_script("average_checkpoints").main(
        [str(tmp_path / "run"), "--num_checkpoints", "2", "--output_dir", str(tmp_path / "averaged")]
    )
    assert "tokenizer_class" in config_keys(output)
    assert not LOAD_OPTIONS & config_keys(output)
