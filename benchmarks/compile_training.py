#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Whether `train.py --torch_compile True` pays for the README main job on a CPU, and what length buckets cost
(docs/benchmarks.md). Three measurements, each in fresh processes with an empty Inductor cache (cold compiles):

* padding: the main job's batches without buckets and with 1 to 16 length buckets (padded tokens per real token);
* steps: one update per bucket shape, compiled with static shapes and with `dynamic=True` (two processes: TorchDynamo
  keeps its graphs per code object), each beside the same model eager, in interleaved rounds;
* runs: `train.py` on the main job for `--updates` updates per arm of `ARMS`, alternating: compilations, graph breaks,
  seconds per update and the logged losses (float32: how far bf16 rounding alone moves them).

    python benchmarks/compile_training.py                        # writes benchmarks/results/compile_training.json
    python benchmarks/compile_training.py --updates 20 --length-buckets 2 --train-options --preset tiny \
        --config_overrides '{}' --tokenizer_vocab_size 500 --output /tmp/compile.json      # a quick check
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, also when a test loads this file by its path

from harness import MAIN_JOB, RESULTS, ROOT, machine, write_result


RESULT = RESULTS / "compile_training.json"
BUDGET_SECONDS = 600
# train.py options of each run arm (after the main job's configuration and the common ones)
ARMS = {
    "eager": [],
    "eager_buckets": ["--length_buckets", "{buckets}"],
    "compiled_static": ["--length_buckets", "{buckets}", "--torch_compile", "True"],
    "compiled_dynamic": ["--length_buckets", "{buckets}", "--torch_compile", "True", "--torch_compile_dynamic", "True"],
    # the same batches in float32 (bf16 on a CPU pads to 8 and runs eager attention: kept)
    "float32_buckets": ["--length_buckets", "{buckets}", "--bf16_if_native", "False", "--pad_to_multiple_of", "8"]
    + ["--attn_implementation", "eager"],
}


# every run: the time budget lifted (the learning rate follows the updates alone), no evaluation, no test
COMMON_RUN_OPTIONS = (
    "--max_train_minutes 100000 --eval_strategy no --save_strategy no --do_predict False --num_sample_translations 0 "
    "--disable_tqdm True"
).split()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(MAIN_JOB), help="train.py configuration (the README main job)")
    parser.add_argument("--length-buckets", type=int, default=4, help="buckets of the steps and the runs")
    parser.add_argument("--updates", type=int, default=300, help="updates of each run")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the step timing")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    parser.add_argument("--phases", default="padding,steps,runs", help="which measurements, comma-separated")
    parser.add_argument("--arms", default=",".join(ARMS), help="run arms, in the order they alternate")
    parser.add_argument("--output", default=str(RESULT))
    parser.add_argument("--work-dir", default=None, help="run folders (default: a temporary folder)")
    parser.add_argument("--train-options", nargs=argparse.REMAINDER, default=[], help="more train.py options, last")
    parser.add_argument("--child", nargs=2, metavar=("PHASE", "JSON"), help=argparse.SUPPRESS)
    parser.add_argument("--child-options", default="[]", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------ in the children


def prepared_training_data(argv: list[str]):
    """The main job's tokenized training split and its arguments (train.py's own data path)."""
    from hf_unified_mt.training import run

    model_args, data_args, training_args = run.parse_arguments(argv)
    run.validate_arguments(model_args, data_args, training_args)
    run.apply_cpu_bf16_defaults(model_args, data_args, training_args)
    corpus, raw = run.load_splits(data_args, training_args)
    tokenizer = run.get_tokenizer(model_args, training_args, raw.get("train"), None)
    data = run.prepare_data(corpus, raw, tokenizer, data_args, training_args)
    return data.splits["train"], tokenizer, model_args, data_args, training_args


def padding_table(argv: list[str]) -> dict:
    """Sampler statistics of the main job's batches without buckets and with 1 to 16 length buckets."""
    from hf_unified_mt.training.batching import MaxTokensBatchSampler
    from hf_unified_mt.training.data import sequence_lengths

    train, _, _, data_args, training_args = prepared_training_data(argv)
    source, target = sequence_lengths(train, "input_ids"), sequence_lengths(train, "labels")
    rows = {}
    for buckets in (None, 1, 2, 3, 4, 6, 8, 12, 16):
        batching = dict(max_tokens=data_args.max_tokens, pad_to_multiple_of=data_args.pad_to_multiple_of)
        sampler = MaxTokensBatchSampler(source, target, **batching, seed=training_args.seed, length_buckets=buckets)
        stats = sampler.statistics()
        rows["none" if buckets is None else str(buckets)] = {
            "padded_tokens_per_real_token": round(stats["padded_tokens_per_real_token"], 4),
            "batch_shapes": stats["batch_shapes"],
            "batches_per_epoch": stats["batches"],
            "mean_sentences_per_batch": round(stats["mean_sentences_per_batch"], 2),
            "shapes": [list(shape) for shape in sampler.bucket_shapes] if buckets else None,
            "batches_per_shape": (
                [sum(1 for b in sampler if sampler.batch_shape(b) == shape) for shape in sampler.bucket_shapes]
                if buckets
                else None
            ),
        }
    return {
        "max_tokens": data_args.max_tokens,
        "pad_to_multiple_of": data_args.pad_to_multiple_of,
        "train_pairs": len(train),
        "by_buckets": rows,
    }


def step_timing(argv: list[str], shapes: list[list[int]], shares: list[float], rounds: int, dynamic: bool) -> dict:
    """Compile seconds and interleaved seconds per update of the main job's model on each bucket shape, eager and
    compiled (`dynamic`: static shapes or dynamic)."""
    import torch
    from torch._dynamo.utils import calculate_time_spent, counters
    from transformers import AutoModelForSeq2SeqLM

    from hf_unified_mt.training import run

    model_args, data_args, training_args = run.parse_arguments(argv)
    run.apply_cpu_bf16_defaults(model_args, data_args, training_args)
    config_overrides = json.loads(model_args.config_overrides or "{}")
    import hf_unified_mt

    options = dict(vocab_size=model_args.tokenizer_vocab_size, label_smoothing=training_args.label_smoothing_factor)
    config = hf_unified_mt.get_config(model_args.arch, model_args.preset, **options, **config_overrides)
    bf16 = training_args.bf16
    torch.manual_seed(0)
    reference = AutoModelForSeq2SeqLM.from_config(
        config, attn_implementation=model_args.attn_implementation or "sdpa"
    ).train()
    generator = torch.Generator().manual_seed(0)
    batches = []
    for rows, source, target in shapes:
        ids = torch.randint(4, config.vocab_size, (rows, source), generator=generator)
        labels = torch.randint(4, config.vocab_size, (rows, target), generator=generator)
        batches.append(dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels))

    modes = {}
    for name in ("eager", "compiled_dynamic" if dynamic else "compiled_static"):
        model = copy.deepcopy(reference)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        forward = model if name == "eager" else torch.compile(model, dynamic=dynamic)

        def step(batch, forward=forward, optimizer=optimizer):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = forward(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        modes[name] = step
    first_calls, compile_seconds, graphs = {}, {}, {}
    for name, step in modes.items():
        counters.clear()
        seconds = []
        for batch in batches:
            start = time.perf_counter()
            step(batch)
            seconds.append(round(time.perf_counter() - start, 3))
        first_calls[name] = seconds
        compile_seconds[name] = round(calculate_time_spent()["total_wall_time"], 1)
        graphs[name] = counters["stats"]["unique_graphs"]
    times = {name: [[] for _ in shapes] for name in modes}
    load = [os.getloadavg()[0]]
    for _ in range(rounds):
        for index, batch in enumerate(batches):
            for name, step in modes.items():
                start = time.perf_counter()
                step(batch)
                times[name][index].append(time.perf_counter() - start)
        load.append(os.getloadavg()[0])
    result = {"shapes": shapes, "batch_share": shares, "bf16": bf16, "load_average_1min": load, "modes": {}}
    for name in modes:
        medians = [statistics.median(values) for values in times[name]]
        mean_step = sum(share * median for share, median in zip(shares, medians))
        result["modes"][name] = {
            "first_call_seconds": first_calls[name],
            "compile_seconds": compile_seconds[name],
            "compiled_graphs": graphs[name],
            "median_seconds_per_update": [round(m, 4) for m in medians],
            "mean_seconds_per_update": round(mean_step, 4),
            "updates_in_10_minutes": int(max(BUDGET_SECONDS - compile_seconds[name], 0) / mean_step),
        }
    return result


def training_run(argv: list[str]) -> dict:
    """`train.py` with `argv`: the seconds of each update, the logged losses and what it reports of compilation."""
    from transformers import TrainerCallback

    from hf_unified_mt.training import run

    class UpdateTimer(TrainerCallback):
        def __init__(self):
            self.seconds, self.start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)

    timer = UpdateTimer()
    load = os.getloadavg()[0]
    start = time.perf_counter()
    results = run.main(argv, callbacks=[timer])
    wall = time.perf_counter() - start
    output_dir = argv[argv.index("--output_dir") + 1]
    with open(os.path.join(output_dir, "trainer_state.json"), encoding="utf-8") as handle:
        history = json.load(handle)["log_history"]
    steady = sorted(timer.seconds)[len(timer.seconds) // 2] if timer.seconds else None
    return {
        "updates": len(timer.seconds),
        "train_runtime_seconds": results["train"]["train_runtime"],
        "process_seconds_in_main": round(wall, 1),
        "median_seconds_per_update": round(steady, 4) if steady else None,
        # updates that took over 10 medians: the ones that compiled
        "slow_updates": [
            [index + 1, round(seconds, 1)] for index, seconds in enumerate(timer.seconds) if seconds > 10 * steady
        ],
        "torch_compile": results.get("torch_compile"),
        "losses": {entry["step"]: entry["loss"] for entry in history if "loss" in entry},
        "train_loss": results["train"]["train_loss"],
        "load_average_1min": [load, os.getloadavg()[0]],
    }


def child(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    phase, output = args.child
    options = json.loads(args.child_options)
    if phase == "padding":
        record = padding_table(options["argv"])
    elif phase.startswith("steps"):
        record = step_timing(options["argv"], options["shapes"], options["shares"], args.rounds, options["dynamic"])
    else:
        record = training_run(options["argv"])
    from hf_unified_mt.utils.files import write_json

    write_json(output, record)


# -------------------------------------------------------------------------------------------------- in the parent


def summarize(result: dict) -> dict:
    """The figures the docs quote: compilations against the bound, losses at equal updates against eager with the
    same batches (beside float32's distance, the bf16 noise), and whether compiling pays in the main job's minutes."""
    summary = {"compilation_bound": 1 + result["length_buckets"]}
    runs = result.get("runs", {})
    for arm, record in runs.items():
        if record.get("torch_compile"):
            summary.setdefault("compiled_graphs", {})[arm] = record["torch_compile"]["compiled_graphs"]
            summary.setdefault("compile_seconds", {})[arm] = record["torch_compile"]["compile_seconds"]
            summary.setdefault("graph_breaks", {})[arm] = record["torch_compile"]["graph_breaks"]
    if "eager_buckets" in runs:
        reference = runs["eager_buckets"]["losses"]
        summary["largest_loss_difference_from_eager_buckets"] = {
            arm: round(max(abs(record["losses"][step] - loss) for step, loss in reference.items()), 5)
            for arm, record in runs.items()
            if arm not in ("eager", "eager_buckets") and record["losses"].keys() == reference.keys()
        }
    steps = result.get("steps", {})
    for form, record in steps.items():
        eager, compiled = record["modes"]["eager"], record["modes"][f"compiled_{form}"]
        summary.setdefault("compiled_over_eager_seconds_per_update", {})[form] = round(
            compiled["mean_seconds_per_update"] / eager["mean_seconds_per_update"], 3
        )
        summary.setdefault("updates_in_10_minutes", {})[form] = {
            "eager": eager["updates_in_10_minutes"],
            "compiled": compiled["updates_in_10_minutes"],
        }
    if steps:
        summary["compiling_pays_in_10_minutes"] = all(
            counts["compiled"] > counts["eager"] for counts in summary["updates_in_10_minutes"].values()
        )
    return summary


def run_child(args, phase: str, options: dict, work: Path) -> dict:
    """One measurement in a fresh interpreter with its own empty Inductor cache."""
    output = work / f"{phase}.json"
    environment = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(work / f"inductor-{phase}"),
        "OMP_NUM_THREADS": str(args.threads),
    }
    command = [sys.executable, __file__, "--threads", str(args.threads), "--rounds", str(args.rounds)]
    command += ["--child", phase, str(output), "--child-options", json.dumps(options)]
    started = time.perf_counter()
    completed = subprocess.run(command, env=environment, cwd=ROOT, capture_output=True, text=True)
    if completed.returncode != 0:
        sys.exit(f"{phase} failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-5000:]}")
    record = json.loads(output.read_text(encoding="utf-8"))
    print(f"{phase}: {time.perf_counter() - started:.0f} s", flush=True)
    return record


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.child:
        child(args)
        return {}
    phases = args.phases.split(",")
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="compile_training_"))
    work.mkdir(parents=True, exist_ok=True)
    base = [args.config, "--output_dir", str(work / "data"), *args.train_options]
    result = {
        "what": "train.py --torch_compile on the README main job on a CPU: length buckets, compile cost, step speed",
        "machine": dict(
            machine(threads=args.threads),
            shared="other processes ran beside these measurements (load averages recorded with each)",
        ),
        "length_buckets": args.length_buckets,
    }
    padding = run_child(args, "padding", {"argv": base}, work)
    if "padding" in phases:
        result["padding"] = padding
    row = padding["by_buckets"][str(args.length_buckets)]
    shapes, counts = row["shapes"], row["batches_per_shape"]
    if "steps" in phases:
        shares = [count / sum(counts) for count in counts]
        result["steps"] = {
            form: run_child(
                args, f"steps-{form}", {"argv": base, "shapes": shapes, "shares": shares, "dynamic": dynamic}, work
            )
            for form, dynamic in (("static", False), ("dynamic", True))
        }
    if "runs" in phases:
        common = ["--max_steps", str(args.updates), *COMMON_RUN_OPTIONS]
        result["runs"] = {}
        for arm in args.arms.split(","):
            options = [option.format(buckets=args.length_buckets) for option in ARMS[arm]]
            run_argv = [args.config, *common, *options, "--output_dir", str(work / arm), *args.train_options]
            result["runs"][arm] = {"options": options, **run_child(args, f"run-{arm}", {"argv": run_argv}, work)}
    result["summary"] = summarize(result)
    write_result(Path(args.output), result, argv, indent=1)
    print(json.dumps(result["summary"], indent=1))
    return result


if __name__ == "__main__":
    main()
