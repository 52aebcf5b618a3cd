# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""A first run that needs no data and no network: build a small Unified Transformer and a tokenizer, save them as a
Hugging Face checkpoint, reload it through `AutoModelForSeq2SeqLM` and the translation pipeline, and check that
cached and uncached beam search agree.

    python -m hf_unified_mt.training.demo [--output outputs/demo]

The model is untrained, so its "translations" are random words: this demonstrates the plumbing, not quality.
"""

import argparse
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoModelForSeq2SeqLM, PreTrainedTokenizerFast, pipeline

from .. import UnifiedTransformerForConditionalGeneration, get_config


SENTENCES = [
    "en el principio creó dios los cielos y la tierra",
    "y la tierra estaba desordenada y vacía",
    "in the beginning god created the heavens and the earth",
    "the earth was formless and empty",
]


def build_tokenizer() -> PreTrainedTokenizerFast:
    words = sorted({word for sentence in SENTENCES for word in sentence.split()})
    vocab = {token: i for i, token in enumerate(["<pad>", "<s>", "</s>", "<unk>"] + words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=Path("outputs/demo"))
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    config = get_config("unified_transformer", "tiny", vocab_size=len(tokenizer))
    model = UnifiedTransformerForConditionalGeneration(config).eval()
    print(f"Built {type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} parameters")

    model.save_pretrained(args.output)
    tokenizer.save_pretrained(args.output)
    print(f"Saved checkpoint to {args.output}: {sorted(p.name for p in args.output.iterdir())}")

    reloaded = AutoModelForSeq2SeqLM.from_pretrained(args.output).eval()
    batch = tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    with_cache = reloaded.generate(**batch, num_beams=4, max_new_tokens=8)
    without_cache = reloaded.generate(**batch, num_beams=4, max_new_tokens=8, use_cache=False)
    print(f"Beam search with and without cache identical: {torch.equal(with_cache, without_cache)}")

    translator = pipeline("translation", model=str(args.output), trust_remote_code=True, max_new_tokens=8)
    for source, result in zip(SENTENCES[:2], translator(SENTENCES[:2], batch_size=2)):
        print(f"  {source!r} -> {result['translation_text']!r}  (untrained model)")


if __name__ == "__main__":
    main()
