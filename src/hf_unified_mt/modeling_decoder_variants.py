# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The decoder variants of Zhang, Titov & Sennrich 2019 ("Improving Deep Transformer with Depth-Scaled Initialization
and Merged Attention"), which every architecture with a Transformer-style decoder composes through
`config.decoder_attention_type` (the Deep Transformer, MUTE, the Multi-Encoder and the Multi-Pass Transformer):

* `"self"`: the architecture's standard decoder layer (causal self-attention, cross-attention, FFN);
* `"aan"`: the original average attention network (`AAN`, Zhang, Xiong & Su 2018) in place of the self-attention,
  `AverageAttentionDecoderLayer`;
* `"merged"`: merged attention (`MergedAttention`, Eq. 16-17), the simplified AAN and the cross-attention in one
  sublayer, `MergedAttentionDecoderLayer`;
* `"merged_self"`: Table 3's variant 6, causal self-attention and cross-attention in one merged sublayer,
  `MergedSelfAttentionDecoderLayer`.

The average-based sublayers keep O(1) incremental state per layer and step: a running sum and per-row valid counts in
the layer's `StatefulDecoderCacheLayer`. `decoder_layer` builds a decoder's layer of the configured variant and
`decoder_recorders` the output recorders of such a decoder. Equations follow the paper and, where the two differ, the
authors' released code; deliberate deviations are marked "Deviation" (the package documentation's architecture notes,
§2, have the longer derivations).
"""

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.output_capturing import OutputRecorder

from .cache_mt import StatefulDecoderCacheLayer
from .configuration_mt_common import MTConfig
from .initialization_mt import MatrixRole, layer_depth, with_role
from .modeling_mt_common import (
    MTAttention,
    MTDecoderLayer,
    MTFeedForward,
    ResidualSublayer,
    cache_layer_for,
)


def cumulative_average(
    values: torch.Tensor,
    padding_mask: torch.Tensor | None,
    cache_layer: StatefulDecoderCacheLayer | None,
    state_name: str,
) -> torch.Tensor:
    """The average mask M_a of AAN applied to `values` (`[B, T, D]`): position i receives the mean of the values at
    the valid (non-padding) positions j <= i, current position included (Eq. 16 of Zhang et al. 2019).

    Computed as a cumulative sum divided by a cumulative count, so a whole sequence costs O(T) and a decoding step
    O(1): with a cache layer, the sums and counts continue from its running totals (`update_running_sum`), which beam
    search reorders with the rest of the cache. Padded positions get zero, like a zero row of M_a. Sums and counts
    are kept in float32, so that half-precision models average long prefixes exactly."""
    dtype, values = values.dtype, values.float()
    if padding_mask is None and cache_layer is None:
        # A whole sequence without padding: position i averages i + 1 values (the same quotients as below, from one
        # count vector instead of a cumulative sum of ones, its clamp and a product by ones).
        counts = torch.arange(1, values.shape[1] + 1, device=values.device, dtype=values.dtype).unsqueeze(-1)
        return (values.cumsum(dim=1) / counts).to(dtype)
    if padding_mask is None:
        valid = values.new_ones(*values.shape[:2], 1)
    else:
        valid = padding_mask.unsqueeze(-1).to(values.dtype)
        values = values * valid
    if cache_layer is not None:
        sums, counts = cache_layer.update_running_sum(state_name, values, valid)
    else:
        sums, counts = values.cumsum(dim=1), valid.cumsum(dim=1)
    return (sums / counts.clamp(min=1.0) * valid).to(dtype)


def prefix_average_weights(
    attention_mask: torch.Tensor | None,
    padding_mask: torch.Tensor | None,
    batch: int,
    num_heads: int,
    query_length: int,
    past_length: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The average mask M_a of AAN (Zhang, Xiong & Su 2018, Eq. 1; Eq. 16 of Zhang et al. 2019) as an attention map, in
    the documented self-attention shape `[batch, heads, query, past + query]`: row i is uniform over the valid key
    positions j <= i (current position included), and zero for a padded query position, exactly the weights that
    `cumulative_average` applies. The same map is repeated over the heads (the average has no heads). Built from the
    decoder's 4D causal mask (which already holds the causal structure and the target padding) when there is one, else
    from the positions."""
    if isinstance(attention_mask, torch.Tensor):  # eager: additive float mask; sdpa: boolean (True = attend)
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        allowed = allowed[..., -query_length:, :]
    else:  # no mask (nothing padded, or a flex `BlockMask`): causal over the positions, padding from `padding_mask`
        device = padding_mask.device if padding_mask is not None else None
        keys = torch.arange(past_length + query_length, device=device)
        queries = torch.arange(past_length, past_length + query_length, device=device)
        allowed = (keys[None, :] <= queries[:, None])[None, None]
    weights = allowed.to(torch.float32)
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp(min=1.0)
    if padding_mask is not None:
        weights = weights * padding_mask[:, None, -query_length:, None].to(weights.dtype)
    return weights.expand(batch, num_heads, -1, -1).to(dtype)


def requested_prefix_average_map(
    config: MTConfig,
    kwargs: dict,
    attention_mask: torch.Tensor | None,
    padding_mask: torch.Tensor | None,
    hidden_states: torch.Tensor,
    num_heads: int,
    cache_layer=None,
) -> torch.Tensor | None:
    """[`prefix_average_weights`] for a key-less sublayer's input `hidden_states`, if the caller asked for attention
    maps (`output_attentions` of the call, else of the config); `None` otherwise: the maps are O(T²) and only built
    when requested."""
    requested = kwargs.get("output_attentions")
    if not (getattr(config, "output_attentions", False) if requested is None else requested):
        return None
    past_length = cache_layer.get_seq_length() if cache_layer is not None else 0
    batch, length = hidden_states.shape[:2]
    return prefix_average_weights(
        attention_mask, padding_mask, batch, num_heads, length, past_length, hidden_states.dtype
    )


class AAN(nn.Module):
    """Average attention network (Zhang, Xiong & Su 2018), the original form that Zhang et al. 2019 simplify: the layer
    input y is averaged over the target prefix (no projection), optionally passed through an FFN, and combined with
    y by input and forget gates:

        g_i = FFN(ȳ_i) or ȳ_i,   [i; f] = [y_i; g_i] W_z + b_z,   h_i = σ(i) ⊙ y_i + σ(f) ⊙ g_i.

    The enclosing residual sublayer adds the residual connection and LayerNorm. With `normalize_before` (pre-norm)
    y is the normalised layer input, for the average and the gate alike (the AAN code averages the raw input; the two
    agree in the post-norm layout, which is the one the papers use). (Named after the acronym: the
    transformers attention-interface heuristic reserves `*Attention*(nn.Module)` class names for modules that call the
    attention interface.)"""

    def __init__(self, config: MTConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.num_heads = config.decoder_attention_heads
        self.ffn = MTFeedForward(config, config.decoder_ffn_dim, layer_idx) if config.aan_use_ffn else None
        self.gate = with_role(
            nn.Linear(2 * config.d_model, 2 * config.d_model), MatrixRole("other", depth=layer_depth(layer_idx))
        )

    def extra_repr(self) -> str:
        return f"ffn={self.ffn is not None}, gated=True"

    def forward(
        self,
        hidden_states: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        cache_layer: StatefulDecoderCacheLayer | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns the sublayer output and, when attention maps are requested, the average mask as a
        `[batch, heads, query, key]` map (`prefix_average_weights`), like a self-attention's weights."""
        weights = requested_prefix_average_map(
            self.config, kwargs, attention_mask, padding_mask, hidden_states, self.num_heads, cache_layer
        )
        average = cumulative_average(hidden_states, padding_mask, cache_layer, "aan")
        context = self.ffn(average) if self.ffn is not None else average
        input_gate, forget_gate = self.gate(torch.cat([hidden_states, context], dim=-1)).chunk(2, dim=-1)
        return torch.sigmoid(input_gate) * hidden_states + torch.sigmoid(forget_gate) * context, weights


class MergedAttention(MTAttention):
    """MAtt (Eq. 16-17 of Zhang et al. 2019): the simplified AAN and the encoder-decoder attention computed in
    parallel from the same input s and summed before one output projection,

        MAtt(s) = (M_a (s W_v + b_v) + ATT_heads(s, H^L)) W_o + b_o,

    where W_v, b_v are the cross-attention's own value projection (the authors' code reuses it under the same variable
    scope, and Table 3's parameter counts confirm it) and W_o, b_o its output projection: no parameters beyond those
    of a cross-attention. Returns the merged output, the cross-attention weights, and, when attention maps are
    requested, the average mask M_a as a `[batch, heads, query, key]` self-attention map (`prefix_average_weights`)."""

    # The decoder's training forward may project every layer's keys and values of H as one product
    # (`MTDecoder.stacked_cross_attention_states`): this attention reads its layer's, as `MTAttention` does.
    reads_cross_attention_states = True

    def __init__(self, config: MTConfig, num_heads: int, layer_idx: int):
        super().__init__(config, num_heads, is_causal=False, layer_idx=layer_idx, is_cross_attention=True)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        cache: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        self_attention_mask: torch.Tensor | None = None,
        cross_attention_states: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """`cross_attention_states`: this layer's `(k_proj(H), v_proj(H))`, projected by the decoder for all its
        layers at once (`MTDecoder.stacked_cross_attention_states`), or None to project H here."""
        cache_layer = cache_layer_for(cache, self.layer_idx)
        average_weights = requested_prefix_average_map(
            self.config, kwargs, self_attention_mask, padding_mask, hidden_states, self.num_heads, cache_layer
        )
        # Eq. (16): simplified AAN on the shared value projection, in full width d.
        average = cumulative_average(self.v_proj(hidden_states), padding_mask, cache_layer, "merged")
        # Eq. (1): encoder-decoder attention, heads concatenated before the output projection.
        keys, values = self.key_values(
            encoder_hidden_states, cache, is_cross_attention=True, projected=cross_attention_states
        )
        context, weights = self.attend(self.q_proj(hidden_states), keys, values, attention_mask, **kwargs)
        # Eq. (17): the two branches share W_o.
        return self.out_proj(context + average), weights, average_weights


class AverageAttentionDecoderLayer(GradientCheckpointingLayer):
    """Decoder layer of the AAN Transformer: the causal self-attention sublayer of Eq. (6) replaced by [`AAN`], then
    cross-attention (Eq. 7) and FFN (Eq. 8), each a residual sublayer (post- or pre-norm)."""

    def __init__(self, config: MTConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.self_attn = AAN(config, layer_idx)
        self.self_attn_sublayer = ResidualSublayer(config)
        self.encoder_attn = MTAttention(
            config, config.decoder_attention_heads, layer_idx=layer_idx, is_cross_attention=True
        )
        self.encoder_attn_sublayer = ResidualSublayer(config)
        self.ffn = MTFeedForward(config, config.decoder_ffn_dim, layer_idx)
        self.ffn_sublayer = ResidualSublayer(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        cache_layer = cache_layer_for(cache, self.layer_idx)
        hidden_states = self.self_attn_sublayer(
            hidden_states,
            lambda x: self.self_attn(x, padding_mask, cache_layer, attention_mask=attention_mask, **kwargs)[0],
        )
        if cache_layer is not None:
            # no self-attention keys: count the positions (keys/values stay empty `[B, H, 0, d_h]` tensors)
            cache_layer.advance(hidden_states, self.encoder_attn.num_heads)
        hidden_states = self.encoder_attn_sublayer(
            hidden_states,
            lambda x: self.encoder_attn(
                x,
                key_value_states=encoder_hidden_states,
                cache=cache,
                attention_mask=encoder_attention_mask,
                **kwargs,
            )[0],
        )
        return self.ffn_sublayer(hidden_states, self.ffn)


class MergedAttentionDecoderLayer(GradientCheckpointingLayer):
    """Decoder layer with merged attention (Eq. 17): S̄ = LN(S + MAtt(S)), then the FFN sublayer. Two sublayers
    instead of three; the same parameter count as an encoder layer."""

    def __init__(self, config: MTConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.encoder_attn = MergedAttention(config, config.decoder_attention_heads, layer_idx)
        self.encoder_attn_sublayer = ResidualSublayer(config)
        self.ffn = MTFeedForward(config, config.decoder_ffn_dim, layer_idx)
        self.ffn_sublayer = ResidualSublayer(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        hidden_states = self.encoder_attn_sublayer(
            hidden_states,
            lambda x: self.encoder_attn(
                x,
                encoder_hidden_states,
                cache=cache,
                attention_mask=encoder_attention_mask,
                padding_mask=padding_mask,
                self_attention_mask=attention_mask,
                **kwargs,
            )[0],
        )
        cache_layer = cache_layer_for(cache, self.layer_idx)
        if cache_layer is not None:
            # no self-attention keys: count the positions (keys/values stay empty `[B, H, 0, d_h]` tensors)
            cache_layer.advance(hidden_states, self.encoder_attn.num_heads)
        return self.ffn_sublayer(hidden_states, self.ffn)


class MergedSelfAttentionDecoderLayer(GradientCheckpointingLayer):
    """Table 3, variant 6 of Zhang et al. 2019, "MAtt with self-attention": the merged sublayer with ordinary causal
    self-attention in place of the simplified AAN, S̄ = LN(S + Drop(SelfAtt(S) + ATT(S, H^L))), then the FFN sublayer.
    It separates the cost of merging the sublayers from the cost of averaging. Each attention keeps its own
    projections (our reading: the variant has the baseline's 72.3M parameters, so no projection is shared)."""

    def __init__(self, config: MTConfig, layer_idx: int):
        super().__init__()
        heads = config.decoder_attention_heads
        self.self_attn = MTAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.encoder_attn = MTAttention(config, heads, layer_idx=layer_idx, is_cross_attention=True)
        self.merged_sublayer = ResidualSublayer(config)
        self.ffn = MTFeedForward(config, config.decoder_ffn_dim, layer_idx)
        self.ffn_sublayer = ResidualSublayer(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        def merged(inputs: torch.Tensor) -> torch.Tensor:
            own = self.self_attn(inputs, cache=cache, attention_mask=attention_mask, **kwargs)[0]
            cross = self.encoder_attn(
                inputs,
                key_value_states=encoder_hidden_states,
                cache=cache,
                attention_mask=encoder_attention_mask,
                **kwargs,
            )[0]
            return own + cross

        hidden_states = self.merged_sublayer(hidden_states, merged)
        return self.ffn_sublayer(hidden_states, self.ffn)


DECODER_LAYER_CLASSES = {
    "self": MTDecoderLayer,
    "aan": AverageAttentionDecoderLayer,
    "merged": MergedAttentionDecoderLayer,
    "merged_self": MergedSelfAttentionDecoderLayer,
}
# paper 001's layer classes, for the `_no_split_modules` of every architecture whose decoder may build them
VARIANT_LAYER_NAMES = [cls.__name__ for name, cls in DECODER_LAYER_CLASSES.items() if name != "self"]


def decoder_layer(
    config: MTConfig,
    layer_idx: int,
    standard: type[nn.Module] = MTDecoderLayer,
    merged_self: type[nn.Module] = MergedSelfAttentionDecoderLayer,
) -> nn.Module:
    """Layer `layer_idx` of a decoder of `config.decoder_attention_type`: the architecture's `standard` layer for
    `"self"` and its `merged_self` layer for variant 6 (the layers that keep a self-attention: MUTE passes its own, with
    relative positions), else paper 001's variant. Every architecture with a Transformer-style decoder builds its
    layers with this, in its decoder's `build_layer`."""
    layer_classes = {**DECODER_LAYER_CLASSES, "self": standard, "merged_self": merged_self}
    return layer_classes[config.decoder_attention_type](config, layer_idx=layer_idx)


def decoder_recorders(standard: type[nn.Module] = MTDecoderLayer) -> dict:
    """`_can_record_outputs` of a decoder whose layers may be any variant (the architecture's `standard` layer, whose
    self-attention is an `MTAttention`, or paper 001's): the states of every layer class, and one self-attention map
    per layer (AAN and MAtt give their uniform prefix average M_a, `prefix_average_weights`)."""
    return {
        "hidden_states": [standard, *(cls for cls in DECODER_LAYER_CLASSES.values() if cls is not MTDecoderLayer)],
        "attentions": [
            OutputRecorder(MTAttention, index=1, layer_name="self_attn"),
            OutputRecorder(AAN, index=1),
            OutputRecorder(MergedAttention, index=2),
        ],
        "cross_attentions": OutputRecorder(MTAttention, index=1, layer_name="encoder_attn"),
    }
