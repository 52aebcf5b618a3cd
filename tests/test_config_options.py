"""Every option a config does not use is refused, naming the field: another architecture's fields, the options of a
composed layer or branch given at the top level, transformers' options the models do not implement, and fields
that the other fields of the same config switch off. `config.json` never states what the built model is not."""

import copy
import importlib
import json
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoModelForSeq2SeqLM, PreTrainedConfig

import hf_unified_mt
from hf_unified_mt.configuration_mt_common import ARCHITECTURE_OPTIONS


ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "unified_transformer": "tiny",
    "deep_transformer": "tiny",
    "multi_unit_transformer": "tiny",
    "multi_encoder_transformer": "tiny-dual",
    "multi_pass_transformer": "tiny",
}


def config_class(arch):
    return type(hf_unified_mt.get_config(arch, TINY[arch]))


def field_names(arch) -> set[str]:
    return {f.name for f in fields(config_class(arch))}


SHARED = set.intersection(*(field_names(arch) for arch in TINY))


def own_fields(arch) -> set[str]:
    """The fields one architecture adds to the shared ones."""
    return field_names(arch) - SHARED


def default_value(arch, name):
    """A valid value of another architecture's field: what that architecture's tiny config holds."""
    return copy.deepcopy(getattr(hf_unified_mt.get_config(arch, TINY[arch]), name))


def test_the_table_of_architecture_options_matches_the_config_classes():
    """`ARCHITECTURE_OPTIONS` (read where the other configuration files may be absent, under remote code) lists
    exactly the fields each architecture adds."""
    assert set(ARCHITECTURE_OPTIONS) == set(TINY)
    for arch in TINY:
        assert set(ARCHITECTURE_OPTIONS[arch]) == own_fields(arch), arch


CROSS_CASES = [
    (arch, other, name)
    for arch in TINY
    for other in TINY
    if other != arch
    for name in sorted(own_fields(other) - field_names(arch))
]


@pytest.mark.parametrize("arch, other, name", CROSS_CASES, ids=[f"{a}-{n}" for a, _, n in CROSS_CASES])
def test_another_architectures_own_fields_are_refused_naming_the_field(arch, other, name):
    with pytest.raises(ValueError, match=rf"`{name}`.*{other}"):
        hf_unified_mt.get_config(arch, TINY[arch], **{name: default_value(other, name)})


def test_every_architecture_is_checked_against_every_other_one():
    assert {(arch, other) for arch, other, _ in CROSS_CASES} == {(a, o) for a in TINY for o in TINY if a != o} - {
        (arch, "deep_transformer") for arch in TINY
    }  # the Deep Transformer adds no field of its own


def test_prime_options_beside_a_prime_encoder_layer_are_refused_and_say_where_they_go():
    """The issue's case: kernels (3, 15) were built while config.json said [3, 5]. The passes read the Prime options
    of `encoder_layer`, so the top-level `conv_kernel_sizes` is refused, pointing there."""
    with pytest.raises(ValueError, match=r"`conv_kernel_sizes`.*`encoder_layer`"):
        hf_unified_mt.get_config(
            "multi_pass_transformer", "tiny", encoder_layer={"type": "prime"}, conv_kernel_sizes=[3, 5]
        )
    with pytest.raises(ValueError, match=r"`use_convolution`.*`unit_layer`"):
        hf_unified_mt.get_config("multi_unit_transformer", "tiny-prime-units", use_convolution=False)
    with pytest.raises(ValueError, match=r"`conv_weight_dropout`.*`encoder_branches`"):
        hf_unified_mt.get_config("multi_encoder_transformer", "tiny-prime-dual", conv_weight_dropout=0.0)
    # where it belongs, the option is used: config.json and the model agree
    config = hf_unified_mt.get_config(
        "multi_pass_transformer", "tiny", encoder_layer={"type": "prime", "conv_kernel_sizes": [3, 5]}
    )
    model = AutoModelForSeq2SeqLM.from_config(config)
    assert model.model.encoder.layers[0].self_attn.conv.kernel_sizes == [3, 5]
    assert not hasattr(config, "conv_kernel_sizes") and "conv_kernel_sizes" not in config.to_dict()


def test_the_deep_transformer_refuses_prime_units():
    """The issue's case: `--arch deep_transformer --config_overrides '{"unit_layer": {"type": "prime"}}'` trained 0
    Prime modules and its card claimed Prime units."""
    with pytest.raises(ValueError, match=r"`unit_layer`.*multi_unit_transformer"):
        hf_unified_mt.get_config("deep_transformer", "tiny", unit_layer={"type": "prime"})


@pytest.mark.parametrize(
    "arch, name, value, where",
    [
        ("multi_encoder_transformer", "expansion_sizes", [4, 4], "encoder_branches"),
        ("multi_encoder_transformer", "fft_length", 256, "encoder_branches"),
        ("multi_encoder_transformer", "conv_dim", 32, "encoder_branches"),
        ("unified_transformer", "expansion_mode", "block", "encoder_branches"),
        ("deep_transformer", "encoder_layerdrop", 0.1, "not implemented"),
        ("multi_pass_transformer", "decoder_layerdrop", 0.1, "not implemented"),
        ("unified_transformer", "classifier_dropout", 0.1, "not implemented"),
    ],
)
def test_options_of_a_branch_spec_or_of_bart_are_refused(arch, name, value, where):
    with pytest.raises(ValueError, match=rf"`{name}`.*{where}"):
        hf_unified_mt.get_config(arch, TINY[arch], **{name: value})


@pytest.mark.parametrize(
    "arch, overrides, name, used",
    [
        ("unified_transformer", dict(init_std=0.05), "init_std", dict(init_law="normal")),
        ("deep_transformer", dict(init_law="xavier", ds_init_alpha=0.5), "ds_init_alpha", dict(init_law="ds_init")),
        ("multi_pass_transformer", dict(ds_init_mode="released_code"), "ds_init_mode", dict(init_law="ds_init")),
        ("unified_transformer", dict(init_fused_qkv=True), "init_fused_qkv", dict(init_law="xavier")),
        (
            "multi_pass_transformer",
            dict(soft_connection_init="identity"),
            "soft_connection_init",
            dict(connection_type="soft"),
        ),
        ("multi_unit_transformer", dict(bias_sample_rate=0.5), "bias_sample_rate", dict(use_bias_module=True)),
        ("multi_unit_transformer", dict(mask_probability=0.5), "mask_probability", dict(use_bias_module=True)),
        ("multi_unit_transformer", dict(swap_max_distance=2), "swap_max_distance", dict(use_bias_module=True)),
        ("multi_unit_transformer", dict(disorder_window=4), "disorder_window", dict(use_bias_module=True)),
        (
            "multi_unit_transformer",
            dict(shuffle_penalty_weight=0.5),
            "shuffle_penalty_weight",
            dict(use_bias_module=True, use_sequential_dependency=True),
        ),
        (
            "multi_unit_transformer",
            dict(shuffle_penalty_normalization="batch"),
            "shuffle_penalty_normalization",
            dict(use_bias_module=True, use_sequential_dependency=True),
        ),
    ],
)
def test_a_field_that_the_other_fields_switch_off_is_refused(arch, overrides, name, used):
    with pytest.raises(ValueError, match=rf"`{name}=.*not used"):
        hf_unified_mt.get_config(arch, TINY[arch], **overrides)
    config = hf_unified_mt.get_config(arch, TINY[arch], **{**overrides, **used})
    assert getattr(config, name) == overrides[name]


def test_prime_units_refuse_the_unit_loop_switch():
    with pytest.raises(ValueError, match=r"`batched_units=False` is not used"):
        hf_unified_mt.get_config("multi_unit_transformer", "tiny-prime-units", batched_units=False)
    assert not hf_unified_mt.get_config("multi_unit_transformer", "tiny", batched_units=False).batched_units


def test_a_field_switched_off_after_creation_is_refused_at_save_time(tmp_path):
    config = hf_unified_mt.get_config("multi_pass_transformer", "tiny")
    config.soft_connection_init = "identity"
    with pytest.raises((ValueError, StrictDataclassError), match="soft_connection_init"):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_a_wrong_type_is_a_value_error_naming_the_field():
    with pytest.raises(ValueError, match=r"`encoder_layer`.*dict"):
        hf_unified_mt.get_config("multi_pass_transformer", "tiny", encoder_layer="prime")
    with pytest.raises(ValueError, match=r"`num_units`"):
        hf_unified_mt.get_config("multi_unit_transformer", "tiny", num_units="4")


@pytest.mark.parametrize("arch", sorted(TINY))
def test_every_preset_still_builds_and_its_saved_config_reloads(arch, tmp_path):
    for preset in hf_unified_mt.available_presets(arch)[arch]:
        config = hf_unified_mt.get_config(arch, preset)
        assert type(config).from_dict(config.to_dict()).to_dict() == config.to_dict(), preset
    config.save_pretrained(tmp_path)
    reloaded = AutoConfig.from_pretrained(tmp_path).to_dict()
    assert {**reloaded, "_name_or_path": ""} == {**config.to_dict(), "_name_or_path": ""}


def test_hub_metadata_of_transformers_is_still_accepted():
    config = hf_unified_mt.get_config("deep_transformer", "tiny", architectures=["X"], problem_type="regression")
    assert isinstance(config, PreTrainedConfig) and config.architectures == ["X"]


# --------------------------------------------------------------------------------------------------- train.py


@pytest.mark.parametrize(
    "arch, overrides, message",
    [
        ("unified_transformer", '{"encoder_layer": "prime"}', "did you mean `encoder_layers`"),
        ("multi_pass_transformer", '{"encoder_layer": "prime"}', "`encoder_layer`"),
        ("multi_unit_transformer", '{"unit_layer": "prime"}', "`unit_layer`"),
        ("deep_transformer", '{"unit_layer": {"type": "prime"}}', "`unit_layer`.*multi_unit_transformer"),
        ("deep_transformer", "{not json", "not valid JSON"),
        ("deep_transformer", "[1, 2]", "must be a JSON object"),
        ("deep_transformer", '{"dmodel": 32}', "dmodel"),
        ("marian", '{"dmodel": 32}', "dmodel"),
        ("marian", '{"d_model": "32"}', "d_model"),
    ],
)
def test_train_py_refuses_bad_config_overrides_in_one_line(arch, overrides, message, tmp_path):
    arguments = importlib.import_module("hf_unified_mt.training.arguments")
    argv = ["--arch", arch, "--preset", "tiny", "--config_overrides", overrides, "--output_dir", str(tmp_path)]
    with pytest.raises(arguments.UsageError) as error:
        arguments.validate_arguments(*arguments.parse_arguments([*argv, "--use_cpu"]))
    text = str(error.value)
    assert "\n" not in text and "--config_overrides" in text
    assert re.search(message, text), text


def test_train_py_exits_with_status_2_and_one_line_for_a_wrongly_typed_override(tmp_path):
    command = [
        sys.executable,
        str(ROOT / "training" / "train.py"),
        "--arch",
        "multi_pass_transformer",
        "--preset",
        "tiny",
        "--config_overrides",
        json.dumps({"encoder_layer": "prime"}),
        "--output_dir",
        str(tmp_path / "out"),
        "--use_cpu",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "encoder_layer" in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
