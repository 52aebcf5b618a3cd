"""Behaviour of the Unified Transformer (paper 000) and of the shared core, on tiny CPU models."""

import pytest
import torch

from conftest import random_batch, tiny_model, trained_tiny_model
from mt_checks import assert_generate_is_identical_without_cache, assert_save_and_reload_round_trip


VARIANTS = {
    "prime": {},
    "prime-simple": {"use_convolution": False},
    "separate-projection": {"shared_projection": False},
    "single-kernel": {"conv_kernel_sizes": [7]},
    "untied-separate-vocab": {"share_encoder_decoder_embeddings": False, "tie_word_embeddings": False,
                              "decoder_vocab_size": 30},
}


def test_forward_with_labels_returns_loss():
    model = tiny_model().train()
    ids, mask = random_batch(model.config.vocab_size)
    labels = ids.clone().masked_fill(mask == 0, -100)
    output = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert output.loss.ndim == 0 and torch.isfinite(output.loss)
    assert output.logits.shape == (*labels.shape, model.config.decoder_vocab_size)
    output.loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if p.requires_grad), "every parameter trains"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("fused", [False, True])
def test_incremental_decoding_matches_full_forward(variant, attn_implementation, fused):
    model = tiny_model(**VARIANTS[variant], fuse_projections_for_inference=fused)
    model.set_attn_implementation(attn_implementation)
    ids, mask = random_batch(model.config.vocab_size)
    generator = torch.Generator().manual_seed(3)
    target = torch.randint(4, model.config.decoder_vocab_size, (ids.shape[0], 8), generator=generator)
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target, use_cache=False).logits
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        cache = None  # created by the first step, as generate() does
        steps = []
        for t in range(target.shape[1]):
            out = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=target[:, t : t + 1],
                        past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5), (torch.cat(steps, 1) - full).abs().max()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_generate_with_and_without_cache_is_identical(variant):
    model = trained_tiny_model(**VARIANTS[variant])
    ids, mask = random_batch(model.config.vocab_size)
    assert_generate_is_identical_without_cache(model, ids, mask)


def test_translation_does_not_depend_on_batch_or_padding():
    model = trained_tiny_model()
    ids, mask = random_batch(model.config.vocab_size, batch=3, pad_last=4)
    alone_ids = ids[-1:, : ids.shape[1] - 4]
    with torch.no_grad():
        batched_enc = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        batched_enc = batched_enc[-1, : alone_ids.shape[1]]
        alone_enc = model.get_encoder()(input_ids=alone_ids).last_hidden_state[0]
    assert torch.allclose(batched_enc, alone_enc, atol=1e-5)
    for kwargs in (dict(), dict(num_beams=4)):
        batched = model.generate(ids, attention_mask=mask, max_new_tokens=10, min_new_tokens=10, **kwargs)
        alone = model.generate(alone_ids, max_new_tokens=10, min_new_tokens=10, **kwargs)
        assert torch.equal(batched[-1], alone[0])
        assert len(set(alone[0].tolist())) > 2


@pytest.mark.parametrize("variant", ["prime", "untied-separate-vocab"])
def test_save_and_load_round_trip(tmp_path, variant):
    model = tiny_model(**VARIANTS[variant])
    assert_save_and_reload_round_trip(model, tmp_path, shared_and_tied=variant == "prime")
    assert (tmp_path / "model.safetensors").exists()


def test_share_without_tie_keeps_output_projection_separate():
    model = tiny_model(tie_word_embeddings=False)
    assert model.model.encoder.embed_tokens.weight is model.model.decoder.embed_tokens.weight
    assert model.lm_head.weight is not model.model.decoder.embed_tokens.weight


def test_fused_projections_match_unfused():
    model = tiny_model(fuse_projections_for_inference=True)
    ids, mask = random_batch(model.config.vocab_size)
    with torch.no_grad():
        fused = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    model.config.fuse_projections_for_inference = False
    with torch.no_grad():
        unfused = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    assert torch.allclose(fused, unfused, atol=1e-5)
    # After a weight update the fused matrices are rebuilt, never stale.
    model.config.fuse_projections_for_inference = True
    with torch.no_grad():
        model.model.encoder.layers[0].fc1.weight.add_(0.5)
        fused = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    model.config.fuse_projections_for_inference = False
    with torch.no_grad():
        unfused = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
    assert torch.allclose(fused, unfused, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["fused", "foreach"])
def test_fused_projections_follow_optimizer_steps(optimizer):
    """Evaluation between training steps (as `Trainer` does) sees the current weights, also with a fused optimizer,
    which updates parameters without bumping their version counters."""
    model = tiny_model(fuse_projections_for_inference=True)
    ids, mask = random_batch(model.config.vocab_size)
    adamw = torch.optim.AdamW(model.parameters(), lr=0.05, **{optimizer: True})

    def logits(fused: bool):
        model.config.fuse_projections_for_inference = fused
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits

    for _ in range(2):
        model.train()
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
        adamw.step()
        adamw.zero_grad()
        model.eval()
        fused, unfused = logits(True), logits(False)
        assert torch.allclose(fused, unfused, atol=1e-5), (fused - unfused).abs().max()


def test_padding_is_zeroed_before_the_convolution():
    model = tiny_model()
    ids, mask = random_batch(model.config.vocab_size, pad_last=3)
    other = ids.clone()
    other[-1, -3:] = 7  # different tokens in the padded positions
    with torch.no_grad():
        a = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        b = model.get_encoder()(input_ids=other, attention_mask=mask).last_hidden_state
    assert torch.allclose(a[:, :-3], b[:, :-3], atol=1e-6)
    model.config.mask_padding_before_conv = False  # the authors' behaviour: padding leaks into real positions
    with torch.no_grad():
        c = model.get_encoder()(input_ids=other, attention_mask=mask).last_hidden_state
    assert not torch.allclose(a[-1, :-3], c[-1, :-3], atol=1e-4)


def test_initialisation_follows_the_authors_code():
    import math

    model = tiny_model()
    d = model.config.d_model
    layer = model.model.decoder.layers[0]
    out_proj = layer.self_attn.out_proj.weight  # kaiming-uniform, a=1, fan_in 2d
    assert math.sqrt(3 / (2 * d)) * 0.9 < out_proj.abs().max() <= math.sqrt(3 / (2 * d))
    cross = layer.encoder_attn.q_proj.weight  # Xavier-uniform
    assert math.sqrt(6 / (2 * d)) * 0.9 < cross.abs().max() <= math.sqrt(6 / (2 * d))
    query = layer.self_attn.q_proj.weight  # PyTorch default U(±1/sqrt(d))
    assert 0.9 / math.sqrt(d) < query.abs().max() <= 1 / math.sqrt(d)
    assert torch.equal(layer.self_attn.conv.kernel_gate, torch.full_like(layer.self_attn.conv.kernel_gate, 0.5))
    assert layer.self_attn.q_proj.bias.abs().max() == 0
