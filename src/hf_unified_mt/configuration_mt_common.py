# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Configuration fields and validation shared by every encoder-decoder model of this package.

Field names follow BART / Marian wherever they mean the same thing, so that tools written for those
models (Trainer scripts, generation configs, model cards) read ours unchanged.
"""

import copy
import difflib
from dataclasses import fields
from typing import ClassVar

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.configuration_utils import ALLOWED_ATTN_LAYER_TYPES

from .pipeline_translation import CUSTOM_PIPELINES


# Name of the decoder cache-layer type (see `cache_mt.py`). One per decoder layer in `config.layer_types`;
# `generate()` builds `DynamicCache(config=...)` whose layers come from this name.
STATEFUL_LAYER_TYPE = "hf_unified_mt_stateful"

ACTIVATIONS = ("relu", "gelu", "gelu_new", "silu", "swish", "tanh")

# The initialisation laws of the weight matrices (`init_law`); `initialization_mt.py` implements each as one function.
INIT_LAWS = ("pytorch", "xavier", "fairseq", "ds_init", "normal", "km")
DS_INIT_MODES = ("paper", "released_code")
# The decoder's first sublayer (Zhang et al. 2019, paper 001), for every architecture with a Transformer-style decoder.
DECODER_ATTENTION_TYPES = ("self", "aan", "merged", "merged_self")
# Names of the init options of a version never released, which `init_law` replaced: refused, pointing to it.
RETIRED_INIT_OPTIONS = ("ds_init", "linear_init")

# What each architecture adds, by `model_type`, recorded by `register_architecture_options` (the decorator of every
# architecture's config class) when its configuration file is imported, so that each architecture declares its
# fields once, in its own file, and a config refuses another architecture's field or spec option naming its owner.
# The package registers all five; a checkpoint loaded as remote code carries, and registers, the configuration files
# of its own architecture and of those it composes.
ARCHITECTURE_OPTIONS: dict[str, tuple[str, ...]] = {}  # model_type -> the fields it adds to `MTConfig`
ARCHITECTURE_SPEC_OPTIONS: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {}  # model_type -> its `spec_options`
# Options of transformers' BART / Marian configs that none of these models implements.
UNIMPLEMENTED_OPTIONS = ("encoder_layerdrop", "decoder_layerdrop", "classifier_dropout")


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
        init_law (`str`): How the weight matrices of attention, FFN and the other linear layers are drawn (biases
            are zero, LayerNorms unit, in every law). Each architecture defaults to its paper's law:
            `"pytorch"`: PyTorch's default U(±1/sqrt(fan_in));
            `"xavier"`: Xavier-uniform U(±γ), γ = sqrt(6 / (fan_in + fan_out)) (Eq. 9 of Zhang et al.; Vaswani et al.);
            `"fairseq"`: fairseq's Transformer: attention query/key/value Xavier-uniform with gain 1/sqrt(2), attention
            output Xavier-uniform, FFN and the rest PyTorch's default;
            `"ds_init"`: DS-Init, Xavier-uniform scaled by the depth l = 1..L of the layer that holds the matrix,
            counted in each stack (Eq. 15 of Zhang et al.; `ds_init_mode`, `ds_init_alpha`);
            `"normal"`: N(0, `init_std`²) for every matrix and embedding, as Marian and BERT;
            `"km"`: the Unified Transformer authors' `init_method='km'`: PyTorch's default, the output projections of
            the self- and the cross-attention kaiming-uniform with a = 1 (U(±sqrt(3 / fan_in))).
            Token embeddings (and an untied output projection, which replaces the tied embedding) are
            N(0, d_model^-1/2) except under `"normal"`. Modules that one paper specifies with its own law (Prime's
            kernel generators, ConvS2S, LSTM, Static Expansion vectors, MUTE's unit weights α, ...) keep it.
        init_std (`float`): Standard deviation of `init_law="normal"`.
        ds_init_mode (`str`): The DS-Init scale s(l): `"paper"` (Eq. 15) s = α / sqrt(l); `"released_code"`
            s = sqrt(α) · l^(-1/4), what the authors' code computes (TF variance scaling with scale α / sqrt(l)).
        ds_init_alpha (`float`): α of Eq. 15 (the paper uses 1.0).
        init_fused_qkv (`bool`): Xavier-family laws (`"xavier"`, `"ds_init"`) draw the self-attention query, key and
            value projections as ONE d × 3d matrix (fan_out 3d), as the Deep Transformer authors' code does.
        label_smoothing (`float`): Label smoothing of the cross-entropy the model computes when given `labels`.
            Prefer it to the Trainer's `label_smoothing_factor`: that option takes the labels away from the model,
            which then cannot add loss terms of its own (MUTE's AutoShuffle penalty, MPT's sum over passes).
            The package's training script moves the Trainer's `--label_smoothing_factor` here.
        decoder_attention_type (`str`): The decoder's self-attention sublayer (the variants of Zhang et al. 2019):
            `"self"`: the architecture's own decoder layer (causal self-attention, cross-attention, FFN; Eq. 6-8);
            `"aan"`: the original average attention network (Zhang et al. 2018): cumulative average of the layer input,
            optional FFN, input/forget gates, followed by cross-attention and FFN;
            `"merged"`: MAtt (Eq. 16-17): a simplified AAN (the average of the cross-attention's value projection of the
            input, no gate, no FFN) added to the cross-attention before their shared output projection, then the FFN;
            `"merged_self"`: Table 3's variant 6, "MAtt with self-attention": causal self-attention and
            cross-attention summed in one residual sublayer, then the FFN. Each attention keeps its own projections
            (the baseline's parameters, less the LayerNorm of the sublayer it merges away).
        aan_use_ffn (`bool`): With `decoder_attention_type="aan"`, pass the average through an FFN of width
            `decoder_ffn_dim` before the gate (the AAN paper's form; its released code leaves it out, the default).
        layer_types (`list[str]`, *optional*): One cache-layer type per decoder layer; filled automatically.

    An option the model built from the config would not use is refused with a `ValueError` naming it: a field of
    another architecture (`ARCHITECTURE_OPTIONS`), an option of a layer or branch spec (`spec_options`) given at the
    top level, an unimplemented BART/Marian option, a misspelled field, and a field that the other fields switch off
    but that is not at its default (`init_std` without `init_law="normal"`, ...). Metadata keys of transformers
    (`architectures`, `auto_map`, ...) are kept as usual.
    """

    model_type = "hf_unified_mt"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]
    # The fields of an architecture that hold specs (`{"type": <kind>, **options}`: a composed Prime layer, a
    # Multi-Encoder branch): field -> spec kind -> the options a spec of that kind takes. An option given at the top
    # level instead is refused, pointing to the field.
    spec_options: ClassVar[dict[str, dict[str, tuple[str, ...]]]] = {}
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
    init_law: str = "pytorch"
    init_std: float | int = 0.02
    ds_init_mode: str = "paper"
    ds_init_alpha: float | int = 1.0
    init_fused_qkv: bool = False
    decoder_attention_type: str = "self"
    aan_use_ffn: bool = False
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
        _reject_unused_options(type(self), kwargs)
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
        if self.init_law not in INIT_LAWS:
            raise ValueError(f"`init_law` must be one of {INIT_LAWS}, got {self.init_law!r}")
        if self.ds_init_mode not in DS_INIT_MODES:
            raise ValueError(f"`ds_init_mode` must be one of {DS_INIT_MODES}, got {self.ds_init_mode!r}")
        for name in ("init_std", "ds_init_alpha"):
            value = getattr(self, name)
            if isinstance(value, bool) or not float(value) > 0.0:
                raise ValueError(f"`{name}` must be a positive number, got {value!r}")
        check_used(
            self,
            "init_std",
            self.init_law == "normal",
            f"only `init_law='normal'` reads it (`init_law={self.init_law!r}`)",
        )
        for name in ("ds_init_mode", "ds_init_alpha"):
            check_used(
                self,
                name,
                self.init_law == "ds_init",
                f"only `init_law='ds_init'` reads it (`init_law={self.init_law!r}`)",
            )
        check_used(
            self,
            "init_fused_qkv",
            self.init_law in ("xavier", "ds_init"),
            f"only the Xavier-family laws `xavier` and `ds_init` read it (`init_law={self.init_law!r}`)",
        )
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


def register_architecture_options(config_class: type[MTConfig]) -> type[MTConfig]:
    """The decorator of every architecture's config class (above `@strict`): records the fields it adds to `MTConfig`
    and its `spec_options` under its `model_type` (`ARCHITECTURE_OPTIONS`, `ARCHITECTURE_SPEC_OPTIONS`)."""
    common = {f.name for f in fields(MTConfig)}
    own = tuple(f.name for f in fields(config_class) if f.name not in common)
    ARCHITECTURE_OPTIONS[config_class.model_type] = own
    ARCHITECTURE_SPEC_OPTIONS[config_class.model_type] = config_class.spec_options
    return config_class


def _spec_holding(spec_options: dict[str, dict[str, tuple[str, ...]]], key: str) -> tuple[str, str] | None:
    """`(field, kind)` of the first spec kind in `spec_options` that takes the option `key`, or None."""
    for field, kinds in spec_options.items():
        for kind, options in kinds.items():
            if key in options:
                return field, kind
    return None


def _reject_unused_options(config_class, extra_kwargs):
    """Unknown keyword arguments are kept as attributes by `PreTrainedConfig` (that is how hub configs carry
    metadata), and a model ignores them: config.json would then state options the model does not have. Refused,
    naming the field: an option of one of this config's specs given at the top level, a field of another
    architecture, an option of another architecture's specs, an init option of the unreleased version that `init_law`
    replaced, an option of transformers' BART/Marian that these models do not implement, and a keyword that is
    *almost* one of our fields (a typo that would silently fall back to the default)."""
    known = {f.name for f in fields(config_class)}
    name = config_class.__name__
    for key in extra_kwargs:
        if key in known or key.startswith("_"):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        owners = [arch for arch, options in ARCHITECTURE_OPTIONS.items() if key in options]
        own_spec = _spec_holding(config_class.spec_options, key)
        if own_spec is not None:
            field, kind = own_spec
            owned = f" (a field of {' and '.join(owners)})" if owners else ""
            raise ValueError(
                f"`{key}` is an option of a {kind!r} spec{owned}, which {name} does not read at the top level: give "
                f"it in `{field}` (`{{'type': {kind!r}, {key!r}: ...}}`)"
            )
        if owners:
            raise ValueError(
                f"`{key}` is an option of {' and '.join(owners)}, which {name} ({config_class.model_type}) does not "
                f"use{hint}"
            )
        for arch, spec_options in ARCHITECTURE_SPEC_OPTIONS.items():
            other_spec = _spec_holding(spec_options, key)
            if other_spec is not None:
                field, kind = other_spec
                raise ValueError(
                    f"`{key}` is an option of a {kind!r} spec (an entry of {arch}'s `{field}`), "
                    f"not a field of {name}{hint}"
                )
        if key in RETIRED_INIT_OPTIONS:
            raise ValueError(
                f"`{key}` is not an option: `init_law` replaced it before the first release; give `init_law` "
                f"(one of {INIT_LAWS})"
            )
        if key in UNIMPLEMENTED_OPTIONS:
            raise ValueError(f"`{key}` (an option of transformers' BART/Marian) is not implemented by {name}")
        if close:
            raise ValueError(f"Unknown option `{key}` for {name}{hint}")


def check_used(config, name: str, used: bool, why: str) -> None:
    """A field that the other fields switch off must keep its default: a value the model would not use is refused
    (config.json never states what the built model is not). `why` says what it needs."""
    if used:
        return
    default = next(f.default for f in fields(type(config)) if f.name == name)
    if getattr(config, name) != default:
        raise ValueError(f"`{name}={getattr(config, name)!r}` is not used: {why}")
