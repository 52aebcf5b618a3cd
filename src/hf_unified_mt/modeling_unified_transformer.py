# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Unified Transformer (Zhao et al., "Unified Transformer for Sequence-to-Sequence Learning").

Every layer is a *Prime* unit: self-attention, a dynamic depthwise convolution and the position-wise FFN (plus
cross-attention in the decoder) read the same input in parallel and are summed onto one residual, followed by a
single post-LayerNorm. Equations follow the authors' released code where it differs from the paper's text;
deliberate deviations are marked "Deviation" (the package documentation's architecture notes, §1, have the longer
derivations). Where the paper's equations are:

* Eq. 1 (Prime-simple) and Eq. 4 (Prime): h' = LN(h + Drop(S) [+ Drop(Z)] + Drop(F)), `UnifiedTransformerPrimeLayer`
  (`forward_with_weights`); S the self-attention branch, Z the decoder's cross-attention, F the FFN.
* Eq. 2 (attention) and Eq. 5 (the convolution of the shared value projection, W_1^C = W_1^A): `PrimeSelfAttention`,
  whose one output projection over [attention; convolution] is A W_2^A + C W_2^C.
* Eq. 3: the FFN, `fc1` / `fc2` of the layer.
* Eq. 6 (a softmax-normalised kernel generated per position) and Eq. 7 (the kernel widths mixed by softmax(gate)):
  `PrimeDynamicConvolution.kernels`, applied by its `forward`.

Each class shows the paper's computation first; below it, marked by a section line, the paths that compute the same
result faster or for export: the convolution's three computations (one decoding step, a band matrix, sliding
windows), the forward the ONNX export traces and the training forward with its backward written out
(`PrimeConvolutionFunction`), and the layer's stacked and fused projections (§3.3.1). A Prime layer composed into
another architecture reads its options through `prime_layer_config`.
"""

import copy

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.output_capturing import OutputRecorder

from .cache_mt import StatefulDecoderCacheLayer
from .configuration_unified_transformer import PRIME_LAYER_FIXED, PRIME_LAYER_OPTIONS, UnifiedTransformerConfig
from .initialization_mt import MatrixRole, layer_depth, pytorch_default_linear_, with_role
from .modeling_mt_common import (
    EncoderHiddenStates,
    LayerConfig,
    MTAttention,
    MTDecoder,
    MTEncoder,
    MTForConditionalGeneration,
    MTModel,
    MTPreTrainedModel,
    cache_layer_for,
    dropout_if_training,
)


class PrimeDynamicConvolution(nn.Module):
    """Dynamic depthwise convolution with adaptive kernel sizes.

    For each kernel size k a generator W_k (no bias) maps the input at position t to H·k taps, normalised by a
    softmax over the taps (Eq. 6, with the kernels generated from the value tensor as in the authors' code, and
    channels tied to the H attention heads as in DynamicConv). Cells of different widths are mixed by
    softmax(gate) (Eq. 7). Because every cell is linear in the input window, the mixture is computed as ONE
    convolution of width max(k) whose taps are the gate-weighted sum of the cells' taps (smaller kernels occupy
    the centre taps in the encoder and the most recent taps in the causal decoder) - identical to summing the
    cells, with one pass over the window instead of one per cell.
    """

    def __init__(self, config: UnifiedTransformerConfig, num_heads: int, is_causal: bool):
        super().__init__()
        self.num_heads = num_heads
        self.is_causal = is_causal
        self.kernel_sizes = list(config.conv_kernel_sizes)
        self.max_kernel_size = max(self.kernel_sizes)
        self.weight_dropout = config.conv_weight_dropout
        # W_k keep the authors' draw whatever `init_law`: their `DynamicConv1dTBC` draws the generator Xavier-uniform,
        # then its `reset_parameters()` redraws it with `nn.Linear.reset_parameters()`, U(±1/sqrt(d_model)).
        generator = MatrixRole("own_law", own_law=pytorch_default_linear_)
        self.kernel_generators = nn.ModuleList(
            [with_role(nn.Linear(config.d_model, num_heads * k, bias=False), generator) for k in self.kernel_sizes]
        )
        # Eq. (7): alpha_i, one learned scalar per cell, initialised equal (`init_own_parameters`).
        self.kernel_gate = nn.Parameter(torch.empty(len(self.kernel_sizes)))
        # Up to this length the convolution is one band-matrix matmul (O(T·(T+K)) work in one kernel call), beyond it
        # a sum over sliding windows (O(T·K) work): the same result, and each the faster form on its side.
        self.band_max_length = 256

    def extra_repr(self) -> str:
        padding = "causal" if self.is_causal else "centred"
        return (
            f"kernel_sizes={self.kernel_sizes}, heads={self.num_heads}, {padding}, weight_dropout={self.weight_dropout}"
        )

    def init_own_parameters(self, config) -> None:
        init.constant_(self.kernel_gate, 0.5)  # Eq. (7): the cells start equal

    def kernels(self, inputs: torch.Tensor) -> torch.Tensor:
        """Mixed taps `[B, T, H, max_k]` generated from the inputs (Eq. 6-7), computed for all cells at once: the
        generators' logits in one product; each cell's logits placed in a row of `max_k` taps (a narrower cell at the
        centre, causal: the most recent taps) with -inf elsewhere, so that one softmax over the taps normalises every
        cell over its own taps (Eq. 6; exp(-inf) = 0); the gate-weighted sum of the cells (Eq. 7) as one product with
        softmax(gate)."""
        if self.plain_generators():
            logits = nn.functional.linear(inputs, self.generator_weight())
        else:  # a quantised generator, or one with an adapter: each computes its own part
            logits = torch.cat([generator(inputs) for generator in self.kernel_generators], dim=-1)
        weights = self.cell_probabilities(logits, self.num_heads, self.kernel_sizes, self.is_causal)
        weights = dropout_if_training(weights, self.weight_dropout, self.training)  # DropConnect
        return torch.matmul(weights, torch.softmax(self.kernel_gate, dim=0).to(weights.dtype))

    @staticmethod
    def cell_probabilities(logits: torch.Tensor, heads: int, kernel_sizes: list[int], is_causal: bool) -> torch.Tensor:
        """Eq. 6 for every cell at once: the generators' logits `[B, T, H·k_1 + H·k_2 + ...]` placed in rows of
        `max_k` taps (-inf outside each cell's own taps, `cell_taps`) and normalised by one softmax over the taps,
        `[B, T, H, max_k, cells]`."""
        batch, length, _ = logits.shape
        width = max(kernel_sizes)
        cells = []
        for size, cell in zip(kernel_sizes, logits.split([heads * size for size in kernel_sizes], dim=-1)):
            cell = cell.view(batch, length, heads, size)
            if size < width:
                taps = PrimeDynamicConvolution.cell_taps(size, width, is_causal)
                cell = nn.functional.pad(cell, (taps.start, width - taps.stop), value=float("-inf"))
            cells.append(cell)
        return torch.softmax(torch.stack(cells, dim=-1), dim=-2)

    @staticmethod
    def cell_taps(size: int, width: int, is_causal: bool) -> slice:
        """The taps of a cell of `size` among `width`: a narrower cell's sit at the centre (causal: the most
        recent)."""
        start = width - size if is_causal else (width - size) // 2
        return slice(start, start + size)

    def plain_generators(self) -> bool:
        """Whether every generator is a plain `nn.Linear` (not a quantised one, nor one with an adapter)."""
        return all(type(generator) is nn.Linear for generator in self.kernel_generators)

    def generator_weight(self) -> torch.Tensor:
        """The generators' weights stacked `[H·k_1 + H·k_2 + ..., C]`: their logits in one product."""
        return torch.cat([generator.weight for generator in self.kernel_generators])

    def forward(
        self,
        inputs: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        cache_layer: StatefulDecoderCacheLayer | None = None,
        cached_values: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Convolves `inputs` `[B, T, C]` (the T current positions). In incremental decoding the left context comes
        from `cached_values`, the self-attention cache's values `[B, H, S, C/H]` (S >= T; they *are* the
        convolution's inputs so far when it reads the value projection, Eq. 5, padded positions already zeroed), or
        otherwise from the window the cache layer keeps for it. Zeros stand before the first token, exactly the zero
        padding of the full-sequence computation. A training forward of a short sequence computes the same with its
        backward written out (`training_convolution`, below)."""
        batch, length, channels = inputs.shape
        heads, width = self.num_heads, self.max_kernel_size
        if cached_values is None and cache_layer is None and self.trains_in_one_function(length):
            return self.training_convolution(inputs, padding_mask).reshape(batch, length, channels)
        taps = self.kernels(inputs)
        if cached_values is not None:
            window = cached_values[:, :, -(length + width - 1) :]
            # One decoding step reads the last (up to K) values with only the taps that read them (`step_convolution`):
            # the taps that would read the zeros before the first token add nothing, so its window is not padded.
            if length > 1 and window.shape[2] < length + width - 1:
                window = nn.functional.pad(window, (0, 0, length + width - 1 - window.shape[2], 0))
        else:
            if padding_mask is not None:
                inputs = inputs * padding_mask.unsqueeze(-1)  # a bool mask: zeros the padded positions
            if cache_layer is not None:
                window = cache_layer.update_window("prime_conv", inputs, width)
                window = window.view(batch, window.shape[1], heads, channels // heads).transpose(1, 2)
            else:
                window = self.padded_window(inputs, heads, width, self.is_causal)
        if length == 1:  # one position (a decoding step): the band is its taps
            return self.step_convolution(window, taps)
        if length <= self.band_max_length:
            output = self.band_convolution(window, taps)
        else:
            output = self.window_convolution(window, taps)
        return output.transpose(1, 2).reshape(batch, length, channels)

    @staticmethod
    def padded_window(inputs: torch.Tensor, heads: int, width: int, is_causal: bool) -> torch.Tensor:
        """The window the convolution reads, `[B, H, T+K-1, C/H]`: channel c belongs to head c // (C / H), with K-1
        zeros before the positions (causal) or K//2 on each side (centred), padded after the transpose, so that the
        padded window is laid out for the matmul (no copy of it there)."""
        batch, length, channels = inputs.shape
        window = inputs.view(batch, length, heads, channels // heads).transpose(1, 2)
        before = width - 1 if is_causal else width // 2
        return nn.functional.pad(window, (0, 0, before, width - 1 - before))

    # --------------------------------------------------------------- the computations of the convolution
    # The same convolution three ways, chosen by `forward` by the number of positions: one decoding step, the band
    # matrix (short sequences), the sliding windows (long ones); the forward the ONNX export traces; and the training
    # forward of the band form with its backward written out.

    def step_convolution(self, window: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        """One position (a decoding step): the window `[B, H, k, C/H]` (the last k <= K inputs) weighted by the taps
        `[B, 1, H, K]` that read it, `[B, 1, C]`. The band of one position is its taps; with one position
        `[B, 1, H, K]` -> `[B, H, 1, K]` and back are reshapes of the same elements (shapes without the batch), not the
        transposes of the general case, so the exported step graph has neither."""
        heads, width = self.num_heads, self.max_kernel_size
        taps = taps.reshape(-1, heads, 1, width)[..., width - window.shape[2] :]
        return torch.matmul(taps, window).reshape(-1, 1, heads * window.shape[-1])

    def band_convolution(self, window: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        """The convolution as one batched matmul with a band matrix, out[t] = Σ_s band[t, s] · window[s], where row t
        holds the K taps of position t (`taps`: `[B, T, H, K]`) at columns t .. t+K-1 of the padded window
        `[B, H, T+K-1, C/H]` (as fairseq's `dynamicconv` "expand" path). The band is built by the skew trick: each row
        of taps is right-padded to T+K entries, and reading the flat buffer back in rows of T+K-1 shifts row t right
        by t. Returns `[B, H, T, C/H]`."""
        return torch.matmul(self.band_matrix(taps), window)

    @staticmethod
    def band_matrix(taps: torch.Tensor) -> torch.Tensor:
        """The band `[B, H, T, T+K-1]` of `band_convolution` from the taps `[B, T, H, K]`, by the skew trick."""
        batch, length, heads, width = taps.shape
        padded_length = length + width - 1
        rows = nn.functional.pad(taps.transpose(1, 2), (0, length))  # [B, H, T, T+K]
        return rows.reshape(batch, heads, -1)[..., : length * padded_length].view(batch, heads, length, padded_length)

    def window_convolution(self, window: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        """The same convolution over explicit sliding windows: O(T·K) work instead of the band's O(T·(T+K)), the faster
        form for long sequences. Per position t its taps `[1, K]` times its window `[K, C/H]`, with the windows taken as
        `[B, H, T, K, C/H]`: in an exported graph the layout of the window gather itself, so the K-times larger windows
        are never transposed. Returns `[B, H, T, C/H]`."""
        windows = window.unfold(2, self.max_kernel_size, 1).transpose(-1, -2)  # [B, H, T, K, C/H]
        return torch.matmul(taps.permute(0, 2, 1, 3).unsqueeze(-2), windows).squeeze(-2)

    def onnx_export_forward(self):
        """The forward the package's ONNX export traces instead (`hf_unified_mt.deployment.onnx_export`): the same
        result in fewer graph nodes. The kernels come from the padded generator (`padded_generator`, built once here
        and traced as constants), so that the cells' logits leave one product already laid out in rows of `max_k`
        taps, without the split, padding and stacking of `cell_probabilities`; and the encoder's convolution takes
        the sliding windows at every length, so that one graph serves every source length. The decoder's steps (one
        position) keep `step_convolution`. None (unchanged) for generators that are not plain `nn.Linear`s."""
        if not self.plain_generators():
            return None
        with torch.no_grad():
            weight, bias = self.padded_generator()
            gates = torch.softmax(self.kernel_gate, dim=0)

        def kernels(inputs: torch.Tensor) -> torch.Tensor:
            batch, length, _ = inputs.shape
            logits = nn.functional.linear(inputs, weight, bias)
            cells = logits.view(batch, length, self.num_heads, self.max_kernel_size, len(self.kernel_sizes))
            return torch.matmul(torch.softmax(cells, dim=-2), gates)  # Eq. 6 per cell, Eq. 7 across them

        def forward(*args, **kwargs) -> torch.Tensor:
            band_max_length = self.band_max_length
            self.kernels = kernels
            if not self.is_causal:
                self.band_max_length = 0
            try:
                return type(self).forward(self, *args, **kwargs)
            finally:
                self.band_max_length = band_max_length
                del self.kernels

        return forward

    def padded_generator(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The generators as one product whose logits come out as `[H, max_k, cells]` per position: each cell's rows
        of W_k at its own taps (`cell_taps`), zero rows with a bias of -1e9 at the taps a narrower cell does not have
        (after the softmax exactly 0, as the -inf of `cell_probabilities`), zero bias elsewhere. Returns the weight
        `[H·max_k·cells, C]` and the bias."""
        heads, width, cells = self.num_heads, self.max_kernel_size, len(self.kernel_sizes)
        generator_weight = self.generator_weight()
        weight = generator_weight.new_zeros(heads, width, cells, generator_weight.shape[-1])
        bias = generator_weight.new_full((heads, width, cells), -1e9)
        for cell, (size, rows) in enumerate(
            zip(self.kernel_sizes, generator_weight.split([heads * k for k in self.kernel_sizes]))
        ):
            taps = self.cell_taps(size, width, self.is_causal)
            weight[:, taps, cell] = rows.view(heads, size, -1)
            bias[:, taps, cell] = 0.0
        return weight.flatten(0, 2), bias.flatten()

    def trains_in_one_function(self, length: int) -> bool:
        """Whether a forward of `length` positions without a cache takes `training_convolution`: in training with
        grad enabled, in the band form's range and with plain generators (evaluation, decoding and the export keep
        the computation above)."""
        return self.training and torch.is_grad_enabled() and length <= self.band_max_length and self.plain_generators()

    def training_convolution(self, inputs: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        """The training forward of a sequence: `kernels` and `band_convolution` (the same outputs, the same
        DropConnect draws) as one `PrimeConvolutionFunction`, whose backward is written out. Returns the heads
        `[B, T, H, C/H]` as the band product lays them out (a transposed view, not copied to `[B, T, C]` here: a caller
        that concatenates them reads them where they lie)."""
        heads = PrimeConvolutionFunction.apply(
            inputs,
            self.generator_weight(),
            torch.softmax(self.kernel_gate, dim=0),
            padding_mask,
            self.num_heads,
            tuple(self.kernel_sizes),
            self.is_causal,
            self.weight_dropout,
        )
        return heads.transpose(1, 2)


class PrimeConvolutionFunction(torch.autograd.Function):
    """Prime's dynamic convolution in training (Eq. 5-7, the band form of `PrimeDynamicConvolution`), with its
    backward written out: the same forward operators (the same outputs, the same DropConnect draws), and autograd's
    gradients up to rounding in fewer operators (on a GPU, kernel launches). Autograd's backward retraces the skew
    (the band's slice and pad gradients and a layout copy of the taps' gradient), the window's padding, DropConnect
    and the cells' layout, and sums the input's two gradients; here, with `g` the output's gradient `[B, H, T, C/H]`:

    * the band's gradient g · windowᵀ holds each tap's gradient on a diagonal (row t's tap j at column t + j), read
      as a strided view, and the window's gradient is bandᵀ · g, its unpadded rows (masked) the input's share;
    * with the taps Σ_c gate_c · drop_c (DropConnect's drop_c = p_c ⊙ mask / (1 - rate)), gate_c's gradient is
      Σ drop_c ⊙ ∂taps, and p_c ⊙ ∂p_c = gate_c · drop_c ⊙ ∂taps =: y_c, so the softmax's backward (Eq. 6) is
      ∂logits_c = y_c - p_c · Σ_taps y_c, each cell's in the generators' layout;
    * the input's gradient is ∂logits · W plus its window share, in one product and one in-place sum.
    """

    @staticmethod
    def forward(ctx, inputs, weight, gates, padding_mask, heads, kernel_sizes, is_causal, weight_dropout):
        batch, length, channels = inputs.shape
        width = max(kernel_sizes)
        logits = nn.functional.linear(inputs, weight)
        probabilities = PrimeDynamicConvolution.cell_probabilities(logits, heads, kernel_sizes, is_causal)
        dropped = dropout_if_training(probabilities, weight_dropout, True)  # DropConnect: the draws of `kernels`
        taps = torch.matmul(dropped, gates.to(dropped.dtype))
        if padding_mask is not None:
            inputs_read = inputs * padding_mask.unsqueeze(-1)
        else:
            inputs_read = inputs
        window = PrimeDynamicConvolution.padded_window(inputs_read, heads, width, is_causal)
        band = PrimeDynamicConvolution.band_matrix(taps)
        ctx.save_for_backward(inputs, weight, gates, padding_mask, probabilities, dropped, window, band)
        ctx.layout = (heads, kernel_sizes, is_causal)
        return torch.matmul(band, window)  # [B, H, T, C/H]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        inputs, weight, gates, padding_mask, probabilities, dropped, window, band = ctx.saved_tensors
        heads, kernel_sizes, is_causal = ctx.layout
        batch, length, channels = inputs.shape
        width = max(kernel_sizes)
        padded_length = length + width - 1
        grad = grad_output.contiguous()  # [B, H, T, C/H], in the layout of the band products
        window, band = window.to(grad.dtype), band.to(grad.dtype)  # under autocast: the dtype the products ran in
        grad_band = torch.matmul(grad, window.transpose(-1, -2))  # [B, H, T, T+K-1]
        diagonals = (heads * length * padded_length, length * padded_length, padded_length + 1, 1)
        grad_taps = grad_band.as_strided((batch, heads, length, width), diagonals).transpose(1, 2)  # [B, T, H, K]
        grad_window = torch.matmul(band.transpose(-1, -2), grad)  # [B, H, T+K-1, C/H]

        # Eq. 7 and 6 backwards: the gates' gradient, then the softmax's into the generators' layout
        scaled = dropped * grad_taps.unsqueeze(-1)  # [B, T, H, K, cells]
        grad_gates = scaled.sum(dim=(0, 1, 2, 3))
        scaled = scaled * gates  # y = p ⊙ ∂p
        total = scaled.sum(dim=-2, keepdim=True)
        grad_cells = []
        for cell, size in enumerate(kernel_sizes):
            taps = PrimeDynamicConvolution.cell_taps(size, width, is_causal)
            grad_cell = torch.addcmul(
                scaled[..., taps, cell], probabilities[..., taps, cell], total[..., cell], value=-1
            )
            grad_cells.append(grad_cell.view(batch * length, heads * size))
        grad_logits = torch.cat(grad_cells, dim=-1) if len(grad_cells) > 1 else grad_cells[0]
        grad_inputs = torch.mm(grad_logits, weight.to(grad_logits.dtype)).view(batch, length, heads, -1)
        before = width - 1 if is_causal else width // 2  # the zeros `padded_window` put before the positions
        grad_read = grad_window[:, :, before : before + length].transpose(1, 2)
        if padding_mask is None:
            grad_inputs.add_(grad_read)
        else:
            grad_inputs.addcmul_(grad_read, padding_mask[:, :, None, None])
        grad_weight = torch.mm(grad_logits.t(), inputs.reshape(-1, channels).to(grad_logits.dtype))
        return (
            grad_inputs.view(batch, length, channels).to(inputs.dtype),
            grad_weight.to(weight.dtype),
            grad_gates.to(gates.dtype),
            None,
            None,
            None,
            None,
            None,
        )


class PrimeSelfAttention(MTAttention):
    """Self-attention with the convolution on its value projection (Shared Projection, Eq. 2 and 5 with
    W_1^C = W_1^A). Returns the branches (attention, convolution) *before* the output projection, which the layer
    applies to their concatenation as one Linear(2d -> d) (= A W_2^A + C W_2^C, the authors' single output matrix);
    with fused projections the layer concatenates them with its other branches in one go. Asked for the concatenation
    (`concatenate`), a training forward returns [A, C] itself, as one branch."""

    def __init__(self, config: UnifiedTransformerConfig, num_heads: int, is_causal: bool, layer_idx: int):
        super().__init__(config, num_heads, is_causal=is_causal, layer_idx=layer_idx)
        self.input_dropout = config.input_dropout
        self.conv = PrimeDynamicConvolution(config, num_heads, is_causal) if config.use_convolution else None
        depth = layer_depth(layer_idx)
        # Separate Projection ablation (Table 6): the convolution gets its own input projection W_1^C.
        self.conv_proj = (
            with_role(nn.Linear(config.d_model, config.d_model), MatrixRole("attention_input", "self", depth))
            if config.use_convolution and not config.shared_projection
            else None
        )
        width = 2 * config.d_model if config.use_convolution else config.d_model
        self.out_proj = with_role(nn.Linear(width, config.d_model), MatrixRole("attention_output", "self", depth))

    def extra_repr(self) -> str:
        projection = "none" if self.conv is None else "separate" if self.conv_proj is not None else "shared"
        return f"{super().extra_repr()}, convolution_projection={projection}"

    @property
    def input_projections(self) -> list[nn.Linear]:
        return [self.q_proj, self.k_proj, self.v_proj] + ([self.conv_proj] if self.conv_proj is not None else [])

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        padding_mask: torch.Tensor | None = None,
        projections: tuple[torch.Tensor, ...] | None = None,
        concatenate: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        """`concatenate=True` asks for the branches' concatenation [A, C], which a training forward returns as one
        branch (the convolution's heads read where they lie); the branches themselves otherwise."""
        if projections is None:
            inputs = dropout_if_training(hidden_states, self.input_dropout, self.training)
            projections = tuple(projection(inputs) for projection in self.input_projections)
        query, key, value = projections[:3]
        # Deviation: pads are zeroed before the convolution (as in the LightConv block of Wu et al. 2019), so that a
        # padded batch decodes like its sentences alone, unless the config asks for the authors' unmasked behaviour.
        padding_mask = padding_mask if self.conv is not None and self.config.mask_padding_before_conv else None
        reads_values = self.conv is not None and self.conv_proj is None  # Eq. (5), shared projection
        cached_value = value
        if reads_values and cache is not None and padding_mask is not None:
            # With a cache, the convolution reads its window back from the cached values: zero the padded positions
            # there. Attention gives a padded key zero weight, so no attention output changes.
            cached_value = value * padding_mask.unsqueeze(-1).to(value.dtype)
        keys, values = self.key_values(None, cache, is_cross_attention=False, projected=(key, cached_value))
        attention, weights = self.attend(query, keys, values, attention_mask, **kwargs)  # Eq. (2)
        if self.conv is None:
            return (attention,), weights
        if concatenate and reads_values and cache is None and self.conv.trains_in_one_function(value.shape[1]):
            # The convolution's heads `[B, T, H, C/H]` as its band product lays them out, concatenated with the
            # attention's heads where they lie: the concatenation the output projection reads, without a copy of the
            # convolution's output into `[B, T, C]` first.
            heads = self.conv.training_convolution(value, padding_mask)
            return (torch.cat([attention.view_as(heads), heads], dim=2).flatten(2),), weights
        if reads_values:
            convolution = self.conv(value, padding_mask, cached_values=values if cache is not None else None)
        else:  # Separate Projection: the convolution's input is not in the attention cache, it keeps its own window
            cache_layer = cache_layer_for(cache, self.layer_idx)
            convolution = self.conv(projections[3], padding_mask, cache_layer=cache_layer)
        return (attention, convolution), weights


class UnifiedTransformerPrimeLayer(GradientCheckpointingLayer):
    """One Prime unit (Eq. 4): h' = LN(h + Drop(S) [+ Drop(Z)] + Drop(F)), with S the attention+convolution branch,
    Z the decoder's parallel cross-attention and F the FFN, all reading h."""

    is_decoder = False

    def __init__(self, config: UnifiedTransformerConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.dropout = config.dropout
        self.activation_dropout = config.activation_dropout
        heads = config.decoder_attention_heads if self.is_decoder else config.encoder_attention_heads
        ffn_dim = config.decoder_ffn_dim if self.is_decoder else config.encoder_ffn_dim
        self.self_attn = PrimeSelfAttention(config, heads, is_causal=self.is_decoder, layer_idx=layer_idx)
        self.encoder_attn = (
            MTAttention(config, heads, layer_idx=layer_idx, is_cross_attention=True) if self.is_decoder else None
        )
        ffn = MatrixRole("ffn", depth=layer_depth(layer_idx))
        self.fc1 = with_role(nn.Linear(config.d_model, ffn_dim), ffn)
        self.fc2 = with_role(nn.Linear(ffn_dim, config.d_model), ffn)
        self.activation_fn = ACT2FN[config.activation_function]
        self.layer_norm = nn.LayerNorm(config.d_model)
        self._fused = None

    def extra_repr(self) -> str:
        branches = ["attention", "convolution", "cross-attention", "FFN"]
        if self.self_attn.conv is None:
            branches.remove("convolution")
        if not self.is_decoder:
            branches.remove("cross-attention")
        return f"{' + '.join(branches)} in parallel, post-norm (one LayerNorm)"

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """The layer's output; the arguments are those of `forward_with_weights`."""
        return self.forward_with_weights(hidden_states, *args, **kwargs)[0]

    def forward_with_weights(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The layer's output and its self-attention map `[B, H, T, S]` (None where the attention implementation
        does not return one): what a module that runs several Prime layers side by side (MUTE's units) reports."""
        if self.is_decoder and encoder_hidden_states is None:
            raise ValueError("The Unified Transformer decoder needs `encoder_hidden_states`")
        # The projections one by one, or stacked into one product (the speed paths below, same outputs).
        stacked_inputs, stacked_outputs = self.projections_for_forward()
        self_projections, cross_query, ffn_input = self.project_inputs(hidden_states, stacked_inputs)

        # S: attention and convolution of the shared value projection (Eq. 2, 5-7), or attention alone (Eq. 1)
        mixed, weights = self.self_attn(
            hidden_states,
            attention_mask=attention_mask,
            cache=cache,
            padding_mask=padding_mask,
            projections=self_projections,
            concatenate=stacked_outputs is None,  # the stacked output projection concatenates every branch in one go
            **kwargs,
        )
        # F: the FFN's hidden layer (Eq. 3)
        ffn_hidden = self.activation_fn(ffn_input)
        ffn_hidden = dropout_if_training(ffn_hidden, self.activation_dropout, self.training)
        # Z: the decoder's cross-attention, in parallel with S and F (Eq. 4)
        cross = None
        if self.is_decoder:
            cross, _ = self.encoder_attn(
                hidden_states,
                key_value_states=encoder_hidden_states,
                cache=cache,
                attention_mask=encoder_attention_mask,
                query_states=cross_query,
                apply_output_projection=stacked_outputs is None,
                **kwargs,
            )

        if stacked_outputs is not None:
            update = self.project_outputs_stacked(mixed, cross, ffn_hidden, stacked_outputs)
        else:
            mixed = torch.cat(mixed, dim=-1) if len(mixed) > 1 else mixed[0]
            update = dropout_if_training(self.self_attn.out_proj(mixed), self.dropout, self.training)
            update = update + dropout_if_training(self.fc2(ffn_hidden), self.dropout, self.training)
            if cross is not None:
                update = update + dropout_if_training(cross, self.dropout, self.training)
        return self.layer_norm(hidden_states + update), weights  # Eq. (1)/(4): one post-LayerNorm per layer

    # --------------------------------------------------------------- stacked and fused projections (§3.3.1)
    # Speed paths with the same outputs: every input projection of the layer as one product (W^Enc) and every output
    # projection as another (W^Dec). In training they are stacked from the live weights at each forward; for inference
    # `generate()` fuses them at its start and unfuses them at its end when `config.fuse_projections_for_inference`
    # (`MTForConditionalGeneration.generate`), and a caller can fuse explicitly for other inference forwards.

    def _input_linears(self) -> list[nn.Linear]:
        cross = [self.encoder_attn.q_proj] if self.is_decoder else []
        return self.self_attn.input_projections + cross + [self.fc1]

    def _output_linears(self) -> list[nn.Linear]:
        cross = [self.encoder_attn.out_proj] if self.is_decoder else []
        return [self.self_attn.out_proj] + cross + [self.fc2]

    def stacked_projections(self, sum_output_biases: bool = True, outputs: bool = True) -> tuple | None:
        """W^Enc (all input projections stacked), its bias, W^Dec (all output projections side by side), the output
        biases to add (§3.3.1), and the input projections' widths, built from the current weights (differentiable when
        grad is enabled); None when a projection is not a plain `nn.Linear` (e.g. a quantised one, or one with a LoRA
        adapter). The output biases come as one summed bias, or with `sum_output_biases=False` as the biases
        themselves, each added on its own: what training needs, since the gradients autograd hands to the parts of one
        sum can share memory, and accumulating the next backward into them in place would count each several times.
        With `outputs=False` only the input projections are stacked (W^Dec and its biases None)."""
        inputs = self._input_linears()
        linears = inputs + (self._output_linears() if outputs else [])
        if any(type(linear) is not nn.Linear for linear in linears):
            return None
        w_in = torch.cat([linear.weight for linear in inputs], dim=0)
        b_in = torch.cat([linear.bias for linear in inputs], dim=0)
        sizes = [linear.out_features for linear in inputs]
        if not outputs:
            return w_in, b_in, None, None, sizes
        output_biases = [linear.bias for linear in self._output_linears()]
        w_out = torch.cat([linear.weight for linear in self._output_linears()], dim=1)
        b_out = (torch.stack(output_biases).sum(0),) if sum_output_biases else tuple(output_biases)
        return w_in, b_in, w_out, b_out, sizes

    def fuse_projections(self) -> bool:
        """Builds W^Enc and W^Dec (`stacked_projections`) from the current weights for inference forwards to use.
        Explicit: nothing is cached behind the caller's back, so a module swap (quantisation, a merged LoRA, pruning)
        is never read through stale tensors. Returns False, and fuses nothing, when a projection is not a plain
        `nn.Linear`."""
        with torch.no_grad():
            self._fused = self.stacked_projections()
        return self._fused is not None

    def unfuse_projections(self) -> None:
        """Drops the fused matrices: forwards use the projections themselves again."""
        self._fused = None

    def train(self, mode: bool = True):
        if mode:
            self._fused = None  # training changes the weights: fused copies would go stale
        return super().train(mode)

    def projections_for_forward(self) -> tuple[tuple | None, tuple | None]:
        """The stacked input projections `(W^Enc, b^Enc, widths)` and output projections `(W^Dec, output biases)`
        this forward computes with, each None for the projections one by one. An inference forward after
        `fuse_projections` uses the fused copies. In training the stack of the live weights is rebuilt at each
        forward: the inputs' whenever no dropout sits between the layer input and the projections (`input_dropout`
        at 0; one wide product in and one gradient out instead of one per projection, and the input's gradient
        without one sum per projection), the outputs' only when the branches' `dropout` is 0 too (each branch is
        dropped after its own output projection)."""
        if self._fused is not None and not self.training and not torch.is_grad_enabled():
            w_in, b_in, w_out, b_out, sizes = self._fused
            return (w_in, b_in, sizes), (w_out, b_out)
        if not self.training or self.self_attn.input_dropout != 0:
            return None, None
        stacked = self.stacked_projections(sum_output_biases=False, outputs=self.dropout == 0)
        if stacked is None:
            return None, None
        w_in, b_in, w_out, b_out, sizes = stacked
        return (w_in, b_in, sizes), ((w_out, b_out) if w_out is not None else None)

    def project_inputs(
        self, hidden_states: torch.Tensor, stacked_inputs: tuple | None
    ) -> tuple[tuple[torch.Tensor, ...] | None, torch.Tensor | None, torch.Tensor]:
        """The self-attention's input projections (None: it projects them itself), the cross-attention's query (None:
        it projects it itself) and the FFN's first projection, from one stacked product when `stacked_inputs` is
        given."""
        if stacked_inputs is None:
            return None, None, self.fc1(hidden_states)
        w_in, b_in, sizes = stacked_inputs
        projections = nn.functional.linear(hidden_states, w_in, b_in).split(sizes, dim=-1)
        num_self = len(self.self_attn.input_projections)
        return projections[:num_self], projections[num_self], projections[-1]

    def project_outputs_stacked(
        self,
        mixed: tuple[torch.Tensor, ...],
        cross: torch.Tensor | None,
        ffn_hidden: torch.Tensor,
        stacked_outputs: tuple,
    ) -> torch.Tensor:
        """The sum of the branches' output projections as one product over their concatenation (W^Dec), plus the
        output biases (`stacked_outputs`: W^Dec and the biases to add; only without dropout on the branches)."""
        w_out, b_out = stacked_outputs
        branches = [*mixed] + ([cross] if cross is not None else []) + [ffn_hidden]
        update = nn.functional.linear(torch.cat(branches, dim=-1), w_out, b_out[0])
        for bias in b_out[1:]:
            update = update + bias
        return update


class UnifiedTransformerEncoderLayer(UnifiedTransformerPrimeLayer):
    is_decoder = False


class UnifiedTransformerDecoderLayer(UnifiedTransformerPrimeLayer):
    is_decoder = True


class UnifiedTransformerPreTrainedModel(MTPreTrainedModel):
    config: UnifiedTransformerConfig
    _no_split_modules = ["UnifiedTransformerEncoderLayer", "UnifiedTransformerDecoderLayer"]


class UnifiedTransformerEncoder(UnifiedTransformerPreTrainedModel, MTEncoder):
    _can_record_outputs = {
        "hidden_states": EncoderHiddenStates(UnifiedTransformerEncoderLayer),
        "attentions": PrimeSelfAttention,
    }

    def build_layer(self, config: UnifiedTransformerConfig, layer_idx: int) -> nn.Module:
        return UnifiedTransformerEncoderLayer(config, layer_idx)


class UnifiedTransformerDecoder(UnifiedTransformerPreTrainedModel, MTDecoder):
    _can_record_outputs = {
        "hidden_states": UnifiedTransformerDecoderLayer,
        "attentions": OutputRecorder(PrimeSelfAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MTAttention, index=1, layer_name="encoder_attn"),
    }
    stacks_cross_attention_projections = True

    def build_layer(self, config: UnifiedTransformerConfig, layer_idx: int) -> nn.Module:
        return UnifiedTransformerDecoderLayer(config, layer_idx)


class UnifiedTransformerModel(UnifiedTransformerPreTrainedModel, MTModel):
    encoder_class = UnifiedTransformerEncoder
    decoder_class = UnifiedTransformerDecoder


class UnifiedTransformerForConditionalGeneration(
    UnifiedTransformerPreTrainedModel, MTForConditionalGeneration, GenerationMixin
):
    base_model_class = UnifiedTransformerModel


def prime_layer_config(config, spec: dict) -> LayerConfig:
    """The config a Prime layer composed into another architecture reads: the model's config with the spec's Prime
    options (`PRIME_LAYER_OPTIONS`: a Multi-Encoder branch, the Multi-Pass `encoder_layer`) and the Unified
    Transformer's defaults for the rest (`PRIME_LAYER_FIXED`)."""
    options = {name: copy.deepcopy(spec[name]) for name in PRIME_LAYER_OPTIONS}
    return LayerConfig(config, **options, **PRIME_LAYER_FIXED)


__all__ = [
    "UnifiedTransformerPreTrainedModel",
    "UnifiedTransformerModel",
    "UnifiedTransformerForConditionalGeneration",
]
