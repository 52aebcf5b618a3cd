# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Named model sizes: the papers' settings and tiny ones for tests.

`get_config("unified_transformer", "base", vocab_size=8000)` returns a ready config; keyword overrides win.
"""

from transformers import AutoConfig, PreTrainedConfig


PRESETS: dict[str, dict[str, dict]] = {
    "unified_transformer": {
        # Unit tests: a few thousand parameters.
        "tiny": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, conv_kernel_sizes=[3, 5],
                     max_position_embeddings=128, dropout=0.1),
        # The CPU demonstration of the README's main command.
        "small": dict(d_model=256, encoder_layers=4, decoder_layers=4, encoder_attention_heads=4,
                      decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, dropout=0.1,
                      max_position_embeddings=512),
        # Paper 000 base (IWSLT): 12+12 Prime layers, d 384, FFN 768, 4 heads, kernels {3, 15}, dropout 0.4.
        "base": dict(d_model=384, encoder_layers=12, decoder_layers=12, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=768, decoder_ffn_dim=768, dropout=0.4,
                     attention_dropout=0.0, input_dropout=0.0, conv_weight_dropout=0.1),
        "base-simple": dict(d_model=384, encoder_layers=12, decoder_layers=12, encoder_attention_heads=4,
                            decoder_attention_heads=4, encoder_ffn_dim=768, decoder_ffn_dim=768, dropout=0.4,
                            use_convolution=False),
        # Paper 000 big (WMT En-De): d 768, FFN 3072, 16 heads, dropout 0.3, attention/input dropout 0.1.
        "big": dict(d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                    decoder_attention_heads=16, encoder_ffn_dim=3072, decoder_ffn_dim=3072, dropout=0.3,
                    attention_dropout=0.1, input_dropout=0.1, conv_weight_dropout=0.1),
        "big-simple": dict(d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                           decoder_attention_heads=16, encoder_ffn_dim=3072, decoder_ffn_dim=3072, dropout=0.3,
                           attention_dropout=0.1, use_convolution=False),
    },
}


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
    """Config of architecture `arch` (its `model_type`) at the named size, with `overrides` applied."""
    presets = _presets_for(arch)
    if preset not in presets:
        raise ValueError(f"Unknown preset {preset!r} for {arch}; known: {sorted(presets)}")
    return AutoConfig.for_model(arch, **{**presets[preset], **overrides})
