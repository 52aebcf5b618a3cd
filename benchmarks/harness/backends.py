# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The decoding backends the CPU inference benchmarks time (`inference_vs_ctranslate2.py`):
each a function `(input_ids, attention_mask, num_beams) -> outputs` decoding exactly
`new_tokens` tokens: PyTorch `generate()` (eager or with the decoding step compiled), CTranslate2 running a
converted same-size MarianMT, and ONNX Runtime through `generate()`, the native loop or the search graphs; and a clock
around an ONNX Runtime session's runs."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import MarianMTModel

from harness import fixed_length


GenerateFn = Callable[[torch.Tensor, torch.Tensor, int], object]  # (input_ids, attention_mask, num_beams) -> outputs


def torch_backend(model: torch.nn.Module, new_tokens: int) -> GenerateFn:
    """`model.generate` decoding exactly `new_tokens` tokens, without gradients."""

    @torch.inference_mode()
    def generate(input_ids, attention_mask, num_beams):
        return model.generate(input_ids, attention_mask=attention_mask, **fixed_length(new_tokens, num_beams))

    return generate


def compiled_backend(model: torch.nn.Module, new_tokens: int) -> GenerateFn:
    """`generate()` of a copy of `model` whose forward (one decoding step; `generate()` runs the encoder apart) is
    compiled with `torch.compile` (Inductor, dynamic shapes, so that the growing cache and the beams do not recompile
    every step). The copy fuses its projections once beforehand, which `generate()` would otherwise do and undo at
    every call, changing what the compiled graphs depend on. Compiles on its first call.

    The models share their forward's code, on which TorchDynamo counts recompilations: the graphs of the models
    measured before (done with) are dropped, and the limit is raised above the few graphs one model needs (the first
    step, the second, the dynamic rest; the cross-attention cache's state), so that no model falls back to eager."""
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 32)
    clone = copy.deepcopy(model).eval()
    if hasattr(clone, "fuse_projections"):
        clone.fuse_projections()
    clone.forward = torch.compile(clone.forward, dynamic=True)
    return torch_backend(clone, new_tokens)


class _VocabularyOnly:
    """What the CTranslate2 converter reads from a Marian tokenizer: the vocabulary in id order and the special tokens.
    The random-weight MarianMT has no tokenizer, and `AutoTokenizer` knows no tokenizer for a bare `MarianConfig`
    (transformers 5 has no `MarianTokenizer` without sentencepiece files). Id 1 (the model's decoder start) is `<s>`,
    2 is `</s>`, 3 is `<unk>`, the last is `<pad>` (dropped by the converter, as in the Marian models it targets)."""

    def __init__(self, vocab_size: int):
        names = {0: "<blank>", 1: "<s>", 2: "</s>", 3: "<unk>", vocab_size - 1: "<pad>"}
        self.vocabulary = {names.get(i, f"t{i}"): i for i in range(vocab_size)}
        self.bos_token, self.eos_token, self.unk_token = "<s>", "</s>", "<unk>"

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocabulary)


def ctranslate2_names(vocab_size: int) -> dict[int, str]:
    """The token name of each id in a MarianMT converted by `convert_to_ctranslate2` (`_VocabularyOnly`)."""
    return {i: name for name, i in _VocabularyOnly(vocab_size).vocabulary.items()}


def convert_to_ctranslate2(
    marian: MarianMTModel, directory: Path, quantizations=("float32", "int8"), vmap: Path | None = None
) -> dict[str, Path]:
    """Saves `marian` once and converts it with `ctranslate2.converters.TransformersConverter` to each of
    `quantizations` (weights; CTranslate2 picks the matching compute type), and with `vmap` given to each again with
    that vocabulary map. Returns the converted directories by quantisation (`int8`, and `int8+vmap` with the map).

    The converter loads the model's tokenizer only for its vocabulary; a converter subclass hands it
    `_VocabularyOnly` instead (the least invasive way: the model itself goes through the converter's own loader)."""
    from ctranslate2.converters import TransformersConverter

    class RandomWeightsMarianConverter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return _VocabularyOnly(marian.config.vocab_size)

    saved = directory / "marian"
    marian.save_pretrained(saved)
    converted = {}
    for quantization in quantizations:
        for mapping in (None,) if vmap is None else (None, vmap):
            name = quantization if mapping is None else f"{quantization}+vmap"
            output = directory / f"ct2-{name}"
            RandomWeightsMarianConverter(str(saved)).convert(
                str(output), vmap=None if mapping is None else str(mapping), quantization=quantization, force=True
            )
            converted[name] = output
    return converted


def ctranslate2_backend(directory: Path, vocab_size: int, threads: int, new_tokens: int) -> GenerateFn:
    """A CTranslate2 `Translator` on the CPU decoding exactly `new_tokens` tokens; takes the same id tensors as the
    PyTorch backends (converted to token strings once per batch, outside the timed call)."""
    import ctranslate2

    translator = ctranslate2.Translator(str(directory), device="cpu", intra_threads=threads, inter_threads=1)
    names = ctranslate2_names(vocab_size)
    # Token strings by input tensor; the tensor is kept with them, so that its id() cannot be reused by another.
    tokens_of: dict[int, tuple[torch.Tensor, list[list[str]]]] = {}

    def generate(input_ids, attention_mask, num_beams):
        if id(input_ids) not in tokens_of:
            tokens_of[id(input_ids)] = (input_ids, [[names[int(i)] for i in row] for row in input_ids])
        return translator.translate_batch(
            tokens_of[id(input_ids)][1],
            beam_size=num_beams,
            num_hypotheses=1,
            min_decoding_length=new_tokens,
            max_decoding_length=new_tokens,
        )

    return generate


# ONNX Runtime backends: label -> (int8, `from_pretrained` options). `onnx-fp32` / `onnx-int8` decode through
# transformers' `generate()` loop (`native_search=False`, what the backend did before issue 47); `onnx-native-int8`
# through the native loop over the step graph in Python (`hf_unified_mt.deployment.onnx_search`, the default before the
# search graphs); `onnx-graph-*` as one search graph (`onnx_search_graph`), what `ORTModelForSeq2SeqLM` now takes;
# `onnx-graph-int8-per-row` the same with the weight-only int8 graphs (`int8="per_row"`, `MatMulNBits`, inputs quantised
# per row), whose translations do not depend on the batch.
ONNX_BACKENDS = {
    "onnx-fp32": (False, dict(native_search=False)),
    "onnx-int8": (True, dict(native_search=False)),
    "onnx-native-int8": (True, dict(search_graphs=False)),
    "onnx-graph-fp32": (False, {}),
    "onnx-graph-int8": (True, {}),
    "onnx-graph-int8-per-row": ("per_row", {}),
}


def onnx_backends(model: torch.nn.Module, directory: Path, threads: int, new_tokens: int) -> dict[str, GenerateFn]:
    """The ONNX Runtime backends of `model` (`ONNX_BACKENDS`), or none, with a printed note, when the ONNX backend
    (issue 33: `hf_unified_mt.deployment.onnx_export` / `onnx_runtime`) or ONNX Runtime is not installed, or when the
    export refuses the model. The one place to adapt if that backend's API changes: `export_onnx(model, tokenizer,
    directory)` writes the graphs, `ORTModelForSeq2SeqLM.from_pretrained(directory, int8=..., num_threads=...,
    native_search=..., search_graphs=...)` loads them (quantising the per-row int8 graphs on first use) into a model
    whose `generate` takes the same arguments as the PyTorch model's."""
    try:
        from hf_unified_mt.deployment.onnx_export import export_onnx
        from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM

        # its tests compare the graphs with PyTorch; an earlier export of the same model (a run before, `--runs`) is
        # replaced
        export_onnx(model, directory, int8=True, verify=False, overwrite=True)
        return {
            label: torch_backend(
                ORTModelForSeq2SeqLM.from_pretrained(directory, int8=int8, num_threads=threads, **options),
                new_tokens,
            )
            for label, (int8, options) in ONNX_BACKENDS.items()
        }
    except (ImportError, NotImplementedError, ValueError) as error:
        print(f"note: ONNX Runtime backends skipped for {type(model).__name__} ({error})", file=sys.stderr)
        return {}
