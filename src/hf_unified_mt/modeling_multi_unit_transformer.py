# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Multi-Unit Transformer, MUTE (Yan, Meng, Zhou 2020, "Multi-Unit Transformers for Neural Machine
Translation").

Every encoder layer feeds its pre-normalised input to I parallel units, each a self-attention + FFN unit with its own
residual, and sums their outputs with learned weights (MUTE, Eq. 8-10). In training, a bias module can give each unit
a differently corrupted input (Biased MUTE, Eq. 11-12), and the unit outputs can be put in a learned order and
accumulated (Sequentially Biased MUTE with AutoShuffle, Eq. 13-20). The decoder is a standard pre-norm Transformer
decoder. The encoder units' and the decoder's self-attention use relative position representations (Shaw et al. 2018);
absolute sinusoidal positions are kept. Equations follow the authors' released code where it differs from the
paper's text; deliberate deviations are marked "Deviation" (the package documentation's architecture notes, §3).

Compositions: with Prime units (`unit_layer={"type": "prime"}`) the whole model is post-norm, each unit reads the
layer input itself (no shared LayerNorm; the bias module corrupts the whole input of a unit, its residual included)
and the units' attention uses the absolute positions only. Of paper 001's decoder variants, `"merged_self"` (variant 6)
keeps the relative-position self-attention; `"aan"` and `"merged"` have no self-attention, so their decoder has no
relative positions.

Attention with relative positions is computed explicitly here ("eager") whatever `config._attn_implementation` says:
the sdpa / flash / flex kernels cannot add the relative terms to the scores and to the values. Cross-attention goes
through transformers' attention interface, as in every model of this package.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, logging
from transformers.utils.output_capturing import OutputRecorder

from .configuration_multi_unit_transformer import MultiUnitTransformerConfig
from .initialization_mt import MatrixRole, init_matrix_, layer_depth, xavier_uniform_
from .loss_mt import loss_denominator, translation_cross_entropy
from .modeling_decoder_variants import (
    VARIANT_LAYER_NAMES,
    MergedSelfAttentionDecoderLayer,
    decoder_layer,
    decoder_recorders,
)
from .modeling_mt_common import (
    EncoderHiddenStates,
    MTAttention,
    MTDecoder,
    MTDecoderLayer,
    MTEncoder,
    MTForConditionalGeneration,
    MTModel,
    MTPreTrainedModel,
    cache_layer_for,
    dropout_if_training,
)
from .modeling_unified_transformer import UnifiedTransformerEncoderLayer, prime_layer_config


logger = logging.get_logger(__name__)


# ------------------------------------------------------------------------------------------------ relative attention


def relative_position_buckets(
    query_positions: torch.Tensor, key_positions: torch.Tensor, max_distance: int
) -> torch.Tensor:
    """Index of the relative position representation of every (query, key) pair, `[T, S]`:
    idx(i, j) = clip(j - i, -k, k) + k (Shaw et al. 2018)."""
    distance = key_positions[None, :] - query_positions[:, None]
    return distance.clamp(-max_distance, max_distance) + max_distance


def additive_attention_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The 4D mask transformers builds for the configured attention implementation, as an additive float mask: eager
    builds one already, sdpa a boolean one (True = attend) or None."""
    if attention_mask is None or attention_mask.dtype != torch.bool:
        return attention_mask
    return torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device).masked_fill(
        ~attention_mask, torch.finfo(dtype).min
    )


def relative_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_table: torch.Tensor,
    buckets: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float,
    training: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention with relative position representations shared by keys and values
    (a^K = a^V, as in the authors' code):

        e_ij = q_i · (k_j + r_idx(i,j)) / sqrt(d_h),    z_i = Σ_j softmax_j(e_ij) · (v_j + r_idx(i,j)).

    `query` `[..., H, T, d_h]`, `key` / `value` `[..., H, S, d_h]` with the same leading dimensions, `position_table`
    `[2k+1, d_h]` (one table) or `[G, 1, ..., 1, 2k+1, d_h]` (one table per index of the query's first dimension, e.g.
    per unit, broadcasting over the others), `buckets` `[T, S]` from `relative_position_buckets`, `attention_mask`
    additive (broadcastable to the scores) or None. The relative terms are computed against the 2k+1 table rows, then
    gathered into the scores and bucketed out of the weights, so no `[T, S, d_h]` tensor is built. Returns the output
    `[..., H, T, d_h]` and the weights `[..., H, T, S]`.

    Every product is one batched matmul over all leading dimensions, with the relative term as the matmul's addend
    (`baddbmm`: q·k + q·r in one operator, for the scores as for the output); with contiguous inputs no operand is
    copied.
    """
    *leading, length, head_dim = query.shape
    query3 = query.reshape(-1, length, head_dim) * head_dim**-0.5
    key3, value3 = (states.reshape(-1, *states.shape[-2:]) for states in (key, value))
    index = buckets.expand(query3.shape[0], *buckets.shape)
    table = position_table.reshape(-1, *position_table.shape[-2:])  # [G, 2k+1, d_h], G = 1 for one table
    # q_i · r_m for the 2k+1 rows m, `[N, T, 2k+1]`: one product per table, over all the query rows it serves
    relative_scores = torch.matmul(query3.reshape(table.shape[0], -1, head_dim), table.transpose(-1, -2))
    relative_scores = relative_scores.view(*query3.shape[:-1], -1).gather(-1, index)
    scores = torch.baddbmm(relative_scores, query3, key3.transpose(-1, -2))
    if attention_mask is not None:
        scores = (scores.view(*leading, length, -1) + attention_mask).reshape(scores.shape)
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = dropout_if_training(weights, dropout, training)
    # Σ_j a_ij r_idx(i,j) = Σ_m (Σ_{j: idx(i,j)=m} a_ij) r_m: the weights summed per table row, times the table
    bucketed_weights = weights.new_zeros(*weights.shape[:-1], table.shape[-2]).scatter_add(-1, index, weights)
    relative_output = torch.matmul(bucketed_weights.view(table.shape[0], -1, table.shape[-2]), table)
    output = torch.baddbmm(relative_output.view(*query3.shape), weights, value3)
    return output.view(*leading, length, head_dim), weights.view(*leading, length, -1)


class RelativePositionSelfAttention(MTAttention):
    """The decoder's causal self-attention with relative positions. Keys and values go to the decoder cache as usual;
    in incremental decoding the new query rows sit at positions past_length.. and see every cached key."""

    def __init__(self, config: MultiUnitTransformerConfig, num_heads: int, is_causal: bool, layer_idx: int | None):
        super().__init__(config, num_heads, is_causal=is_causal, layer_idx=layer_idx)
        self.max_distance = config.relative_attention_max_distance
        self.relative_positions = nn.Parameter(torch.empty(2 * self.max_distance + 1, self.head_dim))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, relative_max_distance={self.max_distance}"

    def init_own_parameters(self, config) -> None:
        """The relative position table Xavier-uniform (the authors' OpenNMT `param_init_glorot`); the projections
        follow `init_law`."""
        xavier_uniform_(self.relative_positions, *self.relative_positions.shape)

    def forward(
        self,
        hidden_states: torch.Tensor,
        cache: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        relative_self_attention: "RelativeSelfAttentionInputs | None" = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`relative_self_attention`: the buckets and causal mask for this step (`RelativeSelfAttentionInputs`), which
        the decoder's training forward computes once for all its layers; computed here when None."""
        cache_layer = cache_layer_for(cache, self.layer_idx)
        past_length = cache_layer.get_seq_length() if cache_layer is not None else 0
        stacked = self.self_projections_for_forward(cache)
        if stacked is not None:
            # Training: q, k and v of every head as one product, laid out `[3, B, H, T, d_h]` by one copy, so that
            # the attention's products read them as they lie.
            batch, length = hidden_states.shape[:2]
            query, keys, values = (
                nn.functional.linear(hidden_states, *stacked)
                .view(batch, length, 3, self.num_heads, self.head_dim)
                .permute(2, 0, 3, 1, 4)
                .contiguous()
            )
        else:
            keys, values = self.key_values(hidden_states, cache, is_cross_attention=False)
            query = self.split_heads(self.q_proj(hidden_states))

        if relative_self_attention is None:
            relative_self_attention = RelativeSelfAttentionInputs.build(
                past_length, query.shape[-2], keys.shape[-2], self.max_distance, query.dtype, hidden_states.device
            )
        mask = additive_attention_mask(attention_mask, query.dtype)
        if self.is_causal:
            # sdpa masks may leave causality to the kernel (mask None): always apply it here.
            causal = relative_self_attention
            if mask is None:
                mask = causal.causal_mask.to(query.dtype)  # a no-op but under autocast
            else:
                mask = mask.masked_fill(causal.future, torch.finfo(query.dtype).min)
        output, weights = relative_attention(
            query,
            keys,
            values,
            self.relative_positions,
            relative_self_attention.buckets,
            mask,
            self.dropout,
            self.training,
        )
        output = output.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1)
        return self.out_proj(output), weights


@dataclass
class RelativeSelfAttentionInputs:
    """What the decoder's relative-position self-attention derives from the positions alone, the same in every
    layer: the buckets idx(i, j) `[T, S]`, the future keys `[T, S]` (True where j > i) and the additive causal mask
    `[T, S]` (the dtype's minimum on the future keys, else 0)."""

    buckets: torch.Tensor
    future: torch.Tensor
    causal_mask: torch.Tensor

    @classmethod
    def build(
        cls,
        past_length: int,
        query_length: int,
        key_length: int,
        max_distance: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> "RelativeSelfAttentionInputs":
        """For query rows at positions past_length.. against keys at 0..key_length-1."""
        query_positions = torch.arange(past_length, past_length + query_length, device=device)
        key_positions = torch.arange(key_length, device=device)
        future = key_positions[None, :] > query_positions[:, None]
        causal_mask = future.new_zeros(future.shape, dtype=dtype).masked_fill(future, torch.finfo(dtype).min)
        buckets = relative_position_buckets(query_positions, key_positions, max_distance)
        return cls(buckets=buckets, future=future, causal_mask=causal_mask)


# ------------------------------------------------------------------------------------------------ the units


def unit_linear(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Affine map of every unit, one batched matmul for all of them.

    `inputs` `[B, T, n]` (one input shared by the units) or `[U, B, T, n]` (one per unit), `weight` `[U, n, m]`,
    `bias` `[U, m]`; returns `[U, B, T, m]`."""
    units = weight.shape[0]
    flat = inputs.flatten(-3, -2)
    if flat.dim() == 2:
        flat = flat.expand(units, *flat.shape)
    output = torch.baddbmm(bias.unsqueeze(1), flat, weight)
    return output.view(units, *inputs.shape[-3:-1], weight.shape[-1])


def units_of(parameter: torch.Tensor, units: slice | None) -> torch.Tensor:
    """The units' slice of a stacked parameter, or the parameter itself for all units (`units` None)."""
    return parameter if units is None else parameter[units]


class MultiUnitSelfAttention(nn.Module):
    """SelfAttn_i of Eq. (8) for the I units of a layer, with relative positions (one table per unit). The weights of
    the units are stacked, so all units run as one batched matmul per projection (`config.batched_units`), or one unit
    at a time with the same weights.

    Returns the unit outputs `[I, B, T, d]` (after each unit's output projection), the layer's attention map in the
    documented `[B, H, T, T]` shape, and the units' own maps `[B, I, H, T, T]`. The layer's map combines the units
    by their plain mean, (1/I) Σ_i A_i: every row stays a distribution over the source positions, and it does not
    depend on the combination weights c_i of Eq. 10/15 (which may be negative and weigh the unit *outputs*, after
    their FFNs, not the maps)."""

    def __init__(self, config: MultiUnitTransformerConfig, layer_idx: int):
        super().__init__()
        units, d = config.num_units, config.d_model
        self.num_units = units
        self.depth = layer_depth(layer_idx)
        self.num_heads = config.encoder_attention_heads
        self.head_dim = d // self.num_heads
        self.dropout = config.attention_dropout
        self.batched = config.batched_units
        self.max_distance = config.relative_attention_max_distance
        # x @ in_proj_weight[i] = [q | k | v] of unit i
        self.in_proj_weight = nn.Parameter(torch.empty(units, d, 3 * d))
        self.in_proj_bias = nn.Parameter(torch.empty(units, 3 * d))
        self.out_proj_weight = nn.Parameter(torch.empty(units, d, d))
        self.out_proj_bias = nn.Parameter(torch.empty(units, d))
        self.relative_positions = nn.Parameter(torch.empty(units, 2 * self.max_distance + 1, self.head_dim))

    def extra_repr(self) -> str:
        return f"units={self.num_units}, heads={self.num_heads}, head_dim={self.head_dim}, batched={self.batched}"

    def init_own_parameters(self, config) -> None:
        """The stacked unit matrices by `init_law`, as self-attention inputs (q, k, v: d × d each) and outputs of this
        layer's depth (the authors' OpenNMT `param_init_glorot` by default: Xavier-uniform per unit and per q/k/v
        block), zero biases; the relative position tables Xavier-uniform."""
        d_model = self.out_proj_weight.shape[-1]
        inputs = MatrixRole("attention_input", "self", self.depth)
        init_matrix_(self.in_proj_weight, d_model, d_model, inputs, config)
        init_matrix_(self.out_proj_weight, d_model, d_model, MatrixRole("attention_output", "self", self.depth), config)
        xavier_uniform_(self.relative_positions, *self.relative_positions.shape[-2:])
        init.zeros_(self.in_proj_bias)
        init.zeros_(self.out_proj_bias)

    def forward(
        self,
        unit_inputs: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        relative_buckets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`relative_buckets`: the `[T, T]` indices of `relative_position_buckets` for this length, which the encoder
        computes once for all its layers (computed here when None)."""
        if relative_buckets is None:
            positions = torch.arange(unit_inputs.shape[-2], device=unit_inputs.device)
            relative_buckets = relative_position_buckets(positions, positions, self.max_distance)
        if self.batched:
            outputs, weights = self.attend(unit_inputs, attention_mask, relative_buckets, None)
        else:
            per_unit = [
                self.attend(unit_inputs, attention_mask, relative_buckets, slice(i, i + 1))
                for i in range(self.num_units)
            ]
            outputs, weights = torch.cat([o for o, _ in per_unit]), torch.cat([w for _, w in per_unit])
        unit_weights = weights.transpose(0, 1)  # [B, I, H, T, T]
        return outputs, unit_weights.mean(dim=1), unit_weights

    def attend(
        self, unit_inputs: torch.Tensor, attention_mask: torch.Tensor | None, buckets: torch.Tensor, units: slice | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The units selected by `units` (None: all of them, reading the stacked parameters whole, without a slicing
        operator and its backward): outputs `[U, B, T, d]`, weights `[U, B, H, T, T]`."""
        if unit_inputs.dim() == 4 and units is not None:
            unit_inputs = unit_inputs[units]
        projected = unit_linear(unit_inputs, units_of(self.in_proj_weight, units), units_of(self.in_proj_bias, units))
        num_units, batch, length, _ = projected.shape
        # [q | k | v] of every unit, head and position, laid out `[3, U, B, H, T, d_h]` by one copy, so that each
        # product of the attention reads its operands as they lie
        query, key, value = (
            projected.view(num_units, batch, length, 3, self.num_heads, self.head_dim)
            .permute(3, 0, 1, 4, 2, 5)
            .contiguous()
        )
        table = units_of(self.relative_positions, units)[:, None, None]  # [U, 1, 1, 2k+1, d_h]: batch and heads share
        mask = additive_attention_mask(attention_mask, query.dtype)  # [B, 1, T, T] broadcasts over units and heads
        output, weights = relative_attention(query, key, value, table, buckets, mask, self.dropout, self.training)
        output = output.transpose(2, 3).reshape(num_units, batch, length, -1)
        out_weight, out_bias = units_of(self.out_proj_weight, units), units_of(self.out_proj_bias, units)
        return unit_linear(output, out_weight, out_bias), weights


class MultiUnitFeedForward(nn.Module):
    """FFN_i of Eq. (9) for the I units, stacked like the attention. Each unit has its own LayerNorm in front of its
    FFN (the OpenNMT position-wise FFN the authors use): returns FFN_i(LN_i(s_i)) `[I, B, T, d]`, without residual."""

    def __init__(self, config: MultiUnitTransformerConfig, layer_idx: int):
        super().__init__()
        units, d, ffn_dim = config.num_units, config.d_model, config.encoder_ffn_dim
        self.num_units = units
        self.depth = layer_depth(layer_idx)
        self.batched = config.batched_units
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.layer_norm_weight = nn.Parameter(torch.empty(units, d))
        self.layer_norm_bias = nn.Parameter(torch.empty(units, d))
        self.fc1_weight = nn.Parameter(torch.empty(units, d, ffn_dim))
        self.fc1_bias = nn.Parameter(torch.empty(units, ffn_dim))
        self.fc2_weight = nn.Parameter(torch.empty(units, ffn_dim, d))
        self.fc2_bias = nn.Parameter(torch.empty(units, d))

    def extra_repr(self) -> str:
        return f"units={self.num_units}, batched={self.batched}"

    def init_own_parameters(self, config) -> None:
        """The stacked unit matrices by `init_law` as FFN matrices of this layer's depth, zero biases, unit
        LayerNorms."""
        role = MatrixRole("ffn", depth=self.depth)
        init_matrix_(self.fc1_weight, *self.fc1_weight.shape[-2:], role, config)
        init_matrix_(self.fc2_weight, *self.fc2_weight.shape[-2:], role, config)
        init.zeros_(self.fc1_bias)
        init.zeros_(self.fc2_bias)
        init.ones_(self.layer_norm_weight)
        init.zeros_(self.layer_norm_bias)

    def forward(self, unit_states: torch.Tensor) -> torch.Tensor:
        if self.batched:
            return self.transform(unit_states, None)
        return torch.cat([self.transform(unit_states, slice(i, i + 1)) for i in range(self.num_units)])

    def transform(self, unit_states: torch.Tensor, units: slice | None) -> torch.Tensor:
        """FFN_i(LN_i(s_i)) of the units selected by `units` (None: all, as `MultiUnitSelfAttention.attend`)."""
        states = unit_states if units is None else unit_states[units]
        normed = nn.functional.layer_norm(states, states.shape[-1:])
        # LN_i's gain and bias, one fused multiply-add: b_i + LN(s_i) * g_i
        gain, shift = units_of(self.layer_norm_weight, units), units_of(self.layer_norm_bias, units)
        normed = torch.addcmul(shift[:, None, None], normed, gain[:, None, None])
        hidden = self.activation_fn(
            unit_linear(normed, units_of(self.fc1_weight, units), units_of(self.fc1_bias, units))
        )
        hidden = dropout_if_training(hidden, self.activation_dropout, self.training)
        return unit_linear(hidden, units_of(self.fc2_weight, units), units_of(self.fc2_bias, units))


class PrimeUnits(nn.Module):
    """Composition: I Prime layers (Zhao et al., Eq. 4) as the units of a MUTE layer. Unit i maps its input x̃_i (the
    layer input, or its corrupted copy from the bias module) to F_i = LN_i(x̃_i + Drop(S_i) + Drop(FFN_i)), where S_i
    is attention and dynamic convolution reading x̃_i (Eq. 2-5 of Zhao et al.); F_i takes the place of Eq. 8-9 of Yan
    et al., and the layer combines the F_i as it combines Transformer units (Eq. 10 / 15). A Prime layer's residual
    is its own input, so with the bias module the corrupted copy is the whole input of its unit.

    Returns what `MultiUnitSelfAttention` returns, so that the layer and the output recorders treat both unit types
    alike: the unit outputs `[I, B, T, d]`, the layer's map `[B, H, T, T]` (the plain mean of the units' maps) and the
    units' maps `[B, I, H, T, T]` (both None where the attention implementation returns no maps)."""

    def __init__(self, config: MultiUnitTransformerConfig, layer_idx: int):
        super().__init__()
        unit_config = prime_layer_config(config, config.unit_layer)
        self.units = nn.ModuleList(
            [UnifiedTransformerEncoderLayer(unit_config, layer_idx) for _ in range(config.num_units)]
        )

    def extra_repr(self) -> str:
        return f"units={len(self.units)}, Prime layers run one after the other"

    def forward(
        self,
        unit_inputs: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        outputs, maps = [], []
        for i, unit in enumerate(self.units):
            unit_input = unit_inputs[i] if unit_inputs.dim() == 4 else unit_inputs
            output, weights = unit.forward_with_weights(
                unit_input, attention_mask=attention_mask, padding_mask=padding_mask, **kwargs
            )
            outputs.append(output)
            maps.append(weights)
        if any(weights is None for weights in maps):
            return torch.stack(outputs), None, None
        unit_maps = torch.stack(maps, dim=1)  # [B, I, H, T, T]
        return torch.stack(outputs), unit_maps.mean(dim=1), unit_maps


# ------------------------------------------------------------------------------------------------ bias module


def real_token_order(padding_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`order[b, r]`: position of the r-th real token of sentence b for r < length, then its padding positions;
    and the lengths `[B]`. Works for right, left or any other padding."""
    order = torch.argsort((~padding_mask).to(torch.int8), dim=1, stable=True)
    return order, padding_mask.sum(1)


def permute_real_tokens(hidden_states: torch.Tensor, order: torch.Tensor, rank_source: torch.Tensor) -> torch.Tensor:
    """Moves tokens between real positions only: the r-th real token of each sentence is replaced by its
    `rank_source[b, r]`-th real token. `rank_source[b, r] = r` for every r >= length, so padding stays in place."""
    source_positions = torch.empty_like(order).scatter_(1, order, order.gather(1, rank_source))
    return hidden_states.gather(1, source_positions.unsqueeze(-1).expand_as(hidden_states))


def swap_ranks(lengths: torch.Tensor, max_length: int, max_distance: int) -> torch.Tensor:
    """Swapping noise: per sentence, one real token and a partner at most `max_distance` real tokens away, drawn
    uniformly among the partners inside the sentence, exchange places. Returns `rank_source` `[B, max_length]`.

    Deviation: the authors draw the first token over the padded batch length and clamp
    it, and draw the offset from {-3..2} with clamping, so the swap can hit a pad slot or be a no-op; here both tokens
    are real and distinct whenever the sentence has two tokens."""
    device = lengths.device
    ranks = torch.arange(max_length, device=device).expand(len(lengths), max_length)
    first = (torch.rand(len(lengths), device=device) * lengths).long()
    offsets = torch.cat(
        [torch.arange(-max_distance, 0, device=device), torch.arange(1, max_distance + 1, device=device)]
    )
    partners = first[:, None] + offsets
    valid = (partners >= 0) & (partners < lengths[:, None])
    choice = torch.rand(partners.shape, device=device).masked_fill(~valid, -1.0).argmax(dim=1, keepdim=True)
    second = torch.where(valid.any(dim=1), partners.gather(1, choice).squeeze(1), first)
    first, second = first[:, None], second[:, None]
    return torch.where(ranks == first, second, torch.where(ranks == second, first, ranks))


def disorder_ranks(lengths: torch.Tensor, max_length: int, window: int) -> torch.Tensor:
    """Disorder noise: per sentence, a window of `window` consecutive real tokens (the whole sentence if shorter) is
    permuted randomly. Returns `rank_source` `[B, max_length]`.

    Deviation: the authors draw the window start over the padded batch length (it can
    cover padding) and allow the identity permutation; here the window lies inside the sentence and its permutation is
    never the identity (for windows of two or more tokens)."""
    device = lengths.device
    batch = len(lengths)
    ranks = torch.arange(max_length, device=device).expand(batch, max_length)
    width = lengths.clamp(max=window)
    start = (torch.rand(batch, device=device) * (lengths - width + 1)).long()
    slots = torch.arange(window, device=device)
    # random keys inside the window, increasing keys after it: argsort permutes the first `width` slots only
    keys = torch.where(slots < width[:, None], torch.rand(batch, window, device=device), slots + 2.0)
    permutation = keys.argsort(dim=1)
    unchanged = (permutation == slots).all(dim=1) & (width >= 2)
    swapped_first_two = permutation[:, torch.cat([slots[1:2], slots[:1], slots[2:]])]
    permutation = torch.where(unchanged[:, None], swapped_first_two, permutation)
    inside = (ranks >= start[:, None]) & (ranks < (start + width)[:, None])
    offset = (ranks - start[:, None]).clamp(0, window - 1)
    return torch.where(inside, start[:, None] + permutation.gather(1, offset), ranks)


class UnitBiasModule(nn.Module):
    """Bias_i of Eq. (11): in training, unit i reads a corrupted copy of the layer-normalised input of its
    self-attention (identity, swap, disorder or mask noise; the residual keeps the clean input, as in the authors'
    code). The switch (§3.2) turns the noise on with probability p_β, one draw per layer call shared by all units and
    sentences. Eval mode never adds noise.

    Noise only touches each sentence's real tokens: padding never moves into a sentence, real tokens never move into
    padding, and padding is never masked. New noise is drawn in every layer and forward pass.

    Returns the input unchanged (shared by all units) in eval mode or without noise types, else the unit inputs
    `[I, B, T, d]` (all equal to the input when the switch is off)."""

    def __init__(self, config: MultiUnitTransformerConfig):
        super().__init__()
        self.noise_types = list(config.unit_noise_types)
        self.sample_rate = float(config.bias_sample_rate)
        self.swap_max_distance = config.swap_max_distance
        self.disorder_window = config.disorder_window
        self.mask_probability = float(config.mask_probability)
        num_mask_units = self.noise_types.count("mask")
        # One learned mask embedding per mask unit.
        self.mask_embeddings = nn.Parameter(torch.empty(num_mask_units, config.d_model)) if num_mask_units else None

    def extra_repr(self) -> str:
        return f"noise_types={self.noise_types}, sample_rate={self.sample_rate}"

    def init_own_parameters(self, config) -> None:
        """The mask embeddings N(0, 1/d)."""
        if self.mask_embeddings is not None:
            init.normal_(self.mask_embeddings, std=self.mask_embeddings.shape[-1] ** -0.5)

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        if not self.training or all(noise == "identity" for noise in self.noise_types):
            return hidden_states
        # The switch, p_β: one draw per layer call, kept on the device and applied with `where` at the end (no host
        # sync or data-dependent branch, so that torch.compile traces the module whole); the noise is drawn either way.
        switch_on = torch.rand((), device=hidden_states.device) < self.sample_rate
        batch, length, _ = hidden_states.shape
        if padding_mask is None:
            padding_mask = torch.ones(batch, length, dtype=torch.bool, device=hidden_states.device)
        order, lengths = real_token_order(padding_mask)
        mask_embeddings = iter(self.mask_embeddings) if self.mask_embeddings is not None else None
        unit_inputs = []
        for noise in self.noise_types:
            if noise == "swap":
                ranks = swap_ranks(lengths, length, self.swap_max_distance)
                unit_inputs.append(permute_real_tokens(hidden_states, order, ranks))
            elif noise == "disorder":
                ranks = disorder_ranks(lengths, length, self.disorder_window)
                unit_inputs.append(permute_real_tokens(hidden_states, order, ranks))
            elif noise == "mask":
                # The authors replace each token with probability 0.1 (the paper says "one input embedding").
                draws = torch.rand(batch, length, device=hidden_states.device)
                replaced = (draws < self.mask_probability) & padding_mask
                embedding = next(mask_embeddings).to(hidden_states.dtype)
                unit_inputs.append(torch.where(replaced.unsqueeze(-1), embedding, hidden_states))
            else:
                unit_inputs.append(hidden_states)
        return torch.where(switch_on, torch.stack(unit_inputs), hidden_states)


# ------------------------------------------------------------------------------------------------ AutoShuffle


def lipschitz_penalty(matrix: torch.Tensor) -> torch.Tensor:
    """Eq. (19): Σ_rows (‖M_i‖₁ − ‖M_i‖₂) + Σ_columns (‖M_j‖₁ − ‖M_j‖₂), in float32. Zero exactly for permutation
    matrices among the doubly stochastic ones, positive otherwise."""
    matrix = matrix.float()
    rows = matrix.abs().sum(dim=1) - torch.linalg.vector_norm(matrix, dim=1)
    columns = matrix.abs().sum(dim=0) - torch.linalg.vector_norm(matrix, dim=0)
    return rows.sum() + columns.sum()


def _normalise(matrix: torch.Tensor, dim: int) -> torch.Tensor:
    total = matrix.sum(dim=dim, keepdim=True)
    # A row or column the ReLU zeroed entirely cannot be normalised: it restarts uniform.
    uniform = torch.full_like(matrix, 1.0 / matrix.shape[dim])
    return torch.where(total > 0, matrix / total.clamp_min(torch.finfo(matrix.dtype).tiny), uniform)


def is_doubly_stochastic(matrix: torch.Tensor, tolerance: float | None = None) -> bool:
    """Non-negative with rows and columns summing to 1 (within `tolerance`, by default 1e-5 or what the dtype
    allows)."""
    if tolerance is None:
        tolerance = max(1e-5, 4 * matrix.shape[0] * torch.finfo(matrix.dtype).eps)
    return bool(
        (matrix >= 0).all()
        and (matrix.sum(dim=0) - 1).abs().max() <= tolerance
        and (matrix.sum(dim=1) - 1).abs().max() <= tolerance
    )


def _sinkhorn(matrix: torch.Tensor, tolerance: float, max_iterations: int) -> tuple[torch.Tensor, bool]:
    """Alternate row and column normalisation until the rows also sum to 1 within `tolerance`."""
    for _ in range(max_iterations):
        matrix = _normalise(_normalise(matrix, dim=1), dim=0)
        if (matrix.sum(dim=1) - 1).abs().max() <= tolerance:
            return matrix, True
    return matrix, False


def project_doubly_stochastic(matrix: torch.Tensor, tolerance: float = 1e-6, max_iterations: int = 200) -> torch.Tensor:
    """Eq. (17)-(18): M <- max(M, 0), then rows and columns normalised to sum to 1.

    Deviation: the authors normalise rows then columns once, which leaves the rows only approximately normalised; we
    repeat the row-then-column step (Sinkhorn-Knopp; the first step is theirs) until rows and columns both sum to 1
    within `tolerance`, so that M is doubly stochastic as the paper's Eq. (26) assumes. When the zeros left by the
    ReLU admit no doubly stochastic matrix with the same support (no "total support"), Sinkhorn converges only
    sublinearly; then every entry is lifted by 1e-3 of the largest one (the paper's M_ij in (0, 1)) and normalised
    again, which converges within a few hundred steps. Computed in float64."""
    clamped = matrix.detach().double().clamp_min(0)  # Eq. (17)
    projected, converged = _sinkhorn(clamped, tolerance, max_iterations)
    if not converged:
        projected, _ = _sinkhorn(clamped + 1e-3 * clamped.max(), tolerance, 10 * max_iterations)
    return projected.to(matrix.dtype)


class AutoShuffle(nn.Module):
    """The learned I×I matrix M that orders the unit outputs (Eq. 16), approximating a permutation matrix.

    M is kept non-negative with rows and columns summing to 1 (Eq. 17-18, "after each optimization step"): as in the
    authors' code it is projected in place at the start of every training forward, and the training loop may also
    project it right after each optimizer step (`MultiUnitTransformerPreTrainedModel.project_auto_shuffle_`, which the
    package's Trainer callback calls), so that a saved M is always a projected one. Building a model installs no hook.
    The projection itself is not differentiated. Calling the module returns the matrix to use."""

    def __init__(self, num_units: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_units, num_units))  # `init_own_parameters`: 1/I

    def extra_repr(self) -> str:
        return f"units={self.weight.shape[0]}"

    def init_own_parameters(self, config) -> None:
        """M starts uniform, 1/I (doubly stochastic)."""
        init.constant_(self.weight, 1.0 / self.weight.shape[0])

    @torch.no_grad()
    def project_(self) -> None:
        """Projects M in place (a no-op, without writing, when it is already doubly stochastic)."""
        if not is_doubly_stochastic(self.weight):
            self.weight.copy_(project_doubly_stochastic(self.weight))

    def forward(self) -> torch.Tensor:
        if torch.compiler.is_compiling():
            # The projection's convergence test is data-dependent (a graph break): a compiled model uses M as stored,
            # which is the projected M when the training loop projects after each optimizer step (the package's
            # Trainer callback, or `project_auto_shuffle_after_steps` for a plain loop).
            return self.weight
        if self.training:
            self.project_()
            return self.weight
        # Deviation: at eval the authors use M as stored; we use its projection, which is
        # M itself whenever it was projected after the last optimizer step.
        if is_doubly_stochastic(self.weight):
            return self.weight
        return project_doubly_stochastic(self.weight.detach())

    def onnx_export_forward(self):
        """The forward the package's ONNX export traces instead (`hf_unified_mt.deployment.onnx_export`): M as the
        model in eval mode uses it (its doubly stochastic projection), computed once before tracing. The projection
        iterates to a data-dependent tolerance, which the tracer does not follow (it would take the stored matrix, as
        under `torch.compile`)."""
        matrix = type(self).forward(self).detach().clone()
        return lambda: matrix

    def penalty(self) -> torch.Tensor:
        return lipschitz_penalty(self.weight)  # Eq. (19)


# ------------------------------------------------------------------------------------------------ layers


class MultiUnitTransformerEncoderLayer(GradientCheckpointingLayer):
    """A MUTE encoder layer (pre-norm). With x the layer input and x̂ = LN(x) (one LayerNorm shared by the units):

        x̂_i = Bias_i(x̂)                                   (Eq. 11, training only)
        s_i = x + Drop(SelfAttn_i(x̂_i))                   (Eq. 8)
        F_i = s_i + Drop(FFN_i(LN_i(s_i)))                 (Eq. 9)
        out = Σ_i c_i F_i                                  (Eq. 10 / 12 / 15)

    with c = α (MUTE, biased MUTE) or the sequential-dependency weights of `combination_weights`. With Prime units
    (`config.unit_layer`, a composition; post-norm), F_i = Prime_i(Bias_i(x)) (`PrimeUnits`), combined alike."""

    def __init__(self, config: MultiUnitTransformerConfig, layer_idx: int | None = None):
        super().__init__()
        self.num_units = config.num_units
        self.dropout = config.dropout
        self.bias_module = UnitBiasModule(config) if config.use_bias_module else None
        if config.unit_layer["type"] == "prime":
            self.layer_norm, self.self_attn, self.ffn = None, None, None
            self.prime_units = PrimeUnits(config, layer_idx)
        else:
            self.layer_norm = nn.LayerNorm(config.d_model)
            self.self_attn = MultiUnitSelfAttention(config, layer_idx)
            self.ffn = MultiUnitFeedForward(config, layer_idx)
            self.prime_units = None
        # α of Eq. (10): unconstrained, initialised to 1/I (the authors' code; `init_own_parameters`).
        self.unit_weights = nn.Parameter(torch.empty(config.num_units))
        self.unit_order = AutoShuffle(config.num_units) if config.use_sequential_dependency else None

    def init_own_parameters(self, config) -> None:
        """α of Eq. (10) at 1/I (the authors' code)."""
        init.constant_(self.unit_weights, 1.0 / self.num_units)

    def extra_repr(self) -> str:
        combination = "sequential" if self.unit_order is not None else "weighted sum"
        units = "Prime units, post-norm" if self.prime_units is not None else "pre-norm"
        return f"units={self.num_units}, {units}, combination={combination}"

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        relative_buckets: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """`relative_buckets`: the units' `[T, T]` relative position buckets, which the encoder's training forward
        computes once for all its layers (computed by the attention when None)."""
        if self.prime_units is not None:
            unit_inputs = hidden_states
            if self.bias_module is not None:
                unit_inputs = self.bias_module(unit_inputs, padding_mask)  # Eq. (11)
            unit_outputs = self.prime_units(unit_inputs, attention_mask, padding_mask, **kwargs)[0]
        else:
            unit_inputs = self.layer_norm(hidden_states)
            if self.bias_module is not None:
                unit_inputs = self.bias_module(unit_inputs, padding_mask)  # Eq. (11)
            attention = self.self_attn(unit_inputs, attention_mask, relative_buckets)[0]
            states = hidden_states + dropout_if_training(attention, self.dropout, self.training)  # Eq. (8)
            ffn = self.ffn(states)
            unit_outputs = states + dropout_if_training(ffn, self.dropout, self.training)  # Eq. (9)
        weights = self.combination_weights().to(unit_outputs.dtype)
        return torch.einsum("u,ubtd->btd", weights, unit_outputs)

    def combination_weights(self) -> torch.Tensor:
        """c_i such that the layer output is Σ_i c_i F_i.

        MUTE (Eq. 10, 12): c = α. Sequential dependency (Eq. 13-16): G_j = Σ_i M_ij F_i (G = Mᵀ [F_i], Eq. 16),
        Ĝ_j = Σ_{j'≤j} G_j' (Eq. 14) and out = Σ_j α_j Ĝ_j / j (Eq. 15). All three are linear in the F_i, so
        out = Σ_i F_i Σ_j' M_ij' w_j' with w_j' = Σ_{j≥j'} α_j / j, i.e. c = M w: the same result without building
        the I permuted and I accumulated outputs."""
        if self.unit_order is None:
            return self.unit_weights
        steps = torch.arange(1, self.num_units + 1, device=self.unit_weights.device, dtype=self.unit_weights.dtype)
        accumulated = (self.unit_weights / steps).flip(0).cumsum(0).flip(0)
        return self.unit_order() @ accumulated


class MultiUnitTransformerDecoderLayer(MTDecoderLayer):
    """The standard pre-norm decoder layer (multi-unit layers are encoder-only, §4 of the paper) whose self-attention
    uses relative positions."""

    def __init__(self, config: MultiUnitTransformerConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx)
        self.self_attn = RelativePositionSelfAttention(
            config, config.decoder_attention_heads, is_causal=True, layer_idx=layer_idx
        )


class MultiUnitMergedSelfAttentionDecoderLayer(MergedSelfAttentionDecoderLayer):
    """Variant 6 of Zhang et al. 2019 (`decoder_attention_type="merged_self"`: causal self-attention and
    cross-attention summed in one residual sublayer) composed with MUTE: the variant keeps the self-attention, so it
    keeps MUTE's, with relative positions. (`"aan"` and `"merged"` have no self-attention, hence no relative
    positions in the decoder.)"""

    def __init__(self, config: MultiUnitTransformerConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx)
        self.self_attn = RelativePositionSelfAttention(
            config, config.decoder_attention_heads, is_causal=True, layer_idx=layer_idx
        )


# ------------------------------------------------------------------------------------------------ models


@dataclass
class MultiUnitEncoderOutput(BaseModelOutput):
    r"""
    attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True`):
        One map per layer, `[batch, heads, src, src]`: the mean of the layer's units' maps.
    unit_attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True`):
        One tensor per layer, `[batch, units, heads, src, src]`: each unit's own self-attention map.
    """

    unit_attentions: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class MultiUnitSeq2SeqModelOutput(Seq2SeqModelOutput):
    r"""
    encoder_unit_attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True`):
        One tensor per encoder layer, `[batch, units, heads, src, src]`: each unit's map; `encoder_attentions` holds
        their mean.
    """

    encoder_unit_attentions: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class MultiUnitSeq2SeqLMOutput(Seq2SeqLMOutput):
    r"""
    encoder_unit_attentions (`tuple(torch.FloatTensor)`, *optional*, returned when `output_attentions=True`):
        One tensor per encoder layer, `[batch, units, heads, src, src]`: each unit's map; `encoder_attentions` holds
        their mean.
    cross_entropy (`torch.FloatTensor` of shape `()`, *optional*):
        The cross-entropy part of `loss` (label-smoothed with `config.label_smoothing`), returned with `labels`.
    shuffle_penalty (`torch.FloatTensor` of shape `()`, *optional*):
        Σ_k L_p^k, the AutoShuffle penalty (Eq. 19) summed over the encoder layers, unweighted; returned with `labels`
        when the sequential dependency is on. `loss` adds it with the weight of `config.shuffle_penalty_weight` and
        `config.shuffle_penalty_normalization`.
    """

    encoder_unit_attentions: tuple[torch.FloatTensor, ...] | None = None
    cross_entropy: torch.FloatTensor | None = None
    shuffle_penalty: torch.FloatTensor | None = None


class MultiUnitTransformerPreTrainedModel(MTPreTrainedModel):
    config: MultiUnitTransformerConfig
    _no_split_modules = [
        "MultiUnitTransformerEncoderLayer",
        "MultiUnitTransformerDecoderLayer",
        "MultiUnitMergedSelfAttentionDecoderLayer",
        *VARIANT_LAYER_NAMES,
    ]
    # Self-attention with relative positions is always computed explicitly; cross-attention may use sdpa.
    _supports_flash_attn = False
    _supports_flex_attn = False

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # transformers decides this by looking for `ALL_ATTENTION_FUNCTIONS.get_interface(` in this file; the
        # attention that uses the interface here is the cross-attention (`MTAttention` of modeling_mt_common.py), and
        # that is what `set_attn_implementation` selects.
        return True

    def project_auto_shuffle_(self) -> None:
        """Projects every AutoShuffle matrix M of the model in place onto the doubly stochastic matrices (Eq. 17-18),
        the step the paper takes "after each optimization step". Training loops call it after `optimizer.step()`
        (the package's Trainer callback does); a no-op without the sequential dependency."""
        for module in self.modules():
            if isinstance(module, AutoShuffle):
                module.project_()


class MultiUnitTransformerEncoder(MultiUnitTransformerPreTrainedModel, MTEncoder):
    """`attentions` holds one `[batch, heads, src, src]` map per layer, the mean over the units, and
    `unit_attentions` each unit's maps, `[batch, units, heads, src, src]` (both with `output_attentions`)."""

    output_class = MultiUnitEncoderOutput
    _can_record_outputs = {
        "hidden_states": EncoderHiddenStates(MultiUnitTransformerEncoderLayer),
        "attentions": [OutputRecorder(MultiUnitSelfAttention, index=1), OutputRecorder(PrimeUnits, index=1)],
        "unit_attentions": [OutputRecorder(MultiUnitSelfAttention, index=2), OutputRecorder(PrimeUnits, index=2)],
    }

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultiUnitEncoderOutput:
        # The per-unit maps come with the layer maps: `output_attentions` (of the call, else of the config) asks for
        # both.
        if kwargs.get("output_unit_attentions") is None:
            requested = kwargs.get("output_attentions")
            kwargs["output_unit_attentions"] = bool(self.config.output_attentions if requested is None else requested)
        if self.training and self.config.unit_layer["type"] != "prime":
            # The units' relative position buckets depend on the length alone: a training forward computes them
            # once, for every layer (otherwise each layer computes its own).
            states = inputs_embeds if inputs_embeds is not None else input_ids
            if states is not None:
                positions = torch.arange(states.shape[1], device=states.device)
                max_distance = self.config.relative_attention_max_distance
                kwargs["relative_buckets"] = relative_position_buckets(positions, positions, max_distance)
        return super().forward(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
        )

    def build_layer(self, config: MultiUnitTransformerConfig, layer_idx: int) -> nn.Module:
        return MultiUnitTransformerEncoderLayer(config, layer_idx)

    def shuffle_penalty(self) -> torch.Tensor | None:
        """Σ_k L_p^k over the layers (Eq. 20), or None without the sequential dependency."""
        penalties = [layer.unit_order.penalty() for layer in self.layers if layer.unit_order is not None]
        return torch.stack(penalties).sum() if penalties else None


class MultiUnitTransformerDecoder(MultiUnitTransformerPreTrainedModel, MTDecoder):
    """The paper's decoder (relative-position self-attention), or a decoder variant of paper 001 composed through
    `config.decoder_attention_type`: variant 6 (`"merged_self"`) keeps the relative-position self-attention; `"aan"`
    and `"merged"` replace the self-attention by a prefix average, so the decoder then has no relative positions (the
    encoder units keep theirs, and the absolute sinusoidal positions stay)."""

    _can_record_outputs = decoder_recorders(MultiUnitTransformerDecoderLayer)
    stacks_cross_attention_projections = True

    def layer_inputs_for_forward(
        self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None, cache: Cache | None
    ) -> dict:
        """`MTDecoder.layer_inputs_for_forward`, and in a training forward without a cache (the whole target at once)
        the relative self-attention's buckets and causal mask, computed once for every layer
        (`RelativeSelfAttentionInputs`); otherwise each layer computes them for its step."""
        inputs = super().layer_inputs_for_forward(hidden_states, encoder_hidden_states, cache)
        if self.config.decoder_attention_type in ("self", "merged_self") and self.training and cache is None:
            length = hidden_states.shape[1]
            inputs["relative_self_attention"] = RelativeSelfAttentionInputs.build(
                0,
                length,
                length,
                self.config.relative_attention_max_distance,
                hidden_states.dtype,
                hidden_states.device,
            )
        return inputs

    def build_layer(self, config: MultiUnitTransformerConfig, layer_idx: int) -> nn.Module:
        return decoder_layer(
            config,
            layer_idx,
            standard=MultiUnitTransformerDecoderLayer,
            merged_self=MultiUnitMergedSelfAttentionDecoderLayer,
        )


class MultiUnitTransformerModel(MultiUnitTransformerPreTrainedModel, MTModel):
    encoder_class = MultiUnitTransformerEncoder
    decoder_class = MultiUnitTransformerDecoder
    output_class = MultiUnitSeq2SeqModelOutput


class MultiUnitTransformerForConditionalGeneration(
    MultiUnitTransformerPreTrainedModel, MTForConditionalGeneration, GenerationMixin
):
    base_model_class = MultiUnitTransformerModel
    output_class = MultiUnitSeq2SeqLMOutput

    def forward_without_labels(self) -> None:
        if self.training and self.config.use_sequential_dependency:
            logger.warning_once(
                "Training forward without `labels`: the AutoShuffle penalty is not in any loss. Pass `labels` to "
                "the model (with the Trainer: use `config.label_smoothing`, not `label_smoothing_factor`)."
            )

    def loss_terms(
        self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> dict[str, torch.Tensor | None]:
        """The loss (cross-entropy plus, with the sequential dependency, the weighted AutoShuffle penalty, Eq. 20) and
        its two parts, `cross_entropy` and `shuffle_penalty`, as output fields. The cross-entropy is summed over tokens
        and divided by the number of target tokens of the whole (accumulated) batch, `num_items_in_batch` when the
        Trainer passes it, which makes gradient accumulation exact. The penalty (Eq. 19-20) is weighted by λ (and by
        1/tokens with `shuffle_penalty_normalization="tokens"`, the authors' loss) and by this micro-batch's share of
        the batch's tokens, so that it counts once per optimizer step however the batch is split."""
        cross_entropy = translation_cross_entropy(logits, labels, num_items_in_batch, self.config.label_smoothing)
        penalty = self.model.encoder.shuffle_penalty()
        if penalty is None:
            return {"loss": cross_entropy, "cross_entropy": cross_entropy, "shuffle_penalty": None}
        labels = labels.to(logits.device)
        total_tokens = loss_denominator(labels, num_items_in_batch)
        weight = float(self.config.shuffle_penalty_weight) * (labels != -100).sum() / total_tokens
        if self.config.shuffle_penalty_normalization == "tokens":
            weight = weight / total_tokens
        loss = cross_entropy + weight * penalty
        return {"loss": loss, "cross_entropy": cross_entropy, "shuffle_penalty": penalty}


__all__ = [
    "MultiUnitEncoderOutput",
    "MultiUnitSeq2SeqModelOutput",
    "MultiUnitSeq2SeqLMOutput",
    "MultiUnitTransformerPreTrainedModel",
    "MultiUnitTransformerModel",
    "MultiUnitTransformerForConditionalGeneration",
]
