# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Configuration fields and validation shared by every encoder-decoder model of this package.

Field names follow BART / Marian wherever they mean the same thing, so that tools written for those
models (Trainer scripts, generation configs, model cards) read ours unchanged.
"""

import copy
import difflib
from dataclasses import fields

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.configuration_utils import ALLOWED_ATTN_LAYER_TYPES

from .pipeline_translation import CUSTOM_PIPELINES


# Name of the decoder cache-layer type (see `cache_mt.py`). One per decoder layer in `config.layer_types`;
# `generate()` builds `DynamicCache(config=...)` whose layers come from this name.
STATEFUL_LAYER_TYPE = "hf_unified_mt_stateful"

ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu", "swish", "tanh")


@strict
class MTConfig(PreTrainedConfig):
    r"""
    Base configuration of the hf-unified-mt encoder-decoder models. Not used on its own: every architecture
    subclasses it and adds its own fields.

    Args:
        vocab_size (`int`): Size of the (source, or shared) vocabulary.
        decoder_vocab_size (`int`, *optional*): Size of the target vocabulary when it differs from the source one
            (separate embeddings, as in the IWSLT setups of Zhao et al.). Defaults to `vocab_size`.
        d_model (`int`): Width of the model.
        encoder_layers / decoder_layers (`int`): Number of layers of each stack.
        encoder_attention_heads / decoder_attention_heads (`int`): Attention heads per layer.
        encoder_ffn_dim / decoder_ffn_dim (`int`): Inner width of the position-wise feed-forward network.
        activation_function (`str`): FFN non-linearity.
        normalize_before (`bool`): Pre-norm layers (LayerNorm on each sublayer's input, plus a final LayerNorm per
            stack) instead of post-norm; for the architectures that offer both.
        dropout (`float`): Residual / embedding dropout.
        attention_dropout (`float`): Dropout on attention weights.
        activation_dropout (`float`): Dropout after the FFN non-linearity.
        max_position_embeddings (`int`): Longest source or target sequence the model accepts; longer inputs raise.
        scale_embedding (`bool`): Multiply token embeddings by sqrt(d_model).
        share_encoder_decoder_embeddings (`bool`): One embedding matrix for source and target tokens.
        tie_word_embeddings (`bool`): Tie the output projection to the decoder input embedding.
        init_std (`float`): Standard deviation used where an architecture initialises with a normal law.
        label_smoothing (`float`): Label smoothing of the cross-entropy the model computes when given `labels`.
            Prefer it to the Trainer's `label_smoothing_factor`: that option takes the labels away from the model,
            which then cannot add loss terms of its own (MUTE's AutoShuffle penalty, MPT's sum over passes).
            `training/train.py` moves `--label_smoothing_factor` here.
        layer_types (`list[str]`, *optional*): One cache-layer type per decoder layer; filled automatically.
    """

    model_type = "hf_unified_mt"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "decoder_attention_heads",
        # the decoder's layer count sizes the generation cache (one cache layer per decoder layer)
        "num_hidden_layers": "decoder_layers",
    }

    vocab_size: int = 8000
    decoder_vocab_size: int | None = None
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    normalize_before: bool = False
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    max_position_embeddings: int = 1024
    scale_embedding: bool = True
    share_encoder_decoder_embeddings: bool = True
    tie_word_embeddings: bool = True
    init_std: float | int = 0.02
    label_smoothing: float | int = 0.0
    layer_types: list[str] | None = None
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1
    forced_eos_token_id: int | None = None

    @property
    def num_encoder_hidden_layers(self) -> int:
        """Layer outputs the encoder returns as `hidden_states` (after the embeddings). Negative `output_hidden_states`
        indices on the encoder resolve against it: `num_hidden_layers` is the decoder's count (it sizes the cache)."""
        return self.encoder_layers

    def __post_init__(self, **kwargs):
        _reject_misspelled_options(type(self), kwargs)
        if self.decoder_vocab_size is None:
            self.decoder_vocab_size = self.vocab_size
        if self.layer_types is None:
            self.layer_types = [STATEFUL_LAYER_TYPE] * self.decoder_layers
        super().__post_init__(**kwargs)
        if not getattr(self, "custom_pipelines", None):
            # `pipeline("translation", model=<checkpoint>, trust_remote_code=True)` finds the pipeline through this.
            self.custom_pipelines = copy.deepcopy(CUSTOM_PIPELINES)
        self.validate_architecture_options()

    # `save_pretrained` calls `validate()` (transformers' `PreTrainedConfig.validate`), which runs every `validate_*`
    # method: a bad value fails at save time too.
    def validate_layer_type(self):
        allowed = ALLOWED_ATTN_LAYER_TYPES + (STATEFUL_LAYER_TYPE,)
        if self.layer_types is None:
            return
        unknown = [t for t in self.layer_types if t not in allowed]
        if unknown:
            raise ValueError(f"`layer_types` has unknown entries {unknown}; allowed: {STATEFUL_LAYER_TYPE!r}")
        if len(self.layer_types) != self.decoder_layers:
            raise ValueError(
                f"`layer_types` must have one entry per decoder layer ({self.decoder_layers}), "
                f"got {len(self.layer_types)}"
            )

    def validate_architecture_options(self):
        """Checks shared by every architecture; subclasses extend it (and call `super()`)."""
        _check_positive(self, "vocab_size", "decoder_vocab_size", "d_model", "max_position_embeddings")
        _check_positive(self, "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads")
        _check_positive(self, "encoder_ffn_dim", "decoder_ffn_dim")
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name) != 0:
                raise ValueError(f"`d_model` ({self.d_model}) must be divisible by `{name}` ({getattr(self, name)})")
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            _check_probability(self, name)
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(f"`activation_function` must be one of {ACTIVATIONS}, got {self.activation_function!r}")
        if self.share_encoder_decoder_embeddings and self.decoder_vocab_size != self.vocab_size:
            raise ValueError(
                "`share_encoder_decoder_embeddings=True` needs `decoder_vocab_size == vocab_size` "
                f"(got {self.decoder_vocab_size} and {self.vocab_size})"
            )
        for name in ("pad_token_id", "bos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.decoder_vocab_size:
                raise ValueError(f"`{name}` ({value}) is outside the vocabulary (size {self.decoder_vocab_size})")


def _check_positive(config, *names):
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}")


def _check_probability(config, name):
    value = getattr(config, name)
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1), got {value!r}")


def _reject_misspelled_options(config_class, extra_kwargs):
    """Unknown keyword arguments are kept as attributes by `PreTrainedConfig` (that is how hub configs carry
    metadata). A keyword that is *almost* one of our fields is a typo that would silently fall back to the
    default: refuse it, naming the field it resembles."""
    known = {f.name for f in fields(config_class)}
    for key in extra_kwargs:
        if key in known or key.startswith("_"):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
        if close:
            raise ValueError(f"Unknown option `{key}` for {config_class.__name__}; did you mean `{close[0]}`?")
