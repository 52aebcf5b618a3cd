# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Per-layer decoder cache that holds, besides the self-attention keys/values, the recurrent state of
non-attention sublayers: convolution windows, running sums and per-row counts.

`generate()` builds `EncoderDecoderCache(DynamicCache(config=...), DynamicCache(config=...))`; `DynamicCache` maps
each entry of `config.layer_types` through transformers' `DYNAMIC_LAYER_TYPE_MAPPING`, where the `_layer_type`
class attribute below registers this class on import (`transformers.cache_utils`). Beam search calls
`reorder_cache(beam_idx)` on every layer, so all state lives in tensors whose first dimension is the batch.
"""

import torch
from transformers.cache_utils import DynamicLayer

from .configuration_mt_common import STATEFUL_LAYER_TYPE


class StatefulDecoderCacheLayer(DynamicLayer):
    """`DynamicLayer` (self-attention keys/values) plus named recurrent states.

    States are created lazily by the sublayers that need them:

    * `update_window(name, x, size)`: the last `size - 1` inputs of a causal convolution;
    * `update_running_sum(name, x, valid)`: a cumulative sum over time and a per-row count of valid positions
      (average attention, Zhang et al. 2019).

    A decoder layer without self-attention (average attention, merged attention) caches no keys or values. It calls
    `advance(states, num_heads)`, so that `get_seq_length()` still tells how many target positions were consumed
    (positions and masks depend on it), and so that its `keys` and `values` are inspectable like those of any
    transformers cache layer: tensors of the documented shape `[batch, heads, 0, head_dim]`, empty along the
    positions (nothing per position is stored; the O(1) state is in `states`). They follow beam reordering and batch
    expansion like the states.
    """

    _layer_type = STATEFUL_LAYER_TYPE
    is_croppable = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.states: dict[str, torch.Tensor] = {}
        self.tokens_seen = 0

    # ------------------------------------------------------------------ state updates
    def update_window(self, name: str, x: torch.Tensor, size: int) -> torch.Tensor:
        """Returns `[left context ; x]` of shape `[B, size - 1 + T, D]` for a causal convolution of width `size`,
        and keeps the last `size - 1` rows as the new context. The context starts as zeros, which is exactly the
        left zero padding of the full-sequence convolution."""
        context = self.states.get(name)
        if context is None:
            context = x.new_zeros(x.shape[0], size - 1, x.shape[-1])
        window = torch.cat([context, x], dim=1)
        self.states[name] = window[:, window.shape[1] - (size - 1) :]
        return window

    def update_running_sum(self, name: str, x: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cumulative sums of `x` (`[B, T, D]`) and of `valid` (`[B, T, 1]`, 1 for real tokens) continuing from the
        cached totals. Returns both cumulative tensors; keeps their last row."""
        total, count = self.states.get(name), self.states.get(name + ".count")
        sums, counts = x.cumsum(dim=1), valid.to(x.dtype).cumsum(dim=1)
        if total is not None:
            sums, counts = sums + total, counts + count
        self.states[name], self.states[name + ".count"] = sums[:, -1:], counts[:, -1:]
        return sums, counts

    def advance(self, states: torch.Tensor, num_heads: int) -> None:
        """Records the positions of `states` (`[B, T, d]`) for a layer that keeps no keys/values, whose `keys` and
        `values` become empty `[B, num_heads, 0, d / num_heads]` tensors on the first call."""
        if not self.is_initialized:
            batch, _, width = states.shape
            self.device = states.device
            self.keys = states.new_zeros(batch, num_heads, 0, width // num_heads)
            self.values = states.new_zeros(batch, num_heads, 0, width // num_heads)
            self.is_initialized = True
        self.tokens_seen += states.shape[1]

    # ------------------------------------------------------------------ bookkeeping used by generate()
    def get_seq_length(self) -> int:
        keys_length = self._keys_length()
        return keys_length if keys_length > 0 else self.tokens_seen

    def _keys_length(self) -> int:
        return super().get_seq_length()

    def _map_states(self, fn) -> None:
        self.states = {name: fn(state) for name, state in self.states.items()}

    def _map_keys_values(self, fn) -> None:
        # Applied whenever keys/values exist, also when they are empty along the positions (layers without keys): the
        # parent methods skip layers whose `get_seq_length()` is 0 and would count positions of a key-less layer.
        if self.is_initialized:
            self.keys, self.values = fn(self.keys), fn(self.values)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._map_keys_values(lambda t: t.index_select(0, beam_idx.to(t.device)))
        self._map_states(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map_keys_values(lambda t: t.repeat_interleave(repeats, dim=0))
        self._map_states(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map_keys_values(lambda t: t[indices, ...])
        self._map_states(lambda t: t[indices, ...])

    def offload(self):
        super().offload()
        self._map_states(lambda t: t.to("cpu", non_blocking=True))

    def prefetch(self):
        super().prefetch()
        if self.is_initialized:
            self._map_states(lambda t: t.to(self.device, non_blocking=True))

    def reset(self) -> None:
        super().reset()
        self.states = {}
        self.tokens_seen = 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise NotImplementedError(
                "hf_unified_mt decoder caches hold recurrent state (convolution windows, running sums) that cannot be "
                "rolled back; assisted / speculative decoding is not supported for these models"
            )
