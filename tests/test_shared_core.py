"""The shared core on its own: a plain Transformer built only from `modeling_mt_common` layers (the building
blocks the other architectures reuse), the stateful cache layer, positions, and the loss (`loss_mt`)."""

import pytest
import torch
from huggingface_hub.dataclasses import strict
from torch.nn.functional import cross_entropy as nn_cross_entropy
from transformers import AutoModelForSeq2SeqLM, DynamicCache, EncoderDecoderCache

import hf_unified_mt
from conftest import random_batch, tiny_config
from hf_unified_mt import loss_mt
from hf_unified_mt.cache_mt import StatefulDecoderCacheLayer
from hf_unified_mt.configuration_mt_common import MTConfig
from hf_unified_mt.loss_mt import BlockwiseCrossEntropy
from hf_unified_mt.modeling_mt_common import (
    CACHE_FIELD,
    MTAttention,
    MTDecoder,
    MTDecoderLayer,
    MTEncoder,
    MTEncoderBase,
    MTEncoderLayer,
    MTForConditionalGeneration,
    MTModel,
    MTPreTrainedModel,
    SinusoidalPositionalEmbedding,
    shift_tokens_right,
)
from hf_unified_mt.modeling_multi_pass_transformer import MultiPassTransformerEncoder


@strict
class PlainTransformerConfig(MTConfig):
    model_type = "test_plain_transformer"


class PlainEncoder(MTEncoder):
    def build_layer(self, config, layer_idx):
        return MTEncoderLayer(config, layer_idx)

    _can_record_outputs = {"hidden_states": MTEncoderLayer}


class PlainDecoder(MTDecoder):
    def build_layer(self, config, layer_idx):
        return MTDecoderLayer(config, layer_idx)

    _can_record_outputs = {"hidden_states": MTDecoderLayer}


class PlainModel(MTModel):
    config_class = PlainTransformerConfig
    encoder_class, decoder_class = PlainEncoder, PlainDecoder


class PlainForConditionalGeneration(MTForConditionalGeneration):
    config_class = PlainTransformerConfig
    base_model_class = PlainModel


def plain_model(**overrides):
    torch.manual_seed(0)
    settings = dict(
        vocab_size=40,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        dropout=0.0,
        max_position_embeddings=64,
    )
    return PlainForConditionalGeneration(PlainTransformerConfig(**{**settings, **overrides})).eval()


@pytest.mark.parametrize("normalize_before", [False, True])
def test_plain_transformer_incremental_decoding_and_generate(normalize_before):
    model = plain_model(normalize_before=normalize_before)
    assert (model.model.encoder.layer_norm is not None) == normalize_before
    ids, mask = random_batch(40)
    target = torch.randint(4, 40, (3, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        cache, steps = None, []
        for t in range(target.shape[1]):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=target[:, t : t + 1],
                cache=cache,
                use_cache=True,
            )
            cache, steps = getattr(out, CACHE_FIELD), steps + [out.logits]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    for kwargs in (dict(), dict(num_beams=4, num_return_sequences=2)):
        a = model.generate(ids, attention_mask=mask, max_new_tokens=8, min_new_tokens=8, **kwargs)
        b = model.generate(ids, attention_mask=mask, max_new_tokens=8, min_new_tokens=8, use_cache=False, **kwargs)
        assert torch.equal(a, b)


def test_cache_layer_window_running_sum_and_beam_reorder():
    config = MTConfig(decoder_layers=1)
    cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
    layer = cache.self_attention_cache.layers[0]
    assert isinstance(layer, StatefulDecoderCacheLayer)
    x = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)
    window = layer.update_window("conv", x[:, :3], size=3)  # context (2 zero rows) + 3 inputs
    assert torch.equal(window[:, :2], torch.zeros(2, 2, 3)) and torch.equal(window[:, 2:], x[:, :3])
    window = layer.update_window("conv", x[:, 3:], size=3)
    assert torch.equal(window, x[:, 1:4])
    valid = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]).unsqueeze(-1)
    sums, counts = layer.update_running_sum("avg", x[:, :2] * valid[:, :2], valid[:, :2])
    sums, counts = layer.update_running_sum("avg", x[:, 2:] * valid[:, 2:], valid[:, 2:])
    assert torch.equal(counts[:, -1, 0], torch.tensor([2.0, 4.0]))
    assert torch.equal(sums[:, -1], (x * valid).sum(1))
    layer.advance(x, num_heads=3)
    assert cache.get_seq_length() == 4  # no keys: the layer counts positions itself
    cache.reorder_cache(torch.tensor([1, 1]))
    assert torch.equal(layer.states["conv"][0], layer.states["conv"][1])
    assert torch.equal(layer.states["avg.count"][:, 0, 0], torch.tensor([4.0, 4.0]))
    with pytest.raises(NotImplementedError, match="rolled back"):
        layer.crop(-1)


def test_sinusoidal_positions_and_shift_tokens_right():
    positions = SinusoidalPositionalEmbedding(8)(torch.arange(3), torch.float32)
    assert torch.allclose(positions[0], torch.tensor([0.0] * 4 + [1.0] * 4))
    assert torch.allclose(positions[1, 0], torch.sin(torch.tensor(1.0)))
    labels = torch.tensor([[5, 6, 2, -100]])
    assert shift_tokens_right(labels, pad_token_id=0, decoder_start_token_id=1).tolist() == [[1, 5, 6, 2]]


def test_loss_is_label_smoothed_token_mean_and_exact_under_accumulation():
    ids, mask = random_batch(40)
    labels = torch.roll(ids, 1, dims=1).masked_fill(mask == 0, -100)
    plain = plain_model()
    smoothed = plain_model(label_smoothing=0.1)
    out = smoothed(input_ids=ids, attention_mask=mask, labels=labels)
    log_probs = out.logits.log_softmax(-1)[labels != -100]
    targets = labels[labels != -100]
    nll = -log_probs.gather(1, targets[:, None]).mean()
    assert torch.allclose(out.loss, 0.9 * nll + 0.1 * -log_probs.mean(), atol=1e-5)
    assert torch.allclose(plain(input_ids=ids, attention_mask=mask, labels=labels).loss, nll, atol=1e-5)
    # Gradient accumulation: each micro-batch divides by the tokens of the whole batch, so the parts add up.
    halves = [slice(0, 2), slice(2, 3)]
    total = sum(
        smoothed(input_ids=ids[h], attention_mask=mask[h], labels=labels[h], num_items_in_batch=len(targets)).loss
        for h in halves
    )
    assert torch.allclose(total, out.loss, atol=1e-5)
    with pytest.raises(ValueError, match="label_smoothing"):
        PlainTransformerConfig(label_smoothing=1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_blockwise_cross_entropy_is_torchs_cross_entropy_of_float_logits(dtype, smoothing, monkeypatch):
    """Loss and gradient as `cross_entropy(logits.float(), ..., reduction="sum")`, across several blocks (a partial
    last one), with ignored rows, in the logits' own dtype for the gradient."""
    monkeypatch.setattr(loss_mt, "CROSS_ENTROPY_BLOCK_ELEMENTS", 3 * 50)  # blocks of 3 rows
    generator = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(10, 50, generator=generator)).to(dtype).requires_grad_()
    labels = torch.randint(0, 50, (10,), generator=generator)
    labels[[0, 4, 9]] = -100
    compute = torch.promote_types(dtype, torch.float32)
    expected = nn_cross_entropy(
        logits.to(compute), labels, ignore_index=-100, reduction="sum", label_smoothing=smoothing
    )
    (expected_grad,) = torch.autograd.grad(2.5 * expected, logits)
    loss = BlockwiseCrossEntropy.apply(logits, labels, smoothing)
    (grad,) = torch.autograd.grad(2.5 * loss, logits)
    assert loss.dtype == compute and grad.dtype == dtype
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected_grad, atol=8e-3 if dtype == torch.bfloat16 else 1e-5, rtol=0)
    assert grad[[0, 4, 9]].eq(0).all()
    everything_ignored = BlockwiseCrossEntropy.apply(logits, torch.full((10,), -100), smoothing)
    assert everything_ignored.item() == 0.0


def test_blockwise_cross_entropy_passes_gradcheck():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 7, dtype=torch.float64, generator=generator, requires_grad=True)
    labels = torch.tensor([1, -100, 6, 0, 3])
    assert torch.autograd.gradcheck(lambda x: BlockwiseCrossEntropy.apply(x, labels, 0.1), (logits,))


def test_an_over_long_source_is_told_to_shorten_the_input_not_to_generate_fewer_tokens():
    """Generating fewer tokens cannot help an over-long source; it is the advice for an over-long target."""
    model = plain_model().eval()
    limit = model.config.max_position_embeddings
    ids = torch.randint(4, 40, (1, limit + 1))
    with pytest.raises(ValueError, match=rf"source sequence has {limit + 1} positions") as error:
        model(input_ids=ids, decoder_input_ids=ids[:, :2])
    assert "shorten the input" in str(error.value) and "fewer tokens" not in str(error.value)
    with pytest.raises(ValueError, match=rf"target sequence has {limit + 1} positions.*generate fewer tokens"):
        model(input_ids=ids[:, :3], decoder_input_ids=ids)


# ------------------------------------------------------------------------------------------ building the stacks

STACKS = {
    "unified_transformer": ("tiny", {}),
    "deep_transformer": ("tiny", {}),
    "multi_unit_transformer": ("tiny", dict(decoder_attention_type="merged_self")),
    "multi_encoder_transformer": ("tiny-dual", dict(decoder_attention_type="aan")),
    "multi_pass_transformer": ("tiny", dict(encoder_layer=dict(type="prime"))),
}


@pytest.mark.parametrize("arch", sorted(STACKS))
def test_every_stack_builds_its_layers_with_build_layer_and_each_model_runs_post_init_once(arch, monkeypatch):
    """One way to build layers: the encoder and decoder of every architecture build layer i with their
    `build_layer(config, i)` (the Multi-Encoder's branches take the shared embedding and input preparation from
    `MTEncoderBase`, by inheritance); and every model object of a composite model (head, model, encoder, decoder) runs
    `post_init` once, so that nothing built after it escapes it."""
    calls = []
    post_init = MTPreTrainedModel.post_init
    monkeypatch.setattr(MTPreTrainedModel, "post_init", lambda self: (calls.append(self), post_init(self))[1])
    preset, overrides = STACKS[arch]
    config = hf_unified_mt.get_config(arch, preset, vocab_size=64, **overrides)
    model = AutoModelForSeq2SeqLM.from_config(config)
    encoder, decoder = model.model.encoder, model.model.decoder
    assert sorted(map(id, calls)) == sorted(map(id, (model, model.model, encoder, decoder)))
    assert isinstance(encoder, MTEncoderBase)
    for stack in (encoder, decoder):
        for index, layer in enumerate(getattr(stack, "layers", ())):
            assert type(layer) is type(stack.build_layer(config, index)), (type(stack).__name__, index)


def test_a_stack_without_build_layer_is_refused_by_name():
    class NoLayers(MTEncoder):
        config_class = PlainTransformerConfig

    with pytest.raises(NotImplementedError, match="NoLayers must define `build_layer"):
        NoLayers(
            PlainTransformerConfig(vocab_size=64, d_model=16, encoder_attention_heads=2, decoder_attention_heads=2)
        )


# ------------------------------------------------------------------------ stacked projections of a training forward


def plain_projections(monkeypatch) -> None:
    """Every training forward computes its projections one by one, as evaluation does: no stacked q/k/v of a
    self-attention, no stacked keys/values of the decoder's cross-attentions, no q/k/v stack shared by the
    Multi-Pass Transformer's passes."""
    monkeypatch.setattr(MTAttention, "stacked_input_projections", lambda self: None)
    monkeypatch.setattr(MTDecoder, "stacked_cross_attention_states", lambda self, states, cache: None)
    monkeypatch.setattr(
        MultiPassTransformerEncoder, "shared_projections", lambda self, passes: [None] * len(self.layers)
    )


def loss_and_gradients(model, ids, mask, labels) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    return loss.detach(), {name: parameter.grad.clone() for name, parameter in model.named_parameters()}


@pytest.mark.parametrize(
    ("arch", "overrides"),
    [
        ("deep_transformer", dict(decoder_attention_type="merged")),
        ("deep_transformer", dict(decoder_attention_type="self", dropout=0.1, attention_dropout=0.1)),
        ("deep_transformer", dict(decoder_attention_type="merged_self")),
        ("multi_pass_transformer", dict(num_passes=3, connection_type="soft", training_objective="sum")),
        ("multi_pass_transformer", dict(num_passes=2, routing_pattern="d", dropout=0.1)),
        ("multi_unit_transformer", dict()),
        ("multi_unit_transformer", dict(decoder_attention_type="merged_self", attention_dropout=0.1)),
        ("multi_unit_transformer", dict(use_bias_module=True, use_sequential_dependency=True)),
        ("unified_transformer", dict()),
        ("unified_transformer", dict(dropout=0.1, input_dropout=0.1)),
        ("multi_encoder_transformer", dict()),
    ],
)
def test_stacked_training_projections_give_the_plain_forms_loss_and_gradients(arch, overrides, monkeypatch):
    """A training forward computes a self-attention's q, k, v as one product, every decoder layer's cross-attention
    keys and values as one product (`MTDecoder.stacked_cross_attention_states`), and the Multi-Pass Transformer
    stacks each layer's q/k/v once for all its passes: the same loss and the same gradient of every parameter as the
    projections one by one (dropout draws the same masks in both forms)."""
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config(arch, **overrides)).train()
    ids, mask = random_batch(model.config.vocab_size)
    labels = ids.masked_fill(mask == 0, -100)
    stacked_loss, stacked = loss_and_gradients(model, ids, mask, labels)
    plain_projections(monkeypatch)
    plain_loss, plain = loss_and_gradients(model, ids, mask, labels)
    torch.testing.assert_close(stacked_loss, plain_loss, rtol=1e-5, atol=1e-6)
    assert stacked.keys() == plain.keys()
    for name in plain:
        torch.testing.assert_close(stacked[name], plain[name], rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_the_stacked_projections_are_training_only():
    """Evaluation (and so generation and export) projects one by one; a training forward stacks."""
    model = AutoModelForSeq2SeqLM.from_config(tiny_config("deep_transformer"))
    decoder, attention = model.model.decoder, model.model.encoder.layers[0].self_attn
    states = torch.randn(2, 3, model.config.d_model)
    model.eval()
    assert attention.self_projections_for_forward(None) is None
    assert decoder.stacked_cross_attention_states(states, None) is None
    model.train()
    weight, bias = attention.self_projections_for_forward(None)
    assert weight.shape == (3 * model.config.d_model, model.config.d_model) and bias.shape == (
        3 * model.config.d_model,
    )
    per_layer = decoder.stacked_cross_attention_states(states, None)
    assert len(per_layer) == model.config.decoder_layers
    first = decoder.layers[0].encoder_attn
    torch.testing.assert_close(per_layer[0][0], first.k_proj(states))
    torch.testing.assert_close(per_layer[0][1], first.v_proj(states))
    decoder.gradient_checkpointing = True
    assert decoder.stacked_cross_attention_states(states, None) is None
