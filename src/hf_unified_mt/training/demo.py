# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""A first run that needs no data and no network: build a small Unified Transformer and a tokenizer, save them as a
Hugging Face checkpoint, reload it through `AutoModelForSeq2SeqLM` and the translation pipeline, and check that
cached and uncached beam search agree.

    python -m hf_unified_mt.training.demo [--output outputs/demo] [--overwrite]

The model is untrained, so its "translations" are random words: this demonstrates the plumbing, not quality. The demo
writes a new or empty folder, or, with `--overwrite`, a folder it made itself (marked by `demo.json`, which lists its
files), and nothing else: never a trained checkpoint.
"""

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoModelForSeq2SeqLM, PreTrainedTokenizerFast, pipeline

from .. import UnifiedTransformerForConditionalGeneration, get_config
from ..utils.files import contained_path, write_json


# The file that marks a folder as the demo's and lists the files the demo wrote into it.
MARKER = "demo.json"
BUILT_BY = "hf_unified_mt.training.demo"
# The folder inside --output that a checkpoint is saved into before its files are renamed into place.
STAGING_PREFIX = ".demo-"

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


def read_marker(folder: Path) -> list[str] | None:
    """The files the demo wrote into `folder`, from its `MARKER`; None if `folder` has no valid marker."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(marker, dict) or marker.get("built_by") != BUILT_BY or not isinstance(marker.get("files"), list):
        return None
    for name in marker["files"]:
        contained_path(folder, name, f"a file name in {folder / MARKER}")
    return marker["files"]


def check_output(output: Path, overwrite: bool = False) -> list[str]:
    """Whether the demo may write `output`; returns the files of an earlier demo there that it will replace. It
    writes a new or empty folder, or, with `overwrite`, a folder it made (its `MARKER` lists the files it wrote, and
    nothing else may be there). A `ValueError` names what stands against it; nothing is changed here."""
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output {output} is a file, not a folder")
    present = sorted(path.name for path in output.iterdir()) if output.exists() else []
    if not present:
        return []
    written = read_marker(output)
    if written is None:
        raise ValueError(
            f"refusing to write the demo into {output}: it is not empty and not a folder the demo made (it has no "
            f"valid {MARKER}); choose a new or empty folder with --output"
        )
    if not overwrite:
        raise ValueError(f"{output} holds an earlier demo: pass --overwrite to replace it")
    own = {*written, MARKER}
    foreign = [name for name in present if name not in own and not name.startswith(STAGING_PREFIX)]
    if foreign:
        raise ValueError(
            f"refusing to replace the demo in {output}: besides the files the demo wrote it holds "
            f"{', '.join(foreign)}, which it did not write; move them away or choose another folder with --output"
        )
    return [name for name in present if name != MARKER]


def save_demo(model, tokenizer, output: Path, earlier: list[str]) -> list[str]:
    """Saves `model` and `tokenizer` into a folder inside `output`, then renames their files into `output`, replacing
    the `earlier` demo's, and writes the `MARKER` that lists them. Returns the names of the files saved."""
    output.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=output))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        saved = sorted(path.name for path in staging.iterdir())
        # While files are swapped the marker claims both sets, so that an interrupted run leaves a folder
        # `--overwrite` replaces.
        write_json(output / MARKER, {"built_by": BUILT_BY, "files": sorted({*earlier, *saved})}, indent=2)
        for name in sorted(set(earlier) - set(saved)):
            path = output / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        for name in saved:
            os.replace(staging / name, output / name)
        write_json(output / MARKER, {"built_by": BUILT_BY, "files": saved}, indent=2)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return saved


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=Path("outputs/demo"), help="A new or empty folder.")
    parser.add_argument("--overwrite", action="store_true", help="Replace the files of an earlier demo in --output.")
    args = parser.parse_args(argv)
    try:
        earlier = check_output(args.output, args.overwrite)
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    config = get_config("unified_transformer", "tiny", vocab_size=len(tokenizer))
    model = UnifiedTransformerForConditionalGeneration(config).eval()
    print(f"Built {type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} parameters")

    try:
        saved = save_demo(model, tokenizer, args.output, earlier)
    except OSError as error:
        parser.exit(2, f"{parser.prog}: error: cannot write the demo into {args.output}: {error.strerror or error}\n")
    print(f"Saved checkpoint to {args.output}: {saved}")

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
