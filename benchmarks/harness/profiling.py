# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""What the profiling benchmarks share: the compute operators PyTorch dispatches (`OperatorCount`, a
`TorchDispatchMode`: what a step's launch overhead grows with on a GPU, where every counted operator is one or more
kernel launches; `operator_counts.py`, and `gpu_training_and_decoding.py`'s stand-in for kernels on a CPU), and the
GPU's busy time under `torch.profiler` (`busy_seconds`; `gpu_training_and_decoding.py`)."""

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode


# Operators that compute nothing: allocations and metadata (views are recognised by their schema, `is_view`).
NOT_COMPUTE = {"aten._unsafe_view", "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty"}
NOT_COMPUTE |= {"aten.new_empty_strided", "aten.lift_fresh", "aten.detach", "aten.alias", "aten.is_same_size"}


class OperatorCount(TorchDispatchMode):
    """Counts the compute operators dispatched inside the block, by name."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if not func.is_view and name not in NOT_COMPUTE:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def busy_seconds(events) -> float:
    """Length of the union of the GPU kernels' [start, end] intervals (microseconds in, seconds out)."""
    intervals = sorted((event.time_range.start, event.time_range.end) for event in events)
    total, current_start, current_end = 0.0, None, None
    for start, end in intervals:
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total / 1e6
