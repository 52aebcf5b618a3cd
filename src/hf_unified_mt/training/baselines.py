# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The Transformer baseline of the comparisons: a `MarianMTModel` (post-norm Transformer, as in the papers) whose
parameter count matches a given model."""

import torch
from transformers import MarianConfig


def count_parameters(model: torch.nn.Module) -> int:
    """Trainable parameters (Marian stores its fixed sinusoidal positions as frozen parameters; they do not count)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _marian_parameters(vocab_size: int, d_model: int, layers: int, ffn_dim: int) -> int:
    """Parameters of a MarianMTModel with shared, tied embeddings (the final logits bias is a buffer)."""
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * ffn_dim + ffn_dim + d_model
    layer_norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * layer_norm
    decoder_layer = 2 * attention + ffn + 3 * layer_norm
    return vocab_size * d_model + layers * (encoder_layer + decoder_layer)


def marian_config_matching(
    num_parameters: int, vocab_size: int, d_model: int = 512, layers: int = 6, heads: int = 8, **overrides
) -> MarianConfig:
    """A Marian config of the given width and depth whose FFN width is solved so that its parameter count is as
    close to `num_parameters` as an integer FFN width allows."""
    base = _marian_parameters(vocab_size, d_model, layers, 0)
    per_ffn_unit = _marian_parameters(vocab_size, d_model, layers, 1) - base
    ffn_dim = max(1, round((num_parameters - base) / per_ffn_unit))
    values = dict(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
        max_position_embeddings=1024,
        pad_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=1,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True,
    )
    values.update(overrides)
    return MarianConfig(**values)
