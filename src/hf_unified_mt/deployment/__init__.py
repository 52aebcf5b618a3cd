# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Running trained models outside training: batched translation and int8, and ONNX export and inference.

* `inference`: `translate()` (batched, length-sorted translation with any `AutoModelForSeq2SeqLM`), PyTorch's dynamic
  int8 (`quantize_int8`) and generation-config hygiene for saved checkpoints. Needs only the core dependencies.
* `onnx_export`: the exporter (`export_onnx`, `python -m hf_unified_mt.deployment.onnx_export`) and the verification
  of an export against the PyTorch model.
* `onnx_runtime`: `ORTModelForSeq2SeqLM`, which runs an export through transformers' `generate()`, with greedy and
  beam search in `onnx_search`'s native loops (the step graph over bound ONNX Runtime buffers).
* `onnx_format`: what an export folder holds (file names, cache layout, manifest, int8 modes) and its int8 graphs
  (`add_int8_graphs`, ONNX Runtime's quantisers), shared by the two.
* `onnx_backend`: `load_onnx_model`, the scripts' `--backend onnx` (an export, or a saved model exported on the fly).
* `tokenizer_files`: `save_tokenizer` and the clean-up of transformers' load options in `tokenizer_config.json`,
  shared with training and `hub_upload.py`.

The exporter and the runtime import nothing from each other, only `onnx_format`; `onnx_backend` uses both. Nothing
here imports `hf_unified_mt.training`. The ONNX modules need the `onnx` extra (`pip install "hf-unified-mt[onnx]"`);
nothing here is imported by `import hf_unified_mt`.
"""
