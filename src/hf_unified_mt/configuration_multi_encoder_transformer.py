# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the Multi-Encoder Transformer ("Heterogeneous Encoders Scaling in the Transformer for
Neural Machine Translation").

The encoder is a list of *branches*, each a stack of layers of one kind reading the same source embedding; their
outputs are summed (or concatenated and projected) into the memory of one standard Transformer decoder.
"""

import copy
import difflib

from huggingface_hub.dataclasses import strict

from .configuration_mt_common import ACTIVATIONS, MTConfig, register_architecture_options
from .configuration_unified_transformer import PRIME_LAYER_OPTIONS, check_prime_layer_options


# Expansion sizes of the Static Expansion layers (§3.1 of the paper): layer i has N_i = sizes[i mod len(sizes)] vectors.
DEFAULT_EXPANSION_SIZES = [6, 6, 12, 8, 12, 8, 6, 6, 12, 8, 12, 8]

# The five encoding methods of the paper, with the options each accepts besides `type` and `layers`.
BRANCH_OPTIONS: dict[str, tuple[str, ...]] = {
    "self_attention": (),
    "static_expansion": ("expansion_sizes", "expansion_mode", "sequence_aware_expansion", "dropout"),
    "lstm": ("dropout",),
    "convs2s": ("kernel_size", "conv_dim", "dropout"),
    "fnet": ("ffn_dim", "activation", "fft_length", "dropout"),
    # Composition: the Unified Transformer's Prime layers (Zhao et al.) as a branch.
    "prime": tuple(PRIME_LAYER_OPTIONS),
}
# The paper's letters (Tables 6-7): B = self-attention (the Base encoder), S, L, C, F; P = Prime (composition).
BRANCH_LETTERS = {
    "self_attention": "B",
    "static_expansion": "S",
    "lstm": "L",
    "convs2s": "C",
    "fnet": "F",
    "prime": "P",
}
EXPANSION_MODES = ("per_layer", "block")
COMBINATIONS = ("sum", "concat")


@register_architecture_options
@strict
class MultiEncoderTransformerConfig(MTConfig):
    r"""
    Configuration of a [`MultiEncoderTransformerForConditionalGeneration`]: heterogeneous encoder branches over one
    shared source embedding (token embedding x sqrt(d) + sinusoidal positions + dropout), combined into the memory of a
    standard Transformer decoder (§3.2 of the paper).

    The defaults are the paper's *single* encoder (a Transformer base: one self-attention branch of `encoder_layers`
    layers). Besides the fields of [`MTConfig`]:

    Args:
        encoder_branches (`list[dict]`, *optional*):
            One spec per branch, in order: `{"type": <kind>, "layers": <int>, **options}`. A missing `layers` takes
            `encoder_layers`; missing options take the defaults below, filled in when the config is created (so a saved
            `config.json` states every branch completely). Kinds and options:

            - `"self_attention"`: standard Transformer encoder layers (self-attention + FFN), sized by
              `encoder_attention_heads` / `encoder_ffn_dim`, post- or pre-norm as `normalize_before`.
            - `"static_expansion"`: ExpansionNet static expansion layers, pre-norm, without FFN.
              `expansion_sizes` (default `[6, 6, 12, 8, 12, 8, 6, 6, 12, 8, 12, 8]`): layer i uses
              `expansion_sizes[i % len]` expansion vectors (`expansion_mode="per_layer"`), or every layer uses all the
              sizes as groups of one block (`"block"`, ExpansionNet v2). `sequence_aware_expansion` (default False):
              our reading of the lost Eq. (5) (see the modeling file). `dropout` (default `dropout`).
            - `"lstm"`: a uni-directional stacked LSTM (hidden size `d_model`), no residual, final LayerNorm;
              `dropout` between layers (default `dropout`).
            - `"convs2s"`: ConvS2S encoder layers (weight-normalised convolution, GLU, residual x sqrt(0.5), no
              normalisation) between input/output projections; `kernel_size` (odd, default 3), `conv_dim` (default
              `d_model`), `dropout` (default `dropout`).
            - `"fnet"`: FNet layers (Fourier mixing + FFN, post-norm); `ffn_dim` (default `encoder_ffn_dim`),
              `activation` (default `"gelu"`, as FNet), `fft_length` (default `max_position_embeddings`, at least
              that): the length the sequence axis is zero-padded to before the Fourier transform, fixed so that a
              sentence's encoding does not depend on the padding of its batch. `dropout` (default `dropout`).
            - `"prime"` (composition, not in the paper): the Unified Transformer's Prime encoder layers (Zhao et al.:
              self-attention, dynamic convolution and FFN in parallel on one residual, one post-LayerNorm), sized by
              `encoder_attention_heads` / `encoder_ffn_dim`; `use_convolution` (default True), `conv_kernel_sizes`
              (odd, default `[3, 15]`), `conv_weight_dropout` (default 0.1). Post-norm only.

            Default: `[{"type": "self_attention", "layers": encoder_layers}]`.
        branch_combination (`str`): `"sum"` (the paper) or `"concat"` (concatenation followed by a linear projection
            back to `d_model`).
        encoder_layers (`int`): Default depth of a branch spec without `layers`.
        init_law (`str`): Law of the linear layers (self-attention, FFN, Static Expansion projections, decoder; see
            [`MTConfig`]): `"pytorch"` by default, the package's shared law, or `"xavier"`, the Transformer
            initialisation the paper adopts (its presets `base`/`lowres-` use it). Deviation: with Xavier a post-norm
            model of the `small` preset stays on the unigram plateau much longer in short schedules, so `small` uses
            the shared law; with the paper's long schedules either works. The ConvS2S, LSTM and expansion-vector laws
            do not change.
    """

    model_type = "multi_encoder_transformer"
    spec_options = {"encoder_branches": BRANCH_OPTIONS}

    # `list` rather than `list[dict]`: a malformed entry then gets our ValueError naming it, not a strict type error.
    encoder_branches: list | None = None
    branch_combination: str = "sum"

    def __post_init__(self, **kwargs):
        self.encoder_branches = self._complete_branch_specs(self.encoder_branches)
        super().__post_init__(**kwargs)

    # ------------------------------------------------------------------ branch specs
    def _complete_branch_specs(self, specs: list[dict] | None) -> list[dict]:
        """Copies the specs (presets and callers keep theirs untouched) and fills in the defaults. Entries that are
        malformed are copied as they are, for `validate_architecture_options` to report."""
        if specs is None:
            specs = [{"type": "self_attention"}]
        completed = []
        for spec in specs:
            spec = copy.deepcopy(spec)
            if isinstance(spec, dict) and spec.get("type") in BRANCH_OPTIONS:
                defaults = {"type": spec["type"], "layers": self.encoder_layers, **self.branch_defaults(spec["type"])}
                spec = {**defaults, **spec}
            completed.append(spec)
        return completed

    def branch_defaults(self, branch_type: str) -> dict:
        """Default options of a branch kind, from the shared fields."""
        return {
            "self_attention": {},
            "static_expansion": dict(
                expansion_sizes=list(DEFAULT_EXPANSION_SIZES),
                expansion_mode="per_layer",
                sequence_aware_expansion=False,
                dropout=self.dropout,
            ),
            "lstm": dict(dropout=self.dropout),
            "convs2s": dict(kernel_size=3, conv_dim=self.d_model, dropout=self.dropout),
            "fnet": dict(
                ffn_dim=self.encoder_ffn_dim,
                activation="gelu",
                fft_length=self.max_position_embeddings,
                dropout=self.dropout,
            ),
            "prime": copy.deepcopy(PRIME_LAYER_OPTIONS),
        }[branch_type]

    @property
    def num_encoder_hidden_layers(self) -> int:
        """The encoder returns each branch's output and the combined memory after the shared embedding."""
        return len(self.encoder_branches) + 1

    @property
    def branch_letters(self) -> str:
        """The encoder in the paper's notation, e.g. `"B+S+L"`."""
        return "+".join(BRANCH_LETTERS[spec["type"]] for spec in self.encoder_branches)

    # ------------------------------------------------------------------ validation
    def validate_architecture_options(self):
        super().validate_architecture_options()
        if self.branch_combination not in COMBINATIONS:
            raise ValueError(f"`branch_combination` must be one of {COMBINATIONS}, got {self.branch_combination!r}")
        if not isinstance(self.encoder_branches, list) or not self.encoder_branches:
            raise ValueError(
                f"`encoder_branches` must be a non-empty list of branch specs, got {self.encoder_branches!r}"
            )
        for index, spec in enumerate(self.encoder_branches):
            self._validate_branch(index, spec)

    def _validate_branch(self, index: int, spec) -> None:
        where = f"`encoder_branches[{index}]`"
        if not isinstance(spec, dict):
            raise ValueError(f"{where} must be a dict like {{'type': 'lstm', 'layers': 6}}, got {spec!r}")
        branch_type = spec.get("type")
        if branch_type not in BRANCH_OPTIONS:
            raise ValueError(f"{where} has unknown type {branch_type!r}; expected one of {sorted(BRANCH_OPTIONS)}")
        where = f"{where} ({branch_type})"
        allowed = ("type", "layers") + BRANCH_OPTIONS[branch_type]
        for key in spec:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else f"; options: {sorted(allowed)}"
                raise ValueError(f"{where} has unknown option {key!r}{hint}")

        def positive_int(name):
            value = spec[name]
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{where}: `{name}` must be a positive integer, got {value!r}")

        positive_int("layers")
        if "dropout" in spec and not (
            isinstance(spec["dropout"], (int, float))
            and not isinstance(spec["dropout"], bool)
            and 0.0 <= spec["dropout"] < 1.0
        ):
            raise ValueError(f"{where}: `dropout` must be in [0, 1), got {spec['dropout']!r}")
        if branch_type == "static_expansion":
            sizes = spec["expansion_sizes"]
            if (
                not isinstance(sizes, list)
                or not sizes
                or any(not isinstance(n, int) or isinstance(n, bool) or n <= 0 for n in sizes)
            ):
                raise ValueError(f"{where}: `expansion_sizes` must list positive integers (at least one), got {sizes}")
            if spec["expansion_mode"] not in EXPANSION_MODES:
                raise ValueError(
                    f"{where}: `expansion_mode` must be one of {EXPANSION_MODES}, got {spec['expansion_mode']!r}"
                )
            if not isinstance(spec["sequence_aware_expansion"], bool):
                raise ValueError(
                    f"{where}: `sequence_aware_expansion` must be a bool, got {spec['sequence_aware_expansion']!r}"
                )
        elif branch_type == "convs2s":
            positive_int("kernel_size")
            positive_int("conv_dim")
            if spec["kernel_size"] % 2 == 0:
                raise ValueError(f"{where}: `kernel_size` must be odd (centred convolution), got {spec['kernel_size']}")
        elif branch_type == "prime":
            check_prime_layer_options(where, spec, self.normalize_before)
        elif branch_type == "fnet":
            positive_int("ffn_dim")
            positive_int("fft_length")
            if spec["activation"] not in ACTIVATIONS:
                raise ValueError(f"{where}: `activation` must be one of {ACTIVATIONS}, got {spec['activation']!r}")
            if spec["fft_length"] < self.max_position_embeddings:
                raise ValueError(
                    f"{where}: `fft_length` ({spec['fft_length']}) must be at least `max_position_embeddings` "
                    f"({self.max_position_embeddings}), so that every source the model accepts fits the transform"
                )


__all__ = ["MultiEncoderTransformerConfig"]
