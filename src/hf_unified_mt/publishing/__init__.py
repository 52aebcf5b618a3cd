# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Publishing a checkpoint trained with `training/train.py` to the Hugging Face Hub: the library behind `hub_upload.py`.

* `checkpoint`: what the Hub folder needs from a checkpoint, checked before anything is built (`inspect_checkpoint`,
  which returns a `Checkpoint`): weights (the parameter count read from the safetensors headers, no model loaded),
  `config.json` with `auto_map` and `custom_pipelines`, every model code file they name and every file those import,
  the tokenizer and the test scores; every file name read from the checkpoint's files must name a file of the
  checkpoint folder itself, and an ONNX export folder is refused with the model folder to pass instead.
* `card`: the model card, rendered from `model_cards/<model_type>.md` at the top of the repository (`render_card`,
  `build_card_data`: the `model-index` metadata; `describe_dataset`, `composed_mechanisms`, `available_templates`).
* `repository`: the Hub folder built beside `--output_dir` and moved into place once complete (`check_output_dir`,
  `stage_hub_folder`, `install_hub_folder`), the token (`require_token`) and the upload (`upload_folder`).
* `cli`: the command, `main(argv)` (raising `HubUploadError`) and `cli(argv)` (`hub_upload.py`, `python -m
  hf_unified_mt.publishing.cli`: the same, with a `HubUploadError` printed on one line, exit status 2).

`HubUploadError`, defined here, is what every step raises for a problem the user can fix. The modules import the
standard library, `hf_unified_mt.utils` and two light modules of `hf_unified_mt.deployment` (`onnx_format`, to
recognise an export; `tokenizer_files`, to publish a clean `tokenizer_config.json`); huggingface_hub and Jinja2 (the
`[train]` extra) are imported where they are used. Nothing here imports torch or transformers itself, nor
`hf_unified_mt.training` or `hf_unified_mt.analysis`; importing any part of the package still runs `import
hf_unified_mt`, which imports torch and transformers to register the models. Nothing here is imported by `import
hf_unified_mt`.
"""


class HubUploadError(Exception):
    """A problem the user can fix (missing token, incomplete checkpoint, ...); reported without a traceback."""
