"""What the Multi-Unit Transformer (paper 002, MUTE) adds, on tiny CPU models: its loss (cross-entropy plus the
AutoShuffle penalty) in the model and the Trainer, checkpointing with the unit noise, its config errors, the units'
own attention maps, the units, the bias module, AutoShuffle, relative positions and the unit-diversity tool. The checks
every architecture shares are in `test_model_contract.py`."""

import importlib
import json
import math
from functools import partial

import pytest
import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments
from transformers.data.data_collator import DataCollatorForSeq2Seq

from conftest import SPECIALS, VOCAB_WORDS, random_batch, tiny_config
from hf_unified_mt.modeling_multi_unit_transformer import (
    MultiUnitTransformerForConditionalGeneration,
    RelativeSelfAttentionInputs,
    disorder_ranks,
    lipschitz_penalty,
    permute_real_tokens,
    project_doubly_stochastic,
    real_token_order,
    relative_attention,
    relative_position_buckets,
    swap_ranks,
)
from hf_unified_mt.training.callbacks import (
    AutoShuffleProjectionCallback,
    MultiUnitLossLoggingCallback,
    project_auto_shuffle_after_steps,
)
from mt_checks import (
    ListDataset,
    assert_gradient_checkpointing_gives_the_same_gradients,
)


VOCAB = len(SPECIALS) + len(VOCAB_WORDS)
VARIANTS = {
    "mute": {},
    "bias": {"use_bias_module": True},
    "bias-seq": {"use_bias_module": True, "use_sequential_dependency": True},
}


mute_config = partial(tiny_config, "multi_unit_transformer")


def mute_model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return MultiUnitTransformerForConditionalGeneration(mute_config(**overrides)).eval()


def labelled_batch(vocab_size=VOCAB, **kwargs):
    ids, mask = random_batch(vocab_size, **kwargs)
    return ids, mask, ids.masked_fill(mask == 0, -100)


# ------------------------------------------------------------------------------------ loss, Trainer, errors, maps


def test_forward_with_labels_returns_loss_and_its_two_parts():
    model = mute_model(**VARIANTS["bias-seq"], bias_sample_rate=1.0, mask_probability=0.5).train()
    ids, mask, labels = labelled_batch()
    output = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert output.loss.ndim == 0 and torch.isfinite(output.loss)
    assert output.logits.shape == (*labels.shape, VOCAB)
    num_tokens = (labels != -100).sum()
    # 2 layers, M = 1/4 everywhere: each of the 4 rows and 4 columns gives 1 - 1/2.
    assert output.shuffle_penalty.item() == pytest.approx(2 * 8 * 0.5)
    assert torch.allclose(output.loss, output.cross_entropy + output.shuffle_penalty / num_tokens)
    output.loss.backward()
    assert all(p.grad is not None for p in model.parameters()), "every parameter trains"

    model.config.shuffle_penalty_normalization = "batch"
    model.config.shuffle_penalty_weight = 0.5
    output = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert torch.allclose(output.loss, output.cross_entropy + 0.5 * output.shuffle_penalty)
    assert output.to_tuple()[0] is output.loss


def test_label_smoothing_is_computed_by_the_model():
    model = mute_model(label_smoothing=0.1)
    ids, mask, labels = labelled_batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    log_probs = out.logits.log_softmax(-1)[labels != -100]
    targets = labels[labels != -100]
    expected = 0.9 * -log_probs.gather(1, targets[:, None]).mean() + 0.1 * -log_probs.mean()
    assert torch.allclose(out.loss, expected, atol=1e-5)
    assert out.shuffle_penalty is None and out.loss is out.cross_entropy


def test_gradient_checkpointing_replays_the_unit_noise():
    """The contract checks checkpointing with dropout; here the bias module draws its noise for every unit."""
    ids, mask, labels = labelled_batch()

    def build():
        return mute_model(**VARIANTS["bias-seq"], bias_sample_rate=1.0, dropout=0.1).train()

    assert_gradient_checkpointing_gives_the_same_gradients(build, input_ids=ids, attention_mask=mask, labels=labels)


def _trainer(tmp_path, tokenizer, model, batch_size, accumulation, max_steps=1, logging_steps=None, callbacks=None):
    generator = torch.Generator().manual_seed(5)
    rows = []
    for i in range(8):  # different lengths, so that token counts per micro-batch differ
        src = torch.randint(4, VOCAB, (3 + i,), generator=generator).tolist() + [2]
        tgt = torch.randint(4, VOCAB, (2 + (i * 3) % 7,), generator=generator).tolist() + [2]
        rows.append({"input_ids": src, "attention_mask": [1] * len(src), "labels": tgt})
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / f"run{batch_size}x{accumulation}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=max_steps,
        learning_rate=1.0,
        optim="sgd",
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=0.0,
        report_to=[],
        save_strategy="no",
        logging_strategy="steps" if logging_steps else "no",
        logging_steps=logging_steps or 500,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        data_seed=0,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=ListDataset(rows),
        callbacks=callbacks,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
    )
    trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(rows)
    return trainer


def test_trainer_gradient_accumulation_matches_the_doubled_batch_with_the_penalty(tmp_path, tokenizer):
    updates = []
    for batch_size, accumulation in ((4, 2), (8, 1)):
        model = mute_model(use_sequential_dependency=True).train()
        before = [p.detach().clone() for p in model.parameters()]
        _trainer(tmp_path, tokenizer, model, batch_size, accumulation).train()
        updates.append(torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)]))
    assert updates[1].norm() > 0
    assert torch.allclose(updates[0], updates[1], atol=1e-5)


def test_trainer_keeps_m_projected_and_logs_cross_entropy_and_penalty(tmp_path, tokenizer):
    model = mute_model(**VARIANTS["bias-seq"]).train()
    trainer = _trainer(
        tmp_path,
        tokenizer,
        model,
        4,
        1,
        max_steps=4,
        logging_steps=2,
        callbacks=[AutoShuffleProjectionCallback(), MultiUnitLossLoggingCallback()],
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    for entry in logs:
        assert entry["cross_entropy"] > 0 and 0 < entry["shuffle_penalty"] <= 2 * 8 * 0.5 + 1e-4
        assert entry["loss"] > entry["cross_entropy"]  # the penalty is in the loss
    for layer in model.model.encoder.layers:
        m = layer.unit_order.weight
        assert not torch.allclose(m, torch.full_like(m, 0.25)), "M trained"
        assert (m >= 0).all()
        assert torch.allclose(m.sum(0), torch.ones(4), atol=1e-5) and torch.allclose(m.sum(1), torch.ones(4), atol=1e-5)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_units=0), "num_units"),
        (dict(normalize_before=False), "normalize_before"),
        (dict(relative_attention_max_distance=0), "relative_attention_max_distance"),
        (dict(unit_noise_types=["identity", "swap"]), "unit_noise_types"),
        (dict(use_bias_module=True, unit_noise_types=["identity", "swap", "mask", "shuffle"]), "unit_noise_types"),
        (dict(unit_noise_types=["identity", "swap", "mask", "disorder"]), "use_bias_module"),
        (dict(bias_sample_rate=1.5), "bias_sample_rate"),
        (dict(mask_probability=-0.1), "mask_probability"),
        (dict(disorder_window=1), "disorder_window"),
        (dict(swap_max_distance=0), "swap_max_distance"),
        (dict(shuffle_penalty_weight=-1.0), "shuffle_penalty_weight"),
        (dict(shuffle_penalty_normalization="sentences"), "shuffle_penalty_normalization"),
        (dict(num_unit=3), "num_units"),  # a misspelled option
    ],
)
def test_bad_config_raises_value_error_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        mute_config(**overrides)


def test_each_units_attention_maps_are_in_their_own_field():
    """The contract checks the documented `encoder_attentions` (here the mean of the units' maps); each unit's own maps
    are in `encoder_unit_attentions`, [batch, units, heads, src, src]."""
    model = mute_model(**VARIANTS["bias"])
    model.set_attn_implementation("eager")  # cross-attention weights (self-attention is always explicit)
    ids, mask = random_batch(VOCAB)
    out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5], output_attentions=True)
    cfg = model.config
    source = ids.shape[1]
    assert len(out.encoder_unit_attentions) == cfg.encoder_layers
    for combined, units in zip(out.encoder_attentions, out.encoder_unit_attentions, strict=True):
        assert units.shape == (3, cfg.num_units, cfg.encoder_attention_heads, source, source)
        torch.testing.assert_close(units.mean(dim=1), combined)
        assert torch.allclose(units.sum(-1), torch.ones(()))
        assert units[-1, ..., -3:].abs().max() == 0  # no unit attends to source padding
        assert not torch.allclose(units[:, 0], units[:, 1]), "the units have their own maps"
    without = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
    assert without.encoder_attentions is None and without.encoder_unit_attentions is None


# ---------------------------------------------------------------------------------------------- units


def test_batched_units_equal_the_unit_loop():
    ids, mask, labels = labelled_batch()
    results = []
    for batched in (True, False):
        model = mute_model(**VARIANTS["bias-seq"], batched_units=batched, bias_sample_rate=1.0).train()
        torch.manual_seed(3)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        results.append((out.logits, torch.cat([p.grad.flatten() for p in model.parameters()])))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-5)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-5)


def test_parameter_count_grows_by_exactly_one_unit_per_added_unit():
    d, ffn, heads, k = 32, 64, 4, 4

    def count(units):
        return sum(p.numel() for p in mute_model(num_units=units).parameters())

    attention = 4 * d * d + 4 * d + (2 * k + 1) * (d // heads)  # q, k, v, o with biases + relative table
    feed_forward = 2 * d * ffn + ffn + d + 2 * d  # fc1, fc2, the unit's LayerNorm
    per_unit = attention + feed_forward + 1  # + α_i
    layers = mute_config().encoder_layers
    assert count(2) - count(1) == count(3) - count(2) == count(6) - count(5) == layers * per_unit


def test_eval_mode_is_deterministic_and_training_noise_is_real():
    model = mute_model(**VARIANTS["bias-seq"], bias_sample_rate=1.0)
    ids, mask = random_batch(VOCAB)
    encoder = model.get_encoder()
    with torch.no_grad():
        first = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.manual_seed(123)
        second = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        assert torch.equal(first, second)
        # the same weights without the bias module give the same eval output: no noise at eval
        plain = mute_model(use_sequential_dependency=True)
        plain.load_state_dict(model.state_dict(), strict=False)
        assert torch.equal(plain.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state, first)
        encoder.train()
        noisy = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    assert not torch.allclose(noisy, first, atol=1e-4)


def test_bias_switch_follows_the_sample_rate():
    layer = mute_model(**VARIANTS["bias"], bias_sample_rate=0.0).train().model.encoder.layers[0]
    x = torch.randn(2, 6, 32)
    off = layer.bias_module(x, None)  # switched off: every unit reads the clean input
    assert off.shape == (4, 2, 6, 32) and all(torch.equal(unit, x) for unit in off)
    layer.bias_module.sample_rate = 1.0
    torch.manual_seed(0)
    assert layer.bias_module(x, None).shape == (4, 2, 6, 32)


@pytest.mark.parametrize("side", ["right", "left"])
def test_bias_noise_stays_inside_each_sentence(side):
    torch.manual_seed(0)
    lengths = torch.tensor([9, 5, 2, 1, 3])
    length, d = 9, 4
    positions = torch.arange(length)
    padding_mask = positions < lengths[:, None] if side == "right" else positions >= (length - lengths)[:, None]
    # every row is a distinct token; padding rows are recognisable
    hidden = torch.arange(5 * length, dtype=torch.float32).view(5, length, 1).repeat(1, 1, d)
    hidden[~padding_mask] = -1.0
    order, found_lengths = real_token_order(padding_mask)
    assert torch.equal(found_lengths, lengths)
    for _ in range(30):
        for noise in ("swap", "disorder"):
            if noise == "swap":
                ranks = swap_ranks(lengths, length, max_distance=3)
            else:
                ranks = disorder_ranks(lengths, length, window=3)
            noisy = permute_real_tokens(hidden, order, ranks)
            assert torch.equal(noisy[~padding_mask], hidden[~padding_mask]), "padding never moves"
            for b in range(5):
                real_in, real_out = hidden[b][padding_mask[b], 0], noisy[b][padding_mask[b], 0]
                assert torch.equal(real_in.sort().values, real_out.sort().values), "real tokens stay in the sentence"
                moved = (real_in != real_out).nonzero().flatten()
                if lengths[b] >= 2:
                    assert len(moved) >= 2, "the noise changes the sentence"
                    assert moved.max() - moved.min() <= (3 if noise == "swap" else 2)
                    if noise == "swap":
                        assert len(moved) == 2
                else:
                    assert len(moved) == 0
    # mask noise: only real tokens are replaced, by the unit's mask embedding
    layer = mute_model(**VARIANTS["bias"], bias_sample_rate=1.0, mask_probability=0.9).train().model.encoder.layers[0]
    wide = torch.randn(5, length, 32)
    unit_inputs = layer.bias_module(wide, padding_mask)
    masked = unit_inputs[layer.bias_module.noise_types.index("mask")]
    replaced = (masked != wide).any(-1)
    assert replaced.any() and not replaced[~padding_mask].any()
    assert torch.equal(masked[replaced], layer.bias_module.mask_embeddings[0].expand(int(replaced.sum()), -1))
    for unit in unit_inputs:
        assert torch.equal(unit[~padding_mask], wide[~padding_mask])


def test_noise_never_brings_padding_into_a_sentence_end_to_end():
    model = mute_model(**VARIANTS["bias-seq"], bias_sample_rate=1.0)
    ids, mask = random_batch(VOCAB, pad_last=3)
    other = ids.clone()
    other[-1, -3:] = 7  # different tokens in the padded positions
    encoder = model.get_encoder().train()
    outputs = []
    for source in (ids, other):
        torch.manual_seed(11)  # the same noise draws
        outputs.append(encoder(input_ids=source, attention_mask=mask).last_hidden_state)
    assert torch.allclose(outputs[0][mask.bool()], outputs[1][mask.bool()], atol=1e-6)


# ---------------------------------------------------------------------------------------------- AutoShuffle


def test_lipschitz_penalty_is_zero_exactly_for_permutations():
    permutation = torch.eye(4)[[2, 0, 3, 1]]
    assert lipschitz_penalty(permutation).item() == 0.0
    assert lipschitz_penalty(torch.full((4, 4), 0.25)).item() == pytest.approx(4.0)
    near = project_doubly_stochastic(permutation + 0.01)
    assert 0 < lipschitz_penalty(near).item() < 0.5


def test_projection_makes_m_doubly_stochastic():
    raw = torch.randn(5, 5)
    raw[1] = -1.0  # a row that the ReLU zeroes entirely
    m = project_doubly_stochastic(raw)
    assert (m >= 0).all()
    assert torch.allclose(m.sum(0), torch.ones(5), atol=1e-5) and torch.allclose(m.sum(1), torch.ones(5), atol=1e-5)
    permutation = torch.eye(4)[[1, 3, 0, 2]]
    assert torch.equal(project_doubly_stochastic(permutation), permutation)


@pytest.mark.parametrize("update", ["optimizer", "manual"])
def test_m_stays_projected_in_a_plain_training_loop(update):
    model = mute_model(**VARIANTS["bias-seq"]).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    project_auto_shuffle_after_steps(optimizer, model)
    ids, mask, labels = labelled_batch()
    for _ in range(3):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        if update == "optimizer":
            optimizer.step()  # the hook installed on this optimizer projects M
        else:
            with torch.no_grad():  # an update that bypasses the optimizer: the next training forward projects M
                for p in model.parameters():
                    if p.grad is not None:  # the mask embedding has none when the noise was switched off
                        p -= 0.1 * p.grad
            model(input_ids=ids, attention_mask=mask, labels=labels)
        optimizer.zero_grad()
        for layer in model.model.encoder.layers:
            m = layer.unit_order.weight
            assert (m >= 0).all()
            assert torch.allclose(m.sum(0), torch.ones(4), atol=1e-5)
            assert torch.allclose(m.sum(1), torch.ones(4), atol=1e-5)
    assert not torch.allclose(m, torch.full_like(m, 0.25))


def test_projection_hook_belongs_to_one_optimizer():
    model = mute_model(**VARIANTS["bias-seq"])
    shuffle = model.model.encoder.layers[0].unit_order
    unprojected = torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    with torch.no_grad():
        shuffle.weight.copy_(unprojected)
    other = torch.nn.Parameter(torch.ones(2))
    other.grad = torch.zeros(2)
    torch.optim.SGD([other], lr=0.1).step()  # no hook on this optimizer (building the model installed none)
    assert torch.equal(shuffle.weight, unprojected)
    optimizer = torch.optim.SGD([other], lr=0.1)
    handle = project_auto_shuffle_after_steps(optimizer, model)
    optimizer.step()
    assert torch.equal(shuffle.weight, torch.eye(4))
    handle.remove()
    with torch.no_grad():
        shuffle.weight.copy_(unprojected)
    optimizer.step()
    assert torch.equal(shuffle.weight, unprojected)


def test_sequential_combination_equals_equations_13_to_15():
    layer = mute_model(**VARIANTS["bias-seq"]).model.encoder.layers[0]
    units = layer.num_units
    with torch.no_grad():
        layer.unit_weights.copy_(torch.rand(units) + 0.1)
        layer.unit_order.weight.copy_(project_doubly_stochastic(torch.rand(units, units)))
    unit_outputs = torch.randn(units, 2, 5, 32)  # F_i
    m, alpha = layer.unit_order.weight, layer.unit_weights
    permuted = torch.einsum("ij,ibtd->jbtd", m, unit_outputs)  # Eq. (16): [G_j] = Mᵀ [F_i]
    accumulated = permuted.cumsum(0)  # Eq. (14)
    expected = sum(alpha[j] * accumulated[j] / (j + 1) for j in range(units))  # Eq. (15)
    combined = torch.einsum("u,ubtd->btd", layer.combination_weights(), unit_outputs)
    assert torch.allclose(combined, expected, atol=1e-5)


# ---------------------------------------------------------------------------------------------- relative positions


def test_relative_attention_matches_the_shaw_formula():
    torch.manual_seed(0)
    batch, heads, queries, keys, d_h, k = 2, 3, 4, 9, 8, 2
    q = torch.randn(batch, heads, queries, d_h)
    key, v = torch.randn(batch, heads, keys, d_h), torch.randn(batch, heads, keys, d_h)
    table = torch.randn(2 * k + 1, d_h)
    query_positions = torch.arange(5, 5 + queries)  # incremental rows: positions 5.. against keys 0..8
    buckets = relative_position_buckets(query_positions, torch.arange(keys), k)
    output, weights = relative_attention(q, key, v, table, buckets, None, 0.0, False)
    # naive: materialise r_ij for every pair
    r = torch.stack(
        [torch.stack([table[max(-k, min(k, j - i)) + k] for j in range(keys)]) for i in query_positions.tolist()]
    )
    scores = (torch.einsum("bhtd,bhsd->bhts", q, key) + torch.einsum("bhtd,tsd->bhts", q, r)) / math.sqrt(d_h)
    expected_weights = scores.softmax(-1)
    expected = torch.einsum("bhts,bhsd->bhtd", expected_weights, v)
    expected = expected + torch.einsum("bhts,tsd->bhtd", expected_weights, r)
    assert torch.allclose(weights, expected_weights, atol=1e-6)
    assert torch.allclose(output, expected, atol=1e-5)


def test_relative_attention_with_one_table_per_unit_and_a_mask_matches_each_unit_alone():
    """The units' form: `[U, B, H, T, d_h]` queries with one table per unit (`[U, 1, 1, 2k+1, d_h]`) and an additive
    padding mask are each unit's attention computed on its own, with its own table."""
    torch.manual_seed(0)
    units, batch, heads, length, d_h, k = 3, 2, 2, 5, 4, 2
    q, key, v = (torch.randn(units, batch, heads, length, d_h) for _ in range(3))
    tables = torch.randn(units, 2 * k + 1, d_h)
    positions = torch.arange(length)
    buckets = relative_position_buckets(positions, positions, k)
    mask = torch.zeros(batch, 1, length, length)
    mask[1, ..., -2:] = torch.finfo(torch.float32).min
    output, weights = relative_attention(q, key, v, tables[:, None, None], buckets, mask, 0.0, False)
    for unit in range(units):
        alone, alone_weights = relative_attention(q[unit], key[unit], v[unit], tables[unit], buckets, mask, 0.0, False)
        torch.testing.assert_close(output[unit], alone)
        torch.testing.assert_close(weights[unit], alone_weights)
    assert weights[:, 1, ..., -2:].abs().max() == 0


def test_relative_self_attention_inputs_are_the_positions_buckets_and_causal_mask():
    """What the decoder's training forward computes once for all layers (and each layer for a decoding step)."""
    inputs = RelativeSelfAttentionInputs.build(2, 3, 5, 1, torch.float32, torch.device("cpu"))
    query_positions, key_positions = torch.arange(2, 5), torch.arange(5)
    assert torch.equal(inputs.buckets, relative_position_buckets(query_positions, key_positions, 1))
    assert torch.equal(inputs.future, key_positions[None, :] > query_positions[:, None])
    assert torch.equal(inputs.causal_mask == torch.finfo(torch.float32).min, inputs.future)
    assert inputs.causal_mask[~inputs.future].abs().max() == 0


# ---------------------------------------------------------------------------------------------- diversity tool


def _load_unit_diversity():
    return importlib.import_module("hf_unified_mt.analysis.unit_diversity")


def test_unit_diversity_tool_on_the_real_corpus(tmp_path):
    tool = _load_unit_diversity()
    sentences = tool.read_column(tool.corpus_dir() / "valid.tsv.gz", "es", limit=24)
    texts = tool.read_column(tool.corpus_dir() / "train.tsv.gz", "es", limit=300)
    from hf_unified_mt.training.tokenization import train_tokenizer

    tokenizer = train_tokenizer(texts, vocab_size=300)
    model = mute_model(vocab_size=len(tokenizer))
    result = tool.unit_diversity(model, tokenizer, sentences, batch_size=8)
    assert result["num_sentences"] == 24 and result["num_tokens"] > 24 * 5
    for layer in result["layers"]:
        for measure in tool.MEASURES:
            assert math.exp(-1) < layer[measure] < math.e
    # identical units: cos = 1 everywhere, DIV = exp(-1)
    with torch.no_grad():
        for layer in model.model.encoder.layers:
            for module in (layer.self_attn, layer.ffn):
                for param in module.parameters():
                    param.copy_(param[:1].expand_as(param))
    same = tool.unit_diversity(model, tokenizer, sentences, batch_size=8)
    for measure in tool.MEASURES:
        assert same["mean"][measure] == pytest.approx(math.exp(-1), abs=1e-5)
    # the command line: table + JSON
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    report = tool.main(
        [
            "--models",
            "tiny",
            "tiny:use_bias_module=true,use_sequential_dependency=true",
            "--max_sentences",
            "16",
            "--tokenizer",
            str(tmp_path / "tokenizer"),
            "--output_dir",
            str(tmp_path),
        ]
    )
    written = json.loads((tmp_path / "unit_diversity.json").read_text())
    assert written == json.loads(json.dumps(report))
    assert len(written["models"]["tiny"]["layers"]) == 2


# ---------------------------------------------------------------------------------------------- decoder variants


def _relative_tables(module: torch.nn.Module) -> list[str]:
    return [name for name, _ in module.named_parameters() if name.endswith("relative_positions")]


@pytest.mark.parametrize("unit_layer", [None, {"type": "prime", "conv_kernel_sizes": [3, 5]}], ids=["mute", "prime"])
def test_variant_6_keeps_the_decoders_relative_position_self_attention(unit_layer):
    """`merged_self` (Table 3, variant 6 of Zhang et al. 2019) keeps the self-attention, so on MUTE it keeps MUTE's own
    relative-position self-attention (it silently became plain attention, without `relative_positions`)."""
    prime = {} if unit_layer is None else {"unit_layer": unit_layer, "normalize_before": False}
    own = mute_model(decoder_attention_type="self", **prime)
    variant_6 = mute_model(decoder_attention_type="merged_self", **prime)
    for layer in variant_6.model.decoder.layers:
        assert type(layer.self_attn) is type(own.model.decoder.layers[0].self_attn)
        assert layer.self_attn.max_distance == variant_6.config.relative_attention_max_distance
    assert len(_relative_tables(variant_6.model.decoder)) == variant_6.config.decoder_layers
    # the relative table is used: changing it changes the output
    ids, mask = random_batch(VOCAB)
    with torch.no_grad():
        before = variant_6(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
        variant_6.model.decoder.layers[0].self_attn.relative_positions.add_(1.0)
        after = variant_6(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    assert not torch.allclose(before, after)


@pytest.mark.parametrize("decoder_attention_type", ["aan", "merged"])
def test_average_decoders_have_no_self_attention_and_so_no_relative_positions(decoder_attention_type):
    """`aan` and `merged` replace the decoder's self-attention by a prefix average, which has no query-key pairs to
    add relative positions to: the decoder has none, the encoder units keep theirs (as documented)."""
    model = mute_model(decoder_attention_type=decoder_attention_type)
    assert _relative_tables(model.model.decoder) == []
    assert _relative_tables(model.model.encoder)
