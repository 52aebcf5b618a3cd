"""torch.compile readiness: every architecture's training forward traces into one graph (`fullgraph=True`), and the
compiled forward/backward gives the eager loss and gradients. The one exception is the Multi-Encoder's LSTM branch.

The default suite compiles with the `aot_eager` backend: TorchDynamo captures the graph and AOTAutograd traces the
backward exactly as with Inductor, without generating C++ (which takes over a minute per tiny model on 2 CPU cores).
The Inductor run through `Seq2SeqTrainingArguments(torch_compile=True)` is marked slow (`pytest -m slow`)."""

import copy

import pytest
import torch
import torch._dynamo
from transformers import AutoModelForSeq2SeqLM

from conftest import VOCAB_SIZE, make_tokenizer, tiny_config
from hf_unified_mt.training.batching import MaxTokensBatchSampler
from test_model_contract import PAD, TINY, VARIANTS, batch, make_model


# Every code path a training forward takes: the five architectures, each decoder type of the Deep Transformer, MUTE
# with its bias module and AutoShuffle, both Multi-Pass connection types, the Multi-Encoder without its LSTM branch.
COMPILED_VARIANTS = [name for name in VARIANTS if name != "multi-encoder-quintuple"]


def training_model(name: str):
    """The variant's tiny model in training mode, with MUTE's bias-module switch off (its noise is random, and a
    compiled graph draws different random numbers than eager; the noise is still computed and traced)."""
    model = copy.deepcopy(make_model(name)).train()
    for module in model.modules():
        if type(module).__name__ == "UnitBiasModule":
            module.sample_rate = 0.0
    return model


def training_inputs() -> dict:
    ids, mask, target = batch()
    return dict(input_ids=ids, attention_mask=mask, labels=target.masked_fill(target == PAD, -100))


def training_loss(model):
    return model(**training_inputs()).loss


def test_the_lstm_branch_is_the_multi_encoders_only_graph_break():
    """nn.LSTM and sequence packing are not traced by TorchDynamo: the five-branch Multi-Encoder breaks in its LSTM
    branch, and the same encoder without that branch traces whole."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(training_model("multi-encoder-quintuple"))(**training_inputs())
    lines = [frame.line for reason in explanation.break_reasons for frame in reason.user_stack]
    assert any("pack_padded_sequence" in line for line in lines), lines

    arch, preset, overrides = VARIANTS["multi-encoder-quintuple"]
    branches = [spec for spec in tiny_config(arch, preset).encoder_branches if spec["type"] != "lstm"]
    config = tiny_config(arch, preset, **{**TINY, **overrides, "encoder_branches": branches})
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(AutoModelForSeq2SeqLM.from_config(config).train())(**training_inputs())
    reasons = [str(reason.reason).splitlines()[0] for reason in explanation.break_reasons]
    assert explanation.graph_break_count == 0, reasons


@pytest.mark.parametrize("name", COMPILED_VARIANTS)
def test_compiled_training_step_is_one_graph_with_the_eager_loss_and_gradients(name):
    """`fullgraph=True` makes any graph break inside the model's forward an error."""
    model = training_model(name)
    eager_loss = training_loss(model)
    eager_loss.backward()
    expected = {key: param.grad.clone() for key, param in model.named_parameters() if param.grad is not None}
    model.zero_grad(set_to_none=True)

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    compiled_loss = training_loss(compiled)
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    received = {key: param.grad for key, param in model.named_parameters() if param.grad is not None}
    assert received.keys() == expected.keys()
    for key, gradient in expected.items():
        torch.testing.assert_close(received[key], gradient, rtol=1e-4, atol=1e-6, msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["unified-prime", "deep-merged", "mute-bias-seq", "multi-encoder-dual", "mpt-soft"])
def test_seq2seq_trainer_trains_with_torch_compile(name, tmp_path):
    """`Seq2SeqTrainingArguments(torch_compile=True)` (Inductor) trains each architecture: the loss falls."""
    from datasets import Dataset
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, default_data_collator

    model = training_model(name)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(32):
        source = torch.randint(4, 40, (6,), generator=generator).tolist()
        rows.append({"input_ids": source + [2], "attention_mask": [1] * 7, "labels": source[::-1] + [2]})
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        torch_compile=True,
        per_device_train_batch_size=8,
        num_train_epochs=8,
        learning_rate=5e-3,
        logging_steps=4,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
    )
    # every row has the same length: nothing to pad, so transformers' default collator stacks them (and the model
    # builds its decoder inputs from the labels)
    trainer = Seq2SeqTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(rows), data_collator=default_data_collator
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.8 * losses[0], losses


# ---------------------------------------------------------------------------------------------------------------------
# Compiled training under token batching: a bounded number of compilations
# ---------------------------------------------------------------------------------------------------------------------


def varied_pairs(count: int = 96, seed: int = 0):
    """Token-id pairs of 2 to 30 tokens (ending in </s>, the target about as long as the source): batches of them
    have many shapes."""
    from datasets import Dataset

    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        length = int(torch.randint(1, 30, (1,), generator=generator))
        source = torch.randint(4, VOCAB_SIZE, (length,), generator=generator).tolist() + [2]
        target = source[: max(1, length - 2)][::-1] + [2]
        rows.append({"input_ids": source, "attention_mask": [1] * len(source), "labels": target})
    return Dataset.from_list(rows)


def compiled_trainer(tmp_path, trainer_class, **kwargs):
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainingArguments

    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config("unified_transformer", encoder_layers=1, decoder_layers=1))
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        torch_compile=True,
        torch_compile_backend="aot_eager",
        per_device_train_batch_size=kwargs.pop("per_device_train_batch_size", 8),
        num_train_epochs=2,
        learning_rate=1e-3,
        logging_steps=1000,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    collator = DataCollatorForSeq2Seq(make_tokenizer(), model=model, label_pad_token_id=-100)
    return trainer_class(model=model, args=args, train_dataset=varied_pairs(), data_collator=collator, **kwargs)


def test_length_buckets_bound_the_compilations_of_a_compiled_trainer(tmp_path):
    """`TokenBatchSeq2SeqTrainer(length_buckets=2, compile_dynamic=False)`: two epochs of batches with many natural
    shapes compile two static graphs, one per bucket, without a graph break; the report counts them."""
    from torch._dynamo.utils import counters

    from hf_unified_mt.training.batching import TokenBatchSeq2SeqTrainer

    torch._dynamo.reset()
    counters.clear()
    trainer = compiled_trainer(
        tmp_path, TokenBatchSeq2SeqTrainer, max_tokens=240, length_buckets=2, compile_dynamic=False
    )
    assert trainer.accelerator.state.dynamo_plugin.dynamic is False
    trainer.train()
    sampler = trainer._token_batch_sampler
    assert len(sampler) > 8 and len(sampler.bucket_shapes) == 2
    unbucketed = MaxTokensBatchSampler(sampler.source_lengths, sampler.target_lengths, max_tokens=240)
    assert unbucketed.statistics()["batch_shapes"] > 6  # what the buckets saved
    report = trainer.compile_report.statistics
    assert report["compiled_graphs"] == 2 and report["graph_breaks"] == 0, report
    assert report["compile_seconds"] > 0
    losses = [entry["train_loss"] for entry in trainer.state.log_history if "train_loss" in entry]
    assert losses and all(loss == loss for loss in losses)  # not NaN: the rows of padding hold no label


def test_plain_seq2seq_trainer_with_torch_compile_compiles_at_most_twice(tmp_path):
    """A plain `Seq2SeqTrainer(torch_compile=True)` on a package model, 24 batches of 8 pairs padded to their own
    longest (many shapes): torch's default compiles a static graph, then one dynamic graph at the second shape, and
    no graph break."""
    from torch._dynamo.utils import counters
    from transformers import Seq2SeqTrainer

    torch._dynamo.reset()
    counters.clear()
    trainer = compiled_trainer(tmp_path, Seq2SeqTrainer)
    trainer.train()
    assert trainer.state.global_step == 24
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"], dict(counters["graph_break"])


def test_train_py_compile_options_are_checked():
    from hf_unified_mt.training.run import UsageError, parse_arguments, validate_arguments

    with pytest.raises(UsageError, match="--length_buckets needs --max_tokens"):
        validate_arguments(*parse_arguments(["--length_buckets", "4", "--use_cpu"]))
    with pytest.raises(UsageError, match="--torch_compile_dynamic needs --torch_compile True"):
        validate_arguments(*parse_arguments(["--torch_compile_dynamic", "True", "--use_cpu"]))
    with pytest.raises(UsageError, match="--length_buckets must be at least 1, not 0"):
        validate_arguments(*parse_arguments(["--max_tokens", "512", "--length_buckets", "0", "--use_cpu"]))


def test_the_committed_compile_measurement_meets_the_target_with_valid_main_job_commands():
    """The committed result of the retired `benchmarks/compile_training.py` (docs/history.md, "Finished studies"): each
    run arm's options pass train.py's option checks over the main job; at most 1 + buckets compilations, no graph
    break, losses at equal updates as close to eager's as float32's are (bf16 noise), and compiling did not pay on
    the CPU (the main job stays eager)."""
    import json

    from hf_unified_mt.training.run import parse_arguments, validate_arguments
    from mt_checks import ROOT

    result = json.loads((ROOT / "benchmarks" / "results" / "compile_training.json").read_text())
    main_job = str(ROOT / "training" / "configs" / "cpu_default.yaml")
    for run in result["runs"].values():
        validate_arguments(*parse_arguments([main_job, *run["options"], "--max_steps", "300"]))
    summary = result["summary"]
    assert summary["compilation_bound"] == 1 + result["length_buckets"]
    assert all(0 < count <= summary["compilation_bound"] for count in summary["compiled_graphs"].values())
    assert set(summary["graph_breaks"].values()) == {0}
    differences = summary["largest_loss_difference_from_eager_buckets"]
    assert max(differences["compiled_static"], differences["compiled_dynamic"]) < 2 * differences["float32_buckets"]
    assert summary["compiling_pays_in_10_minutes"] is False


@pytest.mark.parametrize("arch", ["unified_transformer", "deep_transformer", "multi_unit_transformer"])
def test_layers_compiled_one_by_one_trace_one_graph_per_kind_of_layer(arch):
    """Each encoder and decoder layer compiled on its own (`nn.Module.compile`, as the GPU script's arms do): a
    training step traces one graph for the encoder's layers and one for the decoder's, whatever their number. The
    decoder hands each layer its own cross-attention keys and values (projected for all layers at once), so no graph
    depends on a layer's index."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    config = tiny_config(arch, **{**TINY, "encoder_layers": 2, "decoder_layers": 3})
    model = AutoModelForSeq2SeqLM.from_config(config).train()
    assert model.model.decoder.stacked_cross_attention_states(torch.randn(2, 5, model.config.d_model), None)
    for layer in [*model.model.encoder.layers, *model.model.decoder.layers]:
        layer.compile(backend="eager", dynamic=True)
    torch._dynamo.reset()
    counters.clear()
    ids, mask, target = batch()
    model(input_ids=ids, attention_mask=mask, labels=target.masked_fill(target == PAD, -100)).loss.backward()
    assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"], dict(counters["graph_break"])
