"""Learning-rate schedules over a time budget, and bf16 training on a machine without an accelerator."""

import math
import time

import pytest
import torch
from transformers import MarianConfig, MarianMTModel, set_seed

from hf_unified_mt.training import arguments
from hf_unified_mt.training.arguments import MTTrainingArguments, apply_cpu_bf16_defaults, parse_arguments
from hf_unified_mt.training.batching import TokenBatchSeq2SeqTrainer
from hf_unified_mt.training.budget import TimeBudgetCallback
from hf_unified_mt.training.run import float32_forward
from hf_unified_mt.training.schedules import budget_schedule


class FakeClock:
    """A budget whose used share the test sets by hand."""

    def __init__(self):
        self.used = 0.0

    def fraction_used(self) -> float:
        return self.used


def learning_rate_after(scheduler, step: int) -> float:
    """The rate the scheduler gives the update after `step` optimizer steps."""
    return scheduler.base_lrs[0] * scheduler.lr_lambdas[0](step)


def tiny_marian() -> MarianMTModel:
    return MarianMTModel(
        MarianConfig(
            vocab_size=16,
            d_model=8,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=1,
            decoder_attention_heads=1,
            encoder_ffn_dim=8,
            decoder_ffn_dim=8,
            pad_token_id=0,
            decoder_start_token_id=0,
        )
    )


def optimizer(lr=1.0):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_budget_schedule_warms_up_by_steps_and_decays_by_the_clock(shape):
    clock = FakeClock()
    scheduler = budget_schedule(optimizer(), shape, warmup_steps=10, max_steps=10**9, budget_used=clock.fraction_used)
    assert learning_rate_after(scheduler, 5) == pytest.approx(0.5)  # half-way through the warm-up, clock at 0
    assert learning_rate_after(scheduler, 10) == pytest.approx(1.0)
    clock.used = 0.5  # half the budget: step 20 of a 10^9-step cap would not have decayed
    assert learning_rate_after(scheduler, 20) == pytest.approx(0.5)
    clock.used = 0.75
    expected = 0.25 if shape == "linear" else 0.5 * (1 + math.cos(0.75 * math.pi))
    assert learning_rate_after(scheduler, 30) == pytest.approx(expected)
    clock.used = 1.0
    assert learning_rate_after(scheduler, 40) == pytest.approx(0.0, abs=1e-12)


def test_budget_schedule_follows_max_steps_when_it_ends_first():
    clock = FakeClock()
    scheduler = budget_schedule(optimizer(), "linear", warmup_steps=0, max_steps=100, budget_used=clock.fraction_used)
    clock.used = 0.1
    assert learning_rate_after(scheduler, 60) == pytest.approx(0.4)  # steps say 60%, the clock 10%: the larger wins
    without_clock = budget_schedule(optimizer(), "linear", warmup_steps=0, max_steps=100)
    assert learning_rate_after(without_clock, 60) == pytest.approx(0.4)


def test_budget_schedule_refuses_unknown_shapes():
    with pytest.raises(ValueError, match="budget schedules are linear, cosine, not 'inverse_sqrt'"):
        budget_schedule(optimizer(), "inverse_sqrt", warmup_steps=0, max_steps=10)


@pytest.mark.parametrize("schedule, decays_with_the_clock", [("linear", True), ("inverse_sqrt", False)])
def test_trainer_decays_linear_schedules_over_the_time_budget(tmp_path, schedule, decays_with_the_clock):
    set_seed(0)
    model = tiny_marian()
    args = MTTrainingArguments(
        output_dir=str(tmp_path),
        lr_scheduler_type=schedule,
        warmup_steps=2,
        max_steps=10**9,
        learning_rate=1e-3,
        eval_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    budget = TimeBudgetCallback(minutes=1.0)
    trainer = TokenBatchSeq2SeqTrainer(model=model, args=args, time_budget=budget)
    trainer.create_optimizer_and_scheduler(num_training_steps=10**9)
    budget.start = time.monotonic()  # training begins: the clock at 0% of the budget
    at_start = learning_rate_after(trainer.lr_scheduler, 4)
    budget.start = time.monotonic() - 54  # 54 of the budget's 60 seconds used
    late = learning_rate_after(trainer.lr_scheduler, 5)
    if decays_with_the_clock:
        assert at_start == pytest.approx(1e-3, rel=1e-3) and late == pytest.approx(1e-4, rel=1e-2)
    else:  # transformers' own schedule, which has no use for the clock
        assert late == pytest.approx(1e-3 * math.sqrt(2 / 5))


def test_bf16_on_a_machine_without_an_accelerator_trains_on_the_cpu(tmp_path, monkeypatch):
    """`--bf16` where there is no GPU means bfloat16 autocast on the CPU, not transformers' "doesn't support
    bf16/gpu" error (which asks for `--use_cpu` too)."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    args = MTTrainingArguments(output_dir=str(tmp_path), bf16=True, report_to="none")
    assert args.use_cpu and args.bf16


@pytest.mark.parametrize(
    "capabilities, speedup, expected",
    [
        ({"avx512_bf16": True}, 2.3, True),
        ({"amx_bf16": True}, 2.3, True),
        ({"bf16": True}, 1.5, True),
        ({"avx512_bf16": True}, 0.52, False),  # BF16 instructions, but bfloat16 slower than float32 (no AMX)
        ({"avx512_bf16": False, "avx2": True}, None, False),
    ],
)
def test_bf16_if_native_follows_the_cpu_capabilities(tmp_path, monkeypatch, capabilities, speedup, expected):
    """`--bf16_if_native` trains in bfloat16 on a CPU that has BF16 instructions (x86 AVX512-BF16 or AMX, Arm BF16)
    and multiplies matrices faster in bfloat16 than in float32, in float32 on one that would emulate it or computes it
    slower; the probe runs only where there are BF16 instructions."""
    probes = []
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    monkeypatch.setattr(arguments, "cpu_bf16_speedup", lambda: probes.append(speedup) or speedup)
    args = MTTrainingArguments(output_dir=str(tmp_path), bf16_if_native=True, report_to="none")
    assert args.bf16 is expected and not args.fp16
    assert args.use_cpu is expected  # only bf16 needs the flag here; float32 runs on the CPU anyway
    assert probes == ([] if speedup is None else [speedup])
    reason = "no BF16 instructions" if speedup is None else f"{speedup:.2f}x as fast in bfloat16 as in float32"
    assert reason in args.precision_choice and args.precision_choice.endswith(
        "training in bfloat16" if expected else "training in float32"
    )


def test_the_cpu_bf16_probe_times_both_precisions_and_leaves_the_random_state_alone():
    """`cpu_bf16_speedup`: float32 seconds over bfloat16 seconds of one matrix product, positive and finite, without
    drawing from the global random generator (the run's seed)."""
    state = torch.random.get_rng_state()
    speedup = arguments.cpu_bf16_speedup(size=64, repeats=2)
    assert 0 < speedup < float("inf")
    assert torch.equal(torch.random.get_rng_state(), state)


def test_bf16_if_native_leaves_an_explicit_precision_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_bf16": False})
    args = MTTrainingArguments(output_dir=str(tmp_path), bf16=True, bf16_if_native=True, report_to="none")
    assert args.bf16


@pytest.mark.parametrize(
    "options, attention, multiple",
    [
        (["--bf16"], "eager", 8),
        (["--bf16", "--attn_implementation", "sdpa", "--pad_to_multiple_of", "16"], "sdpa", 16),
        ([], None, None),  # float32: the model's attention, no padding
    ],
)
def test_bf16_on_a_cpu_defaults_to_eager_attention_on_lengths_padded_to_8(tmp_path, options, attention, multiple):
    """The profile's finding as defaults: PyTorch's fused CPU attention backward is slow in bfloat16 and bfloat16
    matmuls are slow on unaligned shapes; options the user sets win."""
    model_args, data_args, training_args = parse_arguments(
        ["--output_dir", str(tmp_path), "--use_cpu", "--report_to", "none", *options]
    )
    apply_cpu_bf16_defaults(model_args, data_args, training_args)
    assert (model_args.attn_implementation, data_args.pad_to_multiple_of) == (attention, multiple)


def test_after_bf16_training_the_test_split_is_translated_in_float32(tmp_path):
    """`--bf16` wraps the model's forward in autocast for training; the test translations (and the samples after
    them) use the float32 weights as saved."""
    set_seed(0)
    model = tiny_marian().eval()
    batch = dict(input_ids=torch.tensor([[5, 6, 7, 2]]), decoder_input_ids=torch.tensor([[0, 5, 6]]))
    with torch.no_grad():
        reference = model(**batch).logits
    args = MTTrainingArguments(output_dir=str(tmp_path), bf16=True, use_cpu=True, eval_strategy="no", report_to="none")
    trainer = TokenBatchSeq2SeqTrainer(model=model, args=args)
    trainer.model = trainer.accelerator.prepare_model(trainer.model)  # what train() does
    with torch.no_grad():
        assert not torch.equal(trainer.model(**batch).logits, reference)  # autocast: bfloat16 matmuls
    float32_forward(trainer)
    with torch.no_grad():
        assert torch.equal(trainer.model(**batch).logits, reference)
