#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""One GPU, one call: training throughput and decoding throughput of Prime (`unified_transformer`, `--preset`) against
a MarianMT of the same width, depth and parameter count, side by side, with the device's bf16 matrix-product peak
measured in the same run.

Training runs through the README's own path, `training/train.py` (`Seq2SeqTrainer` with token-budget batches,
`--bf16`), on the embedded Spanish-English corpus with a BPE tokenizer trained on it: `--warmup-steps` updates, then
`--steps` timed updates. A forward pre-hook records each update's batch shape and its real (non-padding) source and
target tokens; a synchronising callback times the updates. Model FLOPs per update come from
`torch.utils.flop_counter` (forward + backward) on a handful of batch shapes, fitted exactly by the polynomial that
matrix products give (terms B*S, B*T, B*S^2, B*T^2, B*S*T; held-out shapes check the fit) and summed over the
updates' real shapes, padding included: achieved FLOP/s is what the device computed, MFU its share of the measured peak
(and of the data-sheet peak given by `--spec-peak`).

Decoding: PyTorch `generate()` in bf16, beam 4 (`--decode-beams`), batches of `--decode-batch` test verses, exactly
`--new-tokens` new tokens per sentence (min = max; the models are those just trained, so the outputs are not
translations and their length must be forced), interleaved rounds. Where the ONNX Runtime CUDA provider or
CTranslate2's CUDA build is usable it is reported; where it is not, the reason is recorded.

    python benchmarks/gpu_training_and_decoding.py --output $OUT/gpu_training_and_decoding.json
    python benchmarks/gpu_training_and_decoding.py --preset tiny --steps 4 --warmup-steps 2 --device cpu  # smoke test
"""

import argparse
import ctypes
import json
import os
import platform
import shlex
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from bench_timing import interleaved_times, synchronize
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, TrainerCallback

import hf_unified_mt
from hf_unified_mt.training.baselines import count_parameters, marian_config_matching


HERE = Path(__file__).resolve().parent


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, default=16384, help="padded tokens per update (train.py)")
    parser.add_argument("--steps", type=int, default=300, help="timed updates per model")
    parser.add_argument(
        "--warmup-steps", type=int, default=120, help="untimed updates: the first epoch sees every batch shape anew"
    )
    parser.add_argument("--decode-batch", type=int, default=64)
    parser.add_argument("--decode-beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--decode-batches", type=int, default=4, help="batches per timed decoding call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--spec-peak", type=float, default=989e12, help="data-sheet dense bf16 FLOP/s (H100 SXM)")
    parser.add_argument(
        "--phase",
        choices=("prime", "marian", "report", "table"),
        required=True,
        help="train one model; decode and write the JSON; or print the docs' two tables from the JSON",
    )
    parser.add_argument("--marian-attention", default=None, help="MarianMT's attention implementation (eager, sdpa)")
    parser.add_argument(
        "--train-options",
        default="",
        help="more train.py options for both models, one string (e.g. '--torch_compile True')",
    )
    parser.add_argument("--skip-decoding", action="store_true", help="report training only (no decoding rounds)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/gpu_bench"))
    parser.add_argument("--output", type=Path, default=HERE / "results" / "gpu_training_and_decoding.json")
    return parser.parse_args(argv)


def matmul_peak(device: str, dtype=torch.bfloat16, size: int = 8192, repeats: int = 10) -> float:
    """Achieved FLOP/s of one `size`^3 matrix product (mean of `repeats` after 3 warm-ups)."""
    if device == "cpu":
        size = 1024
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def marian_overrides(preset: str, vocab_size: int) -> dict:
    """`--config_overrides` that make train.py's MarianMT the same width, depth, heads and parameter count as the
    preset's Prime model (FFN width solved)."""
    config = hf_unified_mt.get_config("unified_transformer", preset, vocab_size=vocab_size)
    prime = count_parameters(AutoModelForSeq2SeqLM.from_config(config))
    matching = marian_config_matching(
        prime, vocab_size, d_model=config.d_model, layers=config.encoder_layers, heads=config.encoder_attention_heads
    )
    return {
        "d_model": config.d_model,
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "encoder_attention_heads": config.encoder_attention_heads,
        "decoder_attention_heads": config.decoder_attention_heads,
        # a multiple of 8, as tensor-core GEMMs want (the parameter count moves by at most 0.1%)
        "encoder_ffn_dim": 8 * round(matching.encoder_ffn_dim / 8),
        "decoder_ffn_dim": 8 * round(matching.decoder_ffn_dim / 8),
    }


class UpdateRecorder(TrainerCallback):
    """Per update: wall-clock seconds (GPU-synchronised) and the batch shapes and real tokens that the model's
    forward saw (a forward pre-hook; with gradient accumulation 1, one forward per update)."""

    def __init__(self, device: str):
        self.device = device
        self.times, self.batches, self._pending = [], [], []
        self.model = None

    def hook(self, module, args, kwargs):
        if module.training:
            ids, mask, labels = kwargs["input_ids"], kwargs.get("attention_mask"), kwargs.get("labels")
            if labels is not None:
                target_ids, target_tokens = labels, int((labels != -100).sum())
            else:  # MarianMT: the Trainer's label smoother took the labels; its decoder inputs are the labels shifted
                target_ids = kwargs["decoder_input_ids"]
                target_tokens = int((target_ids != module.config.pad_token_id).sum())
            self._pending.append(
                dict(
                    batch=int(ids.shape[0]),
                    source=int(ids.shape[1]),
                    target=int(target_ids.shape[1]),
                    source_tokens=int(mask.sum()) if mask is not None else int(ids.numel()),
                    target_tokens=target_tokens,
                )
            )

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.model = model
        model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize(self.device)
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize(self.device)
        self.times.append(time.perf_counter() - self._start)
        self.batches.append(self._pending)
        self._pending = []


def train_one(arch: str, args, tokenizer_dir: Path | None, overrides: dict | None) -> tuple[dict, UpdateRecorder]:
    from hf_unified_mt.training import run  # what training/train.py runs

    recorder = UpdateRecorder(args.device)
    output_dir = args.work_dir / arch
    argv = [
        "--arch",
        arch,
        "--preset",
        args.preset,
        "--output_dir",
        str(output_dir),
        "--max_steps",
        str(args.warmup_steps + args.steps),
        "--max_tokens",
        str(args.max_tokens),
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--load_best_model_at_end",
        "False",
        "--do_predict",
        "False",
        "--predict_with_generate",
        "False",
        "--num_sample_translations",
        "0",
        "--logging_steps",
        "50",
        "--report_to",
        "none",
        "--seed",
        "1",
        "--overlong",
        "skip",
        "--dataloader_num_workers",
        "2",
    ]
    if args.device.startswith("cuda"):
        argv += ["--bf16", "True"]
    else:
        argv += ["--use_cpu", "True"]
    if tokenizer_dir is not None:
        argv += ["--tokenizer_name_or_path", str(tokenizer_dir)]
    else:
        argv += ["--tokenizer_vocab_size", str(args.vocab_size)]
    if overrides:
        argv += ["--config_overrides", json.dumps(overrides)]
    argv += shlex.split(args.train_options)
    results = run.main(argv, callbacks=[recorder])
    return results, recorder


def flop_polynomial(model, device: str, vocab_size: int) -> tuple[np.ndarray, float]:
    """Coefficients of FLOPs(B, S, T) = c . [B*S, B*T, B*S^2, B*T^2, B*S*T] for one forward + backward under bf16
    autocast (matrix products are exactly such polynomials), fitted on 7 shapes, with the largest relative error on
    3 held-out shapes."""

    def terms(b, s, t):
        return np.array([b * s, b * t, b * s * s, b * t * t, b * s * t], dtype=np.float64)

    def count(b, s, t):
        ids = torch.randint(4, vocab_size, (b, s), device=device)
        labels = torch.randint(4, vocab_size, (b, t), device=device)
        counter = FlopCounterMode(display=False)
        with counter, torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
            loss.backward()
        model.zero_grad(set_to_none=True)
        return float(counter.get_total_flops())

    fit_shapes = [(8, 16, 16), (8, 48, 16), (8, 16, 48), (8, 48, 48), (4, 32, 64), (16, 64, 32), (8, 96, 80)]
    check_shapes = [(32, 40, 44), (12, 120, 100), (64, 24, 30)]
    was_training = model.training
    model.train()
    x = np.stack([terms(*shape) for shape in fit_shapes])
    y = np.array([count(*shape) for shape in fit_shapes])
    coefficients, *_ = np.linalg.lstsq(x, y, rcond=None)
    errors = [abs(terms(*shape) @ coefficients / count(*shape) - 1) for shape in check_shapes]
    model.train(was_training)
    return coefficients, max(errors)


def training_summary(name, model, recorder, args, peak, vocab_size) -> dict:
    """Tokens/s, FLOP/s and MFU over the timed updates (those after the warm-up)."""
    coefficients, fit_error = flop_polynomial(model, args.device, vocab_size)
    timed = slice(args.warmup_steps, None)
    seconds = sum(recorder.times[timed])
    batches = [batch for step in recorder.batches[timed] for batch in step]
    flops = sum(
        float(
            np.array(
                [
                    b["batch"] * b["source"],
                    b["batch"] * b["target"],
                    b["batch"] * b["source"] ** 2,
                    b["batch"] * b["target"] ** 2,
                    b["batch"] * b["source"] * b["target"],
                ],
                dtype=np.float64,
            )
            @ coefficients
        )
        for b in batches
    )
    real = sum(b["source_tokens"] + b["target_tokens"] for b in batches)
    padded = sum(b["batch"] * (b["source"] + b["target"]) for b in batches)
    target = sum(b["target_tokens"] for b in batches)
    return {
        "model": name,
        "parameters": count_parameters(model),
        "timed_updates": len(recorder.times[timed]),
        "seconds": seconds,
        "seconds_per_update_median": statistics.median(recorder.times[timed]),
        "warmup_seconds_per_update_median": statistics.median(recorder.times[: args.warmup_steps]),
        "tokens_per_second": real / seconds,
        "target_tokens_per_second": target / seconds,
        "padding_share": 1 - real / padded,
        "tflops_per_second": flops / seconds / 1e12,
        "mfu_measured_peak": flops / seconds / peak,
        "mfu_spec_peak": flops / seconds / args.spec_peak,
        "flop_fit_max_relative_error": fit_error,
    }


def decoding(models: dict, tokenizer, args) -> dict:
    """Sentences/s and new tokens/s of `generate()` in bf16 at the given batch and beam, forced length."""
    from hf_unified_mt.training.data import load_parallel_data

    sources = load_parallel_data()["test"]["source"][: args.decode_batch * args.decode_batches]
    batches = [
        tokenizer(sources[i : i + args.decode_batch], return_tensors="pt", padding=True).to(args.device)
        for i in range(0, len(sources), args.decode_batch)
    ]
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    calls = {}
    for name, model in models.items():
        model = model.to(dtype).eval()

        def call(model=model):
            with torch.inference_mode():
                for batch in batches:
                    model.generate(
                        **batch,
                        num_beams=args.decode_beams,
                        min_new_tokens=args.new_tokens,
                        max_new_tokens=args.new_tokens,
                        do_sample=False,
                        early_stopping=False,
                    )

        calls[name] = call
    times = interleaved_times(calls, args.repeats, args.device)
    new_tokens = len(sources) * args.new_tokens
    return {
        name: {
            "seconds": statistics.median(values),
            "rounds": values,
            "sentences_per_second": len(sources) / statistics.median(values),
            "new_tokens_per_second": new_tokens / statistics.median(values),
        }
        for name, values in times.items()
    }


def other_runtimes() -> dict:
    """Whether the ONNX Runtime CUDA provider and CTranslate2's CUDA build can run here, and why not."""
    found = {}
    try:
        import onnxruntime

        providers = onnxruntime.get_available_providers()
        found["onnxruntime"] = {"version": onnxruntime.__version__, "providers": providers}
        if "CUDAExecutionProvider" not in providers:
            found["onnxruntime"]["why_not"] = "this onnxruntime build has no CUDAExecutionProvider"
    except ImportError as error:
        found["onnxruntime"] = {"why_not": f"not installed ({error})"}
    cublas = {}
    for soname in ("libcublas.so.12", "libcublas.so.13", "libcublas.so"):
        try:
            ctypes.CDLL(soname)
            cublas[soname] = True
        except OSError:
            cublas[soname] = False
    try:
        import ctranslate2

        found["ctranslate2"] = {"version": ctranslate2.__version__, "cuda_devices": ctranslate2.get_cuda_device_count()}
    except ImportError as error:
        found["ctranslate2"] = {"why_not": f"not installed ({error})"}
    found["ctranslate2"]["loadable_cublas"] = cublas
    if not cublas["libcublas.so.12"]:
        found["ctranslate2"]["why_not"] = (
            "CTranslate2's PyPI wheels load CUDA 12's cuBLAS (libcublas.so.12) at run time; this machine has none"
        )
    return found


def train_phase(args, name: str) -> None:
    """Trains one model (`prime` first: it trains the tokenizer both share) and writes its summary beside it."""
    peak = matmul_peak(args.device)
    print(f"bf16 matrix-product peak {peak / 1e12:.1f} TFLOP/s", flush=True)
    tokenizer_dir = args.work_dir / "unified_transformer"  # train.py saves the tokenizer it trained with the model
    if name == "prime":
        results, recorder = train_one("unified_transformer", args, None, None)
    else:
        overrides = marian_overrides(args.preset, len(AutoTokenizer.from_pretrained(tokenizer_dir)))
        if args.marian_attention:
            overrides["_attn_implementation"] = args.marian_attention
        results, recorder = train_one("marian", args, tokenizer_dir, overrides)
    summary = training_summary(name, recorder.model, recorder, args, peak, recorder.model.config.vocab_size)
    summary["train_loss"] = results.get("train", {}).get("train_loss")
    summary["bf16_matmul_peak_tflops"] = peak / 1e12
    summary["attention"] = recorder.model.config._attn_implementation
    (args.work_dir / f"train_{name}.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1), flush=True)


def report_phase(args) -> None:
    """Decoding throughput of the trained models, and the whole result."""
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor()
    training = {}
    for name in ("prime", "marian"):
        path = args.work_dir / f"train_{name}.json"
        training[name] = json.loads(path.read_text()) if path.exists() else {"failed": "see the log"}
    if "tokens_per_second" in training["prime"] and "tokens_per_second" in training["marian"]:
        training["prime_over_marian_tokens_per_second"] = (
            training["prime"]["tokens_per_second"] / training["marian"]["tokens_per_second"]
        )
    tokenizer = AutoTokenizer.from_pretrained(args.work_dir / "unified_transformer")
    models = {
        name: AutoModelForSeq2SeqLM.from_pretrained(args.work_dir / folder).to(args.device)
        for name, folder in (("prime", "unified_transformer"), ("marian", "marian"))
        if (args.work_dir / folder / "model.safetensors").exists()
    }
    decode = {} if args.skip_decoding else decoding(models, tokenizer, args)
    if len(decode) == 2:
        decode["prime_over_marian"] = (
            decode["prime"]["new_tokens_per_second"] / decode["marian"]["new_tokens_per_second"]
        )
    print(json.dumps(decode, indent=1), flush=True)
    peak = matmul_peak(args.device)
    result = {
        "device": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": __import__("transformers").__version__,
        "preset": args.preset,
        "settings": {key: str(value) for key, value in vars(args).items()},
        "bf16_matmul_peak_tflops": peak / 1e12,
        "spec_peak_tflops": args.spec_peak / 1e12,
        "training": training,
        "decoding": {
            "batch": args.decode_batch,
            "beams": args.decode_beams,
            "new_tokens": args.new_tokens,
            "dtype": "bfloat16" if args.device.startswith("cuda") else "float32",
            **decode,
        },
        "other_runtimes": other_runtimes(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["other_runtimes"], indent=1))
    print(f"wrote {args.output}")


def labelled_rows(result: dict, section: str):
    """(label, row) of Prime and the MarianMT in one section of the result, in the tables' order."""
    labels = {"prime": f"Prime `{result['preset']}`", "marian": "MarianMT, same size"}
    return [(label, result[section][name]) for name, label in labels.items()]


def training_table(result: dict) -> str:
    """The markdown table of docs/benchmarks.md, from the JSON."""
    training = result["training"]
    peak, spec = result["bf16_matmul_peak_tflops"], result["spec_peak_tflops"]
    lines = [
        f"Training, bf16, `Seq2SeqTrainer` (train.py), {result['device']}, {training['prime']['timed_updates']} "
        f"updates after {result['settings']['warmup_steps']} of warm-up, "
        f"`--max_tokens {result['settings']['max_tokens']}`; "
        f"measured bf16 GEMM peak {peak:.0f} TFLOP/s (data sheet {spec:.0f}):",
        "",
        "| model | parameters | s/update | tokens/s | achieved TFLOP/s | MFU (measured peak) | MFU (data sheet) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in labelled_rows(result, "training"):
        lines.append(
            f"| {label} | {row['parameters'] / 1e6:.1f}M | {row['seconds_per_update_median']:.3f} | "
            f"{row['tokens_per_second']:,.0f} | {row['tflops_per_second']:.1f} | {row['mfu_measured_peak']:.1%} | "
            f"{row['mfu_spec_peak']:.1%} |"
        )
    lines += [
        "",
        f"Prime / MarianMT tokens per second: **{training['prime_over_marian_tokens_per_second']:.2f}x**.",
    ]
    return "\n".join(lines) + "\n"


def decoding_table(result: dict) -> str:
    """The markdown table of docs/deployment.md, from the JSON."""
    decoding = result["decoding"]
    lines = [
        f"Decoding, PyTorch `generate()`, {decoding['dtype']}, {result['device']}, batch {decoding['batch']}, beam "
        f"{decoding['beams']}, exactly {decoding['new_tokens']} new tokens per sentence, median of "
        f"{len(decoding['prime']['rounds'])} interleaved rounds:",
        "",
        "| model | sentences/s | new tokens/s |",
        "|---|---:|---:|",
    ]
    for label, row in labelled_rows(result, "decoding"):
        lines.append(f"| {label} | {row['sentences_per_second']:,.1f} | {row['new_tokens_per_second']:,.0f} |")
    lines += ["", f"Prime / MarianMT: **{decoding['prime_over_marian']:.2f}x**."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.phase == "table":
        result = json.loads(args.output.read_text())
        print(training_table(result) + "\n" + decoding_table(result), end="")
        return
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.phase == "report":
        report_phase(args)
    else:
        train_phase(args, args.phase)


if __name__ == "__main__":
    main()
