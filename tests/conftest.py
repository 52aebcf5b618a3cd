"""Shared fixtures: tiny models and a tiny word-level tokenizer, all built locally (no Hub)."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

import hf_unified_mt


VOCAB_WORDS = (
    "hola mundo el gato ve al perro la casa es grande y pequeña hello world the cat sees dog house is big and small "
    "un una a an en in de of por for con with no not"
).split()
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def make_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIALS + VOCAB_WORDS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(autouse=True, scope="session")
def single_thread():
    """Tiny models run several times faster on one thread, and a busy machine makes several threads spin: every test
    runs on one thread (the one place the suite pins threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tokenizer():
    return make_tokenizer()


VOCAB_SIZE = len(SPECIALS) + len(VOCAB_WORDS)
# The dropouts besides `dropout` that each architecture's tests switch off.
_NO_DROPOUT = {
    "unified_transformer": dict(conv_weight_dropout=0.0),
    "deep_transformer": dict(attention_dropout=0.0, activation_dropout=0.0),
    "multi_unit_transformer": dict(activation_dropout=0.0),
}


def tiny_config(arch: str = "unified_transformer", preset: str = "tiny", **overrides):
    """The suite's one tiny-config helper: the architecture's test preset sized for the test vocabulary, without
    dropout, with `overrides` (architecture test files bind `arch` with `functools.partial`)."""
    settings = {"vocab_size": VOCAB_SIZE, "dropout": 0.0, **_NO_DROPOUT.get(arch, {}), **overrides}
    return hf_unified_mt.get_config(arch, preset, **settings)


def tiny_model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(tiny_config(**overrides))
    return model.eval()


def train_to_reverse(
    model, steps: int, lr: float, vocab_size: int | None = None, seed: int = 0, memorise: bool = False
):
    """Trains `model` in place for `steps` Adam steps to reverse its input (targets = source reversed, then </s>),
    so that it generates varied outputs (an untrained model with tied embeddings echoes one token). Each step draws
    16 new random sentences; with `memorise`, every step reverses the same 16 (six tokens each): a tiny model learns
    those within a few dozen steps and then generates varied outputs also for other inputs, where the general task
    takes it hundreds of steps. Returns the model in eval mode."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    vocab = vocab_size or min(model.config.vocab_size, model.config.decoder_vocab_size)
    fixed = torch.randint(4, vocab, (16, 6), generator=generator) if memorise else None
    for _ in range(steps):
        if memorise:
            source = fixed
        else:
            length = int(torch.randint(3, 8, (1,), generator=generator))
            source = torch.randint(4, vocab, (16, length), generator=generator)
        labels = torch.cat([source.flip(1), torch.full((16, 1), 2)], dim=1)
        source = torch.cat([source, torch.full((16, 1), 2)], dim=1)
        loss = model(input_ids=source, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


_TRAINED = {}


def trained_copy(build, steps: int, lr: float, **overrides):
    """`build(**overrides)` trained by `train_to_reverse`, so that output comparisons (cache vs no cache, batch vs
    alone, remote vs local) compare varied sequences. Trained once per builder and configuration; returns a fresh
    copy in eval mode."""
    key = (build.__module__, build.__name__, tuple(sorted((k, str(v)) for k, v in overrides.items())))
    if key not in _TRAINED:
        _TRAINED[key] = train_to_reverse(build(**overrides), steps=steps, lr=lr).state_dict()
    model = build(**overrides)
    model.load_state_dict(_TRAINED[key])
    return model.eval()


def trained_tiny_model(**overrides):
    """The tiny Unified Transformer trained for 80 steps to reverse its input (enough for varied outputs with every
    Prime option from the seeded initialisation)."""
    return trained_copy(tiny_model, steps=80, lr=3e-3, **overrides)


def random_batch(vocab_size: int, batch: int = 3, length: int = 9, seed: int = 1, pad_last: int = 3):
    """Source ids ending in </s>, with the last row right-padded by `pad_last` positions."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab_size, (batch, length), generator=generator)
    ids[:, -1] = 2
    mask = torch.ones_like(ids)
    if pad_last:
        ids[-1, length - pad_last - 1] = 2
        ids[-1, length - pad_last :] = 0
        mask[-1, length - pad_last :] = 0
    return ids, mask
