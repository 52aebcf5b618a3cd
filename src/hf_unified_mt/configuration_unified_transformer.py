# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the Unified Transformer (Zhao et al., "Unified Transformer for
Sequence-to-Sequence Learning"; Prime / MUSE)."""

import copy

from huggingface_hub.dataclasses import strict

from .configuration_mt_common import MTConfig, _check_probability, register_architecture_options


# A Prime layer composed into another architecture (a Multi-Encoder branch, the Multi-Pass encoder): the options it
# takes there, with their defaults; the other Prime options keep the Unified Transformer's defaults.
PRIME_LAYER_OPTIONS = dict(use_convolution=True, conv_kernel_sizes=[3, 15], conv_weight_dropout=0.1)
PRIME_LAYER_FIXED = dict(
    shared_projection=True, input_dropout=0.0, mask_padding_before_conv=True, fuse_projections_for_inference=True
)


LAYER_TYPES = ("transformer", "prime")


def layer_spec_with_defaults(spec):
    """A layer spec of a composing config (`{"type": "transformer"}`, `{"type": "prime", ...}`; None is the
    architecture's own Transformer layer) with the Prime defaults filled in; anything else is returned as it is,
    for `check_layer_spec` to reject."""
    if spec is None:
        return {"type": "transformer"}
    if isinstance(spec, dict) and spec.get("type") == "prime":
        return {"type": "prime", **copy.deepcopy(PRIME_LAYER_OPTIONS), **spec}
    return spec


def check_layer_spec(where: str, spec, normalize_before: bool) -> None:
    """Validates a layer spec (`layer_spec_with_defaults`); `where` names the config field."""
    if not isinstance(spec, dict) or spec.get("type") not in LAYER_TYPES:
        raise ValueError(f"{where} must be a dict with `type` in {LAYER_TYPES}, got {spec!r}")
    allowed = {"type"} | (set(PRIME_LAYER_OPTIONS) if spec["type"] == "prime" else set())
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ValueError(f"{where} ({spec['type']}) has unknown options {unknown}; options: {sorted(allowed)}")
    if spec["type"] == "prime":
        check_prime_layer_options(f"{where} (prime)", spec, normalize_before)


def check_prime_layer_options(where: str, options: dict, normalize_before: bool) -> None:
    """Validates the options of a composed Prime layer (`PRIME_LAYER_OPTIONS`); `where` names the config field."""
    if normalize_before:
        raise ValueError(
            f"{where} and `normalize_before=True` do not combine: Prime layers are post-norm (one LayerNorm per "
            "layer); use `normalize_before=False` or Transformer layers"
        )
    if not isinstance(options["use_convolution"], bool):
        raise ValueError(f"{where}: `use_convolution` must be a bool, got {options['use_convolution']!r}")
    sizes = options["conv_kernel_sizes"]
    if (
        not isinstance(sizes, list)
        or not sizes
        or len(set(sizes)) != len(sizes)
        or any(not isinstance(k, int) or isinstance(k, bool) or k <= 0 or k % 2 == 0 for k in sizes)
    ):
        raise ValueError(f"{where}: `conv_kernel_sizes` must list distinct positive odd integers, got {sizes!r}")
    rate = options["conv_weight_dropout"]
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
        raise ValueError(f"{where}: `conv_weight_dropout` must be in [0, 1), got {rate!r}")


@register_architecture_options
@strict
class UnifiedTransformerConfig(MTConfig):
    r"""
    Configuration of a [`UnifiedTransformerForConditionalGeneration`]: a stack of *Prime* layers in which
    self-attention, a dynamic depthwise convolution and the FFN (and, in the decoder, cross-attention) read the same
    input in parallel and are summed onto one residual followed by one LayerNorm (Eq. 1 and 4 of Zhao et al.).

    The defaults are the paper's base model (12+12 layers, d 384, FFN 768, 4 heads, kernels {3, 15}). Besides the
    fields of [`MTConfig`]:

    Args:
        init_law (`str`): `"km"` by default, the authors' `init_method='km'` (see [`MTConfig`]).
        use_convolution (`bool`): Prime (True) or Prime-simple (False, Eq. 1: attention + FFN only).
        conv_kernel_sizes (`list[int]`): Odd kernel widths of the convolution cells, mixed by a softmax gate over
            learned scalars (Eq. 7). One entry gives a single-kernel Prime.
        shared_projection (`bool`): The convolution runs on the attention's value projection and generates its kernels
            from it (Shared Projection, §2 and §4.2). False gives the paper's *Separate Projection* ablation (its own
            value projection W_1^C).
        conv_weight_dropout (`float`): DropConnect on the generated kernels (0.1 in the authors' code).
        input_dropout (`float`): Dropout on the attention/convolution input only (the FFN reads the clean input).
        mask_padding_before_conv (`bool`): Zero padded positions before the convolution. The authors' runs did not
            (`dynamic_padding=0`), which lets padding leak into real positions near the boundary; we do by default
            so that a sentence's encoding does not depend on the batch (deliberate deviation).
        fuse_projections_for_inference (`bool`): `generate()` computes all input projections of a layer as one
            matrix and all output projections as another (§3.3.1), built from the current weights at its start and
            dropped at its end (`model.fuse_projections()` does it for other inference forwards). Same outputs within
            float tolerance; layers whose projections are not plain `nn.Linear` (e.g. quantised) stay unfused.
    """

    model_type = "unified_transformer"

    init_law: str = "km"
    d_model: int = 384
    encoder_layers: int = 12
    decoder_layers: int = 12
    encoder_attention_heads: int = 4
    decoder_attention_heads: int = 4
    encoder_ffn_dim: int = 768
    decoder_ffn_dim: int = 768
    dropout: float | int = 0.3
    use_convolution: bool = True
    conv_kernel_sizes: list[int] | None = None
    shared_projection: bool = True
    conv_weight_dropout: float | int = 0.1
    input_dropout: float | int = 0.0
    mask_padding_before_conv: bool = True
    fuse_projections_for_inference: bool = True

    def __post_init__(self, **kwargs):
        if self.conv_kernel_sizes is None:
            self.conv_kernel_sizes = [3, 15]
        super().__post_init__(**kwargs)

    def validate_architecture_options(self):
        super().validate_architecture_options()
        if self.normalize_before:
            raise ValueError("`normalize_before` must be False: Prime layers are post-norm (one LayerNorm per layer)")
        if self.decoder_attention_type != "self":
            raise ValueError(
                f"`decoder_attention_type={self.decoder_attention_type!r}` does not combine with the Unified "
                "Transformer: its Prime decoder layer runs self-attention, convolution, cross-attention and FFN in "
                "parallel, with no separate self-attention sublayer to replace; use 'self'"
            )
        for name in ("conv_weight_dropout", "input_dropout"):
            _check_probability(self, name)
        if self.use_convolution:
            if not self.conv_kernel_sizes:
                raise ValueError("`conv_kernel_sizes` must list at least one kernel size when `use_convolution=True`")
            for size in self.conv_kernel_sizes:
                if not isinstance(size, int) or size <= 0 or size % 2 == 0:
                    raise ValueError(
                        f"`conv_kernel_sizes` must hold positive odd integers, got {self.conv_kernel_sizes}"
                    )
            if len(set(self.conv_kernel_sizes)) != len(self.conv_kernel_sizes):
                raise ValueError(f"`conv_kernel_sizes` has repeated sizes: {self.conv_kernel_sizes}")


__all__ = ["UnifiedTransformerConfig"]
