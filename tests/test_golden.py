"""Golden values (`tests/golden/`): every preset family and contract variant, built from a seed, must give the pinned
loss, logits slice and per-parameter checksums; and the tiny checkpoints saved by an earlier release must load and
give the same logits. A change that is meant to alter them regenerates the file (`tests/golden/make_golden.py`)."""

import json
import math

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from golden.make_golden import CHECKPOINTS, CONFIGS, VALUES_FILE, build, measure


GOLDEN_VALUES = json.loads(VALUES_FILE.read_text())
GOLDEN, GOLDEN_CHECKPOINTS = GOLDEN_VALUES["configs"], GOLDEN_VALUES["checkpoints"]


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


def test_every_golden_configuration_is_pinned():
    assert sorted(GOLDEN) == sorted(CONFIGS)
    assert sorted(GOLDEN_CHECKPOINTS) == sorted(path.name for path in CHECKPOINTS.iterdir())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_seeded_model_gives_the_golden_initialisation_loss_and_logits(name):
    assert_matches(measure(build(name)), GOLDEN[name], name)


@pytest.mark.parametrize("name", sorted(GOLDEN_CHECKPOINTS))
def test_a_checkpoint_saved_by_an_earlier_release_loads_and_gives_the_golden_logits(name):
    model = AutoModelForSeq2SeqLM.from_pretrained(CHECKPOINTS / name).eval()
    assert_matches(measure(model), GOLDEN_CHECKPOINTS[name], f"checkpoint {name}")
