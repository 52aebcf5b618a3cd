"""The ablation study (`hf_unified_mt.analysis.ablation_study`, the command `benchmarks/ablation_study.py`) on a tiny
slice: one real run end to end (train.py, validation curve, test translations, result files), resume skips it, the
report is rebuilt from the files alone; the arms of each comparison differ only in their paper's mechanism; the
statistics."""

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hf_unified_mt
from hf_unified_mt.analysis import ablation_arms as study_arms
from hf_unified_mt.analysis import ablation_report as study_report
from hf_unified_mt.analysis import ablation_study as study
from hf_unified_mt.analysis import provenance, significance


ROOT = Path(__file__).resolve().parent.parent

TINY_SLICE = [
    "--size",
    "tiny",
    "--max_steps",
    "4",
    "--eval_every",
    "2",
    "--save_every",
    "2",
    "--max_train_samples",
    "48",
    "--max_eval_samples",
    "12",
    "--test_subset",
    "6",
    "--tokenizer_vocab_size",
    "300",
    "--bootstrap_samples",
    "20",
    "--threads",
    "1",
    "--seeds",
    "1",
    "--only",
    "004-p1",
]


@pytest.mark.e2e
@pytest.mark.subprocess
def test_one_run_resume_and_report_from_files(tmp_path, capsys):
    argv = TINY_SLICE + ["--results_dir", str(tmp_path / "results"), "--output_dir", str(tmp_path / "out")]
    study.main(argv)
    runs = tmp_path / "results" / "runs"
    record = json.loads((runs / "004-p1-seed1.json").read_text())
    assert record["arm"] == "004-p1" and record["seed"] == 1 and record["updates"] == 4
    assert record["config"]["num_passes"] == 1
    assert len(record["code"]["commit"]) == 40 and isinstance(record["code"]["uncommitted_changes"], bool)
    assert [step for step, _ in record["validation_cross_entropy"]] == [2, 4]
    assert record["resumed_from_updates"] == [] and 0 < record["wall_minutes"]["training"] < 10
    assert all(0 < ce < 10 for _, ce in record["validation_cross_entropy"])
    assert record["test"]["num_verses"] == 6 and record["test"]["bleu_signature"].startswith("nrefs:1")
    with gzip.open(runs / record["test"]["translations"], "rt", encoding="utf-8") as handle:
        assert len(handle.read().rstrip("\n").split("\n")) == 6
    subset = json.loads((tmp_path / "results" / "test_subset.json").read_text())
    assert len(subset["indices"]) == 6 and subset["indices"] == sorted(subset["indices"])
    assert (tmp_path / "results" / "tokenizer-bpe300" / "tokenizer.json").exists()
    capsys.readouterr()

    # A second call skips the finished run and leaves its files as they were.
    before = (runs / "004-p1-seed1.json").stat().st_mtime_ns
    study.main(argv)
    assert "004-p1-seed1] finished earlier: skipped" in capsys.readouterr().out
    assert (runs / "004-p1-seed1.json").stat().st_mtime_ns == before

    # The table is rebuilt from the result files alone.
    for name in ("ablation_table.md", "summary.json"):
        (tmp_path / "results" / name).unlink()
    study.main(argv + ["--report_only"])
    table = (tmp_path / "results" / "ablation_table.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| 004-p1 |"))
    assert f"{record['test']['bleu']:.2f}" in row
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    assert summary["arms"][0]["seeds"] == [1] and summary["comparisons"] == []

    # Results made with another recipe are never mixed into the study.
    with pytest.raises(SystemExit, match="another recipe"):
        study.main([a if a != "4" else "5" for a in argv])


def test_the_command_is_the_library():
    """`benchmarks/ablation_study.py` is thin: its `main` is the library's."""
    spec = importlib.util.spec_from_file_location(
        "mt_benchmark_ablation_study", ROOT / "benchmarks" / "ablation_study.py"
    )
    command = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(command)
    assert command.main is study.main


def test_a_run_records_uncommitted_code_changes_but_not_result_files(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    code, result = tmp_path / "src" / "model.py", tmp_path / "benchmarks" / "results" / "ablations" / "summary.json"
    for path in (code, result):
        path.parent.mkdir(parents=True)
        path.write_text("1\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    result.write_text("2\n")  # every finished run rewrites the report: the code is still the commit's
    assert provenance.code_version(tmp_path) == dict(commit=head, uncommitted_changes=False)
    code.write_text("2\n")
    assert provenance.code_version(tmp_path) == dict(commit=head, uncommitted_changes=True)
    assert provenance.code_version(tmp_path / "not-a-repo") == dict(commit=None, uncommitted_changes=None)


def test_training_time_adds_up_across_resumptions(tmp_path, monkeypatch):
    path, now = tmp_path / "training_clock.json", [1000.0]
    monkeypatch.setattr(study.time, "time", lambda: now[0])
    state = type("State", (), {})()
    first = study.TrainingClock(path)
    now[0] += 60
    state.global_step = 500
    first.on_save(None, state, None)
    now[0] += 25  # work after the last checkpoint, lost when the run is interrupted: trained again, counted once
    resumed = study.TrainingClock(path)
    now[0] += 90
    assert resumed.seconds() == 150 and resumed.resumed_from == [500]
    state.global_step = 1000
    resumed.on_save(None, state, None)
    again = study.TrainingClock(path)
    assert again.seconds() == 150 and again.resumed_from == [500, 1000]
    assert study.TrainingClock(tmp_path / "fresh.json").resumed_from == []


def test_a_schedule_investigation_scales_the_recipe_of_its_arms_only():
    args = study.parse_args(TINY_SLICE)
    longer, warmer = study_arms.ARMS_BY_KEY["004-p1-shared-init-2x"], study_arms.ARMS_BY_KEY["001-xavier-warmup1k"]
    assert study.recipe(study.arm_settings(args, longer)) == dict(study.recipe(args), max_steps=2 * args.max_steps)
    assert study.recipe(study.arm_settings(args, warmer)) == dict(
        study.recipe(args), warmup_steps=round(2.5 * args.warmup_steps)
    )
    assert study.recipe(study.arm_settings(args, study_arms.ARMS_BY_KEY["004-p1"])) == study.recipe(args)
    assert args.max_steps == 4  # the study's own settings are left as they were
    with pytest.raises(ValueError, match="learning_rate"):
        study.arm_settings(args, study_arms.Arm("x", "004", "x", "marian", {}, recipe_factors=dict(learning_rate=2)))


def config_of(arm, size="small"):
    if arm.arch == "marian":
        return None
    return hf_unified_mt.get_config(arm.arch, arm.presets[size], vocab_size=8000, **arm.overrides).to_dict()


SIZED_COMPARISONS = [
    (*comparison, size)
    for size in ("small", "base")
    for comparison in study_arms.COMPARISONS
    if all(size in study_arms.ARMS_BY_KEY[key].presets for key in comparison[1:3])
]


@pytest.mark.parametrize("paper, control, mechanism, claim, size", SIZED_COMPARISONS)
def test_compared_arms_differ_only_in_the_mechanism(paper, control, mechanism, claim, size):
    a, b = study_arms.ARMS_BY_KEY[control], study_arms.ARMS_BY_KEY[mechanism]
    # a "pick" comparison sets two architectures of one size against each other (below); every other is in one paper
    assert b.paper == paper and (a.paper == paper or claim.startswith("pick:"))
    if a.equal_time_with == b.key:  # stage 4 at equal training time: the cheaper network trains longer
        assert a.stage == 4 and set(a.recipe_factors) == {"max_steps"} and not b.recipe_factors
    elif a.recipe_factors != b.recipe_factors:  # a stage-3 comparison of the schedule alone: the network is the same
        assert b.stage == 3 and config_of(a, size) == config_of(b, size)
        return
    if claim.startswith("fidelity: Prime's draws"):  # the same network before and after a change of the code's draws
        assert b.stage == 3 and config_of(a, size) == config_of(b, size)
        return
    if a.arch != b.arch:  # the Transformer of paper 000: same width, depth, FFN and vocabulary
        keys = (
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_ffn_dim",
            "encoder_attention_heads",
            "dropout",
            "vocab_size",
        )
        assert {k: config_of(a, size)[k] for k in keys} == {k: config_of(b, size)[k] for k in keys}
        return
    differing = {k for k, v in config_of(a, size).items() if config_of(b, size).get(k) != v}
    # (`init_law`: DS-Init against Xavier in paper 001's pairs; the init-law investigations of stage 3)
    mechanism_keys = {
        "use_convolution",
        "init_law",
        "decoder_attention_type",
        "num_units",
        "use_bias_module",
        "use_sequential_dependency",
        "encoder_branches",
        "num_passes",
        "connection_type",
        "hard_connections",
        "unit_noise_types",
        "encoder_layer",  # stage 4: the layer type of the Multi-Pass passes
        "unit_layer",  # stage 4: the layer type of MUTE's units ...
        "normalize_before",  # ... Prime units being post-norm
    }  # (noise types: one per unit)
    if 4 in (a.stage, b.stage):  # stage 4's depth comparison (H2): a deeper stack is its factor
        mechanism_keys |= {"encoder_layers", "decoder_layers", "layer_types"}
    assert differing and differing <= mechanism_keys, differing


def test_headline_pairs_run_first_for_every_seed():
    order = [(arm.key, seed) for arm, seed in study_arms.planned_runs([1, 2], {1, 2}, None)]
    headline = {key for _, control, mechanism, _ in study_arms.COMPARISONS[:1] for key in (control, mechanism)}
    first_stage_two = min(i for i, (key, _) in enumerate(order) if study_arms.ARMS_BY_KEY[key].stage == 2)
    assert all(study_arms.ARMS_BY_KEY[key].stage == 1 for key, _ in order[:first_stage_two])
    assert {key for key, seed in order[:first_stage_two] if seed == 1} >= headline
    assert order.index(("000-prime", 1)) < order.index(("000-simple", 2))
    trained = [arm for arm in study_arms.ARMS if arm.same_runs_as is None and arm.stage in (1, 2)]
    assert len(order) == len(set(order)) == 2 * len(trained)
    assert ("000-transformer", 1) not in order  # it reuses 003-single's runs


def test_paired_bootstrap_delta():
    references = [f"the cat sat on mat number {i}" for i in range(40)]
    weak = [f"a dog number {i}" for i in range(40)]
    delta, low, high = significance.paired_bootstrap_delta([weak], [weak], references, samples=50)
    assert delta == low == high == 0.0
    delta, low, high = significance.paired_bootstrap_delta([weak, weak], [references, weak], references, samples=50)
    assert delta > 0 and 0 < low <= delta <= high
    assert significance.verdict(delta, low, high) == "B better"
    assert significance.verdict(-delta, -high, -low) == "B worse"
    assert significance.verdict(0.1, -0.2, 0.4) == "within noise"


@pytest.mark.parametrize("arm", [arm for arm in study_arms.ARMS if arm.same_runs_as], ids=lambda arm: arm.key)
def test_an_arm_reusing_another_arms_runs_is_that_arm(arm, tmp_path):
    """Same architecture, config and size presets as the arm whose runs it reuses, at the sizes it has; the report
    reads them under its own key, and at a size it does not have it has no runs."""
    target = study_arms.ARMS_BY_KEY[arm.same_runs_as]
    assert (arm.arch, arm.overrides) == (target.arch, target.overrides)
    assert arm.presets.items() <= target.presets.items()
    assert config_of(arm) == config_of(target) and config_of(arm, "tiny") == config_of(target, "tiny")
    runs = tmp_path / "runs"
    runs.mkdir()
    record = dict(arm=target.key, seed=1, test=dict(translations="t.txt.gz", num_verses=2))
    (runs / f"{target.key}-seed1.json").write_text(json.dumps(record))
    with gzip.open(runs / "t.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("one\ntwo\n")
    loaded = study_report.load_runs(tmp_path)
    assert loaded[arm.key] == loaded[target.key] and loaded[arm.key][1]["hypotheses"] == ["one", "two"]
    missing = [size for size in target.presets if size not in arm.presets]
    for size in missing:
        (runs / f"{target.key}-seed1.json").write_text(json.dumps(dict(record, recipe=dict(size=size))))
        assert arm.key not in study_report.load_runs(tmp_path)
    assert missing == ["base"]  # 000's Transformer: 003-single at base is not Prime's size


def write_fake_runs(results, args, hypotheses_by_arm: dict[str, list[str]], seeds=(1, 2), bleu=20.0):
    """Result files as finished runs leave them, with the given test translations for every seed (and `bleu` as
    their recorded test BLEU)."""
    runs = results / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for key, hypotheses in hypotheses_by_arm.items():
        for seed in seeds:
            name = f"{key}-seed{seed}"
            record = dict(
                arm=key,
                seed=seed,
                recipe=study.recipe(args),
                test=dict(translations=f"{name}.test.txt.gz", num_verses=len(hypotheses), bleu=bleu),
            )
            (runs / f"{name}.json").write_text(json.dumps(record))
            with gzip.open(runs / f"{name}.test.txt.gz", "wt", encoding="utf-8") as handle:
                handle.write("\n".join(hypotheses) + "\n")


def test_a_third_seed_runs_where_a_pair_is_within_noise(tmp_path, monkeypatch, capsys):
    references = [f"the cat sat on mat number {i}" for i in range(40)]
    weak = [f"a dog number {i}" for i in range(40)]
    results = tmp_path / "results"
    args = study.parse_args(["--results_dir", str(results), "--bootstrap_samples", "50"])
    # 003: identical outputs (within noise); 004: P = 2 far better (decided); 004's stage-3 pair: identical outputs
    # but one seed so far (not due yet).
    write_fake_runs(results, args, {"003-single": weak, "003-dual": weak, "004-p1": weak, "004-p2-hard": references})
    write_fake_runs(results, args, {"004-p1-shared-init": weak, "004-p2-hard-shared-init": weak}, seeds=(1,))
    (results / "test_subset.json").write_text(json.dumps(dict(references=references)))
    planned = [(arm.key, seed) for arm, seed in study.tie_break_runs(args)]
    assert planned == [("003-single", 3), ("003-dual", 3)]

    # --only narrows the extra runs as it narrows the planned ones.
    args.only = ["003-dual"]
    assert [(arm.key, seed) for arm, seed in study.tie_break_runs(args)] == [("003-dual", 3)]

    # `run_missing` skips the finished seeds 1 and 2 and then trains the third seed of both 003 arms.
    args.only = ["003-single", "003-dual"]
    children = fake_children(monkeypatch)
    assert study.run_missing(args) == 2
    assert children == ["003-single:3", "003-dual:3"]
    assert "[003-dual-seed2] finished earlier: skipped" in capsys.readouterr().out


def fake_children(monkeypatch, exit_codes: dict[str, int] | None = None) -> list[str]:
    """Replace the child processes of `run_missing` by stand-ins that finish at once; returns the runs started."""
    started = []

    class Child:
        def __init__(self, argv, **kwargs):
            self.run = argv[argv.index("--run_one") + 1]
            self.returncode = (exit_codes or {}).get(self.run, 0)
            started.append(self.run)

        def wait(self):
            return self.returncode

    monkeypatch.setattr(study.subprocess, "Popen", Child)
    return started


def test_no_third_seed_for_two_arms_that_have_not_learned(tmp_path):
    references = [f"the cat sat on mat number {i}" for i in range(40)]
    weak = [f"a dog number {i}" for i in range(40)]
    results = tmp_path / "results"
    args = study.parse_args(["--results_dir", str(results), "--bootstrap_samples", "50"])
    write_fake_runs(results, args, {"004-p1": weak, "004-p2-hard": weak}, bleu=0.3)
    write_fake_runs(results, args, {"003-single": weak, "003-dual": weak}, bleu=0.3)
    write_fake_runs(results, args, {"003-dual": weak}, bleu=12.0)  # only one arm has not learned: re-seeded
    (results / "test_subset.json").write_text(json.dumps(dict(references=references)))
    assert [(arm.key, seed) for arm, seed in study.tie_break_runs(args)] == [("003-single", 3), ("003-dual", 3)]
    rows = {
        (row["control"], row["mechanism"]): row
        for row in study_report.compare_arms(study_report.load_runs(results), references, samples=50)
    }
    assert rows[("004-p1", "004-p2-hard")]["not_learned"] == ["004-p1", "004-p2-hard"]
    assert rows[("003-single", "003-dual")]["not_learned"] == ["003-single"]
    assert study_report._verdict_text(rows[("004-p1", "004-p2-hard")]) == "none: neither arm has learned (BLEU < 1)"
    assert study_report._verdict_text(rows[("003-single", "003-dual")]) == "within noise (A has not learned: BLEU < 1)"


def test_parallel_runs_start_together_and_a_failure_is_reported_after_all(tmp_path, monkeypatch, capsys):
    args = study.parse_args(
        [
            "--results_dir",
            str(tmp_path / "r"),
            "--output_dir",
            str(tmp_path / "o"),
            "--seeds",
            "1",
            "--stages",
            "1",
            "--only",
            "003-single",
            "003-dual",
            "004-p1",
            "--parallel",
            "2",
        ]
    )
    (tmp_path / "r" / "runs").mkdir(parents=True)
    (tmp_path / "r" / "test_subset.json").write_text(json.dumps(dict(references=["a"])))
    children = fake_children(monkeypatch, exit_codes={"003-dual:1": 3})
    with pytest.raises(SystemExit, match="runs failed: 003-dual-seed1"):
        study.run_missing(args)
    assert children == ["003-single:1", "003-dual:1", "004-p1:1"]  # the failure did not stop the others
    output = capsys.readouterr().out
    assert f"[003-dual-seed1] failed (exit code 3); log: {tmp_path / 'o' / '003-dual-seed1' / 'log.txt'}" in output
    assert all((tmp_path / "o" / f"{key}-seed1" / "log.txt").exists() for key in ("003-single", "003-dual", "004-p1"))


def test_each_size_has_its_recipe_and_results_folder(capsys):
    small, base = study.parse_args([]), study.parse_args(["--size", "base"])
    assert (small.max_steps, small.max_tokens, small.bf16, small.parallel) == (2000, 2500, False, 1)
    assert (base.max_steps, base.max_tokens, base.bf16, base.parallel) == (600, 8192, True, 11)
    assert small.results_dir == study.DEFAULT_RESULTS and base.results_dir.name == "ablations-base"
    assert study.parse_args(["--size", "base", "--max_steps", "50", "--bf16", "false"]).max_steps == 50
    assert not study.parse_args(["--size", "base", "--bf16", "false"]).bf16
    with pytest.raises(SystemExit):
        study.parse_args(["--bf16", "maybe"])
    assert "expected true or false, got 'maybe'" in capsys.readouterr().err
    # Only arms with a base preset are planned at base: not 000's Transformer (the runs of 003-single, at base a
    # different size from Prime) nor the stage-3 investigations of the CPU study.
    planned = {arm.key for arm, _ in study_arms.planned_runs([1], {1, 2, 3}, None, "base")}
    assert "000-transformer" not in planned and not any(study_arms.ARMS_BY_KEY[key].stage == 3 for key in planned)
    assert {"000-prime", "001-dsinit", "002-4units", "003-dual", "004-p2-hard", "ref-marian"} <= planned


@pytest.mark.parametrize("size", ["small", "base"])
def test_the_committed_runs_are_recognised_as_finished(size):
    """Every committed result was made with its size's default recipe (runs recorded before `bf16` was a setting
    count as fp32), so that re-running the command skips them instead of refusing them or training them again."""
    args = study.parse_args(["--size", size])
    records = [json.loads(path.read_text()) for path in sorted((args.results_dir / "runs").glob("*.json"))]
    assert len(records) >= 22
    for record in records:
        expected = study.recipe(study.arm_settings(args, study_arms.ARMS_BY_KEY[record["arm"]]))
        assert study.recorded_recipe(record) == expected, record["run"]


@pytest.mark.parametrize("size", ["small", "base"])
def test_the_study_document_shows_the_tables_of_the_committed_summary(size):
    """docs/ablation_study.md holds, between its markers, exactly what `--report_only` writes from `summary.json`:
    the numbers in the document cannot drift from the result files."""
    args = study.parse_args(["--size", size])
    assert args.report_doc == study.REPORT_DOC == ROOT / "docs" / "ablation_study.md"
    summary = json.loads((args.results_dir / "summary.json").read_text(encoding="utf-8"))
    committed = study_report.generated_block(study.REPORT_DOC.read_text(encoding="utf-8"), size)
    assert committed is not None, f"docs/ablation_study.md lacks the generated block of size {size}"
    assert committed == study_report.report_block(summary, args.results_dir, study.REPORT_DOC)
    assert "](../benchmarks/results/" in committed  # the figure, linked from docs/
    # ... and `summary.json` is what the committed runs give: every run of every arm is counted.
    runs = sorted((args.results_dir / "runs").glob("*.json"))
    counted = {(row["arm"], seed) for row in summary["arms"] for seed in row["seeds"]}
    for path in runs:
        record = json.loads(path.read_text(encoding="utf-8"))
        assert (record["arm"], record["seed"]) in counted, path.name


def test_the_report_rebuilds_only_its_block_of_the_document(tmp_path, capsys):
    doc = tmp_path / "study.md"
    begin, end = study_report.report_markers("small")
    base_begin, base_end = study_report.report_markers("base")
    doc.write_text(
        f"# Study\n\nnarrative\n\n{begin}\nold table\n{end}\n\nmore narrative\n\n{base_begin}\nbase\n{base_end}\n",
        encoding="utf-8",
    )
    assert study_report.update_report_doc(doc, "small", "| new | table |\n")
    assert doc.read_text(encoding="utf-8") == (
        f"# Study\n\nnarrative\n\n{begin}\n| new | table |\n{end}\n\nmore narrative\n\n{base_begin}\nbase\n{base_end}\n"
    )
    assert study_report.generated_block(doc.read_text(encoding="utf-8"), "base") == "base\n"
    # A document without the markers is left alone, and the report says so.
    plain = tmp_path / "plain.md"
    plain.write_text("text\n", encoding="utf-8")
    assert not study_report.update_report_doc(plain, "small", "| t |\n")
    assert plain.read_text(encoding="utf-8") == "text\n" and "has no generated block" in capsys.readouterr().out
    # Results elsewhere (tests, other folders) never rewrite the repository's document unless asked to.
    assert study.parse_args(["--size", "tiny"]).report_doc is None
    assert study.parse_args(["--results_dir", str(tmp_path)]).report_doc is None
    assert study.parse_args(["--results_dir", str(tmp_path), "--report_doc", str(doc)]).report_doc == doc


def test_the_report_shows_the_measured_training_cost_of_its_size_only(tmp_path):
    """With `training_cost.json` of the study's size beside the results, the arms table gains the cost column (an arm
    not measured shows a dash); measured at another size, it is ignored."""
    measured = dict(
        size="small",
        reference="000-prime",
        machine=dict(processor="x86_64", cpus=2),
        threads=2,
        commit="0123456789abcdef",
        arms=[dict(arm="000-prime", ratio=1.0), dict(arm="002-prime-4units", ratio=2.31)],
    )
    (tmp_path / "training_cost.json").write_text(json.dumps(measured))
    assert study_report.measured_training_cost(tmp_path, "base") is None
    cost = study_report.measured_training_cost(tmp_path, "small")
    assert cost["ratios"] == {"000-prime": 1.0, "002-prime-4units": 2.31}
    row = dict(
        label="x", num_parameters=1e6, seeds=[1], updates=2000, epochs=2.9, validation_ce=(3.0, float("nan")),
        bleu=(20.0, float("nan")), chrf=(40.0, float("nan")), training_minutes=40.0,
    )  # fmt: skip
    summary = dict(
        arms=[dict(row, arm="002-prime-4units", cost_ratio=2.31), dict(row, arm="002-4units", cost_ratio=None)],
        comparisons=[],
        hardware={},
        bleu_signature="b",
        chrf_signature="c",
        test_subset="t",
        training_cost={key: measured[key] for key in ("reference", "machine", "threads", "commit")},
    )
    table = study_report.format_tables(summary)
    assert "| cost × 000-prime |" in table.splitlines()[0]
    assert table.splitlines()[2].endswith("| 2.31 |") and table.splitlines()[3].endswith("| – |")
    assert "measured side by side" in table and "commit 0123456" in table
    assert "cost ×" not in study_report.format_tables(dict(summary, training_cost=None))


@pytest.mark.subprocess
def test_training_cost_times_every_stage_four_arm_side_by_side(tmp_path):
    """`benchmarks/training_cost.py` at tiny size: every stage-4 arm and control timed, the reference at ratio 1."""
    output = tmp_path / "cost.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "training_cost.py"), "--size", "tiny", "--repeats", "1"]
    command += ["--updates-per-round", "1", "--batch", "2", "--threads", "1", "--output", str(output)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    result = json.loads(output.read_text())
    timed = {row["arm"]: row for row in result["arms"]}
    # an equal-time arm is another stage-4 arm's network trained for more updates: timed under that arm
    stage_four = {arm.key for arm in study_arms.ARMS if arm.stage == 4 and arm.equal_time_with is None}
    assert not {arm.key for arm in study_arms.ARMS if arm.equal_time_with} & set(timed)
    assert stage_four <= set(timed) and {"000-prime", "002-4units", "003-single"} <= set(timed)
    assert timed["000-prime"]["ratio"] == 1.0
    assert all(row["seconds_per_update"] > 0 and row["parameters"] > 0 for row in timed.values())
    assert timed["002-prime-4units"]["parameters"] > timed["002-prime-1unit"]["parameters"]
    bad = [sys.executable, str(ROOT / "benchmarks" / "training_cost.py"), "--arms", "000-prime", "no-such-arm"]
    refused = subprocess.run(bad, capture_output=True, text=True)
    assert refused.returncode == 2 and "unknown arm 'no-such-arm'" in refused.stderr


@pytest.mark.parametrize("arm", [arm for arm in study_arms.ARMS if arm.equal_time_with], ids=lambda arm: arm.key)
def test_equal_time_arms_train_for_the_measured_cost_ratio(arm):
    """An equal-time arm's update factor is the committed side-by-side measurement (`benchmarks/training_cost.py`):
    the dearer arm's seconds per update over those of the arm's own network (the arm without the factor)."""
    measured = json.loads((ROOT / "benchmarks" / "results" / "ablations" / "training_cost.json").read_text())
    seconds = {row["arm"]: row["seconds_per_update"] for row in measured["arms"]}
    same_network = [
        other.key
        for other in study_arms.ARMS
        if not other.recipe_factors
        and (other.arch, other.presets.get("small"), other.overrides) == (arm.arch, arm.presets["small"], arm.overrides)
        and other.key in seconds  # (000-prime-authors-init is 000-prime's network at a later commit, not measured)
    ]
    assert len(same_network) == 1
    ratio = seconds[arm.equal_time_with] / seconds[same_network[0]]
    assert arm.recipe_factors["max_steps"] == pytest.approx(ratio, abs=0.01)


def test_a_time_budget_stops_every_run_at_one_count_from_the_second_half_rates():
    """`common_stop_updates`: the slowest run's reach at its recent rate (the slow first updates left out), a
    multiple of the validation interval, never before the runs can read it, never past `--max_steps`."""
    history = {
        "a": [[0, 0], [10, 10], [20, 30], [30, 50], [40, 70]],  # 1 update/s at first, then 2
        "b": [[0, 0], [10, 20], [20, 40], [30, 60], [40, 80]],
    }
    assert study.common_stop_updates(history, deadline=100, every=20, max_steps=1000) == (180, {"a": 2.0, "b": 2.0})
    assert study.common_stop_updates(history, deadline=100, every=20, max_steps=150)[0] == 150
    assert study.common_stop_updates(history, deadline=41, every=20, max_steps=1000)[0] == 140  # 80 + 50, rounded up


def test_a_run_of_a_time_budget_reports_progress_and_stops_at_the_decided_count(tmp_path):
    from types import SimpleNamespace

    progress, decision = tmp_path / "progress.json", tmp_path / "decision.json"
    callback = study.CommonStop(progress, decision)
    stopped = []
    for step in range(1, 41):
        if step == 15:
            decision.write_text(json.dumps(dict(updates=30)))
        control = SimpleNamespace(should_training_stop=False)
        callback.on_step_end(None, SimpleNamespace(global_step=step), control)
        if control.should_training_stop:
            stopped.append(step)
    assert stopped[0] == 30 and json.loads(progress.read_text())["update"] == 40


def test_a_time_budget_starts_every_run_together_or_refuses(tmp_path):
    argv = ["--results_dir", str(tmp_path / "r"), "--output_dir", str(tmp_path / "o"), "--seeds", "1"]
    argv += ["--time_budget_minutes", "5"]
    args = study.parse_args(argv + ["--only", "003-single", "003-dual", "--parallel", "1"])
    with pytest.raises(SystemExit, match=r"--time_budget_minutes: --parallel 1 < the 2 runs to start together"):
        study.run_missing(args)
    args = study.parse_args(argv + ["--only", "000-prime-eqtime-8x8", "--parallel", "2"])
    with pytest.raises(SystemExit, match="000-prime-eqtime-8x8 scales the schedule"):
        study.run_missing(args)


@pytest.mark.e2e
@pytest.mark.subprocess
def test_runs_under_one_time_budget_stop_at_one_update_count(tmp_path):
    """Two tiny runs started together under `--time_budget_minutes`: both stop at the count written in the decision,
    a multiple of the validation interval, recorded as their `max_steps` (a run of that many updates)."""
    argv = list(TINY_SLICE)
    argv[argv.index("--max_steps") + 1] = "100000"
    argv[argv.index("--eval_every") + 1] = "10"
    argv[argv.index("--save_every") + 1] = "100000"
    argv = argv[: argv.index("--only")] + ["--only", "004-p1", "004-p2-hard", "--parallel", "2"]
    argv += ["--time_budget_minutes", "1.1", "--results_dir", str(tmp_path / "r"), "--output_dir", str(tmp_path / "o")]
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ablation_study.py"), *argv], check=True, timeout=600)
    decided = json.loads((tmp_path / "o" / "common_stop.json").read_text())
    assert decided["updates"] % 10 == 0 and set(decided["updates_per_second"]) == {"004-p1-seed1", "004-p2-hard-seed1"}
    for key in ("004-p1", "004-p2-hard"):
        record = json.loads((tmp_path / "r" / "runs" / f"{key}-seed1.json").read_text())
        assert record["updates"] == record["recipe"]["max_steps"] == decided["updates"]
        assert record["validation_cross_entropy"][-1][0] == decided["updates"]
