"""Issue 62, finding 8, in ONNX Runtime: `ORTModelForSeq2SeqLM` refuses a left-padded source and a source row without a
token with the PyTorch model's message (`check_right_padded`), in `generate()` (transformers' preparation of a call
and a repeated call's plan), beam search and `forward`; before, the Multi-Encoder's graphs gave other outputs than
PyTorch on a left-padded batch, and the Unified Transformer's other tokens on a row of padding. A right-padded batch
decodes as PyTorch does. Each contract variant is exported untrained; the variants `test_onnx.py` runs in the fast
tier run here too, the others are `slow`, as there."""

import copy

import pytest
import torch


pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from conftest import make_tokenizer  # noqa: E402
from hf_unified_mt.deployment.onnx_export import export_onnx  # noqa: E402
from hf_unified_mt.deployment.onnx_runtime import ORTModelForSeq2SeqLM  # noqa: E402
from test_model_contract import VARIANTS, batch, make_model  # noqa: E402
from test_onnx import FAST  # noqa: E402
from test_padding import IDS, MASKS  # noqa: E402


NAMES = [pytest.param(name, marks=() if name in FAST else pytest.mark.slow) for name in VARIANTS]


def refusal(call) -> str:
    with pytest.raises(ValueError) as error, torch.no_grad():
        call()
    return str(error.value)


def runtime_calls(runtime, mask: torch.Tensor, settings: dict) -> dict:
    """The ONNX Runtime model's ways in, on `IDS` with `mask`: a call repeating the settings of one the native loop
    took (its plan), transformers' preparation of a call (greedy, beam search) and `forward`."""
    start = torch.full((IDS.shape[0], 1), runtime.config.decoder_start_token_id)
    return {
        "generate (a planned call)": lambda: runtime.generate(input_ids=IDS, attention_mask=mask, **settings),
        "generate": lambda: runtime.generate(input_ids=IDS, attention_mask=mask, max_new_tokens=3),
        "beam search": lambda: runtime.generate(input_ids=IDS, attention_mask=mask, max_new_tokens=3, num_beams=2),
        "forward": lambda: runtime(input_ids=IDS, attention_mask=mask, decoder_input_ids=start),
    }


@pytest.mark.parametrize("name", NAMES)
def test_onnx_runtime_refuses_left_padding_and_empty_rows_as_pytorch_does(name, tmp_path):
    model = copy.deepcopy(make_model(name))
    export_onnx(model, tmp_path, make_tokenizer())
    runtime = ORTModelForSeq2SeqLM.from_pretrained(tmp_path, num_threads=1)

    ids, mask, _ = batch()  # right-padded: unchanged, the tokens of PyTorch
    settings = dict(max_new_tokens=4, min_new_tokens=4)
    assert runtime.generate(input_ids=ids, attention_mask=mask, **settings).tolist() == (
        model.generate(input_ids=ids, attention_mask=mask, **settings).tolist()
    )
    assert runtime._plans, "the first call leaves a plan, which the call with the same settings below runs"

    for case, (bad_mask, problem) in MASKS.items():
        with pytest.raises(ValueError, match=problem) as error:
            model.generate(input_ids=IDS, attention_mask=bad_mask, **settings)
        expected = str(error.value)
        for call, run in runtime_calls(runtime, bad_mask, settings).items():
            assert refusal(run) == expected, f"{case}: {call}"
