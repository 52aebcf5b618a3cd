#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Random architecture search over the hard connections of the Multi-Pass Transformer (paper 004, §3.4).

    python training/search_connections.py --output_dir outputs/mpt-search --preset base \\
        --coarse_samples 16 --refine_rounds 3 --refine_top 3 --refine_neighbours 4 --metric loss \\
        --max_steps 4000 --eval_steps 1000 --save_steps 1000 --max_tokens 4096

The tool is the library module `hf_unified_mt.analysis.search_connections`: its docstring has the method, `--help`
the options.
"""

from hf_unified_mt.analysis.search_connections import main


if __name__ == "__main__":
    main()
