"""Token-based batching: the max-tokens batch sampler (single and multi-rank) and its Seq2SeqTrainer integration."""

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import DataCollatorForSeq2Seq, MarianConfig, MarianMTModel, Seq2SeqTrainingArguments

from hf_unified_mt.deployment.inference import token_batches_for_inference
from hf_unified_mt.training.batching import ExampleTooLongError, MaxTokensBatchSampler, TokenBatchSeq2SeqTrainer
from hf_unified_mt.training.tokenization import train_tokenizer


def random_lengths(count=500, seed=0):
    """Source lengths and correlated target lengths, as in real parallel text."""
    rng = np.random.default_rng(seed)
    source = rng.integers(3, 120, size=count)
    target = np.maximum(2, (source * rng.uniform(0.8, 1.3, size=count)).astype(int))
    return source, target


def padded_tokens(batch, source_lengths, target_lengths, multiple=None):
    def up(x):
        return int(np.ceil(x / multiple) * multiple) if multiple else int(x)

    return len(batch) * (up(source_lengths[batch].max()) + up(target_lengths[batch].max()))


@pytest.mark.parametrize("max_tokens,multiple", [(1000, None), (3000, None), (2048, 8)])
def test_batches_respect_max_tokens_and_cover_every_example_once(max_tokens, multiple):
    source, target = random_lengths()
    sampler = MaxTokensBatchSampler(source, target, max_tokens=max_tokens, seed=3, pad_to_multiple_of=multiple)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert all(padded_tokens(np.array(b), source, target, multiple) <= max_tokens for b in batches)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(source)))
    # Batches group similar lengths: most padding is small.
    assert sampler.statistics()["padding_efficiency"] > 0.8


def test_determinism_and_epochs():
    source, target = random_lengths()
    a = MaxTokensBatchSampler(source, target, max_tokens=2000, seed=1)
    b = MaxTokensBatchSampler(source, target, max_tokens=2000, seed=1)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    second = list(a)
    assert first != second and len(first) == len(second)  # reshuffled, same number of batches
    assert sorted(map(sorted, first)) != sorted(map(sorted, second)) or first != second
    a.set_epoch(0)
    assert list(a) == first
    unshuffled = MaxTokensBatchSampler(source, target, max_tokens=2000, shuffle=False)
    lengths = [source[b].max() for b in map(np.array, unshuffled)]
    assert lengths == sorted(lengths)  # in length order


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ranks_get_disjoint_equal_batches(world_size):
    source, target = random_lengths(count=401)
    samplers = [
        MaxTokensBatchSampler(source, target, max_tokens=1500, num_replicas=world_size, rank=rank, seed=7)
        for rank in range(world_size)
    ]
    for epoch in (0, 1):
        per_rank = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            per_rank.append(list(sampler))
        assert len({len(batches) for batches in per_rank}) == 1
        assert all(len(batches) == len(samplers[0]) for batches in per_rank)
        seen = [i for batches in per_rank for b in batches for i in b]
        assert len(seen) == len(set(seen)) == len(source)  # disjoint, nothing dropped or repeated
        assert all(padded_tokens(np.array(b), source, target) <= 1500 for batches in per_rank for b in batches)


def test_degenerate_single_sentence_batches_are_padded_by_repetition():
    source, target = np.array([50, 50, 50]), np.array([40, 40, 40])
    ranks = [MaxTokensBatchSampler(source, target, max_tokens=100, num_replicas=2, rank=r) for r in (0, 1)]
    assert [len(s) for s in ranks] == [2, 2]
    dropped = [
        MaxTokensBatchSampler(source, target, max_tokens=100, num_replicas=2, rank=r, drop_last=True) for r in (0, 1)
    ]
    assert [len(s) for s in dropped] == [1, 1]


def test_too_long_example_and_max_sentences():
    with pytest.raises(ExampleTooLongError, match=r"example 1 has 90 source \+ 20 target tokens"):
        MaxTokensBatchSampler([10, 90, 5], [10, 20, 5], max_tokens=100)
    sampler = MaxTokensBatchSampler([5] * 50, [5] * 50, max_tokens=10_000, max_sentences=8)
    assert max(len(b) for b in sampler) == 8


def test_inference_batches():
    batches = token_batches_for_inference([5, 30, 7, 30, 1], max_sentences=2)
    assert batches == [[1, 3], [2, 0], [4]]
    assert token_batches_for_inference([10, 10, 10], max_sentences=8, max_tokens=20) == [[0, 1], [2]]


# ---------------------------------------------------------------------------------------------------------------------
# Trainer integration
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_setup():
    rng = np.random.default_rng(0)
    words = ["uno", "dos", "tres", "cuatro", "cinco", "one", "two", "three", "four", "five"]
    sources = [" ".join(rng.choice(words[:5], size=rng.integers(2, 15))) for _ in range(64)]
    targets = [" ".join(rng.choice(words[5:], size=rng.integers(2, 15))) for _ in range(64)]
    tokenizer = train_tokenizer(sources + targets, vocab_size=40)
    features = tokenizer(sources)
    features["labels"] = tokenizer(text_target=targets)["input_ids"]
    dataset = Dataset.from_dict(dict(features))
    return tokenizer, dataset


def tiny_marian(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=len(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=1,
        decoder_start_token_id=1,
        forced_eos_token_id=2,
    )
    return MarianMTModel(config)


def make_trainer(tokenizer, dataset, tmp_path, **kwargs):
    max_tokens = kwargs.pop("max_tokens", None)
    model = tiny_marian(tokenizer)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        learning_rate=1.0,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        seed=0,
        **kwargs,
    )
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    return TokenBatchSeq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=collator,
        processing_class=tokenizer,
        max_tokens=max_tokens,
    )


def test_trainer_uses_token_batches(tiny_setup, tmp_path):
    tokenizer, dataset = tiny_setup
    trainer = make_trainer(tokenizer, dataset, tmp_path, max_tokens=200, max_steps=1)
    dataloader = trainer.get_train_dataloader()
    sampler = trainer._token_batch_sampler
    assert isinstance(sampler, MaxTokensBatchSampler) and len(dataloader) == len(sampler)
    seen = 0
    for batch in dataloader:
        assert batch["input_ids"].numel() + batch["labels"].numel() <= 200
        assert "decoder_input_ids" in batch
        seen += batch["input_ids"].shape[0]
    assert seen == len(dataset)
    # Without max_tokens the usual sentence batches are used.
    plain = make_trainer(tokenizer, dataset, tmp_path, per_device_train_batch_size=8, max_steps=1)
    assert len(plain.get_train_dataloader()) == 8 and plain._token_batch_sampler is None


def parameter_update(trainer):
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    return torch.cat([(p.detach() - before[name]).flatten() for name, p in trainer.model.named_parameters()])


def test_gradient_accumulation_weighs_tokens_like_one_big_batch(tiny_setup, tmp_path):
    """MarianMTModel's mean loss makes GA updates ×GA; the trainer normalizes by tokens."""
    tokenizer, dataset = tiny_setup
    data = dataset.select(range(16))
    common = dict(max_steps=1, train_sampling_strategy="sequential")
    one_batch = make_trainer(tokenizer, data, tmp_path / "a", per_device_train_batch_size=16, **common)
    accumulated = make_trainer(
        tokenizer, data, tmp_path / "b", per_device_train_batch_size=8, gradient_accumulation_steps=2, **common
    )
    assert one_batch.label_smoother is not None  # token-level normalization is on
    reference, update = parameter_update(one_batch), parameter_update(accumulated)
    assert update.norm() / reference.norm() == pytest.approx(1.0, abs=1e-4)
    assert torch.nn.functional.cosine_similarity(update, reference, dim=0) > 0.9999
