# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Timing shared by the benchmark scripts: interleaved rounds after a warm-up round, GPU-synchronised."""

import statistics
import time
from collections.abc import Callable


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
