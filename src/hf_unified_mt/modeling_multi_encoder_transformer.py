# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Multi-Encoder Transformer ("Heterogeneous Encoders Scaling in the Transformer for Neural Machine
Translation").

The encoder is made of up to five heterogeneous *branches* reading one shared source embedding: self-attention
(the Transformer encoder), Static Expansion, LSTM, ConvS2S and FNet (and, composed, a stack of Prime layers). Their
outputs are summed (§3.2; or concatenated and projected, `branch_combination="concat"`) into the memory of one
standard Transformer decoder (or one of paper 001's decoder variants, `decoder_attention_type`). The paper's
formulas are those of the original implementations it builds on (ExpansionNet, fairseq's ConvS2S, FNet), which this
file follows. Deliberate deviations are marked "Deviation" (the package documentation's architecture notes, §4, have
the longer derivations).

Every branch is independent of the padding of its batch: the LSTM runs on packed sequences, the convolution and the
Fourier transform see zeros at padded positions (the transform over a fixed length), and the Static Expansion
distributes only real tokens over its expansion vectors.
"""

import functools
import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_multi_encoder_transformer import MultiEncoderTransformerConfig
from .initialization_mt import MatrixRole, layer_depth, with_role
from .modeling_decoder_variants import VARIANT_LAYER_NAMES, decoder_layer, decoder_recorders
from .modeling_mt_common import (
    EncoderHiddenStates,
    MTAttention,
    MTDecoder,
    MTEncoderBase,
    MTEncoderLayer,
    MTFeedForward,
    MTForConditionalGeneration,
    MTModel,
    MTPreTrainedModel,
    dropout_if_training,
)
from .modeling_unified_transformer import UnifiedTransformerEncoderLayer, prime_layer_config


def mask_padding(hidden_states: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
    """Zeroes padded positions; `padding_mask` is `[B, T]`, True for real tokens, or None when nothing is padded."""
    if padding_mask is None:
        return hidden_states
    return hidden_states * padding_mask.unsqueeze(-1).to(hidden_states.dtype)


# ================================================================================================ Static Expansion


class StaticExpansion(nn.Module):
    """Static Expansion (Eq. 1-4 of the paper; ExpansionNet v1 as implemented).

    The sequence X (length L) is distributed over N learned expansion vectors (forward step, L -> N) and brought back
    to length L (backward step) through the same length-transformation matrix Z, once with its positive and once with
    its negative part; a sigmoid selector mixes the two results. The normalisation Ψ is a ReLU followed by an L1
    normalisation (not a softmax). With several `group_sizes` (ExpansionNet v2 "block" expansion) the N = Σ N_g
    vectors share the forward step and the backward step is normalised per group and averaged over the groups.
    """

    def __init__(self, d_model: int, group_sizes: list[int], dropout: float, sequence_aware: bool, layer_idx: int):
        super().__init__()
        self.group_sizes = list(group_sizes)
        num_vectors = sum(self.group_sizes)
        self.dropout = dropout
        self.scaling = d_model**-0.5
        self.eps = 1e-9
        self.query_vectors = nn.Parameter(torch.empty(num_vectors, d_model))  # E_q
        self.bias_vectors = nn.Parameter(torch.empty(num_vectors, d_model))  # E_b
        role = MatrixRole("other", depth=layer_depth(layer_idx))  # drawn by `init_law`
        self.key_proj = with_role(nn.Linear(d_model, d_model), role)  # W_k
        self.positive_proj = with_role(nn.Linear(d_model, d_model), role)  # W_a
        self.negative_proj = with_role(nn.Linear(d_model, d_model), role)  # W_b
        self.selector_proj = with_role(nn.Linear(d_model, d_model), role)  # W_s
        # Eq. (5), whose formula the paper's text lost: our guess, off by default. Each expansion
        # vector is modulated by the sentence, E'_n = E_n ⊙ (1 + x̄ ⊙ w) with x̄ the mean over real tokens: bilinear in
        # E and x̄, d parameters (Table 8 leaves room for no d×d matrix), zero-initialised so training starts at v1.
        self.sequence_gain = nn.Parameter(torch.empty(d_model)) if sequence_aware else None

    def extra_repr(self) -> str:
        return f"expansion_vectors={self.group_sizes}, sequence_aware={self.sequence_gain is not None}"

    def init_own_parameters(self, config) -> None:
        """Expansion vectors Xavier-uniform (ExpansionNet); the sequence-aware gain zero, so that training starts at
        v1. The projections follow `init_law`."""
        init.xavier_uniform_(self.query_vectors)
        init.xavier_uniform_(self.bias_vectors)
        if self.sequence_gain is not None:
            init.zeros_(self.sequence_gain)

    def expansion_queries(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        """E_q, `[N, d]`, or with the sequence-aware option E'_q, `[B, N, d]`."""
        if self.sequence_gain is None:
            return self.query_vectors
        if padding_mask is None:
            mean = hidden_states.mean(dim=1)
        else:
            valid = padding_mask.unsqueeze(-1).to(hidden_states.dtype)
            mean = (hidden_states * valid).sum(dim=1) / valid.sum(dim=1).clamp(min=1.0)
        return self.query_vectors * (1.0 + mean * self.sequence_gain).unsqueeze(1)

    def normalize(self, weights: torch.Tensor) -> torch.Tensor:
        """Ψ: L1 normalisation of non-negative weights over the last axis."""
        return weights / (weights.sum(dim=-1, keepdim=True) + self.eps)

    def normalize_per_group(self, weights: torch.Tensor) -> torch.Tensor:
        """Ψ over each group of expansion vectors separately (a single group: plain Ψ over N)."""
        if len(self.group_sizes) == 1:
            return self.normalize(weights)
        return torch.cat([self.normalize(group) for group in weights.split(self.group_sizes, dim=-1)], dim=-1)

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        queries = self.expansion_queries(hidden_states, padding_mask)
        keys = self.key_proj(hidden_states)
        # Eq. (1): length-transformation matrix Z = E_q K^T / sqrt(d), [B, N, L].
        scores = torch.matmul(queries, keys.transpose(1, 2)) * self.scaling
        scores = dropout_if_training(scores, self.dropout, self.training)
        # Padded columns get no weight: only real tokens are distributed over the expansion vectors.
        real_columns = padding_mask.unsqueeze(1).to(scores.dtype) if padding_mask is not None else 1.0

        directions = []
        for sign, value_proj in ((1.0, self.positive_proj), (-1.0, self.negative_proj)):
            weights = nn.functional.relu(sign * scores)
            # Eq. (2), forward step L -> N: C± = Ψ(ReLU(±Z)) (X W_a|b) + E_b.
            expanded = torch.matmul(self.normalize(weights * real_columns), value_proj(hidden_states))
            expanded = dropout_if_training(expanded + self.bias_vectors, self.dropout, self.training)
            # Eq. (3), backward step N -> L with the same Z: Y± = Ψ(ReLU(±Z)^T) C± (normalised over the vectors).
            restored = torch.matmul(self.normalize_per_group(weights.transpose(1, 2)), expanded)
            restored = restored / len(self.group_sizes)
            directions.append(dropout_if_training(restored, self.dropout, self.training))
        # Eq. (4): sigmoid selector between the positive and the negative expansion.
        selector = torch.sigmoid(self.selector_proj(hidden_states))
        return selector * directions[0] + (1.0 - selector) * directions[1]


class StaticExpansionLayer(GradientCheckpointingLayer):
    """ExpansionNet's pre-norm layer x <- x + Drop(SE(LN(x))), without its FFN (§3.2 of the paper removes the FFN from
    every encoder but the self-attention and FNet ones)."""

    def __init__(self, config: MultiEncoderTransformerConfig, group_sizes: list[int], spec: dict, layer_idx: int):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.expansion = StaticExpansion(
            config.d_model, group_sizes, spec["dropout"], spec["sequence_aware_expansion"], layer_idx
        )
        self.dropout = spec["dropout"]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        update = self.expansion(self.layer_norm(hidden_states), padding_mask)
        return hidden_states + dropout_if_training(update, self.dropout, self.training)


# ================================================================================================ LSTM


class LSTMStack(GradientCheckpointingLayer):
    """Uni-directional stacked LSTM (§3.1 of the paper), hidden size d, dropout between layers, no residual.

    Padded batches run as packed sequences, so a sentence's states never see its padding (the sequences must be
    right-padded, as everywhere in this package: positions are absolute)."""

    def __init__(self, config: MultiEncoderTransformerConfig, spec: dict):
        super().__init__()
        num_layers = spec["layers"]
        self.lstm = nn.LSTM(
            config.d_model,
            config.d_model,
            num_layers=num_layers,
            batch_first=True,
            dropout=spec["dropout"] if num_layers > 1 else 0.0,
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        # Packing reads the lengths on the host, and torch.compile does not trace `nn.LSTM`: this branch is the one
        # graph break of a compiled Multi-Encoder (the other branches trace whole).
        if padding_mask is None or bool(padding_mask.all()):
            return self.lstm(hidden_states)[0]  # nothing padded: no need to pack
        lengths = padding_mask.sum(dim=1).cpu()
        packed = pack_padded_sequence(hidden_states, lengths, batch_first=True, enforce_sorted=False)
        output, _ = self.lstm(packed)
        return pad_packed_sequence(output, batch_first=True, total_length=hidden_states.shape[1])[0]

    def onnx_export_forward(self):
        """The forward the package's ONNX export traces instead (`hf_unified_mt.deployment.onnx_export`): the LSTM
        runs over the right-padded batch unpacked and the padded positions are zeroed afterwards. A uni-directional
        LSTM's state at a real token depends only on the tokens before it, so the real positions get the states of the
        packed run, and `pad_packed_sequence` gives the padded ones zeros; packing itself reads the lengths on the
        host, which a graph cannot."""

        def forward(hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
            output = self.lstm(hidden_states)[0]
            if padding_mask is None:
                return output
            return output * padding_mask.unsqueeze(-1).to(output.dtype)

        return forward


# ================================================================================================ ConvS2S


class WeightNormConv1d(nn.Module):
    """Centred 1-D convolution with weight normalisation, w = g · v / ‖v‖ per output channel (fairseq ConvS2S applies
    `weight_norm` to its convolutions). Written out rather than with `torch.nn.utils.parametrizations` so that the
    checkpoint holds plain `weight_v` / `weight_g` tensors."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, init_std: float):
        super().__init__()
        self.kernel_size = kernel_size
        self.init_std = init_std
        self.weight_v = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size))
        self.weight_g = nn.Parameter(torch.empty(out_channels, 1, 1))
        self.bias = nn.Parameter(torch.empty(out_channels))

    def extra_repr(self) -> str:
        out_channels, in_channels, _ = self.weight_v.shape
        return f"{in_channels}, {out_channels}, kernel_size={self.kernel_size}"

    def init_own_parameters(self, config) -> None:
        """fairseq's ConvS2S: v ~ N(0, init_std²), g = ‖v‖ (so that w = v at the start), zero bias."""
        init.normal_(self.weight_v, std=self.init_std)
        init.copy_(self.weight_g, self.weight_v.norm(dim=(1, 2), keepdim=True))
        init.zeros_(self.bias)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """`[B, C_in, T]` -> `[B, C_out, T]`."""
        weight = self.weight_g * self.weight_v / self.weight_v.norm(dim=(1, 2), keepdim=True)
        return nn.functional.conv1d(inputs, weight, self.bias, padding=self.kernel_size // 2)


class ConvS2SLayer(GradientCheckpointingLayer):
    """ConvS2S encoder layer (§3.1 of the paper; fairseq FConvEncoder): h <- (GLU(Conv(Drop(h))) + h) · sqrt(0.5), with
    padded positions zeroed before the convolution; no normalisation."""

    def __init__(self, spec: dict):
        super().__init__()
        channels, kernel_size, dropout = spec["conv_dim"], spec["kernel_size"], spec["dropout"]
        self.dropout = dropout
        # fairseq's initialisation N(0, sqrt(4 (1 - p) / (k · C))), which keeps the GLU output variance.
        self.conv = WeightNormConv1d(
            channels, 2 * channels, kernel_size, init_std=math.sqrt(4.0 * (1.0 - dropout) / (kernel_size * channels))
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        residual = hidden_states
        hidden_states = mask_padding(hidden_states, padding_mask)
        hidden_states = dropout_if_training(hidden_states, self.dropout, self.training)
        hidden_states = self.conv(hidden_states.transpose(1, 2))
        hidden_states = nn.functional.glu(hidden_states, dim=1).transpose(1, 2)  # GLU(A, B) = A ⊙ σ(B)
        return (hidden_states + residual) * math.sqrt(0.5)


# ================================================================================================ FNet


class FourierMixing(nn.Module):
    """FNet token mixing (§3.1 of the paper): Re(FFT_seq(FFT_hidden(X))), parameter-free.

    Deviation: the official FNet transforms whatever padding the batch has. Here
    padded positions are zeroed and the sequence axis is zero-padded to a fixed `fft_length` before the transform
    (the official model also always pads to its maximum length), then padded positions are zeroed again; a sentence's
    mixing is then the same whatever the padding of its batch. The transform runs in float32."""

    def __init__(self, fft_length: int):
        super().__init__()
        self.fft_length = fft_length

    def extra_repr(self) -> str:
        return f"fft_length={self.fft_length}"

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        length, channels = hidden_states.shape[1:]
        if length > self.fft_length:
            raise ValueError(
                f"The source has {length} positions but the FNet branch transforms at most {self.fft_length} "
                "(`fft_length`)"
            )
        inputs = mask_padding(hidden_states, padding_mask).float()
        mixed = torch.fft.fft2(inputs, s=(self.fft_length, channels), dim=(1, 2)).real[:, :length]
        return mask_padding(mixed.to(hidden_states.dtype), padding_mask)

    @property
    def max_source_length(self) -> int:
        """The longest source this module transforms (the longest an ONNX export's encoder takes)."""
        return self.fft_length

    def onnx_export_forward(self):
        """The forward the package's ONNX export traces instead (`hf_unified_mt.deployment.onnx_export`): the
        sequence axis zero-padded to `fft_length` before the transform instead of by it (`fft2(..., s=...)` pads the
        complex tensor, which the ONNX translation does not cover): the same transform of the same zero-padded input.
        The export limits the source length to `max_source_length`, so the length check of `forward` cannot be
        reached."""

        def forward(hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
            length = hidden_states.shape[1]
            valid = padding_mask.unsqueeze(-1).to(hidden_states.dtype) if padding_mask is not None else 1.0
            inputs = nn.functional.pad((hidden_states * valid).float(), (0, 0, 0, self.fft_length - length))
            mixed = torch.fft.fft2(inputs, dim=(1, 2)).real[:, :length]
            return mixed.to(hidden_states.dtype) * valid

        return forward


class FNetLayer(GradientCheckpointingLayer):
    """FNet encoder layer, post-norm as the official code: x <- LN(x + Mix(x)); x <- LN(x + Drop(FFN(x)))."""

    def __init__(self, config: MultiEncoderTransformerConfig, spec: dict, layer_idx: int):
        super().__init__()
        self.mixing = FourierMixing(spec["fft_length"])
        self.mixing_layer_norm = nn.LayerNorm(config.d_model, eps=1e-12)
        self.ffn = MTFeedForward(config, spec["ffn_dim"], layer_idx)
        self.ffn.activation_fn = ACT2FN[spec["activation"]]  # GELU in FNet, whatever the decoder uses
        self.output_layer_norm = nn.LayerNorm(config.d_model, eps=1e-12)
        self.dropout = spec["dropout"]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        hidden_states = self.mixing_layer_norm(hidden_states + self.mixing(hidden_states, padding_mask))
        update = dropout_if_training(self.ffn(hidden_states), self.dropout, self.training)
        return self.output_layer_norm(hidden_states + update)


# ================================================================================================ branches


class EncoderBranch(nn.Module):
    """One encoder of the Multi-Encoder Transformer: a stack of layers over the shared source embedding, optionally
    closed by a LayerNorm. Every layer is called as `layer(hidden_states, attention_mask=<4D mask or None>,
    padding_mask=<[B, T] bool or None>)`."""

    def __init__(self, layers: list[nn.Module], final_layer_norm: nn.LayerNorm | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.layer_norm = final_layer_norm

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=attention_mask, padding_mask=padding_mask, **kwargs)
        return self.layer_norm(hidden_states) if self.layer_norm is not None else hidden_states


class SelfAttentionBranch(EncoderBranch):
    """B: the Transformer encoder (the shared `MTEncoderLayer`, with its FFN); a final LayerNorm when pre-norm."""

    def __init__(self, config: MultiEncoderTransformerConfig, spec: dict):
        layers = [MTEncoderLayer(config, layer_idx=i) for i in range(spec["layers"])]
        super().__init__(layers, nn.LayerNorm(config.d_model) if config.normalize_before else None)


class StaticExpansionBranch(EncoderBranch):
    """S: Static Expansion layers and a final LayerNorm (their pre-norm residual stream is not normalised)."""

    def __init__(self, config: MultiEncoderTransformerConfig, spec: dict):
        sizes = spec["expansion_sizes"]
        if spec["expansion_mode"] == "block":
            groups = [list(sizes)] * spec["layers"]  # every layer: all sizes as groups of one block (v2)
        else:
            groups = [[sizes[i % len(sizes)]] for i in range(spec["layers"])]  # layer i: N_i vectors (v1)
        layers = [StaticExpansionLayer(config, group_sizes, spec, i) for i, group_sizes in enumerate(groups)]
        super().__init__(layers, nn.LayerNorm(config.d_model))


class LSTMBranch(EncoderBranch):
    """L: the stacked LSTM and a final LayerNorm."""

    def __init__(self, config: MultiEncoderTransformerConfig, spec: dict):
        super().__init__([LSTMStack(config, spec)], nn.LayerNorm(config.d_model))


def convs2s_linear_(linear: nn.Linear, dropout: float) -> None:
    """fairseq's ConvS2S `Linear` (the branch's input and output projections): N(0, sqrt((1 - p) / fan_in))."""
    init.normal_(linear.weight, mean=0.0, std=math.sqrt((1.0 - dropout) / linear.in_features))


class ConvS2SBranch(EncoderBranch):
    """C: ConvS2S layers between a d -> C input and a C -> d output projection; no normalisation. Padded positions
    of the output are zero (fairseq)."""

    def __init__(self, config: MultiEncoderTransformerConfig, spec: dict):
        super().__init__([ConvS2SLayer(spec) for _ in range(spec["layers"])])
        self.dropout = spec["dropout"]
        # fairseq's ConvS2S law whatever `init_law`
        fairseq_linear = MatrixRole("own_law", own_law=functools.partial(convs2s_linear_, dropout=self.dropout))
        self.input_proj = with_role(nn.Linear(config.d_model, spec["conv_dim"]), fairseq_linear)
        self.output_proj = with_role(nn.Linear(spec["conv_dim"], config.d_model), fairseq_linear)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        hidden_states = super().forward(self.input_proj(hidden_states), attention_mask, padding_mask, **kwargs)
        return mask_padding(self.output_proj(hidden_states), padding_mask)


class FNetBranch(EncoderBranch):
    """F: FNet layers (post-norm, so the output is already normalised)."""

    def __init__(self, config: MultiEncoderTransformerConfig, spec: dict):
        super().__init__([FNetLayer(config, spec, i) for i in range(spec["layers"])])


class PrimeBranch(EncoderBranch):
    """P (composition): the Unified Transformer's Prime encoder layers (Eq. 4 of Zhao et al.) as a branch, with the
    spec's convolution options over the model's config."""

    def __init__(self, config: MultiEncoderTransformerConfig, spec: dict):
        layer_config = prime_layer_config(config, spec)
        super().__init__([UnifiedTransformerEncoderLayer(layer_config, layer_idx=i) for i in range(spec["layers"])])


BRANCH_CLASSES: dict[str, type[EncoderBranch]] = {
    "self_attention": SelfAttentionBranch,
    "static_expansion": StaticExpansionBranch,
    "lstm": LSTMBranch,
    "convs2s": ConvS2SBranch,
    "fnet": FNetBranch,
    "prime": PrimeBranch,
}


class BranchCombination(nn.Module):
    """The encoder memory from the branch outputs: their sum (§3.2 of the paper) or, with
    `branch_combination="concat"`, a linear projection of their concatenation."""

    def __init__(self, config: MultiEncoderTransformerConfig):
        super().__init__()
        num_branches = len(config.encoder_branches)
        self.projection = (
            with_role(nn.Linear(num_branches * config.d_model, config.d_model), MatrixRole("other"))
            if config.branch_combination == "concat"
            else None
        )

    def extra_repr(self) -> str:
        return "concat + projection" if self.projection is not None else "sum"

    def forward(self, branch_outputs: list[torch.Tensor]) -> torch.Tensor:
        if self.projection is None:
            return sum(branch_outputs[1:], branch_outputs[0])
        return self.projection(torch.cat(branch_outputs, dim=-1))


# ================================================================================================ models


class MultiEncoderTransformerPreTrainedModel(MTPreTrainedModel):
    config: MultiEncoderTransformerConfig
    # A branch is one sequential stack: keep each on one device.
    _no_split_modules = [
        "SelfAttentionBranch",
        "StaticExpansionBranch",
        "LSTMBranch",
        "ConvS2SBranch",
        "FNetBranch",
        "PrimeBranch",
        "MTDecoderLayer",
        *VARIANT_LAYER_NAMES,
    ]


class MultiEncoderTransformerEncoder(MultiEncoderTransformerPreTrainedModel, MTEncoderBase):
    """The shared source embedding, the encoder branches side by side, and their combination.

    `output_hidden_states` gives (shared embedding, output of each branch in config order, combined memory);
    `output_attentions` gives the attention weights of every self-attention and Prime branch, one map per layer of
    each, branches in config order, and raises a `ValueError` for an encoder with neither (its other branches compute
    no attention maps)."""

    _can_record_outputs = {
        "hidden_states": EncoderHiddenStates(
            EncoderBranch, OutputRecorder(BranchCombination, capture_initial_hidden_state=False)
        ),
        "attentions": MTAttention,
    }

    def __init__(self, config: MultiEncoderTransformerConfig):
        super().__init__(config)  # the shared source embedding
        self.branches = nn.ModuleList([BRANCH_CLASSES[spec["type"]](config, spec) for spec in config.encoder_branches])
        self.combination = BranchCombination(config)
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        requested = kwargs.get("output_attentions")
        if (self.config.output_attentions if requested is None else requested) and not any(
            spec["type"] in ("self_attention", "prime") for spec in self.config.encoder_branches
        ):
            raise ValueError(
                f"output_attentions=True: this Multi-Encoder ({self.config.branch_letters}) has no self-attention "
                "or Prime branch, and its other branches (Static Expansion, LSTM, ConvS2S, FNet) compute no attention "
                "maps, so the encoder has none to return; leave `output_attentions` off, or add a self-attention branch"
            )
        hidden_states, attention_mask, padding_mask = self.prepare_inputs(input_ids, attention_mask, inputs_embeds)
        branch_outputs = [
            branch(hidden_states, attention_mask=attention_mask, padding_mask=padding_mask, **kwargs)
            for branch in self.branches
        ]
        return BaseModelOutput(last_hidden_state=self.combination(branch_outputs))


class MultiEncoderTransformerDecoder(MultiEncoderTransformerPreTrainedModel, MTDecoder):
    """The standard Transformer decoder (the paper keeps it unchanged), or a decoder variant of paper 001 composed
    through `config.decoder_attention_type`."""

    _can_record_outputs = decoder_recorders()
    stacks_cross_attention_projections = True

    def build_layer(self, config: MultiEncoderTransformerConfig, layer_idx: int) -> nn.Module:
        return decoder_layer(config, layer_idx)


class MultiEncoderTransformerModel(MultiEncoderTransformerPreTrainedModel, MTModel):
    encoder_class = MultiEncoderTransformerEncoder
    decoder_class = MultiEncoderTransformerDecoder


class MultiEncoderTransformerForConditionalGeneration(
    MultiEncoderTransformerPreTrainedModel, MTForConditionalGeneration, GenerationMixin
):
    base_model_class = MultiEncoderTransformerModel


__all__ = [
    "MultiEncoderTransformerPreTrainedModel",
    "MultiEncoderTransformerModel",
    "MultiEncoderTransformerForConditionalGeneration",
]
