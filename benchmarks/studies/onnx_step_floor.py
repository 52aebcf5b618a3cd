#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""At batch 1, what a generated token costs the native ONNX Runtime loop before any arithmetic: the runtime's fixed
cost per graph run and per graph node, against CTranslate2's whole token.

For the README main job's model (random weights, as `inference_vs_ctranslate2.py`: 30-token sources, exactly 20 new
tokens, greedy, batch 1) in ONNX Runtime int8 with the native search loop in Python (`search_graphs=False`) and as
one search graph (the default), and its same-size MarianMT in CTranslate2 int8, on `--threads` threads (1 by
default: both backends' faster setting at batch 1 on the 2-core machine of the docs), in one process:

* seconds per generated token of each backend (median of `--rounds` interleaved rounds);
* inside ours: the decoder-step graph's share of the call, timed around `run_with_iobinding`, and the nodes that
  ONNX Runtime runs per step (the step graph after its own graph optimisations, `ORT_ENABLE_ALL`);
* ONNX Runtime's fixed costs on this machine: chains of `Add` nodes on a `[1, d_model]` float tensor, run through an
  `IOBinding` as the loop runs the step graph, `--chain` nodes long and one node long: the cost of one run and of one
  more node.

So `runs per token x run cost + nodes x node cost` is what a step costs however little arithmetic its nodes do, and
the table sets it beside CTranslate2's token (issue 47's batch-1 target asks for half of it).

    python benchmarks/studies/onnx_step_floor.py                # JSON to benchmarks/results/onnx_step_floor.json
    python benchmarks/studies/onnx_step_floor.py --table        # the docs table of the JSON
"""

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import numpy as np
import torch
from harness import RESULTS, busy, load_check, machine, print_table, write_result
from harness.backends import clock_calls, convert_to_ctranslate2, ctranslate2_backend, torch_backend
from harness.models import build_models, source_batch, subjects


# The workload of `inference_vs_ctranslate2.py` (its `--quick` sizes with `--quick`), on the main job's model only.
WORKLOAD = dict(vocab_size=4000, source_length=30, new_tokens=20, main_job_d_model=None)
QUICK = dict(vocab_size=300, source_length=8, new_tokens=4, main_job_d_model=32)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10, help="generate() calls per backend and round")
    parser.add_argument("--chain", type=int, default=200, help="Nodes of the long Add chain")
    parser.add_argument("--quick", action="store_true", help="Tiny model, one round (checks that it runs)")
    parser.add_argument("--table", action="store_true", help="Print the docs table of --output and exit")
    parser.add_argument("--output", type=Path, default=RESULTS / "onnx_step_floor.json")
    args = parser.parse_args(argv)
    for name in ("threads", "rounds", "calls", "chain"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args


def optimized_node_count(path: str, threads: int) -> dict[str, int]:
    """The operators ONNX Runtime runs for the graph at `path` after its graph optimisations, those the package's
    sessions apply (counted by type)."""
    import onnx
    import onnxruntime

    from hf_unified_mt.deployment.onnx_runtime import inference_session

    with tempfile.TemporaryDirectory() as scratch:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.optimized_model_filepath = os.path.join(scratch, "optimized.onnx")
        options.log_severity_level = 3  # the note that an optimised graph is hardware-specific
        inference_session(path, options)
        graph = onnx.load(options.optimized_model_filepath).graph
    return dict(collections.Counter(node.op_type for node in graph.node).most_common())


def add_chain_seconds(nodes: int, width: int, threads: int, runs: int = 2000) -> float:
    """Median seconds of one run of a chain of `nodes` `Add` nodes on a `[1, width]` float tensor, input and output
    bound once (`IOBinding`), as the native loop runs its step graph."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    names = ["x"] + [f"h{i}" for i in range(1, nodes)] + ["y"]
    graph = helper.make_graph(
        [helper.make_node("Add", [names[i], "b"], [names[i + 1]]) for i in range(nodes)],
        "add_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        [numpy_helper.from_array(np.full(width, 1e-3, dtype=np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as the package's sessions
    # no constant folding or fusion of the chain: it stands for nodes that each do a little work
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", onnxruntime.OrtValue.ortvalue_from_numpy(np.zeros((1, width), np.float32)))
    binding.bind_ortvalue_output("y", onnxruntime.OrtValue.ortvalue_from_numpy(np.zeros((1, width), np.float32)))
    for _ in range(50):
        session.run_with_iobinding(binding)
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(runs // 5):
            session.run_with_iobinding(binding)
        samples.append((time.perf_counter() - start) / (runs // 5))
    return statistics.median(samples)


def measure(args) -> dict:
    from hf_unified_mt.deployment.onnx_export import export_onnx
    from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM

    torch.set_num_threads(args.threads)
    workload = argparse.Namespace(
        **(QUICK if args.quick else WORKLOAD), no_main_job=False, archs=[], keep_dropout=False, device="cpu"
    )
    [subject] = subjects(workload)
    model, marian = build_models(subject, workload)
    new_tokens = workload.new_tokens
    input_ids, attention_mask = source_batch(workload, 1, model.config.vocab_size)
    load_before = load_check()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        export_onnx(model, scratch / "onnx", int8=True, verify=False)
        # the native loop over the step graph, whose step this splits; and the search graph, the default now
        runtime = ORTModelForSeq2SeqLM.from_pretrained(
            scratch / "onnx", int8=True, num_threads=args.threads, search_graphs=False
        )
        ours = torch_backend(runtime, new_tokens)
        graph = torch_backend(
            ORTModelForSeq2SeqLM.from_pretrained(scratch / "onnx", int8=True, num_threads=args.threads), new_tokens
        )
        converted = convert_to_ctranslate2(marian, scratch)
        ct2 = ctranslate2_backend(converted["int8"], marian.config.vocab_size, args.threads, new_tokens)
        nodes = optimized_node_count(runtime.decoder_session._model_path, args.threads)

        step = clock_calls(runtime.decoder_session, "run_with_iobinding", dict(seconds=0.0, calls=0))
        encoder = clock_calls(runtime.encoder.session, "run", dict(seconds=0.0, calls=0))
        seconds = {"onnx-native-int8": [], "onnx-graph-int8": [], "marian/ct2-int8": []}
        step_seconds, encoder_seconds = [], []
        for backend in (ours, graph, ct2):  # warm-up (the plans, the search graph, CTranslate2's token strings)
            backend(input_ids, attention_mask, 1)
        for _ in range(args.rounds):
            step.update(seconds=0.0, calls=0)
            encoder.update(seconds=0.0, calls=0)
            start = time.perf_counter()
            for _ in range(args.calls):
                ours(input_ids, attention_mask, 1)
            seconds["onnx-native-int8"].append((time.perf_counter() - start) / args.calls)
            step_seconds.append(step["seconds"] / step["calls"])
            encoder_seconds.append(encoder["seconds"] / args.calls)
            steps_per_call = step["calls"] / args.calls
            start = time.perf_counter()
            for _ in range(args.calls):
                graph(input_ids, attention_mask, 1)
            seconds["onnx-graph-int8"].append((time.perf_counter() - start) / args.calls)
            start = time.perf_counter()
            for _ in range(args.calls):
                ct2(input_ids, attention_mask, 1)
            seconds["marian/ct2-int8"].append((time.perf_counter() - start) / args.calls)
    width = model.config.d_model
    run_cost = add_chain_seconds(1, width, args.threads)
    chain_cost = add_chain_seconds(args.chain, width, args.threads)
    node_cost = (chain_cost - run_cost) / (args.chain - 1)
    per_token = {name: statistics.median(values) / new_tokens for name, values in seconds.items()}
    step_run = statistics.median(step_seconds)
    node_total = sum(nodes.values())
    floor = steps_per_call / new_tokens * (run_cost + node_total * node_cost)
    return dict(
        model=subject["name"],
        d_model=width,
        vocab_size=model.config.vocab_size,
        threads=args.threads,
        rounds=args.rounds,
        calls_per_round=args.calls,
        new_tokens=new_tokens,
        source_length=workload.source_length,
        seconds_per_token=per_token,
        tokens_per_second={name: 1 / value for name, value in per_token.items()},
        decoder_step_runs_per_call=steps_per_call,
        decoder_step_seconds_per_run=step_run,
        decoder_step_share_of_call=step_run * steps_per_call / statistics.median(seconds["onnx-native-int8"]),
        encoder_seconds_per_call=statistics.median(encoder_seconds),
        decoder_step_nodes=node_total,
        decoder_step_operators=nodes,
        onnxruntime_run_seconds=run_cost,
        onnxruntime_node_seconds=node_cost,
        add_chain_nodes=args.chain,
        fixed_cost_floor_seconds_per_token=floor,
        target_seconds_per_token=per_token["marian/ct2-int8"] / 2,
        rounds_seconds_per_call=seconds,
        load_average_before=load_before,
        machine_busy=busy(load_before),
        machine=machine(threads=args.threads, packages=("ctranslate2", "onnxruntime")),
    )


def table(result: dict) -> str:
    us = 1e6
    ours, ct2 = result["seconds_per_token"]["onnx-native-int8"], result["seconds_per_token"]["marian/ct2-int8"]
    graph = result["seconds_per_token"].get("onnx-graph-int8")  # measured since the search graphs
    step = result["decoder_step_seconds_per_run"] * result["decoder_step_runs_per_call"] / result["new_tokens"]
    encoder = result["encoder_seconds_per_call"] / result["new_tokens"]
    rows = [
        ("CTranslate2 int8, MarianMT of the same size: a whole token", ct2 * us),
        ("issue 47's batch-1 target (2x CTranslate2 int8): a whole token", result["target_seconds_per_token"] * us),
        *([("ONNX Runtime int8, search graph (the default): a whole token", graph * us)] if graph is not None else []),
        ("ONNX Runtime int8, native loop in Python: a whole token", ours * us),
        ("of which the decoder-step graph's run", step * us),
        ("of which the encoder graph's run (one per call, shared by its tokens)", encoder * us),
        ("of which outside both graphs (the search loop in Python)", (ours - step - encoder) * us),
        (
            f"ONNX Runtime's fixed cost of that run: 1 run + {result['decoder_step_nodes']} nodes x "
            f"{result['onnxruntime_node_seconds'] * us:.2f} µs",
            result["fixed_cost_floor_seconds_per_token"] * us,
        ),
    ]
    lines = ["| per generated token, batch 1 greedy | µs |", "|---|---:|"]
    lines += [f"| {label} | {value:.0f} |" for label, value in rows]
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.table:
        return print_table(args.output, table)
    if args.quick:
        args.rounds, args.calls, args.chain = 1, 2, 20
    result = measure(args)
    write_result(args.output, result, argv, indent=1)
    print(table(result))
    return result


if __name__ == "__main__":
    main()
