# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The encoder-decoder core shared by every architecture of this package.

What lives here is what the five papers have in common: token embeddings and sinusoidal positions, multi-head
attention through transformers' attention interface with `EncoderDecoderCache`, the encoder/decoder stacks'
plumbing (masks, positions, caches, output recording), the base model with shared/tied embeddings, and the
conditional-generation head with its loss hook (`loss_terms`; the loss itself is `loss_mt.py`). An architecture file
defines its layers and builds them in the one `build_layer(config, layer_idx)` of its subclasses of `MTEncoder` /
`MTDecoder`.
"""

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    create_recurrent_attention_mask,
)
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, is_torchdynamo_compiling
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .cache_mt import StatefulDecoderCacheLayer
from .configuration_mt_common import STATEFUL_LAYER_TYPE, MTConfig
from .initialization_mt import (
    MatrixRole,
    attention_projections,
    embedding_,
    init_linear_,
    layer_depth,
    with_role,
)
from .loss_mt import translation_cross_entropy


# transformers 5.24 renamed the generation cache, as argument and as output field, from `past_key_values` to `cache`
# (5.23 knows only the old name; 5.24 warns on it). The models use the new name inside, take the old one as an alias at
# their entry points (`accepts_past_key_values`: 5.23's `generate()` passes it), and return the cache in the output
# field that the installed transformers declares.
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def accepts_past_key_values(forward: Callable) -> Callable:
    """Lets a model's `forward(..., cache=...)` also take the cache as `past_key_values=`, its name before transformers
    5.24. On releases that have the `cache` name the old one gives the FutureWarning that transformers' own models
    give (`deprecate_kwarg`); on 5.23, whose `generate()` passes `past_key_values`, it is silent."""

    @functools.wraps(forward)
    def forward_with_alias(self, *args, **kwargs):
        legacy = kwargs.pop("past_key_values", None)
        if legacy is not None:
            if kwargs.get("cache") is not None:
                raise ValueError("Got the cache twice, as `cache` and as `past_key_values`: pass it once, as `cache`")
            if CACHE_FIELD == "cache" and not is_torchdynamo_compiling():
                warnings.warn(
                    f"`past_key_values` is deprecated and will be removed in version 5.40.0 for "
                    f"`{type(self).__name__}.forward`. Use `cache` instead.",
                    FutureWarning,
                    stacklevel=2,
                )
            kwargs["cache"] = legacy
        return forward(self, *args, **kwargs)

    return forward_with_alias


def dropout_if_training(states: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`nn.functional.dropout(states, p, training)`, without dispatching an operator when not training (the ATen
    call returns its input then; in incremental decoding the skipped calls are a tenth of a step's operator calls)."""
    return nn.functional.dropout(states, p=p, training=True) if training else states


def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Shift label ids one position to the right, prepend `decoder_start_token_id`, and turn -100 into padding."""
    if pad_token_id is None:
        raise ValueError("`config.pad_token_id` has to be defined to build decoder inputs from labels")
    if decoder_start_token_id is None:
        raise ValueError("`config.decoder_start_token_id` has to be defined to build decoder inputs from labels")
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    shifted.masked_fill_(shifted == -100, pad_token_id)
    return shifted


def stacked_linear(linears) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The weights and biases of `linears`, stacked along their outputs from the current parameters
    (differentiable): one product computes every projection, and its backward one gradient for their common input.
    None when one of them is not a plain `nn.Linear` with a bias (a quantised one, a LoRA adapter), which then
    projects on its own."""
    if any(type(linear) is not nn.Linear or linear.bias is None for linear in linears):
        return None
    return torch.cat([linear.weight for linear in linears]), torch.cat([linear.bias for linear in linears])


class SinusoidalPositionalEmbedding(nn.Module):
    """Fixed sinusoidal positions (Vaswani et al. 2017), sines in the first half of the channels and cosines in
    the second (the fairseq / Marian layout). Computed on the fly: nothing to store, save or load."""

    def __init__(self, embedding_dim: int):
        super().__init__()
        self.embedding_dim = embedding_dim

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        half = self.embedding_dim // 2
        frequencies = torch.exp(
            torch.arange(half, device=position_ids.device, dtype=torch.float32)
            * -(math.log(10000.0) / max(half - 1, 1))
        )
        angles = position_ids.to(torch.float32).unsqueeze(-1) * frequencies
        embedding = torch.cat([angles.sin(), angles.cos()], dim=-1)
        if self.embedding_dim % 2 == 1:
            embedding = nn.functional.pad(embedding, (0, 1))
        return embedding.to(dtype)


class ScaledWordEmbedding(nn.Embedding):
    """Token embedding multiplied by `embed_scale` (sqrt(d_model) when `config.scale_embedding`)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None, embed_scale: float = 1.0):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids) * self.embed_scale


def token_and_position_embeddings(
    config: MTConfig, vocab_size: int
) -> tuple[ScaledWordEmbedding, SinusoidalPositionalEmbedding]:
    """The one embedding of every stack of the package (encoders, decoders, the Multi-Encoder's shared source
    embedding): tokens scaled by sqrt(d_model) when `config.scale_embedding`, plus fixed sinusoidal positions."""
    embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    tokens = ScaledWordEmbedding(vocab_size, config.d_model, config.pad_token_id, embed_scale)
    return tokens, SinusoidalPositionalEmbedding(config.d_model)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
):
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_weights = dropout_if_training(attn_weights, dropout, module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


class MTAttention(nn.Module):
    """Multi-head attention with separate query/key/value/output projections, dispatched through
    `ALL_ATTENTION_FUNCTIONS` (eager, sdpa, flex, flash). Self-attention keys/values are appended to the
    decoder cache; cross-attention keys/values are computed from the encoder output once per `generate()` call.

    Architectures whose sublayers need the projections separately (Prime's convolution reads the value
    projection) call `key_values` and `attend` directly. The projections are declared a self- or a cross-attention's
    (`is_cross_attention`) of the layer `layer_idx`, which is what the initialisation laws read."""

    def __init__(
        self,
        config: MTConfig,
        num_heads: int,
        is_causal: bool = False,
        layer_idx: int | None = None,
        is_cross_attention: bool = False,
    ):
        super().__init__()
        self.config = config
        self.embed_dim = config.d_model
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_causal = is_causal  # transformers' sdpa attention reads this attribute
        self.layer_idx = layer_idx
        attention = "cross" if is_cross_attention else "self"
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = attention_projections(
            self.embed_dim, attention, layer_idx
        )

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, head_dim={self.head_dim}, causal={self.is_causal}"

    def split_heads(self, states: torch.Tensor) -> torch.Tensor:
        """`[B, T, d]` -> `[B, H, T, d_h]`. For one position (a decoding step) a reshape: the same elements as the
        transpose, and one node fewer per projection in an exported step graph."""
        if states.shape[1] == 1:
            return states.reshape(-1, states.shape[-1] // self.head_dim, 1, self.head_dim)
        return states.view(*states.shape[:-1], -1, self.head_dim).transpose(1, 2)

    def key_values(
        self,
        states: torch.Tensor | None,
        cache: Cache | None,
        is_cross_attention: bool,
        projected: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values `[B, H, S, d_h]` for this step, read from or appended to the cache.

        `projected` passes already computed `(k_proj(states), v_proj(states))` (fused projections)."""
        stack = cache  # the cache of this attention's kind: self- or cross-attention
        if isinstance(cache, EncoderDecoderCache):
            stack = cache.cross_attention_cache if is_cross_attention else cache.self_attention_cache
            if is_cross_attention and cache.is_updated.get(self.layer_idx):
                layer = stack.layers[self.layer_idx]
                return layer.keys, layer.values
        if projected is None:
            projected = (self.k_proj(states), self.v_proj(states))
        keys, values = self.split_heads(projected[0]), self.split_heads(projected[1])
        if stack is not None:
            keys, values = stack.update(keys, values, self.layer_idx)
            if is_cross_attention and isinstance(cache, EncoderDecoderCache):
                cache.is_updated[self.layer_idx] = True
        return keys, values

    def attend(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Scaled dot-product attention of projected queries `[B, T, d]` over keys/values `[B, H, S, d_h]`.
        Returns the heads concatenated, `[B, T, d]` (before the output projection), and the weights."""
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            self.split_heads(query),
            keys,
            values,
            attention_mask,
            dropout=0.0 if not self.training else self.dropout,
            scaling=self.scaling,
            **kwargs,
        )
        return output.reshape(*query.shape[:-1], -1).contiguous(), weights

    def stacked_input_projections(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """[W_q; W_k; W_v] and [b_q; b_k; b_v], built from the current weights (differentiable): one product computes
        the three input projections of a self-attention, and its backward one gradient for the input instead of three
        and their sum. None when a projection is not a plain `nn.Linear` with a bias (a quantised one, a LoRA
        adapter), which then projects on its own."""
        return stacked_linear((self.q_proj, self.k_proj, self.v_proj))

    def self_projections_for_forward(
        self, cache: Cache | None, stacked: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The stacked input projections a self-attention forward computes with: `stacked` when the caller built them
        (a stack run several times with tied weights builds them once per forward), else, in a training forward
        without a cache, those of `stacked_input_projections`; None (one product per projection) in evaluation,
        generation and export, which keep the plain form."""
        if stacked is not None or not self.training or cache is not None:
            return stacked
        return self.stacked_input_projections()

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        query_states: torch.Tensor | None = None,
        apply_output_projection: bool = True,
        stacked_projections: tuple[torch.Tensor, torch.Tensor] | None = None,
        cross_attention_states: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`query_states` passes an already computed `q_proj(hidden_states)`, and `apply_output_projection=False`
        returns the concatenated heads, for layers that fuse their projections. A self-attention's training forward
        computes q, k and v as one product (`self_projections_for_forward`; `stacked_projections` passes the stacked
        weights built by the caller). `cross_attention_states` is this cross-attention's `(k_proj(H), v_proj(H))` of the
        encoder output H, which a decoder's training forward projects for all its layers at once
        (`MTDecoder.stacked_cross_attention_states`) and hands each layer its own."""
        is_cross_attention = key_value_states is not None
        stacked = None
        if not is_cross_attention and query_states is None:
            stacked = self.self_projections_for_forward(cache, stacked_projections)
        if stacked is not None:
            query_states, *projected = nn.functional.linear(hidden_states, *stacked).split(self.embed_dim, dim=-1)
            keys, values = self.key_values(None, cache, is_cross_attention, projected=tuple(projected))
        elif is_cross_attention and cross_attention_states is not None:
            keys, values = self.key_values(None, cache, is_cross_attention, projected=cross_attention_states)
        else:
            source = key_value_states if is_cross_attention else hidden_states
            keys, values = self.key_values(source, cache, is_cross_attention)
        if query_states is None:
            query_states = self.q_proj(hidden_states)
        output, weights = self.attend(query_states, keys, values, attention_mask, **kwargs)
        return (self.out_proj(output) if apply_output_projection else output), weights


class MTFeedForward(nn.Module):
    """Position-wise feed-forward network: fc2(dropout(act(fc1(x)))), in the layer `layer_idx` of its stack."""

    def __init__(self, config: MTConfig, ffn_dim: int, layer_idx: int | None):
        super().__init__()
        role = MatrixRole("ffn", depth=layer_depth(layer_idx))
        self.fc1 = with_role(nn.Linear(config.d_model, ffn_dim), role)
        self.fc2 = with_role(nn.Linear(ffn_dim, config.d_model), role)
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = dropout_if_training(hidden_states, self.activation_dropout, self.training)
        return self.fc2(hidden_states)


class ResidualSublayer(nn.Module):
    """Residual connection around a sublayer with post-norm, x <- LN(x + Drop(f(x))), or, with
    `config.normalize_before`, pre-norm, x <- x + Drop(f(LN(x)))."""

    def __init__(self, config: MTConfig):
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.d_model)
        self.pre_norm = config.normalize_before
        self.dropout = config.dropout

    def extra_repr(self) -> str:
        return f"{'pre' if self.pre_norm else 'post'}-norm, dropout={self.dropout}"

    def forward(self, hidden_states: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        inputs = self.layer_norm(hidden_states) if self.pre_norm else hidden_states
        output = hidden_states + dropout_if_training(sublayer(inputs), self.dropout, self.training)
        return output if self.pre_norm else self.layer_norm(output)


class MTEncoderLayer(GradientCheckpointingLayer):
    """Standard Transformer encoder layer (Vaswani et al. 2017): self-attention and FFN sublayers, post- or
    pre-norm. Architectures reuse it as is (MPT, the baselines) or as a branch (multi-encoder)."""

    def __init__(self, config: MTConfig, layer_idx: int | None = None):
        super().__init__()
        self.self_attn = MTAttention(config, config.encoder_attention_heads, layer_idx=layer_idx)
        self.self_attn_sublayer = ResidualSublayer(config)
        self.ffn = MTFeedForward(config, config.encoder_ffn_dim, layer_idx)
        self.ffn_sublayer = ResidualSublayer(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        hidden_states = self.self_attn_sublayer(
            hidden_states, lambda x: self.self_attn(x, attention_mask=attention_mask, **kwargs)[0]
        )
        return self.ffn_sublayer(hidden_states, self.ffn)


class MTDecoderLayer(GradientCheckpointingLayer):
    """Standard Transformer decoder layer: causal self-attention, cross-attention and FFN sublayers, post- or
    pre-norm. Self-attention keys/values live in the layer's `StatefulDecoderCacheLayer`."""

    def __init__(self, config: MTConfig, layer_idx: int | None = None):
        super().__init__()
        heads = config.decoder_attention_heads
        self.self_attn = MTAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_sublayer = ResidualSublayer(config)
        self.encoder_attn = MTAttention(config, heads, layer_idx=layer_idx, is_cross_attention=True)
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
        hidden_states = self.self_attn_sublayer(
            hidden_states,
            lambda x: self.self_attn(x, cache=cache, attention_mask=attention_mask, **kwargs)[0],
        )
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


class EncoderHiddenStates(list):
    """The `hidden_states` recorder(s) of an encoder. transformers resolves negative `output_hidden_states` indices with
    `config.num_hidden_layers` (here the decoder's layer count) unless the recorder names another config key; this
    names `num_encoder_hidden_layers`, and also does so for several recorders (transformers reads the key from the
    registered `hidden_states` entry, which is this list)."""

    num_hidden_layers_key = "num_encoder_hidden_layers"

    def __init__(self, *recorders: type[nn.Module] | OutputRecorder):
        super().__init__(recorders)


class LayerConfig:
    """The config a composed layer reads: the model's config, with the options of one part (e.g. a Multi-Encoder
    branch's Prime options) on top. Everything else, including the attention implementation chosen at run time,
    is read from the model's config as it is now."""

    def __init__(self, config: MTConfig, **options):
        self.__dict__["_config"] = config
        self.__dict__["_options"] = options

    def __getattr__(self, name: str):
        if name.startswith("__") or "_config" not in self.__dict__:  # copy/pickle probe an object being rebuilt
            raise AttributeError(name)
        options = self.__dict__["_options"]
        return options[name] if name in options else getattr(self.__dict__["_config"], name)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"LayerConfig is read-only: set `{name}` on the model's config")


def extra_output_fields(output_class: type, standard_class: type) -> tuple[str, ...]:
    """The fields `output_class` declares beyond `standard_class`'s (e.g. MUTE's per-unit maps, MPT's per-pass states).
    Read once when a model is built: `forward` only looks the names up, which `torch.compile` traces without a break.
    """
    standard = {field.name for field in dataclasses.fields(standard_class)}
    return tuple(field.name for field in dataclasses.fields(output_class) if field.name not in standard)


def check_sequence_length(length: int, config: MTConfig, what: str) -> None:
    """Inputs are never truncated silently: an empty or over-long sequence is an error."""
    if length == 0:
        raise ValueError(f"The {what} is empty (length 0); give at least one token")
    if length > config.max_position_embeddings:
        # generating fewer tokens shortens only the target
        advice = "shorten the target (or generate fewer tokens)" if what.startswith("target") else "shorten the input"
        raise ValueError(
            f"The {what} has {length} positions but the model supports at most "
            f"`max_position_embeddings`={config.max_position_embeddings}; {advice}"
        )


def is_tracing() -> bool:
    """Whether the forward is traced or compiled, where a tensor's values cannot be read on the host: torch.compile,
    torch.export and the ONNX exporter built on it, TorchScript tracing, CUDA graph capture."""
    return (
        torch.compiler.is_compiling()
        or torch.jit.is_tracing()
        or torch.onnx.is_in_onnx_export()
        or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    )


def check_right_padded(attention_mask: torch.Tensor | None, name: str = "attention_mask") -> None:
    """Refuses a `[B, T]` mask (nonzero = token) with a row that is not right-padded or holds no token, with a
    `ValueError` naming the rows (`padding_error`). Positions count from the first position of the sequence, so padding
    before a sentence would shift its positions and change its outputs; a row of padding alone has nothing to attend
    to. One host sync; skipped while tracing or compiling (`is_tracing`), so that a compiled step has no graph break."""
    if attention_mask is None or attention_mask.ndim != 2 or attention_mask.shape[1] == 0 or is_tracing():
        return
    real = attention_mask != 0
    # a right-padded row with a token starts with a token and never has a token right after padding
    wrong = ~real[:, 0] | (real[:, 1:] > real[:, :-1]).any(dim=1)
    if bool(wrong.any()):
        raise ValueError(padding_error(real.cpu().tolist(), name))


def padding_error(rows: list[list], name: str = "attention_mask") -> str:
    """The message for a mask (`rows`: one list per batch row, truthy = token) that `check_right_padded` refuses; the
    ONNX Runtime model gives the same one."""

    def listed(indices: list[int], singular: str, plural: str) -> str:
        """The rows with their verb, `row 1 is` / `rows 1, 3 are` (the first five rows named)."""
        if len(indices) == 1:
            return f"row {indices[0]} {singular}"
        more = f" and {len(indices) - 5} more" if len(indices) > 5 else ""
        return f"rows {', '.join(map(str, indices[:5]))}{more} {plural}"

    empty = [index for index, row in enumerate(rows) if not any(row)]
    left = [index for index, row in enumerate(rows) if any(row) and not all(row[: sum(map(bool, row))])]
    problems, fixes = [], []
    if left:
        problems.append(f"{listed(left, 'is', 'are')} left-padded (padding before a token)")
        fixes.append('pad on the right (`tokenizer.padding_side = "right"`)')
    if empty:
        problems.append(f"{listed(empty, 'has', 'have')} no token (only padding)")
        fixes.append("give every row at least one token (leave empty inputs out of the batch)")
    return (
        f"`{name}` {' and '.join(problems)}: the models take right-padded batches only (a row's tokens first, then "
        f"its padding), since positions count from the first position; {' and '.join(fixes)}"
    )


class MTPreTrainedModel(PreTrainedModel):
    config: MTConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _can_compile_fullgraph = False  # the decoder cache holds Python-side recurrent state
    _is_stateful = True  # generate() refuses assisted/speculative decoding, which would need to crop that state
    _skip_keys_device_placement = ["cache", "past_key_values"]
    # The loss divides by `num_items_in_batch` when the Trainer gives it (exact gradient accumulation), so trainers
    # need not recompute it from the logits (`TokenBatchSeq2SeqTrainer` reads this).
    loss_uses_num_items_in_batch = True

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        # transformers gates the whole `_tied_weights_keys` mapping on `config.tie_word_embeddings`; here sharing the
        # source/target embeddings and tying the output projection are independent options (as in Marian), so each
        # class computes its own mapping from the config.
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        self._tied_weights_keys = self._tied_weights_for_config()
        return dict(self._tied_weights_keys)

    def _tied_weights_for_config(self) -> dict[str, str]:
        return {}

    @property
    def _keys_to_ignore_on_save(self) -> set[str]:
        """Tied matrices are saved once, under their source: the targets (e.g. `lm_head.weight`) are absent from a
        checkpoint by design. Listing them as not saved is how transformers' Trainer recognises that: it re-ties
        instead of warning "There were missing keys in the checkpoint model loaded" when it loads the best or a
        resumed checkpoint with `load_state_dict`. Only targets that do share their source's tensor right now are
        listed, so that a projection untied after construction is still saved."""
        ignored = set(self.__dict__.get("_base_keys_to_ignore_on_save", ()))
        for target, source in (getattr(self, "all_tied_weights_keys", None) or {}).items():
            try:
                if self.get_parameter(target) is self.get_parameter(source):
                    ignored.add(target)
            except AttributeError:
                continue
        return ignored

    @_keys_to_ignore_on_save.setter
    def _keys_to_ignore_on_save(self, value) -> None:
        # (`PreTrainedModel.post_init` stores the set it read back; tied targets stay decided by the getter)
        tied_targets = set(getattr(self, "all_tied_weights_keys", None) or ())
        self.__dict__["_base_keys_to_ignore_on_save"] = set(value or ()) - tied_targets

    @torch.no_grad()
    def _init_weights(self, module):
        """The one initialisation hook of the package (`initialization_mt.py`): every `nn.Linear` by its declared role
        (`MatrixRole`: kind, self/cross attention, depth, declared where the module builds it) under `config.init_law`,
        with a zero bias; token embeddings N(0, d^-1/2) with a zero padding row (N(0, init_std²) under `"normal"`);
        unit LayerNorms; LSTMs as PyTorch draws them; and every other module with parameters of its own through its
        `init_own_parameters(config)` (a paper's own law, which it keeps wherever it is composed: Prime's kernel gate,
        MUTE's unit weights, the Multi-Encoder's expansion vectors and weight-normalised convolutions, the Multi-Pass
        connections; or `init_law` by the roles it names: MUTE's stacked unit matrices). transformers skips a module
        of remote code that holds no parameter directly, so `init_own_parameters` draws only the module's direct
        parameters, and a linear layer with a law of its own declares it in its role (`own_law`).

        transformers calls this on every module, children before parents, with `self` the nearest `PreTrainedModel`
        (here the encoder, the decoder or the head). A linear layer of the model without a declared role is an error
        (`declared_role`); one outside the model is the output projection that transformers' embedding resizing builds
        before it replaces `lm_head`, drawn as an output embedding."""
        if isinstance(module, nn.Linear):
            if getattr(module, "init_role", None) is None and not any(module is own for own in self.modules()):
                with_role(module, MatrixRole("output_embedding"))
            init_linear_(module, self.config)
        elif isinstance(module, nn.Embedding):
            embedding_(module.weight, self.config)
            if module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.LSTM):  # PyTorch's default (the Multi-Encoder's LSTM branch)
            bound = module.hidden_size**-0.5
            for parameter in module.parameters():
                init.uniform_(parameter, -bound, bound)
        elif hasattr(module, "init_own_parameters"):
            module.init_own_parameters(self.config)


class MTEncoderBase(MTPreTrainedModel):
    """What every encoder of the package starts with: the source token + position embeddings and the one input
    preparation (`prepare_inputs`). `MTEncoder` adds a stack of layers; the Multi-Encoder adds its branches and the
    Multi-Pass Transformer its passes over a stack. A subclass builds what reads the embeddings and ends its
    `__init__` with `post_init()`."""

    def __init__(self, config: MTConfig):
        super().__init__(config)
        self.dropout = config.dropout
        self.embed_tokens, self.embed_positions = token_and_position_embeddings(config, config.vocab_size)
        self.gradient_checkpointing = False

    def embed(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Give exactly one of `input_ids` and `inputs_embeds` to the encoder")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        check_sequence_length(inputs_embeds.shape[1], self.config, "source sequence")
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
        positions = self.embed_positions(position_ids, inputs_embeds.dtype)
        return inputs_embeds + positions

    def prepare_inputs(
        self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The encoder's one input preparation, shared by every encoder of the package: the embedded source after
        dropout, the 4D attention mask for the attention interface, and the `[B, T]` boolean padding mask for the
        sublayers that are not attention (None without padding). A 2D `attention_mask` must be right-padded with a
        token in every row (`check_right_padded`)."""
        hidden_states = self.embed(input_ids, inputs_embeds)
        check_right_padded(attention_mask)
        hidden_states = dropout_if_training(hidden_states, self.dropout, self.training)
        padding_mask = attention_mask.bool() if attention_mask is not None and attention_mask.ndim == 2 else None
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        return hidden_states, attention_mask, padding_mask


class MTEncoder(MTEncoderBase):
    """Token + position embeddings, then `config.encoder_layers` layers, each built by the architecture's
    `build_layer(config, layer_idx)` (the one way the package builds a stack's layers).

    Every layer is called as `layer(hidden_states, attention_mask=<4D mask>, padding_mask=<[B, T] bool or None>)`."""

    output_class: type[BaseModelOutput] = BaseModelOutput  # a subclass adds an architecture's own fields

    def __init__(self, config: MTConfig):
        super().__init__(config)
        self.layers = nn.ModuleList([self.build_layer(config, i) for i in range(config.encoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model) if config.normalize_before else None
        self.post_init()

    def build_layer(self, config: MTConfig, layer_idx: int) -> nn.Module:
        """Layer `layer_idx` of the stack; each architecture's encoder defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define `build_layer(config, layer_idx)`")

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        hidden_states, attention_mask, padding_mask = self.prepare_inputs(input_ids, attention_mask, inputs_embeds)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=attention_mask, padding_mask=padding_mask, **kwargs)
        return self.output_class(last_hidden_state=self.finalize(hidden_states))

    def finalize(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Final LayerNorm of pre-norm stacks; post-norm stacks return the states as they are."""
        return self.layer_norm(hidden_states) if self.layer_norm is not None else hidden_states


class MTDecoder(MTPreTrainedModel):
    """Target embeddings, then `config.decoder_layers` layers, each built by the architecture's
    `build_layer(config, layer_idx)`, with the generation cache.

    Every layer is called as `layer(hidden_states, attention_mask, encoder_hidden_states,
    encoder_attention_mask=..., cache=..., padding_mask=<[B, T] bool or None>)`; the layer's own cache
    object (keys/values and recurrent state) is `cache.self_attention_cache.layers[layer_idx]`."""

    # Whether a training forward projects every layer's cross-attention keys and values as one product
    # (`stacked_cross_attention_states`).
    stacks_cross_attention_projections: bool = False

    def __init__(self, config: MTConfig):
        super().__init__(config)
        self.dropout = config.dropout
        self.embed_tokens, self.embed_positions = token_and_position_embeddings(config, config.decoder_vocab_size)
        self.layers = nn.ModuleList([self.build_layer(config, i) for i in range(config.decoder_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model) if config.normalize_before else None
        self.gradient_checkpointing = False
        self.post_init()

    def build_layer(self, config: MTConfig, layer_idx: int) -> nn.Module:
        """Layer `layer_idx` of the stack; each architecture's decoder defines it (those with a Transformer-style
        decoder through `modeling_decoder_variants.decoder_layer`, for `config.decoder_attention_type`)."""
        raise NotImplementedError(f"{type(self).__name__} must define `build_layer(config, layer_idx)`")

    def new_cache(self) -> EncoderDecoderCache:
        return EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))

    def stacked_cross_attention_states(
        self, encoder_hidden_states: torch.Tensor | None, cache: Cache | None
    ) -> tuple[tuple[torch.Tensor, torch.Tensor], ...] | None:
        """Every layer's cross-attention keys and values of the encoder output H, `(k_proj(H), v_proj(H))` `[B, S, d]`
        per layer, as one product over the layers' stacked key and value matrices: all layers read the same H, so the
        training forward projects it once, and its backward returns one gradient to H instead of one per projection
        and their sum. Only for a decoder that opts in (`stacks_cross_attention_projections`), in a training forward
        without a cache or gradient checkpointing (whose recomputation must see every tensor a layer differentiates as
        an input), when every layer's cross-attention is a plain `MTAttention` (or one that declares it reads them,
        `reads_cross_attention_states`) with plain `nn.Linear` projections; None otherwise (each cross-attention
        projects H itself, as evaluation, generation and export always do)."""
        if (
            not self.stacks_cross_attention_projections
            or not self.training
            or cache is not None
            or self.gradient_checkpointing
            or encoder_hidden_states is None
        ):
            return None
        attentions = [getattr(layer, "encoder_attn", None) for layer in self.layers]
        if any(
            not (type(attention) is MTAttention or getattr(type(attention), "reads_cross_attention_states", False))
            for attention in attentions
        ):
            return None
        stacked = stacked_linear(
            [linear for attention in attentions for linear in (attention.k_proj, attention.v_proj)]
        )
        if stacked is None:
            return None
        projected = nn.functional.linear(encoder_hidden_states, *stacked).split(self.config.d_model, dim=-1)
        return tuple(zip(projected[0::2], projected[1::2], strict=True))

    def layer_inputs_for_forward(
        self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None, cache: Cache | None
    ) -> dict:
        """What a forward computes once and hands to every layer (keyword arguments of the layers): none here; a
        decoder adds its own (MUTE: its relative self-attention's buckets and causal mask). The stacked cross-attention
        keys and values (`stacked_cross_attention_states`) go to each layer apart, its own pair: a layer compiled on
        its own then traces the same code for every layer, not one graph per layer index."""
        return {}

    @accepts_past_key_values
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Give exactly one of `decoder_input_ids` and `decoder_inputs_embeds`")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)

        if use_cache and cache is None:
            cache = self.new_cache()
        if cache is not None and not isinstance(cache, EncoderDecoderCache):
            raise TypeError(
                f"{type(self).__name__} needs an `EncoderDecoderCache`; build it with "
                "`EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))`"
            )
        self_attn_cache = cache.self_attention_cache if cache is not None else None
        # Checked by layer type name, not class: every checkpoint loaded with trust_remote_code brings its own copy
        # of `cache_mt.py`, and the last one imported owns the (global) name, so the class object may be another copy.
        if self_attn_cache is not None and (
            len(self_attn_cache.layers) != self.config.decoder_layers
            or not all(getattr(layer, "_layer_type", None) == STATEFUL_LAYER_TYPE for layer in self_attn_cache.layers)
        ):
            raise TypeError(
                "The decoder cache was built without the model config, so it cannot hold the decoder's recurrent "
                "state; build it with `DynamicCache(config=model.config)`"
            )

        past_length = self_attn_cache.get_seq_length() if self_attn_cache is not None else 0
        seq_length = inputs_embeds.shape[1]
        check_sequence_length(past_length + seq_length, self.config, "target sequence")
        position_ids = torch.arange(past_length, past_length + seq_length, device=inputs_embeds.device)
        hidden_states = inputs_embeds + self.embed_positions(position_ids, inputs_embeds.dtype)
        hidden_states = dropout_if_training(hidden_states, self.dropout, self.training)

        # Padding mask for the recurrent sublayers: None when there is nothing to mask (decode steps, no padding).
        padding_mask = create_recurrent_attention_mask(self.config, inputs_embeds, attention_mask, self_attn_cache)
        # All positional: the cache parameter is `cache` from transformers 5.24 on, `past_key_values` before.
        causal_mask = create_causal_mask(self.config, inputs_embeds, attention_mask, self_attn_cache)
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        kwargs = {**kwargs, **self.layer_inputs_for_forward(hidden_states, encoder_hidden_states, cache)}
        cross_attention_states = self.stacked_cross_attention_states(encoder_hidden_states, cache)
        for index, layer in enumerate(self.layers):
            if cross_attention_states is not None:
                kwargs["cross_attention_states"] = cross_attention_states[index]
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, for gradient checkpointing
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                padding_mask=padding_mask.bool() if padding_mask is not None else None,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=self.finalize(hidden_states), **{CACHE_FIELD: cache}
        )

    def finalize(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Final LayerNorm of pre-norm stacks; post-norm stacks return the states as they are."""
        return self.layer_norm(hidden_states) if self.layer_norm is not None else hidden_states


def _fusable(module: nn.Module) -> bool:
    """A layer that can fuse its projections for inference (`fuse_projections` / `unfuse_projections`)."""
    return hasattr(module, "fuse_projections") and not isinstance(module, PreTrainedModel)


def cache_layer_for(cache: Cache | None, layer_idx: int) -> StatefulDecoderCacheLayer | None:
    """The decoder layer's own cache object, or None when decoding without a cache."""
    if cache is None:
        return None
    return cache.self_attention_cache.layers[layer_idx]


class MTModel(MTPreTrainedModel):
    """Encoder + decoder, returning the decoder states. Architectures set `encoder_class` / `decoder_class`."""

    encoder_class: type[MTEncoderBase] = None
    decoder_class: type[MTDecoder] = None
    # A subclass declaring `encoder_<field>` receives the encoder output's extra `<field>` (`encoder_extra_outputs`).
    output_class: type[Seq2SeqModelOutput] = Seq2SeqModelOutput
    # Arguments of `forward` that go to the encoder only (the Multi-Pass Transformer's `encoder_pass`).
    encoder_arguments: tuple[str, ...] = ()

    def __init__(self, config: MTConfig):
        super().__init__(config)
        self.encoder = self.encoder_class(config)
        self.decoder = self.decoder_class(config)
        # The encoder output's extra `<field>`s this output class receives as `encoder_<field>`.
        self.encoder_extra_fields = tuple(
            name.removeprefix("encoder_")
            for name in extra_output_fields(self.output_class, Seq2SeqModelOutput)
            if name.startswith("encoder_")
        )
        self.post_init()

    def _tied_weights_for_config(self) -> dict[str, str]:
        if self.config.share_encoder_decoder_embeddings:
            return {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}
        return {}

    def get_input_embeddings(self):
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value):
        """Sets the source embedding; with `share_encoder_decoder_embeddings` also the target one (the same matrix).
        With separate embeddings the target one is set with `set_decoder_input_embeddings` (as in Marian)."""
        self.encoder.embed_tokens = value
        if self.config.share_encoder_decoder_embeddings:
            self.decoder.embed_tokens = value

    def get_decoder_input_embeddings(self):
        """The target embedding (`get_decoder().embed_tokens`) when it is separate from the source one."""
        if self.config.share_encoder_decoder_embeddings:
            raise ValueError(
                "`get_decoder_input_embeddings` is for separate source/target embeddings, but "
                "`config.share_encoder_decoder_embeddings=True`: use `get_input_embeddings()`"
            )
        return self.decoder.embed_tokens

    def set_decoder_input_embeddings(self, value):
        if self.config.share_encoder_decoder_embeddings:
            raise ValueError(
                "`set_decoder_input_embeddings` is for separate source/target embeddings, but "
                "`config.share_encoder_decoder_embeddings=True`: use `set_input_embeddings()`, which sets both"
            )
        self.decoder.embed_tokens = value

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        encoder_kwargs = {name: kwargs.pop(name) for name in self.encoder_arguments if name in kwargs}
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                **encoder_kwargs,
                **kwargs,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return self.output_class(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: getattr(decoder_outputs, CACHE_FIELD)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            **{f"encoder_{field}": encoder_outputs.get(field) for field in self.encoder_extra_fields},
        )


class CallersLengthMixin:
    """Put before `GenerationMixin` in a model's bases: a `max_length` the caller passes (to `generate()` or in its
    generation config) wins over a `max_new_tokens` saved with the checkpoint, which transformers would let win, so
    saved generation defaults never override a caller's length (the PyTorch models and the ONNX Runtime model)."""

    def _prepare_generation_config(self, generation_config=None, *args, **kwargs):
        passed = {**(generation_config.to_diff_dict() if generation_config is not None else {}), **kwargs}
        generation_config, model_kwargs = super()._prepare_generation_config(generation_config, *args, **kwargs)
        if passed.get("max_length") is not None and passed.get("max_new_tokens") is None:
            generation_config.max_new_tokens = None
        return generation_config, model_kwargs


class MTForConditionalGeneration(MTPreTrainedModel, CallersLengthMixin, GenerationMixin):
    """`MTModel` + output projection over the target vocabulary; the class `generate()` and the Trainer use."""

    base_model_class: type[MTModel] = None
    # A subclass declaring the base model output's extra `encoder_<field>`s receives them too.
    output_class: type[Seq2SeqLMOutput] = Seq2SeqLMOutput

    def __init__(self, config: MTConfig):
        super().__init__(config)
        self.model = self.base_model_class(config)
        # drawn like the target embedding it replaces when untied
        self.lm_head = with_role(
            nn.Linear(config.d_model, config.decoder_vocab_size, bias=False), MatrixRole("output_embedding")
        )
        self.extra_output_fields = extra_output_fields(self.output_class, Seq2SeqLMOutput)  # passed on from `model`
        self.post_init()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' `save_pretrained`. With remote code (`register_for_auto_class`), transformers names only the
        saved class in `auto_map`; the base model (`<Arch>Model`, the class `model` is) is named too, for the Auto class
        it is registered for (`AutoModel`), so that `AutoModel.from_pretrained(checkpoint, trust_remote_code=True)`
        loads it where the package is not installed, as a MarianMT checkpoint loads as `MarianModel`."""
        if self._auto_class is not None:
            base = type(self.model)
            entry = {base._auto_class or "AutoModel": f"{base.__module__.rsplit('.', 1)[-1]}.{base.__name__}"}
            self.config.auto_map = {**entry, **(getattr(self.config, "auto_map", None) or {})}
        return super().save_pretrained(save_directory, *args, **kwargs)

    def _tied_weights_for_config(self) -> dict[str, str]:
        if not self.config.tie_word_embeddings:
            return {}
        # Point at the ultimate source: with shared embeddings the decoder's matrix is itself tied to the encoder's.
        source = "encoder" if self.config.share_encoder_decoder_embeddings else "decoder"
        return {"lm_head.weight": f"model.{source}.embed_tokens.weight"}

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        if isinstance(new_embeddings, nn.Linear) and getattr(new_embeddings, "init_role", None) is None:
            with_role(new_embeddings, MatrixRole("output_embedding"))
        self.lm_head = new_embeddings

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True):
        """`resize_token_embeddings` resizes the source embedding (`config.vocab_size`). With
        `share_encoder_decoder_embeddings` that matrix is also the target embedding, so the target vocabulary
        (`config.decoder_vocab_size`) and the output projection follow; with separate embeddings the target side is
        left alone and resized by `resize_decoder_token_embeddings` (as in Marian). transformers' default would
        resize the output projection to the source vocabulary."""
        old_embeddings = self.get_input_embeddings()
        new_embeddings = self._get_resized_embeddings(old_embeddings, new_num_tokens, pad_to_multiple_of, mean_resizing)
        new_embeddings.requires_grad_(old_embeddings.weight.requires_grad)
        self.set_input_embeddings(new_embeddings)
        if self.config.share_encoder_decoder_embeddings:
            self._resize_output_projection(new_embeddings.weight.shape[0], mean_resizing)
        return self.get_input_embeddings()

    def resize_decoder_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Resizes the target embedding and the output projection to `new_num_tokens` (`config.decoder_vocab_size`),
        for separate source/target embeddings (`share_encoder_decoder_embeddings=False`); returns the target
        embedding. The output projection stays tied to it with `tie_word_embeddings`."""
        if self.config.share_encoder_decoder_embeddings:
            raise ValueError(
                "`resize_decoder_token_embeddings` is for separate source/target embeddings, but "
                "`config.share_encoder_decoder_embeddings=True`: use `resize_token_embeddings()`, which resizes both"
            )
        old_embeddings = self.model.get_decoder_input_embeddings()
        if new_num_tokens is None and pad_to_multiple_of is None:
            return old_embeddings
        new_embeddings = self._get_resized_embeddings(old_embeddings, new_num_tokens, pad_to_multiple_of, mean_resizing)
        new_embeddings.requires_grad_(old_embeddings.weight.requires_grad)
        self.model.set_decoder_input_embeddings(new_embeddings)
        self._resize_output_projection(new_embeddings.weight.shape[0], mean_resizing)
        self.tie_weights()
        return self.model.get_decoder_input_embeddings()

    def _resize_output_projection(self, new_num_tokens: int, mean_resizing: bool) -> None:
        """The target vocabulary changed: record it, and resize an untied output projection (a tied one is re-tied
        to the target embedding by `tie_weights`)."""
        self.config.decoder_vocab_size = new_num_tokens
        if not self.config.tie_word_embeddings:
            resized = self._get_resized_lm_head(self.lm_head, new_num_tokens, mean_resizing=mean_resizing)
            self.set_output_embeddings(resized)

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            Target token ids; -100 marks positions ignored by the loss. When given without `decoder_input_ids`,
            the decoder inputs are the labels shifted right behind `decoder_start_token_id`.
        """
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = shift_tokens_right(
                    labels, self.config.pad_token_id, self.config.decoder_start_token_id
                )
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(outputs.last_hidden_state[:, slice_indices, :])

        extra = {field: outputs.get(field) for field in self.extra_output_fields}
        loss = None
        if labels is not None:
            terms = self.loss_terms(logits, labels, num_items_in_batch)
            loss = terms.pop("loss")
            extra.update(terms)
        else:
            self.forward_without_labels()
        return self.output_class(
            loss=loss,
            logits=logits,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            **extra,
        )

    def loss_terms(
        self, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> dict[str, torch.Tensor | None]:
        """The loss hook: `{"loss": ...}` for a forward with `labels`, the label-smoothed cross-entropy over the target
        tokens (`translation_cross_entropy`). An architecture that adds loss terms returns them here too, each under
        the name of a field of its `output_class`."""
        return {"loss": translation_cross_entropy(logits, labels, num_items_in_batch, self.config.label_smoothing)}

    def forward_without_labels(self) -> None:
        """Called by a forward without `labels` (an architecture can warn when training would then miss a loss
        term)."""

    def fuse_projections(self) -> int:
        """Fuses the projections of every layer that can (Prime layers, §3.3.1 of Zhao et al., in every architecture
        that composes them: the Unified Transformer, a Multi-Encoder Prime branch, the Multi-Pass Prime encoder layer,
        MUTE's Prime units) from the current weights, for inference forwards; returns how many layers were fused.
        `unfuse_projections` undoes it, and `model.train()` drops the fused copies."""
        return sum(bool(module.fuse_projections()) for module in self.modules() if _fusable(module))

    def unfuse_projections(self) -> None:
        for module in self.modules():
            if _fusable(module):
                module.unfuse_projections()

    def generate(self, *args, **kwargs):
        """transformers' `generate()`. The layers that can fuse their projections and whose config asks for it
        (`fuse_projections_for_inference`) fuse them from the current weights for this call only: the weights cannot
        change during it, and nothing fused outlives it."""
        layers = [
            module
            for module in self.modules()
            if _fusable(module)
            and module._fused is None
            and getattr(module.config, "fuse_projections_for_inference", False)
        ]
        for layer in layers:
            layer.fuse_projections()
        try:
            return super().generate(*args, **kwargs)
        finally:
            for layer in layers:
                layer.unfuse_projections()

    def _prepare_cache_for_generation(self, generation_config, *args, **kwargs):
        # Only the dynamic cache can hold the decoder's recurrent state (convolution windows, running sums): the
        # static/quantized caches would fail deep inside transformers with an unrelated-looking error.
        if generation_config.cache_implementation not in (None, "dynamic", "offloaded"):
            raise ValueError(
                f"cache_implementation={generation_config.cache_implementation!r} is not supported by "
                f"{type(self).__name__}: its decoder keeps recurrent state in a dynamic cache (use the default cache)"
            )
        return super()._prepare_cache_for_generation(generation_config, *args, **kwargs)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Used by `DataCollatorForSeq2Seq(model=...)`."""
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)
