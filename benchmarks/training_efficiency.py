#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""How close a CPU training step comes to this machine's limit, in float32 and under bfloat16 autocast: the
matrix-product peak per precision, then one training step (forward, backward, AdamW) on one fixed batch of the main
job's shape for the main job's model, Prime `small` and a same-size MarianMT beside each, in interleaved rounds; model
FLOPs from `torch.utils.flop_counter` on an eager-attention copy (docs/benchmarks.md, "Training on CPU").

    python benchmarks/training_efficiency.py                  # table on stdout, JSON to benchmarks/results/
    python benchmarks/training_efficiency.py --table          # the tables of docs/benchmarks.md from the JSONs
    python benchmarks/training_efficiency.py --profile        # the main job's step by operator, per setting
    python benchmarks/training_efficiency.py --changes        # the step with each of its speed-ups undone, side by side
"""

import argparse
import contextlib
import copy
import statistics
import time
import types
from pathlib import Path

import torch
from harness import RESULTS, interleaved_times, machine, main_job_settings, read_result, write_result
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSeq2SeqLM, MarianMTModel

import hf_unified_mt
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gemm-size", type=int, default=1024)
    parser.add_argument("--max-tokens", type=int, default=2500, help="padded source + target tokens per batch")
    parser.add_argument("--length", type=int, default=32, help="tokens per row, each side")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", nargs="+", default=["main_job", "small"], choices=["main_job", "small", "tiny"])
    parser.add_argument("--table", action="store_true", help="print the docs table of the committed JSON and stop")
    parser.add_argument("--profile", action="store_true", help="profile the main job's step by operator instead")
    parser.add_argument("--profile-steps", type=int, default=12, help="batches (shapes) per profiled pass")
    parser.add_argument("--changes", action="store_true", help="time the step with each of its speed-ups undone")
    parser.add_argument("--changes-output", type=Path, default=RESULTS / "training_step_changes.json")
    parser.add_argument("--profile-output", type=Path, default=RESULTS / "training_step_profile.json")
    parser.add_argument("--output", type=Path, default=RESULTS / "training_efficiency.json")
    return parser.parse_args(argv)


def gemm_peak(dtype: torch.dtype, size: int, repeats: int = 10) -> float:
    """FLOP/s of a size^3 matrix product in `dtype`: the best of `repeats` after two warm-ups."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def gemm_peaks(size: int) -> dict[str, float]:
    return {"float32": gemm_peak(torch.float32, size), "bfloat16": gemm_peak(torch.bfloat16, size)}


def prime_config(name: str):
    """The Prime config of `name`: the README main job's (its preset and overrides), `small`, or `tiny` (tests)."""
    if name == "main_job":
        recipe, overrides = main_job_settings()
        return hf_unified_mt.get_config(
            recipe["arch"], recipe["preset"], vocab_size=recipe["tokenizer_vocab_size"], **overrides
        )
    return hf_unified_mt.get_config("unified_transformer", name, vocab_size=8000 if name == "small" else 99)


def build_models(name: str) -> dict:
    """Prime and the MarianMT of the same width, depth, heads and parameter count, seeded, dropout as configured."""
    config = prime_config(name)
    torch.manual_seed(0)
    prime = AutoModelForSeq2SeqLM.from_config(config)
    size = dict(d_model=config.d_model, layers=config.encoder_layers, heads=config.encoder_attention_heads)
    marian = MarianMTModel(marian_config_matching(count_parameters(prime), config.vocab_size, **size))
    return {f"{name}/prime": prime, f"{name}/marian": marian}


def random_batch(vocab: int, rows: int, source: int, target: int, generator: torch.Generator) -> dict:
    """`rows` random sources of `source` ids and labels of `target` ids, unpadded."""
    ids = torch.randint(4, vocab, (rows, source), generator=generator)
    labels = torch.randint(4, vocab, (rows, target), generator=generator)
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)


def fixed_batch(vocab_size: int, args) -> dict:
    rows = max(1, args.max_tokens // (2 * args.length))
    return random_batch(vocab_size, rows, args.length, args.length, torch.Generator().manual_seed(0))


def train_on(model, optimizer, batches: list, bf16: bool) -> None:
    """One update per batch: forward, backward, optimizer step, under bf16 autocast or in float32."""
    for batch in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def training_step(model, batch: dict, bf16: bool):
    """One update: forward, backward, AdamW (the Trainer's optimizer), under bf16 autocast or in float32."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    return lambda: train_on(model, optimizer, [batch], bf16)


def step_flops(model, batch: dict) -> int:
    """Model FLOPs of one forward + backward on an eager-attention copy (the optimizer's are negligible)."""
    clone = copy.deepcopy(model)
    clone.set_attn_implementation("eager")
    with FlopCounterMode(display=False) as counter:
        clone(**batch).loss.backward()
    return counter.get_total_flops()


def shape_cost(args, name: str = "main_job", steps: int = 24) -> dict:
    """Seconds per step of `name`'s Prime model on one fixed batch shape (`--length` tokens each side) against `steps`
    batches of other shapes (about the same padded tokens each, lengths 20-43 and 33-44 as a run's token-budget batches
    have), then those shapes again, in float32 and bfloat16: what a run's many batch shapes cost each precision."""
    torch.manual_seed(0)
    prime = AutoModelForSeq2SeqLM.from_config(prime_config(name))  # (no MarianMT here)
    optimizer = torch.optim.AdamW(prime.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(0)

    def make(rows: int, source: int, target: int) -> dict:
        return random_batch(prime.config.vocab_size, rows, source, target, generator)

    rows = max(1, args.max_tokens // (2 * args.length))
    fixed = [make(rows, args.length, args.length) for _ in range(steps)]
    shapes = [(20 + i, 44 - i // 2) for i in range(steps)]  # distinct (source, target) lengths
    varied = [make(max(1, args.max_tokens // (s + t)), s, t) for s, t in shapes]
    prime.train()

    def seconds_per_step(batches: list, bf16: bool) -> float:
        start = time.perf_counter()
        train_on(prime, optimizer, batches, bf16)
        return (time.perf_counter() - start) / len(batches)

    result = {}
    for precision, bf16 in (("float32", False), ("bfloat16", True)):
        seconds_per_step(fixed[:1], bf16)  # warm-up of the fixed shape
        result[precision] = {
            "fixed_shape": seconds_per_step(fixed[1:], bf16),
            "new_shapes": seconds_per_step(varied, bf16),
            "same_shapes_again": seconds_per_step(varied, bf16),
        }
    return result


def measure(args) -> dict:
    torch.set_num_threads(args.threads)
    peaks = gemm_peaks(args.gemm_size)
    rows, calls = {}, {}
    for name in args.models:
        for key, model in build_models(name).items():
            batch = fixed_batch(model.config.vocab_size, args)
            flops = step_flops(model, batch)
            rows[key] = {"parameters": count_parameters(model), "flops_per_step": flops}
            for precision, bf16 in (("float32", False), ("bfloat16", True)):
                calls[f"{key}/{precision}"] = training_step(model, batch, bf16)
    times = interleaved_times(calls, args.repeats)
    for call, values in times.items():
        key, precision = call.rsplit("/", 1)
        seconds = statistics.median(values)
        achieved = rows[key]["flops_per_step"] / seconds
        rows[key][precision] = {
            "seconds_per_step": seconds,
            "rounds": values,
            "gflops_per_second": achieved / 1e9,
            "share_of_peak": achieved / peaks[precision],
        }
    for row in rows.values():
        row["bf16_speedup"] = row["float32"]["seconds_per_step"] / row["bfloat16"]["seconds_per_step"]
    new_shapes = shape_cost(args, args.models[0])
    return {
        "new_shapes": {"model": args.models[0], **new_shapes},
        "machine": machine(threads=args.threads),
        "settings": {"max_tokens": args.max_tokens, "length": args.length, "repeats": args.repeats},
        "gemm_peak_gflops": {precision: value / 1e9 for precision, value in peaks.items()},
        "models": rows,
    }


# Operator -> the work it does; the first category whose test matches an operator's name takes it.
OPERATOR_CATEGORIES = (
    ("linear layers (mm, addmm)", lambda op: op in ("aten::mm", "aten::addmm", "aten::linear") or "mkldnn" in op),
    (
        "batched matmuls (attention, convolution bands)",
        lambda op: op in ("aten::bmm", "aten::baddbmm") or "scaled_dot_product" in op,
    ),
    ("softmax", lambda op: "softmax" in op and "log_softmax" not in op),
    (
        "casts and copies",
        lambda op: op in ("aten::to", "aten::_to_copy", "aten::copy_", "aten::clone", "aten::contiguous"),
    ),
    ("layer norm", lambda op: "layer_norm" in op),
    ("loss and embeddings", lambda op: any(k in op for k in ("log_softmax", "nll_loss", "cross_entropy", "embedding"))),
    ("optimizer (AdamW)", lambda op: "_foreach" in op or "adam" in op),
)
OTHER = "everything else (elementwise, reshapes, autograd)"


def categorize(operator: str) -> str:
    return next((name for name, test in OPERATOR_CATEGORIES if test(operator)), OTHER)


def in_optimizer_step(event) -> bool:
    """Whether a profiled operator ran inside `optimizer.step()` (the optimizer records itself as a region)."""
    while event is not None:
        if event.name.startswith("Optimizer.step"):
            return True
        event = event.cpu_parent
    return False


def profile_batches(vocab: int, args, multiple: int = 1, steps: int = 12) -> list[dict]:
    """`steps` batches of a run's shapes (about `--max-tokens` tokens each, source and target lengths 20-43 and 33-44,
    none a multiple of 8 unless padded), their lengths padded to `multiple` as `--pad_to_multiple_of` does."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for index in range(steps):
        source, target = 21 + 2 * index, 43 - index
        batch = random_batch(vocab, max(1, args.max_tokens // (source + target)), source, target, generator)
        pad_source, pad_target = -source % multiple, -target % multiple
        batches.append(
            dict(
                input_ids=torch.nn.functional.pad(batch["input_ids"], (0, pad_source), value=0),
                attention_mask=torch.nn.functional.pad(batch["attention_mask"], (0, pad_source), value=0),
                labels=torch.nn.functional.pad(batch["labels"], (0, pad_target), value=-100),
            )
        )
    return batches


def profile_steps(args) -> dict:
    """Seconds per step and operator time by category of the first of `--models` (the main job's model by default) on
    a run's batch shapes, per setting."""
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(args.threads)
    settings = {  # name -> (bf16 autocast, lengths padded to a multiple of, attention implementation)
        "float32": (False, 1, "sdpa"),
        "bfloat16": (True, 1, "sdpa"),
        "bfloat16, lengths padded to 8": (True, 8, "sdpa"),
        "bfloat16, lengths padded to 16": (True, 16, "sdpa"),
        "bfloat16, padded to 8, eager attention": (True, 8, "eager"),
        "float32, eager attention": (False, 1, "eager"),
    }
    peaks = gemm_peaks(args.gemm_size)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(prime_config(args.models[0]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # the Trainer's default optimizer
    model.train()
    flops = {}  # model FLOPs per step by padding multiple; 1 (the unpadded batches: useful work) comes first
    result = {}
    for name, (bf16, multiple, attention) in settings.items():
        batches = profile_batches(model.config.vocab_size, args, multiple, args.profile_steps)
        if multiple not in flops:
            flops[multiple] = statistics.mean(step_flops(model, batch) for batch in batches)
        model.set_attn_implementation(attention)
        train_on(model, optimizer, batches, bf16)  # warm-up: every shape once
        start = time.perf_counter()
        train_on(model, optimizer, batches, bf16)
        seconds = (time.perf_counter() - start) / len(batches)
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            train_on(model, optimizer, batches, bf16)
        by_category: dict[str, float] = {}
        by_operator: dict[str, float] = {}
        for event in profiler.events():
            self_seconds = event.self_cpu_time_total / 1e6 / len(batches)
            category = "optimizer (AdamW)" if in_optimizer_step(event) else categorize(event.name)
            by_category[category] = by_category.get(category, 0.0) + self_seconds
            by_operator[event.name] = by_operator.get(event.name, 0.0) + self_seconds
        operators = list(by_operator.items())
        profiled = sum(by_category.values())
        peak = peaks["bfloat16" if bf16 else "float32"]
        result[name] = {
            "seconds_per_step": seconds,
            # the FLOPs of the padded batches (work done) and of the unpadded ones (work needed), per second
            "gflops_per_second": flops[multiple] / seconds / 1e9,
            "share_of_peak": flops[multiple] / seconds / peak,
            "useful_share_of_peak": flops[1] / seconds / peak,
            "profiled_seconds_per_step": profiled,
            "categories": {key: value / profiled for key, value in sorted(by_category.items(), key=lambda i: -i[1])},
            "top_operators": {key: value for key, value in sorted(operators, key=lambda i: -i[1])[:12]},
            "padded_tokens_per_step": statistics.mean(
                batch["input_ids"].numel() + batch["labels"].numel() for batch in batches
            ),
        }
    return {
        "machine": machine(threads=args.threads),
        "model": args.models[0],
        "gemm_peak_gflops": {precision: value / 1e9 for precision, value in peaks.items()},
        "settings": result,
    }


def profile_table(result: dict) -> str:
    settings = result["settings"]
    names = list(settings)
    categories = [name for name, _ in OPERATOR_CATEGORIES] + [OTHER]
    peaks, record = result["gemm_peak_gflops"], result["machine"]
    lines = [
        f"GEMM peak float32 {peaks['float32']:.0f} GFLOP/s, bfloat16 {peaks['bfloat16']:.0f} GFLOP/s; "
        f"{record['threads']} threads, torch {record['versions']['torch']}.",
        "",
        "| share of the step's operator time | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
        "| seconds per step | " + " | ".join(f"{settings[n]['seconds_per_step']:.3f}" for n in names) + " |",
        "| GFLOP/s (share of its precision's peak; without the padding's FLOPs) | "
        + " | ".join(
            f"{settings[n]['gflops_per_second']:.0f} ({settings[n]['share_of_peak']:.0%}; "
            f"{settings[n]['useful_share_of_peak']:.0%})"
            for n in names
        )
        + " |",
        "| padded tokens per step | "
        + " | ".join(f"{settings[n]['padded_tokens_per_step']:.0f}" for n in names)
        + " |",
    ]
    for category in categories:
        cells = []
        for name in names:
            share = settings[name]["categories"].get(category, 0.0)
            cells.append(f"{share:.0%} ({share * settings[name]['profiled_seconds_per_step'] * 1000:.0f} ms)")
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


LABELS = {"main_job": "main job (Prime 3+3, d 192)", "small": "Prime `small` (4+4, d 256)", "tiny": "Prime `tiny`"}


@contextlib.contextmanager
def step_variant(blockwise_loss: bool, stacked_projections: bool):
    """The training step with its speed-ups on or off (benchmark only: patches the two places that choose them)."""
    from hf_unified_mt import loss_mt
    from hf_unified_mt.modeling_unified_transformer import UnifiedTransformerPrimeLayer

    cross_entropy = loss_mt.BlockwiseCrossEntropy
    projections = UnifiedTransformerPrimeLayer.projections_for_forward
    try:
        if not blockwise_loss:
            loss_mt.BlockwiseCrossEntropy = types.SimpleNamespace(apply=loss_mt.composed_cross_entropy)
        if not stacked_projections:
            UnifiedTransformerPrimeLayer.projections_for_forward = lambda layer: (
                projections(layer) if not layer.training else (None, None)
            )
        yield
    finally:
        loss_mt.BlockwiseCrossEntropy = cross_entropy
        UnifiedTransformerPrimeLayer.projections_for_forward = projections


STEP_VARIANTS = {  # name -> (blockwise loss, stacked projections)
    "before: composed cross-entropy, projections one by one": (False, False),
    "blockwise cross-entropy": (True, False),
    "blockwise cross-entropy, stacked projections (today)": (True, True),
}


def step_changes(args) -> dict:
    """Seconds per step of the main job's model (bf16 autocast, eager attention, lengths padded to 8, label smoothing
    0.1, the Trainer's fused AdamW) on `--profile-steps` batches of a run's shapes, per variant of `STEP_VARIANTS`, in
    interleaved rounds; FLOP/s against the bf16 GEMM peak measured in the same run."""
    torch.set_num_threads(args.threads)
    peak = gemm_peak(torch.bfloat16, args.gemm_size)
    torch.manual_seed(0)
    config = prime_config(args.models[0])
    config.label_smoothing = main_job_settings()[0].get("label_smoothing_factor", 0.1)
    model = AutoModelForSeq2SeqLM.from_config(config)
    model.set_attn_implementation("eager")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    model.train()
    batches = profile_batches(model.config.vocab_size, args, 8, args.profile_steps)
    flops = statistics.mean(step_flops(model, batch) for batch in batches)

    def run(variant: tuple[bool, bool]):
        def call():
            with step_variant(*variant):
                train_on(model, optimizer, batches, bf16=True)

        return call

    times = interleaved_times({name: run(variant) for name, variant in STEP_VARIANTS.items()}, args.repeats)
    before = statistics.median(times[next(iter(STEP_VARIANTS))]) / len(batches)
    variants = {}
    for name, values in times.items():
        seconds = statistics.median(values) / len(batches)
        variants[name] = {
            "seconds_per_step": seconds,
            "rounds": [value / len(batches) for value in values],
            "speedup_over_before": before / seconds,
            "gflops_per_second": flops / seconds / 1e9,
            "share_of_bf16_peak": flops / seconds / peak,
        }
    return {
        "machine": machine(threads=args.threads),
        "model": args.models[0],
        "batches": len(batches),
        "padded_tokens_per_step": statistics.mean(b["input_ids"].numel() + b["labels"].numel() for b in batches),
        "flops_per_step": flops,
        "gemm_peak_gflops": {"bfloat16": peak / 1e9},
        "variants": variants,
    }


def changes_table(result: dict) -> str:
    lines = [
        f"The main job's bf16 training step on {result['batches']} batches of a run's shapes (about "
        f"{result['padded_tokens_per_step']:.0f} padded tokens each), each variant in the same interleaved rounds; "
        f"bf16 GEMM peak {result['gemm_peak_gflops']['bfloat16']:.0f} GFLOP/s; {result['machine']['threads']} threads, "
        f"torch {result['machine']['versions']['torch']}.",
        "",
        "| training step | s/step | speed-up | GFLOP/s (share of the bf16 peak) |",
        "|---|---:|---:|---:|",
    ]
    for name, row in result["variants"].items():
        lines.append(
            f"| {name} | {row['seconds_per_step']:.3f} | {row['speedup_over_before']:.2f}x | "
            f"{row['gflops_per_second']:.0f} ({row['share_of_bf16_peak']:.0%}) |"
        )
    return "\n".join(lines) + "\n"


def table(result: dict) -> str:
    peaks = result["gemm_peak_gflops"]
    lines = [
        f"One training step on a fixed batch of {result['settings']['max_tokens']} padded tokens (rows of "
        f"{result['settings']['length']} + {result['settings']['length']}); GEMM peak float32 {peaks['float32']:.0f} "
        f"GFLOP/s, bfloat16 {peaks['bfloat16']:.0f} GFLOP/s; {result['machine']['threads']} threads, torch "
        f"{result['machine']['versions']['torch']}.",
        "",
        "| model | parameters | fp32 s/step | fp32 GFLOP/s (share of peak) | bf16 s/step "
        "| bf16 GFLOP/s (share of peak) | bf16 speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, row in result["models"].items():
        name, kind = key.split("/")
        label = LABELS[name] if kind == "prime" else f"MarianMT, same size as {LABELS[name].split(' (')[0]}"
        fp32, bf16 = row["float32"], row["bfloat16"]
        lines.append(
            f"| {label} | {row['parameters'] / 1e6:.2f}M | {fp32['seconds_per_step']:.3f} | "
            f"{fp32['gflops_per_second']:.0f} ({fp32['share_of_peak']:.0%}) | {bf16['seconds_per_step']:.3f} | "
            f"{bf16['gflops_per_second']:.0f} ({bf16['share_of_peak']:.0%}) | {row['bf16_speedup']:.2f}x |"
        )
    shapes = result.get("new_shapes")
    if shapes:
        label = LABELS[shapes["model"]].split(" (")[0]
        lines += [
            "",
            f"Seconds per step of the {label}'s model on one batch shape, on batches of shapes it has not seen before "
            "(about the same tokens each), and on those shapes again:",
            "",
            "| precision | one shape | new shapes | the same shapes again |",
            "|---|---:|---:|---:|",
        ]
        for precision in ("float32", "bfloat16"):
            row = shapes[precision]
            lines.append(
                f"| {precision} | {row['fixed_shape']:.3f} | {row['new_shapes']:.3f} | {row['same_shapes_again']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        print(table(read_result(args.output)), end="")
        if args.profile_output.exists():
            print("\n" + profile_table(read_result(args.profile_output)), end="")
        if args.changes_output.exists():
            print("\n" + changes_table(read_result(args.changes_output)), end="")
        return
    if args.changes:
        run, output, render = step_changes, args.changes_output, changes_table
    elif args.profile:
        run, output, render = profile_steps, args.profile_output, profile_table
    else:
        run, output, render = measure, args.output, table
    result = run(args)
    write_result(output, result, argv)
    print(render(result), end="")


if __name__ == "__main__":
    main()
