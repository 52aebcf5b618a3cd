# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Running trained models outside training: batched translation and int8, and ONNX export and inference.

* `inference`: `translate()` (batched, length-sorted translation with any `AutoModelForSeq2SeqLM`), PyTorch's dynamic
  int8 (`quantize_int8`) and generation-config hygiene for saved checkpoints. Needs only the core dependencies.
* `onnx_export`: the exporter (`export_onnx`, `python -m hf_unified_mt.deployment.onnx_export`), the ONNX Runtime int8
  graphs, and the verification of an export against the PyTorch model.
* `onnx_runtime`: `ORTModelForSeq2SeqLM`, which runs an export through transformers' `generate()`.
* `onnx_format`: what an export folder holds (file names, cache layout, manifest, int8 modes), shared by the two.

The exporter imports nothing from the runtime; the runtime reads what the exporter wrote (`onnx_format`) and calls the
exporter only to quantise graphs on first use and to export a saved model on the fly (`load_onnx_model`). The ONNX
modules need the `onnx` extra (`pip install "hf-unified-mt[onnx]"`); nothing here is imported by `import hf_unified_mt`.
"""
