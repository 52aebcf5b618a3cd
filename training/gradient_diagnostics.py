#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Gradient-norm diagnostics of paper 001 (Zhang, Titov & Sennrich 2019): Figure 1 and Table 1.

    python training/gradient_diagnostics.py --output_dir outputs/gradient_diagnostics
    python training/gradient_diagnostics.py --models base:init_law=xavier base deep-12:init_law=xavier deep-12 \\
        --config_overrides '{"decoder_attention_type": "self"}' --max_target_tokens 3000
    python training/gradient_diagnostics.py --models outputs/my_run --tokenizer outputs/my_run

The tool is the library module `hf_unified_mt.analysis.gradient_diagnostics`: its docstring has the method, `--help`
the options.
"""

from hf_unified_mt.analysis.gradient_diagnostics import main


if __name__ == "__main__":
    main()
