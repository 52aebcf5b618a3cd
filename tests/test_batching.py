"""Token-based batching: the max-tokens batch sampler (single and multi-rank) and its Seq2SeqTrainer integration."""

import itertools
import logging

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    MarianConfig,
    MarianMTModel,
    Seq2SeqTrainingArguments,
)

import hf_unified_mt
from hf_unified_mt.deployment.inference import token_batches_for_inference
from hf_unified_mt.training.batching import (
    BucketPaddingCollator,
    ExampleTooLongError,
    MaxTokensBatchSampler,
    TokenBatchSeq2SeqTrainer,
    choose_length_buckets,
)
from hf_unified_mt.training.data import sequence_lengths
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
    length_buckets = kwargs.pop("length_buckets", None)
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
        length_buckets=length_buckets,
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


# ---------------------------------------------------------------------------------------------------------------------
# Length buckets: a bounded set of batch shapes
# ---------------------------------------------------------------------------------------------------------------------


def bucketed_padding(buckets, source, target, multiple) -> int:
    """The padded tokens of pairs in `buckets`: each pair in the shortest that holds both its (rounded) lengths, each
    bucket's pairs padded to its longest source and longest target."""

    def up(lengths):
        return -(-lengths // multiple) * multiple if multiple else lengths

    source, target = up(source), up(target)
    bucket = np.searchsorted(np.asarray(buckets), np.maximum(source, target))
    return sum(
        (bucket == b).sum() * (source[bucket == b].max() + target[bucket == b].max()) for b in set(bucket.tolist())
    )


def test_choose_length_buckets_minimises_the_padding():
    """The chosen bucket lengths give the fewest padded tokens among every choice of as many buckets, checked
    exhaustively."""
    rng = np.random.default_rng(0)
    for trial in range(60):
        source = rng.integers(1, 25, size=rng.integers(1, 25))
        target = np.maximum(1, source + rng.integers(-6, 7, size=len(source)))
        count, multiple = int(rng.integers(1, 5)), [None, 4][trial % 2]
        chosen = choose_length_buckets(source, target, count, multiple)
        rounded = np.maximum(source, target) if multiple is None else -(-np.maximum(source, target) // 4) * 4
        distinct = sorted(set(rounded.tolist()))
        best = min(
            bucketed_padding([*inner, distinct[-1]], source, target, multiple)
            for k in range(min(count, len(distinct)))
            for inner in itertools.combinations(distinct[:-1], k)
        )
        assert bucketed_padding(chosen, source, target, multiple) == best
        assert chosen == sorted(set(chosen)) and chosen[-1] == distinct[-1] and len(chosen) <= count
    with pytest.raises(ValueError, match="at least 1"):
        choose_length_buckets([3, 4], [3, 4], 0)


@pytest.mark.parametrize("world_size,multiple", [(1, None), (3, 8)])
def test_length_buckets_bound_the_batch_shapes(world_size, multiple):
    """Over epochs and ranks every batch has one of at most `length_buckets` shapes, within max_tokens, holding each
    of its pairs; every example is seen once; only one batch per bucket has rows of padding."""
    source, target = random_lengths(count=601)
    samplers = [
        MaxTokensBatchSampler(
            source,
            target,
            max_tokens=2000,
            num_replicas=world_size,
            rank=rank,
            seed=5,
            pad_to_multiple_of=multiple,
            length_buckets=4,
        )
        for rank in range(world_size)
    ]
    shapes = samplers[0].bucket_shapes
    assert len(shapes) == 4 and all(s.rows * (s.source_length + s.target_length) <= 2000 for s in shapes)
    if multiple:
        assert all(s.source_length % multiple == 0 and s.target_length % multiple == 0 for s in shapes)
    seen_shapes = set()
    for epoch in (0, 1):
        seen = []
        for sampler in samplers:
            sampler.set_epoch(epoch)
            for batch in sampler:
                shape = sampler.batch_shape(batch)
                seen_shapes.add(shape)
                assert len(batch) <= shape.rows
                assert source[batch].max() <= shape.source_length and target[batch].max() <= shape.target_length
                seen.extend(batch)
        assert sorted(seen) == list(range(len(source)))
    assert seen_shapes == set(shapes)
    if world_size == 1:
        partial = [b for b in samplers[0] if len(b) < samplers[0].batch_shape(b).rows]
        assert len(partial) <= len(shapes)
    # Without buckets the same data gives many more shapes.
    plain = MaxTokensBatchSampler(source, target, max_tokens=2000, seed=5, pad_to_multiple_of=multiple)
    assert plain.statistics()["batch_shapes"] > 4 * len(shapes)


def test_padding_overhead_is_reported():
    """statistics() counts the padded tokens of the bucket shapes, rows of padding included."""
    source, target = random_lengths(count=300)
    sampler = MaxTokensBatchSampler(source, target, max_tokens=1500, length_buckets=3, seed=2)
    stats = sampler.statistics()
    real = int(source.sum() + target.sum())
    padded = sum(
        shape.rows * (shape.source_length + shape.target_length) for shape in map(sampler.batch_shape, sampler)
    )
    assert stats["padded_tokens_per_real_token"] == pytest.approx(padded / real)
    assert stats["padding_efficiency"] == pytest.approx(real / padded)
    assert stats["batch_shapes"] == 3 and stats["batches"] == len(sampler)
    # More buckets, less padding (the padding-optimal lengths of 8 buckets include a choice as good as 3)
    finer = MaxTokensBatchSampler(source, target, max_tokens=1500, length_buckets=8, seed=2).statistics()
    assert finer["padded_tokens_per_real_token"] < stats["padded_tokens_per_real_token"]


def test_explicit_bucket_lengths():
    source, target = np.array([3, 5, 9, 30, 31]), np.array([4, 6, 8, 29, 33])
    sampler = MaxTokensBatchSampler(source, target, max_tokens=200, length_buckets=[8, 16, 40, 64])
    # a bucket's shape is its longest source and target; no pair falls in the 64 bucket: left out
    assert sampler.bucket_lengths == [8, 16, 40]
    assert [tuple(s) for s in sampler.bucket_shapes] == [(200 // 11, 5, 6), (200 // 17, 9, 8), (200 // 64, 31, 33)]
    with pytest.raises(ValueError, match=r"does not hold every pair: example 4 has 33 tokens"):
        MaxTokensBatchSampler(source, target, max_tokens=200, length_buckets=[8, 32])
    with pytest.raises(ExampleTooLongError, match="length bucket of 10 tokens pads its pairs to 10 source"):
        MaxTokensBatchSampler([10, 1], [1, 10], max_tokens=15, length_buckets=[10])


def bucket_collator(tokenizer, model, sampler, pad_to_multiple_of=None):
    collator = DataCollatorForSeq2Seq(
        tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=pad_to_multiple_of
    )
    return collator, BucketPaddingCollator(
        collator, sampler.bucket_lengths, sampler.bucket_shapes, tokenizer.pad_token_id
    )


def test_bucket_padding_changes_neither_the_loss_nor_the_gradients(tiny_setup):
    """A batch padded to its bucket's shape (longer rows, added rows without labels) gives a package model the loss
    and the gradients of the batch padded to its own longest pair."""
    tokenizer, dataset = tiny_setup
    torch.manual_seed(0)
    config = hf_unified_mt.get_config("unified_transformer", "tiny", vocab_size=len(tokenizer), dropout=0.0)
    config.conv_weight_dropout = 0.0
    model = AutoModelForSeq2SeqLM.from_config(config).train()
    sampler = MaxTokensBatchSampler(
        sequence_lengths(dataset, "input_ids"), sequence_lengths(dataset, "labels"), max_tokens=600, length_buckets=2
    )
    plain, bucketed = bucket_collator(tokenizer, model, sampler)
    batch = next(b for b in sampler if len(b) < sampler.batch_shape(b).rows - 1)
    features = [dataset[i] for i in batch]
    shape = sampler.batch_shape(batch)
    padded = bucketed(features)
    assert padded["input_ids"].shape == (shape.rows, shape.source_length)
    assert padded["labels"].shape == padded["decoder_input_ids"].shape == (shape.rows, shape.target_length)
    assert (padded["labels"][len(batch) :] == -100).all()

    def loss_and_gradients(inputs):
        model.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    unpadded = plain(features)
    assert unpadded["input_ids"].shape[1] < shape.source_length or unpadded["labels"].shape[1] < shape.target_length
    loss, gradients = loss_and_gradients(unpadded)
    padded_loss, padded_gradients = loss_and_gradients(padded)
    torch.testing.assert_close(padded_loss, loss, rtol=1e-6, atol=1e-6)
    for gradient, padded_gradient in zip(gradients, padded_gradients):
        torch.testing.assert_close(padded_gradient, gradient, rtol=1e-5, atol=1e-6)


def test_trainer_pads_batches_to_bucket_shapes_and_logs_the_overhead(tiny_setup, tmp_path, caplog):
    tokenizer, dataset = tiny_setup
    trainer = make_trainer(tokenizer, dataset, tmp_path, max_tokens=300, max_steps=1, length_buckets=3)
    with caplog.at_level(logging.INFO, logger="hf_unified_mt.training.batching"):
        dataloader = trainer.get_train_dataloader()
    sampler = trainer._token_batch_sampler
    shapes = {(s.rows, s.source_length, s.target_length) for s in sampler.bucket_shapes}
    seen, rows = set(), 0
    for batch in dataloader:
        seen.add((*batch["input_ids"].shape, batch["labels"].shape[1]))
        assert batch["decoder_input_ids"].shape == batch["labels"].shape
        rows += int((batch["labels"] != -100).any(dim=1).sum())
    assert seen == shapes and rows == len(dataset)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Token batching")]
    stats = sampler.statistics()
    assert len(logged) == 1 and f"{stats['padded_tokens_per_real_token']:.3f} padded tokens per real token" in logged[0]
    assert "3 batch shapes (rows x source x target: " in logged[0]
    with pytest.raises(ValueError, match="length_buckets needs max_tokens"):
        make_trainer(tokenizer, dataset, tmp_path, per_device_train_batch_size=8, length_buckets=3)
