"""Generation defaults saved with a checkpoint never override a length the caller passes: the `max_new_tokens` that
train.py saves in `generation_config.json` gives way to a `max_length` passed to `generate()` (which transformers 5
would let the saved value beat), and a passed `max_new_tokens` wins as before."""

import json

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, GenerationConfig

from conftest import make_tokenizer
from hf_unified_mt.training import run
from mt_checks import run_without_package


ARCHITECTURES = (
    "unified_transformer",
    "multi_unit_transformer",
    "multi_pass_transformer",
    "multi_encoder_transformer",
    "deep_transformer",
)
MAX_TARGET_LENGTH = 40  # what train.py saves as the default max_new_tokens (within the tiny presets' positions)


def saved_by_train_py(arch: str, folder) -> torch.nn.Module:
    """A tiny model of `arch` with the generation config train.py gives it (`prepare_model`, then the config saved
    after training), saved to `folder` and loaded back."""
    tokenizer = make_tokenizer()
    model_args, data_args, training_args = run.parse_arguments(
        ["--arch", arch, "--preset", "tiny", "--output_dir", str(folder), "--report_to", "none", "--use_cpu",
         "--max_target_length", str(MAX_TARGET_LENGTH), "--generation_num_beams", "2"]
    )  # fmt: skip
    model = run.prepare_model(model_args, data_args, training_args, tokenizer)
    run.set_saved_generation_config(model, data_args, training_args)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return AutoModelForSeq2SeqLM.from_pretrained(folder).eval()


def generated_length(model, **options) -> int:
    """Output length with `options` for a model kept from ending early (`</s>` banned): the length limit decides."""
    batch = make_tokenizer()(["hola mundo el gato", "la casa"], return_tensors="pt", padding=True)
    with torch.no_grad():
        return model.generate(**batch, bad_words_ids=[[2]], **options).shape[1]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_passed_length_wins_over_the_saved_default(arch, tmp_path, caplog):
    model = saved_by_train_py(arch, tmp_path)
    saved = json.loads((tmp_path / "generation_config.json").read_text())
    assert saved["max_new_tokens"] == MAX_TARGET_LENGTH and "max_length" not in saved
    with caplog.at_level("WARNING"):
        assert generated_length(model, max_length=10) == 10  # decoder start token included
        assert generated_length(model, generation_config=GenerationConfig(max_length=10)) == 10
        assert generated_length(model, max_new_tokens=5) == 6
    assert "seem to have been set" not in caplog.text  # transformers' "both max_new_tokens and max_length" warning
    assert generated_length(model) == MAX_TARGET_LENGTH + 1  # nothing passed: the saved default, as before
    # both passed: transformers' rule (max_new_tokens wins), as for any model
    assert generated_length(model, max_length=10, max_new_tokens=5) == 6


@pytest.mark.subprocess
def test_the_rule_travels_with_the_remote_code(tmp_path):
    """Loaded with `trust_remote_code` where the package is not installed, a saved `max_new_tokens` gives way to a
    passed `max_length` too (the rule lives in the model code saved with the checkpoint)."""
    saved_by_train_py("unified_transformer", tmp_path / "model")
    result = run_without_package(
        """
        import json
        import torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained("model", trust_remote_code=True).eval()
        batch = {"input_ids": torch.tensor([[5, 6, 7, 2]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
        lengths = [model.generate(**batch, bad_words_ids=[[2]], **options).shape[1]
                   for options in ({"max_length": 10}, {"max_new_tokens": 5}, {})]
        print(json.dumps({"module": type(model).__module__, "lengths": lengths}))
        """,
        tmp_path,
    )
    assert not result["module"].startswith("hf_unified_mt")
    assert result["lengths"] == [10, 6, MAX_TARGET_LENGTH + 1]


def test_an_onnx_export_follows_the_same_rule(tmp_path):
    """The ONNX Runtime model of an export reads the same `generation_config.json`: the same lengths as PyTorch."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from hf_unified_mt.deployment.onnx_export import export_onnx
    from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM

    model = saved_by_train_py("unified_transformer", tmp_path / "model")
    export_onnx(model, tmp_path / "onnx", make_tokenizer())
    exported = ORTModelForSeq2SeqLM.from_pretrained(tmp_path / "onnx", num_threads=1)
    for options, length in (({"max_length": 10}, 10), ({"max_new_tokens": 5}, 6), ({}, MAX_TARGET_LENGTH + 1)):
        assert generated_length(exported, num_beams=1, **options) == length, options
