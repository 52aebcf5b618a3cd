# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The initialisation laws of the weight matrices (`config.init_law`), one function per law, and the roles that
modules declare for their matrices.

A module declares the role of each weight matrix it builds, where it builds it (`with_role(nn.Linear(...), role)`):
what kind of matrix it is (an attention's input or output projection, an FFN matrix, an output embedding, another
matrix, or one whose law its module owns), whether its attention is a self- or a cross-attention, and the depth of the
layer that holds it, known from the layer index given at construction. The law then reads only the role and the fans,
never a parameter's name: renaming a projection cannot change how it is drawn. `MTPreTrainedModel._init_weights`
(`modeling_mt_common.py`) is the one hook that calls these functions.

The laws: PyTorch's default (`pytorch_law_`), Xavier-uniform (`xavier_law_`), DS-Init (`ds_init_law_`, Eq. 15 of
Zhang, Titov & Sennrich 2019), fairseq's (`fairseq_law_`), the Unified Transformer authors' `km` (`km_law_`) and
N(0, init_std²) (`normal_law_`). `transformers.initialization` functions leave weights loaded from a checkpoint
untouched.
"""

import dataclasses
import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import initialization as init

from .configuration_mt_common import MTConfig


MATRIX_KINDS = ("attention_input", "attention_output", "ffn", "other", "output_embedding", "own_law")


@dataclasses.dataclass(frozen=True)
class MatrixRole:
    """What an initialisation law needs to know of a weight matrix, declared by the module that builds it.

    kind: `"attention_input"` (query, key, value, or a convolution's input projection), `"attention_output"`, `"ffn"`,
        `"other"` (any other matrix of the model, drawn by its law), `"output_embedding"` (an untied output projection,
        drawn like the embedding it replaces), or `"own_law"` (drawn by `own_law` whatever `init_law`: a paper's own
        law, which the matrix keeps in any composition, as Prime's kernel generators).
    attention: `"self"` or `"cross"` for the attention kinds, else None.
    depth: l = 1..L, the layer of its stack that holds the matrix (None outside the layers).
    own_law: for `"own_law"`, the function that draws the weight of the linear layer it is given.
    """

    kind: str
    attention: str | None = None
    depth: int | None = None
    own_law: Callable[[nn.Linear], None] | None = None

    def __post_init__(self):
        if self.kind not in MATRIX_KINDS:
            raise ValueError(f"`kind` must be one of {MATRIX_KINDS}, got {self.kind!r}")
        if (self.own_law is not None) != (self.kind == "own_law"):
            raise ValueError(f"A matrix of kind 'own_law', and no other, names its law (`own_law`): {self}")
        if (self.attention is not None) != self.kind.startswith("attention"):
            raise ValueError(f"An attention matrix names its attention ('self' or 'cross'), no other does: {self}")
        if self.attention not in (None, "self", "cross"):
            raise ValueError(f"`attention` must be 'self' or 'cross', got {self.attention!r}")


def layer_depth(layer_idx: int | None) -> int | None:
    """The depth l = 1..L of the layer with index `layer_idx` in its stack (None outside the layers)."""
    return None if layer_idx is None else layer_idx + 1


def with_role(linear: nn.Linear, role: MatrixRole) -> nn.Linear:
    """Declares the role of `linear`'s weight matrix (`linear.init_role`) and returns it. The role travels with the
    module object: moving or renaming it keeps its law."""
    linear.init_role = role
    return linear


def attention_projections(
    d_model: int, attention: str, layer_idx: int | None
) -> tuple[nn.Linear, nn.Linear, nn.Linear, nn.Linear]:
    """The query, key, value and output projections (d -> d) of a self- or cross-attention, with their roles."""
    depth = layer_depth(layer_idx)
    inputs = MatrixRole("attention_input", attention, depth)
    output = MatrixRole("attention_output", attention, depth)
    return (
        with_role(nn.Linear(d_model, d_model), inputs),
        with_role(nn.Linear(d_model, d_model), inputs),
        with_role(nn.Linear(d_model, d_model), inputs),
        with_role(nn.Linear(d_model, d_model), output),
    )


def declared_role(linear: nn.Linear) -> MatrixRole:
    """The role `linear` was built with; an undeclared one is an error (its law would otherwise be a guess)."""
    role = getattr(linear, "init_role", None)
    if role is None:
        raise ValueError(
            f"{linear!r} has no declared initialisation role: build it with "
            "`with_role(nn.Linear(...), MatrixRole(...))` (initialization_mt.py), naming its kind, its attention and "
            "its layer's depth"
        )
    return role


# ------------------------------------------------------------------------------------------------ the laws


def uniform_(weight: torch.Tensor, bound: float) -> None:
    init.uniform_(weight, -bound, bound)


def xavier_bound(fan_in: int, fan_out: int) -> float:
    """Glorot & Bengio 2010: U(±sqrt(6 / (fan_in + fan_out)))."""
    return math.sqrt(6.0 / (fan_in + fan_out))


def kaiming_uniform_bound(fan_in: int, slope: float) -> float:
    """He et al. 2015 with leaky-ReLU slope a: U(±sqrt(6 / ((1 + a²) fan_in))); PyTorch's `nn.Linear` default is
    a = sqrt(5), i.e. U(±1/sqrt(fan_in))."""
    return math.sqrt(6.0 / ((1.0 + slope**2) * fan_in))


def xavier_uniform_(weight: torch.Tensor, fan_in: int, fan_out: int) -> None:
    """Xavier-uniform with explicit fans (for a stack `[I, fan_in, fan_out]` of per-unit matrices torch's own fan
    computation would read the stack as a convolution kernel)."""
    uniform_(weight, xavier_bound(fan_in, fan_out))


def fused_qkv_fan_out(fan_out: int, role: MatrixRole, config: MTConfig) -> int:
    """With `init_fused_qkv`, a self-attention's query, key and value are drawn as one d × 3d matrix (Zhang et al.'s
    code), so the Xavier bound sees a fan-out of 3d."""
    if config.init_fused_qkv and role.kind == "attention_input" and role.attention == "self":
        return 3 * fan_out
    return fan_out


def pytorch_law_(weight: torch.Tensor, fan_in: int, fan_out: int, role: MatrixRole, config: MTConfig) -> None:
    """`init_law="pytorch"`: `nn.Linear`'s default, kaiming-uniform with a = sqrt(5), U(±1/sqrt(fan_in))."""
    uniform_(weight, kaiming_uniform_bound(fan_in, math.sqrt(5.0)))


def xavier_law_(weight: torch.Tensor, fan_in: int, fan_out: int, role: MatrixRole, config: MTConfig) -> None:
    """`init_law="xavier"`: Xavier-uniform for every matrix."""
    uniform_(weight, xavier_bound(fan_in, fused_qkv_fan_out(fan_out, role, config)))


def ds_init_scale(config: MTConfig, depth: int | None) -> float:
    """The DS-Init scale s(l) of Zhang, Titov & Sennrich 2019: Eq. 15, s = α/√l (`ds_init_mode="paper"`), or what the
    authors' code computes, TF variance scaling with scale α/√l, whose limit is sqrt(3·scale/fan_avg), i.e.
    s = √α · l^(-1/4) (`"released_code"`). 1 outside the layers."""
    if depth is None:
        return 1.0
    alpha = float(config.ds_init_alpha)
    if config.ds_init_mode == "paper":
        return alpha / math.sqrt(depth)
    return math.sqrt(alpha) * depth**-0.25


def ds_init_law_(weight: torch.Tensor, fan_in: int, fan_out: int, role: MatrixRole, config: MTConfig) -> None:
    """`init_law="ds_init"`: DS-Init, Eq. 15 of Zhang, Titov & Sennrich 2019, W ~ U(±γ·s(l)) with γ the Xavier bound
    and s(l) = `ds_init_scale` of the depth l of the layer that holds the matrix (1 outside the layers)."""
    bound = xavier_bound(fan_in, fused_qkv_fan_out(fan_out, role, config))
    uniform_(weight, bound * ds_init_scale(config, role.depth))


def fairseq_law_(weight: torch.Tensor, fan_in: int, fan_out: int, role: MatrixRole, config: MTConfig) -> None:
    """`init_law="fairseq"`: fairseq's Transformer: attention projections Xavier-uniform, the query/key/value with
    gain 1/sqrt(2) (fairseq's `MultiheadAttention` for separate projections); the other matrices `nn.Linear`'s
    default."""
    if not role.kind.startswith("attention"):
        pytorch_law_(weight, fan_in, fan_out, role, config)
        return
    gain = 1 / math.sqrt(2) if role.kind == "attention_input" else 1.0
    uniform_(weight, gain * xavier_bound(fan_in, fan_out))


def km_law_(weight: torch.Tensor, fan_in: int, fan_out: int, role: MatrixRole, config: MTConfig) -> None:
    """`init_law="km"`: the Unified Transformer authors' `init_method='km'`: PyTorch's default, except their
    attention (`ParallelMultiheadAttention.reset_parameters`, one class for the self- and the cross-attention), whose
    output projection is kaiming-uniform with a = 1, U(±sqrt(3 / fan_in)); its query/key/value keep a = sqrt(5)."""
    slope = 1.0 if role.kind == "attention_output" else math.sqrt(5.0)
    uniform_(weight, kaiming_uniform_bound(fan_in, slope))


def normal_law_(weight: torch.Tensor, fan_in: int, fan_out: int, role: MatrixRole, config: MTConfig) -> None:
    """`init_law="normal"`: N(0, `init_std`²) for every matrix, as Marian and BERT."""
    init.normal_(weight, mean=0.0, std=float(config.init_std))


INIT_LAW_FUNCTIONS: dict[str, Callable[[torch.Tensor, int, int, MatrixRole, MTConfig], None]] = {
    "pytorch": pytorch_law_,
    "xavier": xavier_law_,
    "fairseq": fairseq_law_,
    "ds_init": ds_init_law_,
    "normal": normal_law_,
    "km": km_law_,
}


def embedding_(weight: torch.Tensor, config: MTConfig) -> None:
    """Token embeddings and the untied output projection: N(0, d^-1/2) (N(0, init_std²) under `"normal"`)."""
    std = config.init_std if config.init_law == "normal" else weight.shape[-1] ** -0.5
    init.normal_(weight, mean=0.0, std=std)


def pytorch_default_linear_(linear: nn.Linear) -> None:
    """An own law: `nn.Linear.reset_parameters()`'s weight, kaiming-uniform a = sqrt(5), U(±1/sqrt(fan_in))."""
    init.kaiming_uniform_(linear.weight, a=math.sqrt(5.0))


def init_matrix_(weight: torch.Tensor, fan_in: int, fan_out: int, role: MatrixRole, config: MTConfig) -> None:
    """Draws `weight` (one matrix, or a stack of matrices of the same role, fans and law) by `config.init_law`."""
    if role.kind == "own_law":
        raise ValueError(f"{role}: a matrix with its own law is drawn by it (`init_linear_`)")
    if role.kind == "output_embedding":
        embedding_(weight, config)
        return
    INIT_LAW_FUNCTIONS[config.init_law](weight, fan_in, fan_out, role, config)


def init_linear_(linear: nn.Linear, config: MTConfig) -> None:
    """A linear layer by its declared role: the weight by `config.init_law` (or by the matrix's own law), a zero
    bias."""
    role = declared_role(linear)
    if role.kind == "own_law":
        role.own_law(linear)
    else:
        init_matrix_(linear.weight, linear.in_features, linear.out_features, role, config)
    if linear.bias is not None:
        init.zeros_(linear.bias)


__all__ = [
    "INIT_LAW_FUNCTIONS",
    "MatrixRole",
    "attention_projections",
    "declared_role",
    "ds_init_scale",
    "embedding_",
    "init_linear_",
    "init_matrix_",
    "layer_depth",
    "pytorch_default_linear_",
    "with_role",
    "xavier_uniform_",
]
