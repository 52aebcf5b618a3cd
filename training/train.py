#!/usr/bin/env python
# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Train a translation model with `Seq2SeqTrainer`: any architecture of `hf_unified_mt`, or `MarianMTModel`.

    python training/train.py training/configs/cpu_default.yaml
    python training/train.py --arch marian --preset small --output_dir outputs/marian
    accelerate launch --config_file training/accelerate_configs/multi_gpu_ddp.yaml training/train.py --max_tokens 4096

The run itself (data, tokenizer, model, Trainer, test scores, results.json) is the library module
`hf_unified_mt.training.run`, whose docstring has the steps; its options are `hf_unified_mt.training.arguments`, and
`python training/train.py --help` lists them.
"""

from hf_unified_mt.training.run import cli


if __name__ == "__main__":
    cli()
