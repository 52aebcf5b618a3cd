"""Issue 45: the translation pipeline keeps every input of a stream (generator, `datasets.Dataset` through
`KeyDataset`, a torch `Dataset`) and gives its results in order, as transformers' pipelines do; `max_length` works;
invalid generation options and over-long inputs are refused with a message naming the option or the item."""

import datasets
import pytest
import torch
from transformers import GenerationConfig
from transformers.pipelines.pt_utils import KeyDataset

import hf_unified_mt
from conftest import make_tokenizer, trained_tiny_model
from mt_checks import ListDataset


SENTENCES = [
    "hola",
    "el gato ve al perro",
    "la casa es grande",
    "mundo",
    "y pequeña",
    "el perro",
    "hola mundo",
    "la casa",
    "es grande y pequeña",
    "el gato",
]
EMPTY = [{"translation_text": ""}]


@pytest.fixture(scope="module")
def translator():
    model = trained_tiny_model(max_position_embeddings=16)
    return hf_unified_mt.TranslationPipeline(model=model, tokenizer=make_tokenizer(), max_new_tokens=4, num_beams=2)


@pytest.fixture(scope="module")
def alone(translator):
    """Each sentence translated on its own (a string in, `[{"translation_text": ...}]` out)."""
    return {sentence: translator(sentence) for sentence in SENTENCES}


class CountingGenerator:
    """A one-pass generator over `items` that counts how many were taken."""

    def __init__(self, items):
        self.taken = 0
        self.generator = self._run(items)

    def _run(self, items):
        for item in items:
            self.taken += 1
            yield item


def stream(kind, texts):
    if kind == "generator":
        return (text for text in texts)
    if kind == "key_dataset":
        return KeyDataset(datasets.Dataset.from_dict({"text": list(texts)}), "text")
    return ListDataset(list(texts))  # a torch map-style Dataset


# ---------------------------------------------------------------------------------------------- item 4: streams


@pytest.mark.parametrize("kind", ["generator", "key_dataset", "torch_dataset"])
@pytest.mark.parametrize("batch_size", [1, 2, 4])
@pytest.mark.parametrize("count", [3, 5, 10])
def test_a_stream_gives_every_result_in_order(translator, alone, kind, batch_size, count):
    """A stream in, an iterator out with one result per input, in order, each what the string alone gives (lengths
    not divisible by the batch size included)."""
    texts = SENTENCES[:count]
    results = translator(stream(kind, texts), batch_size=batch_size)
    assert not isinstance(results, list)  # streamed, as transformers' pipelines do
    assert list(results) == [alone[text] for text in texts]


def test_a_list_gives_a_list_and_a_generator_is_read_lazily(translator, alone):
    texts = SENTENCES[:5]
    assert translator(texts, batch_size=2) == [alone[text][0] for text in texts]
    assert translator(tuple(texts), batch_size=2) == [alone[text][0] for text in texts]
    source = CountingGenerator(texts)
    results = translator(source.generator, batch_size=2)
    assert source.taken <= 1  # transformers peeks at the first item only; the rest is read as results are taken
    first = next(iter(results))
    assert first == alone[texts[0]] and source.taken < len(texts)
    assert list(results) == [alone[text] for text in texts[1:]]
    assert source.taken == len(texts)


@pytest.mark.parametrize("kind", ["generator", "key_dataset"])
@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_empty_strings_in_a_stream_translate_to_empty_strings(translator, alone, kind, batch_size):
    texts = ["hola", "", "el gato", "   ", "mundo", "", ""]
    results = list(translator(stream(kind, texts), batch_size=batch_size))
    assert results == [alone[text] if text.strip() else EMPTY for text in texts]


def test_a_stream_of_empty_strings_does_not_call_the_model(translator, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("generate() called for empty strings")

    monkeypatch.setattr(translator.model, "generate", refuse)
    assert list(translator((text for text in ["", " ", "\t"]), batch_size=2)) == [EMPTY] * 3
    assert translator(["", " "], batch_size=2) == [EMPTY[0]] * 2
    assert translator(" ") == EMPTY
    assert list(translator(text for text in [])) == []
    assert list(translator(KeyDataset(datasets.Dataset.from_dict({"text": []}), "text"))) == []


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_several_sequences_per_input_in_a_stream(translator, batch_size):
    texts = ["hola", "", "el gato ve al perro", "mundo", "la casa"]
    expected = [translator(text, num_return_sequences=2) if text else [{"translation_text": ""}] * 2 for text in texts]
    assert all(len(records) == 2 for records in expected)
    results = translator((text for text in texts), batch_size=batch_size, num_return_sequences=2)
    assert list(results) == expected
    assert translator(texts, batch_size=batch_size, num_return_sequences=2) == expected


# ---------------------------------------------------------------------------------------------- item 11: lengths


@pytest.fixture
def endless():
    """A trained tiny model (16 positions) that never emits `</s>`, so that every output runs to its length limit;
    its generation config sets `max_new_tokens` as train.py's checkpoints do."""
    model = trained_tiny_model(max_position_embeddings=16)
    model.generation_config.update(max_new_tokens=8, suppress_tokens=[2])
    return model


def _lengths(records):
    return [len(record["translation_token_ids"]) for record in records]


def test_max_length_works_although_the_checkpoint_sets_max_new_tokens(endless, capfd):
    """`max_length` (of the whole output, decoder start included, as in transformers' generate()) was overridden by
    the checkpoint's `max_new_tokens` with a warning; the user's option now wins, at the call and at construction."""
    tokenizer = make_tokenizer()
    texts = ["hola", "el gato ve al perro"]
    pipe = hf_unified_mt.TranslationPipeline(model=endless, tokenizer=tokenizer, num_beams=1)
    assert _lengths(pipe(texts, return_tensors=True)) == [9, 9]  # the checkpoint's max_new_tokens=8
    assert _lengths(pipe(texts, max_length=4, return_tensors=True)) == [4, 4]
    direct = endless.generate(**tokenizer(texts[1:], return_tensors="pt"), max_new_tokens=3, num_beams=1)
    assert pipe(texts[1], max_length=4, return_tensors=True)[0]["translation_token_ids"].tolist() == direct[0].tolist()
    at_init = hf_unified_mt.TranslationPipeline(model=endless, tokenizer=tokenizer, num_beams=1, max_length=5)
    assert _lengths(at_init(texts, return_tensors=True)) == [5, 5]
    assert _lengths(at_init(texts, max_new_tokens=2, return_tensors=True)) == [3, 3]  # the call's option wins
    config = GenerationConfig(max_length=3, num_beams=1)
    assert _lengths(pipe(texts, generation_config=config, return_tensors=True)) == [3, 3]
    assert "seem to have been set" not in capfd.readouterr().err


def test_the_default_length_stays_within_the_model(endless):
    """The pipeline's default (256 new tokens) and a checkpoint's `max_new_tokens` above the model's 16 positions are
    capped at them instead of failing mid-generation."""
    tokenizer = make_tokenizer()
    endless.generation_config.max_new_tokens = None
    pipe = hf_unified_mt.TranslationPipeline(model=endless, tokenizer=tokenizer, num_beams=1)
    assert _lengths(pipe(["hola", "el gato"], return_tensors=True)) == [17, 17]
    endless.generation_config.max_new_tokens = 40
    assert _lengths(pipe(["hola"], return_tensors=True)) == [17]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("num_beams", 0),
        ("num_beams", -1),
        ("num_beams", 2.5),
        ("num_beams", None),
        ("num_return_sequences", 0),
        ("max_new_tokens", 0),
        ("max_new_tokens", 17),
        ("max_length", 1),
        ("max_length", 18),
    ],
)
def test_invalid_generation_options_are_refused(translator, option, value):
    """`num_beams=0` raised ZeroDivisionError deep in generate(); every invalid option is now a ValueError naming it,
    at construction and at the call, before any input is read."""
    with pytest.raises(ValueError, match=f"`{option}`"):
        translator(["hola", "mundo"], **{option: value})
    source = CountingGenerator(["hola", "mundo"])
    with pytest.raises(ValueError, match=f"`{option}`"):
        translator(source.generator, **{option: value})
    assert source.taken == 0
    with pytest.raises(ValueError, match=f"`{option}`"):
        hf_unified_mt.TranslationPipeline(model=translator.model, tokenizer=translator.tokenizer, **{option: value})


def test_the_longest_allowed_lengths_are_accepted(translator):
    assert len(translator("hola", max_new_tokens=16, num_beams=1)) == 1
    assert len(translator("hola", max_length=17, num_beams=1)) == 1


# ---------------------------------------------------------------------------------------------- item 12: messages


def test_an_over_long_input_is_named_with_the_right_advice(translator):
    long_text = "el gato ve al perro " * 4  # 21 tokens, 16 positions
    with pytest.raises(ValueError, match=r"inputs\[1\] \(21 tokens\)") as error:
        translator(["hola", long_text, "mundo", long_text], batch_size=2)
    message = str(error.value)
    assert "inputs[3] (21 tokens)" in message and "max_position_embeddings=16" in message
    assert "truncation=True" in message and "fewer tokens" not in message
    with pytest.raises(ValueError, match=r"21 tokens.*max_position_embeddings=16") as error:
        list(translator((text for text in ["hola", long_text]), batch_size=2))
    assert "el gato ve al perro" in str(error.value) and "fewer tokens" not in str(error.value)
    with pytest.raises(ValueError, match=r"21 tokens.*truncation=True"):
        translator(long_text)
    assert len(translator(["hola", long_text], truncation=True)) == 2


def test_a_non_string_item_is_named(translator):
    with pytest.raises(TypeError, match=r"inputs\[1\] is int"):
        translator(["hola", 3])
    assert torch.is_tensor(translator("hola", return_tensors=True)[0]["translation_token_ids"])
