"""Deep Transformer with DS-Init and merged attention (paper 001), on tiny CPU models: the AAN's FFN and the pre-norm
layouts, the prefix average and its constant-size state, DS-Init, parameter counts, the paper's config errors, the
average sublayers' maps, separate embeddings, presets and the gradient diagnostics. The checks every architecture
shares are in `test_model_contract.py`."""

import importlib
import json
import math
from functools import partial
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import hf_unified_mt
from conftest import SPECIALS, VOCAB_WORDS, random_batch, tiny_config
from hf_unified_mt import DeepTransformerForConditionalGeneration
from hf_unified_mt.modeling_mt_common import CACHE_FIELD
from mt_checks import assert_incremental_decoding_matches_full_forward


VOCAB_SIZE = len(SPECIALS) + len(VOCAB_WORDS)
TYPES = ["self", "aan", "merged"]
VARIANTS = {
    "self": dict(decoder_attention_type="self"),
    "aan": dict(decoder_attention_type="aan"),
    "aan-ffn": dict(decoder_attention_type="aan", aan_use_ffn=True),
    "merged": dict(decoder_attention_type="merged"),
    "self-prenorm": dict(decoder_attention_type="self", normalize_before=True),
    "aan-prenorm": dict(decoder_attention_type="aan", normalize_before=True),
    "merged-prenorm": dict(decoder_attention_type="merged", normalize_before=True),
}
ROOT = Path(__file__).resolve().parents[1]


deep_config = partial(tiny_config, "deep_transformer")


def deep_model(seed: int = 0, **overrides) -> DeepTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return DeepTransformerForConditionalGeneration(deep_config(**overrides)).eval()


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------- forward and decoding


# The contract covers the three decoder types post-norm; here: the AAN's FFN option and the pre-norm (T2T) layouts.
@pytest.mark.parametrize("variant", ["aan-ffn", "self-prenorm", "aan-prenorm", "merged-prenorm"])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_incremental_decoding_matches_full_forward_with_the_ffn_and_pre_norm(variant, attn_implementation):
    model = deep_model(**VARIANTS[variant])
    model.set_attn_implementation(attn_implementation)
    ids, mask = random_batch(VOCAB_SIZE)
    target = torch.randint(4, VOCAB_SIZE, (ids.shape[0], 8), generator=torch.Generator().manual_seed(3))
    assert_incremental_decoding_matches_full_forward(model, ids, mask, target)


@pytest.mark.parametrize("decoder_attention_type", TYPES)
def test_masked_target_positions_are_left_out_of_the_prefix_average(decoder_attention_type):
    """M_a[i, j] is zero for padded j: changing the tokens at masked target positions changes nothing elsewhere."""
    model = deep_model(decoder_attention_type=decoder_attention_type)
    ids, mask = random_batch(VOCAB_SIZE)
    target = torch.randint(4, VOCAB_SIZE, (3, 8), generator=torch.Generator().manual_seed(4))
    target_mask = torch.ones_like(target)
    target_mask[0, 2:4] = 0
    other = target.clone()
    other[0, 2:4] = 5
    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target, decoder_attention_mask=target_mask)
        b = model(input_ids=ids, attention_mask=mask, decoder_input_ids=other, decoder_attention_mask=target_mask)
        unmasked = model(input_ids=ids, attention_mask=mask, decoder_input_ids=other).logits
    a, b = a.logits, b.logits
    keep = target_mask.bool()
    assert torch.allclose(a[keep], b[keep], atol=1e-5)
    assert not torch.allclose(b[0, 4:], unmasked[0, 4:], atol=1e-4), "the mask does change the later positions"


@pytest.mark.parametrize("decoder_attention_type", TYPES)
def test_average_sublayers_keep_constant_size_state(decoder_attention_type):
    model = deep_model(decoder_attention_type=decoder_attention_type)
    ids, mask = random_batch(VOCAB_SIZE)
    out = model.generate(
        ids, attention_mask=mask, max_new_tokens=9, min_new_tokens=9, num_beams=2, return_dict_in_generate=True
    )
    layers = getattr(out, CACHE_FIELD).self_attention_cache.layers
    assert getattr(out, CACHE_FIELD).get_seq_length() == 9  # positions are counted also without keys
    for layer in layers:
        if decoder_attention_type == "self":
            assert layer.keys.shape[-2] == 9 and layer.states == {}
        else:
            assert layer._keys_length() == 0, "no per-position keys or values"
            assert {name: tuple(state.shape) for name, state in layer.states.items()} == {
                decoder_attention_type: (6, 1, 32),
                f"{decoder_attention_type}.count": (6, 1, 1),
            }


def test_merged_attention_reuses_the_cross_attention_value_projection():
    model = deep_model(decoder_attention_type="merged")
    layer = model.model.decoder.layers[0]
    hidden = torch.randn(2, 5, 32)
    encoder_states = torch.randn(2, 4, 32)
    with torch.no_grad():
        reference = layer.encoder_attn(hidden, encoder_states)[0]
        layer.encoder_attn.v_proj.weight.zero_()  # also the AAN branch's input projection
        layer.encoder_attn.v_proj.bias.zero_()
        no_values = layer.encoder_attn(hidden, encoder_states)[0]
    # With W_v = 0 both branches vanish: only the output bias b_o remains.
    assert not torch.allclose(reference, no_values)
    assert torch.allclose(no_values, layer.encoder_attn.out_proj.bias.expand_as(no_values), atol=1e-6)


# ---------------------------------------------------------------------------------------------- DS-Init


def expected_bound(mode, alpha, depth, fan_in, fan_out):
    gamma = math.sqrt(6.0 / (fan_in + fan_out))  # Eq. (9)
    if mode is None:
        return gamma
    if mode == "paper":
        return gamma * alpha / math.sqrt(depth)  # Eq. (15)
    return gamma * math.sqrt(alpha) * depth**-0.25  # released code: variance scaling with scale α/√l


@pytest.mark.parametrize("mode, alpha", [("paper", 1.0), ("paper", 0.5), ("released_code", 0.5), (None, 1.0)])
@pytest.mark.parametrize("variant", ["self", "aan-ffn", "merged"])
def test_ds_init_matches_the_formula_for_every_matrix_of_every_layer(mode, alpha, variant):
    d, layers = 64, 3
    model = deep_model(
        d_model=d,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        encoder_layers=layers,
        decoder_layers=layers,
        init_law="ds_init" if mode is not None else "xavier",
        ds_init_mode=mode or "paper",
        ds_init_alpha=alpha,
        tie_word_embeddings=False,
        **VARIANTS[variant],
    )
    checked = 0
    for stack in (model.model.encoder, model.model.decoder):
        for depth, layer in enumerate(stack.layers, start=1):
            for name, module in layer.named_modules():
                if not isinstance(module, torch.nn.Linear):
                    continue
                fused_qkv = name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
                fan_out = module.out_features * (3 if fused_qkv else 1)  # the authors' fused d x 3d matrix
                bound = expected_bound(mode, alpha, depth, module.in_features, fan_out)
                weight = module.weight.detach()
                assert weight.abs().max() <= bound * (1 + 1e-6), name
                assert weight.abs().max() >= 0.98 * bound, name
                assert abs(weight.std().item() / (bound / math.sqrt(3)) - 1) < 0.05, (depth, name)
                assert torch.all(module.bias == 0)
                checked += 1
    decoder_matrices = {"self": 4 + 4 + 2, "aan-ffn": 1 + 2 + 4 + 2, "merged": 4 + 2}[variant]
    assert checked == layers * (6 + decoder_matrices)
    # untouched: LayerNorms, embeddings and the softmax matrix N(0, d^-1/2)
    assert all(torch.all(ln.weight == 1) for ln in model.modules() if isinstance(ln, torch.nn.LayerNorm))
    for matrix in (model.model.decoder.embed_tokens.weight[1:], model.lm_head.weight):
        assert abs(matrix.std().item() * math.sqrt(d) - 1) < 0.15


# ---------------------------------------------------------------------------------------------- parameter counts


def self_attention_sublayer_parameters(model) -> int:
    return sum(count(layer.self_attn) + count(layer.self_attn_sublayer) for layer in model.model.decoder.layers)


def test_merged_attention_removes_exactly_the_self_attention_sublayers():
    standard, merged = deep_model(decoder_attention_type="self"), deep_model(decoder_attention_type="merged")
    d, layers = 32, 2
    assert count(standard) - count(merged) == self_attention_sublayer_parameters(standard)
    assert count(standard) - count(merged) == layers * (4 * d * d + 4 * d + 2 * d)  # W_q,k,v,o + biases + LN


@pytest.mark.parametrize("aan_use_ffn", [False, True])
def test_aan_replaces_self_attention_by_its_gate_and_optional_ffn(aan_use_ffn):
    standard = deep_model(decoder_attention_type="self")
    aan = deep_model(decoder_attention_type="aan", aan_use_ffn=aan_use_ffn)
    d, ffn, layers = 32, 64, 2
    gate = 2 * d * 2 * d + 2 * d
    attention = 4 * d * d + 4 * d
    extra_ffn = 2 * d * ffn + ffn + d if aan_use_ffn else 0
    assert count(aan) == count(standard) + layers * (gate - attention + extra_ffn)


PAPER_VOCAB = dict(vocab_size=27_500, share_encoder_decoder_embeddings=False)  # ~27.5k BPE types per side


@pytest.mark.parametrize(
    "preset, decoder_attention_type, millions",
    [
        ("base", "self", 72.3),
        ("base", "merged", 66.0),  # Table 3, rows 1 and 4
        ("deep-12", "self", 116.4),
        ("deep-12", "merged", 103.8),  # rows 11 and 13
        ("deep-20", "self", 175.3),
        ("deep-20", "merged", 154.3),  # rows 14 and 16
        ("big", "self", 233),
        ("big-deep-12", "merged", 359),
        ("big-deep-20", "merged", 560),  # Table 6
    ],
)
def test_parameter_counts_reproduce_the_papers_tables(preset, decoder_attention_type, millions):
    config = hf_unified_mt.get_config(
        "deep_transformer", preset, decoder_attention_type=decoder_attention_type, **PAPER_VOCAB
    )
    with torch.device("meta"):  # no memory, no initialisation
        model = DeepTransformerForConditionalGeneration(config)
    digits = 1 if millions < 200 else 0
    assert round(count(model) / 1e6, digits) == millions


# ------------------------------------------------------------------------------------- options, maps, embeddings


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(decoder_attention_type="average"), "decoder_attention_type"),
        (dict(decoder_attention_type="merged", aan_use_ffn=True), "aan_use_ffn"),
        (dict(ds_init_mode="fixup"), "ds_init_mode"),
        (dict(ds_init_alpha=0.0), "ds_init_alpha"),
        (dict(ds_init_alpha=-1.0), "ds_init_alpha"),
        (dict(ds_init_alpha=float("nan")), "ds_init_alpha"),
        (dict(ds_init_mod="paper"), "ds_init_mode"),  # a misspelled option
    ],
)
def test_bad_config_raises_value_error_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        deep_config(**overrides)


@pytest.mark.parametrize("decoder_attention_type", ["aan", "merged"])
def test_average_sublayers_report_the_prefix_average_they_apply(decoder_attention_type):
    """The map of an AAN / MAtt layer is M_a: row i uniform over the valid target positions j <= i, zero on padding;
    applied to the sublayer's averaged values it gives exactly the layer's average, in a full forward and step by step
    with the cache."""
    model = deep_model(decoder_attention_type=decoder_attention_type)
    model.set_attn_implementation("eager")
    ids, mask = random_batch(VOCAB_SIZE)
    target = ids[:, :5] % VOCAB_SIZE
    target_mask = torch.ones_like(target)
    target_mask[0, 3:] = 0  # the first target is padded after 3 tokens
    layer = model.model.decoder.layers[0]
    captured = {}
    averaged = layer.self_attn if decoder_attention_type == "aan" else layer.encoder_attn.v_proj
    # the first call: MAtt's value projection also projects the encoder states afterwards
    hook = averaged.register_forward_pre_hook(lambda module, args: [captured.setdefault("input", args[0])] and None)
    with torch.no_grad():
        out = model(
            input_ids=ids,
            attention_mask=mask,
            decoder_input_ids=target,
            decoder_attention_mask=target_mask,
            output_attentions=True,
        )
    hook.remove()
    weights = out.decoder_attentions[0]
    assert weights.shape == (3, model.config.decoder_attention_heads, 5, 5)
    assert torch.equal(weights[:, 0], weights[:, -1]), "the same average for every head"
    expected_row2 = torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0, 0.0])
    torch.testing.assert_close(weights[1, 0, 2], expected_row2)
    assert (weights[0, :, 3:] == 0).all() and (weights[0, :, :, 3:] == 0).all(), "zero rows and columns on padding"
    values = captured["input"] if decoder_attention_type == "aan" else averaged(captured["input"])
    from hf_unified_mt.modeling_decoder_variants import cumulative_average

    torch.testing.assert_close(weights[:, 0] @ values, cumulative_average(values, target_mask.bool(), None, "x"))
    # Step by step with the cache: each step's row equals the full forward's row.
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        cache = None
        for step in range(5):
            step_out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=target[:, step : step + 1],
                cache=cache,
                use_cache=True,
                output_attentions=True,
            )
            cache = getattr(step_out, CACHE_FIELD)
            # (rows 1 and 2: the first target is padded, which a step-by-step decoder without a mask cannot know)
            torch.testing.assert_close(
                step_out.decoder_attentions[1][1:, :, 0], out.decoder_attentions[1][1:, :, step, : step + 1]
            )


@pytest.mark.parametrize("tie_word_embeddings", [True, False])
def test_separate_source_and_target_embeddings_behave_as_documented(tmp_path, tie_word_embeddings):
    """Source and target embeddings are separate by design (§7.2), as in Marian with
    `share_encoder_decoder_embeddings=False`: the input-embedding API is the source side, the target side has its own
    accessors and resize, and the output projection follows the target vocabulary."""
    model = deep_model(tie_word_embeddings=tie_word_embeddings)
    source, target = model.model.encoder.embed_tokens, model.get_decoder().embed_tokens
    assert model.get_input_embeddings() is source and source is not target
    assert model.model.get_decoder_input_embeddings() is target is model.get_decoder().get_input_embeddings()
    assert (model.get_output_embeddings().weight is target.weight) == tie_word_embeddings
    # set_input_embeddings replaces the source embedding only
    replacement = type(source)(VOCAB_SIZE, 32, 0, source.embed_scale)
    model.set_input_embeddings(replacement)
    assert model.model.encoder.embed_tokens is replacement and model.get_decoder().embed_tokens is target
    # resize_token_embeddings: the source vocabulary only; the output projection keeps the target vocabulary
    model.resize_token_embeddings(VOCAB_SIZE + 7, mean_resizing=False)
    assert model.model.encoder.embed_tokens.weight.shape[0] == model.config.vocab_size == VOCAB_SIZE + 7
    assert target.weight.shape[0] == model.lm_head.weight.shape[0] == model.config.decoder_vocab_size == VOCAB_SIZE
    # resize_decoder_token_embeddings: the target embedding and the output projection (still tied if it was)
    model.resize_decoder_token_embeddings(VOCAB_SIZE + 3, mean_resizing=False)
    target = model.get_decoder().embed_tokens
    assert target.weight.shape[0] == model.lm_head.weight.shape[0] == model.config.decoder_vocab_size == VOCAB_SIZE + 3
    assert (model.lm_head.weight is target.weight) == tie_word_embeddings
    ids = torch.randint(4, VOCAB_SIZE + 7, (2, 6))
    with torch.no_grad():
        logits = model(input_ids=ids, decoder_input_ids=ids % (VOCAB_SIZE + 3)).logits
    assert logits.shape == (2, 6, VOCAB_SIZE + 3)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=ids, decoder_input_ids=ids % (VOCAB_SIZE + 3)).logits, logits)
    shared = deep_model(share_encoder_decoder_embeddings=True)
    with pytest.raises(ValueError, match="share_encoder_decoder_embeddings"):
        shared.resize_decoder_token_embeddings(VOCAB_SIZE + 3)
    shared.resize_token_embeddings(VOCAB_SIZE + 5, mean_resizing=False)  # shared: both sides and the projection
    assert shared.get_decoder().embed_tokens.weight.shape[0] == shared.lm_head.weight.shape[0] == VOCAB_SIZE + 5
    assert shared.config.decoder_vocab_size == VOCAB_SIZE + 5


def test_presets():
    assert {"tiny", "base", "deep-12", "deep-20", "deep-30", "big"} <= set(
        hf_unified_mt.available_presets("deep_transformer")["deep_transformer"]
    )
    big = hf_unified_mt.get_config("deep_transformer", "big")
    assert (big.d_model, big.encoder_ffn_dim, big.encoder_attention_heads) == (1024, 4096, 16)
    assert hf_unified_mt.get_config("deep_transformer", "deep-30").decoder_layers == 30


# ---------------------------------------------------------------------------------------------- gradient diagnostics


@pytest.fixture(scope="module")
def diagnostics():
    return importlib.import_module("hf_unified_mt.analysis.gradient_diagnostics")


def test_deep_post_norm_gradients_vanish_in_lower_layers_without_ds_init_and_not_with_it(diagnostics):
    """Figure 1 and Table 1 of paper 001 on a 12+12-layer post-norm Transformer (d 32, vanilla decoder)."""
    generator = torch.Generator().manual_seed(0)
    ids, mask = random_batch(100, batch=8, length=16)
    batch = dict(input_ids=ids, attention_mask=mask, labels=torch.randint(4, 100, (8, 16), generator=generator))
    results = {}
    for init_law in ("xavier", "ds_init"):
        model = deep_model(
            vocab_size=100, encoder_layers=12, decoder_layers=12, decoder_attention_type="self", init_law=init_law
        )
        results[init_law] = diagnostics.gradient_diagnostics(model, batch)
    vanilla, ds = results["xavier"], results["ds_init"]
    # Figure 1: without DS-Init the lowest decoder layer gets a small fraction of the top layer's gradient
    decoder = vanilla["layer_gradient_norms"]["decoder"]
    assert vanilla["lowest_to_highest_layer"]["decoder"] < 0.2
    assert all(decoder[i] < decoder[i + 4] for i in range(8)), "norms shrink going down the stack"
    assert ds["lowest_to_highest_layer"]["decoder"] > 0.7
    assert ds["lowest_to_highest_layer"]["encoder"] > vanilla["lowest_to_highest_layer"]["encoder"]
    # Table 1: LN weakens the error signal and RC strengthens it; the cross-attention's RC ratio stays at 1 (gradient
    # only through the queries); the residual outputs have large variance. DS-Init brings all of them close to 1.
    for stack, kinds in vanilla["averages"].items():
        for kind, m in kinds.items():
            assert m["beta_ln"] < 0.92 and m["var_r"] > 1.2, (stack, kind, m)
            if kind == "cross":
                assert abs(m["beta_rc"] - 1) < 0.01 and m["beta"] < 0.85
            else:
                assert m["beta_rc"] > 1.1, (stack, kind, m)
            m_ds = ds["averages"][stack][kind]
            assert abs(m_ds["beta"] - 1) < 0.06 and m_ds["var_r"] < 1.15 and m_ds["beta_ln"] > 0.93, (stack, kind)
    assert len(vanilla["blocks"]) == 12 * 2 + 12 * 3


@pytest.mark.e2e
def test_gradient_diagnostics_command_on_the_real_corpus(diagnostics, tmp_path, capsys):
    report = diagnostics.main(
        [
            "--models",
            "tiny:encoder_layers=3,decoder_layers=3,init_law=xavier",
            "tiny:encoder_layers=3,decoder_layers=3",
            "--config_overrides",
            '{"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0}',
            "--tokenizer_vocab_size",
            "300",
            "--tokenizer_training_pairs",
            "300",
            "--max_target_tokens",
            "150",
            "--device",
            "cpu",
            "--output_dir",
            str(tmp_path),
        ]
    )
    printed = capsys.readouterr().out
    assert "Gradient norm per layer" in printed and "beta_LN" in printed and "merged" in printed
    saved = json.loads((tmp_path / "gradient_diagnostics.json").read_text())
    assert saved["data_file"].endswith("train.tsv.gz") and saved == json.loads(json.dumps(report))
    for result in saved["models"].values():
        assert result["target_tokens"] >= 150 and math.isfinite(result["loss"])
        assert [len(result["layer_gradient_norms"][s]) for s in ("encoder", "decoder")] == [3, 3]
        assert set(result["averages"]["decoder"]) == {"merged", "ffn"}
        assert len(result["blocks"]) == 3 * 2 + 3 * 2
    assert saved["models"]["tiny:encoder_layers=3,decoder_layers=3"]["config"]["init_law"] == "ds_init"
