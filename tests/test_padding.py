"""Issue 62, finding 8: the models take right-padded batches only. Positions count from the first position, so left
padding shifted a sentence's positions and changed its outputs on every architecture, and a row of padding alone
broke the Multi-Encoder's LSTM packing; both are now refused with a `ValueError` naming the rows and the fix
(`check_right_padded`, in every encoder's `prepare_inputs` and in the decoder), for every contract variant, in the
training forward, the encoder and `generate()`. Right-padded batches are unchanged (the contract's padding test and
the golden values), and the pipeline, `translate()` and the training tokenizer pad on the right whatever the
tokenizer's `padding_side`. The ONNX Runtime model's refusals are in `test_onnx_padding.py`."""

import json

import pytest
import torch
import torch._dynamo

import hf_unified_mt
from conftest import make_tokenizer, trained_tiny_model
from hf_unified_mt.deployment.inference import translate
from hf_unified_mt.modeling_mt_common import check_right_padded, padding_error
from test_model_contract import PAD, VARIANTS, make_model


IDS = torch.tensor([[5, 6, 7, 8, 2], [PAD, PAD, 9, 10, 2]])
MASKS = {
    "left-padded": (torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]), "row 1 is left-padded"),
    "no token": (torch.tensor([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]), "row 1 has no token"),
}
FIX = 'tokenizer.padding_side = "right"'


@pytest.mark.parametrize("case", MASKS)
@pytest.mark.parametrize("name", VARIANTS)
def test_a_left_padded_or_empty_source_row_is_refused_naming_the_row(name, case):
    model = make_model(name)
    mask, problem = MASKS[case]
    labels = torch.tensor([[11, 12, 2], [13, 2, -100]])
    calls = {
        "forward": lambda: model(input_ids=IDS, attention_mask=mask, labels=labels),
        "encoder": lambda: model.get_encoder()(input_ids=IDS, attention_mask=mask),
        "generate": lambda: model.generate(input_ids=IDS, attention_mask=mask, max_new_tokens=3),
        "beam search": lambda: model.generate(input_ids=IDS, attention_mask=mask, max_new_tokens=3, num_beams=2),
    }
    for call, run in calls.items():
        with pytest.raises(ValueError, match=problem) as error, torch.no_grad():
            run()
        assert "`attention_mask`" in str(error.value), call
        if case == "left-padded":
            assert FIX in str(error.value), call


@pytest.mark.parametrize("name", VARIANTS)
def test_a_right_padded_target_gives_the_target_alone(name):
    """A right-padded target (a training batch): its real positions are those of the target alone. (Masked target
    positions elsewhere, such as a left-padded prefix continued with the cache, are the decoder's own contract, tested
    per architecture: there the real positions match one uncached forward of the same batch.)"""
    model = make_model(name)
    start = model.config.decoder_start_token_id
    with torch.no_grad():
        batched = model(
            input_ids=IDS[:, 2:],
            decoder_input_ids=torch.tensor([[start, 11, 12], [start, 13, PAD]]),
            decoder_attention_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]),
        ).logits
        alone = model(input_ids=IDS[1:, 2:], decoder_input_ids=torch.tensor([[start, 13]])).logits
    torch.testing.assert_close(batched[1, :2], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.long, torch.bool, torch.float32])
def test_right_padded_masks_of_any_dtype_pass_and_others_are_named(dtype):
    check_right_padded(torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=dtype))
    check_right_padded(None)
    check_right_padded(torch.ones(2, 1, 3, 3, dtype=dtype))  # a 4D mask is the caller's own
    with pytest.raises(ValueError, match=r"`attention_mask` row 0 is left-padded \(padding before a token\)"):
        check_right_padded(torch.tensor([[1, 0, 1], [1, 1, 1]], dtype=dtype))  # padding inside a row too
    with pytest.raises(ValueError, match="rows 1, 2 are left-padded .* and row 3 has no token") as error:
        check_right_padded(torch.tensor([[1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 0, 0]], dtype=dtype))
    assert FIX in str(error.value) and "at least one token" in str(error.value)


def test_the_message_names_five_rows_and_counts_the_others():
    message = padding_error([[0, 1]] * 8 + [[0, 0]], "decoder_attention_mask")
    assert message.startswith("`decoder_attention_mask` rows 0, 1, 2, 3, 4 and 3 more are left-padded")
    assert "row 8 has no token" in message


def test_the_check_is_skipped_while_compiling_so_that_a_compiled_encoder_has_no_graph_break():
    """A compiled step cannot read the mask on the host without a graph break: the check is left to eager calls."""
    encoder = make_model("unified-prime").get_encoder()
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(encoder)(input_ids=IDS, attention_mask=MASKS["left-padded"][0])
    assert explanation.graph_break_count == 0, [str(reason.reason) for reason in explanation.break_reasons]
    with pytest.raises(ValueError, match="left-padded"):
        encoder(input_ids=IDS, attention_mask=MASKS["left-padded"][0])


@pytest.fixture(scope="module")
def trained():
    return trained_tiny_model(max_position_embeddings=16)


SENTENCES = ["hola", "el gato ve al perro", "la casa es grande", "mundo"]


def left_padding_tokenizer():
    tokenizer = make_tokenizer()
    tokenizer.padding_side = "left"
    return tokenizer


def test_the_pipeline_pads_on_the_right_with_a_left_padding_tokenizer(trained):
    translator = hf_unified_mt.TranslationPipeline(
        model=trained, tokenizer=left_padding_tokenizer(), max_new_tokens=4, num_beams=2
    )
    alone = [translator(sentence)[0] for sentence in SENTENCES]
    assert translator(SENTENCES, batch_size=4) == alone
    assert translator.tokenizer.padding_side == "left"  # the caller's tokenizer is left as it was


def test_translate_pads_on_the_right_with_a_left_padding_tokenizer(trained):
    expected = translate(trained, make_tokenizer(), SENTENCES, max_new_tokens=4, batch_size=1)
    assert translate(trained, left_padding_tokenizer(), SENTENCES, max_new_tokens=4, batch_size=4) == expected


def test_the_training_tokenizer_pads_on_the_right_whatever_its_saved_padding_side(tmp_path):
    """`DataCollatorForSeq2Seq` pads sources and labels on the tokenizer's side, and a compiled training step does not
    check the mask: a tokenizer saved with `padding_side="left"` (as some on the Hub) loads padding on the right."""
    from hf_unified_mt.training.tokenization import load_tokenizer

    make_tokenizer().save_pretrained(tmp_path)
    config_file = tmp_path / "tokenizer_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "padding_side": "left"}))
    tokenizer = load_tokenizer(str(tmp_path))
    assert tokenizer.padding_side == "right"
    assert tokenizer(["hola", "el gato ve"], padding=True)["attention_mask"] == [[1, 1, 0, 0], [1, 1, 1, 1]]
    tokenizer.save_pretrained(tmp_path / "checkpoint")  # what the Trainer writes into a checkpoint
    assert json.loads((tmp_path / "checkpoint" / "tokenizer_config.json").read_text())["padding_side"] == "right"
