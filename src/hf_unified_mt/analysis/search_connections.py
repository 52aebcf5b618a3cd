# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Random architecture search over the hard connections of the Multi-Pass Transformer (paper 004, §3.4).

A hard MPT is a permutation tau of the N encoder layers (outer layer k receives inner layer tau_k). The search

1. *coarse*: trains the default pattern [0, 1, ..., N-1] and `--coarse_samples` random permutations briefly;
2. *fine*: for `--refine_rounds` rounds, takes the `--refine_top` best candidates so far and trains up to
   `--refine_neighbours` of their unseen neighbours each - permutations one swap away, which the paper assumes perform
   alike - so that neighbours of bad candidates are never explored;
3. ranks every candidate by its final validation loss (`--metric loss`) or BLEU (`--metric bleu`) and writes
   `leaderboard.json` and `leaderboard.md` to `--output_dir` after every candidate.

Every candidate is trained by `training/train.py` (in this process), with the same seed, data order, tokenizer (the
first run trains it, the others reuse it) and initial weights - hard connections add no parameters - so that only the
connection pattern differs. Options this script does not know are passed to `train.py` unchanged, so the length of a
"brief" training is `--max_steps`, its batches `--max_tokens`, and so on.

The search is resumable: run the same command again. Finished candidates are read back from `search_state.json`
(the coarse sample is drawn once and stored; refinement rounds are determined by the stored results and the search
seed), and an interrupted candidate continues from its newest checkpoint.

    python training/search_connections.py --output_dir outputs/mpt-search --preset base \
        --coarse_samples 16 --refine_rounds 3 --refine_top 3 --refine_neighbours 4 --metric loss \
        --max_steps 4000 --eval_steps 1000 --save_steps 1000 --max_tokens 4096
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
from collections.abc import Callable
from pathlib import Path

from transformers import TrainerCallback

from hf_unified_mt.utils.files import write_text


METRICS = {"loss": ("eval_loss", False), "bleu": ("eval_bleu", True)}  # name -> (logged key, higher is better)
STATE_FILE = "search_state.json"


def load_train_main() -> Callable:
    """`main(argv, callbacks)` of one training run (`hf_unified_mt.training.run`, what `training/train.py` runs)."""
    from hf_unified_mt.training.run import main

    return main


# ---------------------------------------------------------------------------------------------------------------------
# Search space
# ---------------------------------------------------------------------------------------------------------------------


def key_of(permutation) -> str:
    return "-".join(str(j) for j in permutation)


def random_permutations(num_layers: int, count: int, rng: random.Random, exclude: set[str]) -> list[list[int]]:
    """`count` distinct random permutations of 0..num_layers-1 not in `exclude` (fewer if the space runs out)."""
    available = math.factorial(num_layers) - len(exclude)
    count = max(0, min(count, available))
    chosen, seen = [], set(exclude)
    while len(chosen) < count:
        permutation = list(range(num_layers))
        rng.shuffle(permutation)
        if key_of(permutation) not in seen:
            seen.add(key_of(permutation))
            chosen.append(permutation)
    return chosen


def swap_neighbours(permutation: list[int]) -> list[list[int]]:
    """The permutations one connection swap away (§3.4): exchange the inner layers of two outer layers."""
    neighbours = []
    for a in range(len(permutation)):
        for b in range(a + 1, len(permutation)):
            neighbour = list(permutation)
            neighbour[a], neighbour[b] = neighbour[b], neighbour[a]
            neighbours.append(neighbour)
    return neighbours


# ---------------------------------------------------------------------------------------------------------------------
# Search
# ---------------------------------------------------------------------------------------------------------------------


class _FinalEvaluation(TrainerCallback):
    """Evaluates after the last training step (whatever `--eval_steps` is) and keeps the latest evaluation metrics."""

    def __init__(self):
        self.metrics = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_evaluate = True
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.metrics = dict(metrics or {})


class ConnectionSearch:
    """Coarse-to-fine random search over hard connection permutations; state and leaderboard live in `output_dir`."""

    def __init__(self, args: argparse.Namespace, train_arguments: list[str], train_main: Callable | None = None):
        self.args = args
        self.train_arguments = train_arguments
        self.train_main = train_main
        self.output_dir = Path(args.output_dir)
        self.metric_key, self.higher_is_better = METRICS[args.metric]
        self.overrides = json.loads(args.config_overrides) if args.config_overrides else {}
        if not isinstance(self.overrides, dict):
            raise ValueError("--config_overrides must be a JSON object")
        self.num_layers = self._encoder_layers()
        self.state = self._load_state()

    # -- state ----------------------------------------------------------------------------------------------------
    def _encoder_layers(self) -> int:
        import hf_unified_mt

        config = hf_unified_mt.get_config(
            "multi_pass_transformer",
            self.args.preset,
            **{**self.overrides, "connection_type": "hard", "hard_connections": None},
        )
        return config.encoder_layers

    def _load_state(self) -> dict:
        path = self.output_dir / STATE_FILE
        settings = dict(
            preset=self.args.preset,
            config_overrides=self.overrides,
            metric=self.args.metric,
            encoder_layers=self.num_layers,
            search_seed=self.args.search_seed,
            train_arguments=self.train_arguments,
        )
        if path.exists():
            state = json.loads(path.read_text())
            changed = [name for name, value in settings.items() if state["settings"].get(name) != value]
            if changed:
                raise ValueError(
                    f"{path} belongs to a search with other settings ({', '.join(changed)}); use another --output_dir "
                    "or the original options"
                )
            return state
        rng = random.Random(self.args.search_seed)
        identity = list(range(self.num_layers))
        coarse = [] if self.args.skip_identity else [identity]
        coarse += random_permutations(self.num_layers, self.args.coarse_samples, rng, {key_of(p) for p in coarse})
        return dict(settings=settings, coarse=coarse, tokenizer=self._user_tokenizer(), results={})

    def _save_state(self) -> None:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        write_text(
            self.output_dir / STATE_FILE, json.dumps(self.state, indent=2)
        )  # an interrupted write keeps the state

    def _user_tokenizer(self) -> str | None:
        for i, argument in enumerate(self.train_arguments):
            if argument == "--tokenizer_name_or_path" and i + 1 < len(self.train_arguments):
                return self.train_arguments[i + 1]
            if argument.startswith("--tokenizer_name_or_path="):
                return argument.split("=", 1)[1]
        return None

    # -- candidates -----------------------------------------------------------------------------------------------
    def ranking(self) -> list[dict]:
        """Every finished candidate, best first."""
        sign = -1.0 if self.higher_is_better else 1.0
        return sorted(self.state["results"].values(), key=lambda entry: (sign * entry["value"], entry["key"]))

    def evaluate(self, permutation: list[int], stage: str) -> dict:
        key = key_of(permutation)
        if key in self.state["results"]:
            return self.state["results"][key]
        run_dir = self.output_dir / "runs" / key
        argv = self._train_argv(permutation, run_dir)
        print(f"[search] {stage}: training hard_connections={permutation} -> {run_dir}", flush=True)
        if self.train_main is None:
            self.train_main = load_train_main()
        final_evaluation = _FinalEvaluation()
        self.train_main(argv, callbacks=[final_evaluation])
        value = self._final_metric(final_evaluation.metrics, run_dir)
        entry = dict(key=key, permutation=list(permutation), value=value, stage=stage, run_dir=str(run_dir))
        self.state["results"][key] = entry
        if self.state["tokenizer"] is None:
            self.state["tokenizer"] = str(run_dir)  # the first run trained the tokenizer: every later run reuses it
        self._save_state()
        if not self.args.keep_checkpoints:
            for checkpoint in run_dir.glob("checkpoint-*"):
                shutil.rmtree(checkpoint, ignore_errors=True)
        self.write_leaderboard()
        print(f"[search] {key}: {self.metric_key} = {value:.4f}", flush=True)
        return entry

    def _train_argv(self, permutation: list[int], run_dir: Path) -> list[str]:
        overrides = {**self.overrides, "connection_type": "hard", "hard_connections": list(permutation)}
        defaults = ["--do_predict", "False", "--num_sample_translations", "0"]
        if self.args.metric == "loss":  # no beam search during evaluation: the loss is all the ranking needs
            defaults += [
                "--predict_with_generate",
                "False",
                "--metric_for_best_model",
                "loss",
                "--greater_is_better",
                "False",
            ]
        argv = [
            *defaults,
            *self.train_arguments,
            "--arch",
            "multi_pass_transformer",
            "--preset",
            self.args.preset,
            "--config_overrides",
            json.dumps(overrides),
            "--output_dir",
            str(run_dir),
        ]
        if self.state["tokenizer"] is not None and self._user_tokenizer() is None:
            argv += ["--tokenizer_name_or_path", self.state["tokenizer"]]
        if any(run_dir.glob("checkpoint-*")):
            argv += ["--resume_from_checkpoint", "last"]  # an interrupted candidate continues where it stopped
        return argv

    def _final_metric(self, metrics: dict | None, run_dir: Path) -> float:
        if metrics is None or self.metric_key not in metrics:
            # A candidate resumed after its last step evaluates nothing: read its logged history instead.
            state_file = run_dir / "trainer_state.json"
            history = json.loads(state_file.read_text()).get("log_history", []) if state_file.exists() else []
            logged = [entry for entry in history if self.metric_key in entry]
            metrics = logged[-1] if logged else None
        if metrics is None or self.metric_key not in metrics:
            needs = "a validation split"
            if self.args.metric == "bleu":
                needs += " and evaluation with generation (--predict_with_generate True)"
            raise RuntimeError(f"The run in {run_dir} logged no `{self.metric_key}`: the search needs {needs}")
        return float(metrics[self.metric_key])

    # -- search ---------------------------------------------------------------------------------------------------
    def run(self) -> list[dict]:
        self._save_state()
        coarse = self.state["coarse"]
        for i, permutation in enumerate(coarse):
            self.evaluate(permutation, f"coarse {i + 1}/{len(coarse)}")
        for round_index in range(1, self.args.refine_rounds + 1):
            # Deterministic given the stored results, so that a resumed search makes the same choices.
            rng = random.Random(f"{self.args.search_seed}-refine-{round_index}")
            planned = []
            for best in self.ranking()[: self.args.refine_top]:
                unseen = [
                    n
                    for n in swap_neighbours(best["permutation"])
                    if key_of(n) not in self.state["results"] and n not in planned
                ]
                rng.shuffle(unseen)
                planned += unseen[: self.args.refine_neighbours]
            if not planned:
                break  # every neighbour of the best candidates is known: the fine search has converged
            for i, permutation in enumerate(planned):
                self.evaluate(permutation, f"refine round {round_index}, {i + 1}/{len(planned)}")
        self.write_leaderboard()
        return self.ranking()

    def write_leaderboard(self) -> None:
        ranking = self.ranking()
        board = [
            dict(
                rank=i + 1,
                hard_connections=e["permutation"],
                **{self.metric_key: e["value"]},
                stage=e["stage"],
                run_dir=e["run_dir"],
            )
            for i, e in enumerate(ranking)
        ]
        self.output_dir.mkdir(parents=True, exist_ok=True)
        write_text(self.output_dir / "leaderboard.json", json.dumps(board, indent=2))
        order = "higher is better" if self.higher_is_better else "lower is better"
        lines = [
            f"# Hard-connection search ({self.metric_key}, {order}; {len(board)} of "
            f"{math.factorial(self.num_layers)} permutations)",
            "",
            f"| rank | hard_connections | {self.metric_key} | stage |",
            "|---:|---|---:|---|",
        ]
        lines += [
            f"| {row['rank']} | {row['hard_connections']} | {row[self.metric_key]:.4f} | {row['stage']} |"
            for row in board
        ]
        write_text(self.output_dir / "leaderboard.md", "\n".join(lines) + "\n")


def parse_arguments(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument(
        "--output_dir", required=True, help="Search directory: state, leaderboard, and one training run per candidate."
    )
    parser.add_argument("--preset", default="base", help="multi_pass_transformer preset (default: base).")
    parser.add_argument("--config_overrides", default=None, help="JSON of config values for every candidate.")
    parser.add_argument("--metric", choices=sorted(METRICS), default="loss", help="Rank by validation loss or BLEU.")
    parser.add_argument("--coarse_samples", type=int, default=16, help="Random permutations of the coarse stage.")
    parser.add_argument("--refine_rounds", type=int, default=3, help="Rounds of the fine stage.")
    parser.add_argument("--refine_top", type=int, default=3, help="Best candidates whose neighbours are explored.")
    parser.add_argument("--refine_neighbours", type=int, default=4, help="New neighbours per best candidate a round.")
    parser.add_argument("--search_seed", type=int, default=0, help="Seed of the sampling (train.py's --seed is apart).")
    parser.add_argument("--skip_identity", action="store_true", help="Do not train the default [0..N-1] pattern.")
    parser.add_argument(
        "--keep_checkpoints",
        action="store_true",
        help="Keep the checkpoint-* directories of finished candidates (deleted by default).",
    )
    args, train_arguments = parser.parse_known_args(argv)
    for name in ("coarse_samples", "refine_rounds", "refine_top", "refine_neighbours"):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be >= 0")
    if any(a == "--arch" or a.startswith("--arch=") for a in train_arguments):
        parser.error("--arch is fixed to multi_pass_transformer by the search")
    return args, train_arguments


def main(argv: list[str] | None = None, train_main: Callable | None = None) -> list[dict]:
    args, train_arguments = parse_arguments(argv)
    ranking = ConnectionSearch(args, train_arguments, train_main=train_main).run()
    print((Path(args.output_dir) / "leaderboard.md").read_text())
    return ranking


if __name__ == "__main__":
    main()
