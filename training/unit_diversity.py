#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Unit-diversity analysis of paper 002 (Multi-Unit Transformer, §5.6, Eq. 21, Table 6).

    python training/unit_diversity.py --models outputs/mute outputs/mute-bias-seq --output_dir outputs/diversity
    python training/unit_diversity.py --models small small:use_bias_module=true,use_sequential_dependency=true

The tool is the library module `hf_unified_mt.analysis.unit_diversity`: its docstring has the method, `--help`
the options.
"""

from hf_unified_mt.analysis.unit_diversity import main


if __name__ == "__main__":
    main()
