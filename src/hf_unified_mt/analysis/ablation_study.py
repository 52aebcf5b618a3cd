#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Controlled ablations: does each paper's headline effect reproduce inside this package?

For each paper, the two (or three) arms share the code path (`training/train.py`: `Seq2SeqTrainer`), the shipped
Bible corpus, one BPE tokenizer (committed beside the results), the initialisation law of their architecture, the
width, the number of updates, the schedule and the seeds; they differ only in the paper's mechanism:

    paper  control (A)                           mechanism (B)
    000    Prime-simple (convolution off)        Prime (adaptive kernels 3/15)      + a Transformer of equal size
    001    12+12 post-norm, Xavier, self-attn    + DS-Init                          + DS-Init and merged attention
    002    1 unit                                4 units                            + 4 units with Bias + Seq.
    003    single self-attention encoder         dual (self-attention + Static Expansion)
    004    P = 1 (a Transformer)                 P = 2, hard connections            + P = 2, soft connections

plus a MarianMT of the same size (N(0, 0.02) initialisation) for reference. The Transformer of paper 000 is the
single-encoder network of paper 003 under the same shared init law, so it reuses those runs. Stage 3 holds
investigations, each changing one factor in both arms of a pair: of an effect that did not reproduce (004: the init
law, then the number of updates) and of a failure's cause (001: the warm-up of the vanilla deep arm and of merged
attention's cost); two of its comparisons change the schedule alone (001: the longer warm-up, network unchanged).
Every arm runs `--seeds` (1 and 2); a comparison still within noise after them gets one more seed for both arms,
after all planned runs.

    python benchmarks/ablation_study.py                      # run what is missing (headline pairs first), then report
    python benchmarks/ablation_study.py --max_runs 2         # at most two new runs this time
    python benchmarks/ablation_study.py --report_only        # rebuild tables, plot and docs/ablation_study.md
    python benchmarks/ablation_study.py --size base          # each paper's base size: one GPU, bf16, 11 runs at once

`--size base` runs the same arms at each paper's base preset (Prime 12+12 d 384; Deep 12+12 d 512; MUTE, MPT and
MarianMT Transformer-base; the Multi-Encoder's low-resource Sp-En setting) with its own recipe and results folder
(`SIZE_DEFAULTS`), several runs sharing one GPU (`--parallel`); 000's Transformer and the stage-3 investigations
are CPU-study arms only. Where device time is fixed, `--time_budget_minutes` starts the runs together and stops them
all at one update count that fits the budget (decided half-way from their measured rates; `--max_steps` is then the
upper bound), with their own `--results_dir`:

    python benchmarks/ablation_study.py --size base --only 000-prime 000-prime-dsinit --parallel 4 --max_steps 5000 \
        --time_budget_minutes 6 --results_dir benchmarks/results/ablations-base-long

Every finished run writes `runs/<arm>-seed<N>.json` (config, seed, updates, wall time, validation curve, test BLEU and
chrF with signatures) and `runs/<arm>-seed<N>.test.txt.gz` (its translations of the test subset, one line per verse
in test-split order) under `--results_dir`; finished runs are skipped, so the study accumulates across sessions and
machines (commit each result as it lands). Checkpoints go to `--output_dir` and stay out of git. An interrupted run
resumes from its last checkpoint. The report (`ablation_table.md`, `summary.json`, `validation_curves.png`) is rebuilt
from the result files alone, and so is the study's generated block in `docs/ablation_study.md` (`--report_doc`).

Statistics: per arm, mean ± standard deviation over seeds; per comparison, the seed-averaged BLEU difference B - A
with a 95% paired-bootstrap interval over test verses (the same resampled verses for every seed), and sacreBLEU's
paired bootstrap resampling test of B against A for each seed (p-values and signature).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq, TrainerCallback

import hf_unified_mt  # noqa: F401  (registers the architectures)
from hf_unified_mt.analysis.ablation_arms import ARMS_BY_KEY, COMPARISONS, Arm, planned_runs
from hf_unified_mt.analysis.ablation_report import build_report, load_runs, not_learned, runs_delta
from hf_unified_mt.analysis.provenance import REPO, code_version
from hf_unified_mt.analysis.significance import verdict
from hf_unified_mt.deployment.inference import translate
from hf_unified_mt.training.baselines import count_parameters
from hf_unified_mt.training.checkpoints import last_complete_checkpoint
from hf_unified_mt.training.data import load_parallel_data, tokenize_corpus
from hf_unified_mt.training.metrics import compute_translation_scores
from hf_unified_mt.training.tokenization import load_tokenizer, train_tokenizer_on_corpus
from hf_unified_mt.utils.files import atomic_write, write_text


DEFAULT_RESULTS = REPO / "benchmarks" / "results" / "ablations"
# The study's document: its tables and figures sit between markers, one pair per study size (`report_markers`), and
# are rebuilt from the result files by every report; the narrative around them is written by hand.
REPORT_DOC = REPO / "docs" / "ablation_study.md"


# --------------------------------------------------------------------------------------------------- shared settings


# Per study size: the recipe (identical for every arm) and where results and checkpoints go. `small`: the CPU study
# (2 cores, one run at a time); `base`: each paper's base size on a GPU, in bf16, several runs sharing the GPU at once
# (`--parallel`). `tiny`: tests, with the settings they pass.
SIZE_DEFAULTS = {
    "small": dict(
        max_steps=2000,
        max_tokens=2500,
        learning_rate=1e-3,
        warmup_steps=400,
        eval_every=250,
        save_every=500,
        bf16=False,
        threads=2,
        parallel=1,
        results_dir=DEFAULT_RESULTS,
        output_dir=REPO / "outputs" / "ablations",
    ),
    # As many epochs as `small` (2.7 against 2.9: 600 updates of 8,192 tokens) and the same 20% warm-up: what 30
    # minutes of one H100 allowed for 22 runs, 11 at a time.
    "base": dict(
        max_steps=600,
        max_tokens=8192,
        learning_rate=7e-4,
        warmup_steps=120,
        eval_every=200,
        save_every=600,
        bf16=True,
        threads=1,
        parallel=11,
        results_dir=DEFAULT_RESULTS.with_name("ablations-base"),
        output_dir=REPO / "outputs" / "ablations-base",
    ),
}
SIZE_DEFAULTS["tiny"] = SIZE_DEFAULTS["small"]


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1", "yes")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--size",
        choices=["small", "base", "tiny"],
        default="small",
        help="small: the CPU study; base: each paper's base size (GPU, bf16)",
    )
    parser.add_argument("--results_dir", type=Path, default=None, help="Default: per --size (SIZE_DEFAULTS)")
    parser.add_argument("--output_dir", type=Path, default=None, help="Checkpoints (not committed)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--stages", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--only", nargs="+", default=None, help="Run only these arms (keys)")
    parser.add_argument("--max_runs", type=int, default=None, help="Stop after this many new runs")
    parser.add_argument("--report_only", action="store_true")
    parser.add_argument(
        "--report_doc",
        type=Path,
        default=None,
        help="Markdown file whose generated block for this size is rebuilt with the report (default: "
        "docs/ablation_study.md for the small and base studies in their default results folders)",
    )
    # the training recipe, identical for every arm (defaults per --size)
    parser.add_argument("--max_steps", type=int, default=None)
    parser.add_argument("--max_tokens", type=int, default=None)
    parser.add_argument("--learning_rate", type=float, default=None)
    parser.add_argument("--warmup_steps", type=int, default=None)
    parser.add_argument(
        "--bf16",
        type=_boolean,
        default=None,
        help="Mixed precision (bf16 autocast; weights and optimizer state stay fp32)",
    )
    parser.add_argument("--label_smoothing", type=float, default=0.1)
    parser.add_argument("--eval_every", type=int, default=None, help="Validation cross-entropy every N updates")
    parser.add_argument("--save_every", type=int, default=None, help="Checkpoint every N updates (resume point)")
    parser.add_argument("--tokenizer_vocab_size", type=int, default=8000)
    parser.add_argument("--test_subset", type=int, default=1000, help="Fixed random test verses scored (0: all)")
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--max_train_samples", type=int, default=None, help="Tiny slices for tests")
    parser.add_argument("--max_eval_samples", type=int, default=None, help="Tiny slices for tests")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per run")
    parser.add_argument(
        "--parallel",
        type=int,
        default=None,
        help="Runs at once (on a GPU they share it; training minutes are then not speeds)",
    )
    parser.add_argument(
        "--time_budget_minutes",
        type=float,
        default=None,
        help="Fixed device time: the runs start together and train for about this many minutes, all stopping at one "
        "update count (a multiple of --eval_every, decided from their measured rates; --max_steps is the upper bound)",
    )
    parser.add_argument(
        "--decode_batch_size", type=int, default=32, help="Test sentences per generate() call (GPU: more is faster)"
    )
    parser.add_argument("--bootstrap_samples", type=int, default=1000)
    parser.add_argument("--run_one", default=None, help=argparse.SUPPRESS)  # "<arm>:<seed>", in a child process
    parser.add_argument("--common_stop", type=Path, default=None, help=argparse.SUPPRESS)  # a child's decision file
    args = parser.parse_args(argv)
    for key, value in SIZE_DEFAULTS[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.report_doc is None and args.size != "tiny" and args.results_dir == SIZE_DEFAULTS[args.size]["results_dir"]:
        args.report_doc = REPORT_DOC
    return args


RECIPE_KEYS = (
    "size",
    "max_steps",
    "max_tokens",
    "learning_rate",
    "warmup_steps",
    "label_smoothing",
    "eval_every",
    "tokenizer_vocab_size",
    "test_subset",
    "num_beams",
    "max_train_samples",
    "max_eval_samples",
    "bf16",
)


def recipe(args) -> dict:
    """What must be equal for two runs to be compared (checked when a finished run is reused)."""
    return {key: getattr(args, key) for key in RECIPE_KEYS}


def recorded_recipe(record: dict) -> dict:
    """A finished run's recipe; runs recorded before `bf16` was a setting trained in fp32."""
    return {"bf16": False, **record["recipe"]}


def arm_settings(args, arm: Arm) -> argparse.Namespace:
    """The study's settings as `arm` trains under them (its `recipe_factors` applied)."""
    scaled = {key: round(getattr(args, key) * factor) for key, factor in arm.recipe_factors.items()}
    return argparse.Namespace(**{**vars(args), **scaled})


def run_name(arm: Arm, seed: int) -> str:
    return f"{arm.key}-seed{seed}"


def shared_tokenizer(args):
    """One BPE tokenizer for every arm, trained once on the training split and kept beside the results, so that
    runs on other machines and in later sessions use exactly the same vocabulary."""
    path = args.results_dir / f"tokenizer-bpe{args.tokenizer_vocab_size}"
    if not (path / "tokenizer.json").exists():
        tokenizer = train_tokenizer_on_corpus(load_parallel_data()["train"], vocab_size=args.tokenizer_vocab_size)
        path.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=path))
        try:
            tokenizer.save_pretrained(staging)
            for saved in sorted(staging.iterdir(), key=lambda file: file.name == "tokenizer.json"):  # the marker last
                os.replace(saved, path / saved.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return path, load_tokenizer(str(path))


def test_subset(args) -> dict:
    """The test verses every run is scored on: all, or a fixed random subset (seed 0) in test-split order, spread
    over all test books. Written once beside the results with the sources and references it selects."""
    path = args.results_dir / "test_subset.json"
    if path.exists():
        return json.loads(path.read_text())
    test = load_parallel_data()["test"]
    total = len(test)
    if args.test_subset and args.test_subset < total:
        indices = sorted(random.Random(0).sample(range(total), args.test_subset))
    else:
        indices = list(range(total))
    sources, references = list(test["source"]), list(test["target"])
    subset = dict(
        description=f"{len(indices)} of the {total} test verses (random.Random(0).sample, in test-split order)",
        indices=indices,
        sources_sha256=hashlib.sha256("\n".join(sources[i] for i in indices).encode()).hexdigest(),
        references=[references[i] for i in indices],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(subset, ensure_ascii=False, indent=1))
    return subset


# ------------------------------------------------------------------------------------------------------ one run


class ValidationCrossEntropy(TrainerCallback):
    """Token-level cross-entropy (no label smoothing, no extra loss terms) of the validation split every `every`
    updates and at the end, computed from the logits so that every architecture is measured the same way. Dropout
    is off during the measurement and no random numbers are drawn, so the training run is unchanged by it. The curve
    is kept in `path` so that a resumed run continues it."""

    def __init__(self, every: int, tokenizer, path: Path, max_samples: int | None = None, batch_sentences: int = 64):
        self.every, self.path = every, path
        self.curve = json.loads(path.read_text()) if path.exists() else []
        validation = load_parallel_data()["validation"]
        if max_samples is not None:
            validation = validation.select(range(min(max_samples, len(validation))))
        tokenized = tokenize_corpus({"validation": validation}, tokenizer)["validation"]
        order = np.argsort([len(ids) for ids in tokenized["input_ids"]])
        rows = [tokenized[int(i)] for i in order]
        features = [{key: row[key] for key in ("input_ids", "attention_mask", "labels")} for row in rows]
        self.batches = [features[i : i + batch_sentences] for i in range(0, len(features), batch_sentences)]
        self.tokenizer = tokenizer

    @torch.no_grad()
    def measure(self, model) -> float:
        collator = DataCollatorForSeq2Seq(self.tokenizer, model=model, label_pad_token_id=-100)
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        device = next(model.parameters()).device
        for batch in self.batches:
            inputs = {key: value.to(device) for key, value in collator(batch).items()}
            labels = inputs["labels"]
            logits = model(**inputs).logits  # (the model's own loss, with its smoothing and extra terms, is ignored)
            total += torch.nn.functional.cross_entropy(
                logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
            ).item()
            count += int((labels != -100).sum())
        model.train(was_training)
        return total / count

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if (step % self.every == 0 or step == state.max_steps) and all(s != step for s, _ in self.curve):
            self.curve.append([step, round(self.measure(model), 5)])
            write_text(self.path, json.dumps(self.curve))


class TrainingClock(TrainerCallback):
    """Training wall time summed over a run's resumptions. The time up to each checkpoint is kept in `path`, so a run
    resumed from a checkpoint counts the time that produced the checkpoint plus its own; the updates an interrupted
    attempt made after its last checkpoint are trained again and counted once. The updates it resumed from are kept
    too."""

    def __init__(self, path: Path):
        self.path = path
        kept = json.loads(path.read_text()) if path.exists() else None
        self.before = kept["seconds"] if kept else 0.0
        self.resumed_from = kept["resumed_from"] + [kept["update"]] if kept else []
        self.started = time.time()

    def seconds(self) -> float:
        return self.before + time.time() - self.started

    def on_save(self, args, state, control, **kwargs):
        write_text(
            self.path,
            json.dumps(
                dict(seconds=round(self.seconds(), 1), update=state.global_step, resumed_from=self.resumed_from)
            ),
        )


class CommonStop(TrainerCallback):
    """One run of a time-budgeted session (`--time_budget_minutes`): writes its progress for the parent every `every`
    updates, and stops at the update count the parent decides for every run (`decision`, written once). With the
    inverse-square-root schedule, which does not depend on the total, a run stopped there is exactly a run with that
    `max_steps`."""

    def __init__(self, progress: Path, decision: Path, every: int = 10):
        self.progress, self.decision, self.every = progress, decision, every
        self.updates: int | None = None

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step % self.every == 0:
            write_text(self.progress, json.dumps(dict(update=step, time=time.time())))
            if self.updates is None and self.decision.exists():
                self.updates = json.loads(self.decision.read_text())["updates"]
        if self.updates is not None and step >= self.updates:
            control.should_training_stop = True


def load_train_module():
    """One training run (`hf_unified_mt.training.run`, what `training/train.py` runs: the study runs exactly the
    training code path users run)."""
    from hf_unified_mt.training import run

    return run


def train_arguments(arm: Arm, seed: int, args, tokenizer_path: Path, output: Path) -> list[str]:
    argv = [
        "--arch",
        arm.arch,
        "--preset",
        arm.presets[args.size],
        "--tokenizer_name_or_path",
        str(tokenizer_path),
        "--output_dir",
        str(output),
        "--max_steps",
        str(args.max_steps),
        "--max_tokens",
        str(args.max_tokens),
        "--learning_rate",
        str(args.learning_rate),
        "--warmup_steps",
        str(args.warmup_steps),
        "--label_smoothing_factor",
        str(args.label_smoothing),
        "--eval_strategy",
        "no",
        "--save_steps",
        str(args.save_every),
        "--save_total_limit",
        "1",
        "--do_predict",
        "False",
        "--num_sample_translations",
        "0",
        "--report_to",
        "none",
        "--logging_steps",
        "25",
        "--seed",
        str(seed),
        "--overlong",
        "skip",
        "--disable_tqdm",
        "True",
    ]
    if arm.overrides:
        argv += ["--config_overrides", json.dumps(arm.overrides)]
    if args.max_train_samples is not None:
        argv += ["--max_train_samples", str(args.max_train_samples)]
    if args.bf16:
        argv += ["--bf16", "True"]
    last = last_complete_checkpoint(output)
    if last is not None:
        argv += ["--resume_from_checkpoint", last]
    return argv


def execute_run(arm: Arm, seed: int, args) -> dict:
    """Train one arm with one seed, translate the test subset, write the run's JSON and translations."""
    args = arm_settings(args, arm)
    torch.set_num_threads(args.threads)
    tokenizer_path, tokenizer = shared_tokenizer(args)
    subset = test_subset(args)
    name = run_name(arm, seed)
    output = args.output_dir / name
    output.mkdir(parents=True, exist_ok=True)
    curve = ValidationCrossEntropy(
        args.eval_every, tokenizer, output / "validation_curve.json", max_samples=args.max_eval_samples
    )
    clock = TrainingClock(output / "training_clock.json")
    callbacks = [curve, clock]
    if args.common_stop is not None:
        callbacks.append(CommonStop(output / "progress.json", args.common_stop))
    results = load_train_module().main(train_arguments(arm, seed, args, tokenizer_path, output), callbacks=callbacks)
    training_seconds = clock.seconds()
    if args.common_stop is not None:  # the run is one of `max_steps` = the common update count
        args.max_steps = json.loads((output / "trainer_state.json").read_text())["global_step"]

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForSeq2SeqLM.from_pretrained(output).to(device).eval()  # decoding in fp32
    test = load_parallel_data()["test"]
    sources = [test[i]["source"] for i in subset["indices"]]
    started = time.time()
    limit = min(256, getattr(model.config, "max_position_embeddings", 1024) - 1)  # target positions incl. the start
    hypotheses = translate(
        model,
        tokenizer,
        sources,
        num_beams=args.num_beams,
        batch_size=args.decode_batch_size,
        max_new_tokens=limit,
        max_source_length=limit,
    )
    decoding_seconds = time.time() - started
    scores = compute_translation_scores(hypotheses, subset["references"])

    state = json.loads((output / "trainer_state.json").read_text())
    record = dict(
        run=name,
        arm=arm.key,
        paper=arm.paper,
        label=arm.label,
        arch=arm.arch,
        preset=arm.presets[args.size],
        code=code_version(),
        overrides=arm.overrides,
        seed=seed,
        recipe=recipe(args),
        num_parameters=count_parameters(model),
        config=model.config.to_diff_dict(),
        updates=state["global_step"],
        epochs=round(state["epoch"], 3),
        wall_minutes=dict(training=round(training_seconds / 60, 2), test_decoding=round(decoding_seconds / 60, 2)),
        resumed_from_updates=clock.resumed_from,
        train_loss=[[entry["step"], entry["loss"]] for entry in state["log_history"] if "loss" in entry],
        validation_cross_entropy=curve.curve,
        test=dict(
            {key: scores[key] for key in ("bleu", "chrf", "bleu_signature", "chrf_signature", "hyp_len", "ref_len")},
            num_verses=len(hypotheses),
            num_beams=args.num_beams,
            subset_sources_sha256=subset["sources_sha256"],
            translations=f"{name}.test.txt.gz",
        ),
        label_smoothing=results["training_arguments"]["label_smoothing_factor"],
        hardware=dict(
            platform=platform.platform(),
            processor=platform.processor(),
            cpus=os.cpu_count(),
            threads=torch.get_num_threads(),
            torch=torch.__version__,
            transformers=transformers.__version__,
            gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            concurrent_runs=args.parallel,
        ),
        finished=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    runs = args.results_dir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    translations = runs / f"{name}.test.txt.gz"
    with atomic_write(translations, "wb") as raw, gzip.GzipFile(translations, "wb", fileobj=raw) as handle:
        handle.write(("\n".join(hypotheses) + "\n").encode("utf-8"))
    write_text(runs / f"{name}.json", json.dumps(record, indent=1, ensure_ascii=False))  # last: marks it finished
    print(f"[{name}] {args.max_steps} updates, test BLEU {scores['bleu']:.2f} chrF {scores['chrf']:.2f}", flush=True)
    return record


def tie_break_runs(args) -> list[tuple[Arm, int]]:
    """One more seed (one past `--seeds`) for both arms of every comparison that is within noise once both arms have
    all of `--seeds`: the study's protocol is 2 seeds per arm, 3 where the two arms are within noise. The verdict
    is taken on exactly `--seeds`, so the decision does not change once the extra seed has run. An arm that reuses
    another arm's runs gets its extra seed under that arm."""
    if not (args.results_dir / "runs").is_dir():
        return []
    runs = load_runs(args.results_dir)
    references = json.loads((args.results_dir / "test_subset.json").read_text())["references"]
    extra_seed, seeds = max(args.seeds) + 1, sorted(args.seeds)
    planned: list[tuple[Arm, int]] = []
    for _, control, mechanism, _ in COMPARISONS:
        a, b = runs.get(control, {}), runs.get(mechanism, {})
        if not set(seeds) <= set(a) & set(b):
            continue
        if verdict(*runs_delta(a, b, seeds, references, args.bootstrap_samples)) != "within noise":
            continue
        if not_learned(a, seeds) and not_learned(b, seeds):
            continue  # more seeds cannot tell two arms apart that have not learned yet
        for key in (control, mechanism):
            arm = ARMS_BY_KEY[ARMS_BY_KEY[key].same_runs_as or key]
            wanted = (
                arm.stage in args.stages
                and args.size in arm.presets
                and (not args.only or key in args.only or arm.key in args.only)
            )
            if wanted and (arm, extra_seed) not in planned:
                planned.append((arm, extra_seed))
    return planned


def run_missing(args) -> int:
    """Run every planned run without a result file, then the extra seeds of the comparisons still within noise (decided
    on the results the planned runs have left), each in its own process, `--parallel` at a time (with more than one,
    each run's output goes to `<output_dir>/<run>/log.txt`); returns how many ran."""
    done, running, failed = 0, [], []

    def wait_for_one():
        child, name, log = running.pop(0)
        if child.wait() != 0:
            failed.append(name)
            print(f"[{name}] failed (exit code {child.returncode})" + (f"; log: {log.name}" if log else ""), flush=True)
        if log is not None:
            log.close()

    def runs():
        yield from planned_runs(args.seeds, set(args.stages), args.only, args.size)
        if args.time_budget_minutes is not None:
            return  # a time-budgeted session trains the runs it started with, together
        while running:  # the extra seeds are decided on finished runs only
            wait_for_one()
        yield from tie_break_runs(args)

    decision = None
    if args.time_budget_minutes is not None:
        decision = args.output_dir / "common_stop.json"
        decision.unlink(missing_ok=True)
        missing = [
            (arm, seed)
            for arm, seed in planned_runs(args.seeds, set(args.stages), args.only, args.size)
            if not (args.results_dir / "runs" / f"{run_name(arm, seed)}.json").exists()
        ]
        problems = [f"{arm.key} scales the schedule" for arm, _ in missing if arm.recipe_factors]
        if len(missing) > args.parallel:
            problems.insert(0, f"--parallel {args.parallel} < the {len(missing)} runs to start together")
        if problems:
            raise SystemExit("--time_budget_minutes: " + "; ".join(problems))
        launched = time.time()

    for arm, seed in runs():
        name = run_name(arm, seed)
        path = args.results_dir / "runs" / f"{name}.json"
        if path.exists():
            finished = json.loads(path.read_text())
            expected = recipe(arm_settings(args, arm))
            if recorded_recipe(finished) != expected:
                raise SystemExit(
                    f"{path} was made with another recipe ({finished['recipe']}); use another "
                    f"--results_dir or the same settings ({expected})"
                )
            print(f"[{name}] finished earlier: skipped", flush=True)
            continue
        if args.max_runs is not None and done >= args.max_runs:
            print(f"--max_runs {args.max_runs} reached; run the command again to continue", flush=True)
            break
        while len(running) >= args.parallel:
            wait_for_one()
        child = [sys.executable, "-m", "hf_unified_mt.analysis.ablation_study", "--run_one", f"{arm.key}:{seed}"]
        child += _settings_argv(args) + (["--common_stop", str(decision)] if decision else [])
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
        print(f"[{name}] training ({arm.label})", flush=True)
        log = None
        if args.parallel > 1:
            (args.output_dir / name).mkdir(parents=True, exist_ok=True)
            log = open(args.output_dir / name / "log.txt", "a")
        running.append((subprocess.Popen(child, env=env, stdout=log, stderr=log), name, log))
        done += 1
    if decision is not None and running:
        decide_common_stop(args, [(child, name) for child, name, _ in running], launched, decision)
    while running:
        wait_for_one()
    if failed:
        raise SystemExit(f"runs failed: {', '.join(failed)}")
    return done


def common_stop_updates(history: dict[str, list], deadline: float, every: int, max_steps: int) -> tuple[int, dict]:
    """The update count for every run of a time-budgeted session, from each run's progress readings
    (`[[time, update], ...]`): what the slowest run reaches by `deadline` at its rate over the second half of its
    readings (the first updates of a run are slower: allocation, kernel selection), rounded down to a multiple of
    `every` (the last validation point is then the final model), at least 50 updates past the furthest run (a run
    reads the decision every 10 updates) and at most `max_steps`. Returns the count and the rates (updates/s)."""
    rates, reach, furthest = {}, [], 0
    for name, readings in history.items():
        (t_first, _), (t_last, u_last) = readings[0], readings[-1]
        t_mid, u_mid = next((t, u) for t, u in readings if t >= (t_first + t_last) / 2)
        rates[name] = (u_last - u_mid) / (t_last - t_mid) if t_last > t_mid else 0.0
        reach.append(u_last + rates[name] * max(deadline - t_last, 0.0))
        furthest = max(furthest, u_last)
    updates = max(int(min(reach)) // every, -(-(furthest + 50) // every)) * every
    return min(updates, max_steps), rates


def decide_common_stop(args, children: list, launched: float, decision: Path, poll_seconds: float = 5.0) -> None:
    """Writes once to `decision` the update count at which every run of a time-budgeted session stops
    (`common_stop_updates`), half-way through `--time_budget_minutes` after the launch, once every run has reported
    progress for at least 30 seconds."""
    deadline = launched + 60 * args.time_budget_minutes
    history: dict[str, list] = {name: [] for _, name in children}
    while True:
        time.sleep(poll_seconds)
        if any(child.poll() is not None for child, _ in children):
            return  # a run ended before the decision (failed, or reached --max_steps): nothing to coordinate
        for name, readings in history.items():
            try:
                now = json.loads((args.output_dir / name / "progress.json").read_text())
            except (OSError, ValueError):  # not written yet, or being written
                continue
            if not readings or readings[-1][1] != now["update"]:
                readings.append([now["time"], now["update"]])
        spans = [readings[-1][0] - readings[0][0] if readings else 0.0 for readings in history.values()]
        if time.time() < (launched + deadline) / 2 or min(spans) < 30:
            continue
        updates, rates = common_stop_updates(history, deadline, args.eval_every, args.max_steps)
        write_text(decision, json.dumps(dict(updates=updates, updates_per_second=rates, progress=history)))
        print(f"time budget: every run stops at {updates} updates", flush=True)
        return


def _settings_argv(args) -> list[str]:
    """The parent's settings, for the child process."""
    argv = []
    for key, value in vars(args).items():
        parent_only = ("run_one", "report_only", "report_doc", "only", "max_runs", "seeds", "stages", "common_stop")
        if key in parent_only or value is None:
            continue
        argv += [f"--{key}", *(map(str, value) if isinstance(value, list) else [str(value)])]
    return argv


# -------------------------------------------------------------------------------------------------------------- main


def main(argv=None):
    args = parse_args(argv)
    if args.run_one:
        key, seed = args.run_one.rsplit(":", 1)
        execute_run(ARMS_BY_KEY[key], int(seed), args)
        return
    if not args.report_only:
        shared_tokenizer(args)
        test_subset(args)
        run_missing(args)
    if (args.results_dir / "runs").is_dir():
        build_report(args)


if __name__ == "__main__":
    main()
