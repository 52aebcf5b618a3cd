# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Running trained models outside training: batched translation and int8, and ONNX export and inference.

* `inference`: `translate()` (batched, length-sorted translation with any `AutoModelForSeq2SeqLM`), PyTorch's dynamic
  int8 (`quantize_int8`) and generation-config hygiene for saved checkpoints. Needs only the core dependencies.
* `onnx_export`: the exporter (`export_onnx`, `python -m hf_unified_mt.deployment.onnx_export`): it traces the two
  graphs, verifies them against the PyTorch model and writes the export folder.
* `onnx_patcher`: the module substitutions the exporter traces under (the graphs' forwards, the forwards modules
  declare for export, ONNX Runtime's fused attention in the step graph).
* `onnx_runtime`: `ORTModelForSeq2SeqLM`, which runs an export through transformers' `generate()`, with greedy and
  beam search in `onnx_search`'s native loops (the step graph over bound ONNX Runtime buffers) and, where the options
  allow, as one ONNX Runtime run of a search graph (`onnx_search_graph`: an ONNX `Loop` around the step graph).
* `onnx_format`: the contract of the two sides: the export folder's file names, the graphs' input and output names,
  the cache layout and the int8 modes. It imports no other module of the package.
* `onnx_folder`: an export folder on disk: its manifest, the check of a folder against it, the one pass a load makes
  over a folder (`open_export`), the lock, the replacement of an export and its recovery, and the int8 graphs added
  to a folder (`add_int8_graphs`), which `onnx_int8` quantises (ONNX Runtime's quantisers).
* `onnx_backend`: `load_onnx_model`, the scripts' `--backend onnx` (an export, or a saved model exported on the fly).
* `shortlist`: the vocabulary shortlist (candidate target tokens from the source tokens, CTranslate2's vocabulary map
  format; `python -m hf_unified_mt.deployment.shortlist` builds one from a corpus), which `ORTModelForSeq2SeqLM`
  applies per call; `onnx_shortlist` restricts the search graphs' output projection to the candidates.
* `tokenizer_files`: `save_tokenizer` and the clean-up of transformers' load options in `tokenizer_config.json`,
  shared with training and `hub_upload.py`.

The exporter (with `onnx_patcher`) and the runtime (with `onnx_search` and `onnx_search_graph`) import nothing from
each other, only `onnx_folder` and `onnx_format`; loading an export reads one way, runtime -> `onnx_folder` ->
`onnx_int8` -> `onnx_format`; `onnx_backend` uses both sides. Nothing here imports `hf_unified_mt.training`. The
ONNX modules need the `onnx` extra (`pip install "hf-unified-mt[onnx]"`); nothing here is imported by
`import hf_unified_mt`.
"""
