# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""The options of one training run (`training/train.py`, `hf_unified_mt.training.run`): what they are, how they are
read, and how they are checked before any work is done.

* `ModelArguments`, `DataArguments`, `MTTrainingArguments`: the options, as `HfArgumentParser` dataclasses. The last is
  `Seq2SeqTrainingArguments` with machine-translation defaults (label smoothing 0.1, inverse-square-root schedule with
  warmup, Adam betas (0.9, 0.98), beam-search evaluation, best checkpoint by BLEU) and the run's own options (a time
  budget, weight averaging, bf16 where the hardware computes it natively);
* `parse_arguments`: the command line, with a JSON/YAML option file as defaults (`train.py config.yaml --max_steps
  100`: the command line wins);
* `validate_arguments`: every option checked at once, one `UsageError` listing all that is wrong (`config_overrides`:
  `--config_overrides` as a dict, checked by building the config);
* `apply_cpu_bf16_defaults`: the defaults of bfloat16 training on a CPU (`native_bf16_available`: whether the hardware
  computes bfloat16).

`UsageError` is a problem the user can fix, found before any work; `train.py` prints it without a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import HfArgumentParser, MarianConfig, Seq2SeqTrainingArguments
from transformers.trainer_utils import IntervalStrategy

from hf_unified_mt.presets import MARIAN_COMMON, MARIAN_PRESETS, PRESETS, get_config
from hf_unified_mt.training.data import DEFAULT_CORPUS
from hf_unified_mt.utils.options import read_option_file


logger = logging.getLogger("train")  # the training run's logger (`run.setup_logging` sets its level)

DEFAULT_SAMPLE_COUNT = 3


# ---------------------------------------------------------------------------------------------------------------------
# The options
# ---------------------------------------------------------------------------------------------------------------------


class UsageError(ValueError):
    """A bad option, found before any work is done; `train.py` prints its message without a traceback."""


@dataclass
class ModelArguments:
    """Which model to train, and its tokenizer."""

    arch: str = field(
        default="unified_transformer",
        metadata={
            "help": "'marian' for MarianMTModel, or an architecture of hf_unified_mt (e.g. unified_transformer)."
        },
    )
    preset: str = field(default="small", metadata={"help": "Model size preset, e.g. tiny, small, base."})
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": 'JSON object of config values overriding the preset, e.g. \'{"d_model": 128, "dropout": 0.2}\'.'
        },
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Start from this saved model (fine-tuning) instead of a new one."}
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow custom code saved with the model."})
    tokenizer_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Use this saved tokenizer instead of training one (e.g. to share a vocabulary)."},
    )
    tokenizer_type: str = field(default="bpe", metadata={"help": "Subword model to train: bpe or unigram."})
    tokenizer_vocab_size: int = field(default=8000, metadata={"help": "Shared source+target vocabulary size."})
    tokenizer_min_frequency: int = field(default=2, metadata={"help": "BPE: minimum pair count for a merge."})
    tokenizer_max_train_pairs: int | None = field(
        default=1_000_000,
        metadata={
            "help": "Train the tokenizer on at most this many training pairs: a larger train split gives a random "
            "sample of this many, the same in every run (as SentencePiece's input_sentence_size; Marian samples "
            "2,000,000 lines, --sentencepiece-max-lines)."
        },
    )
    attn_implementation: str | None = field(
        default=None,
        metadata={
            "help": "Attention kernel while training: eager (matmuls and softmax: the faster one for short rows on a "
            "CPU, under --bf16 above all) or sdpa (PyTorch's fused kernel); default: eager under bf16 on a CPU, else "
            "the model's (sdpa). A runtime choice: the saved model loads with its default."
        },
    )

    def __post_init__(self):
        if self.tokenizer_type not in ("bpe", "unigram"):
            raise UsageError(f"--tokenizer_type must be bpe or unigram, not {self.tokenizer_type!r}")
        if self.attn_implementation not in (None, "eager", "sdpa"):
            raise UsageError(f"--attn_implementation must be eager or sdpa, not {self.attn_implementation!r}")


@dataclass
class DataArguments:
    """What to train and evaluate on, and the length limits."""

    corpus: str = field(
        default=DEFAULT_CORPUS, metadata={"help": "Corpus shipped with the package (if no files/dataset)."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": "Dataset on the Hugging Face Hub."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration, e.g. de-en."})
    train_file: str | None = field(default=None, metadata={"help": "Local .tsv/.csv/.json/.jsonl file (maybe .gz)."})
    validation_file: str | None = field(default=None, metadata={"help": "Local validation file."})
    test_file: str | None = field(default=None, metadata={"help": "Local test file."})
    source_field: str | None = field(default=None, metadata={"help": "Source column/key (corpus default: es)."})
    target_field: str | None = field(default=None, metadata={"help": "Target column/key (corpus default: en)."})
    encoding: str = field(default="utf-8", metadata={"help": "Text encoding of local files."})
    max_source_length: int = field(default=256, metadata={"help": "Longest source in tokens (</s> included)."})
    max_target_length: int = field(default=256, metadata={"help": "Longest target in tokens (</s> included)."})
    overlong: str = field(
        default="error",
        metadata={
            "help": "Pairs over the limits: 'error' stops with their locations, 'skip' leaves them out of training "
            "and validation (counted); test pairs are then translated truncated (counted), one line per pair."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation pairs."})
    max_test_samples: int | None = field(default=None, metadata={"help": "Use only the first N test pairs."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Token-based batching: at most this many padded source+target tokens per batch and device "
            "(replaces per_device_train_batch_size for training)."
        },
    )
    max_sentences: int | None = field(
        default=None, metadata={"help": "With --max_tokens: also cap sentences per batch."}
    )
    pad_to_multiple_of: int | None = field(
        default=None,
        metadata={"help": "Pad batches to a multiple of this many tokens (default: 8 under bf16 on a CPU, else none)."},
    )
    length_buckets: int | None = field(
        default=None,
        metadata={
            "help": "With --max_tokens: pad every training batch to one of N shapes (N length buckets chosen to "
            "minimise padding, a fixed number of rows per bucket), so that --torch_compile compiles the step at most "
            "N times (and CUDA graphs replay one graph per bucket); the padding overhead is logged."
        },
    )
    num_sample_translations: int = field(
        default=DEFAULT_SAMPLE_COUNT, metadata={"help": "Test sentences to translate and print at the end."}
    )
    sample_sentences: list[str] | None = field(
        default=None, metadata={"help": "Sentences to translate at the end instead of test sentences."}
    )

    def __post_init__(self):
        if self.overlong not in ("skip", "error"):
            raise UsageError(f"--overlong must be skip or error, not {self.overlong!r}")


@dataclass
class MTTrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` with machine-translation defaults; every option can still be set."""

    output_dir: str | None = field(default="outputs/mt", metadata={"help": "Where checkpoints and results go."})
    max_train_minutes: float | None = field(
        default=None,
        metadata={"help": "Stop training after this many minutes of wall time (then save, evaluate and test)."},
    )
    average_weights_fraction: float | None = field(
        default=None,
        metadata={
            "help": "Train with the uniform average of the weights after each update over the last FRACTION of "
            "training (of --max_train_minutes' clock or of max_steps, whichever is further) and end with it: the "
            "final checkpoint, evaluation and test use the averaged weights (checkpoint averaging, Vaswani et al. "
            "2017; torch.optim.swa_utils.AveragedModel)."
        },
    )
    do_train: bool = field(default=True, metadata={"help": "Train (pass --do_train False to only test a model)."})
    do_predict: bool = field(default=True, metadata={"help": "Score the test split at the end."})
    learning_rate: float = field(default=5e-4, metadata={"help": "Peak learning rate (after warmup)."})
    lr_scheduler_type: str = field(
        default="inverse_sqrt",
        metadata={
            "help": "Learning-rate schedule (transformers' names); under --max_train_minutes, linear and cosine decay "
            "over the budget's clock, to zero when it ends."
        },
    )
    warmup_steps: float = field(default=1000, metadata={"help": "Linear warmup steps (or a ratio if < 1)."})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (0.98 as in Vaswani et al.)."})
    label_smoothing_factor: float = field(default=0.1, metadata={"help": "Label smoothing epsilon."})
    per_device_train_batch_size: int = field(
        default=32, metadata={"help": "Sentences per batch (without --max_tokens)."}
    )
    per_device_eval_batch_size: int = field(default=32, metadata={"help": "Sentences per evaluation batch."})
    eval_strategy: str = field(default="steps", metadata={"help": "When to evaluate: no, steps, epoch."})
    eval_steps: float | None = field(default=1000, metadata={"help": "Evaluate every N steps."})
    save_steps: float = field(default=1000, metadata={"help": "Save a checkpoint every N steps."})
    save_total_limit: int | None = field(default=5, metadata={"help": "Checkpoints to keep (plus the best one)."})
    logging_steps: float = field(default=50, metadata={"help": "Log every N steps."})
    load_best_model_at_end: bool = field(default=True, metadata={"help": "Keep the best checkpoint by BLEU."})
    metric_for_best_model: str | None = field(
        default="bleu", metadata={"help": "Metric selecting the best checkpoint."}
    )
    greater_is_better: bool | None = field(default=True, metadata={"help": "Whether higher metric is better."})
    predict_with_generate: bool = field(default=True, metadata={"help": "Evaluate by generating translations."})
    generation_num_beams: int | None = field(default=4, metadata={"help": "Beam size for evaluation and test."})
    generation_no_repeat_ngram_size: int | None = field(
        default=None,
        metadata={
            "help": "Forbid translations to repeat any n-gram of this many tokens (generate()'s no_repeat_ngram_size), "
            "in evaluation and test and in the saved model's generation config; 0: no constraint."
        },
    )

    torch_compile_dynamic: bool | None = field(
        default=None,
        metadata={
            "help": "With --torch_compile: torch.compile's dynamic. False: one graph per batch shape (with "
            "--length_buckets, one per bucket); True: a graph for any shape (and one more when a batch breaks an "
            "equality of the first, such as equal source and target lengths). Default: False with --length_buckets, "
            "else torch's default (a static graph, then a dynamic one at the second batch shape)."
        },
    )

    bf16_if_native: bool = field(
        default=False,
        metadata={
            "help": "Train with bfloat16 autocast (as --bf16) where the hardware computes bfloat16 natively: a CUDA "
            "GPU that supports it, or a CPU with AVX512-BF16, AMX-BF16 or Arm BF16 instructions on which a quick "
            "matrix-product probe finds bfloat16 faster than float32; float32 elsewhere."
        },
    )

    def __post_init__(self):
        self.precision_choice = None  # what `bf16_if_native` chose and why, logged once logging is set up
        if self.bf16_if_native and not (self.bf16 or self.fp16):
            self.bf16, reason = native_bf16_available(self.use_cpu)
            self.precision_choice = f"--bf16_if_native: {reason}: training in {'bfloat16' if self.bf16 else 'float32'}"
        if self.bf16 and not self.use_cpu and not torch.accelerator.is_available():
            # transformers reads `--bf16` on a machine without an accelerator as a GPU request it cannot serve;
            # here it means bfloat16 autocast on the CPU, which is the only device there is
            self.use_cpu = True
        if str(self.eval_strategy) in ("no", str(IntervalStrategy.NO)) and self.load_best_model_at_end:
            logger.info("eval_strategy is 'no': best-checkpoint selection (load_best_model_at_end) is turned off")
            self.load_best_model_at_end = False
        if self.dataloader_pin_memory and (self.use_cpu or not torch.accelerator.is_available()):
            self.dataloader_pin_memory = False  # nothing to pin for: torch would warn on every dataloader
        if not self.predict_with_generate and self.metric_for_best_model in ("bleu", "chrf", "eval_bleu", "eval_chrf"):
            # without generation, evaluation yields only the loss: select checkpoints by it
            logger.info("predict_with_generate is False: checkpoints are selected by validation loss")
            self.metric_for_best_model, self.greater_is_better = "loss", False
        super().__post_init__()


def native_bf16_available(use_cpu: bool = False) -> tuple[bool, str]:
    """Whether training would compute bfloat16 in hardware, and gain by it, with the reason: on a CUDA GPU,
    `torch.cuda.is_bf16_supported()`; on a CPU (no accelerator, or `use_cpu`), the BF16 instructions
    `torch.cpu.get_capabilities()` reports, where a bfloat16 matrix product also runs faster than a float32 one
    (`cpu_bf16_speedup`): a CPU with AVX512-BF16 but no AMX can compute bfloat16 slower than float32."""
    if not use_cpu and torch.accelerator.is_available():
        native = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return native, f"the GPU {'supports' if native else 'does not support'} bfloat16"
    capabilities = torch.cpu.get_capabilities()
    if not any(capabilities.get(name, False) for name in ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16")):
        return False, "the CPU has no BF16 instructions"
    speedup = cpu_bf16_speedup()
    return speedup > 1, f"the CPU multiplies matrices {speedup:.2f}x as fast in bfloat16 as in float32"


def cpu_bf16_speedup(size: int = 1024, repeats: int = 5) -> float:
    """How many times as fast this CPU multiplies two `size` x `size` matrices in bfloat16 as in float32, on the
    threads torch uses ([`matmul_flops`] in each); a fraction of a second."""
    float32 = matmul_flops(torch.float32, size, repeats=repeats)
    return matmul_flops(torch.bfloat16, size, repeats=repeats) / float32


def matmul_flops(dtype: torch.dtype, size: int, device: str = "cpu", repeats: int = 5, warmups: int = 1) -> float:
    """FLOP/s of one `size` x `size` matrix product in `dtype` on `device`: the best of `repeats` timed products after
    `warmups` untimed ones (GPU work waited for), on operands drawn from a generator of its own (the global random
    state is the run's). The benchmarks read a machine's limit from it too."""
    generator = torch.Generator(device=device).manual_seed(0)
    left, right = (torch.randn(size, size, generator=generator, device=device).to(dtype) for _ in range(2))
    synchronize = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    for _ in range(warmups):
        torch.matmul(left, right)
    best = float("inf")
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        torch.matmul(left, right)
        synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


# ---------------------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None = None) -> tuple[ModelArguments, DataArguments, MTTrainingArguments]:
    """Parse the command line; a leading `config.{json,yaml}` (or `--config FILE`) supplies defaults."""
    parser = HfArgumentParser((ModelArguments, DataArguments, MTTrainingArguments))
    argv = list(sys.argv[1:] if argv is None else argv)
    config_path = None
    if argv and not argv[0].startswith("-") and argv[0].endswith((".json", ".yaml", ".yml")):
        config_path = argv.pop(0)
    for position, argument in enumerate(argv):
        if argument == "--config":
            config_path = argv[position + 1]
            del argv[position : position + 2]
            break
        if argument.startswith("--config="):
            config_path = argument.split("=", 1)[1]
            del argv[position]
            break
    if config_path is not None:
        values = read_option_file(config_path)
        known = {action.dest for action in parser._actions}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{config_path}: unknown option(s) {unknown}")
        if isinstance(values.get("config_overrides"), dict):
            values["config_overrides"] = json.dumps(values["config_overrides"])
        parser.set_defaults(**values)
    try:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    except UsageError:
        raise
    except ValueError as error:  # raised by the arguments' own checks (transformers' or ours)
        raise UsageError(str(error)) from error
    return model_args, data_args, training_args


# ---------------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------------


def validate_arguments(
    model_args: ModelArguments, data_args: DataArguments, training_args: MTTrainingArguments
) -> None:
    """Check every option before any work (data loading, tokenizer training, model building): raise one
    `UsageError` listing all that is wrong."""
    problems: list[str] = []
    if model_args.model_name_or_path is None:
        architectures = ["marian", *sorted(PRESETS)]
        if model_args.arch not in architectures:
            problems.append(f"unknown --arch {model_args.arch!r}; choose from {', '.join(architectures)}")
        else:
            presets = sorted(MARIAN_PRESETS if model_args.arch == "marian" else PRESETS[model_args.arch])
            if model_args.preset not in presets:
                problems.append(
                    f"unknown --preset {model_args.preset!r} for --arch {model_args.arch}; choose from "
                    f"{', '.join(presets)}"
                )
            else:
                try:
                    _check_config_overrides(model_args)
                except ValueError as error:
                    problems.append(str(error))
    _at_least(problems, "tokenizer_vocab_size", model_args.tokenizer_vocab_size, 1)
    _at_least(problems, "tokenizer_max_train_pairs", model_args.tokenizer_max_train_pairs, 1)
    _at_least(problems, "max_source_length", data_args.max_source_length, 2, " (tokens, </s> included)")
    _at_least(problems, "max_target_length", data_args.max_target_length, 2, " (tokens, </s> included)")
    for name in (
        "max_train_samples",
        "max_eval_samples",
        "max_test_samples",
        "max_tokens",
        "max_sentences",
        "pad_to_multiple_of",
        "length_buckets",
        "preprocessing_num_workers",
    ):
        _at_least(problems, name, getattr(data_args, name), 1)
    _at_least(problems, "num_sample_translations", data_args.num_sample_translations, 0)
    if data_args.length_buckets is not None and data_args.max_tokens is None:
        problems.append("--length_buckets needs --max_tokens (length buckets pad token-based batches)")
    if training_args.torch_compile_dynamic is not None and not training_args.torch_compile:
        problems.append("--torch_compile_dynamic needs --torch_compile True")
    for name in (
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "generation_num_beams",
        "generation_max_length",
    ):
        _at_least(problems, name, getattr(training_args, name), 1)
    _at_least(problems, "generation_no_repeat_ngram_size", training_args.generation_no_repeat_ngram_size, 0)
    if training_args.do_train:
        if training_args.max_steps == 0 or training_args.max_steps < -1:
            problems.append(
                "--max_steps must be positive (or -1 to train --num_train_epochs epochs), not "
                f"{training_args.max_steps}"
            )
        elif training_args.max_steps == -1 and not training_args.num_train_epochs > 0:
            problems.append(f"--num_train_epochs must be positive, not {training_args.num_train_epochs}")
        if not training_args.learning_rate > 0:
            problems.append(f"--learning_rate must be positive, not {training_args.learning_rate}")
        if training_args.warmup_steps < 0:
            problems.append(f"--warmup_steps must not be negative, not {training_args.warmup_steps}")
        if training_args.max_train_minutes is not None and not training_args.max_train_minutes > 0:
            problems.append(f"--max_train_minutes must be positive, not {training_args.max_train_minutes}")
        fraction = training_args.average_weights_fraction
        if fraction is not None and not 0 < fraction <= 1:
            problems.append(f"--average_weights_fraction must be in (0, 1], not {fraction}")
    for option in ("train_file", "validation_file", "test_file"):
        path = getattr(data_args, option)
        if path is not None and not os.path.isfile(path):
            problems.append(f"--{option} {path}: no such file")
    for option in ("model_name_or_path", "tokenizer_name_or_path"):
        path = getattr(model_args, option)
        if path is not None and os.path.exists(path) and not os.path.isdir(path):
            problems.append(f"--{option} {path} is a file, not a saved model directory")
    output_dir = training_args.output_dir
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        problems.append(f"--output_dir {output_dir} is a file, not a folder")
    else:
        existing = os.path.abspath(output_dir)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.access(existing, os.W_OK):
            problems.append(f"--output_dir {output_dir}: cannot create or write it ({existing} is not writable)")
    if problems:
        raise UsageError(
            "\n  ".join(problems)
            if len(problems) == 1
            else f"{len(problems)} problems with the options:\n  " + "\n  ".join(problems)
        )


def _at_least(problems: list[str], name: str, value, least, note: str = "") -> None:
    if value is not None and value < least:
        problems.append(f"--{name} must be at least {least}{note}, not {value}")


def config_overrides(model_args: ModelArguments) -> dict[str, Any]:
    """`--config_overrides` as a dict of config values (empty without it); a `ValueError` if it is not a JSON object."""
    if not model_args.config_overrides:
        return {}
    overrides = model_args.config_overrides
    if isinstance(overrides, str):
        try:
            overrides = json.loads(overrides)
        except json.JSONDecodeError as error:
            raise ValueError(f"--config_overrides is not valid JSON: {error}") from error
    if not isinstance(overrides, dict):
        raise ValueError("--config_overrides must be a JSON object")
    return overrides


def _check_config_overrides(model_args: ModelArguments) -> None:
    """Misspelled or invalid `--config_overrides` are refused, for MarianMT (whose config accepts any keyword) as for
    the package's architectures (whose configs check their fields)."""
    overrides = config_overrides(model_args)
    if model_args.arch == "marian":
        known = set(MarianConfig().to_dict()) | set(MarianConfig.attribute_map)
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"--config_overrides: unknown MarianConfig option(s) {', '.join(unknown)} (misspelled?)")
    try:  # build the config: its own checks name the field
        if model_args.arch == "marian":
            MarianConfig(**{**MARIAN_COMMON, **MARIAN_PRESETS[model_args.preset], **overrides})
        else:
            get_config(model_args.arch, model_args.preset, **overrides)
    except (TypeError, ValueError, StrictDataclassError) as error:
        # one line, as every option error: huggingface_hub's type errors span several
        raise ValueError(f"--config_overrides: {' '.join(str(error).split())}") from error


# ---------------------------------------------------------------------------------------------------------------------
# Defaults that depend on the machine
# ---------------------------------------------------------------------------------------------------------------------


def apply_cpu_bf16_defaults(
    model_args: ModelArguments, data_args: DataArguments, training_args: MTTrainingArguments
) -> None:
    """bfloat16 training on a CPU, unless the options say otherwise, runs eager attention on lengths padded to a
    multiple of 8: PyTorch's fused CPU attention backward is several times slower in bfloat16 than in float32, and the
    bfloat16 matmuls are slow on unaligned shapes (the step by operator:
    `benchmarks/results/training_step_profile.json`). Also logs what `--bf16_if_native` chose."""
    if training_args.precision_choice:
        logger.info(training_args.precision_choice)
    if not training_args.bf16 or training_args.device.type != "cpu":
        return
    chosen = []
    if model_args.attn_implementation is None:
        model_args.attn_implementation = "eager"
        chosen.append("--attn_implementation eager")
    if data_args.pad_to_multiple_of is None:
        data_args.pad_to_multiple_of = 8
        chosen.append("--pad_to_multiple_of 8")
    if chosen:
        logger.info("bfloat16 on the CPU: %s (set them to choose otherwise)", " ".join(chosen))
