#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Controlled ablations: does each paper's headline effect reproduce inside this package?

    python benchmarks/ablation_study.py                      # run what is missing (headline pairs first), then report
    python benchmarks/ablation_study.py --max_runs 2         # at most two new runs this time
    python benchmarks/ablation_study.py --report_only        # rebuild tables, plot and docs/ablation_study.md
    python benchmarks/ablation_study.py --size base          # each paper's base size: one GPU, bf16, 11 runs at once

The study is the library `hf_unified_mt.analysis`: `ablation_study` (the protocol, one run, this command's `main`;
its docstring has the method, `--help` the options), `ablation_arms` (the arms and comparisons), `ablation_report`
(the tables, the figure and the document's generated blocks), `significance` (paired bootstrap) and `provenance`
(`code_version`).
"""

from hf_unified_mt.analysis.ablation_study import main


if __name__ == "__main__":
    main()
