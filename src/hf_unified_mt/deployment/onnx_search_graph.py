# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Greedy and beam search as one ONNX graph: an ONNX `Loop` whose body is the decoder step graph followed by the
search's own arithmetic, so that everything after the encoder is a single ONNX Runtime run.

The native loops of `onnx_search.py` run the step graph once per token from Python; at batch 1 the Python around each
run (binding, top-1, </s> checks, logits processors) cost about as much as the graph's own run. Here the same search
runs inside ONNX Runtime: the step graph's nodes are the `Loop` body's, the cache states are the loop's carried
values (reordered for the beams with one `Gather` along the rows), and the search's tensors (the tokens so far, the
beams' scores, the finished hypotheses) are carried beside them. The graph is built from the step graph at run time
(`SearchGraphs`), never exported: a folder holds the graphs it always held, and every export, whatever its cache kinds,
gets it.

The arithmetic is transformers' (5.x), as in `onnx_search.py`, written as ONNX operators:

* greedy search (`_sample` without sampling): the argmax of the processed logits (the first of equal maxima, as
  `torch.argmax`), padding after </s>, until every row has ended or the maximum length is reached;
* beam search (the vectorised `_beam_search`): top-k over beams x vocabulary with `max(2, 1 + number of </s> ids) *
  num_beams` candidates, the finished ones scored with the length penalty on the generated length, transformers'
  early-stopping heuristic (`early_stopping` False, True or "never"), `num_return_sequences` best first. Its log-softmax
  is ONNX Runtime's, which can differ from PyTorch's in the last bit of a score; beams whose scores tie to that bit may
  be ordered differently.
* the logits processors that can be written so: minimum lengths (`MinLengthLogitsProcessor`,
  `MinNewTokensLengthLogitsProcessor`: the </s> ids at -inf below the length) and no-repeat n-grams
  (`NoRepeatNGramLogitsProcessor`: every window of the tokens so far whose first n-1 tokens equal the last n-1 bans
  its last token, through a spare column as transformers does). A call with any other processor, a decoder prompt
  longer than the start token or no </s> id runs the native loop of `onnx_search.py` instead (`graph_call`).

The length penalty's divisors are computed in Python, as transformers computes them (`length ** length_penalty` in
double precision, then divided in float32), and handed to the graph as one table per call.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch
from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

from .onnx_search import BlockEnd, direct_processors, unwritten_fill


# The search's own names in the graphs (the step graph's names never start so).
PREFIX = "search."
INT64_MAX = np.iinfo(np.int64).max
# ONNX element types (`onnx.TensorProto.INT64`, `.FLOAT`, `.BOOL`), for `Cast` and the graphs' inputs and outputs
INT64, FLOAT, BOOL = 7, 1, 9


class GraphWriter:
    """The nodes of one ONNX graph, written as calls: `g.op("Add", a, b)` appends an `Add` node and returns the name
    of its output (`outputs=` names them; several outputs are returned as a list)."""

    def __init__(self):
        self.nodes = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{PREFIX}{hint}.{self._count}"

    def op(self, op_type: str, *inputs: str, outputs: int | list[str] = 1, **attributes):
        from onnx import helper

        names = outputs if isinstance(outputs, list) else [self.name(op_type) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attributes))
        return names[0] if len(names) == 1 else names

    def const(self, value, dtype=np.int64) -> str:
        from onnx import numpy_helper

        name = self.name("const")
        array = np.asarray(value, dtype=dtype)
        return self.op("Constant", outputs=[name], value=numpy_helper.from_array(array, name))

    def gather_rows(self, tensor: str, rows: str) -> str:
        """`tensor[rows]` along axis 0, `rows` flattened."""
        return self.op("Gather", tensor, self.op("Reshape", rows, self.const([-1])), axis=0)

    def any(self, condition: str, axis: int | None = None, keepdims: int = 0) -> str:
        """`condition.any(axis)` of a boolean tensor (over every axis when `axis` is None)."""
        counts = self.op("Cast", condition, to=INT64)
        axes = [] if axis is None else [self.const([axis])]
        return self.op("Cast", self.op("ReduceMax", counts, *axes, keepdims=keepdims), to=BOOL)

    def all(self, condition: str, axis: int | None = None, keepdims: int = 0) -> str:
        return self.op("Not", self.any(self.op("Not", condition), axis, keepdims))

    def penalty(self, scores: str, condition: str) -> str:
        """`scores + condition.to(float32) * -1e9`, transformers' way of setting candidates aside."""
        return self.op(
            "Add", scores, self.op("Mul", self.op("Cast", condition, to=FLOAT), self.const(-1.0e9, np.float32))
        )


def block_end(g: GraphWriter, scores: str, length: str) -> str:
    """Minimum length: the </s> ids at -inf while the sequence (prompt included) is shorter than `search.min_length`
    (`search.end_block`: 0 everywhere, -inf at those ids)."""
    short = g.op("Less", length, PREFIX + "min_length")
    return g.op("Where", short, g.op("Add", scores, PREFIX + "end_block"), scores)


def no_repeat_ngram(g: GraphWriter, scores: str, sequences: str, length: str, size: int) -> str:
    """transformers' `NoRepeatNGramLogitsProcessor`: the windows of `size` tokens whose first `size - 1` equal the
    last `size - 1` tokens of the row ban their last token. Window `i` is `sequences[:, i : i + size]`, for the
    `length - size + 1` windows there are (none while the row is shorter than `size`)."""
    axis, one = g.const([1]), g.const(1)
    # the number of windows, 0 while the row is shorter than `size` (every slice below is then empty)
    windows = g.op("Max", g.op("Sub", g.op("Add", length, one), g.const(size)), g.const(0))
    matches = None
    for offset in range(size - 1):  # window token `offset` against the prefix's token `offset`
        start = g.const([offset])
        column = g.op("Slice", sequences, start, g.op("Add", start, windows), axis)
        prefix_at = g.op("Add", g.op("Sub", length, g.const(size - 1)), g.const(offset))
        prefix_start = g.op("Reshape", prefix_at, axis)
        prefix = g.op("Slice", sequences, prefix_start, g.op("Add", prefix_start, one), axis)
        equal = g.op("Equal", column, prefix)
        matches = equal if matches is None else g.op("And", matches, equal)
    last = g.const([size - 1])
    banned = g.op("Slice", sequences, last, g.op("Add", last, windows), axis)
    vocab = g.op("Shape", scores, start=1, end=2)
    if matches is not None:  # size 1 bans every token so far
        banned = g.op("Where", matches, banned, vocab)
    banned = g.op("Min", banned, vocab)  # ids past the logits go to the spare column
    rows = g.op("Shape", scores, start=0, end=1)
    spare = g.op("Expand", g.const([[0.0]], np.float32), g.op("Concat", rows, g.const([1]), axis=0))
    widened = g.op("Concat", scores, spare, axis=1)
    minus_inf = g.op("Expand", g.const(-np.inf, np.float32), g.op("Shape", banned))
    banned_scores = g.op("ScatterElements", widened, banned, minus_inf, axis=1)
    return g.op("Slice", banned_scores, g.const([0]), vocab, axis)


def is_end(g: GraphWriter, tokens: str) -> str:
    """`tokens` equal to one of the </s> ids (`search.eos`), elementwise."""
    hits = g.op("Equal", g.op("Unsqueeze", tokens, g.const([-1])), PREFIX + "eos")
    return g.any(hits, axis=-1)


@dataclasses.dataclass(frozen=True)
class GraphCall:
    """What of a `generate()` call shapes its search graph (`key`) and what it feeds it."""

    search: str  # "greedy" or "beam"
    no_repeat_ngram_size: int
    early_stopping: bool | str  # beam search only
    min_length: int  # 0: no minimum
    block: tuple[int, ...]  # the </s> ids a minimum length blocks
    max_length: int  # prompt included
    eos: tuple[int, ...]
    pad: int
    num_beams: int = 1
    length_penalty: float = 1.0
    num_return_sequences: int = 1

    @property
    def key(self) -> tuple:
        early = self.early_stopping if self.search == "beam" else None
        return self.search, self.no_repeat_ngram_size, early, self.min_length > 0


def graph_call(
    search: str, input_ids: torch.Tensor, processors, max_length: int, eos, pad, generation_config, max_positions: int
) -> tuple[GraphCall | None, str | None]:
    """The call as a search graph runs it, or None and why the native loop of `onnx_search.py` must run it instead: a
    decoder prompt other than the start token alone, no </s> or pad id, a maximum length past the model's positions
    (the native loop says so when reached), or a logits processor other than minimum lengths on one set of </s> ids and
    one no-repeat n-gram size."""
    if input_ids.shape[1] != 1:
        return None, "a decoder prompt longer than the start token"
    if eos is None or pad is None:
        return None, "no </s> or pad id"
    if not 1 < max_length <= max_positions + 1:
        return None, f"a maximum length ({max_length}) past max_position_embeddings"
    minimum, block, ngram = 0, None, 0
    for processor in direct_processors(processors):  # the minimum lengths as `BlockEnd`s
        if type(processor) is NoRepeatNGramLogitsProcessor and not ngram:
            ngram = processor.ngram_size
        elif type(processor) is BlockEnd:
            ids = tuple(processor.eos.tolist())
            if block is not None and ids != block:
                return None, "minimum lengths on different </s> ids"
            minimum, block = max(minimum, processor.min_length), ids
        else:
            return None, type(processor).__name__
    call = GraphCall(
        search=search,
        no_repeat_ngram_size=ngram,
        early_stopping=generation_config.early_stopping,
        min_length=minimum,
        block=block or (),
        max_length=max_length,
        eos=tuple(eos.view(-1).tolist()),
        pad=int(pad),
        num_beams=generation_config.num_beams,
        length_penalty=generation_config.length_penalty,
        num_return_sequences=generation_config.num_return_sequences,
    )
    return call, None


class StepGraph:
    """The decoder step graph's parts, by role: its token, mask, positions, cross-attention and cache inputs and its
    logits and cache outputs (`StepRunner`'s order)."""

    def __init__(self, model, cross_count: int):
        graph = model.graph
        inputs = [value.name for value in graph.input]
        self.model = model
        self.token, self.mask, self.positions = inputs[:3]
        self.cross = inputs[3 : 3 + cross_count]
        self.pasts = inputs[3 + cross_count :]
        self.logits, *self.presents = [value.name for value in graph.output]
        # what a search graph around this step adds outside its `Loop` (a shortlist's, `onnx_shortlist.shortlisted`)
        self.outer_nodes, self.outer_initializers, self.outer_extra_inputs = [], [], []
        if len(self.pasts) != len(self.presents):
            raise ValueError(
                f"the decoder step graph has {len(self.pasts)} cache inputs and {len(self.presents)} cache outputs"
            )

    def on_candidates(self, vocab_size: int, float_weights) -> StepGraph:
        """This step on a shortlist's candidates: `token` then names the token in the candidates' numbering, and the
        logits are those of the candidate columns, gathered once per call outside the `Loop` (`search.shortlist`: the
        ids). A dynamic int8 step keeps its int8 projection on those columns (`onnx_shortlist.restrict_columns`);
        float and per-row int8 steps project in float32 onto the columns of the float step graph's weight and bias,
        `float_weights()` (`onnx_shortlist.shortlisted`)."""
        from .onnx_shortlist import Names, find_output_projection, restrict_columns, shortlisted

        projection = find_output_projection(self.model.graph, self.logits)
        if self.model.graph.node[projection.projection].op_type == "MatMulInteger":  # dynamic int8: kept as it is
            model, outer = restrict_columns(self.model, projection, vocab_size, self.token, PREFIX)
        else:
            model, outer = shortlisted(self.model, projection, *float_weights(), self.token, self.logits, PREFIX)
        step = StepGraph(model, len(self.cross))
        step.token = Names(PREFIX).token
        step.outer_initializers, step.outer_nodes, step.outer_extra_inputs = outer
        return step

    def body(self, nodes_before: list, nodes_after: list, inputs: list, outputs: list):
        """A `Loop` body: the given nodes around the step graph's, its initializers kept inside."""
        from onnx import helper

        graph = self.model.graph
        return helper.make_graph(
            [*nodes_before, *graph.node, *nodes_after],
            PREFIX + "body",
            inputs,
            outputs,
            initializer=list(graph.initializer),
            value_info=list(graph.value_info),
        )

    def outer_inputs(self) -> list:
        """The mask and cross-attention inputs (outer-scope values of the body) with the step graph's own types."""
        wanted = {self.mask, *self.cross}
        return [value for value in self.model.graph.input if value.name in wanted]


def _value(name: str, elem_type: int, shape=None):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem_type, shape)


def _model(step: StepGraph, nodes: list, inputs: list, outputs: list, name: str):
    from onnx import helper

    graph = helper.make_graph(
        [*step.outer_nodes, *nodes],
        name,
        [*step.outer_inputs(), *step.outer_extra_inputs, *inputs],
        outputs,
        initializer=step.outer_initializers,
    )
    return helper.make_model(graph, opset_imports=list(step.model.opset_import), ir_version=step.model.ir_version)


def greedy_search_model(step: StepGraph, no_repeat_ngram_size: int, min_length: bool = True):
    """The greedy search graph. Inputs: the step graph's mask and cross-attention inputs, `search.sequences` (the
    start tokens, `[rows, 1]`), `search.max_steps`, `search.min_length`, `search.end_block`, `search.eos`,
    `search.pad` and the initial cache states `search.initial.<past>`; output: `search.output` `[rows, 1 + new]`.
    Without `min_length` the graph leaves out the minimum-length block (its inputs are then unused)."""
    from onnx import helper

    g = GraphWriter()
    sequences, unfinished = PREFIX + "sequences.in", PREFIX + "unfinished.in"
    iteration = PREFIX + "iteration"
    length = g.op("Add", iteration, g.const(1))  # the row's tokens so far: the start token and `iteration` more
    g.op("Range", g.const(0), iteration, g.const(1), outputs=[step.positions])  # the positions cached before
    g.op("Slice", sequences, g.const([-1]), g.const([INT64_MAX]), g.const([1]), outputs=[step.token])
    before, g.nodes = g.nodes, []
    scores = block_end(g, step.logits, length) if min_length else step.logits
    if no_repeat_ngram_size:
        scores = no_repeat_ngram(g, scores, sequences, length, no_repeat_ngram_size)
    best = g.op("ArgMax", scores, axis=-1, keepdims=1)
    tokens = g.op("Where", g.op("Unsqueeze", unfinished, g.const([1])), best, PREFIX + "pad")
    g.op("Concat", sequences, tokens, axis=1, outputs=[PREFIX + "sequences.out"])
    ended = is_end(g, g.op("Squeeze", tokens, g.const([1])))
    still = g.op("And", unfinished, g.op("Not", ended), outputs=[PREFIX + "unfinished.out"])
    g.op("Identity", g.any(still), outputs=[PREFIX + "continue"])
    body = step.body(
        before,
        g.nodes,
        [
            _value(iteration, INT64, []),
            _value(PREFIX + "condition", BOOL, []),
            _value(sequences, INT64),
            _value(unfinished, BOOL),
            *[_value(name, FLOAT) for name in step.pasts],
        ],
        [
            _value(PREFIX + "continue", BOOL, []),
            _value(PREFIX + "sequences.out", INT64),
            _value(PREFIX + "unfinished.out", BOOL),
            *[_value(name, FLOAT) for name in step.presents],
        ],
    )
    initial = [PREFIX + "initial." + name for name in step.pasts]
    nodes = [
        helper.make_node("Constant", [], [PREFIX + "true"], value=helper.make_tensor("true", BOOL, [], [True])),
        helper.make_node("Shape", [PREFIX + "sequences"], [PREFIX + "rows"], start=0, end=1),
        helper.make_node(
            "ConstantOfShape",
            [PREFIX + "rows"],
            [PREFIX + "unfinished"],
            value=helper.make_tensor("one", BOOL, [1], [True]),
        ),
        helper.make_node(
            "Loop",
            [PREFIX + "max_steps", PREFIX + "true", PREFIX + "sequences", PREFIX + "unfinished", *initial],
            [PREFIX + "output", PREFIX + "unfinished.final", *[PREFIX + "final." + name for name in step.pasts]],
            body=body,
        ),
    ]
    inputs = [
        _value(PREFIX + "sequences", INT64, ["rows", 1]),
        _value(PREFIX + "max_steps", INT64, []),
        _value(PREFIX + "min_length", INT64, []),
        _value(PREFIX + "end_block", FLOAT, ["vocab"]),
        _value(PREFIX + "eos", INT64, ["eos"]),
        _value(PREFIX + "pad", INT64, []),
        *[_value(name, FLOAT) for name in initial],
    ]
    return _model(step, nodes, inputs, [_value(PREFIX + "output", INT64, ["rows", "length"])], PREFIX + "greedy")


def beam_search_model(step: StepGraph, no_repeat_ngram_size: int, early_stopping: bool | str, min_length: bool = True):
    """The beam search graph (`onnx_search.beam_search`'s arithmetic, see the module docstring). Rows are `beams` per
    sentence. Inputs besides greedy search's: `search.beams` and `search.keep` (`[1]`: beams, candidates kept),
    `search.top_num_beams` (`[keep]`: the first `beams` candidates), `search.offsets`, `search.keep_offsets`,
    `search.merge_offsets` (`[batch, 1]`: each sentence's first row among beams, candidates, both), the
    length-penalty divisors `search.finish_divisors` and `search.best_divisors` (`[max_steps]`), `search.fill` (the
    id after a hypothesis' end) and the initial `search.running_scores`, `search.scores`, `search.finished`,
    `search.lengths`, `search.improvable`. Outputs: `search.output` (`[sentences x beams, length]`, hypotheses best
    first) and `search.output_lengths` (`[sentences, beams]`, generated tokens of each)."""
    from onnx import helper

    g = GraphWriter()
    p = PREFIX
    iteration = p + "iteration"
    carried = ["running", "running_scores", "sequences", "scores", "finished", "lengths", "improvable"]
    state = {name: f"{p}{name}.in" for name in carried}
    length = g.op("Add", iteration, g.const(1))
    g.op("Range", g.const(0), iteration, g.const(1), outputs=[step.positions])
    g.op("Slice", state["running"], g.const([-1]), g.const([INT64_MAX]), g.const([1]), outputs=[step.token])
    before, g.nodes = g.nodes, []

    log_probs = g.op("LogSoftmax", step.logits, axis=-1)
    if min_length:
        log_probs = block_end(g, log_probs, length)
    if no_repeat_ngram_size:
        log_probs = no_repeat_ngram(g, log_probs, state["running"], length, no_repeat_ngram_size)
    vocab = g.op("Shape", log_probs, start=1, end=2)
    by_beam = g.op("Reshape", log_probs, g.op("Concat", g.const([-1]), p + "beams", vocab, axis=0))
    totals = g.op("Add", by_beam, g.op("Unsqueeze", state["running_scores"], g.const([2])))
    totals = g.op("Reshape", totals, g.const([0, -1]))
    # the best `keep` continuations over all beams of a sentence
    top_log_probs, top_indices = g.op("TopK", totals, p + "keep", axis=-1, largest=1, sorted=1, outputs=2)
    from_row = g.op("Add", g.op("Div", top_indices, vocab), p + "offsets")
    top_tokens = g.op("Mod", top_indices, vocab)
    top_running = g.op(
        "Concat", g.gather_rows(state["running"], from_row), g.op("Reshape", top_tokens, g.const([-1, 1])), axis=1
    )
    last_step = g.op("GreaterOrEqual", g.op("Add", length, g.const(1)), p + "max_length")
    ends = g.op("Or", is_end(g, top_tokens), last_step)
    # the unfinished ones continue
    continuing = g.penalty(top_log_probs, ends)
    chosen = g.op("TopK", continuing, p + "beams", axis=-1, largest=1, sorted=1, outputs=2)[1]
    g.op("GatherElements", continuing, chosen, axis=1, outputs=[p + "running_scores.out"])
    g.op("Identity", g.gather_rows(top_running, g.op("Add", chosen, p + "keep_offsets")), outputs=[p + "running.out"])
    reorder = g.op("GatherElements", from_row, chosen, axis=1)
    for present, name in zip(step.presents, step.pasts):
        g.op("Identity", g.gather_rows(present, reorder), outputs=[p + "next." + name])
    # the finished ones among the top `beams` enter the hypotheses if they score better
    just_finished = g.op("And", ends, p + "top_num_beams")
    finished_scores = g.op("Div", top_log_probs, g.op("Gather", p + "finish_divisors", iteration))
    if early_stopping is True:
        finished_scores = g.penalty(finished_scores, g.all(state["finished"], axis=1, keepdims=1))
    finished_scores = g.penalty(finished_scores, g.op("Not", state["improvable"]))
    finished_scores = g.penalty(finished_scores, g.op("Not", just_finished))
    merged_scores = g.op("Concat", state["scores"], finished_scores, axis=1)
    best = g.op("TopK", merged_scores, p + "beams", axis=-1, largest=1, sorted=1, outputs=2)[1]
    scores = g.op("GatherElements", merged_scores, best, axis=1, outputs=[p + "scores.out"])
    # the hypotheses so far (one position longer: `fill`) and the candidates, per sentence, then the best `beams`
    rows = g.op("Shape", state["sequences"], start=0, end=1)
    fill = g.op("Expand", p + "fill", g.op("Concat", rows, g.const([1]), axis=0))
    widened = g.op("Concat", state["sequences"], fill, axis=1)
    width = g.op("Shape", widened, start=1, end=2)
    hypotheses = g.op("Reshape", widened, g.op("Concat", g.const([-1]), p + "beams", width, axis=0))
    candidates = g.op("Reshape", top_running, g.op("Concat", g.const([-1]), p + "keep", width, axis=0))
    both = g.op("Concat", hypotheses, candidates, axis=1)
    merged = g.op("Reshape", both, g.op("Concat", g.const([-1]), width, axis=0))
    sequences = g.gather_rows(merged, g.op("Add", best, p + "merge_offsets"))
    g.op("Identity", sequences, outputs=[p + "sequences.out"])
    finished = g.op("Concat", state["finished"], just_finished, axis=1)
    finished = g.op("GatherElements", finished, best, axis=1, outputs=[p + "finished.out"])
    new_lengths = g.op("Expand", length, g.op("Shape", just_finished))  # `iteration + 1` generated tokens
    lengths = g.op("Concat", state["lengths"], new_lengths, axis=1)
    g.op("GatherElements", lengths, best, axis=1, outputs=[p + "lengths.out"])
    # can a running beam still beat the worst finished hypothesis? (transformers' heuristic)
    leader = g.op("Slice", p + "running_scores.out", g.const([0]), g.const([1]), g.const([1]))
    best_possible = g.op("Div", leader, g.op("Gather", p + "best_divisors", iteration))
    worst = g.op("Where", finished, g.op("ReduceMin", scores, g.const([1]), keepdims=1), g.const(-1.0e9, np.float32))
    beatable = g.any(g.op("Greater", best_possible, worst), axis=1, keepdims=1)
    improvable = g.op("And", state["improvable"], beatable, outputs=[p + "improvable.out"])
    stop = g.op("Or", g.op("Not", g.any(improvable)), g.all(ends))
    if early_stopping is True:
        stop = g.op("Or", stop, g.all(finished))
    g.op("Not", stop, outputs=[p + "continue"])

    types = dict(
        running=INT64,
        running_scores=FLOAT,
        sequences=INT64,
        scores=FLOAT,
        finished=BOOL,
        lengths=INT64,
        improvable=BOOL,
    )
    body = step.body(
        before,
        g.nodes,
        [
            _value(iteration, INT64, []),
            _value(p + "condition", BOOL, []),
            *[_value(state[name], types[name]) for name in carried],
            *[_value(name, FLOAT) for name in step.pasts],
        ],
        [
            _value(p + "continue", BOOL, []),
            *[_value(f"{p}{name}.out", types[name]) for name in carried],
            *[_value(p + "next." + name, FLOAT) for name in step.pasts],
        ],
    )
    initial = [p + "initial." + name for name in step.pasts]
    loop_outputs = [
        p + "output" if name == "sequences" else p + "output_lengths" if name == "lengths" else f"{p}{name}.final"
        for name in carried
    ]
    nodes = [
        helper.make_node("Constant", [], [p + "true"], value=helper.make_tensor("true", BOOL, [], [True])),
        helper.make_node(
            "Loop",
            [p + "max_steps", p + "true", *[p + name for name in carried], *initial],
            [*loop_outputs, *[p + "final." + name for name in step.pasts]],
            body=body,
        ),
    ]
    inputs = [
        _value(p + "running", INT64, ["rows", 1]),
        _value(p + "running_scores", FLOAT, ["sentences", "beams"]),
        _value(p + "sequences", INT64, ["rows", 1]),
        _value(p + "scores", FLOAT, ["sentences", "beams"]),
        _value(p + "finished", BOOL, ["sentences", "beams"]),
        _value(p + "lengths", INT64, ["sentences", "beams"]),
        _value(p + "improvable", BOOL, ["sentences", 1]),
        _value(p + "max_steps", INT64, []),
        _value(p + "max_length", INT64, []),
        _value(p + "min_length", INT64, []),
        _value(p + "end_block", FLOAT, ["vocab"]),
        _value(p + "eos", INT64, ["eos"]),
        _value(p + "fill", INT64, []),
        _value(p + "beams", INT64, [1]),
        _value(p + "keep", INT64, [1]),
        _value(p + "top_num_beams", BOOL, ["keep"]),
        _value(p + "offsets", INT64, ["sentences", 1]),
        _value(p + "keep_offsets", INT64, ["sentences", 1]),
        _value(p + "merge_offsets", INT64, ["sentences", 1]),
        _value(p + "finish_divisors", FLOAT, ["steps"]),
        _value(p + "best_divisors", FLOAT, ["steps"]),
        *[_value(name, FLOAT) for name in initial],
    ]
    outputs = [
        _value(p + "output", INT64, ["rows", "length"]),
        _value(p + "output_lengths", INT64, ["sentences", "beams"]),
    ]
    return _model(step, nodes, inputs, outputs, p + "beam_search")


class SearchGraphs:
    """The search graphs of one decoder step graph (`step_file`), each built and loaded into its own ONNX Runtime
    session on first use (`session(model_bytes)`) and kept per `GraphCall.key` and shortlist use (at most `limit` of
    them). A shortlisted search (`run(..., candidates)`, `onnx_shortlist.py`) projects onto the candidate columns of
    the float step graph's output weights (`float_step_file`: the step graph's float original, where it is int8)."""

    def __init__(self, step_file, cross_count: int, session, vocab_size: int, limit: int = 4, float_step_file=None):
        self.step_file = step_file
        self.float_step_file = float_step_file or step_file
        self.cross_count = cross_count
        self.session = session
        self.vocab_size = vocab_size
        self.limit = limit
        self.sessions = {}
        self._output_weights = None

    def missing(self, call: GraphCall, shortlisted: bool = False) -> str | None:
        """Why the call's graph cannot be built (its step graph's file is not there), or None."""
        files = [self.step_file, self.float_step_file] if shortlisted else [self.step_file]
        if (call.key, shortlisted) in self.sessions or all(f is not None and os.path.isfile(f) for f in files):
            return None
        return f"the step graph's file ({' or '.join(str(f) for f in files)}) is gone"

    def output_weights(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The float step graph's output projection weight `[width, vocab]` and bias (or None), read once."""
        if self._output_weights is None:
            import onnx

            from .onnx_shortlist import find_output_projection

            graph = onnx.load(str(self.float_step_file)).graph
            projection = find_output_projection(graph, graph.output[0].name, with_weights=True)
            self._output_weights = projection.weight, projection.bias
        return self._output_weights

    def _session_for(self, call: GraphCall, shortlisted: bool = False):
        key = (call.key, shortlisted)
        if key not in self.sessions:
            import onnx

            step = StepGraph(onnx.load(str(self.step_file)), self.cross_count)
            if shortlisted:
                step = step.on_candidates(self.vocab_size, self.output_weights)
            if call.search == "greedy":
                model = greedy_search_model(step, call.no_repeat_ngram_size, call.min_length > 0)
            else:
                model = beam_search_model(step, call.no_repeat_ngram_size, call.early_stopping, call.min_length > 0)
            if len(self.sessions) >= self.limit:
                self.sessions.pop(next(iter(self.sessions)))
            self.sessions[key] = (step, self.session(model.SerializeToString()))
        return self.sessions[key]

    def run(self, call: GraphCall, runner, start: torch.Tensor, candidates: np.ndarray | None = None) -> torch.Tensor:
        """The search for one call: `runner` (an `onnx_search.StepRunner`) holds its bound source mask and
        cross-attention inputs and the cache states' shapes; `start` the start token of each row. Returns the start
        tokens and the new ones, as `onnx_search.greedy_search` / `beam_search` do. With `candidates` (sorted ids,
        the start, </s> and pad ids among them) the search scores those tokens only, in their own numbering."""
        fill = int(unwritten_fill(call.pad, call.eos))  # in the vocabulary's numbering, as transformers picks it
        if candidates is not None:
            candidates = np.ascontiguousarray(candidates, dtype=np.int64)

            def local(ids) -> np.ndarray:
                ids = np.asarray(ids, dtype=np.int64)
                where = np.minimum(np.searchsorted(candidates, ids), len(candidates) - 1)
                if not np.array_equal(candidates[where], ids):
                    raise ValueError(f"the shortlist's candidates lack the ids {sorted(set(ids.ravel().tolist()))}")
                return where

            call = dataclasses.replace(
                call,
                eos=tuple(local(call.eos).tolist()),
                pad=int(local(call.pad)),
                block=tuple(local(call.block).tolist()),
            )
            start = torch.from_numpy(local(start.numpy()))
            fill = int(local(fill)) if fill >= 0 else fill
        step, session = self._session_for(call, candidates is not None)
        rows = start.shape[0]
        end_block = np.zeros(self.vocab_size if candidates is None else len(candidates), dtype=np.float32)
        end_block[list(call.block)] = -np.inf
        feeds = {
            step.mask: runner.static[0],
            **dict(zip(step.cross, runner.static[1:])),
            PREFIX + "max_steps": np.array(call.max_length - 1, dtype=np.int64),
            PREFIX + "min_length": np.array(call.min_length, dtype=np.int64),
            PREFIX + "end_block": end_block,
            PREFIX + "eos": np.array(call.eos, dtype=np.int64),
        }
        if candidates is not None:
            feeds[PREFIX + "shortlist"] = candidates
        for name, shape in zip(step.pasts, runner.shapes):
            feeds[PREFIX + "initial." + name] = np.zeros((rows, *shape), dtype=np.float32)
        tokens = np.ascontiguousarray(start.numpy(), dtype=np.int64)
        if call.search == "greedy":
            feeds.update({PREFIX + "sequences": tokens, PREFIX + "pad": np.array(call.pad, dtype=np.int64)})
            output = torch.from_numpy(session.run([PREFIX + "output"], feeds)[0])
        else:
            output = self._beam(session, feeds, call, tokens, fill)
        return output if candidates is None else torch.from_numpy(candidates[output.numpy()])

    @staticmethod
    def _beam(session, feeds, call: GraphCall, tokens: np.ndarray, fill: int) -> torch.Tensor:
        num_beams, length_penalty, num_return_sequences = call.num_beams, call.length_penalty, call.num_return_sequences
        rows = tokens.shape[0]
        batch, prompt = rows // num_beams, 1
        keep = max(2, 1 + len(call.eos)) * num_beams
        steps = np.arange(1, call.max_length - prompt + 1)
        # transformers divides the float32 scores by `length ** length_penalty`, a Python float cast to float32
        finish = np.array([float(n) ** length_penalty for n in steps], dtype=np.float32)
        if call.early_stopping == "never" and length_penalty > 0.0:
            best = np.full_like(finish, float(call.max_length - prompt) ** length_penalty)
        else:
            best = finish
        running_scores = np.zeros((batch, num_beams), dtype=np.float32)
        running_scores[:, 1:] = -1e9
        sentence = np.arange(batch, dtype=np.int64)[:, None]
        feeds.update(
            {
                PREFIX + "running": tokens,
                PREFIX + "running_scores": running_scores,
                PREFIX + "sequences": tokens.copy(),
                PREFIX + "scores": np.full((batch, num_beams), -1e9, dtype=np.float32),
                PREFIX + "finished": np.zeros((batch, num_beams), dtype=bool),
                PREFIX + "lengths": np.zeros((batch, num_beams), dtype=np.int64),
                PREFIX + "improvable": np.ones((batch, 1), dtype=bool),
                PREFIX + "max_length": np.array(call.max_length, dtype=np.int64),
                PREFIX + "fill": np.array(fill, dtype=np.int64),
                PREFIX + "beams": np.array([num_beams], dtype=np.int64),
                PREFIX + "keep": np.array([keep], dtype=np.int64),
                PREFIX + "top_num_beams": np.arange(keep) < num_beams,
                PREFIX + "offsets": sentence * num_beams,
                PREFIX + "keep_offsets": sentence * keep,
                PREFIX + "merge_offsets": sentence * (num_beams + keep),
                PREFIX + "finish_divisors": finish,
                PREFIX + "best_divisors": best,
            }
        )
        sequences, lengths = session.run([PREFIX + "output", PREFIX + "output_lengths"], feeds)
        width = sequences.shape[1]
        sequences = sequences.reshape(batch, num_beams, width)[:, :num_return_sequences].reshape(-1, width)
        generated = int(lengths[:, :num_return_sequences].max())
        return torch.from_numpy(np.ascontiguousarray(sequences[:, : prompt + generated]))
