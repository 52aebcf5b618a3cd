# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Measurements of the papers' claims on trained or fresh models, each a library module with its command-line entry
point (`training/<name>.py` runs the same `main`):

* `gradient_diagnostics`: paper 001's per-layer gradient norms and error-signal ratios (Figure 1, Table 1);
* `unit_diversity`: paper 002's diversity of MUTE's units (Eq. 21, Table 6);
* `search_connections`: paper 004's search over the Multi-Pass Transformer's hard connection patterns, each candidate
  trained by `hf_unified_mt.training.run`;
* `ablation_study` (command: `benchmarks/ablation_study.py`): the controlled ablations of each paper's headline effect,
  with its arms and comparisons (`ablation_arms`) and its report (`ablation_report`).

Shared by the studies: `significance` (paired bootstrap over test sentences: is B better than A?), `provenance`
(`code_version`, the commit a result was made with) and `model_specs` (the tools' `PRESET:field=value` model specs).
"""
