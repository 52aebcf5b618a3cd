# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Configuration of the Multi-Pass Transformer (Gao et al., "Multi-Pass Transformer for Machine
Translation", MPT)."""

from huggingface_hub.dataclasses import strict

from .configuration_mt_common import MTConfig, _check_positive, check_used, register_architecture_options
from .configuration_unified_transformer import PRIME_LAYER_OPTIONS, check_layer_spec, layer_spec_with_defaults


CONNECTION_TYPES = ("hard", "soft")
ROUTING_PATTERNS = ("a", "b", "c", "d")
TRAINING_OBJECTIVES = ("last", "sum", "random")
SOFT_CONNECTION_INITS = ("uniform", "identity")


@register_architecture_options
@strict
class MultiPassTransformerConfig(MTConfig):
    r"""
    Configuration of a [`MultiPassTransformerForConditionalGeneration`]: a standard Transformer whose encoder stack is
    run `num_passes` times with the same weights. Every pass starts again from the source embeddings, and the input of
    layer k of a pass receives a connection c_k from the layers of the previous pass (§3.2, Eq. 6 of Gao et al.). The
    decoder is a standard Transformer decoder reading the output of one pass.

    The defaults are the paper's setting: Transformer base (6+6 layers, d 512, FFN 2048, 8 heads, post-norm, dropout
    0.1), two passes, hard connections [0, 1, ..., N-1], routing pattern (a). Besides the fields of [`MTConfig`]:

    Args:
        encoder_layer (`dict`, *optional*): The layer the passes run: `{"type": "transformer"}` (default, the paper)
            or, a composition, `{"type": "prime", ...}`: the Unified Transformer's Prime encoder layer (Zhao et al.;
            options `use_convolution`, `conv_kernel_sizes`, `conv_weight_dropout`, defaults `True`, `[3, 15]`, 0.1).
            A Prime layer has no state between its sublayers, so it takes routing pattern (a) only, and post-norm.
        num_passes (`int`): Passes P of the encoder stack (2 in the paper; 1 is a plain Transformer encoder).
        connection_type (`str`): `"hard"`: layer k of a pass receives the output of layer `hard_connections[k]` of the
            previous pass; `"soft"`: it receives sum_j alpha_kj S_j with alpha = softmax over learned logits, one row
            per layer (Eq. 6; adds encoder_layers² parameters when `num_passes > 1`).
        hard_connections (`list[int]`, *optional*): The permutation tau of [0, ..., encoder_layers-1] for hard
            connections (the paper's best on WMT14 En-De: [0, 4, 1, 5, 2, 3]). Defaults to the identity, the paper's
            default MPT. Only for `connection_type="hard"`.
        soft_connection_init (`str`): Initial soft weights: `"uniform"` (zero logits, alpha_kj = 1/N; the paper does
            not say) or `"identity"` (alpha_kk = 0.99: starts close to the default hard pattern).
        routing_pattern (`str`): Where the connection enters and what it carries (Figure 4): `"a"` (default, used for
            all the paper's results): the output S_j of an inner layer is added to the outer layer's input, before the
            residual branch point, so it also travels along the residual stream; `"b"`: S_j is added to the
            self-attention sublayer's input only, after the branch point (the residual path carries the layer input
            alone); `"c"` / `"d"`: as `"a"` / `"b"` but carrying S_j^mid, the state after the self-attention
            sublayer, instead of the layer output.
        training_objective (`str`): What training minimises (§3.2): `"last"`: the loss of the decoder reading the
            last pass (the paper's main setting); `"sum"`: the sum of the losses of the decoder reading each pass
            (one decoder run per pass; the model must receive `labels`, which a Trainer with label smoothing or
            `TokenBatchSeq2SeqTrainer` keeps to itself); `"random"`: at every training step the decoder reads one pass
            drawn uniformly (only that many passes are computed; works with any Trainer). "sum" and "random" make the
            earlier passes usable on their own.
        inference_pass (`int`, *optional*): Pass (1-based) whose output the decoder reads in evaluation mode when the
            call does not choose one with `encoder_pass=`; defaults to the last. Reading pass p < P runs only p passes:
            a cheaper translation from the same weights.
        init_law (`str`): `"fairseq"` by default, fairseq's Transformer initialisation, which the paper trained with
            (see [`MTConfig`]), or `"pytorch"`, the package's shared law. The two give one network the same function
            at different starting points.
    """

    model_type = "multi_pass_transformer"
    spec_options = {"encoder_layer": {"prime": tuple(PRIME_LAYER_OPTIONS)}}

    num_passes: int = 2
    connection_type: str = "hard"
    hard_connections: list[int] | tuple[int, ...] | None = None
    soft_connection_init: str = "uniform"
    routing_pattern: str = "a"
    training_objective: str = "last"
    inference_pass: int | None = None
    init_law: str = "fairseq"
    encoder_layer: dict | None = None

    def __post_init__(self, **kwargs):
        self.encoder_layer = layer_spec_with_defaults(self.encoder_layer)
        if self.hard_connections is None and self.connection_type == "hard":
            self.hard_connections = list(range(self.encoder_layers))  # the paper's default MPT, alpha = delta
        elif isinstance(self.hard_connections, tuple):  # e.g. straight from itertools.permutations
            self.hard_connections = list(self.hard_connections)
        super().__post_init__(**kwargs)

    def validate_architecture_options(self):
        super().validate_architecture_options()
        _check_positive(self, "num_passes")
        for name, allowed in (
            ("connection_type", CONNECTION_TYPES),
            ("routing_pattern", ROUTING_PATTERNS),
            ("training_objective", TRAINING_OBJECTIVES),
            ("soft_connection_init", SOFT_CONNECTION_INITS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {allowed}, got {getattr(self, name)!r}")
        self._validate_encoder_layer()
        if self.connection_type == "hard":
            check_permutation(self.hard_connections, self.encoder_layers)
        elif self.hard_connections is not None:
            raise ValueError("`hard_connections` is only used with `connection_type='hard'`; leave it unset for 'soft'")
        check_used(
            self,
            "soft_connection_init",
            self.connection_type == "soft" and self.num_passes > 1,
            "only soft connections between passes (`connection_type='soft'`, `num_passes` > 1) read it",
        )
        if self.inference_pass is not None:
            check_pass(self.inference_pass, self.num_passes, "inference_pass")

    def _validate_encoder_layer(self) -> None:
        check_layer_spec("`encoder_layer`", self.encoder_layer, self.normalize_before)
        if self.encoder_layer["type"] == "prime":
            if self.routing_pattern != "a":
                raise ValueError(
                    f"`encoder_layer` (prime) and `routing_pattern={self.routing_pattern!r}` do not combine: patterns "
                    "(b)-(d) route through the state between self-attention and FFN, which a Prime layer (parallel "
                    "sublayers) does not have; use `routing_pattern='a'`"
                )


def check_permutation(connections, num_layers: int) -> None:
    """A hard connection pattern must be a permutation of [0, ..., num_layers-1] (§3.2: every outer layer receives
    exactly one inner layer, and no two outer layers the same one)."""
    if not isinstance(connections, (list, tuple)) or not all(
        isinstance(j, int) and not isinstance(j, bool) for j in connections
    ):
        raise ValueError(f"`hard_connections` must be a list of layer indices, got {connections!r}")
    if len(connections) != num_layers:
        raise ValueError(
            f"`hard_connections` must have one entry per encoder layer ({num_layers}), got {len(connections)}: "
            f"{list(connections)}"
        )
    if sorted(connections) != list(range(num_layers)):
        raise ValueError(
            f"`hard_connections` must be a permutation of 0..{num_layers - 1} (each inner layer feeds exactly one "
            f"outer layer), got {list(connections)}"
        )


def check_pass(value, num_passes: int, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= num_passes:
        raise ValueError(f"`{name}` must be a pass number from 1 to num_passes={num_passes}, got {value!r}")


__all__ = ["MultiPassTransformerConfig"]
