"""The benchmarks (`benchmarks/`, their harness `benchmarks/harness/`, the finished studies' tables
`benchmarks/studies/tables.py`): each script end to end in a quick mode where it has one (the CPU inference benchmark
against CTranslate2 in its `--quick` mode, tiny models, one round), and every committed
table of the docs regenerated from its committed JSON. Checks that the scripts run and write what they say; no speed
is asserted (speed targets belong in the benchmarks' tables)."""

import importlib.util
import json
import os
import statistics
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import hf_unified_mt
from mt_checks import ROOT, benchmark_script


SCRIPT = ROOT / "benchmarks" / "inference_vs_ctranslate2.py"


def committed_result(name: str) -> dict:
    """The committed result JSON `benchmarks/results/<name>`, read."""
    return json.loads((ROOT / "benchmarks" / "results" / name).read_text())


def run_benchmark(*arguments: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--threads", "1", *arguments],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=environment,
        timeout=600,
    )


@pytest.mark.subprocess
def test_quick_run_times_every_backend_against_ctranslate2(tmp_path):
    pytest.importorskip("ctranslate2")
    output = tmp_path / "result.json"
    result = run_benchmark("--quick", "--output", str(output))
    document = json.loads(output.read_text())
    names = [row["name"] for row in document["rows"]]
    assert names[0].startswith("main job") and len(names) == 1 + len(hf_unified_mt.ARCHITECTURES)
    for row in document["rows"]:
        assert set(row["settings"]) == {"greedy_b1", "beam2_b4", "beam2_b6"}
        for setting in row["settings"].values():
            assert {"pytorch-fp32", "pytorch-int8", "marian/pytorch-fp32", "marian/ct2-fp32", "marian/ct2-int8"} <= set(
                setting
            )
            assert setting["marian/ct2-int8"]["vs_ct2_int8"] == 1.0
            assert all(entry["tokens_per_second"] > 0 and len(entry["rounds"]) == 1 for entry in setting.values())
            assert all(entry["multiply_adds_per_second"] > 0 for entry in setting.values())
        work = row["multiply_adds_per_call"]
        assert work["beam2_b4"]["model"] > work["greedy_b1"]["model"] > 0 and work["greedy_b1"]["marian"] > 0
    peak = document["int8_gemm_peak_multiply_adds_per_second"]
    if importlib.util.find_spec("onnxruntime") is not None:  # the limit every backend's share is read against
        assert peak > 0
        entry = document["rows"][0]["settings"]["greedy_b1"]["marian/ct2-int8"]
        assert entry["share_of_int8_peak"] == pytest.approx(entry["multiply_adds_per_second"] / peak)
    machine = document["machine"]
    assert machine["cpu"] and machine["threads"] == 1 and machine["versions"]["ctranslate2"]
    assert document["provenance"]["command"].startswith("python benchmarks/inference_vs_ctranslate2.py")
    assert isinstance(document["machine_busy"], bool)
    assert "| main job (unified_transformer) | pytorch-fp32 |" in result.stdout
    assert document["table"] in result.stdout


def test_the_history_holds_the_table_against_the_int8_peak():
    document = committed_result("inference_vs_ctranslate2_limit.json")
    assert document["int8_gemm_peak_multiply_adds_per_second"] > 0 and not document["machine_busy"]
    assert {"greedy_b1", "beam4_b16", "beam4_b64"} == set(document["rows"][0]["settings"])
    assert document["table"] in (ROOT / "docs" / "history.md").read_text()


def test_ours_and_ctranslate2_are_compared_each_on_its_faster_thread_count():
    """With `--threads` above 1 our fastest backend and CTranslate2 int8 also run on one thread; the README compares
    each on the thread count on which it was faster (medians), by the median per-round ratio, and marks one-thread
    figures."""
    module = benchmark_script("inference_vs_ctranslate2")
    times = {
        "onnx-native-int8": [2.0, 2.0, 2.2],
        "onnx-native-int8-1thread": [3.0, 3.0, 3.0],
        "marian/ct2-int8": [4.0, 4.4, 4.0],
        "marian/ct2-int8-1thread": [1.0, 1.1, 1.0],
    }
    best = module.best_against_best(times, tokens=20)
    assert best["ours"] == "onnx-native-int8" and best["ct2"] == "marian/ct2-int8-1thread"
    assert best["vs_ct2_int8"] == pytest.approx(0.5) and best["ct2_tokens_per_second"] == pytest.approx(20.0)
    assert module.best_against_best({"marian/ct2-int8": [1.0]}, tokens=20) is None

    def result(rounds):
        seconds = statistics.median(rounds)
        return dict(
            tokens_per_second=20 / seconds, vs_ct2_int8=4.0 / seconds, share_of_int8_peak=0.01 / seconds, rounds=rounds
        )

    settings = {name: result(values) for name, values in times.items()}
    settings["pytorch-fp32"] = result([4.0, 4.0, 4.0])  # before: against the same CTranslate2 (one thread) as after
    document = dict(
        settings=dict(threads=2),
        rows=[dict(name="m", settings={"greedy_b1": settings}, best_against_best={"greedy_b1": best})],
        int8_gemm_peak_multiply_adds_per_second=1e9,
    )
    table = module.summary_table(document)
    assert "| m | 5 → 10 (CT2 int8: 20¹) | 0.25 → **0.50** |" in table and "¹ on one thread" in table
    assert "| 0.5% / 1.0% |" in module.limit_table(document)


def test_int8_gemm_peak_is_measured_in_onnx_runtime():
    pytest.importorskip("onnxruntime")
    module = benchmark_script("inference_vs_ctranslate2")
    peak = module.int8_gemm_peak(threads=1, size=128, repeats=2)
    assert 1e6 < peak < 1e13  # multiply-adds per second: between a very slow core and far beyond any CPU


def test_multiply_adds_of_a_call_grow_with_beams_and_tokens():
    module = benchmark_script("inference_vs_ctranslate2")
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(
        hf_unified_mt.get_config("unified_transformer", "tiny", vocab_size=99)
    ).eval()
    ids = torch.randint(4, 99, (2, 7))
    mask = torch.ones_like(ids)
    greedy, beams = (module.multiply_adds(model, ids, mask, beams, 3) for beams in (1, 2))
    longer = module.multiply_adds(model, ids, mask, 1, 6)
    assert 0 < greedy < beams and greedy < longer


def test_the_history_holds_the_search_graphs_side_by_side_with_the_native_loop():
    """The docs table of the search graphs against the native loop is `onnx_graphs_ab.py --table` of the committed
    JSONs, which measured the same export on both sides and decoded the same tokens."""
    module = benchmark_script("onnx_graphs_ab")
    documents = [committed_result("onnx_search_graphs_ab.json"), committed_result("onnx_search_graphs_ab_1thread.json")]
    for document in documents:
        assert document["before"] == document["after"]
        assert document["decoding"] == {"before": "native loop", "after": "search graphs"}
        assert all(row["same_tokens"] for row in document["settings"].values())
    assert module.table(documents) in (ROOT / "docs" / "history.md").read_text()


def test_the_history_holds_the_lean_step_graphs_side_by_side():
    """The docs table of the lean step graphs is `onnx_graphs_ab.py --table` of the committed JSONs: two exports (the
    commit before and after), both as search graphs, int8; and the document's BLEU figures are the committed JSON's,
    float32 writing PyTorch's translations."""
    module = benchmark_script("onnx_graphs_ab")
    documents = [committed_result("onnx_lean_step_ab.json"), committed_result("onnx_lean_step_ab_1thread.json")]
    for document in documents:
        assert document["before"] != document["after"] and document["int8"]
        assert document["decoding"] == {"before": "search graphs", "after": "search graphs"}
    text = (ROOT / "docs" / "history.md").read_text()
    assert module.table(documents) in text
    assert_document_quotes_backend_bleu(text, "backend_bleu_lean_step.json")


def test_the_history_holds_the_lean_graphs_side_by_side():
    """The docs table of the transposes removed and the unfused LayerNorm is `onnx_graphs_ab.py --table` of the
    committed JSONs: the commit before (with ONNX Runtime's every optimisation, as the package ran it then) against
    this one's export, and this export alone with and without the fusion; int8 search graphs; and the document's BLEU
    figures are the committed JSON's, float32 writing PyTorch's translations."""
    module = benchmark_script("onnx_graphs_ab")
    names = ["onnx_lean_graphs_ab.json", "onnx_lean_graphs_ab_1thread.json", "onnx_skip_layer_norm_ab.json"]
    documents = [committed_result(name) for name in names]
    for document in documents:
        assert document["int8"] and document["machine"]["load_average_before"] < 0.5  # int8, on a quiet machine
        assert document["decoding"] == {"before": "search graphs, all optimisations", "after": "search graphs"}
    assert [document["before"] != document["after"] for document in documents] == [True, True, False]
    text = (ROOT / "docs" / "history.md").read_text()
    assert module.table(documents) in text
    assert_document_quotes_backend_bleu(text, "backend_bleu_lean_graphs.json")


def test_the_history_holds_the_padded_generator_side_by_side():
    """The docs table of Prime's kernels from one padded product is `onnx_graphs_ab.py --table` of the committed JSONs:
    two exports (the commit before and after), int8 search graphs, the same tokens at every setting."""
    module = benchmark_script("onnx_graphs_ab")
    names = ["onnx_padded_generator_ab.json", "onnx_padded_generator_ab_1thread.json"]
    documents = [committed_result(name) for name in names]
    for document in documents:
        assert document["before"] != document["after"] and document["int8"]
        assert all(row["same_tokens"] for row in document["settings"].values())
    assert [document["machine"]["threads"] for document in documents] == [2, 1]
    assert module.table(documents) in (ROOT / "docs" / "history.md").read_text()


def assert_document_quotes_backend_bleu(text: str, name: str) -> None:
    """Every BLEU figure of a committed test-verse result is in the document, and float32 ONNX Runtime wrote exactly
    PyTorch's translations."""
    for row in committed_result(name)["rows"]:
        if "float32" in row["backend"]:
            assert row["lines_differing_from_pytorch"] == 0
        assert f"{row['bleu']:.2f}" in text, row


def harness_module():
    """The benchmarks' harness (`benchmarks/harness/`)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("harness")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_onnx_graphs_ab_times_two_exports_side_by_side(tmp_path, capsys):
    """`onnx_graphs_ab.py` decodes with two export folders in one process, alternating within every round, and
    reports tokens/s, the after/before speed-up and whether both decoded the same tokens."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from conftest import make_tokenizer, tiny_config
    from hf_unified_mt.deployment.onnx_export import export_onnx

    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(tiny_config("unified_transformer", "tiny")).eval()
    export_onnx(model, tmp_path / "export", make_tokenizer())
    module = benchmark_script("onnx_graphs_ab")
    output = tmp_path / "ab.json"
    result = module.main(
        [
            str(tmp_path / "export"),
            str(tmp_path / "export"),
            "--float32",
            "--threads",
            "1",
            "--rounds",
            "1",
            "--new-tokens",
            "3",
            "--output",
            str(output),
        ]
    )
    assert json.loads(output.read_text()) == result
    assert set(result["settings"]) == {"greedy_b1", "beam4_b16", "beam4_b64"}
    for row in result["settings"].values():
        assert row["same_tokens"] and row["speedup"] > 0 and len(row["rounds"]["after"]) == 1
    assert "after/before" in capsys.readouterr().out


def test_readme_table_is_the_committed_benchmark_result():
    """The deployment tables (docs/deployment.md, summarised in the README) are `--summary` of the committed JSON
    (regenerate: `python benchmarks/inference_vs_ctranslate2.py --summary`), so the numbers they show are the ones
    measured."""
    module = benchmark_script("inference_vs_ctranslate2")
    document = committed_result("inference_vs_ctranslate2.json")
    assert not document["machine_busy"]
    assert module.summary_table(document) in (ROOT / "docs" / "deployment.md").read_text()
    assert module.limit_table(document) in (ROOT / "docs" / "deployment.md").read_text()
    assert all("onnx-native-int8" in setting for row in document["rows"] for setting in row["settings"].values())


def test_the_history_holds_two_runs_of_the_benchmark_side_by_side():
    """The docs table of two runs back to back is `--compare-runs` of the committed JSONs, both quiet, of the same
    workload."""
    module = benchmark_script("inference_vs_ctranslate2")
    documents = [
        committed_result("inference_vs_ctranslate2_lean_step.json"),
        committed_result("inference_vs_ctranslate2_rerun.json"),
    ]
    assert not any(document["machine_busy"] for document in documents)
    workloads = [{k: v for k, v in document["settings"].items() if k != "output"} for document in documents]
    assert workloads[0] == workloads[1]
    table = module.runs_table(documents)
    assert table.splitlines()[2].startswith("| main job (unified_transformer) | ")
    assert table in (ROOT / "docs" / "history.md").read_text()


def test_training_efficiency_measures_both_precisions_against_their_peaks(tmp_path, capsys):
    module = benchmark_script("training_efficiency")
    output = tmp_path / "efficiency.json"
    module.main(["--models", "tiny", "--threads", "1", "--repeats", "1", "--gemm-size", "64"]
                + ["--max-tokens", "128", "--length", "8", "--output", str(output)])  # fmt: skip
    result = json.loads(output.read_text())
    assert set(result["gemm_peak_gflops"]) == {"float32", "bfloat16"}
    assert set(result["models"]) == {"tiny/prime", "tiny/marian"}
    for row in result["models"].values():
        assert row["flops_per_step"] > 0 and row["bf16_speedup"] > 0
        assert 0 < row["float32"]["share_of_peak"] and 0 < row["bfloat16"]["share_of_peak"]
    for precision in ("float32", "bfloat16"):
        assert set(result["new_shapes"][precision]) == {"fixed_shape", "new_shapes", "same_shapes_again"}
    assert "| Prime `tiny` |" in capsys.readouterr().out


def test_training_efficiency_table_in_the_docs_is_generated_from_the_committed_json():
    module = benchmark_script("training_efficiency")
    result = committed_result("training_efficiency.json")
    assert result["gemm_peak_gflops"]["bfloat16"] > 0 and "main_job/prime" in result["models"]
    assert module.table(result) in (ROOT / "docs" / "benchmarks.md").read_text()


FINISHED_STUDIES = {  # result -> the document that quotes its table (`benchmarks/studies/tables.py NAME`)
    "main_job_candidates": "ablation_study.md",
    "main_job_recipe_search": "history.md",
    "main_job_decoding": "history.md",
    "main_job_decoding_round2": "history.md",
    "main_job_decoding_round3": "history.md",
    "main_job_runs": "benchmarks.md",
    "onnx_step_floor": "history.md",
    "gpu_step_profile": "benchmarks.md",
    "gpu_training_16384": "benchmarks.md",
    "gpu_training_65536": "benchmarks.md",
    "gpu_decoding": "deployment.md",
    "training_step_profile": "history.md",
    "training_step_changes": "benchmarks.md",
    "decoding_profiles": "history.md",
}


@pytest.mark.parametrize("name", sorted(FINISHED_STUDIES))
def test_the_docs_hold_the_tables_of_the_finished_studies(name, capsys):
    """A finished study's table is quoted from its committed JSON, not retyped: `benchmarks/studies/tables.py NAME`
    prints it (its measuring script is retired; docs/history.md names the commit that holds it)."""
    module = benchmark_script("studies/tables")
    module.main([name])
    printed = capsys.readouterr().out
    assert printed == module.table(name) + "\n"
    assert module.table(name) in (ROOT / "docs" / FINISHED_STUDIES[name]).read_text()


def test_the_finished_studies_records_hold_what_their_tables_read():
    full = committed_result("main_job_full_validation.json")
    runs = committed_result("main_job_runs.json")
    assert all(row["verses"] == 928 for row in full["runs"])
    assert {(row["setting"], row["seed"]) for row in full["runs"]} <= {
        (row["setting"], row["seed"]) for row in runs["runs"]
    }
    assert all(row["bf16"] == row["setting"].startswith("bf16") for row in runs["runs"])
    floor = committed_result("onnx_step_floor.json")
    assert floor["threads"] == 1 and not floor["machine_busy"]
    for name in ("main_job_candidates", "main_job_recipe_search"):
        document = committed_result(f"{name}.json")
        assert {row["seed"] for row in document["runs"]} == {1, 2} and document["comparisons"]
    gpu = committed_result("gpu_training_and_decoding.json")
    assert gpu["device"] and gpu["training"]["prime"]["timed_updates"] > 0
    assert committed_result("gpu_training_and_decoding_65536.json")["settings"]["max_tokens"] == "65536"
    assert list(committed_result("training_step_changes.json")["variants"])[-1].endswith("(today)")
    tables = benchmark_script("studies/tables")
    profiles = [committed_result(f"{name}.json")["profile"] for _, name in tables.DECODING_PROFILES]
    searched = [profile[-1].get("search_graph", False) for profile in profiles]  # ONNX Runtime int8, per loop
    assert searched == [False, False, True] * 2
    with pytest.raises(SystemExit, match="no finished study wrote"):
        benchmark_script("studies/tables").table("speed_vs_marian")


def test_operator_counts_cover_every_architecture_and_reproduce_the_committed_prime_row():
    """`operator_counts.py`: the committed table has every architecture; the count is deterministic, so a fresh count
    of the Unified Transformer and its MarianMT gives the committed numbers (a change to the training step's
    operators must regenerate the JSON), and the table prints from the JSON."""
    operator_counts = benchmark_script("operator_counts")
    committed = committed_result("operator_counts.json")
    assert sorted(committed["rows"]) == sorted(hf_unified_mt.ARCHITECTURES)
    fresh = operator_counts.measure(["unified_transformer"], committed["preset"])["rows"]["unified_transformer"]
    row = committed["rows"]["unified_transformer"]
    for side in ("model", "marian"):
        assert fresh[side]["forward_backward"] == row[side]["forward_backward"], side
        assert fresh[side]["optimizer_step"]["fused"] == row[side]["optimizer_step"]["fused"], side
    assert f"{row['ratio']:.2f}x" in operator_counts.table(committed)


PAPER_COST_RESULTS = {
    "generation_throughput": ["generation_throughput_base", "generation_throughput_table3"],
    "deep_transformer_decoding": ["deep_transformer_decoding", "deep_transformer_decoding_small"],
    "multi_unit_speed": ["multi_unit_speed"],
    "multi_encoder_presets": ["multi_encoder_presets"],
    "multi_pass_cost": ["multi_pass_cost"],
}


@pytest.mark.parametrize("measure", sorted(PAPER_COST_RESULTS))
def test_paper_costs_render_the_tables_of_every_committed_result(measure, capsys):
    """`paper_costs.py <measure> --table`: the committed JSON of each paper's cost renders the tables the measurement
    printed, one row per measured configuration."""
    module = benchmark_script("paper_costs")
    for name in PAPER_COST_RESULTS[measure]:
        path = ROOT / "benchmarks" / "results" / f"{name}.json"
        assert module.main([measure, "--table", "--output", str(path)]) is None
        printed = capsys.readouterr().out
        assert printed == module.TABLES[measure](committed_result(f"{name}.json")) + "\n"
        document = committed_result(f"{name}.json")
        rows = (
            document.get("rows") or document.get("generate") or [row for run in document["runs"] for row in run["rows"]]
        )
        assert printed.count("\n") > len(rows)


def test_paper_costs_measure_and_record_the_multi_pass_cost_at_tiny_size(tmp_path, capsys):
    """One paper's cost measured end to end at tiny size: every variant timed, the machine and provenance recorded in
    the harness's schema, and `--table` of the JSON prints what the run printed."""
    module = benchmark_script("paper_costs")
    output = tmp_path / "multi_pass_cost.json"
    options = ["--preset", "tiny", "--vocab-size", "60", "--source-length", "6", "--new-tokens", "2", "--repeats", "1"]
    options += ["--batch-sizes", "1", "--beams", "1", "--threads", "1", "--device", "cpu", "--output", str(output)]
    result = module.main(["multi_pass_cost", *options])
    printed = capsys.readouterr().out
    assert json.loads(output.read_text()) == result
    assert {row["variant"] for row in result["rows"]} == {"P=1", "P=2", "P=3", "P=3, read pass 1", "P=3, read pass 2"}
    assert all(row["seconds"] > 0 for row in result["rows"])
    assert set(result["machine"]) >= {"cpu", "usable_cpus", "threads", "versions", "load_average_before"}
    assert result["machine"]["threads"] == 1 and result["machine"]["versions"]["torch"] == torch.__version__
    assert {"command", "date", "commit", "uncommitted_changes"} <= set(result["provenance"])
    module.main(["multi_pass_cost", "--table", "--output", str(output)])
    assert capsys.readouterr().out in printed


def test_the_harness_times_calls_in_interleaved_rounds_after_a_warm_up():
    harness = harness_module()
    order = []
    times = harness.interleaved_times({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=2)
    assert order == ["a", "b"] * 3 and [len(values) for values in times.values()] == [2, 2]
    assert set(harness.median_times({"a": lambda: None}, repeats=3)) == {"a"}


def test_no_benchmark_script_imports_another_script():
    """Scripts share code through the harness only (CONTRIBUTING: a script never loads another script)."""
    folder = ROOT / "benchmarks"
    scripts = {path.stem for path in folder.glob("*.py")} | {path.stem for path in folder.glob("studies/*.py")}
    for path in [*folder.glob("*.py"), *folder.glob("studies/*.py"), *folder.glob("harness/*.py")]:
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] in (["import"], ["from"]) and len(words) > 1:
                assert words[1].split(".")[0] not in scripts, f"{path.relative_to(ROOT)}: {line}"


@pytest.mark.subprocess
def test_quick_runs_twice_and_reports_medians_and_ranges_with_per_row_int8(tmp_path):
    """`--runs 2`: the whole interleaved measurement twice back to back, each run's cells kept, the headline cells
    (the ratios and tokens/s of the deployment tables) the median of the runs' with their range; `--summary` prints
    the ratios as `median (min-max)`; per-row int8 (ONNX Runtime search graphs) is timed beside dynamic int8 in every
    run, and `--compare-runs` of the JSON compares its runs."""
    pytest.importorskip("ctranslate2")
    pytest.importorskip("onnxruntime")
    module = benchmark_script("inference_vs_ctranslate2")
    output = tmp_path / "runs.json"
    run_benchmark("--quick", "--runs", "2", "--output", str(output))
    document = json.loads(output.read_text())
    runs = document["runs"]
    assert len(runs) == 2 and "rows" not in document and document["settings"]["runs"] == 2
    names = [row["name"] for row in document["medians"]]
    assert names == [row["name"] for row in runs[0]["rows"]] == [row["name"] for row in runs[1]["rows"]]
    assert all(run["int8_gemm_peak_multiply_adds_per_second"] > 0 and run["table"] for run in runs)
    for index, row in enumerate(document["medians"]):
        assert set(row["settings"]) == {"greedy_b1", "beam2_b4", "beam2_b6"}
        for setting, cells in row["settings"].items():
            for run in runs:
                entry = run["rows"][index]["settings"][setting][module.PER_ROW]
                assert entry["tokens_per_second"] > 0 and len(entry["rounds"]) == 1
            best = [run["rows"][index]["best_against_best"][setting] for run in runs]
            assert cells["ours"] == [b["ours"] for b in best] and cells["ct2"] == [b["ct2"] for b in best]
            per_run = {
                "vs_ct2_int8": [b["vs_ct2_int8"] for b in best],
                "ours_tokens_per_second": [b["ours_tokens_per_second"] for b in best],
                "ct2_tokens_per_second": [b["ct2_tokens_per_second"] for b in best],
                "before_tokens_per_second": [
                    run["rows"][index]["settings"][setting]["pytorch-fp32"]["tokens_per_second"] for run in runs
                ],
                "per_row_tokens_per_second": [
                    run["rows"][index]["settings"][setting][module.PER_ROW]["tokens_per_second"] for run in runs
                ],
            }
            for key, values in per_run.items():
                expected = dict(median=(values[0] + values[1]) / 2, min=min(values), max=max(values))
                assert cells[key] == pytest.approx(expected), key
            assert cells["per_row_tokens_per_second"]["min"] > 0

    summary = run_benchmark("--summary", "--output", str(output)).stdout
    ratio = document["medians"][0]["settings"]["greedy_b1"]["vs_ct2_int8"]
    assert f"**{ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})** |" in summary
    assert summary.startswith(module.summary_table(document)) and "Medians over 2 runs" in summary
    assert module.per_row_table(document) in summary and "per-row int8 tokens/s" in summary
    compared = module.runs_table([document]).splitlines()
    assert "per-row int8 × CT2 int8 per run" in compared[0] and len(compared) == 2 + len(names)
    first = [module.compared(run["rows"][0], "greedy_b1")[2] for run in runs]
    assert compared[2].startswith(f"| {names[0]} | {first[0]:.2f}, {first[1]:.2f} |")


def test_the_deployment_document_holds_the_three_runs_with_their_ranges_and_per_row_int8():
    """The three-run table of docs/deployment.md (medians over three back-to-back runs with their ranges, and the
    per-row int8 table) is `--summary` of the committed `inference_vs_ctranslate2_runs3.json` (issue 64)."""
    module = benchmark_script("inference_vs_ctranslate2")
    document = committed_result("inference_vs_ctranslate2_runs3.json")
    assert len(document["runs"]) == 3
    text = (ROOT / "docs" / "deployment.md").read_text()
    assert module.summary_table(document) in text
    assert module.per_row_table(document) in text


@pytest.mark.e2e
def test_shortlist_benchmark_runs_end_to_end_on_a_tiny_checkpoint(tmp_path):
    """`benchmarks/shortlist.py` on a tiny trained-tokenizer checkpoint: the shortlist built, the export, BLEU with and
    without it, and the speed cells against CTranslate2 with and without its vocabulary map (issue 64)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("ctranslate2")
    import datasets

    from hf_unified_mt.training.tokenization import train_tokenizer_on_corpus

    module = benchmark_script("shortlist")
    sources, targets = module.embedded_pairs("train", 2000)
    tokenizer = train_tokenizer_on_corpus(datasets.Dataset.from_dict({"source": sources, "target": targets}), 400)
    config = hf_unified_mt.get_config(
        "unified_transformer", "tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    output = tmp_path / "shortlist.json"
    argv = [f"--model=tiny={tmp_path / 'model'}", "--runs", "1", "--repeats", "1", "--test-verses", "8"]
    result = module.main([*argv, "--new-tokens", "3", "--output", str(output), "--workdir", str(tmp_path / "work")])
    (model,) = result["models"]
    assert [row["backend"] for row in model["bleu"]] == [
        "onnx float32", "onnx float32 + shortlist", "onnx int8", "onnx int8 + shortlist"
    ]  # fmt: skip
    assert set(model["speed"]) == set(module.SETTINGS)
    for setting, cell in model["speed"].items():
        assert 0 < model["candidates"][setting] < len(tokenizer)
        assert all(cell[backend]["seconds"] > 0 for backend in module.BACKENDS)
    assert module.render(json.loads(output.read_text())).startswith("| model | setting |")


def test_the_readme_quotes_the_three_run_ratios_with_their_ranges():
    """The README's serving sentence quotes the lowest and highest ratio against CTranslate2 int8 of the three-run
    table (batch 1; beam 4 at batch 16 and 64), each with its range over the runs (issue 64)."""
    import re

    module = benchmark_script("inference_vs_ctranslate2")
    table = module.summary_table(committed_result("inference_vs_ctranslate2_runs3.json"))
    cells = [re.findall(r"\*\*([\d.]+) \(([\d.]+)-([\d.]+)\)\*\*", row) for row in table.splitlines()[2:]]
    cells = [row for row in cells if len(row) == 3]
    batch_one = [row[0] for row in cells]
    with_beams = [cell for row in cells for cell in row[1:]]
    readme = " ".join((ROOT / "README.md").read_text().split())
    for group in (batch_one, with_beams):
        for median, low, high in (min(group, key=lambda c: float(c[0])), max(group, key=lambda c: float(c[0]))):
            assert f"{median}x ({low}-{high})" in readme


def test_the_deployment_document_holds_the_shortlist_tables():
    """docs/deployment.md's shortlist tables are `shortlist.py --table` of the committed JSONs (issue 64)."""
    module = benchmark_script("shortlist")
    text = (ROOT / "docs" / "deployment.md").read_text()
    for name in ("shortlist_bleu.json", "shortlist.json"):
        assert module.render(committed_result(name)) in text


def test_the_deployment_document_holds_the_backend_bleu_table():
    """docs/deployment.md's BLEU of every backend per architecture: `backend_bleu.py --table` of the committed JSON."""
    module = benchmark_script("backend_bleu")
    assert module.table(committed_result("backend_bleu.json")) in (ROOT / "docs" / "deployment.md").read_text()
