# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the deep Transformer with depth-scaled initialization and merged attention (Zhang,
Titov & Sennrich 2019, "Improving Deep Transformer with Depth-Scaled Initialization and Merged Attention")."""

from huggingface_hub.dataclasses import strict

from .configuration_mt_common import MTConfig, register_architecture_options


@register_architecture_options
@strict
class DeepTransformerConfig(MTConfig):
    r"""
    Configuration of a [`DeepTransformerForConditionalGeneration`]: a post-norm Transformer (the paper's baseline;
    `normalize_before=True` gives its pre-norm "T2T" comparison) whose weight matrices can be drawn with DS-Init
    (Eq. 15 of Zhang et al. 2019) and whose decoder's first sublayer is selectable.

    The defaults are the paper's proposed base model (6+6 layers, d 512, FFN 2048, 8 heads, DS-Init with α = 1, merged
    attention), with separate source and target embeddings and the target embedding tied to the softmax (§7.2).
    Besides the fields of [`MTConfig`]:

    Args:
        decoder_attention_type (`str`): `"merged"` by default (MAtt, Eq. 16-17); the variants are in [`MTConfig`].
        init_law (`str`): `"ds_init"` by default: every weight matrix of encoder layer l and of decoder layer l
            (l = 1..L counted separately in each stack) is drawn from U(±γ·s(l)), γ = sqrt(6 / (fan_in + fan_out))
            (Eq. 15; `ds_init_mode`, `ds_init_alpha`); `"xavier"` is the paper's baseline (s = 1). Self-attention
            query, key and value are drawn as one d × 3d matrix (`init_fused_qkv=True`), as in the authors' code.
            The untied softmax matrix is N(0, d^-1/2).
    """

    model_type = "deep_transformer"

    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    dropout: float | int = 0.1  # dp_r, on residual branches and embeddings
    attention_dropout: float | int = 0.1  # dp_a, on attention weights
    activation_dropout: float | int = 0.1  # relu_dropout of the authors' toolkit
    share_encoder_decoder_embeddings: bool = False  # §7.2: target embedding tied to the softmax, not to the source
    decoder_attention_type: str = "merged"
    init_law: str = "ds_init"
    init_fused_qkv: bool = True


__all__ = ["DeepTransformerConfig"]
