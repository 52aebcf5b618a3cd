#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Train every architecture of the package and a MarianMT Transformer of matched parameter count with the same
tokenizer, data, number of steps and schedule, then write one table: parameters, test BLEU / chrF (sacreBLEU,
beam search), training tokens/s and generation tokens/s — plus BLEU by source length (JSON, and a PNG when
matplotlib is installed).

    python benchmarks/compare_architectures.py --output_dir outputs/comparison --max_steps 600

Each model is trained by `training/train.py` in its own process (any extra train.py option after `--` is passed
to every run, e.g. `-- --learning_rate 1e-3 --bf16`). Finished runs (with a `results.json`) are reused, so an
interrupted comparison resumes where it stopped.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from harness import machine, write_result
from transformers import AutoModelForSeq2SeqLM

import hf_unified_mt
from hf_unified_mt.deployment.inference import translate
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching
from hf_unified_mt.training.data import load_parallel_data
from hf_unified_mt.training.tokenization import load_tokenizer, train_tokenizer_on_corpus


TRAIN_SCRIPT = Path(__file__).resolve().parent.parent / "training" / "train.py"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--archs", nargs="+", default=None, help="Architectures (model_type) to train; default: every registered one"
    )
    parser.add_argument("--preset", default="small", help="Preset used for every architecture (default: small)")
    parser.add_argument(
        "--reference_arch",
        default="unified_transformer",
        help="The Marian baseline matches this architecture's parameter count",
    )
    parser.add_argument("--marian_d_model", type=int, default=None, help="Default: the reference model's d_model")
    parser.add_argument("--marian_layers", type=int, default=3)
    parser.add_argument("--marian_heads", type=int, default=4)
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/comparison"))
    parser.add_argument("--tokenizer_vocab_size", type=int, default=8000)
    parser.add_argument("--max_steps", type=int, default=600)
    parser.add_argument("--max_tokens", type=int, default=4096)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--warmup_steps", type=int, default=200)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--max_test_samples", type=int, default=400)
    parser.add_argument(
        "--generation_sentences", type=int, default=200, help="Test sentences translated to measure generation speed"
    )
    parser.add_argument("--seed", type=int, default=42)
    args, extra = parser.parse_known_args(argv)
    args.extra_train_args = [a for a in extra if a != "--"]
    return args


def shared_tokenizer(args):
    """One subword tokenizer, trained once on the training split, used by every model."""
    path = args.output_dir / "tokenizer"
    if not (path / "tokenizer.json").exists():
        corpus = load_parallel_data()
        tokenizer = train_tokenizer_on_corpus(corpus["train"], vocab_size=args.tokenizer_vocab_size)
        tokenizer.save_pretrained(path)
    return path, load_tokenizer(str(path))


def training_tokens(tokenizer) -> int:
    """Non-padding source + target tokens in one epoch of the training split."""
    corpus = load_parallel_data()["train"]
    source = tokenizer(list(corpus["source"]))["input_ids"]
    target = tokenizer(list(corpus["target"]))["input_ids"]
    return sum(map(len, source)) + sum(map(len, target))


def marian_overrides(args, tokenizer) -> dict:
    """Marian with the reference architecture's parameter count (FFN width solved)."""
    reference = hf_unified_mt.get_config(args.reference_arch, args.preset, vocab_size=len(tokenizer))
    with torch.device("meta"):
        target = count_parameters(AutoModelForSeq2SeqLM.from_config(reference))
    config = marian_config_matching(
        target, len(tokenizer), args.marian_d_model or reference.d_model, args.marian_layers, args.marian_heads
    )
    keys = (
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
    )
    return {key: getattr(config, key) for key in keys}


def run_training(name, arch, preset, overrides, tokenizer_path, args) -> dict:
    output = args.output_dir / name
    if (output / "results.json").exists():
        print(f"[{name}] reusing {output / 'results.json'}")
        return json.loads((output / "results.json").read_text())
    command = [
        sys.executable,
        str(TRAIN_SCRIPT),
        "--arch",
        arch,
        "--preset",
        preset,
        "--tokenizer_name_or_path",
        str(tokenizer_path),
        "--output_dir",
        str(output),
        "--max_steps",
        str(args.max_steps),
        "--max_tokens",
        str(args.max_tokens),
        "--learning_rate",
        str(args.learning_rate),
        "--warmup_steps",
        str(args.warmup_steps),
        "--generation_num_beams",
        str(args.num_beams),
        "--max_test_samples",
        str(args.max_test_samples),
        # no validation decoding during training: train_runtime (and so training tokens/s) is training alone;
        # with a fixed number of steps the final checkpoint is the one scored on test
        "--eval_strategy",
        "no",
        "--save_steps",
        str(args.max_steps),
        "--seed",
        str(args.seed),
        "--num_sample_translations",
        "0",
        "--report_to",
        "none",
        "--overlong",
        "skip",  # identical for every model: same tokenizer, same limits
    ]
    if overrides:
        command += ["--config_overrides", json.dumps(overrides)]
    command += args.extra_train_args
    print(f"[{name}] {' '.join(command)}", flush=True)
    subprocess.run(command, check=True)
    return json.loads((output / "results.json").read_text())


def generation_speed(checkpoint: Path, tokenizer, sentences, num_beams: int) -> float:
    """Generated target tokens per second (beam search, batches of 32 similar-length sentences)."""
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint, trust_remote_code=True).eval()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    translate(model, tokenizer, sentences[:8], num_beams=num_beams)  # warm-up
    start = time.perf_counter()
    outputs = translate(model, tokenizer, sentences, num_beams=num_beams, batch_size=32)
    seconds = time.perf_counter() - start
    return sum(len(ids) for ids in tokenizer(outputs)["input_ids"]) / seconds


def plot_bleu_by_length(rows, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for row in rows:
        buckets = row["bleu_by_source_length"]
        axis.plot([b["bucket"] for b in buckets], [b["bleu"] for b in buckets], marker="o", label=row["name"])
    axis.set_xlabel("source length (words)")
    axis.set_ylabel("BLEU")
    axis.set_title("BLEU by source length (test)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def main(argv=None):
    args = parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_path, tokenizer = shared_tokenizer(args)
    archs = args.archs or list(hf_unified_mt.ARCHITECTURES)
    runs = [(arch, arch, args.preset, {}) for arch in archs]
    runs.append(("marian (matched)", "marian", "small", marian_overrides(args, tokenizer)))

    epoch_tokens = training_tokens(tokenizer)
    test_sources = list(load_parallel_data()["test"]["source"])[: args.generation_sentences]
    rows = []
    for name, arch, preset, overrides in runs:
        directory = name.split(" ")[0]
        results = run_training(directory, arch, preset, overrides, tokenizer_path, args)
        train = results["train"]
        test = results["test"]
        rows.append(
            dict(
                name=name,
                arch=arch,
                preset=preset,
                parameters=results["num_parameters"],
                bleu=test["bleu"],
                chrf=test["chrf"],
                bleu_signature=test.get("bleu_signature"),
                chrf_signature=test.get("chrf_signature"),
                steps=args.max_steps,
                train_tokens_per_second=train["epoch"] * epoch_tokens / train["train_runtime"],
                generation_tokens_per_second=generation_speed(
                    args.output_dir / directory, tokenizer, test_sources, args.num_beams
                ),
                bleu_by_source_length=test["bleu_by_source_length"],
            )
        )

    header = "| model | params | BLEU | chrF | train tok/s | gen tok/s |\n|---|---:|---:|---:|---:|---:|"
    lines = [header] + [
        f"| {r['name']} | {r['parameters'] / 1e6:.2f}M | {r['bleu']:.2f} | {r['chrf']:.2f} | "
        f"{r['train_tokens_per_second']:.0f} | {r['generation_tokens_per_second']:.1f} |"
        for r in rows
    ]
    table = "\n".join(lines)
    print(table)
    print(f"BLEU signature: {rows[0]['bleu_signature']}\nchrF signature: {rows[0]['chrf_signature']}")
    summary = dict(
        machine=machine(),
        settings={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        rows=rows,
        table=table,
    )
    write_result(args.output_dir / "comparison.json", summary, argv)
    (args.output_dir / "comparison.md").write_text(table + "\n")
    if plot_bleu_by_length(rows, args.output_dir / "bleu_by_length.png"):
        print(f"wrote {args.output_dir / 'bleu_by_length.png'}")
    print(f"wrote {args.output_dir / 'comparison.json'}")


if __name__ == "__main__":
    main()
