# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The module substitutions the ONNX export traces under (as optimum's `exporters/onnx/model_patcher.py`): what
`onnx_export.py` puts in place of, or around, a model's own modules so that `torch.onnx.export` writes the graphs that
ONNX Runtime runs, each undone when its block ends; the model computes the same function throughout.

* `ExportEncoder` and `ExportDecoderStep`: the two graphs' forwards, the encoder with every decoder layer's
  cross-attention keys and values (`cross_attentions`), and one decoding step with the cache as flat tensors (named by
  `onnx_format.CacheLayout`), rebuilt as the `EncoderDecoderCache` of `StatefulDecoderCacheLayer`s the model reads;
* `exportable(model)`: the forwards that modules declare for export (`onnx_export_forward()`);
* `eager_attention(model)`: attention traced as the eager path writes it;
* `step_attentions(model)`: the step graph's attentions as ONNX Runtime's fused `com.microsoft.MultiHeadAttention`
  (`multi_head_attention`), a sentence's beams attending its cross-attention keys and values together
  (`grouped_cross_attention`), the step's one query over the cached keys (`step_self_attention`).

The exporter imports this module; it imports nothing of the exporter or the runtime.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from ..cache_mt import StatefulDecoderCacheLayer
from .onnx_format import CacheLayout


def cross_attentions(model) -> list[nn.Module]:
    """The cross-attention of every decoder layer (`layer.encoder_attn` in every architecture of the package)."""
    modules = []
    for i, layer in enumerate(model.get_decoder().layers):
        attention = getattr(layer, "encoder_attn", None)
        if attention is None or not hasattr(attention, "key_values"):
            raise ValueError(
                f"{type(model).__name__}: decoder layer {i} ({type(layer).__name__}) has no `encoder_attn` "
                "cross-attention whose keys and values the encoder graph could compute"
            )
        modules.append(attention)
    return modules


@contextlib.contextmanager
def exportable(model):
    """While exporting, every module that provides `onnx_export_forward()` runs the forward it returns (the Multi-
    Encoder's LSTM branches unpacked, its FNet mixing padded before the transform, MUTE's AutoShuffle matrix as a
    constant, Prime's convolution with its kernels from one padded product and, in the encoder, over sliding windows
    at every length): the same function of the inputs, in a form the exporter translates, or in fewer graph nodes.
    The modules declare it themselves, so a model loaded with its own copy of the modeling code (`trust_remote_code`)
    is covered too. The encoder's export and the decoder step's both run under it."""
    patched = []
    for module in model.modules():
        provider = getattr(module, "onnx_export_forward", None)
        forward = provider() if callable(provider) else None
        if forward is not None:
            module.forward = forward
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


@contextlib.contextmanager
def eager_attention(model):
    """Traces attention as the eager path writes it (`query @ key.transpose(2, 3)` on 4-D tensors), whatever the
    model runs in PyTorch: the same result, but ONNX Runtime folds that transpose into its matmul, whereas the
    exporter's SDPA decomposition transposes the flattened keys as a separate node at every decoding step (a third of
    an int8 step's time for Prime `small` at batch 16 with beam 4, on 2 cores)."""
    implementation = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(implementation)


class ExportEncoder(nn.Module):
    """`input_ids, attention_mask -> encoder_hidden_states, cross.0.key, cross.0.value, ...`."""

    def __init__(self, model, encoder_kwargs: dict):
        super().__init__()
        self.encoder = model.get_encoder()
        self.cross_attentions = nn.ModuleList(cross_attentions(model))
        self.encoder_kwargs = encoder_kwargs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **self.encoder_kwargs)
        states = states.last_hidden_state
        cross = []
        for attention in self.cross_attentions:
            cross += attention.key_values(states, None, is_cross_attention=True)
        return (states, *cross)


def multi_head_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, attention, key_mask=None):
    """ONNX Runtime's fused attention operator, `com.microsoft.MultiHeadAttention`, as one node of the exported graph:
    queries `[B, T, H * d_h]` (projected, heads side by side) over keys and values `[B, H, S, d_h]` (the layout the
    cache keeps) -> the heads' outputs side by side, `[B, T, H * d_h]`. The arithmetic of `MTAttention.attend`'s eager
    path: scores scaled by `attention.scaling`, masked positions (`key_mask` `[B, S]` int32, 0 where masked) given
    float32's lowest value as the additive mask does, softmax, weighted values. One node instead of the head split and
    merge, the transposes, two matrix products, the scaling, the mask and the softmax that the exporter writes
    otherwise; only traced inside `torch.onnx.export`."""
    heads, value_dim = values.shape[1], values.shape[3]
    return torch.onnx.ops.symbolic(
        "com.microsoft::MultiHeadAttention",
        (query, keys, values, None, key_mask),
        dict(num_heads=heads, scale=float(attention.scaling), mask_filter_value=float(torch.finfo(torch.float32).min)),
        dtype=query.dtype,
        shape=(*query.shape[:-1], heads * value_dim),
        version=1,
    )


def grouped_cross_attention(attention: nn.Module):
    """The `attend` the step export traces for a decoder layer's cross-attention (an `MTAttention`, whatever layer
    calls it): its queries `[rows, T, d]` are the rows of `batch` sentences, `G = rows / batch` consecutive rows per
    sentence (the beams), and its keys and values `[batch, heads, source, head_dim]` are their sentence's. The G
    queries of a sentence are attended together, as `G * T` queries of one sentence (`[B, G * T, d]`), in one
    `multi_head_attention` node: per head one `[G, head_dim] x [head_dim, source]` product instead of G copies of the
    keys and values each read by one query, with nothing copied or reordered per beam. `attention_mask` is the
    additive source mask `[batch, 1, 1, source]` that `ExportDecoderStep` passes (0 where a position is kept)."""

    def attend(query, keys, values, attention_mask, **kwargs) -> tuple[torch.Tensor, None]:
        rows, length, width = query.shape  # rows = B * G
        sentences = keys.shape[0]
        key_mask = None
        if attention_mask is not None:
            key_mask = (attention_mask.reshape(sentences, -1) == 0).to(torch.int32)
        output = multi_head_attention(query.reshape(sentences, -1, width), keys, values, attention, key_mask)
        return output.reshape(rows, length, -1), None

    return attend


def step_self_attention(attention: nn.Module):
    """The `attend` the step export traces for a decoder self-attention whose `attend` is `MTAttention`'s own (plain
    scaled dot-product attention): the step's one query per row over the row's cached keys and values, in one
    `multi_head_attention` node. The causal mask is not read: a step's single position sees every cached one, so the
    mask is zero throughout (and its construction drops out of the graph)."""

    def attend(query, keys, values, attention_mask, **kwargs) -> tuple[torch.Tensor, None]:
        if query.shape[1] != 1:
            raise RuntimeError(f"the decoder step graph decodes one position per row, not {query.shape[1]}")
        return multi_head_attention(query, keys, values, attention), None

    return attend


def _plain_attend(module: nn.Module) -> bool:
    """Whether `module.attend` is `MTAttention`'s own (by name: a model loaded with `trust_remote_code` has its own
    copy of the class), which the fused forms above compute; a subclass that attends otherwise keeps its own."""
    attend = getattr(type(module), "attend", None)
    return attend is not None and attend.__qualname__ == "MTAttention.attend" and hasattr(module, "key_values")


@contextlib.contextmanager
def step_attentions(model):
    """While exporting the step, every decoder layer's cross-attention attends with `grouped_cross_attention`, and
    every causal self-attention of the decoder that attends as `MTAttention` does with `step_self_attention`."""
    cross = cross_attentions(model)
    patched = [(attention, grouped_cross_attention(attention)) for attention in cross]
    for module in model.get_decoder().modules():
        if getattr(module, "is_causal", False) and _plain_attend(module) and all(module is not c for c in cross):
            patched.append((module, step_self_attention(module)))
    for module, attend in patched:
        module.attend = attend
    try:
        yield
    finally:
        for module, _ in patched:
            del module.attend


def _set_cache_length(layer: StatefulDecoderCacheLayer, length) -> None:
    """Makes `layer.get_seq_length()` return `length` (the symbolic length of `cache_positions` while exporting):
    the layer's own rule reads the keys' length when it is positive, which the exporter would have to branch on."""
    layer.tokens_seen = length
    layer.get_seq_length = lambda: layer.tokens_seen


class ExportDecoderStep(nn.Module):
    """One decoding step with the cache as flat tensors (`onnx_export`'s module docstring has the names and shapes).
    The cache is rebuilt from them as the `EncoderDecoderCache` of `StatefulDecoderCacheLayer`s that the model reads in
    PyTorch, so the step runs the model's own code."""

    def __init__(self, model, layout: CacheLayout):
        super().__init__()
        self.model = model
        self.layout = layout

    def build_cache(
        self, rows, past_length, cross: list[torch.Tensor], cache: list[torch.Tensor]
    ) -> EncoderDecoderCache:
        config = self.model.config
        self_cache, cross_cache = DynamicCache(config=config), DynamicCache(config=config)
        flat = iter(cache)
        for i, (spec, layer) in enumerate(zip(self.layout.layers, self_cache.layers)):
            if spec.keys:
                layer.keys, layer.values = next(flat), next(flat)
            else:
                empty = cross[0].new_zeros(rows, spec.heads, 0, spec.head_dim)
                layer.keys, layer.values = empty, empty.clone()
            layer.is_initialized, layer.device = True, cross[0].device
            layer.states = {name: next(flat) for name in spec.states}
            _set_cache_length(layer, past_length)
            cross_layer = cross_cache.layers[i]
            cross_layer.keys, cross_layer.values = cross[2 * i], cross[2 * i + 1]
            cross_layer.is_initialized, cross_layer.device = True, cross[0].device
        encoder_decoder = EncoderDecoderCache(self_cache, cross_cache)
        encoder_decoder.is_updated = dict.fromkeys(range(len(self.layout.layers)), True)
        return encoder_decoder

    def forward(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_attention_mask: torch.Tensor,
        cache_positions: torch.Tensor,
        *flat: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        num_cross = 2 * len(self.layout.layers)
        cross, past = list(flat[:num_cross]), list(flat[num_cross:])
        cache = self.build_cache(decoder_input_ids.shape[0], cache_positions.shape[0], cross, past)
        # The decoder reads the encoder output only through the cross-attention keys/values given here (a placeholder
        # stands in for it), and the source mask only in the cross-attentions, which take it per sentence: additive,
        # `[batch, 1, 1, source]` (a 4-D mask goes to the layers as it is).
        batch, source = encoder_attention_mask.shape
        placeholder = cross[0].new_zeros(batch, source, self.model.config.d_model)
        dtype = cross[0].dtype
        source_mask = (1.0 - encoder_attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        outputs = self.model(
            attention_mask=source_mask,
            encoder_outputs=(placeholder,),
            decoder_input_ids=decoder_input_ids,
            cache=cache,
            use_cache=True,
        )
        present = []
        for spec, layer in zip(self.layout.layers, cache.self_attention_cache.layers):
            if spec.keys:
                present += [layer.keys, layer.values]
            present += [layer.states[name] for name in spec.states]
        # `[rows, 1, vocab]` -> `[rows, vocab]` as a view (a `Squeeze`), not a copy of the logits (`[:, -1]`'s `Gather`)
        return (outputs.logits.squeeze(1), *present)
