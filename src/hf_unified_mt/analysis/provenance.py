# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Which code made a result: the commit of the source checkout and whether it had uncommitted changes, recorded with
every run of the ablation study and of the main job's measurements."""

from __future__ import annotations

import subprocess
from pathlib import Path


# The source checkout this package runs from (an editable install: `pip install -e .`), where the studies keep their
# results and documents.
REPO = Path(__file__).resolve().parents[3]


def code_version(repo: Path = REPO) -> dict:
    """The commit of the package code a run used, and whether its code had uncommitted changes (None outside git).
    The study's own result files (`benchmarks/results/`, which every finished run rewrites) are not code."""

    def git(*argv) -> str | None:
        try:
            return subprocess.run(
                ["git", "-C", str(repo), *argv], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    status = git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "src",
        "training",
        "benchmarks",
        ":(exclude)benchmarks/results",
    )
    return dict(commit=git("rev-parse", "HEAD"), uncommitted_changes=None if status is None else bool(status))
