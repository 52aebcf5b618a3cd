# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The vocabulary shortlist inside the search graphs (`onnx_search_graph.py`, which imports this module): the decoder
step graph's output projection found (`find_output_projection`) and replaced by one onto the candidate columns only
(`shortlisted` in float32, `restrict_columns` keeping a dynamic int8 projection), with what they add outside the
search's `Loop`.

A shortlisted search runs in the candidates' own numbering: the token the step graph embeds is looked up in the
candidate list (`search.shortlist`), and the step's logits are `hidden @ W[:, candidates] (+ b[candidates])`, the
columns gathered once per call outside the `Loop`. The search's arithmetic (`onnx_search_graph.py`) is unchanged; the
ids it is fed (start, </s>, padding) and returns are translated by `SearchGraphs.run`. A dynamic int8 step keeps its
own int8 projection, on the candidate columns of its int8 weight (`restrict_columns`): its logits are the int8
model's. Float and per-row int8 steps project in float32 onto the columns of the float step graph's weights
(`shortlisted`; `MatMulNBits` fixes its output width in an attribute), so a per-row int8 model scores its candidates
in float32.

The softmax over the candidates is the softmax over the whole vocabulary with every other token at -inf, which is
how the other decoding paths apply a shortlist (`ORTModelForSeq2SeqLM`): the same search, in fewer columns.
"""

from __future__ import annotations

import dataclasses

import numpy as np


# Nodes between the projection and the logits output that leave the vocabulary axis in place: shape changes, and the
# int8 graphs' rescaling (`Cast`, `Mul` by the scales) and a bias (`Add`).
PASS_THROUGH = frozenset({"Squeeze", "Unsqueeze", "Reshape", "Identity", "Flatten", "Cast", "Mul", "Add"})
PROJECTIONS = frozenset({"MatMul", "Gemm", "MatMulInteger", "MatMulNBits"})


@dataclasses.dataclass
class OutputProjection:
    """Where a step graph computes its logits: the hidden state the projection takes (`hidden`), the nodes from it
    to the logits (`nodes`, indices into the graph's nodes) and, for a float graph, the weight `[width, vocab]` and
    the bias `[vocab]` (or None)."""

    hidden: str
    nodes: list[int]
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    projection: int = -1  # the index of the projection node (`MatMul`, `MatMulInteger`, ...)


def _constants(graph) -> dict[str, object]:
    """The graph's initializers and `Constant` node outputs, by name (as TensorProtos)."""
    constants = {tensor.name: tensor for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    return constants


def find_output_projection(graph, logits: str, with_weights: bool = False) -> OutputProjection:
    """The output projection of a step graph (float, dynamic int8 or per-row int8). A `ValueError` says why a graph
    whose logits are not one projection of one hidden state (through shape changes, scales and a bias) cannot be
    shortlisted."""
    from onnx import numpy_helper

    producer = {name: index for index, node in enumerate(graph.node) for name in node.output}
    constants = _constants(graph)

    def projection_from(name: str, chain: list[int]) -> tuple[int, list[int]] | None:
        index = producer.get(name)
        if index is None:
            return None
        node = graph.node[index]
        if node.op_type in PROJECTIONS:
            return index, chain
        if node.op_type not in PASS_THROUGH:
            return None
        for source in node.input:
            if source and source not in constants:
                found = projection_from(source, [*chain, index])
                if found is not None:
                    return found
        return None

    found = projection_from(logits, [])
    if found is None:
        raise ValueError("the decoder step graph's logits are not one projection of a hidden state")
    index, chain = found
    node = graph.node[index]
    hidden = node.input[0]
    quantizer = graph.node[producer[hidden]] if hidden in producer else None
    if quantizer is not None and quantizer.op_type == "DynamicQuantizeLinear":
        hidden = quantizer.input[0]
    # the nodes that lie between the hidden state and the logits: descendants of one, ancestors of the other
    ancestors, stack = set(), [logits]
    while stack:
        name = stack.pop()
        if name in producer and producer[name] not in ancestors:
            ancestors.add(producer[name])
            stack += list(graph.node[producer[name]].input)
    between, reached = [], {hidden}
    for position, candidate in enumerate(graph.node):
        if position in ancestors and reached.intersection(candidate.input):
            between.append(position)
            reached.update(candidate.output)
    removed_outputs = {name for position in between for name in graph.node[position].output}
    for position, other in enumerate(graph.node):
        if position not in between and removed_outputs.intersection(other.input):
            raise ValueError(f"the step graph's {other.op_type} node {other.name!r} uses the logits' projection")
    projection = OutputProjection(hidden, between, projection=index)
    if with_weights:
        if node.op_type != "MatMul":
            raise ValueError(f"a float step graph's logits come from a MatMul, not {node.op_type}")
        weight_name = node.input[1]
        if weight_name in constants:
            weight = numpy_helper.to_array(constants[weight_name])
        else:
            transpose = graph.node[producer[weight_name]]
            perm = [a.ints for a in transpose.attribute if a.name == "perm"]
            if transpose.op_type != "Transpose" or transpose.input[0] not in constants or list(perm[0]) != [1, 0]:
                raise ValueError("the logits' projection weight is neither a constant nor its transpose")
            weight = numpy_helper.to_array(constants[transpose.input[0]]).T
        projection.weight = np.ascontiguousarray(weight, dtype=np.float32)
        for position in chain:
            step = graph.node[position]
            if step.op_type == "Add":
                bias = [numpy_helper.to_array(constants[name]) for name in step.input if name in constants]
                projection.bias = np.asarray(bias[0], dtype=np.float32).reshape(-1)
            elif step.op_type not in ("Squeeze", "Unsqueeze", "Reshape", "Identity", "Flatten"):
                raise ValueError(f"a {step.op_type} node between the logits' projection and the logits")
    return projection


def _used_names(nodes) -> set[str]:
    """Every input name of `nodes` and of the nodes of their subgraphs."""
    used = set()
    for node in nodes:
        used.update(node.input)
        for attribute in node.attribute:
            if attribute.g is not None:
                used |= _used_names(attribute.g.node)
            for graph in attribute.graphs:
                used |= _used_names(graph.node)
    return used


def _on_candidates(model, nodes: list, token: str, prefix: str):
    """A copy of `model` whose nodes are `nodes` after one that looks its token up in the candidate list
    (`{prefix}shortlist` at `{prefix}shortlist.token`), without the initializers no node uses any more; and the
    candidate list's input, for the outer graph."""
    import onnx
    from onnx import helper

    names = Names(prefix)
    restricted = onnx.ModelProto()
    restricted.CopyFrom(model)
    graph = restricted.graph
    nodes = [helper.make_node("Gather", [names.shortlist, names.token], [token], axis=0), *nodes]
    used = _used_names(nodes)
    initializers = [tensor for tensor in graph.initializer if tensor.name in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    return restricted, helper.make_tensor_value_info(names.shortlist, onnx.TensorProto.INT64, ["candidates"])


def shortlisted(model, projection: OutputProjection, weight, bias, token: str, logits: str, prefix: str):
    """The step graph `model` on a candidate list, projecting in float32: its `logits` `[rows, candidates]` are the
    hidden state times the candidate columns of `weight` `[width, vocab]` (plus those of `bias`), gathered once per
    call outside the `Loop`; the projection's nodes (`find_output_projection`) are left out. Returns the graph and
    what the outer graph adds: initializers, nodes and inputs."""
    from onnx import helper, numpy_helper

    names = Names(prefix)
    kept = [node for position, node in enumerate(model.graph.node) if position not in set(projection.nodes)]
    scores = prefix + "shortlist.scores"
    tail = [helper.make_node("MatMul", [projection.hidden, names.weight], [scores])]
    if bias is not None:
        tail.append(helper.make_node("Add", [scores, names.bias], [prefix + "shortlist.biased"]))
        scores = prefix + "shortlist.biased"
    shape = prefix + "shortlist.shape"
    tail += [
        helper.make_node("Constant", [], [shape], value=numpy_helper.from_array(np.array([0, -1], np.int64), shape)),
        helper.make_node("Reshape", [scores, shape], [logits]),
    ]
    restricted, candidates = _on_candidates(model, [*kept, *tail], token, prefix)
    full_weight, full_bias = prefix + "shortlist.full_w", prefix + "shortlist.full_b"
    initializers = [numpy_helper.from_array(weight, full_weight)]
    nodes = [helper.make_node("Gather", [full_weight, names.shortlist], [names.weight], axis=1)]
    if bias is not None:
        initializers.append(numpy_helper.from_array(bias, full_bias))
        nodes.append(helper.make_node("Gather", [full_bias, names.shortlist], [names.bias], axis=0))
    return restricted, (initializers, nodes, [candidates])


@dataclasses.dataclass(frozen=True)
class Names:
    """The shortlist's names in a search graph (all under `prefix`)."""

    prefix: str

    @property
    def shortlist(self) -> str:  # input: the candidate ids, sorted
        return self.prefix + "shortlist"

    @property
    def token(self) -> str:  # the step's token in the candidates' numbering
        return self.prefix + "shortlist.token"

    @property
    def weight(self) -> str:
        return self.prefix + "shortlist.w"

    @property
    def bias(self) -> str:
        return self.prefix + "shortlist.b"


def restrict_columns(model, projection: OutputProjection, vocab_size: int, token: str, prefix: str):
    """The step graph `model` on a candidate list, its own arithmetic kept (ONNX Runtime's dynamic int8: the hidden
    state quantised per tensor, `MatMulInteger` with the int8 weight, rescaled): every constant of the nodes from the
    hidden state to the logits whose last axis is the vocabulary (the weight, per-column scales or zero points, a
    bias) is replaced by its candidate columns, gathered once per call outside the `Loop`. The logits are then the
    int8 model's own logits of the candidates. Returns the graph and the outer parts, as `shortlisted` does."""
    import onnx
    from onnx import helper

    names = Names(prefix)
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    nodes, moved, outer_nodes = [], {}, []
    for position, node in enumerate(model.graph.node):
        if position in projection.nodes:
            node = onnx.NodeProto()
            node.CopyFrom(model.graph.node[position])
            for slot, name in enumerate(node.input):
                tensor = initializers.get(name)
                if tensor is None or not tensor.dims or tensor.dims[-1] != vocab_size:
                    continue
                if name not in moved:
                    moved[name] = f"{prefix}shortlist.columns.{len(moved)}"
                    axis = len(tensor.dims) - 1
                    outer_nodes.append(helper.make_node("Gather", [name, names.shortlist], [moved[name]], axis=axis))
                node.input[slot] = moved[name]
        nodes.append(node)
    if not moved:
        raise ValueError("the logits' projection has no constant with the vocabulary as its last axis")
    restricted, candidates = _on_candidates(model, nodes, token, prefix)
    used = _used_names(restricted.graph.node)
    outer_initializers = []
    for name in moved:
        tensor = initializers[name]
        if name in used:  # the body still uses it elsewhere: the outer scope gets a copy under a name of its own
            copy = onnx.TensorProto()
            copy.CopyFrom(tensor)
            copy.name = f"{prefix}shortlist.full.{name}"
            for node in outer_nodes:
                node.input[0] = copy.name if node.input[0] == name else node.input[0]
            tensor = copy
        outer_initializers.append(tensor)
    return restricted, (outer_initializers, outer_nodes, [candidates])
