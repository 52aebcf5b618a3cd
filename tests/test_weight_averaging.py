"""`--average_weights_fraction`: the uniform average of the weights over the last part of training, put into the model
when training stops (checkpoint averaging, one sample per update)."""

import pytest
import torch
from transformers import TrainerControl, TrainerState
from transformers.trainer_callback import DefaultFlowCallback

from hf_unified_mt.training import run
from hf_unified_mt.training.arguments import UsageError
from hf_unified_mt.training.callbacks import WeightAveragingCallback


class FakeClock:
    def __init__(self):
        self.used = 0.0

    def fraction_used(self) -> float:
        return self.used


def train_by_hand(callback, model, steps, max_steps, clock=None, stop_at=None):
    """Sets every weight to the step number after each 'update' and calls the callback as the Trainer does."""
    state, control = TrainerState(max_steps=max_steps), TrainerControl()
    callback.on_train_begin(None, state, control, model=model)
    for step in range(1, steps + 1):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(float(step))
        state.global_step = step
        if clock is not None:
            clock.used = step / stop_at
        control.should_training_stop = step == stop_at or step >= max_steps
        callback.on_step_end(None, state, control, model=model)
    return model


def test_the_last_fraction_of_the_steps_is_averaged_into_the_model():
    model = torch.nn.Linear(3, 2)
    train_by_hand(WeightAveragingCallback(0.4), model, steps=10, max_steps=10)  # progress >= 0.6: steps 6-10
    for parameter in model.parameters():
        assert torch.equal(parameter, torch.full_like(parameter, 8.0))


def test_under_a_time_budget_the_window_follows_the_clock():
    """A budget that ends training at step 8 of a max_steps of 1000: the window is the last half of the clock
    (steps 4-8), not of max_steps, and the average goes in at the step that stops training."""
    clock, model = FakeClock(), torch.nn.Linear(2, 2)
    callback = WeightAveragingCallback(0.5, time_budget=clock)
    train_by_hand(callback, model, steps=8, max_steps=1000, clock=clock, stop_at=8)
    assert torch.equal(model.weight, torch.full_like(model.weight, 6.0))


def test_weights_tied_to_each_other_stay_tied():
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight
    train_by_hand(WeightAveragingCallback(1.0), model, steps=4, max_steps=4)
    assert model[1].weight is model[0].weight and torch.equal(model[0].weight, torch.full((5, 4), 2.5))


def test_the_trainer_ends_with_the_averaged_weights(tmp_path):
    """Through transformers' Trainer (its flow callback decides the last step): the weights after training are the
    mean of the weights the updates in the window left."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Recorder(TrainerCallback):
        def __init__(self):
            self.weights = []

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self.weights.append(model.weight.detach().clone())

    torch.manual_seed(0)
    model = Regression()
    data = [{"x": torch.randn(3), "y": torch.randn(1)} for _ in range(64)]
    recorder = Recorder()
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=8, per_device_train_batch_size=4, learning_rate=0.1,
        report_to="none", use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[recorder])
    trainer.add_callback(WeightAveragingCallback(0.5))
    assert isinstance(trainer.callback_handler.callbacks[0], DefaultFlowCallback)
    trainer.train()
    expected = torch.stack(recorder.weights[3:]).mean(0)  # progress >= 0.5: steps 4-8
    torch.testing.assert_close(model.weight.detach(), expected)
    assert not torch.equal(expected, recorder.weights[-1])


class Regression(torch.nn.Linear):
    def __init__(self):
        super().__init__(3, 1)

    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(super().forward(x), y)}


@pytest.mark.parametrize("fraction", ["0", "1.5", "-0.2"])
def test_fractions_outside_zero_to_one_are_refused(tmp_path, fraction):
    with pytest.raises(UsageError, match="--average_weights_fraction must be in \\(0, 1\\]"):
        run.main(["--output_dir", str(tmp_path / "out"), "--average_weights_fraction", fraction, "--max_steps", "1"])


@pytest.mark.subprocess
def test_train_py_ends_a_time_budget_with_the_averaged_weights(tmp_path):
    """The README's shape: a time budget ends training; the average goes in before the final checkpoint, and the
    saved model is that checkpoint (not the last update's weights)."""
    import json
    import re
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    root = Path(__file__).resolve().parents[1]
    output_dir = tmp_path / "out"
    command = [
        sys.executable, str(root / "training" / "train.py"), "--arch", "marian", "--preset", "tiny",
        "--max_train_samples", "200", "--tokenizer_vocab_size", "300", "--max_tokens", "1500", "--use_cpu",
        "--report_to", "none", "--disable_tqdm", "True", "--max_steps", "100000", "--max_train_minutes", "0.03",
        "--eval_strategy", "no", "--save_steps", "100000", "--do_predict", "False", "--num_sample_translations", "0",
        "--average_weights_fraction", "0.5", "--output_dir", str(output_dir),
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, cwd=root, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = re.search(r"Weights averaged over (\d+) updates \(steps (\d+)-(\d+)\)", completed.stdout)
    assert found, completed.stdout[-3000:]
    count, first, last = map(int, found.groups())
    assert count == last - first + 1 and 1 <= first <= last
    assert json.loads((output_dir / "trainer_state.json").read_text())["global_step"] == last
    final = load_file(output_dir / "model.safetensors")
    checkpoint = load_file(output_dir / f"checkpoint-{last}" / "model.safetensors")
    assert all(torch.equal(final[name], checkpoint[name]) for name in final)
