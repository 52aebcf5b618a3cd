#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""`training/train.py` on millions of sentence pairs, up to its first update: the time of each stage of the data path,
the peak memory of the process tree (sampled every 0.5 s: summed `rss`, and `pss`, the headline), the disk the
`datasets` cache takes, and then the same command again, which reads the tokenizer and the tokenized splits from that
cache (docs/benchmarks.md, "Millions of pairs"). The corpus is synthetic, built locally from the embedded
training verses recombined and perturbed; the model is `tiny`; each run is a fresh process with its own cache.

    python benchmarks/data_path_scale.py --pairs 4000000            # writes benchmarks/results/data_path_scale.json
    python benchmarks/data_path_scale.py --pairs 20000 --output /tmp/small.json --work_dir /tmp/dps   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np


sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness, also when a test loads this file by its path

from harness import RESULTS, ROOT, embedded_pairs, machine, write_result


RESULT = RESULTS / "data_path_scale.json"
# The stages of `hf_unified_mt.training.run.main`, timed by wrapping these functions of the module.
STAGES = ("load_splits", "get_tokenizer", "prepare_model", "prepare_data", "build_trainer")


# ----------------------------------------------------------------------------------------------------------- corpus


def read_embedded_pairs() -> tuple[list[list[str]], list[list[str]]]:
    """The words of each source and target verse of the embedded training split."""
    sources, targets = embedded_pairs("train")
    return [text.split(" ") for text in sources], [text.split(" ") for text in targets]


def synthetic_pairs(count: int, seed: int = 0, block: int = 100_000):
    """Yields `count` (source, target) pairs, a block at a time: one verse or two in a row (30%), and in half of the
    pairs one word left out of the source and one out of the target."""
    sources, targets = read_embedded_pairs()
    rng = np.random.default_rng(seed)
    for start in range(0, count, block):
        size = min(block, count - start)
        first, second = rng.integers(0, len(sources), (2, size))
        two = rng.random(size) < 0.3
        drop = rng.random(size) < 0.5
        where = rng.random((size, 2))
        pairs = []
        for i in range(size):
            source, target = sources[first[i]], targets[first[i]]
            if two[i]:
                source, target = source + sources[second[i]], target + targets[second[i]]
            if drop[i] and len(source) > 3 and len(target) > 3:
                j, k = int(where[i, 0] * len(source)), int(where[i, 1] * len(target))
                source, target = source[:j] + source[j + 1 :], target[:k] + target[k + 1 :]
            pairs.append((" ".join(source), " ".join(target)))
        yield pairs


def build_corpus(path: Path, count: int, file_format: str, seed: int = 0) -> None:
    """Writes `count` synthetic pairs to `path` (columns `es`, `en`), through a temporary file."""
    from hf_unified_mt.utils.files import atomic_write

    started = time.perf_counter()
    with atomic_write(path, encoding="utf-8", newline="") as handle:
        if file_format == "tsv":
            handle.write("es\ten\n")
        written = 0
        for pairs in synthetic_pairs(count, seed):
            if file_format == "tsv":
                handle.write("".join(f"{source}\t{target}\n" for source, target in pairs))
            else:
                handle.write("".join(json.dumps({"es": s, "en": t}, ensure_ascii=False) + "\n" for s, t in pairs))
            written += len(pairs)
            print(f"\rcorpus: {written:,} of {count:,} pairs", end="", file=sys.stderr, flush=True)
    print(f"\ncorpus: {path} ({path.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - started:.0f} s")


# ------------------------------------------------------------------------------------------------------------ child


def child(record_path: str, argv: list[str]) -> None:
    """Runs `run.main(argv)` with its stages timed and a callback that records the first update."""
    import resource

    from transformers import TrainerCallback

    from hf_unified_mt.training import run
    from hf_unified_mt.utils.files import write_json

    started = float(os.environ["DATA_PATH_SCALE_START"])
    record: dict = {"stages": {}, "stages_cpu_s": {}, "imports_s": round(time.time() - started, 2)}

    def cpu_seconds() -> float:
        times = os.times()  # the process's, and its waited-for workers'
        return times.user + times.system + times.children_user + times.children_system

    def timed(name, function):
        def wrapper(*args, **kwargs):
            begin, cpu = time.time(), cpu_seconds()
            result = function(*args, **kwargs)
            record["stages"][name] = round(time.time() - begin, 2)
            record["stages_cpu_s"][name] = round(cpu_seconds() - cpu, 1)
            return result

        return wrapper

    for name in STAGES:
        setattr(run, name, timed(name, getattr(run, name)))

    tokenize_corpus = run.tokenize_corpus

    def watched_tokenize_corpus(*args, **kwargs):
        begin = time.time()
        tokenized = tokenize_corpus(*args, **kwargs)
        record["tokenize_s"] = round(time.time() - begin, 2)
        files = [entry["filename"] for entry in tokenized["train"].cache_files]
        record["tokenized_train_cache_files"] = [os.path.basename(name) for name in files]
        # a cache hit reads files that were there before the call
        record["tokenized_cache_hit"] = bool(files) and all(os.path.getmtime(name) < begin for name in files)
        return tokenized

    run.tokenize_corpus = watched_tokenize_corpus
    trainer_class = run.TokenBatchSeq2SeqTrainer
    trainer_class.build_token_batch_sampler = timed("token_sampler", trainer_class.build_token_batch_sampler)

    class FirstUpdate(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            record["train_begin_s"] = round(time.time() - started, 2)

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                record["first_update_s"] = round(time.time() - started, 2)
                record["cpu_s_to_first_update"] = round(cpu_seconds(), 1)

    run.main(argv, callbacks=[FirstUpdate()])
    record["end_s"] = round(time.time() - started, 2)
    record["max_rss_main_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    record["max_rss_largest_worker_mib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    write_json(record_path, record, indent=2)


# ----------------------------------------------------------------------------------------------------------- parent


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants (from /proc)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def tree_memory_mib(pid: int) -> dict[str, float]:
    """Memory of a process tree in MiB: `rss` summed (pages a forked worker shares with its parent count in both),
    `pss` (each shared page divided among its sharers: what the tree takes) and `pss_anon` (of that, not file pages:
    the memory-mapped Arrow files' pages are page cache that the kernel can drop)."""
    totals = dict(rss=0, pss=0, pss_anon=0)
    fields = {"Rss:": "rss", "Pss:": "pss", "Pss_Anon:": "pss_anon"}
    for current in process_tree(pid):
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                name, _, rest = line.partition(" ")
                if name in fields:
                    totals[fields[name]] += int(rest.split()[0])
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return {key: value / 1024 for key, value in totals.items()}


def disk_mib(folder: Path, pattern: str = "*") -> float:
    return sum(p.stat().st_size for p in folder.rglob(pattern) if p.is_file()) / 2**20 if folder.exists() else 0.0


def busiest_processes(count: int = 6) -> list[str]:
    """`ps aux --sort=-%cpu | head`: what else was running."""
    try:
        lines = subprocess.run(["ps", "aux", "--sort=-%cpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line[:160] for line in lines.splitlines()[1 : count + 1]]


def run_once(name: str, argv: list[str], work_dir: Path, log_dir: Path) -> dict:
    """One `train.py` run in a child process, its tree's resident memory sampled every 0.2 s."""
    record_path = work_dir / f"{name}.record.json"
    record_path.unlink(missing_ok=True)
    cache = str(work_dir / "datasets_cache")
    environment = {**os.environ, "HF_DATASETS_CACHE": cache, "DATA_PATH_SCALE_START": repr(time.time())}
    load_before = os.getloadavg()
    others_before = busiest_processes()
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(record_path), "--", *argv]
    peak = dict(rss=0.0, pss=0.0, pss_anon=0.0)
    with open(log_dir / f"{name}.log", "w", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=ROOT)
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                for key, value in tree_memory_mib(process.pid).items():
                    peak[key] = max(peak[key], value)
                stop.wait(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        returncode = process.wait()
        stop.set()
        sampler.join()
    if returncode != 0:
        raise SystemExit(f"{name}: train.py failed (exit {returncode}); see {log_dir / (name + '.log')}")
    record = json.loads(record_path.read_text())
    record["peak_memory_tree_mib"] = {key: round(value, 1) for key, value in peak.items()}
    record["load_average_before"] = [round(x, 2) for x in load_before]
    record["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    record["busiest_processes_before"] = others_before
    cache = work_dir / "datasets_cache"
    record["cache_disk_mib"] = {
        "total": round(disk_mib(cache), 1),
        "tokenized (map outputs, indices)": round(disk_mib(cache, "cache-*.arrow"), 1),
    }
    return record


def shown_path(argument: str, work_dir: Path) -> str:
    """A path of the command as the result shows it: inside the work folder or the repository, relative to it."""
    for folder, name in ((work_dir.resolve(), "<work_dir>"), (ROOT, None)):
        if argument.startswith(str(folder) + os.sep):
            relative = os.path.relpath(argument, folder)
            return f"{name}/{relative}" if name else relative
    return argument


def train_arguments(args, corpus: Path, output_dir: Path) -> list[str]:
    from hf_unified_mt.training.data import embedded_corpus_files

    embedded = embedded_corpus_files()
    arguments = [
        "--arch", "unified_transformer", "--preset", "tiny",
        "--train_file", str(corpus), "--validation_file", str(embedded["validation"]),
        "--test_file", str(embedded["test"]), "--source_field", "es", "--target_field", "en",
        "--max_source_length", "128", "--max_target_length", "128", "--overlong", "skip",
        "--max_tokens", "4096", "--max_steps", "1", "--logging_steps", "1",
        "--do_predict", "False", "--eval_strategy", "no", "--save_strategy", "no",
        "--num_sample_translations", "0", "--report_to", "none", "--output_dir", str(output_dir),
    ]  # fmt: skip
    if args.workers:
        arguments += ["--preprocessing_num_workers", str(args.workers)]
    return arguments + args.extra


# issue 61: 4 million pairs to the first update in 15 minutes on 2 cores, within 6 GiB; 1 minute with the cache
TARGETS = dict(first_update_s=900, peak_memory_gib=6.0, cached_first_update_s=60)


def summary(runs: dict) -> dict:
    """The headline figures beside the targets; memory is the process tree's proportional set size (`pss`)."""
    result = dict(targets=TARGETS)
    if "first" in runs:
        first = runs["first"]
        result.update(
            first_update_s=first["first_update_s"],
            first_update_cpu_s=first["cpu_s_to_first_update"],
            peak_memory_gib=round(first["peak_memory_tree_mib"]["pss"] / 1024, 2),
            peak_rss_summed_gib=round(first["peak_memory_tree_mib"]["rss"] / 1024, 2),
            cache_disk_gib=round(first["cache_disk_mib"]["total"] / 1024, 2),
        )
    if "second" in runs:
        second = runs["second"]
        result.update(cached_first_update_s=second["first_update_s"], cache_hit=second["tokenized_cache_hit"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4_000_000, help="Training pairs of the synthetic corpus.")
    parser.add_argument("--format", choices=("tsv", "jsonl"), default="tsv")
    parser.add_argument("--workers", type=int, default=2, help="--preprocessing_num_workers (0: not passed).")
    parser.add_argument("--work_dir", type=Path, default=ROOT / "outputs" / "data_path_scale")
    parser.add_argument("--output", type=Path, default=RESULT)
    parser.add_argument("--cached_run_only", action="store_true", help="Only the second run, on a filled cache.")
    parser.add_argument("extra", nargs="*", help="More train.py options (after --).")
    arguments = sys.argv[1:]
    if arguments[:1] == ["--child"]:
        child(arguments[1], arguments[3:])
        return
    args = parser.parse_args(arguments)

    args.work_dir.mkdir(parents=True, exist_ok=True)
    corpus = args.work_dir / f"train_{args.pairs}.{args.format}"
    if not corpus.is_file():
        build_corpus(corpus, args.pairs, args.format)
    cache = args.work_dir / "datasets_cache"
    if cache.exists() and not args.cached_run_only:
        shutil.rmtree(cache)
    train_argv = train_arguments(args, corpus, args.work_dir / "run")
    runs = {}
    names = ("first run (empty cache)", "second run (cache)")
    for name in names[1:] if args.cached_run_only else names:
        print(f"{name}: train.py {' '.join(train_argv)}", flush=True)
        key = "first" if name.startswith("first") else "second"
        runs[key] = run_once(key, train_argv, args.work_dir, args.work_dir)
        runs[key]["description"] = name
        print(json.dumps({k: v for k, v in runs[key].items() if not k.startswith("busiest")}, indent=2), flush=True)
    document = dict(
        machine=machine(packages=("datasets", "tokenizers")),
        corpus=dict(
            pairs=args.pairs,
            format=args.format,
            bytes=corpus.stat().st_size,
            description="the embedded training verses recombined and perturbed (benchmarks/data_path_scale.py)",
        ),
        command=f"python benchmarks/data_path_scale.py --pairs {args.pairs} --format {args.format} "
        f"--workers {args.workers}",
        train_py=["training/train.py", *[shown_path(a, args.work_dir) for a in train_argv]],
        runs=runs,
        summary=summary(runs),
    )
    write_result(args.output, document, arguments)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
