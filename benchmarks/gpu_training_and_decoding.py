#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""One GPU, one call: training throughput of Prime (`unified_transformer`, `--preset`) against a MarianMT of the same
width, depth and parameter count, eager, compiled and compiled with CUDA graphs, at each of `--budgets` padded tokens
per update, within one `--time-budget`, with the device's bf16 matrix-product peak measured in the same run (what it
measures, and how: docs/benchmarks.md, "On one GPU"). Each arm runs in a process of its own (`--phase arm`); batches
are padded to the fixed shapes of `--length-buckets`, without `datasets`; FLOPs per update come from
`torch.utils.flop_counter`, fitted by the polynomial matrix products give. The JSON is rewritten after each arm.

    python benchmarks/gpu_training_and_decoding.py --phase arms --output $OUT/gpu_training_arms.json
    python benchmarks/gpu_training_and_decoding.py --phase table --output benchmarks/results/gpu_training_arms.json

(The earlier measurement through train.py and `generate()`, `--phase prime|marian|report`, is retired: its results and
tables stay, `benchmarks/studies/tables.py gpu_training_16384`; docs/history.md, "Finished studies".)

On the lent H200 (its image has no `datasets`, and transformers 5.17: carry the wheels of transformers 5.24.0 and
regex 2026.11.19 in `.whl`, as the device README says), one call of `run` with `carry: [".whl"]`, `timeout_s: 600`:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site:$PWD/src python3 -u benchmarks/gpu_training_and_decoding.py --phase arms --output $OUT/gpu_training_arms.json 2>&1 | tee $OUT/gpu_training_arms.log
"""  # noqa: E501 (the command above is one line)

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from harness import (
    RESULTS,
    cpu_name,
    embedded_pairs,
    machine,
    matmul_peak,
    read_result,
    synchronize,
    write_result,
)
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSeq2SeqLM, MarianConfig, MarianMTModel

import hf_unified_mt
from hf_unified_mt.modeling_mt_common import translation_cross_entropy
from hf_unified_mt.presets import MARIAN_COMMON, MARIAN_PRESETS
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching
from hf_unified_mt.utils.files import write_bytes, write_json


ARMS_RESULT = RESULTS / "gpu_training_arms.json"
ARM_MODELS = ("prime", "marian")
ARM_MODES = ("eager", "graphs", "compiled")  # the run's order: the baseline, then the likeliest winner
MODE_WEIGHTS = {"eager": 1.0, "graphs": 2.0, "compiled": 2.0}  # shares of the time budget: compiling takes time
LENGTH_BUCKETS = (16, 24, 32, 40, 48, 64, 96, 160)  # the embedded corpus's longest pair has 158 tokens
LABEL_SMOOTHING, LEARNING_RATE, MAX_GRAD_NORM = 0.1, 5e-4, 1.0  # train.py's defaults
ARMS_CORPUS = "arms_corpus.npz"
FINAL_SECONDS = 10.0  # of --time-budget, kept for the last write


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=300, help="the most timed updates per arm and budget")
    parser.add_argument("--spec-peak", type=float, default=989e12, help="data-sheet dense bf16 FLOP/s (H100 SXM)")
    phases = ("arms", "table", "arm")  # 'arm': one arm, in a process 'arms' starts
    parser.add_argument("--phase", choices=phases, required=True, help="what to run (the module's docstring)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/gpu_bench"))
    parser.add_argument("--output", type=Path, default=ARMS_RESULT, help="the JSON")
    parser.add_argument("--models", type=names_of(ARM_MODELS), default=list(ARM_MODELS))
    parser.add_argument("--modes", type=names_of(ARM_MODES), default=list(ARM_MODES), help="run in this order")
    parser.add_argument("--budgets", type=positive_integers, default=[16384, 65536], help="padded tokens per update")
    parser.add_argument("--length-buckets", type=positive_integers, default=list(LENGTH_BUCKETS))
    parser.add_argument("--max-pairs", type=int, default=None, help="the first pairs of the corpus only")
    parser.add_argument("--time-budget", type=float, default=510.0, help="seconds for the whole run")
    parser.add_argument("--min-arm-seconds", type=float, default=30.0, help="an arm given less is skipped")
    parser.add_argument(
        "--grace-seconds", type=float, default=20.0, help="past its share, an arm is stopped after this"
    )
    parser.add_argument("--profiled", type=int, default=3, help="steps profiled to count kernels")
    parser.add_argument("--compile-backend", default="inductor")
    scopes = ("layers", "model")  # each encoder and decoder layer (a graph per kind of layer), or forward and loss
    parser.add_argument("--compile-scope", choices=scopes, default="layers", help="what torch.compile compiles")
    parser.add_argument("--seed", type=int, default=1)
    # off by default: cuDNN's scaled_dot_product_attention crashed on torch 2.11 + CUDA 13 (docs/benchmarks.md)
    parser.add_argument("--cudnn-attention", action="store_true", help="keep the cuDNN attention backend")
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # model/mode, for --phase arm
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # time.time() by which the arm ends
    parser.add_argument("--arm-output", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase != "table":
        if args.length_buckets != sorted(set(args.length_buckets)):
            parser.error(f"--length-buckets must increase: {args.length_buckets}")
        for budget in args.budgets:
            if budget < 2 * args.length_buckets[-1]:
                parser.error(
                    f"--budgets {budget} holds no pair of the longest bucket ({args.length_buckets[-1]} source + "
                    f"{args.length_buckets[-1]} target tokens)"
                )
        for name in ("time_budget", "profiled", "steps"):
            if getattr(args, name) <= 0:
                parser.error(f"--{name.replace('_', '-')} must be positive, not {getattr(args, name)}")
        if args.max_pairs is not None and args.max_pairs < 1:
            parser.error(f"--max-pairs must be positive, not {args.max_pairs}")
    if args.phase == "arm" and (args.arm is None or args.deadline is None or args.arm_output is None):
        parser.error("--phase arm is started by --phase arms (it needs --arm, --deadline and --arm-output)")
    return args


def positive_integers(text: str) -> list[int]:
    """A comma-separated list of positive integers (an argparse type)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be positive")
    return values


def names_of(choices: tuple[str, ...]):
    """An argparse type: a comma-separated list of some of `choices`, in the order given."""

    def parse(text: str) -> list[str]:
        names = text.split(",")
        unknown = [name for name in names if name not in choices]
        if unknown or len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"{text!r}: choose each of {', '.join(choices)} at most once")
        return names

    return parse


def marian_overrides(preset: str, vocab_size: int) -> dict:
    """MarianMT config values that make it the same width, depth, heads and parameter count as the preset's Prime
    model (FFN width solved), as train.py's `--config_overrides` would."""
    config = hf_unified_mt.get_config("unified_transformer", preset, vocab_size=vocab_size)
    prime = count_parameters(AutoModelForSeq2SeqLM.from_config(config))
    matching = marian_config_matching(
        prime, vocab_size, d_model=config.d_model, layers=config.encoder_layers, heads=config.encoder_attention_heads
    )
    return {
        "d_model": config.d_model,
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "encoder_attention_heads": config.encoder_attention_heads,
        "decoder_attention_heads": config.decoder_attention_heads,
        # a multiple of 8, as tensor-core GEMMs want (the parameter count moves by at most 0.1%)
        "encoder_ffn_dim": 8 * round(matching.encoder_ffn_dim / 8),
        "decoder_ffn_dim": 8 * round(matching.decoder_ffn_dim / 8),
    }


def flop_terms(b: int, s: int, t: int) -> np.ndarray:
    """[`flop_polynomial`]'s terms for `b` pairs of `s` source and `t` target tokens: B*S, B*T, B*S^2, B*T^2, B*S*T."""
    return np.array([b * s, b * t, b * s * s, b * t * t, b * s * t], dtype=np.float64)


def flop_polynomial(model, device: str, vocab_size: int) -> tuple[np.ndarray, float]:
    """Coefficients of FLOPs(B, S, T) = c . [B*S, B*T, B*S^2, B*T^2, B*S*T] for one forward + backward under bf16
    autocast (matrix products are exactly such polynomials), fitted on 7 shapes, with the largest relative error on
    3 held-out shapes."""

    def count(b, s, t):
        ids = torch.randint(4, vocab_size, (b, s), device=device)
        labels = torch.randint(4, vocab_size, (b, t), device=device)
        counter = FlopCounterMode(display=False)
        with counter, torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
            loss.backward()
        model.zero_grad(set_to_none=True)
        return float(counter.get_total_flops())

    fit_shapes = [(8, 16, 16), (8, 48, 16), (8, 16, 48), (8, 48, 48), (4, 32, 64), (16, 64, 32), (8, 96, 80)]
    check_shapes = [(32, 40, 44), (12, 120, 100), (64, 24, 30)]
    was_training = model.training
    model.train()
    x = np.stack([flop_terms(*shape) for shape in fit_shapes])
    y = np.array([count(*shape) for shape in fit_shapes])
    coefficients, *_ = np.linalg.lstsq(x, y, rcond=None)
    errors = [abs(flop_terms(*shape) @ coefficients / count(*shape) - 1) for shape in check_shapes]
    model.train(was_training)
    return coefficients, max(errors)


def run_environment(args) -> dict:
    """The device, the versions that ran and the preset, as a result JSON starts."""
    return {
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else cpu_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": __import__("transformers").__version__,
        "preset": args.preset,
    }


# ---------------------------------------------------------------------------------------------------------------------
# --phase arms: eager / compiled / CUDA graphs, every arm in one call
# ---------------------------------------------------------------------------------------------------------------------


def bucket_batches(
    source_lengths: np.ndarray, target_lengths: np.ndarray, max_tokens: int, buckets: list[int], seed: int
) -> list[tuple[int, int, np.ndarray]]:
    """Token-budget batches of a fixed set of shapes, as (rows, length, pair indices): each pair goes to the shortest
    bucket length L that holds its source and its target, a bucket is cut into batches of max_tokens // (2 L) pairs
    (source and target padded to L; the last batch of a bucket is filled up with pad rows), and the batches are
    shuffled by `seed`. Pairs longer than the longest bucket are left out."""
    longest = np.maximum(source_lengths, target_lengths)
    bucket_of_pair = np.searchsorted(np.asarray(buckets), longest)
    batches = []
    for index, length in enumerate(buckets):
        rows = max_tokens // (2 * length)
        if rows < 1:
            raise ValueError(f"{max_tokens} tokens per update hold no pair of bucket length {length}")
        members = np.flatnonzero(bucket_of_pair == index)
        batches += [(rows, length, members[start : start + rows]) for start in range(0, len(members), rows)]
    order = np.random.default_rng(seed).permutation(len(batches))
    return [batches[i] for i in order]


def budget_plan(corpus: dict, max_tokens: int, buckets: list[int], seed: int) -> dict:
    """Batches per epoch, their shapes and padding share at `max_tokens` padded tokens per update."""
    batches = bucket_batches(corpus["source_lengths"], corpus["target_lengths"], max_tokens, buckets, seed)
    real = sum(
        int(corpus["source_lengths"][pairs].sum() + corpus["target_lengths"][pairs].sum()) for *_, pairs in batches
    )
    padded = sum(rows * 2 * length for rows, length, _ in batches)
    shapes = sorted({(rows, length) for rows, length, _ in batches}, key=lambda shape: shape[1])
    return {
        "batches_per_epoch": len(batches),
        "shapes": [list(shape) for shape in shapes],
        "padding_share": 1 - real / padded,
    }


def prepare_arms_corpus(args) -> dict:
    """Trains the BPE tokenizer on the corpus, tokenizes it and saves the token ids for the arms (`ARMS_CORPUS` in
    `--work-dir`); returns what the data are."""
    from hf_unified_mt.training.tokenization import train_tokenizer

    start = time.perf_counter()
    sources, targets = embedded_pairs("train", args.max_pairs)
    tokenizer = train_tokenizer(sources + targets, args.vocab_size)
    source_ids = tokenizer(sources)["input_ids"]
    target_ids = tokenizer(text_target=targets)["input_ids"]
    corpus = {
        "source_ids": np.concatenate([np.asarray(ids, dtype=np.int32) for ids in source_ids]),
        "source_lengths": np.array([len(ids) for ids in source_ids], dtype=np.int64),
        "target_ids": np.concatenate([np.asarray(ids, dtype=np.int32) for ids in target_ids]),
        "target_lengths": np.array([len(ids) for ids in target_ids], dtype=np.int64),
        "special_ids": np.array(
            [len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id]
        ),
    }
    buffer = io.BytesIO()
    np.savez(buffer, **corpus)
    write_bytes(args.work_dir / ARMS_CORPUS, buffer.getvalue())
    longest = np.maximum(corpus["source_lengths"], corpus["target_lengths"])
    if longest.min() > args.length_buckets[-1]:
        raise SystemExit(f"no pair of the corpus fits the longest of --length-buckets ({args.length_buckets[-1]})")
    return {
        "corpus": "bible_es_en train (embedded)",
        "pairs": len(sources),
        "pairs_left_out": int((longest > args.length_buckets[-1]).sum()),
        "vocab_size": len(tokenizer),
        "seconds": time.perf_counter() - start,
        "budgets": {
            str(budget): budget_plan(corpus, budget, args.length_buckets, args.seed) for budget in args.budgets
        },
    }


def load_arms_corpus(work_dir: Path) -> dict:
    """The arrays `prepare_arms_corpus` saved, with each pair's offsets into the flat id arrays."""
    with np.load(work_dir / ARMS_CORPUS) as saved:
        corpus = {name: saved[name] for name in saved.files}
    for side in ("source", "target"):
        corpus[f"{side}_offsets"] = np.concatenate([[0], np.cumsum(corpus[f"{side}_lengths"])])
    return corpus


def build_arm_model(name: str, preset: str, corpus: dict):
    """Prime (`unified_transformer`) or the same-size MarianMT, built as train.py builds them for this tokenizer."""
    vocab_size, pad, bos, eos = (int(value) for value in corpus["special_ids"])
    token_ids = dict(vocab_size=vocab_size, pad_token_id=pad, bos_token_id=bos, eos_token_id=eos)
    token_ids["decoder_start_token_id"] = bos
    if name == "prime":
        return AutoModelForSeq2SeqLM.from_config(hf_unified_mt.get_config("unified_transformer", preset, **token_ids))
    values = {**MARIAN_COMMON, **MARIAN_PRESETS[preset], **token_ids, "forced_eos_token_id": eos}
    values.update(max_position_embeddings=512, **marian_overrides(preset, vocab_size))
    return MarianMTModel(MarianConfig(**values))


def padded_batch(rows: int, length: int, pairs: np.ndarray, corpus: dict, device: str) -> dict:
    """One batch of `rows` x `length` on `device`: the pairs' sources, decoder inputs (the targets shifted right
    behind the start token) and labels, right-padded; rows past the pairs are pad rows (one source token, no target),
    which the loss ignores. Also the real (non-padding) source and target tokens."""
    _, pad, bos, eos = (int(value) for value in corpus["special_ids"])
    input_ids = torch.full((rows, length), pad, dtype=torch.long)
    attention_mask = torch.zeros((rows, length), dtype=torch.long)
    decoder_input_ids = torch.full((rows, length), pad, dtype=torch.long)
    labels = torch.full((rows, length), -100, dtype=torch.long)
    decoder_input_ids[:, 0] = bos
    input_ids[len(pairs) :, 0] = eos
    attention_mask[len(pairs) :, 0] = 1
    for row, pair in enumerate(pairs.tolist()):
        source = corpus["source_ids"][corpus["source_offsets"][pair] : corpus["source_offsets"][pair + 1]]
        target = corpus["target_ids"][corpus["target_offsets"][pair] : corpus["target_offsets"][pair + 1]]
        input_ids[row, : len(source)] = torch.from_numpy(source)
        attention_mask[row, : len(source)] = 1
        labels[row, : len(target)] = torch.from_numpy(target)
        decoder_input_ids[row, 1 : len(target)] = torch.from_numpy(target[:-1])
    tensors = dict(
        input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, labels=labels
    )
    return {
        "tensors": {name: tensor.to(device) for name, tensor in tensors.items()},
        "shape": (rows, length),
        "source_tokens": int(corpus["source_lengths"][pairs].sum()),
        "target_tokens": int(corpus["target_lengths"][pairs].sum()),
    }


def arm_loss_function(model, mode: str, args):
    """The training loss of a batch, `(input_ids, attention_mask, decoder_input_ids, labels) -> loss`, eager or
    compiled as `mode` says: each encoder and decoder layer compiled (`--compile-scope layers`; the layers of a kind
    share one graph) or the whole forward and loss (`model`), with dynamic shapes, and with CUDA graphs for
    `graphs` (`mode="reduce-overhead"`)."""

    def loss_function(input_ids, attention_mask, decoder_input_ids, labels):
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False
        ).logits
        return translation_cross_entropy(logits, labels, None, LABEL_SMOOTHING)

    if mode == "eager":
        return loss_function
    import torch._dynamo

    # a frame past the recompile limit would run eagerly unnoticed: fail instead (older torch: cache_size_limit, ...)
    for limit, fail in (
        ("recompile_limit", "fail_on_recompile_limit_hit"),
        ("cache_size_limit", "fail_on_cache_limit_hit"),
    ):
        if hasattr(torch._dynamo.config, limit) and hasattr(torch._dynamo.config, fail):
            setattr(torch._dynamo.config, limit, 64)
            setattr(torch._dynamo.config, fail, True)
            break
    options = dict(backend=args.compile_backend, dynamic=True)
    if mode == "graphs":
        options["mode"] = "reduce-overhead"
    if args.compile_scope == "model":
        return torch.compile(loss_function, **options)
    for layers in (model.get_encoder().layers, model.get_decoder().layers):
        for layer in layers:
            layer.compile(**options)
    return loss_function


def compile_counts() -> dict:
    """What TorchDynamo and Inductor counted in this process: graphs compiled and the seconds spent compiling them
    (forward and backward), graph breaks, CUDA graphs skipped."""
    from torch._dynamo.utils import calculate_time_spent, counters

    return {
        "graphs_compiled": counters["stats"]["unique_graphs"],
        "compile_seconds": calculate_time_spent().get("total_wall_time"),
        "graph_breaks": sum(counters["graph_break"].values()),
        "graph_break_reasons": sorted(counters["graph_break"])[:5],
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"],
    }


LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def count_kernels(step, batches: list[dict], args) -> dict:
    """Kernels per step over `--profiled` steps: on a GPU, `torch.profiler`'s GPU kernels, the host's launch calls
    (a CUDA graph's replay is one) and the GPU's busy share of the wall clock; on a CPU, as a stand-in, the compute
    operators a step dispatches (`harness.profiling.OperatorCount`; TorchDynamo runs a compiled region eagerly under a
    dispatch mode, so a compiled arm counts as eager)."""
    steps = [batches[i % len(batches)] for i in range(args.profiled)]
    if not args.device.startswith("cuda"):
        from harness.profiling import OperatorCount

        with OperatorCount() as counted:
            for batch in steps:
                step(batch)
        return {
            "kernels_per_step": sum(counted.counts.values()) / len(steps),
            "kernels_counted_by": "CPU stand-in: compute operators dispatched (TorchDispatchMode, under which "
            "compiled regions run eagerly), not GPU kernels",
        }
    from harness.profiling import busy_seconds
    from torch.profiler import ProfilerActivity, profile

    synchronize(args.device)
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        for batch in steps:
            step(batch)
        synchronize(args.device)
    wall = time.perf_counter() - start
    events = profiler.events()
    kernels = [event for event in events if event.device_type == torch.autograd.DeviceType.CUDA]
    return {
        "kernels_per_step": len(kernels) / len(steps),
        "kernels_counted_by": "torch.profiler: GPU kernels (and memory copies) per step",
        "launch_calls_per_step": sum(event.name in LAUNCH_CALLS for event in events) / len(steps),
        "graph_launches_per_step": sum(event.name == "cudaGraphLaunch" for event in events) / len(steps),
        "gpu_busy_share_profiled": busy_seconds(kernels) / wall,
    }


class TimeUp(Exception):
    """An arm's warm-up did not end within its time."""


def measure_budget(
    entry: dict, save, step, corpus: dict, coefficients: np.ndarray, deadline: float, left: int, repeats: int, args
):
    """Fills `entry` for one budget (`entry["tokens_per_update"]`), calling `save()` once timed: the first update
    (which compiles), a warm-up over every batch shape (three times each with CUDA graphs: warm-up, recording,
    replay: `repeats`), timed updates in chunks of up to 10 between synchronisations until `--steps` or this budget's
    share of the time left to `deadline` (`left` budgets share it) less what counting the kernels takes, then the
    kernels."""
    plan = bucket_batches(
        corpus["source_lengths"], corpus["target_lengths"], entry["tokens_per_update"], args.length_buckets, args.seed
    )
    batches = [padded_batch(rows, length, pairs, corpus, args.device) for rows, length, pairs in plan]
    first_of_shape = {}
    for index, batch in enumerate(batches):
        first_of_shape.setdefault(batch["shape"], index)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    entry.update(batches_per_epoch=len(batches), shapes=len(first_of_shape))
    synchronize(args.device)
    start = time.perf_counter()
    step(batches[0])
    synchronize(args.device)
    entry["first_update_seconds"] = time.perf_counter() - start
    until = time.time() + (deadline - time.time()) / left
    warmed = 0
    for number, index in enumerate(first_of_shape.values()):
        for _ in range(repeats):
            step(batches[index])
            warmed += 1
        if time.time() > until:
            raise TimeUp(f"warm-up passed this budget's time after {number + 1} of {len(first_of_shape)} shapes")
    synchronize(args.device)
    entry["warmup_updates"], entry["warmup_seconds"] = warmed + 1, time.perf_counter() - start

    loss_sum = torch.zeros((), device=args.device)
    seconds, done = 0.0, 0
    while done < args.steps:
        chunk = min(10, args.steps - done)
        chunk_start = time.perf_counter()
        for number in range(done, done + chunk):
            loss_sum += step(batches[number % len(batches)]).float()
        synchronize(args.device)
        elapsed = time.perf_counter() - chunk_start
        seconds, done = seconds + elapsed, done + chunk
        profiling = args.profiled * elapsed / chunk * (4 if cuda else 2) + 2.0
        if time.time() + elapsed + profiling > until:
            break
    timed = [batches[number % len(batches)] for number in range(done)]
    real = sum(batch["source_tokens"] + batch["target_tokens"] for batch in timed)
    padded = sum(batch["shape"][0] * batch["shape"][1] * 2 for batch in timed)
    flops = sum(float(flop_terms(rows, length, length) @ coefficients) for rows, length in (b["shape"] for b in timed))
    entry.update(
        timed_updates=done,
        seconds=seconds,
        seconds_per_update=seconds / done,
        tokens_per_second=real / seconds,
        target_tokens_per_second=sum(batch["target_tokens"] for batch in timed) / seconds,
        padding_share=1 - real / padded,
        tflops_per_second=flops / seconds / 1e12,
        mean_loss=float(loss_sum) / done,
    )
    if cuda:
        entry["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    save()
    try:
        entry.update(count_kernels(step, batches, args))
    except Exception as error:  # the profiler is a bystander: its failure leaves the timing standing
        entry["kernels_error"] = f"{type(error).__name__}: {error}"[:500]


def arm_phase(args) -> None:
    """One arm (`--arm model/mode`) at every budget, its record rewritten to `--arm-output` after each."""
    name, mode = args.arm.split("/")
    record = {"model": name, "mode": mode, "status": "running", "budgets": {}}

    def save():
        write_json(args.arm_output, record, indent=1)

    save()
    try:
        device_type = args.device.split(":")[0]
        if device_type == "cuda" and not args.cudnn_attention:
            torch.backends.cuda.enable_cudnn_sdp(False)
        corpus = load_arms_corpus(args.work_dir)
        torch.manual_seed(args.seed)
        model = build_arm_model(name, args.preset, corpus).to(args.device).train()
        record["parameters"] = count_parameters(model)
        record["attention"] = model.config._attn_implementation
        if args.length_buckets[-1] > model.config.max_position_embeddings:
            raise ValueError(
                f"bucket length {args.length_buckets[-1]} exceeds the model's {model.config.max_position_embeddings} "
                "positions: lower --length-buckets"
            )
        coefficients, record["flop_fit_max_relative_error"] = flop_polynomial(
            model, args.device, model.config.vocab_size
        )
        loss_function = arm_loss_function(model, mode, args)
        parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
        optimizer = torch.optim.AdamW(parameters, lr=LEARNING_RATE, fused=True)

        def step(batch: dict) -> torch.Tensor:
            if mode == "graphs":
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=device_type == "cuda"):
                loss = loss_function(**batch["tensors"])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, MAX_GRAD_NORM)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss.detach()

        for left, max_tokens in zip(range(len(args.budgets), 0, -1), args.budgets):
            entry = record["budgets"].setdefault(str(max_tokens), {"status": "running"})
            entry["tokens_per_update"] = max_tokens
            save()
            try:
                repeats = 3 if mode == "graphs" else 1
                measure_budget(entry, save, step, corpus, coefficients, args.deadline, left, repeats, args)
                entry["status"] = "done"
            except TimeUp as error:
                entry.update(status="timed out", error=str(error))
            except Exception as error:
                entry.update(status="failed", error=f"{type(error).__name__}: {error}"[:2000])
                traceback.print_exc()
            if mode != "eager":
                record["compile"] = compile_counts()
            save()
            print(f"{name}/{mode} {max_tokens}: {json.dumps(entry)}", flush=True)
        unfinished = [entry["status"] for entry in record["budgets"].values() if entry["status"] != "done"]
        if not unfinished:
            record["status"] = "done"
        else:
            record["status"] = "partial" if len(unfinished) < len(record["budgets"]) else unfinished[0]
    except Exception as error:
        record.update(status="failed", error=f"{type(error).__name__}: {error}"[:2000])
        save()
        raise
    save()


def arm_seconds(seconds_left: float, weights: list[float]) -> float:
    """The share of `seconds_left` for the next of the arms left, whose weights are `weights` (its own first)."""
    return max(0.0, seconds_left) * weights[0] / sum(weights)


def run_with_limit(command: list[str], seconds: float) -> tuple[int, bool]:
    """Runs `command` in a process group of its own (the compiler's workers join it), its output on ours; past
    `seconds` the group is stopped (SIGTERM, then SIGKILL). Returns the exit code and whether it was stopped."""
    process = subprocess.Popen(command, start_new_session=True)
    try:
        return process.wait(timeout=seconds), False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        return process.returncode, True


def arm_command(args, model: str, mode: str, deadline: float, output: Path) -> list[str]:
    """The command line of one arm's process (`--phase arm`)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--phase", "arm", "--arm", f"{model}/{mode}"]
    command += ["--deadline", repr(deadline), "--arm-output", str(output), "--preset", args.preset]
    command += ["--device", args.device, "--work-dir", str(args.work_dir), "--seed", str(args.seed)]
    command += ["--budgets", ",".join(map(str, args.budgets))]
    command += ["--length-buckets", ",".join(map(str, args.length_buckets))]
    command += ["--steps", str(args.steps), "--profiled", str(args.profiled)]
    command += ["--compile-backend", args.compile_backend, "--compile-scope", args.compile_scope]
    return command + (["--cudnn-attention"] if args.cudnn_attention else [])


def run_arm(args, model: str, mode: str, seconds: float, peak: float) -> dict:
    """One arm in a process of its own, given `seconds` (and `--grace-seconds` more before it is stopped); its
    record, with how it ended and each budget's MFU."""
    output = args.work_dir / f"arm_{model}_{mode}.json"
    output.unlink(missing_ok=True)
    start = time.time()
    command = arm_command(args, model, mode, start + seconds, output)
    returncode, stopped = run_with_limit(command, seconds + args.grace_seconds)
    record = json.loads(output.read_text()) if output.exists() else {"model": model, "mode": mode, "budgets": {}}
    record.update(seconds_given=seconds, wall_seconds=time.time() - start, exit_code=returncode)
    if stopped:
        record["error"] = f"stopped after {seconds + args.grace_seconds:.0f} s, its share of --time-budget"
        for entry in record["budgets"].values():
            if entry["status"] == "running":
                entry.update(status="timed out", error=record["error"])
        finished = any(entry["status"] == "done" for entry in record["budgets"].values())
        record["status"] = "partial" if finished else "timed out"
    elif record.get("status", "running") == "running":
        record.update(status="failed", error=f"exit code {returncode} before the arm recorded an error (see the log)")
    for entry in record["budgets"].values():
        if "tflops_per_second" in entry:
            entry["mfu_measured_peak"] = entry["tflops_per_second"] * 1e12 / peak
            entry["mfu_spec_peak"] = entry["tflops_per_second"] * 1e12 / args.spec_peak
    return record


def arms_summary(result: dict) -> dict:
    """Per budget, each model's fastest arm that finished it, and Prime's tokens/s over MarianMT's."""
    summary = {}
    for budget in map(str, result["budgets"]):
        best = {}
        for arm in result["arms"]:
            entry = arm.get("budgets", {}).get(budget, {})
            if entry.get("status") != "done":
                continue
            if arm["model"] not in best or entry["tokens_per_second"] > best[arm["model"]]["tokens_per_second"]:
                best[arm["model"]] = {
                    "mode": arm["mode"],
                    "tokens_per_second": entry["tokens_per_second"],
                    "mfu_measured_peak": entry["mfu_measured_peak"],
                }
        if "prime" in best and "marian" in best:
            best["prime_over_marian"] = best["prime"]["tokens_per_second"] / best["marian"]["tokens_per_second"]
        summary[budget] = best
    return summary


def arms_phase(args) -> None:
    """Every arm within `--time-budget` seconds, the JSON rewritten after each; the table at the end."""
    end = time.time() + args.time_budget
    cuda = args.device.startswith("cuda")
    peak = matmul_peak(torch.bfloat16, 8192 if args.device.startswith("cuda") else 1024, args.device)
    print(f"bf16 matrix-product peak {peak / 1e12:.1f} TFLOP/s", flush=True)
    result = {
        "benchmark": "training arms: eager, compiled, CUDA graphs",
        **run_environment(args),
        "precision": "bf16 autocast" if cuda else "float32",
        "budgets": args.budgets,
        "length_buckets": args.length_buckets,
        "settings": {key: str(value) for key, value in vars(args).items() if key not in ("arm", "deadline")},
        "bf16_matmul_peak_tflops": peak / 1e12,
        "spec_peak_tflops": args.spec_peak / 1e12,
        "time_budget_seconds": args.time_budget,
        "data": prepare_arms_corpus(args),
        "arms": [],
        "summary": {},
        "complete": False,
        "machine": machine(),
    }
    write_result(args.output, result)
    arms = [(model, mode) for mode in args.modes for model in args.models]
    runnable = [(model, mode) for model, mode in arms if cuda or mode != "graphs"]
    for model, mode in arms:
        if (model, mode) not in runnable:
            record = {"model": model, "mode": mode, "status": "skipped", "error": "no CUDA: CUDA graphs need a GPU"}
        else:
            weights = [MODE_WEIGHTS[later] for _, later in runnable[runnable.index((model, mode)) :]]
            seconds = arm_seconds(end - time.time() - FINAL_SECONDS, weights)
            if seconds < args.min_arm_seconds:
                record = {"model": model, "mode": mode, "status": "skipped"}
                record["error"] = f"time budget: {seconds:.0f} s left for it, under --min-arm-seconds"
            else:
                print(f"== {model}/{mode}: {seconds:.0f} s", flush=True)
                record = run_arm(args, model, mode, seconds, peak)
        result["arms"].append(record)
        result["summary"] = arms_summary(result)
        write_json(args.output, result, indent=2)
        print(f"== {model}/{mode}: {record['status']} {record.get('error', '')}", flush=True)
    result["complete"] = True
    result["elapsed_seconds"] = args.time_budget - (end - time.time())
    write_result(args.output, result)
    print(arms_table(result), flush=True)
    print(f"wrote {args.output}")


def arm_status(record: dict) -> str:
    """`done`, or how it ended and why, on one short line."""
    if record.get("status") == "done":
        return "done"
    reason = (record.get("error") or "").splitlines()[0] if record.get("error") else ""
    reason = reason if len(reason) <= 90 else reason[:87] + "..."
    return f"{record.get('status', '?')}: {reason}" if reason else record.get("status", "?")


def arms_table(result: dict) -> str:
    """The markdown table of `--phase arms`' JSON: a row per arm and budget, and the best of each model."""
    settings = result["settings"]
    stand_in = any(
        "stand-in" in entry.get("kernels_counted_by", "")
        for arm in result["arms"]
        for entry in arm.get("budgets", {}).values()
    )
    buckets = ", ".join(map(str, result["length_buckets"]))
    lines = [
        f"Training steps (forward, backward, clipping, fused AdamW), {result['precision']}, {result['device']}, "
        f"torch {result['torch']}: Prime `{result['preset']}` and the same-size MarianMT; compiled: "
        f"`torch.compile(backend={settings['compile_backend']!r}, dynamic=True)` of the "
        f"{'encoder and decoder layers' if settings['compile_scope'] == 'layers' else 'whole forward and loss'}, "
        f'CUDA graphs: `mode="reduce-overhead"`; batches padded to {len(result["length_buckets"])} length buckets '
        f"({buckets}); measured bf16 GEMM peak {result['bf16_matmul_peak_tflops']:.0f} TFLOP/s:",
        "",
        "| model | mode | tokens/update | updates | s/update | tokens/s | MFU | kernels/step | launches/step "
        "| first update s | status |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    labels = {"prime": f"Prime `{result['preset']}`", "marian": "MarianMT, same size"}

    def number(entry, key, form):
        return format(entry[key], form) if entry.get(key) is not None else ""

    for arm in result["arms"]:
        label = labels[arm["model"]]
        entries = arm.get("budgets") or {}
        if not entries:
            lines.append(f"| {label} | {arm['mode']} | | | | | | | | | {arm_status(arm)} |")
        for budget, entry in entries.items():
            status = "done" if entry.get("status") == "done" else arm_status(entry)
            lines.append(
                f"| {label} | {arm['mode']} | {int(budget):,} | {number(entry, 'timed_updates', 'd')} | "
                f"{number(entry, 'seconds_per_update', '.3f')} | {number(entry, 'tokens_per_second', ',.0f')} | "
                f"{number(entry, 'mfu_measured_peak', '.1%')} | {number(entry, 'kernels_per_step', ',.0f')} | "
                f"{number(entry, 'launch_calls_per_step', ',.0f')} | {number(entry, 'first_update_seconds', '.1f')} "
                f"| {status} |"
            )
    lines.append("")
    for arm in result["arms"]:
        if "compile" in arm:
            counted = arm["compile"]
            seconds = f" in {counted['compile_seconds']:.0f} s" if counted.get("compile_seconds") is not None else ""
            lines.append(
                f"{labels[arm['model']]}, {arm['mode']}: {counted['graphs_compiled']} graphs compiled{seconds}, "
                f"{counted['graph_breaks']} graph breaks, {counted['cudagraph_skips']} CUDA graphs skipped."
            )
    for budget, best in result["summary"].items():
        if "prime_over_marian" in best:
            lines.append(
                f"At {int(budget):,} tokens per update, Prime / MarianMT tokens per second, each at its best mode "
                f"({best['prime']['mode']}, {best['marian']['mode']}): **{best['prime_over_marian']:.2f}x**."
            )
    if stand_in:
        lines.append(
            "On a CPU, kernels/step is a stand-in: the compute operators a step dispatches (TorchDispatchMode, under "
            "which a compiled region runs eagerly), not GPU kernels."
        )
    if not result.get("complete"):
        lines.append("The run stopped before its last arm (the JSON holds the arms it finished).")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.phase == "table":
        print(arms_table(read_result(args.output)), end="")
        return
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.phase == "arms":
        arms_phase(args)
    else:
        arm_phase(args)


if __name__ == "__main__":
    main()
