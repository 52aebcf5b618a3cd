# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Named model sizes: the papers' settings and tiny ones for tests.

`get_config("unified_transformer", "base", vocab_size=8000)` returns a ready config; keyword overrides win.
"""

import re
from dataclasses import fields

from huggingface_hub.errors import StrictDataclassFieldValidationError
from transformers import AutoConfig, PreTrainedConfig


def shape(d_model: int, layers: int, heads: int, ffn_dim: int) -> dict[str, int]:
    """The size of a symmetric encoder-decoder: width, layers per stack, heads, FFN width."""
    return dict(
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
    )


# Every preset below is one of these bases plus what its paper (or its use) changes, as fairseq's and torchtune's
# model builders write theirs.
#
# `TINY`: unit tests, a few thousand parameters.
TINY = shape(32, 2, 4, 64)
# `SMALL`: CPU demonstrations and the ablation study, one width, depth and FFN width for every architecture. Parameter
# counts at an 8k vocabulary: 9.4M (Transformer-shaped: Prime-simple, MPT, 1-unit MUTE, single-encoder), 10.1M (Prime:
# + the convolution's output half and kernel generators), 10.4M (Deep Transformer: separate source/target
# embeddings), 10.5M (dual Multi-Encoder: + the Static Expansion branch); MUTE's extra units (18.9M with 4) and MPT's
# passes (no parameters) are what those papers add.
SMALL = dict(shape(256, 4, 4, 1024), dropout=0.1, max_position_embeddings=512)
# `BASE`: Transformer-base (Vaswani et al. 2017), the starting point of four of the five papers.
BASE = shape(512, 6, 8, 2048)


def _multi_encoder_presets() -> dict[str, dict]:
    """The Multi-Encoder Transformer (Heterogeneous Encoders Scaling), Tables 7-8: Single = B, Dual = B+S, Triple =
    B+S+L, Quadruple = B+S+L+C, Quintuple = B+S+L+C+F (B self-attention, S Static Expansion, L LSTM, C ConvS2S, F FNet).

    Unprefixed: the Sk-En / En-Vi / En-It setting, a Transformer base (d 512, 8 heads, FFN 2048, 6+6 layers) plus
    M=12 Static Expansion, Q=18 LSTM, U=6 ConvS2S and V=6 FNet layers; the FNet FFN width 4096 is inferred from Table 8
    (docs/architectures.md §4). `lowres-`: the Gl-En / Sp-En setting of Table 7 (N=3, M=Q=U=V=6); the 3-layer decoder
    and the FNet FFN width 2048 are inferred from Table 8, whose low-resource row does not reconcile otherwise.
    `tiny-`: the same structures at unit-test size; `tiny` is the tiny quintuple (all five branches).
    Sources are limited to 256 tokens, the length of the FNet transform."""
    branch_types = ("self_attention", "static_expansion", "lstm", "convs2s", "fnet")
    structures = ("single", "dual", "triple", "quadruple", "quintuple")  # the first 1, 2, ... 5 branches

    def family(prefix: str, sizes: dict, branch_layers: tuple[int, ...], fnet_ffn_dim: int) -> dict[str, dict]:
        branches = [dict(type=kind, layers=layers) for kind, layers in zip(branch_types, branch_layers)]
        branches[-1]["ffn_dim"] = fnet_ffn_dim
        return {prefix + name: dict(sizes, encoder_branches=branches[: i + 1]) for i, name in enumerate(structures)}

    # the paper's recipe: Vaswani et al.'s initialisation
    base = dict(BASE, dropout=0.1, max_position_embeddings=256, init_law="xavier")
    tiny = dict(TINY, dropout=0.1, max_position_embeddings=128)
    presets = {
        **family("", base, (6, 12, 18, 6, 6), fnet_ffn_dim=4096),
        **family("lowres-", dict(base, encoder_layers=3, decoder_layers=3), (3, 6, 6, 6, 6), fnet_ffn_dim=2048),
        **family("tiny-", tiny, (2, 2, 2, 2, 2), fnet_ffn_dim=64),
    }
    presets["tiny"] = presets["tiny-quintuple"]
    # The names every architecture has, for the paper's recommended Dual encoder (B+S, the only configuration better
    # than the Transformer on all five tasks): `base` at the En-Vi size, `small` at the width of the other `small`
    # presets (the CPU demonstrations), with the paper's 1:2 ratio of self-attention to Static Expansion layers.
    presets["base"] = presets["dual"]
    # `small`: 4 Static Expansion layers beside the 4 self-attention layers (1:1 instead of the paper's 1:2, which
    # would add 23% parameters instead of 11% to the single encoder; see `SMALL`).
    presets["small"] = dict(
        SMALL,
        encoder_branches=[dict(type="self_attention", layers=4), dict(type="static_expansion", layers=4)],
        init_law="pytorch",
    )  # learns within short CPU schedules (see the config's docs)
    presets["small-single"] = dict(presets["small"], encoder_branches=[dict(type="self_attention", layers=4)])
    # Composition, the `prime-dual` family (B+P): a Prime encoder (Zhao et al.'s layers, kernels 3/15) as the second
    # branch instead of Static Expansion, as many Prime layers as self-attention layers. `small` is the study's arm
    # (stage 4, H4: the best composition of the study); `base` is Transformer-base with 6 Prime layers beside it.
    prime = dict(type="prime", layers=4, conv_kernel_sizes=[3, 15])
    presets["small-prime-dual"] = dict(
        presets["small"], encoder_branches=[dict(type="self_attention", layers=4), prime]
    )
    presets["base-prime-dual"] = dict(
        presets["base"], encoder_branches=[dict(type="self_attention", layers=6), dict(prime, layers=6)]
    )
    presets["tiny-prime-dual"] = dict(
        presets["tiny-dual"],
        encoder_branches=[dict(type="self_attention", layers=2), dict(prime, layers=2, conv_kernel_sizes=[3, 5])],
    )
    return presets


def _deep_transformer_presets() -> dict[str, dict]:
    """Zhang et al. 2019 (DS-Init + merged attention), §7.2 and Tables 3/6. Every preset is the paper's proposed model:
    post-norm, DS-Init (α = 1) and merged attention; the baselines are overrides (`init_law="xavier"`,
    `decoder_attention_type="self"`, `normalize_before=True` for T2T). base: d 512, FFN 2048, 8 heads,
    dp_r = dp_a = 0.1; deep-N: N+N layers with dp_r 0.3, dp_a 0.2 (the 12- and 20-layer setting, also used for 30);
    big: d 1024, FFN 4096, 16 heads, dp_r 0.3, dp_a 0.1."""
    deep = dict(BASE, dropout=0.3, attention_dropout=0.2)
    big = dict(shape(1024, 6, 16, 4096), dropout=0.3, attention_dropout=0.1)
    return {
        "tiny": dict(TINY, max_position_embeddings=128),
        # CPU demonstrations: `small` is the family's 4+4; `deep-small` the same width at 12+12, a depth where
        # post-norm without DS-Init is known to struggle (the CPU setting of the DS-Init ablation).
        "small": dict(SMALL),
        "deep-small": dict(SMALL, encoder_layers=12, decoder_layers=12),
        "base": dict(BASE, dropout=0.1, attention_dropout=0.1),
        **{f"deep-{n}": dict(deep, encoder_layers=n, decoder_layers=n) for n in (12, 20, 30)},
        "big": big,
        **{f"big-deep-{n}": dict(big, encoder_layers=n, decoder_layers=n) for n in (12, 20)},
    }


def _multi_unit_presets() -> dict[str, dict]:
    """Yan et al. 2020 (Multi-Unit Transformer): Transformer-Base (6+6 layers, d 512, FFN 2048, 8 heads, pre-norm) with
    4-unit encoder layers and relative positions (k 16); dropout 0.1 (the paper: 0.4 NIST, 0.2 WMT14, 0.1 WMT18),
    label smoothing 0.1. "base" = MUTE (identical units), "base-bias" = + Bias, "base-bias-seq" = + Bias + Seq.,
    "base-relative" = the one-unit "Transformer + Relative" baseline."""
    base = dict(
        BASE,
        dropout=0.1,
        activation_dropout=0.1,
        attention_dropout=0.0,
        num_units=4,
        relative_attention_max_distance=16,
        label_smoothing=0.1,
    )
    presets = {
        # Unit tests: k = 4 so that short test sentences exercise the clipping of relative distances.
        "tiny": dict(
            TINY,
            max_position_embeddings=128,
            dropout=0.1,
            activation_dropout=0.1,
            num_units=4,
            relative_attention_max_distance=4,
        ),
        "small": dict(SMALL, activation_dropout=0.1, num_units=4, label_smoothing=0.1),
        "base": base,
        "base-bias": dict(base, use_bias_module=True),
        "base-bias-seq": dict(base, use_bias_module=True, use_sequential_dependency=True),
        "base-relative": dict(base, num_units=1),
    }
    # Composition: Prime layers (Zhao et al., kernels 3/15) as the units, which makes the model post-norm.
    prime = dict(type="prime", conv_kernel_sizes=[3, 15])
    presets["small-prime-units"] = dict(presets["small"], unit_layer=prime, normalize_before=False)
    presets["tiny-prime-units"] = dict(
        presets["tiny"], unit_layer=dict(prime, conv_kernel_sizes=[3, 5]), normalize_before=False
    )
    return presets


def _unified_transformer_presets() -> dict[str, dict]:
    """Zhao et al.: base (IWSLT), 12+12 Prime layers, d 384, FFN 768, 4 heads, kernels {3, 15}, dropout 0.4; big (WMT
    En-De), d 768, FFN 3072, 16 heads, dropout 0.3, attention and input dropout 0.1. `-simple`: Prime-simple, the
    layer without the convolution."""
    base = dict(shape(384, 12, 4, 768), dropout=0.4)
    big = dict(shape(768, 12, 16, 3072), dropout=0.3, attention_dropout=0.1)
    return {
        "tiny": dict(TINY, conv_kernel_sizes=[3, 5], max_position_embeddings=128, dropout=0.1),
        "small": dict(SMALL),  # the README's main command narrows it further
        "base": dict(base, attention_dropout=0.0, input_dropout=0.0, conv_weight_dropout=0.1),
        "base-simple": dict(base, use_convolution=False),
        "big": dict(big, input_dropout=0.1, conv_weight_dropout=0.1),
        "big-simple": dict(big, use_convolution=False),
    }


def _multi_pass_presets() -> dict[str, dict]:
    """Gao et al. (WMT14): Transformer base 6+6, d 512, FFN 2048, 8 heads, post-norm, dropout 0.1, two passes, routing
    pattern (a). "base": the default MPT [0..5]; "base-searched": the best permutation of the random search,
    [0, 4, 1, 5, 2, 3]; "base-soft": soft connections (Eq. 6)."""
    base = dict(BASE, dropout=0.1, num_passes=2)
    return {
        # Unit tests: 3 encoder layers, so that hard connections have non-trivial permutations.
        "tiny": dict(TINY, encoder_layers=3, max_position_embeddings=128, dropout=0.1, num_passes=2),
        "small": dict(SMALL, num_passes=2),
        "base": dict(base, attention_dropout=0.0, activation_dropout=0.0),
        "base-searched": dict(base, hard_connections=[0, 4, 1, 5, 2, 3]),
        "base-soft": dict(base, connection_type="soft"),
    }


PRESETS: dict[str, dict[str, dict]] = {
    "unified_transformer": _unified_transformer_presets(),
    "multi_encoder_transformer": _multi_encoder_presets(),
    "multi_pass_transformer": _multi_pass_presets(),
    "deep_transformer": _deep_transformer_presets(),
    "multi_unit_transformer": _multi_unit_presets(),
}

# MarianMTModel sizes for the Transformer baseline (`training/train.py --arch marian`), on the same bases; `base` is
# Transformer-base. `MARIAN_COMMON`: the settings every size shares (post-norm ReLU Transformer, shared and tied
# embeddings, scaled embeddings).
MARIAN_PRESETS: dict[str, dict[str, int]] = {
    "tiny": shape(64, 2, 4, 256),
    "small": shape(256, 4, 4, 1024),  # the `small` family's shape (`SMALL`)
    "base": dict(BASE),
}
MARIAN_COMMON = dict(
    activation_function="relu",
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    scale_embedding=True,
    share_encoder_decoder_embeddings=True,
    tie_word_embeddings=True,
)


def available_presets(arch: str | None = None) -> dict[str, list[str]]:
    """Preset names per architecture (or for one)."""
    if arch is not None:
        return {arch: sorted(_presets_for(arch))}
    return {name: sorted(presets) for name, presets in PRESETS.items()}


def _presets_for(arch: str) -> dict[str, dict]:
    if arch not in PRESETS:
        raise ValueError(f"Unknown architecture {arch!r}; known: {sorted(PRESETS)}")
    return PRESETS[arch]


def get_config(arch: str, preset: str = "base", **overrides) -> PreTrainedConfig:
    """Config of architecture `arch` (its `model_type`) at the named size, with `overrides` applied.

    A value of the wrong type raises `ValueError` naming the field, as a bad value does."""
    presets = _presets_for(arch)
    if preset not in presets:
        raise ValueError(f"Unknown preset {preset!r} for {arch}; known: {sorted(presets)}")
    values = dict(presets[preset])
    values.update(overrides)
    try:
        return AutoConfig.for_model(arch, **values)
    except StrictDataclassFieldValidationError as error:
        raise ValueError(_type_error_message(arch, values, error)) from error


def _type_error_message(arch: str, values: dict, error: StrictDataclassFieldValidationError) -> str:
    """One line naming the field, the type it takes and the value given, for huggingface_hub's multi-line
    strict-dataclass error."""
    match = re.match(r"Validation error for field '(\w+)'", str(error))
    field = match.group(1) if match else None
    config_class = AutoConfig.for_model(arch).__class__
    annotation = next((f.type for f in fields(config_class) if f.name == field), None)
    if annotation is None or field not in values:
        return " ".join(str(error).split())
    expected = annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")
    return f"`{field}` of {config_class.__name__} must be of type {expected}, got {values[field]!r}"
