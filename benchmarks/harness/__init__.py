# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The one harness of the benchmark scripts: every script in `benchmarks/` (and `benchmarks/studies/`) times, records
and writes its result through this module, and imports no other script.

* timing: `interleaved_times` runs every call once per round, back to back, after one warm-up round, so that slow
  changes of a shared machine's speed hit them alike (and per-round ratios cancel them), GPU-synchronised;
* the machine record, one schema for every result (`machine`): CPU, cores, memory, threads, GPU, package versions;
* the load check before a run (`load_check`): a 1-minute load average above half a core marks the machine busy;
* the machine's limit in the same run (`matmul_peak`: the FLOP/s of one large matrix product in a precision);
* the result file (`write_result`): the JSON with its provenance (command, date, commit, uncommitted changes);
* the command line every script shares (`add_result_arguments`, `print_table`): `--output` and `--table`, which
  renders the tables from the JSON instead of measuring;
* what several scripts read or decode alike: the README main job's configuration (`MAIN_JOB`, `main_job_settings`),
  the embedded corpus without `datasets` (`embedded_pairs`), `generate()` options for an exact length (`fixed_length`).

What several scripts measure alike lives beside it: `harness.models` (a model and the same-size MarianMT, the main
job's model, source batches), `harness.backends` (the decoding backends: PyTorch, CTranslate2, ONNX Runtime),
and `harness.profiling` (operators dispatched, GPU busy time).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hf_unified_mt.analysis.provenance import code_version
from hf_unified_mt.utils.files import write_json


BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"
ROOT = BENCHMARKS.parent
MAIN_JOB = ROOT / "training" / "configs" / "cpu_default.yaml"  # the README main job's training configuration
BUSY_LOAD = 0.5  # a 1-minute load average above half a core: the machine was doing other work


# ------------------------------------------------------------------------------------------------------- timing


def synchronize(device: str) -> None:
    """Wait for queued GPU work, so that a timer measures it (nothing to wait for on a CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def interleaved_times(
    calls: dict[str, Callable[[], object]], repeats: int, device: str = "cpu"
) -> dict[str, list[float]]:
    """Seconds of every call in each of `repeats` rounds, after one warm-up round. Within a round the calls run back
    to back, so that slow changes of a shared machine's speed hit them alike (and per-round ratios cancel them)."""
    times = {name: [] for name in calls}
    for round_index in range(repeats + 1):
        for name, call in calls.items():
            synchronize(device)
            start = time.perf_counter()
            call()
            synchronize(device)
            if round_index > 0:  # round 0 warms up
                times[name].append(time.perf_counter() - start)
    return times


def median_times(calls: dict[str, Callable[[], object]], repeats: int, device: str = "cpu") -> dict[str, float]:
    """Median seconds per call of [`interleaved_times`]."""
    return {name: statistics.median(values) for name, values in interleaved_times(calls, repeats, device).items()}


def matmul_peak(dtype, size: int, device: str = "cpu", repeats: int = 10) -> float:
    """The machine's limit a result is set against: FLOP/s of one `size`^3 matrix product in `dtype` (a torch dtype)
    on `device`, the best of `repeats` after two warm-ups (`hf_unified_mt.training.arguments.matmul_flops`, which
    also decides `--bf16_if_native` on a CPU)."""
    from hf_unified_mt.training.arguments import matmul_flops

    return matmul_flops(dtype, size, device, repeats=repeats, warmups=2)


def fixed_length(new_tokens: int, num_beams: int) -> dict:
    """`generate()` options that decode exactly `new_tokens` tokens with `num_beams` beams: the same work for every
    model, whatever its outputs (random weights)."""
    return dict(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=num_beams, do_sample=False, early_stopping=False
    )


def main_job_settings() -> tuple[dict, dict]:
    """The README main job's training configuration (`MAIN_JOB`) and its model's config overrides, read."""
    import yaml

    settings = yaml.safe_load(MAIN_JOB.read_text())
    overrides = settings.get("config_overrides") or {}
    return settings, json.loads(overrides) if isinstance(overrides, str) else dict(overrides)


def embedded_pairs(split: str = "train", limit: int | None = None) -> tuple[list[str], list[str]]:
    """Spanish sources and English targets of a split of the embedded corpus (`bible_es_en`), the first `limit` pairs,
    read with the csv module (without `datasets`, which the GPU machine's image lacks)."""
    import csv
    import gzip

    import hf_unified_mt

    name = {"train": "train.tsv.gz", "validation": "valid.tsv.gz", "test": "test.tsv.gz"}[split]
    path = Path(hf_unified_mt.__file__).parent / "training" / "corpora" / "bible_es_en" / name
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        source, target = header.index("es"), header.index("en")
        rows = [(row[source], row[target]) for _, row in zip(range(limit or sys.maxsize), reader)]
    return [row[0] for row in rows], [row[1] for row in rows]


# ------------------------------------------------------------------------------------------------------ machine


def cpu_name() -> str:
    """The CPU's model name (`/proc/cpuinfo`), or what `platform` knows of it."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def versions(packages: tuple[str, ...] = ()) -> dict[str, str | None]:
    """Python's version and those of torch, transformers, this package and `packages` (None: not installed)."""
    found = dict(python=platform.python_version())
    for package in ("torch", "transformers", "hf_unified_mt", *packages):
        try:
            found[package] = __import__(package).__version__
        except ImportError:
            found[package] = None
    return found


def machine(threads: int | None = None, packages: tuple[str, ...] = ()) -> dict:
    """What a result was measured on, the same fields for every script: the CPU, its cores (all, and those this
    process may use), memory, the threads the run used (torch's, unless given), the GPU and the package versions."""
    import torch

    return dict(
        cpu=cpu_name(),
        logical_cpus=os.cpu_count(),
        usable_cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        memory_gib=round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        threads=torch.get_num_threads() if threads is None else threads,
        gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        platform=platform.platform(),
        versions=versions(packages),
    )


def busy(load: float) -> bool:
    """A machine whose 1-minute load average exceeds half a core was doing other work while we measured."""
    return load > BUSY_LOAD


def load_check() -> float:
    """The 1-minute load average before a run; a warning on stderr when the machine is busy (the ratios of
    interleaved rounds still hold, the absolute seconds do not)."""
    load = os.getloadavg()[0]
    if busy(load):
        print(f"note: load average {load:.2f} before the run: the machine is busy", file=sys.stderr)
    return load


# ------------------------------------------------------------------------------------------------------- result


def provenance(argv: list[str] | None = None) -> dict:
    """How a result was made: the command (this script and its arguments), the date (UTC) and the code's commit."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    arguments = sys.argv[1:] if argv is None else argv
    return dict(
        command=shlex.join(["python", str(shown), *map(str, arguments)]),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **code_version(ROOT),
    )


def write_result(path: Path, result: dict, argv: list[str] | None = None, indent: int = 2) -> dict:
    """Write `result` as JSON to `path` (atomically) with its provenance (added to `result` itself, which is
    returned)."""
    result["provenance"] = provenance(argv)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(path, result, indent=indent, ensure_ascii=False)
    return result


def read_result(path: Path) -> dict:
    """A result JSON, read."""
    return json.loads(Path(path).read_text())


def print_table(path: Path, render: Callable[[dict], str]) -> dict:
    """What `--table` does: the result JSON at `path` rendered by `render` and printed; the result."""
    result = read_result(path)
    print(render(result))
    return result


def add_result_arguments(parser, output: Path) -> None:
    """`--output` (the result JSON) and `--table` (print the tables of that JSON and stop, measuring nothing)."""
    parser.add_argument("--output", type=Path, default=output, help=f"the result JSON (default: {output})")
    parser.add_argument("--table", action="store_true", help="print the tables of the JSON at --output and stop")
