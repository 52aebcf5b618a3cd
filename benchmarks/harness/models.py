# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The models the speed benchmarks measure: an architecture's model beside a MarianMT of the same width, depth and
parameter count (`build_pair`; `speed_vs_marian.py`, `inference_vs_ctranslate2.py`),
the README main job's model read from its training configuration, and fixed random source batches."""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForSeq2SeqLM, MarianMTModel

import hf_unified_mt
from harness import main_job_settings
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching


def switch_off_dropout(config) -> None:
    """Every dropout probability of the config (the papers' attention, activation, kernel and branch dropouts besides
    `dropout`) set to 0, as for the MarianMT: the comparison times the architectures' compute, not a recipe's random
    masks (which the FLOP counter does not count; see `--keep-dropout`)."""
    for name, value in config.to_dict().items():
        if name.endswith("dropout") and isinstance(value, float):
            setattr(config, name, 0.0)
    for spec in getattr(config, "encoder_branches", None) or []:
        if "dropout" in spec:
            spec["dropout"] = 0.0


def build_pair(arch: str, args, overrides: dict | None = None):
    """The architecture's model and a MarianMT of the same width, depth and parameter count (FFN width solved);
    `overrides` are config fields set on top of the preset (e.g. the main job's narrower shape)."""
    config = hf_unified_mt.get_config(arch, args.preset, vocab_size=args.vocab_size, **(overrides or {}))
    if not args.keep_dropout:
        switch_off_dropout(config)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config)
    marian_config = marian_config_matching(
        count_parameters(model),
        args.vocab_size,
        d_model=config.d_model,
        layers=config.encoder_layers,
        heads=config.encoder_attention_heads,
        dropout=0.1 if args.keep_dropout else 0.0,
    )
    marian = MarianMTModel(marian_config)
    return {arch: model.to(args.device), "marian": marian.to(args.device)}


def batch(args, size: int, vocab: int):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, vocab, (size, args.source_length), generator=generator)
    ids[:, -1] = 2  # </s>
    return ids.to(args.device), torch.ones_like(ids)


def main_job_model(args) -> tuple[str, str, str, dict, int]:
    """(name, architecture, preset, config overrides, vocabulary size) of the README's main job, read from its
    training config. With `args.main_job_d_model` set, its width and FFNs shrink to it (depth and heads
    kept)."""
    settings, overrides = main_job_settings()
    vocab_size = settings["tokenizer_vocab_size"]
    if args.main_job_d_model:
        width = args.main_job_d_model
        overrides.update(d_model=width, encoder_ffn_dim=2 * width, decoder_ffn_dim=2 * width)
        vocab_size = args.vocab_size
    return f"main job ({settings['arch']})", settings["arch"], settings["preset"], overrides, vocab_size


def subjects(args) -> list[dict]:
    """The models to measure: the main job's (unless `--no-main-job`), then `--preset` of each of `--archs`."""
    found = []
    if not args.no_main_job:
        name, arch, preset, overrides, vocab_size = main_job_model(args)
        found.append(dict(name=name, arch=arch, preset=preset, overrides=overrides, vocab_size=vocab_size))
    for arch in args.archs:
        found.append(dict(name=f"{arch} ({args.preset})", arch=arch, preset=args.preset, overrides={}, vocab_size=None))
    return found


def build_models(subject: dict, args) -> tuple[torch.nn.Module, MarianMTModel]:
    """The subject's model and the same-size MarianMT (`build_pair`), both in eval mode."""
    settings = argparse.Namespace(**{**vars(args), "preset": subject["preset"]})
    settings.vocab_size = subject["vocab_size"] or args.vocab_size
    pair = build_pair(subject["arch"], settings, overrides=subject["overrides"])
    return pair[subject["arch"]].eval(), pair["marian"].eval()


def source_batch(args, size: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` random sources of `--source-length` tokens ending in `</s>`, no padding. The ids stay below the last
    vocabulary entry, which the CTranslate2 conversion of a MarianMT drops."""
    return batch(args, size, vocab_size - 1)
