"""Golden values (`tests/golden/`): every preset family and contract variant, built from a seed, must give the pinned
loss, logits slice and per-parameter checksums, and the pinned tokens and logits of a cached greedy decode; the
training-mode paths (dropout, MUTE's bias noise and AutoShuffle, the Multi-Pass sum objective) the pinned seeded
training loss and logits; and the tiny checkpoints saved by an earlier release must load and give the same logits. A
change that is meant to alter them regenerates the file (`tests/golden/make_golden.py`)."""

import json
import math

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from golden.make_golden import (
    CHECKPOINTS,
    CONFIGS,
    TRAINING_CONFIGS,
    VALUES_FILE,
    build,
    build_training,
    measure,
    measure_cached_decode,
    measure_training,
)


GOLDEN_VALUES = json.loads(VALUES_FILE.read_text())
GOLDEN, GOLDEN_CHECKPOINTS = GOLDEN_VALUES["configs"], GOLDEN_VALUES["checkpoints"]
GOLDEN_TRAINING, GOLDEN_DECODES = GOLDEN_VALUES["training"], GOLDEN_VALUES["cached_decode"]


def assert_matches(measured: dict, expected: dict, what: str, parameters: bool = True):
    assert math.isclose(measured["loss"], expected["loss"], rel_tol=1e-5, abs_tol=1e-6), (
        f"{what}: loss {measured['loss']!r}, golden {expected['loss']!r}"
    )
    torch.testing.assert_close(
        torch.tensor(measured["logits_slice"]),
        torch.tensor(expected["logits_slice"]),
        rtol=1e-4,
        atol=1e-5,
        msg=lambda m: f"{what}: logits slice differs: {m}",
    )
    if not parameters:
        return
    assert sorted(measured["parameters"]) == sorted(expected["parameters"]), f"{what}: parameter names differ"
    for name, (total, absolute) in expected["parameters"].items():
        got = measured["parameters"][name]
        assert math.isclose(got[0], total, rel_tol=1e-5, abs_tol=1e-5), f"{what}: {name} sum {got[0]} != {total}"
        assert math.isclose(got[1], absolute, rel_tol=1e-5, abs_tol=1e-5), f"{what}: {name} |sum| {got[1]}"


def assert_close_values(measured: list, expected: list, what: str):
    torch.testing.assert_close(
        torch.tensor(measured), torch.tensor(expected), rtol=1e-4, atol=1e-5, msg=lambda m: f"{what}: {m}"
    )


def test_every_golden_configuration_is_pinned():
    assert sorted(GOLDEN) == sorted(CONFIGS) == sorted(GOLDEN_DECODES)
    assert sorted(GOLDEN_TRAINING) == sorted(TRAINING_CONFIGS)
    assert sorted(GOLDEN_CHECKPOINTS) == sorted(path.name for path in CHECKPOINTS.iterdir())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_seeded_model_gives_the_golden_initialisation_loss_and_logits(name):
    assert_matches(measure(build(name)), GOLDEN[name], name)


@pytest.mark.parametrize("name", sorted(GOLDEN_CHECKPOINTS))
def test_a_checkpoint_saved_by_an_earlier_release_loads_and_gives_the_golden_logits(name):
    model = AutoModelForSeq2SeqLM.from_pretrained(CHECKPOINTS / name).eval()
    assert_matches(measure(model), GOLDEN_CHECKPOINTS[name], f"checkpoint {name}")


@pytest.mark.parametrize("name", sorted(TRAINING_CONFIGS))
def test_a_seeded_training_forward_gives_the_golden_loss_and_logits(name):
    """Dropout, MUTE's bias-module noise and AutoShuffle projection, the Multi-Pass sum over passes: the paths that
    only a training forward takes, pinned from `torch.manual_seed`."""
    measured, expected = measure_training(build_training(name)), GOLDEN_TRAINING[name]
    assert_matches(measured, expected, f"training {name}", parameters=False)
    assert sorted(measured) == sorted(expected), f"training {name}: measured values differ"
    if "auto_shuffle" in expected:
        assert_close_values(measured["auto_shuffle"], expected["auto_shuffle"], f"{name}: projected AutoShuffle M")
        assert math.isclose(measured["shuffle_penalty"], expected["shuffle_penalty"], rel_tol=1e-5, abs_tol=1e-6)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_cached_greedy_decode_gives_the_golden_tokens_and_logits(name):
    """Incremental decoding (`use_cache=True`, one position per step) of every configuration: each step's logits and
    the greedy tokens, pinned."""
    measured, expected = measure_cached_decode(build(name)), GOLDEN_DECODES[name]
    assert measured["tokens"] == expected["tokens"], f"{name}: cached greedy tokens differ"
    assert_close_values(measured["logits_slice"], expected["logits_slice"], f"{name}: cached decode logits")
