# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""A translation pipeline for encoder-decoder models.

transformers 5 removed the `translation` / `text2text-generation` tasks. This pipeline restores the usual
interface - `pipeline("translation", model=path, trust_remote_code=True)("Hola")` ->
`[{"translation_text": "Hello"}]`, with batching - for every model of this package: each config carries
`custom_pipelines` pointing at this file, and the file is saved with the model code. It depends on nothing but
transformers, so it works where `hf_unified_mt` is not installed.
"""

from transformers import GenerationConfig, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY


TASK = "translation"
# In-process name: registering the removed name "translation" raises in transformers 5, so the task is registered
# under this alias; checkpoints still expose it as "translation" through `config.custom_pipelines`.
REGISTERED_TASK = "hf-unified-mt-translation"

CUSTOM_PIPELINES = {
    TASK: {
        "impl": "pipeline_translation.TranslationPipeline",
        "pt": ["AutoModelForSeq2SeqLM"],
        "tf": [],
        "type": "text",
    }
}


class TranslationPipeline(Pipeline):
    """Translate text with any encoder-decoder model that has a tokenizer.

    Call with a string or a list of strings (`batch_size=` batches them; shorter inputs are padded); generation
    parameters (`num_beams`, `max_new_tokens`, `do_sample`, ...) can be given at construction or per call.
    Returns one `{"translation_text": ...}` per input (a list of them per input with `num_return_sequences > 1`); an
    empty list gives an empty list, and an empty (or blank) string translates to `""` without running the model.
    Inputs are not truncated unless asked: one longer than the model accepts raises an error naming its length;
    `truncation=True` (as for transformers' translation pipeline) cuts inputs to `max_length` tokens, by default the
    model's `max_position_embeddings`.
    """

    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True
    _default_generation_config = GenerationConfig(max_new_tokens=256, num_beams=4)

    def _sanitize_parameters(
        self, clean_up_tokenization_spaces=None, return_tensors=None, truncation=None, **generate_kwargs
    ):
        preprocess_params = {}
        if truncation is not None:
            if truncation not in (True, False, "longest_first", "only_first", "do_not_truncate"):
                raise ValueError(f"truncation must be True or False, not {truncation!r}")
            preprocess_params["truncation"] = truncation not in (False, "do_not_truncate")
            # `max_length` belongs to generate() elsewhere; with truncation it is the longest input to keep
            if preprocess_params["truncation"] and "max_length" in generate_kwargs:
                preprocess_params["max_length"] = generate_kwargs.pop("max_length")
        postprocess_params = {}
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        return preprocess_params, generate_kwargs, postprocess_params

    def preprocess(self, text, truncation=False, max_length=None):
        if not isinstance(text, str):
            raise TypeError(f"The translation pipeline takes strings, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("Cannot translate an empty string")  # __call__ answers "" for those without the model
        if truncation:
            max_length = max_length or getattr(self.model.config, "max_position_embeddings", None)
            return self.tokenizer(text, return_tensors="pt", truncation=max_length is not None, max_length=max_length)
        return self.tokenizer(text, return_tensors="pt", truncation=False)

    def _forward(self, model_inputs, **generate_kwargs):
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        batch_size = model_inputs["input_ids"].shape[0]
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        # One row per input, possibly several sequences each (num_return_sequences).
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}

    def postprocess(self, model_outputs, clean_up_tokenization_spaces=None, return_tensors=False):
        # `clean_up_tokenization_spaces=None`: the tokenizer's own setting (False for the subword tokenizers of this
        # package, whose spaces it would corrupt).
        records = []
        for sequence in model_outputs["output_ids"][0]:
            if return_tensors:
                records.append({"translation_token_ids": sequence})
            else:
                text = self.tokenizer.decode(
                    sequence, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                )
                records.append({"translation_text": text})
        return records

    def __call__(self, inputs, *args, **kwargs):
        """A string gives `[{"translation_text": ...}]` (one entry per returned sequence); a list of strings gives one
        such list per input, flattened to one dict per input when each input has a single translation (the
        transformers 4 behaviour)."""
        if isinstance(inputs, str) and not inputs.strip():
            return self._empty_translation(kwargs)
        if isinstance(inputs, (list, tuple)):
            if not inputs:
                return []
            # Empty strings are answered here, so that one of them does not fail the whole batch.
            empty = [isinstance(text, str) and not text.strip() for text in inputs]
            texts = [text for text, blank in zip(inputs, empty) if not blank]
            translated = iter(super().__call__(texts, *args, **kwargs) if texts else [])
            results = [self._empty_translation(kwargs) if blank else next(translated) for blank in empty]
        else:
            results = super().__call__(inputs, *args, **kwargs)
            if isinstance(inputs, str):
                return results
        if all(len(records) == 1 for records in results):
            return [records[0] for records in results]
        return results

    def _empty_translation(self, kwargs):
        """The records of an empty input: one empty translation per returned sequence."""
        _, forward_params, postprocess_params = self._sanitize_parameters(**kwargs)
        params = self._get_set_generation_params({**self._forward_params, **forward_params})
        count = params.get("num_return_sequences") or 1
        return_tensors = {**self._postprocess_params, **postprocess_params}.get("return_tensors")
        key = "translation_token_ids" if return_tensors else "translation_text"
        return [{key: [] if key == "translation_token_ids" else ""} for _ in range(count)]


def register_translation_pipeline() -> None:
    """Make `pipeline("hf-unified-mt-translation", model=...)` available in this process."""
    from transformers import AutoModelForSeq2SeqLM

    if REGISTERED_TASK not in PIPELINE_REGISTRY.get_supported_tasks():
        PIPELINE_REGISTRY.register_pipeline(
            REGISTERED_TASK, pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM
        )
