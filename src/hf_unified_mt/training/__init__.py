# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The training side of hf-unified-mt: everything that is *not* shipped inside a checkpoint.

`hf_unified_mt/` itself holds exactly the code a saved model carries for `trust_remote_code=True` (the
`configuration_*`, `modeling_*`, `initialization_mt`, `cache_mt` and `pipeline_translation` modules); this
subpackage holds what trains, evaluates and describes models: corpora and data preparation (`data`, `corpora/`),
tokenizers (`tokenization`), token-budget batching (`batching`), learning-rate schedules over a time budget
(`schedules`), metrics (`metrics`, `local_metrics/`), checkpoint discovery (`checkpoints`), the MarianMT baselines
(`baselines`), the Trainer callbacks (`callbacks`: MUTE's AutoShuffle projection and loss logging, weight averaging),
the time budget (`budget`: its clock, progress bar and resume check), one training run's options, their parsing and
checks (`arguments`), the run itself, stage by stage: data, tokenizer, model, Trainer, training, test scores and
results (`run`, whose `main` is `training/train.py`) and a seconds-long end-to-end demo (`demo`).
Modeling code never imports from here, so none of it reaches a checkpoint, and `import hf_unified_mt` does not import
it either. Beside it: the model-size presets (`hf_unified_mt.presets`), translation, int8 and ONNX
(`hf_unified_mt.deployment`) and the papers' analysis tools and the ablation study (`hf_unified_mt.analysis`).
"""
