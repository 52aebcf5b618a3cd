# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""One training run (the library behind `training/train.py`): a translation model trained with `Seq2SeqTrainer`, any
architecture of `hf_unified_mt` or `MarianMTModel`. `main(argv, callbacks)` runs it in-process (the connection search
and the ablation study call it for each candidate); `cli()` is the command line.

    python training/train.py --arch marian --preset small --output_dir outputs/marian
    accelerate launch --config_file training/accelerate_configs/multi_gpu_ddp.yaml training/train.py --max_tokens 4096

This module is the recipe: its stages, in the order `main` runs them, each a function below (read top-down):

1. the options (`arguments.py`: every `Seq2SeqTrainingArguments` option on the command line or in a JSON/YAML file,
   with machine-translation defaults), checked before any work; logging; the checkpoint to resume from
   (`resolve_checkpoint`, and a time budget with time left: `budget.check_budget_left`);
2. `load_splits`: load and validate the data (the embedded Bible corpus by default);
3. `get_tokenizer`: train a shared subword tokenizer (or load one);
4. `prepare_model`: build the model (or load it) with its generation config and label smoothing;
5. `prepare_data`: tokenize and apply the length limits;
6. `build_trainer`: the Trainer with token-budget batches, validation BLEU/chrF and the callbacks (`callbacks.py`: the
   AutoShuffle projection, weight averaging; `budget.py`: the time budget);
7. `describe_run`: the head of `results.json` (what reproduces the run); `train_and_save`: train (or resume), save
   model + tokenizer + generation config to `output_dir`;
8. `score_test`: score the test split (BLEU and chrF with sacreBLEU signatures, BLEU by source length) into
   `test_results.json` (hypotheses in `test_translations.txt`);
9. `sample_translations`: translate a few sentences; `write_results`: everything to `results.json`; `end_processes`:
   release the processes of a distributed run.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import datasets
import transformers
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    MarianConfig,
    MarianMTModel,
    set_seed,
)
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import IntervalStrategy, get_last_checkpoint

import hf_unified_mt  # noqa: F401  (registers the package's architectures with the Auto classes)
from hf_unified_mt.deployment.inference import clean_generation_config, make_generation_config, one_line, translate
from hf_unified_mt.presets import MARIAN_COMMON, MARIAN_PRESETS, get_config
from hf_unified_mt.training.arguments import (
    DataArguments,
    ModelArguments,
    MTTrainingArguments,
    UsageError,
    apply_cpu_bf16_defaults,
    config_overrides,
    parse_arguments,
    validate_arguments,
)
from hf_unified_mt.training.batching import ExampleTooLongError, TokenBatchSeq2SeqTrainer
from hf_unified_mt.training.budget import TimeBudgetCallback, TimeBudgetProgressCallback, check_budget_left
from hf_unified_mt.training.callbacks import AutoShuffleProjectionCallback, WeightAveragingCallback
from hf_unified_mt.training.checkpoints import last_complete_checkpoint
from hf_unified_mt.training.data import (
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
from hf_unified_mt.utils.files import write_json, write_text


logger = logging.getLogger("train")


# ---------------------------------------------------------------------------------------------------------------------
# 1. Logging and the checkpoint to resume from (the options: arguments.py)
# ---------------------------------------------------------------------------------------------------------------------


def setup_logging(training_args: MTTrainingArguments) -> None:
    """The run's logs on stdout, at the level the options give this process (transformers', datasets' and the
    package's loggers too); `--disable_tqdm` also turns off the bars of data preparation and weight loading."""
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


def resolve_checkpoint(training_args: MTTrainingArguments) -> str | None:
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


# ---------------------------------------------------------------------------------------------------------------------
# 2. Data
# ---------------------------------------------------------------------------------------------------------------------


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


def _limit(dataset, count: int | None):
    return dataset if count is None else dataset.select(range(min(count, len(dataset))))


# ---------------------------------------------------------------------------------------------------------------------
# 3. Tokenizer
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


# ---------------------------------------------------------------------------------------------------------------------
# 4. Model
# ---------------------------------------------------------------------------------------------------------------------


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
    overrides = config_overrides(model_args)
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


def move_label_smoothing_into_model(model, training_args: MTTrainingArguments) -> None:
    """Models of this package smooth their own cross-entropy (`config.label_smoothing`) and may add terms of their own
    to the loss (MUTE's AutoShuffle penalty, MPT's sum over passes). The Trainer's label smoother would take the labels
    away from them and lose those terms, so `--label_smoothing_factor` goes into the model config instead. Models
    without that option (MarianMT) keep the Trainer's label smoother."""
    if "label_smoothing" in model.config.to_dict() and training_args.label_smoothing_factor:
        model.config.label_smoothing = training_args.label_smoothing_factor
        training_args.label_smoothing_factor = 0.0


# ---------------------------------------------------------------------------------------------------------------------
# 5. Tokenized data
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


# ---------------------------------------------------------------------------------------------------------------------
# 6. Trainer
# ---------------------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------------------
# 7. The run's description, and training
# ---------------------------------------------------------------------------------------------------------------------


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


def set_saved_generation_config(model, data_args: DataArguments, training_args: MTTrainingArguments) -> None:
    """The generation config saved with the trained model: the run's token ids, beam size and n-gram constraint, and
    its longest target as the default length (`max_new_tokens`). A length a caller passes wins over it (the package's
    models let a passed `max_length` win over a saved `max_new_tokens`, which `generate()` would not)."""
    clean_generation_config(
        model, num_beams=training_args.generation_num_beams, max_new_tokens=data_args.max_target_length
    )


# ---------------------------------------------------------------------------------------------------------------------
# 8. Test scores
# ---------------------------------------------------------------------------------------------------------------------


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


def float32_forward(trainer) -> None:
    """Takes the mixed-precision autocast that `--bf16` / `--fp16` training wrapped around the model's forward away
    (in place), so that what follows translates with the weights as saved, in float32: test scores then measure the
    checkpoint a user loads, whatever precision trained it."""
    if trainer.args.bf16 or trainer.args.fp16:
        trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)


# ---------------------------------------------------------------------------------------------------------------------
# 9. Samples, results and the end of the processes
# ---------------------------------------------------------------------------------------------------------------------


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
# The recipe
# ---------------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None, callbacks: list | None = None) -> dict[str, Any]:
    """Run training and testing; returns the results written to `output_dir` (`callbacks` go to the Trainer)."""
    model_args, data_args, training_args = parse_arguments(argv)
    validate_arguments(model_args, data_args, training_args)
    setup_logging(training_args)
    apply_cpu_bf16_defaults(model_args, data_args, training_args)
    checkpoint = resolve_checkpoint(training_args) if training_args.do_train else None
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
