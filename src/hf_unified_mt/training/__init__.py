# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The training side of hf-unified-mt: everything that is *not* shipped inside a checkpoint.

`hf_unified_mt/` itself holds exactly the code a saved model carries for `trust_remote_code=True` (the
`configuration_*`, `modeling_*`, `cache_mt` and `pipeline_translation` modules); this subpackage holds what trains,
evaluates and describes models: corpora and data preparation (`data`, `corpora/`), tokenizers (`tokenization`),
token-budget batching (`batching`), metrics (`metrics`, `local_metrics/`), batched translation (`inference`), the
model-size presets (`presets`), the MarianMT baselines (`baselines`), the Trainer callbacks (`callbacks`) and a
seconds-long end-to-end demo (`demo`). Modeling code never imports from here, so none of it reaches a checkpoint.
"""
