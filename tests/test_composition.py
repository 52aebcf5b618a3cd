"""The composition matrix: the papers' layers (Transformer, Prime with and without the convolution) in each wrapper
(a plain stack, a Multi-Encoder branch, the Multi-Pass passes, MUTE's units), under each initialisation law, with each
decoder variant. The full matrix is large; this samples it so that every layer type, wrapper, law and decoder variant
appears, and checks what composition can break: incremental decoding equals the full forward, a sentence decodes the
same alone and padded, and the model saves and reloads. (The contract suite runs everything on seven compositions.)"""

import itertools

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import hf_unified_mt
from conftest import VOCAB_SIZE
from hf_unified_mt.configuration_mt_common import DECODER_ATTENTION_TYPES, INIT_LAWS
from mt_checks import assert_incremental_decoding_matches_full_forward


LAYERS = {
    "transformer": None,
    "prime": dict(type="prime", conv_kernel_sizes=[3, 5], conv_weight_dropout=0.0),
    "prime-simple": dict(type="prime", use_convolution=False),
}
WRAPPERS = ("stack", "multi-encoder-branch", "multi-pass", "multi-unit")
TINY = dict(
    vocab_size=VOCAB_SIZE,
    pad_token_id=0,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    dropout=0.0,
    max_position_embeddings=64,
)


def composed_config(layer: str, wrapper: str, law: str, decoder: str):
    spec = LAYERS[layer]
    common = dict(TINY, init_law=law, decoder_attention_type=decoder)
    if wrapper == "stack":
        if layer == "transformer":
            return hf_unified_mt.get_config(
                "deep_transformer", "tiny", **common, attention_dropout=0.0, activation_dropout=0.0
            )
        options = {key: value for key, value in spec.items() if key != "type"}
        return hf_unified_mt.get_config(
            "unified_transformer",
            "tiny",
            **dict(common, decoder_attention_type="self"),
            **{"conv_weight_dropout": 0.0, **options},
        )
    if wrapper == "multi-encoder-branch":
        second = dict(type="self_attention", layers=2) if spec is None else dict(spec, layers=2)
        return hf_unified_mt.get_config(
            "multi_encoder_transformer",
            "tiny-dual",
            **common,
            encoder_branches=[dict(type="self_attention", layers=2), second],
        )
    if wrapper == "multi-unit":  # Prime units are post-norm; MUTE's own units pre-norm
        return hf_unified_mt.get_config(
            "multi_unit_transformer",
            "tiny",
            **common,
            num_units=2,
            unit_layer=spec or dict(type="transformer"),
            normalize_before=spec is None,
        )
    return hf_unified_mt.get_config(
        "multi_pass_transformer", "tiny", **common, num_passes=2, encoder_layer=spec or dict(type="transformer")
    )


def sampled_matrix():
    """Every (layer, wrapper) pair once, cycling through the laws and decoder variants."""
    laws, decoders = itertools.cycle(INIT_LAWS), itertools.cycle(DECODER_ATTENTION_TYPES)
    return [(layer, wrapper, next(laws), next(decoders)) for layer in LAYERS for wrapper in WRAPPERS]


@pytest.mark.parametrize("layer, wrapper, law, decoder", sampled_matrix())
def test_a_composition_decodes_incrementally_independently_of_padding_and_round_trips(
    layer, wrapper, law, decoder, tmp_path
):
    config = composed_config(layer, wrapper, law, decoder)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager").eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, VOCAB_SIZE, (2, 7), generator=generator)
    ids[:, -1] = 2
    mask = torch.ones_like(ids)
    ids[1, -2:], mask[1, -2:] = 0, 0
    ids[1, -3] = 2
    target = torch.randint(4, VOCAB_SIZE, (2, 5), generator=generator)
    assert_incremental_decoding_matches_full_forward(model, ids, mask, target)
    with torch.no_grad():  # the padded sentence decodes as it does alone
        batched = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits[1]
        alone = model(input_ids=ids[1:, :5], attention_mask=mask[1:, :5], decoder_input_ids=target[1:]).logits[0]
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-4)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits,
            model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits,
        )


def test_every_law_and_decoder_variant_is_sampled():
    matrix = sampled_matrix()
    assert {law for _, _, law, _ in matrix} == set(INIT_LAWS)
    assert {decoder for _, _, _, decoder in matrix} == set(DECODER_ATTENTION_TYPES)


@pytest.mark.parametrize("decoder", ["aan", "merged", "merged_self"])
def test_the_unified_transformer_refuses_decoder_variants_naming_the_field(decoder):
    with pytest.raises(ValueError, match="decoder_attention_type"):
        hf_unified_mt.get_config("unified_transformer", "tiny", decoder_attention_type=decoder)


def test_variant_6_has_the_parameters_of_the_standard_decoder_layer_less_one_layer_norm():
    """Table 3 of Zhang et al.: "MAtt with self-attention" has the baseline's parameter count."""
    counts = {}
    for decoder in ("self", "merged_self", "merged"):
        config = hf_unified_mt.get_config(
            "deep_transformer", "tiny", vocab_size=VOCAB_SIZE, decoder_attention_type=decoder
        )
        layer = AutoModelForSeq2SeqLM.from_config(config).model.decoder.layers[0]
        counts[decoder] = sum(parameter.numel() for parameter in layer.parameters())
    d = config.d_model
    assert counts["merged_self"] == counts["self"] - 2 * d  # one LayerNorm fewer
    assert counts["merged"] == counts["self"] - (4 * d * d + 4 * d) - 2 * d  # no self-attention, one LN fewer


def test_the_readme_composition_examples_build():
    """Every line of the README's "Combining the papers" example gives a valid config."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Combining the papers", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    calls = [line.split("  #")[0] for line in section.splitlines() if line.startswith("get_config(")]
    assert len(calls) >= 5
    for call in calls:
        config = eval(call, {"get_config": hf_unified_mt.get_config})  # noqa: S307 (our own README)
        assert config.model_type in call


# ------------------------------------------------------------------------------------------ int8 (CPU deployment)


@pytest.mark.parametrize(
    "arch, preset",
    [
        ("unified_transformer", "tiny"),
        ("deep_transformer", "tiny"),
        ("multi_unit_transformer", "tiny"),
        ("multi_encoder_transformer", "tiny-prime-dual"),
        ("multi_pass_transformer", "tiny"),
    ],
)
def test_int8_quantisation_generates_with_every_architecture(arch, preset):
    """`quantize_int8` swaps every linear layer for its dynamic int8 form (module swaps used to break the Prime
    layer's implicit fused-weight cache) and the quantised copy generates as `generate()` does; the float model is
    untouched and no warning reaches the user."""
    import warnings

    from hf_unified_mt.deployment.inference import quantize_int8

    config = hf_unified_mt.get_config(arch, preset, vocab_size=VOCAB_SIZE, pad_token_id=0)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    ids = torch.randint(4, VOCAB_SIZE, (2, 7), generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quantized = quantize_int8(model)
    assert not any(type(module) is torch.nn.Linear for module in quantized.modules())
    assert any(type(module) is torch.nn.Linear for module in model.modules())
    for num_beams in (1, 3):
        out = quantized.generate(input_ids=ids, max_new_tokens=6, num_beams=num_beams, do_sample=False)
        assert out.shape[0] == 2 and out.shape[1] > 1
    with torch.no_grad():  # int8 logits stay close to float32 ones on a random model
        reference = model(input_ids=ids, decoder_input_ids=ids[:, :4]).logits
        approximate = quantized(input_ids=ids, decoder_input_ids=ids[:, :4]).logits
    assert (approximate - reference).abs().max() < 0.1 * reference.abs().max() + 0.05


@pytest.mark.parametrize(
    "arch, preset", [("unified_transformer", "tiny"), ("multi_unit_transformer", "tiny"), ("marian", "")]
)
def test_an_int8_model_refuses_to_be_saved_before_writing_anything(arch, preset, tmp_path):
    """`quantize_int8(model).save_pretrained(d)` raised AttributeError deep in transformers and left `d` with a config
    and code but no weights. PyTorch's dynamic int8 layers have no safetensors form: saving is refused before anything
    is written, saying how to get an int8 model (save the float model, quantise after loading)."""
    from transformers import MarianConfig, MarianMTModel

    from hf_unified_mt.deployment.inference import quantize_int8

    if arch == "marian":
        model = MarianMTModel(
            MarianConfig(
                vocab_size=VOCAB_SIZE,
                d_model=16,
                encoder_layers=1,
                decoder_layers=1,
                pad_token_id=0,
                decoder_start_token_id=1,
            )
        )
    else:
        model = AutoModelForSeq2SeqLM.from_config(hf_unified_mt.get_config(arch, preset, vocab_size=VOCAB_SIZE))
    quantized = quantize_int8(model.eval())
    fresh, existing = tmp_path / "fresh", tmp_path / "existing"
    existing.mkdir()
    for target in (fresh, existing):
        with pytest.raises(ValueError, match=r"int8.*save the float model.*quantize_int8"):
            quantized.save_pretrained(target)
    with pytest.raises(ValueError, match=r"int8.*save the float model"):
        quantized.push_to_hub("someone/never-created")  # refused before any network call
    assert not fresh.exists() and list(existing.iterdir()) == []
    # the float model saves, and quantising after loading gives the int8 model
    model.save_pretrained(fresh)
    reloaded = quantize_int8(AutoModelForSeq2SeqLM.from_pretrained(fresh).eval())
    ids = torch.randint(4, VOCAB_SIZE, (1, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(
            quantized(input_ids=ids, decoder_input_ids=ids).logits,
            reloaded(input_ids=ids, decoder_input_ids=ids).logits,
        )


def test_int8_logits_depend_on_the_batch_and_the_docs_say_so_beside_the_int8_scores():
    """Dynamic int8 quantises each matmul's input per tensor, i.e. per batch: a sentence's logits move when a
    neighbour with larger activations joins it (float32's do not). PyTorch offers no per-row mode (ONNX Runtime's
    weight-only int8 does); the deployment guide and the README say so where they give the int8 BLEU figures."""
    from pathlib import Path

    from hf_unified_mt.deployment.inference import quantize_int8

    config = hf_unified_mt.get_config("unified_transformer", "tiny", vocab_size=VOCAB_SIZE, dropout=0.0)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    quantized = quantize_int8(model)
    ids = torch.randint(4, VOCAB_SIZE, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # a loud neighbour: its tokens' embeddings set the batch's range
        model.get_input_embeddings().weight[ids[1]] *= 30
        quantized.get_input_embeddings().weight[ids[1]] *= 30
        alone = quantized(input_ids=ids[:1], decoder_input_ids=ids[:1, :3]).logits[0]
        together = quantized(input_ids=ids, decoder_input_ids=ids[:, :3]).logits[0]
        float_alone = model(input_ids=ids[:1], decoder_input_ids=ids[:1, :3]).logits[0]
        float_together = model(input_ids=ids, decoder_input_ids=ids[:, :3]).logits[0]
    assert torch.allclose(float_alone, float_together, atol=1e-5)
    assert (alone - together).abs().max() > 1e-3
    root = Path(__file__).resolve().parents[1]
    guide = (root / "docs" / "deployment.md").read_text()
    measured = guide[guide.index("## Measured") : guide.index("## Speed against CTranslate2")]
    assert "int8 translations depend on the batch" in measured and "per-row mode" in measured
    assert "int8 models are not saved" in measured
    readme = (root / "README.md").read_text()
    deploying = readme[readme.index("## Deploying on CPU") : readme.index("## Publishing to the Hub")]
    assert "per batch" in deploying and "--int8_mode per_row" in deploying  # and the batch-independent mode
