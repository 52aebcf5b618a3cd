# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""One training run (the library behind `training/train.py`): a translation model trained with `Seq2SeqTrainer`, any
architecture of `hf_unified_mt` or `MarianMTModel`. `main(argv, callbacks)` runs it in-process (the connection search
and the ablation study call it for each candidate); `cli()` is the command line.

Every `Seq2SeqTrainingArguments` option works on the command line, with defaults that machine-translation
practitioners expect (label smoothing 0.1, inverse-square-root schedule with warmup, Adam betas (0.9, 0.98), beam
search evaluation with sacreBLEU BLEU/chrF, best checkpoint by BLEU). Options can also come from a JSON/YAML file
(`train.py config.yaml --max_steps 100`: the command line wins).

    python training/train.py --arch marian --preset small --output_dir outputs/marian
    accelerate launch --config_file training/accelerate_configs/multi_gpu_ddp.yaml training/train.py --max_tokens 4096

Steps: load and validate the data (the embedded Bible corpus by default), train a shared subword tokenizer (or load
one), tokenize and apply the length limits, build the model, train (or resume), save model + tokenizer + generation
config to `output_dir`, score the test split (BLEU and chrF with sacreBLEU signatures, BLEU by source length) into
`test_results.json` (hypotheses in `test_translations.txt`), translate a few sentences, and write everything to
`results.json`.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import datasets
import safetensors
import safetensors.torch
import torch
import transformers
from huggingface_hub.errors import StrictDataclassError
from torch.optim.swa_utils import AveragedModel
from tqdm.auto import tqdm
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    MarianConfig,
    MarianMTModel,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    set_seed,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState, ProgressCallback, TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy, get_last_checkpoint

import hf_unified_mt  # noqa: F401  (registers the package's architectures with the Auto classes)
from hf_unified_mt.deployment.inference import clean_generation_config, make_generation_config, one_line, translate
from hf_unified_mt.presets import MARIAN_COMMON, MARIAN_PRESETS, PRESETS
from hf_unified_mt.training.batching import ExampleTooLongError, TokenBatchSeq2SeqTrainer
from hf_unified_mt.training.callbacks import AutoShuffleProjectionCallback
from hf_unified_mt.training.checkpoints import last_complete_checkpoint
from hf_unified_mt.training.data import (
    DEFAULT_CORPUS,
    DataValidationError,
    handle_overlong,
    load_parallel_data,
    tokenize_corpus,
)
from hf_unified_mt.training.metrics import (
    bleu_by_source_length,
    build_compute_metrics,
    compute_translation_scores,
    decode_predictions,
    format_scores,
)
from hf_unified_mt.training.tokenization import load_tokenizer, train_tokenizer_on_corpus
from hf_unified_mt.utils.files import write_bytes, write_json, write_text
from hf_unified_mt.utils.options import read_option_file


logger = logging.getLogger("train")

DEFAULT_SAMPLE_COUNT = 3


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
            "GPU that supports it, or a CPU with AVX512-BF16, AMX-BF16 or Arm BF16 instructions; float32 elsewhere."
        },
    )

    def __post_init__(self):
        if self.bf16_if_native and not (self.bf16 or self.fp16):
            self.bf16 = native_bf16_available(self.use_cpu)
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


# ---------------------------------------------------------------------------------------------------------------------
# Arguments
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


def native_bf16_available(use_cpu: bool = False) -> bool:
    """Whether training would compute bfloat16 in hardware: on a CUDA GPU, `torch.cuda.is_bf16_supported()`; on a
    CPU (no accelerator, or `use_cpu`), the BF16 instructions `torch.cpu.get_capabilities()` reports."""
    if not use_cpu and torch.accelerator.is_available():
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    capabilities = torch.cpu.get_capabilities()
    return any(capabilities.get(name, False) for name in ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16"))


def apply_cpu_bf16_defaults(
    model_args: ModelArguments, data_args: DataArguments, training_args: MTTrainingArguments
) -> None:
    """bfloat16 training on a CPU, unless the options say otherwise, runs eager attention on lengths padded to a
    multiple of 8: PyTorch's fused CPU attention backward is several times slower in bfloat16 than in float32, and the
    bfloat16 matmuls are slow on unaligned shapes (`benchmarks/training_efficiency.py --profile`)."""
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


def _at_least(problems: list[str], name: str, value, least, note: str = "") -> None:
    if value is not None and value < least:
        problems.append(f"--{name} must be at least {least}{note}, not {value}")


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


def setup_logging(training_args: MTTrainingArguments) -> None:
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    if training_args.should_log:
        transformers.utils.logging.set_verbosity_info()  # "passive" log_level then means info on the main process
    log_level = training_args.get_process_log_level()
    for name in ("train", "hf_unified_mt"):
        logging.getLogger(name).setLevel(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    if training_args.disable_tqdm:  # also the bars of dataset preparation and weight loading
        transformers.utils.logging.disable_progress_bar()
        datasets.disable_progress_bars()


# ---------------------------------------------------------------------------------------------------------------------
# Model and tokenizer
# ---------------------------------------------------------------------------------------------------------------------


def get_tokenizer(model_args: ModelArguments, training_args: MTTrainingArguments, train_split, checkpoint: str | None):
    """Load the tokenizer to use, or train one on the training split (local main process first, others load it)."""
    for path in (model_args.tokenizer_name_or_path, model_args.model_name_or_path, checkpoint):
        if path is not None and os.path.isfile(os.path.join(path, "tokenizer.json")):
            logger.info("Loading the tokenizer from %s", path)
            return load_tokenizer(path)
    if model_args.tokenizer_name_or_path is not None:
        return load_tokenizer(model_args.tokenizer_name_or_path)
    if train_split is None:
        raise ValueError("No tokenizer to load and no training data to train one: pass --tokenizer_name_or_path.")
    with training_args.main_process_first(local=True, desc="training the tokenizer"):
        if training_args.local_process_index == 0:
            sample = model_args.tokenizer_max_train_pairs
            logger.info(
                "Training a shared %s tokenizer (vocabulary %d) on %s training pairs",
                model_args.tokenizer_type,
                model_args.tokenizer_vocab_size,
                f"a random sample of {sample:,} of the {len(train_split):,} (--tokenizer_max_train_pairs)"
                if sample is not None and len(train_split) > sample
                else f"the {len(train_split):,}",
            )
            started = time.perf_counter()
            tokenizer = train_tokenizer_on_corpus(
                train_split,
                vocab_size=model_args.tokenizer_vocab_size,
                tokenizer_type=model_args.tokenizer_type,
                min_frequency=model_args.tokenizer_min_frequency,
                max_pairs=sample,
                cache=True,
            )
            logger.info("Tokenizer ready in %.1f s", time.perf_counter() - started)
            os.makedirs(training_args.output_dir, exist_ok=True)
            tokenizer.save_pretrained(training_args.output_dir)
        else:
            tokenizer = load_tokenizer(training_args.output_dir)
    return tokenizer


def _config_overrides(model_args: ModelArguments) -> dict[str, Any]:
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
    overrides = _config_overrides(model_args)
    if model_args.arch == "marian":
        known = set(MarianConfig().to_dict()) | set(MarianConfig.attribute_map)
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"--config_overrides: unknown MarianConfig option(s) {', '.join(unknown)} (misspelled?)")
    from hf_unified_mt import get_config

    try:  # build the config: its own checks name the field
        if model_args.arch == "marian":
            MarianConfig(**{**MARIAN_COMMON, **MARIAN_PRESETS[model_args.preset], **overrides})
        else:
            get_config(model_args.arch, model_args.preset, **overrides)
    except (TypeError, ValueError, StrictDataclassError) as error:
        # one line, as every option error: huggingface_hub's type errors span several
        raise ValueError(f"--config_overrides: {' '.join(str(error).split())}") from error


def build_model(model_args: ModelArguments, data_args: DataArguments, tokenizer):
    """A new model of `--arch`/`--preset` sized for the tokenizer, or the model at `--model_name_or_path`."""
    if model_args.model_name_or_path is not None:
        return AutoModelForSeq2SeqLM.from_pretrained(
            model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code
        )
    token_ids = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.bos_token_id,
    }
    overrides = _config_overrides(model_args)
    if model_args.arch == "marian":
        if model_args.preset not in MARIAN_PRESETS:
            raise ValueError(f"Unknown Marian preset {model_args.preset!r}; choose from {sorted(MARIAN_PRESETS)}")
        longest = max(data_args.max_source_length, data_args.max_target_length + 1)
        values = {
            **MARIAN_COMMON,
            **MARIAN_PRESETS[model_args.preset],
            **token_ids,
            "forced_eos_token_id": tokenizer.eos_token_id,
            "max_position_embeddings": max(512, longest),
            **overrides,
        }
        return MarianMTModel(MarianConfig(**values))
    try:
        from hf_unified_mt import get_config
    except ImportError as error:
        raise ValueError(
            f"--arch {model_args.arch!r} needs hf_unified_mt.get_config, which is not available ({error}); "
            "use --arch marian for the MarianMT baseline."
        ) from error
    config = get_config(model_args.arch, model_args.preset, **{**token_ids, **overrides})
    return AutoModelForSeq2SeqLM.from_config(config)


def apply_model_length_limit(model, data_args: DataArguments) -> None:
    """Lower the length limits to what the model's position embeddings allow (a source or target of n tokens uses
    positions 0..n-1), so that over-long pairs are reported and handled by --overlong instead of crashing."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is None:
        return
    for name in ("max_source_length", "max_target_length"):
        value = getattr(data_args, name)
        if value > limit:
            logger.warning(
                "--%s %d exceeds the model's max_position_embeddings (%d); using %d", name, value, limit, limit
            )
            setattr(data_args, name, limit)


# ---------------------------------------------------------------------------------------------------------------------
# Training helpers
# ---------------------------------------------------------------------------------------------------------------------


def move_label_smoothing_into_model(model, training_args: MTTrainingArguments) -> None:
    """Models of this package smooth their own cross-entropy (`config.label_smoothing`) and may add terms of their own
    to the loss (MUTE's AutoShuffle penalty, MPT's sum over passes). The Trainer's label smoother would take the labels
    away from them and lose those terms, so `--label_smoothing_factor` goes into the model config instead. Models
    without that option (MarianMT) keep the Trainer's label smoother."""
    if "label_smoothing" in model.config.to_dict() and training_args.label_smoothing_factor:
        model.config.label_smoothing = training_args.label_smoothing_factor
        training_args.label_smoothing_factor = 0.0


def _resolve_checkpoint(training_args: MTTrainingArguments) -> str | None:
    """`--resume_from_checkpoint` as a path: `last`/`true`/`auto` mean the newest complete checkpoint in
    `output_dir` (one that a killed run left half-written is skipped)."""
    value = training_args.resume_from_checkpoint
    if value is None or str(value).lower() in ("false", "no", "none", ""):
        if training_args.do_train and os.path.isdir(training_args.output_dir):
            existing = get_last_checkpoint(training_args.output_dir)
            if existing is not None:
                logger.warning(
                    "%s already has checkpoints (%s); training starts from scratch and will overwrite them. Pass "
                    "--resume_from_checkpoint last to continue instead.",
                    training_args.output_dir,
                    existing,
                )
        return None
    if str(value).lower() in ("last", "true", "auto", "latest"):
        last = last_complete_checkpoint(training_args.output_dir)
        if last is None:
            logger.warning("No checkpoint in %s to resume from; starting from scratch.", training_args.output_dir)
        return last
    if not os.path.isdir(value):
        raise UsageError(f"--resume_from_checkpoint {value}: no such directory")
    return value


def _limit(dataset, count: int | None):
    return dataset if count is None else dataset.select(range(min(count, len(dataset))))


class TimeBudgetCallback(TrainerCallback, ExportableState):
    """Ends training once `minutes` of wall time have been spent training, with a final checkpoint and evaluation so
    that best-checkpoint selection sees the last weights (a fixed compute budget, e.g. on a CPU).

    The seconds used are saved with every checkpoint (`trainer_state.json`, under `stateful_callbacks`), and a run
    resumed from one goes on from there: it trains only what is left of the budget, and the budget schedules and the
    weight-averaging window, which read this clock, continue where they stopped."""

    def __init__(self, minutes: float):
        self.seconds = 60.0 * minutes
        self.start = None
        self.seconds_before = 0.0  # used by the run (or runs) before a resume

    def state(self) -> dict:
        return {"args": {"minutes": self.seconds / 60}, "attributes": {"seconds_used": self.elapsed()}}

    def on_train_begin(self, args, state, control, **kwargs):
        self.seconds_before = 0.0
        if state.global_step > 0:
            used = seconds_used(state)
            if used is None:
                logger.warning(
                    "Resumed at step %d from a checkpoint that records no time used: the %.1f-minute budget counts "
                    "from here",
                    state.global_step,
                    self.seconds / 60,
                )
            else:
                self.seconds_before = min(used, self.seconds)
        # transformers updates this entry at each checkpoint: a checkpoint saved without it needs it in place
        state.stateful_callbacks[type(self).__name__] = self.state()
        self.start = time.monotonic()
        logger.info(
            "Time budget: training stops after %.1f minutes, or at max_steps=%d if that comes first",
            self.seconds / 60,
            state.max_steps,
        )
        if self.seconds_before:
            logger.info(
                "Resumed at step %d with %.1f of the %.1f minutes used",
                state.global_step,
                self.seconds_before / 60,
                self.seconds / 60,
            )

    def elapsed(self) -> float:
        """Seconds of the budget used so far, by this run and those before a resume (at most the budget)."""
        running = time.monotonic() - self.start if self.start is not None else 0.0
        return min(self.seconds_before + running, self.seconds)

    def fraction_used(self) -> float:
        """The share of the budget used so far, in [0, 1] (what a budget schedule decays over)."""
        return self.elapsed() / self.seconds

    def on_step_end(self, args, state, control, **kwargs):
        if self.elapsed() >= self.seconds:
            logger.info(
                "Time budget of %.1f minutes reached at step %d: stopping", self.seconds / 60, state.global_step
            )
            control.should_training_stop = True
            control.should_save = True
            if args.eval_strategy != IntervalStrategy.NO:
                control.should_evaluate = True
        return control


def seconds_used(state: TrainerState) -> float | None:
    """The seconds of a time budget used when `state` (a Trainer state, e.g. loaded from a checkpoint's
    `trainer_state.json`) was saved, as [`TimeBudgetCallback`] records them; None if it records none."""
    saved = (state.stateful_callbacks or {}).get(TimeBudgetCallback.__name__)
    try:
        return float(saved["attributes"]["seconds_used"])
    except (KeyError, TypeError, ValueError):
        return None


def check_budget_left(checkpoint: str, training_args: MTTrainingArguments) -> None:
    """Refuses to resume from `checkpoint` under a `--max_train_minutes` that it has already used up."""
    try:
        used = seconds_used(TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME)))
    except (OSError, TypeError, ValueError):
        return  # no readable Trainer state: the Trainer says what is wrong with the checkpoint
    if used is not None and used >= 60.0 * training_args.max_train_minutes:
        raise UsageError(
            f"--resume_from_checkpoint {checkpoint}: the run had trained {used / 60:.2f} minutes when it saved this "
            f"checkpoint, the whole --max_train_minutes {training_args.max_train_minutes:g}; nothing is left to "
            "train (pass a larger --max_train_minutes to train on)"
        )


class WeightAveragingCallback(TrainerCallback):
    """Averages the weights uniformly over the last `fraction` of training, one sample after each update, and puts
    the average into the model when training stops, before the final checkpoint and evaluation (Vaswani et al. 2017
    average their last checkpoints; here every update of the window counts). Progress is the time budget's clock
    (which a resumed run continues) or `global_step / max_steps`, whichever is further (so the window always ends at
    the update that stops training). The average (a copy of the weights, `torch.optim.swa_utils.AveragedModel`) is
    saved with each checkpoint inside the window (`AVERAGE_NAME`), and a run resumed from that checkpoint
    (`resume_from`) goes on averaging into it."""

    def __init__(self, fraction: float, time_budget: TimeBudgetCallback | None = None, resume_from: str | None = None):
        self.fraction = fraction
        self.time_budget = time_budget
        self.resume_from = resume_from
        self.averaged = None
        self.first_step = None

    def progress(self, state) -> float:
        steps = state.global_step / state.max_steps if state.max_steps > 0 else 0.0
        return max(steps, self.time_budget.fraction_used()) if self.time_budget is not None else steps

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.averaged = None
        if state.global_step == 0:
            return
        path = os.path.join(self.resume_from, AVERAGE_NAME) if self.resume_from is not None else None
        if path is not None and os.path.isfile(path):
            self.averaged, self.first_step = load_weight_average(path, model)
            if self.averaged is not None:
                logger.info(
                    "Resumed at step %d with the weight average of steps %d-%d",
                    state.global_step,
                    self.first_step,
                    state.global_step,
                )
        elif self.progress(state) > 1 - self.fraction:
            logger.warning(
                "Resumed at step %d, inside the weight-averaging window, from a checkpoint without its average (%s): "
                "the average starts anew from here",
                state.global_step,
                AVERAGE_NAME,
            )

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.progress(state) >= 1 - self.fraction:
            if self.averaged is None:
                self.averaged = AveragedModel(model, use_buffers=False)  # a copy; its first update takes the weights
                self.first_step = state.global_step
            self.averaged.update_parameters(model)
        # transformers' flow callback, always first, has decided by now whether this update ends training
        if control.should_training_stop and self.averaged is not None:
            with torch.no_grad():
                for mine, average in zip(model.parameters(), self.averaged.module.parameters(), strict=True):
                    mine.copy_(average)
            logger.info(
                "Weights averaged over %d updates (steps %d-%d)",
                int(self.averaged.n_averaged),
                self.first_step,
                state.global_step,
            )
            self.averaged = None
        return control

    def on_save(self, args, state, control, **kwargs):
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if self.averaged is not None and args.should_save and os.path.isdir(folder):
            save_weight_average(os.path.join(folder, AVERAGE_NAME), self.averaged, self.first_step)


AVERAGE_NAME = "weight_average.safetensors"


def save_weight_average(path: str, averaged: AveragedModel, first_step: int) -> None:
    """Writes the running average of [`WeightAveragingCallback`] (its weights, how many updates it holds and the
    first of them) to `path`, a safetensors file."""
    tensors = {name: parameter.detach().cpu().contiguous() for name, parameter in averaged.module.named_parameters()}
    metadata = {"n_averaged": str(int(averaged.n_averaged)), "first_step": str(first_step)}
    write_bytes(path, safetensors.torch.save(tensors, metadata=metadata))


def load_weight_average(path: str, model: torch.nn.Module) -> tuple[AveragedModel, int] | tuple[None, None]:
    """The running average that `save_weight_average` wrote to `path`, for `model`, and its first step; (None, None),
    with a warning, if the file does not hold an average of this model."""
    try:
        with safetensors.safe_open(path, framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        n_averaged, first_step = int(metadata["n_averaged"]), int(metadata["first_step"])
    except (OSError, KeyError, ValueError, safetensors.SafetensorError) as error:
        logger.warning("%s cannot be read (%s): the weight average starts anew from here", path, error)
        return None, None
    averaged = AveragedModel(model, use_buffers=False)
    parameters = dict(averaged.module.named_parameters())
    if set(tensors) != set(parameters) or any(tensors[name].shape != p.shape for name, p in parameters.items()):
        logger.warning("%s is not a weight average of this model: the average starts anew from here", path)
        return None, None
    with torch.no_grad():
        for name, parameter in parameters.items():
            parameter.copy_(tensors[name])
        averaged.n_averaged.fill_(n_averaged)
    return averaged, first_step


class TimeBudgetProgressCallback(ProgressCallback):
    """The training progress bar measured against a [`TimeBudgetCallback`]: seconds of the budget used out of the
    budget, with the optimizer step as a postfix, instead of steps out of `max_steps`, which the budget ends long
    before (a `max_steps` of 100000 under a 10-minute budget would show 0/100000 and a many-hour ETA). Evaluation
    bars and logs are those of transformers' `ProgressCallback`."""

    def __init__(self, budget: TimeBudgetCallback):
        super().__init__()
        self.budget = budget

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar = tqdm(
                total=round(self.budget.seconds),
                initial=self.budget.elapsed(),  # a resumed run's budget was partly used before
                desc=f"Training ({self.budget.seconds / 60:g}-minute budget)",
                unit="s",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total}s [{elapsed}<{remaining}{postfix}]",
                dynamic_ncols=True,
            )
        self.current_step = 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar.set_postfix_str(f"step {state.global_step}", refresh=False)
            self.training_bar.update(self.budget.elapsed() - self.training_bar.n)
        self.current_step = state.global_step


# ---------------------------------------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class PreparedData:
    """The tokenized splits within the length limits, the raw texts of the evaluation splits (for scoring and samples)
    and, per split, the number of pairs left out as over-long (`skipped`) or, for the test split, kept truncated
    (`truncated`: its translations stay one per test pair)."""

    splits: dict[str, datasets.Dataset]
    texts: dict[str, dict[str, list[str]]]
    skipped: dict[str, int]
    truncated: dict[str, int] = field(default_factory=dict)


def load_splits(data_args: DataArguments, training_args: MTTrainingArguments):
    """The corpus and the raw splits this run needs (each limited by --max_*_samples)."""
    with training_args.main_process_first(desc="loading the data"):
        corpus = load_parallel_data(
            corpus=data_args.corpus,
            train_file=data_args.train_file,
            validation_file=data_args.validation_file,
            test_file=data_args.test_file,
            dataset_name=data_args.dataset_name,
            dataset_config_name=data_args.dataset_config_name,
            source_field=data_args.source_field,
            target_field=data_args.target_field,
            encoding=data_args.encoding,
        )
    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_test_samples,
    }
    needed = {
        "train": training_args.do_train,
        "validation": training_args.do_train or training_args.do_eval,
        "test": training_args.do_predict or training_args.do_eval,
    }
    raw = {split: _limit(corpus[split], limits[split]) for split in corpus.splits if needed[split]}
    logger.info("Data: %s", {split: len(dataset) for split, dataset in raw.items()})
    if training_args.do_train and "train" not in raw:
        raise ValueError("Training needs a train split (--train_file, --dataset_name or the default corpus).")
    return corpus, raw


def prepare_model(model_args: ModelArguments, data_args: DataArguments, training_args: MTTrainingArguments, tokenizer):
    """The model with its generation config and label smoothing; lowers the length limits to what it can encode."""
    set_seed(training_args.seed)
    model = build_model(model_args, data_args, tokenizer)
    if model_args.attn_implementation is not None:
        model.set_attn_implementation(model_args.attn_implementation)
    model.generation_config = make_generation_config(
        model.generation_config,
        num_beams=training_args.generation_num_beams,
        no_repeat_ngram_size=training_args.generation_no_repeat_ngram_size,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        decoder_start_token_id=getattr(model.config, "decoder_start_token_id", None),
    )
    # The run passes its output lengths to each generation (evaluation: generation_max_length; test:
    # max_target_length); a max_new_tokens saved with --model_name_or_path would beat a passed max_length in MarianMT.
    model.generation_config.max_new_tokens = None
    move_label_smoothing_into_model(model, training_args)
    num_parameters = sum(p.numel() for p in model.parameters())
    logger.info("Model: %s (%s), %.2fM parameters", type(model).__name__, model_args.arch, num_parameters / 1e6)
    apply_model_length_limit(model, data_args)
    if training_args.generation_max_length is None:
        training_args.generation_max_length = data_args.max_target_length + 1  # + decoder start token
    return model


def prepare_data(corpus, raw: dict, tokenizer, data_args: DataArguments, training_args: MTTrainingArguments):
    """Tokenizes the raw splits and applies the length limits (--overlong decides what happens to longer pairs)."""
    with training_args.main_process_first(desc="tokenizing"):
        # The texts of the evaluation splits are kept for scoring and samples; the train split keeps only its token
        # ids (no copy of its texts in the cache), and the collator builds the attention masks as it pads.
        tokenized = tokenize_corpus(
            datasets.DatasetDict(raw),
            tokenizer,
            num_proc=data_args.preprocessing_num_workers,
            keep_columns={split: ("line",) if split == "train" else ("line", "source", "target") for split in raw},
            attention_mask=False,
        )
    data = PreparedData(splits={}, texts={}, skipped={})
    for split, dataset in tokenized.items():
        # Test translations must stay one per test pair: with --overlong skip, over-long test pairs are translated
        # truncated (and counted) instead of being left out.
        policy = "truncate" if (split == "test" and data_args.overlong == "skip") else data_args.overlong
        dataset, report = handle_overlong(
            dataset, split, data_args.max_source_length, data_args.max_target_length, policy, corpus
        )
        if policy == "truncate":
            data.skipped[split], data.truncated[split] = 0, report.overlong
        else:
            data.skipped[split] = report.overlong
        if "source" in dataset.column_names:
            data.texts[split] = {"source": dataset["source"], "target": dataset["target"]}
        text_columns = [c for c in ("line", "source", "target") if c in dataset.column_names]
        data.splits[split] = dataset.remove_columns(text_columns)
    return data


def build_trainer(
    model,
    tokenizer,
    data: PreparedData,
    data_args: DataArguments,
    training_args: MTTrainingArguments,
    callbacks: list | None,
    checkpoint: str | None = None,
) -> TokenBatchSeq2SeqTrainer:
    """The Trainer: token-budget batches, validation BLEU/chrF, the AutoShuffle projection, the time budget and the
    weight averaging (which a run resumed from `checkpoint` continues)."""
    has_validation = "validation" in data.splits
    if not has_validation and training_args.eval_strategy != IntervalStrategy.NO:
        logger.warning("No validation split: evaluation during training and best-checkpoint selection are off.")
        training_args.eval_strategy = IntervalStrategy.NO
        training_args.load_best_model_at_end = False
    time_budget = TimeBudgetCallback(training_args.max_train_minutes) if training_args.max_train_minutes else None
    trainer = TokenBatchSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=data.splits.get("train") if training_args.do_train else None,
        eval_dataset=data.splits.get("validation"),
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(
            tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=data_args.pad_to_multiple_of
        ),
        compute_metrics=(
            build_compute_metrics(tokenizer, references=data.texts["validation"]["target"])
            if has_validation and training_args.predict_with_generate
            else None
        ),
        callbacks=[
            AutoShuffleProjectionCallback(),
            *(callbacks or []),
            *([time_budget] if time_budget else []),
            # after the time budget, which decides at the same step whether training stops
            *(
                [WeightAveragingCallback(training_args.average_weights_fraction, time_budget, checkpoint)]
                if training_args.average_weights_fraction
                else []
            ),
        ],
        max_tokens=data_args.max_tokens,
        max_sentences=data_args.max_sentences,
        length_buckets=data_args.length_buckets,
        compile_dynamic=(
            training_args.torch_compile_dynamic
            if training_args.torch_compile_dynamic is not None or data_args.length_buckets is None
            else False
        ),
        time_budget=time_budget,
    )
    if time_budget is not None and trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(TimeBudgetProgressCallback(time_budget))  # the bar counts the budget, not max_steps
    return trainer


def describe_run(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: MTTrainingArguments,
    model,
    tokenizer,
    data: PreparedData,
) -> dict[str, Any]:
    """The head of `results.json`: everything needed to reproduce the run (model cards read it)."""
    data_arguments = dataclasses.asdict(data_args)
    if data_args.dataset_name or data_args.train_file or data_args.validation_file or data_args.test_file:
        data_arguments["corpus"] = None  # not used: the data came from these files or this dataset
    return {
        "arch": model_args.arch,
        "preset": model_args.preset,
        "training_arguments": {
            **dataclasses.asdict(model_args),
            **data_arguments,
            **training_args.to_dict(),
            # the smoothing the run used, whether the model's own loss or the Trainer's label smoother applied it
            "label_smoothing_factor": float(getattr(model.config, "label_smoothing", 0.0))
            or training_args.label_smoothing_factor,
        },
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "skipped_overlong": data.skipped,
        "truncated_overlong": data.truncated,
    }


def set_saved_generation_config(model, data_args: DataArguments, training_args: MTTrainingArguments) -> None:
    """The generation config saved with the trained model: the run's token ids, beam size and n-gram constraint, and
    its longest target as the default length (`max_new_tokens`). A length a caller passes wins over it (the package's
    models let a passed `max_length` win over a saved `max_new_tokens`, which `generate()` would not)."""
    clean_generation_config(
        model, num_beams=training_args.generation_num_beams, max_new_tokens=data_args.max_target_length
    )


def train_and_save(
    trainer, checkpoint: str | None, data: PreparedData, data_args: DataArguments, training_args: MTTrainingArguments
) -> dict[str, Any]:
    """Trains (or resumes), saves model + tokenizer + generation config to `output_dir`, returns the train metrics
    and the best checkpoint."""
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    if hasattr(trainer.model.config, "use_cache"):
        trainer.model.config.use_cache = True  # the Trainer turned it off for training
    set_saved_generation_config(trainer.model, data_args, training_args)
    trainer.save_model()
    metrics = {**train_result.metrics, "train_samples": len(data.splits["train"])}
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    results = {"train": metrics}
    if trainer.compile_report is not None and trainer.compile_report.statistics is not None:
        results["torch_compile"] = trainer.compile_report.statistics
    if trainer.state.best_metric is not None:
        results["best_checkpoint"] = trainer.state.best_model_checkpoint
        results[f"best_eval_{training_args.metric_for_best_model}"] = trainer.state.best_metric
    return results


def float32_forward(trainer) -> None:
    """Takes the mixed-precision autocast that `--bf16` / `--fp16` training wrapped around the model's forward away
    (in place), so that what follows translates with the weights as saved, in float32: test scores then measure the
    checkpoint a user loads, whatever precision trained it."""
    if trainer.args.bf16 or trainer.args.fp16:
        trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)


def score_test(
    trainer, tokenizer, data: PreparedData, data_args: DataArguments, training_args: MTTrainingArguments
) -> dict[str, Any] | None:
    """Translates the test split with beam search and scores it against the raw references (BLEU, chrF, BLEU by
    source length); writes `test_results.json` and `test_translations.txt`. None on other processes."""
    clean_generation_config(trainer.model, max_new_tokens=data_args.max_target_length)
    float32_forward(trainer)
    if not training_args.predict_with_generate:
        # Test BLEU/chrF are scores of translations: `--predict_with_generate False` only spares the generation during
        # evaluation in training (which then selects checkpoints by loss).
        logger.info("Generating translations for the test split (--predict_with_generate False affects evaluation)")
        trainer.args.predict_with_generate = True
    trainer.compute_metrics = None  # scored below against the raw test references
    prediction = trainer.predict(
        data.splits["test"],
        metric_key_prefix="test",
        max_new_tokens=data_args.max_target_length,
        num_beams=training_args.generation_num_beams,
    )
    if not trainer.is_world_process_zero():
        return None
    hypotheses = [one_line(text) for text in decode_predictions(prediction.predictions, tokenizer)]
    sources, references = data.texts["test"]["source"], data.texts["test"]["target"]
    if len(hypotheses) != len(references):
        raise RuntimeError(f"{len(hypotheses)} test translations for {len(references)} test pairs")
    scores = compute_translation_scores(hypotheses, references)
    test = {
        **scores,
        "num_beams": training_args.generation_num_beams,
        "skipped_overlong": data.skipped.get("test", 0),
        "truncated_overlong": data.truncated.get("test", 0),
        **{key: value for key, value in prediction.metrics.items() if key.startswith("test_")},
        "bleu_by_source_length": bleu_by_source_length(sources, hypotheses, references),
    }
    truncated = data.truncated.get("test", 0)
    print(
        f"\nTest set ({len(hypotheses)} pairs, beam {training_args.generation_num_beams}"
        + (f"; {truncated} over-long sources translated truncated" if truncated else "")
        + "):"
    )
    print(format_scores(scores))
    os.makedirs(training_args.output_dir, exist_ok=True)
    write_json(os.path.join(training_args.output_dir, "test_results.json"), test, indent=2)
    write_text(os.path.join(training_args.output_dir, "test_translations.txt"), "\n".join(hypotheses) + "\n")
    return test


def sample_translations(
    trainer, tokenizer, data: PreparedData, data_args: DataArguments, training_args: MTTrainingArguments
) -> list[dict[str, str]] | None:
    """Translates and prints `--sample_sentences`, or the first test (else validation) sources with their
    references; None when there is nothing to translate."""
    samples, references = data_args.sample_sentences, None
    if not samples:
        split = "test" if "test" in data.texts else "validation" if "validation" in data.texts else None
        if split is None or data_args.num_sample_translations <= 0:
            return None
        samples = data.texts[split]["source"][: data_args.num_sample_translations]
        references = data.texts[split]["target"][: data_args.num_sample_translations]
        if not samples:
            return None
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    clean_generation_config(unwrapped, max_new_tokens=data_args.max_target_length)
    outputs = translate(
        unwrapped,
        tokenizer,
        samples,
        num_beams=training_args.generation_num_beams,
        max_source_length=data_args.max_source_length,
    )
    entries = []
    print("\nSample translations:")
    for index, (source, output) in enumerate(zip(samples, outputs)):
        print(f"  SRC: {source}\n  OUT: {output}")
        entry = {"source": source, "translation": output}
        if references is not None:
            print(f"  REF: {references[index]}")
            entry["reference"] = references[index]
        entries.append(entry)
        print()
    return entries


def write_results(results: dict[str, Any], output_dir: str) -> None:
    path = os.path.join(output_dir, "results.json")
    write_json(path, results, indent=2, ensure_ascii=False, default=str)
    logger.info("Wrote %s", path)


def end_processes(trainer) -> None:
    """The end of a run: the DDP wrapper is released, then the process group (Accelerate's `end_training`; a run in one
    process has no group, and only the references go).

    A Gloo worker thread frees the tensors of a collective after the collective has completed, and that needs the GIL.
    Left to interpreter exit, the group can meet such a thread there ("terminate called without an active exception":
    the process aborts). Destroyed while the DDP wrapper still holds it, the group's last reference goes later with the
    wrapper's reducer, whose destructor joins the worker threads with the GIL held: a deadlock when one still needs
    it. So the wrapper goes first (as the Trainer does when it re-wraps the model for a new batch size), and the group
    is destroyed from Python, which lets its threads finish."""
    trainer.model_wrapped = trainer.model
    trainer.accelerator.free_memory()  # Accelerate's references to the prepared model, optimizer and data loaders
    gc.collect()  # the wrapper's reference cycles, while the group is still registered
    trainer.accelerator.end_training()


# ---------------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None, callbacks: list | None = None) -> dict[str, Any]:
    """Run training and testing; returns the results written to `output_dir` (`callbacks` go to the Trainer)."""
    model_args, data_args, training_args = parse_arguments(argv)
    validate_arguments(model_args, data_args, training_args)
    setup_logging(training_args)
    apply_cpu_bf16_defaults(model_args, data_args, training_args)
    checkpoint = _resolve_checkpoint(training_args) if training_args.do_train else None
    if checkpoint is not None and training_args.max_train_minutes:
        check_budget_left(checkpoint, training_args)

    corpus, raw = load_splits(data_args, training_args)
    tokenizer = get_tokenizer(model_args, training_args, raw.get("train"), checkpoint)
    model = prepare_model(model_args, data_args, training_args, tokenizer)
    data = prepare_data(corpus, raw, tokenizer, data_args, training_args)
    # After the data checks, so that a problem with the data is not buried under the ~120 lines of this dump.
    logger.info("Training arguments: %s", training_args)
    trainer = build_trainer(model, tokenizer, data, data_args, training_args, callbacks, checkpoint)
    results = describe_run(model_args, data_args, training_args, model, tokenizer, data)

    if training_args.do_train:
        results.update(train_and_save(trainer, checkpoint, data, data_args, training_args))
    if training_args.do_predict and "test" in data.splits:
        test = score_test(trainer, tokenizer, data, data_args, training_args)
        if test is not None:
            results["test"] = test
    if trainer.is_world_process_zero():
        samples = sample_translations(trainer, tokenizer, data, data_args, training_args)
        if samples is not None:
            results["samples"] = samples
        write_results(results, training_args.output_dir)
    end_processes(trainer)
    return results


def cli(argv: list[str] | None = None) -> None:
    """The command line (`training/train.py`, `python -m hf_unified_mt.training.run`): `main`, with the problems the
    user can fix printed on one line (exit status 2)."""
    try:
        main(argv)
    except (UsageError, DataValidationError, ExampleTooLongError) as error:
        # Problems the user can fix, already described in full; a traceback would only bury them (bugs keep theirs).
        print(f"train.py: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli()
