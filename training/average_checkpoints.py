#!/usr/bin/env python
# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Average the weights of the last N `checkpoint-*` directories of a run into a model that loads with `from_pretrained`.

    python training/average_checkpoints.py outputs/mt --num_checkpoints 5 --output_dir outputs/mt-avg5
    python training/average_checkpoints.py --checkpoints outputs/mt/checkpoint-9000 outputs/mt/checkpoint-10000 \
        --output_dir outputs/mt-avg2

Checkpoint averaging (Vaswani et al., 2017; Junczys-Dowmunt et al., 2016) usually gains some BLEU over the last
checkpoint. Floating-point tensors are averaged (accumulated in float64); other tensors are taken from the newest
checkpoint. The newest checkpoint's config, generation config, tokenizer and custom-code files are copied along.
`--output_dir` must be new or empty: the model is saved into a folder inside it and its files renamed into place, so
a run that fails leaves no partial model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

import hf_unified_mt  # noqa: F401  (registers the package's architectures with the Auto classes)
from hf_unified_mt.deployment.inference import clean_generation_config
from hf_unified_mt.deployment.tokenizer_files import save_tokenizer
from hf_unified_mt.utils.files import contained_path, write_json


CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")


def find_checkpoints(run_dir: str, num_checkpoints: int) -> list[Path]:
    """The last `num_checkpoints` `checkpoint-<step>` directories of `run_dir`, oldest first."""
    found = []
    for child in Path(run_dir).iterdir():
        match = CHECKPOINT_PATTERN.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    if not found:
        raise SystemExit(f"{run_dir}: no checkpoint-* directories")
    found.sort()
    if len(found) < num_checkpoints:
        print(f"Only {len(found)} checkpoints in {run_dir}; averaging all of them.", file=sys.stderr)
    return [path for _, path in found[-num_checkpoints:]]


def load_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The saved tensors of a checkpoint: single or sharded safetensors, or (legacy) `pytorch_model.bin`."""
    if (checkpoint / SAFE_WEIGHTS_NAME).is_file():
        return load_file(checkpoint / SAFE_WEIGHTS_NAME)
    for index_name, loader in ((SAFE_WEIGHTS_INDEX_NAME, load_file), (WEIGHTS_INDEX_NAME, None)):
        index_path = checkpoint / index_name
        if index_path.is_file():
            shards = sorted(set(json.loads(index_path.read_text())["weight_map"].values()))
            weights = {}
            for shard in shards:
                try:
                    path = contained_path(checkpoint, shard, f"the weights shard in {index_path}")
                except ValueError as error:
                    raise SystemExit(f"average_checkpoints.py: error: {error}") from error
                if loader is not None:
                    weights.update(loader(path))
                else:
                    weights.update(torch.load(path, map_location="cpu", weights_only=True))
            return weights
    if (checkpoint / WEIGHTS_NAME).is_file():
        return torch.load(checkpoint / WEIGHTS_NAME, map_location="cpu", weights_only=True)
    raise SystemExit(f"{checkpoint}: no model weights found")


def average_weights(checkpoints: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the floating-point tensors of `checkpoints` (others from the last checkpoint)."""
    total: dict[str, torch.Tensor] = {}
    reference_keys = None
    newest = None
    for checkpoint in checkpoints:
        weights = load_weights(checkpoint)
        if reference_keys is None:
            reference_keys = set(weights)
        elif set(weights) != reference_keys:
            difference = sorted(set(weights) ^ reference_keys)[:5]
            raise SystemExit(f"{checkpoint} has different parameters from {checkpoints[0]} (e.g. {difference})")
        for name, tensor in weights.items():
            if tensor.is_floating_point():
                accumulated = tensor.to(torch.float64)
                total[name] = total[name] + accumulated if name in total else accumulated
        newest = weights
    averaged = {}
    for name, tensor in newest.items():
        averaged[name] = (total[name] / len(checkpoints)).to(tensor.dtype) if tensor.is_floating_point() else tensor
    return averaged


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", help="A training output_dir containing checkpoint-* directories.")
    parser.add_argument("--num_checkpoints", "-n", type=int, default=5, help="How many of the last checkpoints.")
    parser.add_argument("--checkpoints", nargs="+", default=None, help="Explicit checkpoint directories instead.")
    parser.add_argument("--output_dir", "-o", required=True, help="Where to write the averaged model.")
    parser.add_argument("--trust_remote_code", action="store_true", help="Allow custom code saved with the model.")
    args = parser.parse_args(argv)

    if args.checkpoints:
        checkpoints = [Path(path) for path in args.checkpoints]
    elif args.run_dir:
        checkpoints = find_checkpoints(args.run_dir, args.num_checkpoints)
    else:
        parser.error("give a run directory or --checkpoints")
    newest = checkpoints[-1]
    output_dir = Path(args.output_dir)
    # Never write over a model: not a checkpoint being averaged, not the run directory (its final model), not any
    # folder that already holds weights.
    sources = {path.resolve() for path in checkpoints} | ({Path(args.run_dir).resolve()} if args.run_dir else set())
    if output_dir.resolve() in sources or any(
        (output_dir / name).exists()
        for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
    ):
        raise SystemExit(
            f"average_checkpoints.py: error: --output_dir {output_dir} already holds a model (a checkpoint, the run "
            "directory, or an earlier output); choose a new folder"
        )
    if output_dir.exists() and not output_dir.is_dir():
        raise SystemExit(f"average_checkpoints.py: error: --output_dir {output_dir} is a file; choose a new folder")
    present = sorted(os.listdir(output_dir)) if output_dir.exists() else []
    if present:
        raise SystemExit(
            f"average_checkpoints.py: error: --output_dir {output_dir} is not empty ({', '.join(present[:5])}"
            f"{', ...' if len(present) > 5 else ''}); choose a new or empty folder"
        )
    print("Averaging:\n  " + "\n  ".join(str(path) for path in checkpoints))

    averaged = average_weights(checkpoints)
    model = AutoModelForSeq2SeqLM.from_pretrained(newest, trust_remote_code=args.trust_remote_code)
    result = model.load_state_dict(averaged, strict=False)
    if result.unexpected_keys:
        raise SystemExit(f"parameters not in the model: {result.unexpected_keys[:5]}")
    # Keys missing from the files are tied to saved ones (e.g. lm_head -> shared embeddings) or are not persisted
    # (e.g. sinusoidal positions); they already hold the right values in the model loaded from the newest checkpoint.
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = True
    clean_generation_config(model)

    output_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".averaging-", dir=output_dir))
    try:
        model.save_pretrained(staging)
        if (newest / "tokenizer.json").is_file() or (newest / "tokenizer_config.json").is_file():
            save_tokenizer(AutoTokenizer.from_pretrained(newest, trust_remote_code=args.trust_remote_code), staging)
        for code_file in newest.glob("*.py"):  # custom-code files of remote-code models
            if not (staging / code_file.name).exists():
                shutil.copy2(code_file, staging / code_file.name)
        write_json(
            staging / "averaged_checkpoints.json", {"checkpoints": [str(path) for path in checkpoints]}, indent=2
        )
        for path in sorted(staging.iterdir()):
            os.replace(path, output_dir / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"Wrote the average of {len(checkpoints)} checkpoints to {output_dir}")
    return output_dir


if __name__ == "__main__":
    main()
