# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the deep Transformer with depth-scaled initialization and merged attention (Zhang,
Titov & Sennrich 2019, "Improving Deep Transformer with Depth-Scaled Initialization and Merged Attention")."""

from huggingface_hub.dataclasses import strict

from .configuration_mt_common import MTConfig


DECODER_ATTENTION_TYPES = ("self", "aan", "merged")
DS_INIT_MODES = ("paper", "released_code")


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
        decoder_attention_type (`str`): The decoder's self-attention sublayer:
            `"self"`: standard causal multi-head self-attention, followed by cross-attention and FFN (Eq. 6-8);
            `"aan"`: the original average attention network (Zhang et al. 2018): cumulative average of the layer input,
            optional FFN, input/forget gates, followed by cross-attention and FFN;
            `"merged"`: MAtt (Eq. 16-17): a simplified AAN (the average of the cross-attention's value projection of the
            input, no gate, no FFN) added to the cross-attention before their shared output projection, followed by
            the FFN. Zero parameters beyond the cross-attention's.
        aan_use_ffn (`bool`): With `decoder_attention_type="aan"`, pass the average through an FFN of width
            `decoder_ffn_dim` before the gate (the AAN paper's form; its released code and the author's advice leave it
            out, which is the default).
        ds_init (`bool`): Depth-scaled initialization: every weight matrix of encoder layer l and of decoder layer l
            (l = 1..L counted separately in each stack) is drawn from U(±γ·s(l)), γ = sqrt(6 / (fan_in + fan_out)).
            False gives plain Xavier-uniform (s = 1). Biases, LayerNorms and embeddings are not affected.
        ds_init_mode (`str`): The scale s(l): `"paper"` (Eq. 15) s = α / sqrt(l); `"released_code"`
            s = sqrt(α) · l^(-1/4), what the authors' code computes (TensorFlow variance scaling with scale α / sqrt(l))
            and what their released models were trained with.
        ds_init_alpha (`float`): α of Eq. 15 (the paper uses 1.0).
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
    aan_use_ffn: bool = False
    ds_init: bool = True
    ds_init_mode: str = "paper"
    ds_init_alpha: float | int = 1.0

    def validate_architecture_options(self):
        super().validate_architecture_options()
        if self.decoder_attention_type not in DECODER_ATTENTION_TYPES:
            raise ValueError(
                f"`decoder_attention_type` must be one of {DECODER_ATTENTION_TYPES}, "
                f"got {self.decoder_attention_type!r}"
            )
        if self.aan_use_ffn and self.decoder_attention_type != "aan":
            raise ValueError(
                "`aan_use_ffn=True` only applies to `decoder_attention_type='aan'` "
                f"(got {self.decoder_attention_type!r})"
            )
        if self.ds_init_mode not in DS_INIT_MODES:
            raise ValueError(f"`ds_init_mode` must be one of {DS_INIT_MODES}, got {self.ds_init_mode!r}")
        if isinstance(self.ds_init_alpha, bool) or not float(self.ds_init_alpha) > 0.0:
            raise ValueError(f"`ds_init_alpha` must be a positive number, got {self.ds_init_alpha!r}")


__all__ = ["DeepTransformerConfig"]
