"""Shared fixtures: tiny models and a tiny word-level tokenizer, all built locally (no Hub)."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

import hf_unified_mt


# Tiny models run faster on one thread, and a busy machine makes several threads spin (tests only).
torch.set_num_threads(1)

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


@pytest.fixture
def tokenizer():
    return make_tokenizer()


def tiny_config(**overrides):
    settings = dict(vocab_size=len(SPECIALS) + len(VOCAB_WORDS), dropout=0.0, conv_weight_dropout=0.0)
    settings.update(overrides)
    return hf_unified_mt.get_config("unified_transformer", "tiny", **settings)


def tiny_model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(tiny_config(**overrides))
    return model.eval()


_TRAINED = {}


def trained_tiny_model(**overrides):
    """A tiny model trained for a few dozen steps to reverse its input (targets = source reversed). An untrained
    model with tied embeddings echoes its input token forever, which would make output comparisons (cache vs no
    cache, batch vs alone, remote vs local) compare constant sequences; this one produces varied outputs.
    Cached per configuration; returns a fresh copy in eval mode."""
    key = tuple(sorted((k, str(v)) for k, v in overrides.items()))
    if key not in _TRAINED:
        model = tiny_model(**overrides).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        generator = torch.Generator().manual_seed(0)
        target_vocab = model.config.decoder_vocab_size
        for _ in range(50):
            length = int(torch.randint(3, 8, (1,), generator=generator))
            source = torch.randint(4, min(model.config.vocab_size, target_vocab), (16, length), generator=generator)
            labels = torch.cat([source.flip(1), torch.full((16, 1), 2)], dim=1)
            source = torch.cat([source, torch.full((16, 1), 2)], dim=1)
            loss = model(input_ids=source, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        _TRAINED[key] = model.eval().state_dict()
    model = tiny_model(**overrides)
    model.load_state_dict(_TRAINED[key])
    return model.eval()


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
