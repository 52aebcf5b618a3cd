# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""A translation pipeline for encoder-decoder models.

transformers 5 removed the `translation` / `text2text-generation` tasks. This pipeline restores the usual
interface - `pipeline("translation", model=path, trust_remote_code=True)("Hola")` ->
`[{"translation_text": "Hello"}]`, with batching - for every model of this package: each config carries
`custom_pipelines` pointing at this file, and the file is saved with the model code. It depends on nothing but
transformers, so it works where `hf_unified_mt` is not installed.
"""

import torch
from transformers import GenerationConfig, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.pipelines.pt_utils import KeyDataset


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

    Call with a string, a list of strings, or a stream of them (a generator, a `Dataset`, a `KeyDataset` over a
    `datasets.Dataset`), as transformers' pipelines are called: `batch_size=` batches them (shorter inputs are padded);
    generation parameters (`num_beams`, `max_new_tokens`, `max_length`, `do_sample`, ...) can be given at construction
    or per call, the call's winning. A string gives `[{"translation_text": ...}]` (one entry per returned sequence,
    `num_return_sequences`); a list gives a list with one such entry per input (flattened to one dict per input when
    each input has a single translation); a stream gives an iterator over every input's entries, in order. An empty
    list gives an empty list, and an empty (or blank) string translates to `""` without running the model, in a stream
    too. `max_length` counts the whole output, decoder start token included (as in `generate()`), and wins over a
    `max_new_tokens` of the model's generation config; lengths the model's decoder cannot reach, and invalid
    generation options, raise a `ValueError` naming the option. Without a length option, outputs stop at the model's
    `max_position_embeddings`. Inputs are not truncated unless asked: one longer than the model accepts raises an
    error naming it (its list index) and its length; `truncation=True` (as for transformers' translation pipeline)
    cuts inputs to `max_length` tokens, by default the model's `max_position_embeddings`.
    """

    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True
    _default_generation_config = GenerationConfig(max_new_tokens=256, num_beams=4)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._check_generation_options({})

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
                max_length = generate_kwargs.pop("max_length")
                limit = self._position_limit()
                if not _is_count(max_length, least=1) or (limit is not None and max_length > limit):
                    raise ValueError(
                        f"`max_length` (with truncation=True, the longest input to keep) must be an integer from 1 to "
                        f"the model's `max_position_embeddings`={limit}, not {max_length!r}"
                    )
                preprocess_params["max_length"] = max_length
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
            # Answered "" without the model (see `_forward`); tokenized like any input so that it batches with them.
            encoded = self.tokenizer("", return_tensors="pt", truncation=False)
            encoded[_BLANK] = torch.tensor([True])
            return encoded
        limit = self._position_limit()
        if truncation:
            max_length = max_length or limit
            encoded = self.tokenizer(
                text, return_tensors="pt", truncation=max_length is not None, max_length=max_length
            )
        else:
            encoded = self.tokenizer(text, return_tensors="pt", truncation=False)
            length = encoded["input_ids"].shape[1]
            if limit is not None and length > limit:
                excerpt = text if len(text) <= 40 else text[:40] + "..."
                raise ValueError(
                    f"The input {excerpt!r} has {length} tokens, more than the model accepts "
                    f"(max_position_embeddings={limit}); shorten it, or pass truncation=True to cut it to {limit} "
                    "tokens"
                )
        encoded[_BLANK] = torch.tensor([False])
        return encoded

    def _forward(self, model_inputs, **generate_kwargs):
        blank = model_inputs.pop(_BLANK)
        generate_kwargs = self._generate_kwargs_for_call(generate_kwargs)
        batch_size = blank.shape[0]
        rows = ~blank
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        if not rows.any():  # only empty strings: no model call
            count = self._get_set_generation_params(generate_kwargs).get("num_return_sequences") or 1
            return {"output_ids": torch.full((batch_size, count, 0), pad, dtype=torch.long), _BLANK: blank}
        if not rows.all():
            model_inputs = {key: value[rows] for key, value in model_inputs.items()}
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)
        # One row per input, possibly several sequences each (num_return_sequences).
        output_ids = output_ids.reshape(int(rows.sum()), -1, output_ids.shape[-1])
        if not rows.all():
            generated, output_ids = output_ids, output_ids.new_full((batch_size, *output_ids.shape[1:]), pad)
            output_ids[rows] = generated
        return {"output_ids": output_ids, _BLANK: blank}

    def postprocess(self, model_outputs, clean_up_tokenization_spaces=None, return_tensors=False):
        # `clean_up_tokenization_spaces=None`: the tokenizer's own setting (False for the subword tokenizers of this
        # package, whose spaces it would corrupt).
        blank = bool(model_outputs[_BLANK][0])
        records = []
        for sequence in model_outputs["output_ids"][0]:
            if return_tensors:
                records.append({"translation_token_ids": [] if blank else sequence})
            else:
                text = (
                    ""
                    if blank
                    else self.tokenizer.decode(
                        sequence, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up_tokenization_spaces
                    )
                )
                records.append({"translation_text": text})
        return records

    def __call__(self, inputs, *args, **kwargs):
        """A string gives `[{"translation_text": ...}]` (one entry per returned sequence); a list (or tuple) of strings
        gives one such list per input, flattened to one dict per input when each input has a single translation (the
        transformers 4 behaviour); a generator or dataset gives an iterator of one such list per input, in order."""
        preprocess_params, forward_params, _ = self._sanitize_parameters(**kwargs)
        self._check_generation_options(forward_params)  # before any input is read
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if isinstance(inputs, list):
            if not inputs:
                return []
            self._check_list(inputs, **{**self._preprocess_params, **preprocess_params})
            results = super().__call__(inputs, *args, **kwargs)
            if all(len(records) == 1 for records in results):
                return [records[0] for records in results]
            return results
        if isinstance(inputs, KeyDataset) and len(inputs) == 0:
            return iter(())  # transformers' `__call__` would index the empty dataset
        return super().__call__(inputs, *args, **kwargs)

    def get_iterator(self, *args, **kwargs):
        """transformers' batching iterator, padding on the right whatever the tokenizer's `padding_side`: the models
        take right-padded batches only (positions count from the first position)."""
        side = self.tokenizer.padding_side
        self.tokenizer.padding_side = "right"  # read once, when the iterator's collate function is built
        try:
            return super().get_iterator(*args, **kwargs)
        finally:
            self.tokenizer.padding_side = side

    def _position_limit(self):
        limit = getattr(self.model.config, "max_position_embeddings", None)
        return limit if isinstance(limit, int) and limit > 0 else None

    def _check_list(self, inputs, truncation=False, max_length=None):
        """Every item of a list input, before anything is translated: strings, none longer than the model accepts."""
        for index, text in enumerate(inputs):
            if not isinstance(text, str):
                raise TypeError(f"The translation pipeline takes strings, but inputs[{index}] is {type(text).__name__}")
        limit = self._position_limit()
        positions = [index for index, text in enumerate(inputs) if text.strip()]
        if truncation or limit is None or not positions:
            return
        lengths = [len(ids) for ids in self.tokenizer([inputs[i] for i in positions], truncation=False)["input_ids"]]
        over = [(index, length) for index, length in zip(positions, lengths) if length > limit]
        if over:
            named = ", ".join(f"inputs[{index}] ({length} tokens)" for index, length in over[:5])
            named += f" and {len(over) - 5} more" if len(over) > 5 else ""
            raise ValueError(
                f"{len(over)} input(s) are longer than the model accepts (max_position_embeddings={limit}): {named}; "
                f"shorten them, or pass truncation=True to cut them to {limit} tokens"
            )

    def _user_generation_params(self, generate_kwargs):
        """The user's generation parameters by priority: the call's, then the construction's (which a call with a
        `generation_config` replaces, as in `_prepare_generate_kwargs`), each with its `generation_config` unpacked."""
        levels = (
            [generate_kwargs]
            if "generation_config" in generate_kwargs
            else [generate_kwargs, getattr(self, "_generate_kwargs", {})]
        )
        unpacked = []
        for kwargs in levels:
            config = kwargs.get("generation_config")
            params = config.to_diff_dict() if config is not None else {}
            params.update((key, value) for key, value in kwargs.items() if key != "generation_config")
            unpacked.append(params)
        return unpacked

    def _check_generation_options(self, generate_kwargs):
        """Generation options that `generate()` would fail on deep inside (or with an unrelated error), refused with a
        `ValueError` naming them; so are lengths beyond the model's decoder positions."""
        limit = self._position_limit()
        for params in self._user_generation_params(generate_kwargs):
            for name in ("num_beams", "num_return_sequences", "num_beam_groups", "max_new_tokens", "max_length"):
                if name not in params or (params[name] is None and name in ("max_new_tokens", "max_length")):
                    continue
                value = params[name]
                least = 2 if name == "max_length" else 1
                if not _is_count(value, least):
                    why = " (it counts the decoder start token)" if name == "max_length" else ""
                    raise ValueError(f"`{name}` must be an integer of at least {least}{why}, not {value!r}")
                most = None if limit is None else {"max_new_tokens": limit, "max_length": limit + 1}.get(name)
                if most is not None and value > most:
                    raise ValueError(
                        f"`{name}`={value} is more than the model can generate: its decoder has "
                        f"`max_position_embeddings`={limit} positions (at most `{name}`={most})"
                    )

    def _generate_kwargs_for_call(self, generate_kwargs):
        """`_prepare_generate_kwargs`, with the output length the user asked for: the call's `max_length` or
        `max_new_tokens` wins over the construction's, and a user's `max_length` over the `max_new_tokens` of the
        model's generation config (which `generate()` would give precedence); without either, the default length is
        capped at the model's decoder positions."""
        levels = self._user_generation_params(generate_kwargs)
        with_config = generate_kwargs.get("generation_config") is not None
        overrides, convert = {}, None
        for position, params in enumerate(levels):
            max_length, max_new_tokens = params.get("max_length"), params.get("max_new_tokens")
            if max_new_tokens is not None:
                lower = any(level.get("max_length") is not None for level in levels[position + 1 :])
                if max_length is None and lower:
                    overrides["max_length"] = None
                break
            if max_length is not None:
                if with_config:  # generate() refills the config's `max_new_tokens` from the model's: convert
                    convert = max_length - 1  # new tokens after the decoder start token
                else:
                    overrides["max_new_tokens"] = None
                break
        else:
            model_config = self.model.generation_config
            default = getattr(model_config, "max_new_tokens", None)
            if default is None and getattr(model_config, "max_length", None) is None:
                default = self._generation_defaults.get("max_new_tokens")
            limit = self._position_limit()
            if default is not None and limit is not None and default > limit:
                overrides["max_new_tokens"] = limit
        prepared = self._prepare_generate_kwargs(generate_kwargs, **overrides)
        if convert is not None:
            prepared.pop("max_length", None)
            prepared["generation_config"].update(max_new_tokens=convert, max_length=None)
        return prepared


def _is_count(value, least):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


_BLANK = "_blank_input"


def register_translation_pipeline() -> None:
    """Make `pipeline("hf-unified-mt-translation", model=...)` available in this process."""
    from transformers import AutoModelForSeq2SeqLM

    if REGISTERED_TASK not in PIPELINE_REGISTRY.get_supported_tasks():
        PIPELINE_REGISTRY.register_pipeline(
            REGISTERED_TASK, pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM
        )
