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

from conftest import tiny_config
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
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

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
    collator = DataCollatorForSeq2Seq(tokenizer=None, model=model, label_pad_token_id=-100)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), data_collator=collator)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.8 * losses[0], losses
