# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the Multi-Unit Transformer, MUTE (Yan, Meng, Zhou 2020, "Multi-Unit Transformers for
Neural Machine Translation")."""

from huggingface_hub.dataclasses import strict

from .configuration_mt_common import MTConfig, _check_positive, check_used, register_architecture_options
from .configuration_unified_transformer import PRIME_LAYER_OPTIONS, check_layer_spec, layer_spec_with_defaults


NOISE_TYPES = ("identity", "swap", "disorder", "mask")
# The authors' biased configurations (`boost_str 'd1 a3'`): one identity unit, then swap, mask and reorder units.
DEFAULT_BIASED_UNITS = ("identity", "swap", "mask", "disorder")
PENALTY_NORMALIZATIONS = ("tokens", "batch")


@register_architecture_options
@strict
class MultiUnitTransformerConfig(MTConfig):
    r"""
    Configuration of a [`MultiUnitTransformerForConditionalGeneration`]: a pre-norm Transformer whose encoder layers
    hold `num_units` parallel units (self-attention + FFN, each with its own residual) combined by learned weights
    (Eq. 8-10 of Yan et al.), optionally with biased unit inputs during training (Eq. 11-12) and a learned sequential
    ordering of the units (AutoShuffle, Eq. 13-20). Relative positions (Shaw et al. 2018) are used in every encoder
    unit's self-attention (MUTE's own units; Prime units use the absolute positions only) and in the decoder's
    self-attention (`decoder_attention_type` `"self"` and `"merged_self"`; `"aan"` and `"merged"` have no decoder
    self-attention, hence no relative positions there); absolute sinusoidal positions are kept.

    The three models of the paper are configurations:

    * MUTE: `use_bias_module=False, use_sequential_dependency=False` (identical units, the default);
    * MUTE + Bias: `use_bias_module=True`;
    * MUTE + Bias + Seq.: `use_bias_module=True, use_sequential_dependency=True`.

    The defaults are the paper's Transformer-Base setting (6+6 layers, d 512, FFN 2048, 8 heads, 4 units). Besides the
    fields of [`MTConfig`]:

    Args:
        init_law (`str`): `"xavier"` by default, the authors' OpenNMT `param_init_glorot` (see [`MTConfig`]).
        unit_layer (`dict`, *optional*): What a unit is: `{"type": "transformer"}` (default, the paper: pre-norm
            self-attention with relative positions + FFN, each with its residual) or, a composition,
            `{"type": "prime", ...}`: the Unified Transformer's Prime encoder layer (Zhao et al., Eq. 4: attention,
            dynamic convolution and FFN in parallel on one residual, one post-LayerNorm; options `use_convolution`,
            `conv_kernel_sizes`, `conv_weight_dropout`, defaults `True`, `[3, 15]`, 0.1). Prime units are post-norm,
            so they take `normalize_before=False` (the whole model, decoder included, is then post-norm), and run
            one after the other (`batched_units` does not apply); their attention uses the absolute positions only.
        num_units (`int`): Parallel units per encoder layer (I).
        batched_units (`bool`): Compute the I units as batched tensor operations over stacked weights (one
            batched matmul per projection). False runs a Python loop over the units with the same weights; same
            outputs, kept for speed comparisons.
        relative_attention_max_distance (`int`): Clipping distance k of the relative position representations; one
            table of 2k+1 vectors of size d_model/heads per attention module, shared by keys and values and by the
            heads (the authors' code). Unused by a model with Prime units and an `"aan"` or `"merged"` decoder.
        use_bias_module (`bool`): Feed each unit a differently corrupted copy of its input during training
            (Eq. 11-12). Never active in eval mode.
        unit_noise_types (`list[str]`, *optional*): One of `identity`, `swap`, `disorder`, `mask` per unit. Defaults
            to the authors' order `identity, swap, mask, disorder` (repeated for more than four units) with the bias
            module, and to all `identity` without it.
        bias_sample_rate (`float`): p_β, the probability that the bias module is switched on in one layer call
            (one draw per layer and forward pass, shared by the units and sentences, as in the authors' code).
        swap_max_distance (`int`): A swap exchanges two tokens at most this far apart.
        disorder_window (`int`): A disorder permutes this many consecutive tokens.
        mask_probability (`float`): Probability that the mask unit replaces a token by its learned mask embedding.
        use_sequential_dependency (`bool`): AutoShuffle + accumulated unit outputs (Eq. 13-19).
        shuffle_penalty_weight (`float`): λ of Eq. 20, weight of the Lipschitz penalty (Eq. 19) summed over layers.
        shuffle_penalty_normalization (`str`): `"tokens"` divides the weighted penalty by the number of target tokens
            of the batch, as the authors' loss does (it adds λ·ΣL_p to the *summed* cross-entropy before normalising
            by tokens); `"batch"` adds λ·ΣL_p to the token-mean cross-entropy once per batch (Eq. 20 read
            literally). Either way it is counted once per optimizer step under gradient accumulation.
    """

    model_type = "multi_unit_transformer"
    # The loss parts are scalars: the Trainer must not collect them as predictions.
    keys_to_ignore_at_inference = ["cache", "past_key_values", "cross_entropy", "shuffle_penalty"]
    spec_options = {"unit_layer": {"prime": tuple(PRIME_LAYER_OPTIONS)}}

    init_law: str = "xavier"
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    normalize_before: bool = True
    dropout: float | int = 0.1
    activation_dropout: float | int = 0.1
    unit_layer: dict | None = None
    num_units: int = 4
    batched_units: bool = True
    relative_attention_max_distance: int = 16
    use_bias_module: bool = False
    unit_noise_types: list[str] | None = None
    bias_sample_rate: float | int = 0.85
    swap_max_distance: int = 3
    disorder_window: int = 3
    mask_probability: float | int = 0.1
    use_sequential_dependency: bool = False
    shuffle_penalty_weight: float | int = 1.0
    shuffle_penalty_normalization: str = "tokens"

    def __post_init__(self, **kwargs):
        if self.unit_noise_types is None and isinstance(self.num_units, int) and self.num_units > 0:
            if self.use_bias_module:
                defaults = DEFAULT_BIASED_UNITS
                self.unit_noise_types = [defaults[i % len(defaults)] for i in range(self.num_units)]
            else:
                self.unit_noise_types = ["identity"] * self.num_units
        self.unit_layer = layer_spec_with_defaults(self.unit_layer)
        super().__post_init__(**kwargs)

    def validate_architecture_options(self):
        super().validate_architecture_options()
        check_layer_spec("`unit_layer`", self.unit_layer, self.normalize_before)
        if self.unit_layer["type"] == "transformer" and not self.normalize_before:
            raise ValueError(
                "`normalize_before` must be True: MUTE layers are pre-norm (the authors' OpenNMT Transformer), the "
                "units share the layer's input LayerNorm"
            )
        _check_positive(self, "num_units", "relative_attention_max_distance", "swap_max_distance")
        window = self.disorder_window
        if not isinstance(window, int) or isinstance(window, bool) or window < 2:
            raise ValueError(f"`disorder_window` must be an integer >= 2, got {self.disorder_window!r}")
        for name in ("bias_sample_rate", "mask_probability"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"`{name}` must be in [0, 1], got {getattr(self, name)!r}")
        if float(self.shuffle_penalty_weight) < 0:
            raise ValueError(f"`shuffle_penalty_weight` must be >= 0, got {self.shuffle_penalty_weight!r}")
        if self.shuffle_penalty_normalization not in PENALTY_NORMALIZATIONS:
            raise ValueError(
                f"`shuffle_penalty_normalization` must be one of {PENALTY_NORMALIZATIONS}, "
                f"got {self.shuffle_penalty_normalization!r}"
            )
        noise = self.unit_noise_types
        if not isinstance(noise, list) or len(noise) != self.num_units:
            raise ValueError(f"`unit_noise_types` must list one noise type per unit ({self.num_units}), got {noise!r}")
        unknown = [name for name in noise if name not in NOISE_TYPES]
        if unknown:
            raise ValueError(f"`unit_noise_types` has unknown entries {unknown}; allowed: {NOISE_TYPES}")
        if not self.use_bias_module and any(name != "identity" for name in noise):
            raise ValueError(
                f"`unit_noise_types` {noise} asks for noise but `use_bias_module` is False; set `use_bias_module=True`"
            )
        self._check_switched_off_options()

    def _check_switched_off_options(self) -> None:
        """The options of the bias module, of one noise type, of AutoShuffle or of the unit loop keep their defaults
        where the rest of the config switches that part off."""
        noise = self.unit_noise_types if self.use_bias_module else []
        check_used(self, "bias_sample_rate", self.use_bias_module, "the bias module is off (`use_bias_module=False`)")
        for name, noise_type in (
            ("swap_max_distance", "swap"),
            ("disorder_window", "disorder"),
            ("mask_probability", "mask"),
        ):
            check_used(
                self,
                name,
                noise_type in noise,
                f"no unit has the {noise_type!r} noise (`use_bias_module={self.use_bias_module}`, "
                f"`unit_noise_types={self.unit_noise_types}`)",
            )
        for name in ("shuffle_penalty_weight", "shuffle_penalty_normalization"):
            check_used(
                self,
                name,
                self.use_sequential_dependency,
                "AutoShuffle is off (`use_sequential_dependency=False`)",
            )
        check_used(
            self,
            "batched_units",
            self.unit_layer["type"] == "transformer",
            "Prime units run one after the other (`unit_layer` type 'prime')",
        )


__all__ = ["MultiUnitTransformerConfig"]
