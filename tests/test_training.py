"""End to end: train.py on a slice of the real corpus, resuming, 2-process distributed training, and the scripts."""

import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from mt_checks import ROOT, TRAINING, load_script


# A tiny Marian on a slice of the embedded corpus: seconds per run on 2 CPU cores.
TINY_RUN = [
    "--arch",
    "marian",
    "--preset",
    "tiny",
    "--max_train_samples",
    "400",
    "--tokenizer_vocab_size",
    "500",
    "--max_source_length",
    "200",
    "--max_target_length",
    "200",
    "--overlong",
    "skip",
    "--max_tokens",
    "1500",
    "--warmup_steps",
    "5",
    "--learning_rate",
    "2e-3",
    "--use_cpu",
    "--disable_tqdm",
    "True",
    "--report_to",
    "none",
    "--dataloader_num_workers",
    "0",
]


def run_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}, **extra)
    return env


def run(command, **env):
    result = subprocess.run(command, cwd=ROOT, env=run_env(**env), capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, command))} failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}")
    return result


def train(output_dir, *arguments, **env):
    return run(
        [sys.executable, str(TRAINING / "train.py"), *TINY_RUN, "--output_dir", str(output_dir), *arguments], **env
    )


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def losses(run_dir):
    history = json.loads((Path(run_dir) / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One run with evaluation, best-checkpoint selection and test scoring; options from a YAML file + CLI."""
    output_dir = tmp_path_factory.mktemp("run") / "out"
    config = output_dir.parent / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "max_steps": 20,
                "eval_steps": 10,
                "save_steps": 10,
                "logging_steps": 5,
                "max_eval_samples": 8,
                "max_test_samples": 8,
                "generation_max_length": 40,
                "config_overrides": {"dropout": 0.0},
            }
        )
    )
    result = train(
        output_dir, "--generation_num_beams", "2", "--generation_no_repeat_ngram_size", "3", "--config", str(config)
    )
    return output_dir, result.stdout


@pytest.mark.e2e
@pytest.mark.subprocess
def test_end_to_end_run_writes_a_reloadable_checkpoint(trained):
    output_dir, stdout = trained
    for name in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "test_results.json",
        "test_translations.txt",
        "results.json",
    ):
        assert (output_dir / name).is_file(), name
    assert sorted(p.name for p in output_dir.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-20"]
    assert "BLEU = " in stdout and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in stdout
    assert "chrF = " in stdout and "Sample translations:" in stdout

    config = json.loads((output_dir / "config.json").read_text())
    assert config["model_type"] == "marian" and config["d_model"] == 64 and config["dropout"] == 0.0
    assert config["use_cache"] is True
    generation = json.loads((output_dir / "generation_config.json").read_text())
    assert generation["num_beams"] == 2 and generation["max_new_tokens"] == 200
    assert generation["no_repeat_ngram_size"] == 3  # what evaluation and the test used, and a user's generate() uses
    assert "max_length" not in generation and "top_k" not in generation  # legacy defaults trimmed

    test = json.loads((output_dir / "test_results.json").read_text())
    assert test["num_sentences"] == 8 and 0 <= test["bleu"] <= 100 and 0 <= test["chrf"] <= 100
    assert test["bleu_signature"].startswith("nrefs:1|") and test["chrf_signature"].startswith("nrefs:1|")
    assert sum(bucket["num_sentences"] for bucket in test["bleu_by_source_length"]) == 8
    assert len((output_dir / "test_translations.txt").read_text().splitlines()) == 8

    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["best_model_checkpoint"].endswith(("checkpoint-10", "checkpoint-20"))
    assert any("eval_bleu" in entry and "eval_chrf" in entry for entry in state["log_history"])

    # The saved model reloads offline and translates the same way as at the end of the run.
    from hf_unified_mt.deployment.inference import translate

    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    results = json.loads((output_dir / "results.json").read_text())
    samples = results["samples"]
    assert len(samples) == 3 and all("reference" in sample for sample in samples)
    outputs = translate(model, tokenizer, [s["source"] for s in samples], num_beams=2, max_source_length=200)
    assert outputs == [s["translation"] for s in samples]
    assert results["arch"] == "marian" and results["vocab_size"] == len(tokenizer) == 500


@pytest.mark.e2e
@pytest.mark.subprocess
def test_resumed_run_continues_the_same_loss_curve(tmp_path):
    """Train 12 steps (8 batches per epoch) saving at step 9; resume a copy of checkpoint-9 to step 12 (past a newer,
    half-written checkpoint)."""
    common = [
        "--max_train_samples",
        "100",
        "--max_steps",
        "12",
        "--save_steps",
        "9",
        "--logging_steps",
        "1",
        "--eval_strategy",
        "no",
        "--do_predict",
        "False",
        "--num_sample_translations",
        "0",
    ]
    uninterrupted, resumed = tmp_path / "a", tmp_path / "b"
    train(uninterrupted, *common)
    resumed.mkdir()
    shutil.copytree(uninterrupted / "checkpoint-9", resumed / "checkpoint-9")
    # A newer checkpoint that a killed run left half-written (no trainer_state.json): `last` skips it.
    (resumed / "checkpoint-11").mkdir()
    shutil.copy(uninterrupted / "checkpoint-9" / "config.json", resumed / "checkpoint-11")
    result = train(resumed, *common, "--resume_from_checkpoint", "last")
    assert "checkpoint-11 is incomplete" in result.stdout + result.stderr
    assert "Resuming training from checkpoint with epoch 1 and global step 9" in result.stdout + result.stderr

    expected, actual = losses(uninterrupted), losses(resumed)
    assert sorted(expected) == list(range(1, 13))
    for step in (10, 11, 12):
        assert actual[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), step
    # The reported training loss is the whole run's mean, as in the uninterrupted run, not the resumed steps' mean.
    train_loss = json.loads((uninterrupted / "results.json").read_text())["train"]["train_loss"]
    resumed_loss = json.loads((resumed / "results.json").read_text())["train"]["train_loss"]
    assert resumed_loss == pytest.approx(train_loss, rel=1e-5)
    assert train_loss == pytest.approx(sum(expected.values()) / 12, rel=1e-4)
    # Dropout (0.1 in the tiny preset) is on, so this also checks that the RNG state was restored.
    final_a = load_file(uninterrupted / "model.safetensors")
    final_b = load_file(resumed / "model.safetensors")
    assert all(torch.allclose(final_a[k], final_b[k], atol=1e-6) for k in final_a)


KILLED_AFTER_A_CHECKPOINT = """
import os, signal, sys, time
from transformers import TrainerCallback
from hf_unified_mt.training import run

STEP, PAUSE = int(sys.argv[1]), float(sys.argv[2])


class SlowThenKilled(TrainerCallback):
    \"\"\"Spends PAUSE seconds of the budget in step STEP, then kills the run once it has saved checkpoint-STEP.\"\"\"

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == STEP:
            time.sleep(PAUSE)

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == STEP:
            os.kill(os.getpid(), signal.SIGKILL)


run.main(sys.argv[3:], callbacks=[SlowThenKilled()])
"""


@pytest.mark.e2e
@pytest.mark.subprocess
def test_a_resumed_time_budget_continues_its_clock_schedule_and_averaging_window(tmp_path):
    """A run under a 15-second budget spends about 9 of them by step 10, saves checkpoint-10 and is killed; resumed,
    it trains only what is left of the budget, its linear schedule goes on decaying from where the clock stood (not
    back up to the peak), and the weight average, begun at step 10 (past half of the budget), goes on from the
    checkpoint's."""
    budget, step, pause, peak = 15.0, 10, 8.0, 2e-3
    common = [
        "--max_train_samples", "100", "--max_steps", "100000", "--max_train_minutes", str(budget / 60),
        "--lr_scheduler_type", "linear", "--save_steps", str(step), "--logging_steps", "1", "--eval_strategy", "no",
        "--do_predict", "False", "--num_sample_translations", "0", "--average_weights_fraction", "0.5",
    ]  # fmt: skip
    output_dir = tmp_path / "out"
    command = [sys.executable, "-c", KILLED_AFTER_A_CHECKPOINT, str(step), str(pause), *TINY_RUN]
    killed = subprocess.run(
        [*command, *common, "--output_dir", str(output_dir)],
        cwd=ROOT, env=run_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-3000:]
    saved = json.loads((output_dir / f"checkpoint-{step}" / "trainer_state.json").read_text())
    used = saved["stateful_callbacks"]["TimeBudgetCallback"]["attributes"]["seconds_used"]
    assert pause <= used < budget
    assert (output_dir / f"checkpoint-{step}" / "weight_average.safetensors").is_file()  # the average of step 10

    result = train(output_dir, *common, "--resume_from_checkpoint", "last")
    output = result.stdout + result.stderr
    assert f"Resuming training from checkpoint with epoch 1 and global step {step}" in output
    # the budget: only what was left of it is trained
    runtime = json.loads((output_dir / "results.json").read_text())["train"]["train_runtime"]
    assert runtime < budget - used + 2.5, (runtime, used)
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["stateful_callbacks"]["TimeBudgetCallback"]["attributes"]["seconds_used"] == pytest.approx(budget)
    # the schedule: the first rate the resumed run computes is the uninterrupted run's at the clock's time
    rates = {entry["step"]: entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry}
    assert rates[step + 1] == pytest.approx(rates[step], rel=0.2)  # restored with the optimizer
    assert peak * (1 - (used + 2.0) / budget) <= rates[step + 2] <= peak * (1 - used / budget), (rates, used)
    # the averaging window: opened at step 10 by the original clock; the average saved with the checkpoint goes on
    assert f"Resumed at step {step} with the weight average of steps {step}-{step}" in output
    averaged = re.search(r"Weights averaged over (\d+) updates \(steps (\d+)-(\d+)\)", output)
    assert averaged, output[-3000:]
    count, first, last = map(int, averaged.groups())
    assert first == step and count == last - step + 1 and last == state["global_step"]


def resumed_state(step, seconds_used=None, **state):
    """A Trainer state as loaded from a checkpoint saved at `step`, after `seconds_used` of a time budget."""
    from transformers import TrainerState

    saved = (
        {}
        if seconds_used is None
        else {"TimeBudgetCallback": {"args": {"minutes": 1.0}, "attributes": {"seconds_used": seconds_used}}}
    )
    return TrainerState(global_step=step, max_steps=10**6, stateful_callbacks=saved, **state)


def test_a_time_budget_saves_its_clock_and_a_resumed_run_goes_on_from_it(caplog):
    from transformers import TrainerControl
    from transformers.trainer_utils import IntervalStrategy

    from hf_unified_mt.training.budget import TimeBudgetCallback

    args = SimpleNamespace(eval_strategy=IntervalStrategy.NO)
    budget, state = TimeBudgetCallback(minutes=1.0), resumed_state(step=40, seconds_used=45.0)
    budget.on_train_begin(args, state, TrainerControl())
    assert budget.fraction_used() == pytest.approx(0.75, abs=0.01)
    assert budget.state()["attributes"]["seconds_used"] == pytest.approx(45.0, abs=0.5)  # what the next save records
    assert not budget.on_step_end(args, state, TrainerControl()).should_training_stop
    budget.start -= 15.0  # 15 more seconds: the budget's 60 are used
    control = budget.on_step_end(args, state, TrainerControl())
    assert control.should_training_stop and control.should_save and budget.fraction_used() == 1.0

    # a checkpoint that records no time (an older run): the budget counts from the resume, and says so
    budget, state = TimeBudgetCallback(minutes=1.0), resumed_state(step=40)
    with caplog.at_level("WARNING"):
        budget.on_train_begin(args, state, TrainerControl())
    assert "records no time used" in caplog.text and budget.fraction_used() < 0.01
    assert "TimeBudgetCallback" in state.stateful_callbacks  # transformers' checkpoint saving expects the entry
    # a new run (step 0) starts the clock at zero whatever its state holds
    budget = TimeBudgetCallback(minutes=1.0)
    budget.on_train_begin(args, resumed_state(step=0, seconds_used=50.0), TrainerControl())
    assert budget.fraction_used() < 0.01


def test_restoring_callback_states_keeps_the_time_budget_the_schedule_reads(tmp_path):
    """With --restore_callback_states_from_checkpoint, transformers replaces stateful callbacks by new instances; the
    time budget that the schedule and the weight averaging read must stay the one in the Trainer."""
    from transformers import MarianConfig, MarianMTModel

    from hf_unified_mt.training.arguments import MTTrainingArguments
    from hf_unified_mt.training.batching import TokenBatchSeq2SeqTrainer
    from hf_unified_mt.training.budget import TimeBudgetCallback

    model = MarianMTModel(MarianConfig(vocab_size=16, d_model=8, encoder_layers=1, decoder_layers=1,
                                       encoder_attention_heads=1, decoder_attention_heads=1, encoder_ffn_dim=8,
                                       decoder_ffn_dim=8, pad_token_id=0, decoder_start_token_id=0))  # fmt: skip
    args = MTTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, eval_strategy="no",
                               restore_callback_states_from_checkpoint=True)  # fmt: skip
    budget = TimeBudgetCallback(minutes=1.0)
    trainer = TokenBatchSeq2SeqTrainer(model=model, args=args, time_budget=budget, callbacks=[budget])
    trainer.state = resumed_state(step=40, seconds_used=45.0)
    trainer._load_callback_state()
    assert any(callback is budget for callback in trainer.callback_handler.callbacks)
    assert trainer.state.stateful_callbacks["TimeBudgetCallback"]["attributes"]["seconds_used"] == 45.0


def test_resuming_a_checkpoint_that_used_the_whole_budget_is_refused_before_any_work(tmp_path):
    from hf_unified_mt.training import run
    from hf_unified_mt.training.arguments import UsageError

    checkpoint = tmp_path / "out" / "checkpoint-200"
    checkpoint.mkdir(parents=True)
    resumed_state(step=200, seconds_used=30.0).save_to_json(str(checkpoint / "trainer_state.json"))
    with pytest.raises(UsageError, match="the whole --max_train_minutes 0.5; nothing is left to train"):
        run.main(
            ["--output_dir", str(tmp_path / "out"), "--max_train_minutes", "0.5", "--resume_from_checkpoint", "last"]
        )


def test_the_weight_average_saved_with_a_checkpoint_loads_back(tmp_path, caplog):
    from torch.optim.swa_utils import AveragedModel

    from hf_unified_mt.training.callbacks import load_weight_average, save_weight_average

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight  # tied weights are saved once
    averaged = AveragedModel(model, use_buffers=False)
    for _ in range(3):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(1.0)
        averaged.update_parameters(model)
    save_weight_average(tmp_path / "average.safetensors", averaged, first_step=17)
    loaded, first_step = load_weight_average(tmp_path / "average.safetensors", model)
    assert first_step == 17 and int(loaded.n_averaged) == 3
    for mine, saved in zip(loaded.module.parameters(), averaged.module.parameters(), strict=True):
        assert torch.equal(mine, saved)
    with caplog.at_level("WARNING"):  # another model's average: refused, the average starts anew
        assert load_weight_average(tmp_path / "average.safetensors", torch.nn.Linear(4, 5)) == (None, None)
    assert "is not a weight average of this model" in caplog.text


def test_the_run_writes_its_files_in_place_of_links_never_through_them(tmp_path):
    """results.json and the Trainer's metrics and state files of `output_dir`: a symbolic link with the name is replaced
    by the file, and the file it pointed to is left as it was."""
    from transformers import MarianConfig, MarianMTModel

    from hf_unified_mt.training import run
    from hf_unified_mt.training.arguments import MTTrainingArguments
    from hf_unified_mt.training.batching import TokenBatchSeq2SeqTrainer

    output_dir, outside = tmp_path / "out", tmp_path / "outside.txt"
    output_dir.mkdir()
    outside.write_text("keep me")
    names = ("results.json", "train_results.json", "all_results.json", "trainer_state.json")
    for name in names:
        (output_dir / name).symlink_to(outside)
    run.write_results({"bleu": 1.0}, str(output_dir))
    model = MarianMTModel(MarianConfig(vocab_size=16, d_model=8, encoder_layers=1, decoder_layers=1,
                                       encoder_attention_heads=1, decoder_attention_heads=1, encoder_ffn_dim=8,
                                       decoder_ffn_dim=8, pad_token_id=0, decoder_start_token_id=0))  # fmt: skip
    args = MTTrainingArguments(output_dir=str(output_dir), report_to="none", use_cpu=True, eval_strategy="no")
    trainer = TokenBatchSeq2SeqTrainer(model=model, args=args)
    (output_dir / "all_results.json").unlink()  # transformers reads it before updating it
    (output_dir / "all_results.json").symlink_to(tmp_path / "missing.json")
    trainer.save_metrics("train", {"train_loss": 2.5})
    trainer.save_state()
    assert outside.read_text() == "keep me" and not (tmp_path / "missing.json").exists()
    for name in names:
        assert not (output_dir / name).is_symlink(), name
    assert json.loads((output_dir / "all_results.json").read_text()) == {"train_loss": 2.5}
    assert json.loads((output_dir / "trainer_state.json").read_text())["global_step"] == 0


def test_the_last_complete_checkpoint_is_the_newest_the_trainer_finished(tmp_path, caplog):
    from hf_unified_mt.training.checkpoints import last_complete_checkpoint

    assert last_complete_checkpoint(tmp_path / "missing") is None and last_complete_checkpoint(tmp_path) is None
    for step, complete in ((500, True), (1000, True), (1500, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / ("trainer_state.json" if complete else "config.json")).write_text("{}")
    (tmp_path / "checkpoint-900.tmp").mkdir()  # not a checkpoint name
    with caplog.at_level("WARNING"):
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-1000")  # by step, not by name
    assert "checkpoint-1500 is incomplete" in caplog.text


RECORDER = '''
import json, os, sys
import torch
from transformers import TrainerCallback

sys.path.insert(0, sys.argv[1])
from hf_unified_mt.training import run as train

record_dir = sys.argv[2]


class Recorder(TrainerCallback):
    """Writes each rank's training batches (epoch 0) and final weights."""

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        self.batches = [list(map(int, b)) for b in train_dataloader.batch_sampler.batch_sampler]

    def on_train_end(self, args, state, control, model=None, **kwargs):
        rank = args.process_index
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()},
                   os.path.join(record_dir, f"weights_rank{rank}.pt"))
        with open(os.path.join(record_dir, f"rank{rank}.json"), "w") as handle:
            json.dump({"batches": self.batches, "world_size": args.world_size, "step": state.global_step}, handle)


train.main(sys.argv[3:], callbacks=[Recorder()])
with open(os.path.join(record_dir, f"after_main_rank{os.environ['RANK']}.json"), "w") as handle:
    json.dump({"process_group": torch.distributed.is_initialized()}, handle)
'''


@pytest.mark.distributed
@pytest.mark.e2e
@pytest.mark.subprocess
def test_two_process_distributed_training_keeps_ranks_identical(tmp_path):
    script = tmp_path / "launch_train.py"
    script.write_text(RECORDER)
    records = tmp_path / "records"
    records.mkdir()
    output_dir = tmp_path / "out"
    result = run(
        [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(free_port()),
            str(script),
            str(TRAINING),
            str(records),
            *TINY_RUN,
            "--output_dir",
            str(output_dir),
            "--max_steps",
            "6",
            "--logging_steps",
            "2",
            "--eval_steps",
            "3",
            "--save_steps",
            "3",
            "--max_eval_samples",
            "6",
            "--max_test_samples",
            "6",
            "--generation_num_beams",
            "1",
            "--generation_max_length",
            "20",
            "--num_sample_translations",
            "1",
        ],
        OMP_NUM_THREADS="1",
    )
    ranks = [json.loads((records / f"rank{r}.json").read_text()) for r in (0, 1)]
    # Each process released its process group before returning (left to interpreter exit, Gloo can abort the process).
    assert [json.loads((records / f"after_main_rank{r}.json").read_text()) for r in (0, 1)] == [
        {"process_group": False}
    ] * 2
    assert [r["world_size"] for r in ranks] == [2, 2] and [r["step"] for r in ranks] == [6, 6]
    indices = [{i for batch in r["batches"] for i in batch} for r in ranks]
    assert len(ranks[0]["batches"]) == len(ranks[1]["batches"])
    assert not indices[0] & indices[1]  # disjoint
    assert len(indices[0] | indices[1]) == 400  # every training pair, once

    weights = [torch.load(records / f"weights_rank{r}.pt") for r in (0, 1)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    initial = AutoModelForSeq2SeqLM.from_pretrained(output_dir / "checkpoint-3").state_dict()
    assert any(not torch.equal(initial[k], weights[0][k]) for k in initial)  # training did change them

    test = json.loads((output_dir / "test_results.json").read_text())
    assert test["num_sentences"] == 6  # one prediction per test pair, no padding duplicates
    assert len((output_dir / "test_translations.txt").read_text().splitlines()) == 6
    assert "BLEU = " in result.stdout


def test_a_run_releases_the_ddp_wrapper_before_the_process_group():
    """Destroyed while the DDP wrapper still held it, the group went with the wrapper's reducer, whose destructor
    joins Gloo's threads with the GIL held: the two-process test above hung in 2 runs of 30 that way."""
    from hf_unified_mt.training.run import end_processes

    calls = []
    trainer = SimpleNamespace(model=object(), model_wrapped=object())

    class Accelerator:
        def free_memory(self):
            calls.append("free_memory")

        def end_training(self):
            calls.append(("end_training", trainer.model_wrapped is trainer.model))

    trainer.accelerator = Accelerator()
    end_processes(trainer)
    assert calls == ["free_memory", ("end_training", True)]


@pytest.mark.e2e
@pytest.mark.subprocess
def test_average_checkpoints(trained, tmp_path):
    output_dir, _ = trained
    average_checkpoints = load_script("average_checkpoints")
    averaged_dir = average_checkpoints.main([str(output_dir), "--num_checkpoints", "2", "--output_dir", str(tmp_path)])
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
        assert (averaged_dir / name).is_file(), name

    first = load_file(output_dir / "checkpoint-10" / "model.safetensors")
    second = load_file(output_dir / "checkpoint-20" / "model.safetensors")
    model = AutoModelForSeq2SeqLM.from_pretrained(averaged_dir)
    state = model.state_dict()
    for name in first:
        assert torch.allclose(state[name], (first[name] + second[name]) / 2, atol=1e-6), name
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()  # still tied

    from hf_unified_mt.deployment.inference import translate

    tokenizer = AutoTokenizer.from_pretrained(averaged_dir)
    assert len(translate(model, tokenizer, ["Y dijo Dios.", ""], max_new_tokens=5)) == 2

    # Never written over a model: a checkpoint being averaged, the run directory, or an earlier output.
    weights = (output_dir / "checkpoint-20" / "model.safetensors").read_bytes()
    for target in (output_dir / "checkpoint-20", output_dir, averaged_dir):
        with pytest.raises(SystemExit, match="already holds a model"):
            average_checkpoints.main([str(output_dir), "--num_checkpoints", "2", "--output_dir", str(target)])
    assert (output_dir / "checkpoint-20" / "model.safetensors").read_bytes() == weights


@pytest.mark.e2e
@pytest.mark.subprocess
def test_translate_and_evaluate_scripts(trained, tmp_path, monkeypatch, capsys):
    import io

    output_dir, _ = trained
    translate_script = load_script("translate")
    source = tmp_path / "input.es"
    source.write_text("Y dijo Dios: Sea la luz.\n\nEn el principio.\n", encoding="utf-8")
    translate_script.main(
        [
            str(output_dir),
            "--input",
            str(source),
            "--output",
            str(tmp_path / "out.en"),
            "--num_beams",
            "2",
            "--max_new_tokens",
            "8",
            "--batch_size",
            "2",
            "--no_progress",
        ]
    )
    lines = (tmp_path / "out.en").read_text(encoding="utf-8").split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # order kept, empty line kept, final newline
    assert lines[0] and lines[2]

    monkeypatch.setattr("sys.stdin", io.StringIO("En el principio.\n"))
    translate_script.main([str(output_dir), "--max_new_tokens", "8", "--no_progress"])
    assert capsys.readouterr().out.strip() == lines[2]

    evaluate_script = load_script("score")
    results = evaluate_script.main(
        [
            str(output_dir),
            "--max_samples",
            "6",
            "--max_new_tokens",
            "10",
            "--output_dir",
            str(tmp_path / "eval"),
            "--no_progress",
        ]
    )
    assert results["num_sentences"] == 6 and results["bleu_signature"].startswith("nrefs:1|")
    saved = json.loads((tmp_path / "eval" / "eval_test.json").read_text())
    assert saved["bleu"] == results["bleu"] and saved["bleu_by_source_length"]
    assert len((tmp_path / "eval" / "hypotheses_test.txt").read_text().splitlines()) == 6
    printed = capsys.readouterr().out
    assert "BLEU = " in printed and "chrF = " in printed and "BLEU by source length" in printed


@pytest.mark.e2e
@pytest.mark.subprocess
def test_without_generation_in_evaluation_the_test_split_is_still_translated(tmp_path):
    """--predict_with_generate False: evaluation reports the loss (and selects checkpoints by it), the test scores are
    still BLEU/chrF of generated translations. A model of this package smooths its own loss: the run records the
    smoothing it used."""
    output_dir = tmp_path / "out"
    train(
        output_dir,
        "--arch",
        "unified_transformer",
        "--predict_with_generate",
        "False",
        "--max_steps",
        "4",
        "--eval_steps",
        "2",
        "--save_steps",
        "2",
        "--max_eval_samples",
        "4",
        "--max_test_samples",
        "4",
        "--generation_max_length",
        "20",
        "--num_sample_translations",
        "0",
    )
    results = json.loads((output_dir / "results.json").read_text())
    assert results["test"]["num_sentences"] == 4 and "bleu_signature" in results["test"]
    assert len((output_dir / "test_translations.txt").read_text().splitlines()) == 4
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert any("eval_loss" in entry for entry in state["log_history"])
    assert results["best_eval_loss"] == min(e["eval_loss"] for e in state["log_history"] if "eval_loss" in e)
    assert json.loads((output_dir / "config.json").read_text())["label_smoothing"] == 0.1
    assert results["training_arguments"]["label_smoothing_factor"] == 0.1


@pytest.mark.e2e
@pytest.mark.subprocess
def test_main_command_shape_runs_without_warnings_and_shows_the_time_budget(tmp_path):
    """The README's main command in miniature (a package model, a large max_steps that a time budget ends first,
    one evaluation at the end, best-checkpoint loading, test prediction over several batches, samples, the progress
    bar on): the bar counts the budget's seconds, not steps out of max_steps; best-checkpoint loading knows the
    tied weights; test prediction does not carry a stray max_length into generate(); the reloaded tokenizer decodes
    silently; and nothing else warns."""
    output_dir = tmp_path / "out"
    result = train(
        output_dir,
        "--arch",
        "unified_transformer",
        "--max_source_length",
        "128",
        "--max_target_length",
        "128",
        "--max_steps",
        "100000",
        "--max_train_minutes",
        "0.05",
        "--eval_steps",
        "100000",
        "--save_steps",
        "100000",
        "--max_eval_samples",
        "4",
        "--max_test_samples",
        "24",
        "--per_device_eval_batch_size",
        "6",
        "--generation_num_beams",
        "2",
        "--num_sample_translations",
        "1",
        "--disable_tqdm",
        "False",
    )
    output = (result.stdout + result.stderr).replace("\r", "\n")
    assert "Training (0.05-minute budget)" in output and "/100000" not in output
    assert "training stops after 0.1 minutes, or at max_steps=100000" in output
    assert "There were missing keys" not in output  # the tied embeddings / output projection
    assert "Both `max_new_tokens`" not in output and "Ignoring clean_up_tokenization_spaces" not in output
    # transformers prints its log records as "[transformers] <message>", at its default level only warnings and errors
    warnings = [
        line
        for line in output.splitlines()
        if "WARNING" in line or "Warning" in line or "warn(" in line or line.startswith("[transformers]")
    ]
    assert not warnings, warnings
    generation = json.loads((output_dir / "generation_config.json").read_text())
    assert "max_length" not in generation and generation["max_new_tokens"] == 128
    for saved in output_dir.glob("checkpoint-*/generation_config.json"):  # saved after an evaluation
        assert "max_length" not in json.loads(saved.read_text()), saved
    assert json.loads((output_dir / "results.json").read_text())["test"]["num_sentences"] == 24


def test_bad_data_stops_train_py_with_file_and_line(tmp_path):
    train_script = importlib.import_module("hf_unified_mt.training.run")
    bad = tmp_path / "train.tsv"
    bad.write_text("es\ten\nhola\thello\nsolo\t\n", encoding="utf-8")
    from hf_unified_mt.training.data import DataValidationError

    with pytest.raises(DataValidationError, match=rf"{bad}, line 3: empty target \(column 'en'\)"):
        train_script.main(
            [
                *TINY_RUN,
                "--output_dir",
                str(tmp_path / "out"),
                "--train_file",
                str(bad),
                "--source_field",
                "es",
                "--target_field",
                "en",
                "--max_steps",
                "1",
            ]
        )


def test_arguments_from_yaml_and_command_line(tmp_path):
    from hf_unified_mt.training.arguments import parse_arguments

    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "arch": "marian",
                "learning_rate": 1e-3,
                "max_tokens": 2048,
                "config_overrides": {"d_model": 32},
                "report_to": ["none"],
            }
        )
    )
    model_args, data_args, training_args = parse_arguments(
        [str(config), "--learning_rate", "3e-4", "--output_dir", str(tmp_path / "o"), "--use_cpu"]
    )
    assert model_args.arch == "marian" and json.loads(model_args.config_overrides) == {"d_model": 32}
    assert data_args.max_tokens == 2048
    assert training_args.learning_rate == 3e-4  # the command line wins
    # MT defaults
    assert training_args.label_smoothing_factor == 0.1
    assert training_args.lr_scheduler_type == "inverse_sqrt"
    assert training_args.predict_with_generate and training_args.metric_for_best_model == "bleu"
    assert training_args.load_best_model_at_end and training_args.greater_is_better
    _, _, no_eval = parse_arguments(["--eval_strategy", "no", "--output_dir", str(tmp_path), "--use_cpu"])
    assert not no_eval.load_best_model_at_end
    config.write_text(yaml.safe_dump({"learning_rat": 1.0}))
    with pytest.raises(ValueError, match="unknown option"):
        parse_arguments(["--config", str(config)])


def test_other_architectures_go_through_the_package():
    from hf_unified_mt.training.arguments import DataArguments, ModelArguments
    from hf_unified_mt.training.run import build_model
    from hf_unified_mt.training.tokenization import train_tokenizer

    tokenizer = train_tokenizer(["uno dos tres", "one two three"], vocab_size=30)
    data_args = DataArguments()
    model = build_model(ModelArguments(arch="unified_transformer", preset="tiny"), data_args, tokenizer)
    assert model.config.vocab_size == len(tokenizer) and model.can_generate()
    marian = build_model(ModelArguments(arch="marian", preset="tiny"), data_args, tokenizer)
    assert marian.config.vocab_size == len(tokenizer) and marian.config.decoder_start_token_id == tokenizer.bos_token_id


def test_accelerate_configs_are_valid():
    from accelerate.commands.config.config_args import load_config_from_file

    expected = {"single_gpu": "NO", "multi_gpu_ddp": "MULTI_GPU", "fsdp": "FSDP"}
    for name, distributed_type in expected.items():
        config = load_config_from_file(str(TRAINING / "accelerate_configs" / f"{name}.yaml"))
        assert str(config.distributed_type).endswith(distributed_type)
    fsdp = load_config_from_file(str(TRAINING / "accelerate_configs" / "fsdp.yaml"))
    assert fsdp.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"
