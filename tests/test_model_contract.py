"""The contract every architecture keeps, checked once for the five architectures and their decoder / encoder
variants (the shape of transformers' `ModelTesterMixin`; each `test_<arch>.py` keeps only what its paper adds):

* a training forward with labels returns a finite scalar loss that reaches every parameter, and gives the same
  gradients with activation checkpointing (dropout on);
* incremental decoding with the cache gives the logits of the full forward (eager and sdpa), and `generate()` gives
  the same ids with and without the cache for greedy, beam and sampling modes;
* a sentence is encoded and translated the same alone and right-padded in a batch;
* a bad value of a shared config field is a `ValueError` naming the field;
* save / reload through `AutoModelForSeq2SeqLM` of a model moved off its initialisation gives the same state dict
  and logits and keeps which embeddings are one parameter; a separate, untied target vocabulary round-trips too;
* transformers' documented seq2seq outputs (`Seq2SeqLMOutput`, `GenerateEncoderDecoderOutput`, what Marian / BART
  return): counts and shapes of attentions and hidden states against the config, `generate()` with
  `return_dict_in_generate=True` and every `output_*` flag for each decoding mode with and without the cache, cache
  inspection layer by layer, and `GenerationMixin` among each generative class's own bases;
* the auto classes resolve each architecture's config, base model and generative model; the base model reloads
  through `AutoModel`;
* the checkpoint boundary: a saved checkpoint carries exactly its modeling closure, and no model installs a
  process-wide hook; without the package, a checkpoint loads only with `trust_remote_code` and then generates and
  translates (`pipeline`) as the package's classes do; `print(model)` shows the architecture's options.

Tiny configs: vocabulary 99, pad id 1, d 16, 2+2 layers, 4 heads (3 encoder layers for the Multi-Pass hard
connections to be a non-trivial permutation)."""

import copy
import importlib
import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.generation import GenerationMixin
from transformers.utils import logging as transformers_logging

import hf_unified_mt
from conftest import make_tokenizer, tiny_config, train_to_reverse
from hf_unified_mt.modeling_mt_common import CACHE_FIELD
from mt_checks import (
    COMMON_CODE_FILES,
    DECODER_VARIANT_FILES,
    GENERATION_SETTINGS,
    assert_generate_is_identical_without_cache,
    assert_gradient_checkpointing_gives_the_same_gradients,
    assert_incremental_decoding_matches_full_forward,
    assert_translation_does_not_depend_on_batch_or_padding,
    run_without_package,
)


VOCAB, PAD, BATCH, SOURCE, TARGET = 99, 1, 2, 7, 5
HEADS = 4
TINY = dict(
    vocab_size=VOCAB,
    pad_token_id=PAD,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=HEADS,
    decoder_attention_heads=HEADS,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    max_position_embeddings=64,
)

VARIANTS = {
    "unified-prime": ("unified_transformer", "tiny", dict(conv_weight_dropout=0.0)),
    "unified-prime-simple": ("unified_transformer", "tiny", dict(use_convolution=False)),
    "deep-self": ("deep_transformer", "tiny", dict(decoder_attention_type="self")),
    "deep-aan": ("deep_transformer", "tiny", dict(decoder_attention_type="aan")),
    "deep-merged": ("deep_transformer", "tiny", dict(decoder_attention_type="merged")),
    "mute": ("multi_unit_transformer", "tiny", dict()),
    "mute-bias-seq": ("multi_unit_transformer", "tiny", dict(use_bias_module=True, use_sequential_dependency=True)),
    "multi-encoder-dual": ("multi_encoder_transformer", "tiny-dual", dict()),
    "multi-encoder-quintuple": ("multi_encoder_transformer", "tiny-quintuple", dict()),
    # composition: a Prime encoder (paper 000) as the Multi-Encoder's second branch
    "multi-encoder-prime": (
        "multi_encoder_transformer",
        "tiny-dual",
        dict(
            encoder_branches=[
                dict(type="self_attention", layers=2),
                dict(type="prime", layers=2, conv_kernel_sizes=[3, 5], conv_weight_dropout=0.0),
            ]
        ),
    ),
    "mpt-hard": ("multi_pass_transformer", "tiny", dict(encoder_layers=3, num_passes=2, hard_connections=[2, 0, 1])),
    "mpt-soft": ("multi_pass_transformer", "tiny", dict(num_passes=2, connection_type="soft")),
    # compositions: Prime layers (paper 000) in the Multi-Pass encoder's passes; a Prime stack under DS-Init (001)
    "mpt-prime": (
        "multi_pass_transformer",
        "tiny",
        dict(
            encoder_layers=3,
            num_passes=2,
            hard_connections=[2, 0, 1],
            encoder_layer=dict(type="prime", conv_kernel_sizes=[3, 5], conv_weight_dropout=0.0),
        ),
    ),
    # composition: Prime layers (paper 000) as MUTE's units (002)
    "mute-prime-units": (
        "multi_unit_transformer",
        "tiny-prime-units",
        dict(unit_layer=dict(type="prime", conv_kernel_sizes=[3, 5], conv_weight_dropout=0.0)),
    ),
    "unified-prime-dsinit": ("unified_transformer", "tiny", dict(conv_weight_dropout=0.0, init_law="ds_init")),
    # decoder variants of paper 001 across architectures, and its variant 6 (merged sublayer with self-attention)
    "deep-merged-self": ("deep_transformer", "tiny", dict(decoder_attention_type="merged_self")),
    "mute-merged": ("multi_unit_transformer", "tiny", dict(decoder_attention_type="merged")),
    "mute-merged-self": ("multi_unit_transformer", "tiny", dict(decoder_attention_type="merged_self")),
    "multi-encoder-aan": ("multi_encoder_transformer", "tiny-dual", dict(decoder_attention_type="aan")),
}

_MODELS = {}


def make_model(name: str):
    """The variant's tiny model (eager attention, eval mode), built once per session."""
    if name not in _MODELS:
        arch, preset, overrides = VARIANTS[name]
        config = tiny_config(arch, preset, **{**TINY, **overrides})
        config._attn_implementation = "eager"
        torch.manual_seed(0)
        _MODELS[name] = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager").eval()
    return _MODELS[name]


def batch():
    """Source ids with the second row right-padded by two positions, and target ids."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, VOCAB, (BATCH, SOURCE), generator=generator)
    ids[:, -1] = 2
    mask = torch.ones_like(ids)
    ids[1, -2:], mask[1, -2:] = PAD, 0
    ids[1, -3] = 2
    target = torch.randint(4, VOCAB, (BATCH, TARGET), generator=generator)
    return ids, mask, target


def expected_encoder_counts(config) -> tuple[int, int]:
    """(hidden states, attention maps) the encoder returns, from the config: the embeddings plus one state per layer,
    one map per self-attention layer. The Multi-Encoder returns the embedding, each branch's output and the combined
    memory, and the maps of its self-attention branch."""
    if config.model_type == "multi_encoder_transformer":
        attention_layers = sum(
            spec["layers"] for spec in config.encoder_branches if spec["type"] in ("self_attention", "prime")
        )
        return len(config.encoder_branches) + 2, attention_layers
    return config.encoder_layers + 1, config.encoder_layers


def assert_maps(maps, count, shape, what):
    assert isinstance(maps, tuple) and len(maps) == count, f"{what}: {len(maps)} maps, expected {count}"
    for layer, weights in enumerate(maps):
        assert isinstance(weights, torch.Tensor), f"{what}[{layer}] is {weights!r}"
        assert tuple(weights.shape) == shape, f"{what}[{layer}]: {tuple(weights.shape)}, expected {shape}"
        assert (weights >= 0).all()


def assert_states(states, count, shape, what):
    assert isinstance(states, tuple) and len(states) == count, f"{what}: {len(states)} states, expected {count}"
    for layer, state in enumerate(states):
        assert isinstance(state, torch.Tensor) and tuple(state.shape) == shape, f"{what}[{layer}]"


_TRAINED = {}


def trained_model(name: str):
    """The variant's tiny model trained to reverse 16 fixed sentences (`train_to_reverse(memorise=True)`: 30 steps
    give every variant varied outputs, which the comparisons assert); trained once per session, returned as a fresh
    copy in eval mode."""
    if name not in _TRAINED:
        model = train_to_reverse(copy.deepcopy(make_model(name)), steps=30, lr=1e-2, memorise=True)
        _TRAINED[name] = model.state_dict()
    model = copy.deepcopy(make_model(name))
    model.load_state_dict(_TRAINED[name])
    return model.eval()


def shared_parameters(model) -> list[int]:
    """Which of (source embedding, target embedding, output projection) are one parameter: the index of the first
    of the three that each one is."""
    embeddings = [
        model.get_encoder().embed_tokens.weight,
        model.get_decoder().embed_tokens.weight,
        model.lm_head.weight,
    ]
    return [next(i for i, other in enumerate(embeddings) if other is weight) for weight in embeddings]


# ---------------------------------------------------------------------------------------------- training forward


@pytest.mark.parametrize("name", VARIANTS)
def test_forward_with_labels_returns_a_loss_that_reaches_every_parameter(name):
    model = copy.deepcopy(make_model(name)).train()
    ids, mask, target = batch()
    labels = target.masked_fill(target == PAD, -100)
    output = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert output.loss.ndim == 0 and torch.isfinite(output.loss)
    assert output.logits.shape == (BATCH, TARGET, model.config.decoder_vocab_size)
    output.loss.backward()
    # the bias module's mask embeddings receive a gradient only where the mask noise was drawn
    untrained = [n for n, p in model.named_parameters() if p.grad is None and "mask_embeddings" not in n]
    assert not untrained, untrained


@pytest.mark.parametrize("name", VARIANTS)
def test_gradient_checkpointing_gives_the_same_gradients(name):
    """With every dropout on: recomputing a layer replays its random draws (MUTE's unit noise included)."""
    arch, preset, overrides = VARIANTS[name]
    dropouts = dict(dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)
    config = tiny_config(arch, preset, **{**TINY, **overrides, **dropouts})

    def build():
        torch.manual_seed(0)
        return AutoModelForSeq2SeqLM.from_config(config).train()

    ids, mask, target = batch()
    assert_gradient_checkpointing_gives_the_same_gradients(build, input_ids=ids, attention_mask=mask, labels=target)


# ---------------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", VARIANTS)
def test_incremental_decoding_matches_full_forward(name, attn_implementation):
    model = copy.deepcopy(make_model(name))
    model.set_attn_implementation(attn_implementation)
    ids, mask, target = batch()
    assert_incremental_decoding_matches_full_forward(model, ids, mask, target)


@pytest.mark.parametrize("name", VARIANTS)
def test_generate_with_and_without_cache_is_identical(name):
    ids, mask, _ = batch()
    assert_generate_is_identical_without_cache(trained_model(name), ids, mask)


@pytest.mark.parametrize("name", VARIANTS)
def test_generation_and_stepwise_decoding_do_not_warn(name, caplog):
    """Normal use logs and warns nothing: `generate()` in every setting, a loss forward, and stepwise decoding that
    hands the returned cache back (transformers from 5.24 on warns on its pre-5.24 name, `past_key_values`, which the
    models must therefore neither read nor return there). `warning_once` is reset so an earlier test cannot hide one."""
    model = trained_model(name)
    ids, mask, target = batch()
    transformers_logging.get_logger("transformers").warning_once.cache_clear()
    with caplog.at_level("WARNING"), warnings.catch_warnings():
        warnings.simplefilter("error")
        for settings in GENERATION_SETTINGS:
            model.generate(ids, attention_mask=mask, max_new_tokens=4, **settings)
        model(input_ids=ids, attention_mask=mask, labels=target)
        first = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target[:, :1], use_cache=True)
        model(
            input_ids=ids,
            attention_mask=mask,
            decoder_input_ids=target[:, 1:2],
            cache=getattr(first, CACHE_FIELD),
            use_cache=True,
        )
    assert not caplog.records, [record.getMessage() for record in caplog.records]


@pytest.mark.parametrize("name", VARIANTS)
def test_the_cache_is_also_taken_under_its_name_before_transformers_5_24(name):
    """`past_key_values=` (the name transformers' `generate()` uses before 5.24) is the same argument as `cache=`;
    given both, the call stops instead of choosing one. From 5.24 on the old name gives the FutureWarning of
    transformers' own models (their common `test_bc_cache_name_forward`); on 5.23 it is silent."""
    model = trained_model(name)
    ids, mask, target = batch()
    logits = []
    with torch.no_grad():
        for argument in ("cache", "past_key_values"):
            first = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target[:, :1], use_cache=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                step = model(
                    input_ids=ids,
                    attention_mask=mask,
                    decoder_input_ids=target[:, 1:2],
                    use_cache=True,
                    **{argument: getattr(first, CACHE_FIELD)},
                )
            deprecations = [
                w
                for w in caught
                if issubclass(w.category, FutureWarning)
                and "past_key_values" in str(w.message)
                and "Use `cache` instead" in str(w.message)
            ]
            assert len(deprecations) == (argument == "past_key_values" and CACHE_FIELD == "cache"), caught
            assert getattr(step, CACHE_FIELD).get_seq_length() == 2
            logits.append(step.logits)
        assert torch.equal(*logits)
        cache = getattr(first, CACHE_FIELD)
        with pytest.raises(ValueError, match="pass it once"):
            model(
                input_ids=ids, attention_mask=mask, decoder_input_ids=target[:, 1:2], cache=cache, past_key_values=cache
            )


@pytest.mark.parametrize("name", VARIANTS)
def test_translation_does_not_depend_on_batch_or_padding(name):
    ids, mask, _ = batch()
    assert_translation_does_not_depend_on_batch_or_padding(trained_model(name), ids, mask, pad=2)


# ---------------------------------------------------------------------------------------------- save / reload


def moved_off_its_initialisation(model):
    """`model` with every parameter moved by random noise, so that a loader that re-initialises any of them (a zero
    gain, MUTE's uniform M, MPT's zero connection logits) is caught: an untrained model would still match."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model


RELOADED_LOGITS = dict(rtol=0, atol=1e-5)


def assert_reloads_identically(model, directory, target):
    """Save, reload through `AutoModelForSeq2SeqLM`: same class, the same state dict tensor by tensor, the same
    logits, the same embeddings shared. Returns the reloaded model.

    The state dict is compared exactly (nothing re-initialised on load); the logits to float rounding
    (`RELOADED_LOGITS`): a reloaded parameter lives in the safetensors file's memory at another alignment, and some
    CPU kernels (the LSTM's on AMD EPYC) round differently there."""
    model.save_pretrained(directory)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(directory, attn_implementation="eager").eval()
    assert type(reloaded) is type(model)
    expected, actual = model.state_dict(), reloaded.state_dict()
    assert expected.keys() == actual.keys()
    for key, value in expected.items():
        assert torch.equal(value, actual[key]), key
    ids, mask, _ = batch()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
        actual_logits = reloaded(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
    torch.testing.assert_close(actual_logits, logits, **RELOADED_LOGITS)
    assert shared_parameters(reloaded) == shared_parameters(model)
    return reloaded


@pytest.mark.parametrize("name", VARIANTS)
def test_save_and_reload_round_trip(name, tmp_path):
    model = moved_off_its_initialisation(copy.deepcopy(make_model(name)))
    assert_reloads_identically(model, tmp_path, batch()[2])


@pytest.mark.parametrize("arch", hf_unified_mt.ARCHITECTURES)
def test_a_separate_untied_target_vocabulary_decodes_and_round_trips(arch, tmp_path):
    config = tiny_config(
        arch,
        "tiny",
        **{**TINY, "share_encoder_decoder_embeddings": False, "tie_word_embeddings": False, "decoder_vocab_size": 30},
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = moved_off_its_initialisation(AutoModelForSeq2SeqLM.from_config(config).eval())
    assert shared_parameters(model) == [0, 1, 2]
    ids, mask, target = batch()
    target = target % 30
    assert_incremental_decoding_matches_full_forward(model, ids, mask, target)
    with torch.no_grad():
        assert model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits.shape[-1] == 30
    assert_reloads_identically(model, tmp_path, target)


# ---------------------------------------------------------------------------------------------- bad configs

# The fields every architecture validates (each test file checks its paper's own options).
SHARED_BAD_CONFIGS = [
    (dict(d_model=30), "d_model"),  # not divisible by the heads
    (dict(encoder_layers=0), "encoder_layers"),
    (dict(decoder_layers=0), "decoder_layers"),
    (dict(encoder_ffn_dim=0), "encoder_ffn_dim"),
    (dict(dropout=1.5), "dropout"),
    (dict(attention_dropout=1.0), "attention_dropout"),
    (dict(activation_dropout=-0.1), "activation_dropout"),
    (dict(label_smoothing=1.0), "label_smoothing"),
    (dict(activation_function="swishy"), "activation_function"),
    (dict(share_encoder_decoder_embeddings=True, decoder_vocab_size=20), "share_encoder_decoder_embeddings"),
    (dict(pad_token_id=500), "pad_token_id"),
    (dict(dropuot=0.1), "did you mean `dropout`"),  # a misspelled option
]


@pytest.mark.parametrize("overrides, field", SHARED_BAD_CONFIGS, ids=[",".join(o) for o, _ in SHARED_BAD_CONFIGS])
@pytest.mark.parametrize("arch", hf_unified_mt.ARCHITECTURES)
def test_bad_config_raises_value_error_naming_the_field(arch, overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(arch, "tiny", **overrides)


# ---------------------------------------------------------------------------------------------- class contract


@pytest.mark.parametrize("arch", hf_unified_mt.ARCHITECTURES)
def test_auto_classes_resolve_the_config_the_base_model_and_the_generative_model(arch, tmp_path):
    """`AutoConfig` / `AutoModel` / `AutoModelForSeq2SeqLM` give the architecture's classes; the base model returns
    the decoder states, and saves and reloads through `AutoModel` (with its own `auto_map` entry)."""
    config_class, base_class, generative_class = hf_unified_mt.ARCHITECTURES[arch]
    assert type(AutoConfig.for_model(arch)) is config_class
    config = tiny_config(arch, "tiny", **TINY)
    assert type(AutoModelForSeq2SeqLM.from_config(config)) is generative_class
    torch.manual_seed(0)
    base = AutoModel.from_config(config).eval()
    assert type(base) is base_class
    ids, mask, target = batch()
    with torch.no_grad():
        states = base(input_ids=ids, attention_mask=mask, decoder_input_ids=target).last_hidden_state
    assert states.shape == (BATCH, TARGET, config.d_model)
    base.save_pretrained(tmp_path)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModel"] == f"modeling_{arch}.{base_class.__name__}"
    reloaded = AutoModel.from_pretrained(tmp_path).eval()
    assert type(reloaded) is base_class
    with torch.no_grad():
        reloaded_states = reloaded(input_ids=ids, attention_mask=mask, decoder_input_ids=target).last_hidden_state
    torch.testing.assert_close(reloaded_states, states, **RELOADED_LOGITS)


@pytest.mark.parametrize("name", VARIANTS)
def test_generation_mixin_is_a_direct_base(name):
    model_class = type(make_model(name))
    assert GenerationMixin in model_class.__bases__, model_class.__bases__
    assert model_class.can_generate()


# ---------------------------------------------------------------------------------------------- forward outputs


@pytest.mark.parametrize("name", VARIANTS)
def test_forward_attentions_and_hidden_states_match_the_config(name):
    model = make_model(name)
    config = model.config
    ids, mask, target = batch()
    with torch.no_grad():
        out = model(
            input_ids=ids,
            attention_mask=mask,
            decoder_input_ids=target,
            output_attentions=True,
            output_hidden_states=True,
        )
    num_states, num_maps = expected_encoder_counts(config)
    d = config.d_model
    assert_states(out.encoder_hidden_states, num_states, (BATCH, SOURCE, d), "encoder_hidden_states")
    assert torch.equal(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    assert_maps(out.encoder_attentions, num_maps, (BATCH, HEADS, SOURCE, SOURCE), "encoder_attentions")
    assert_states(out.decoder_hidden_states, config.decoder_layers + 1, (BATCH, TARGET, d), "decoder_hidden_states")
    assert_maps(out.decoder_attentions, config.decoder_layers, (BATCH, HEADS, TARGET, TARGET), "decoder_attentions")
    assert_maps(out.cross_attentions, config.decoder_layers, (BATCH, HEADS, TARGET, SOURCE), "cross_attentions")
    # Attention rows are distributions; nothing is attended on source padding or in the future.
    for weights in out.encoder_attentions + out.cross_attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert (weights[1, ..., -2:] == 0).all()
    for weights in out.decoder_attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert (weights.triu(diagonal=1) == 0).all()
    # The tuple form holds the same tensors (no None inside a tuple).
    with torch.no_grad():
        as_tuple = model(
            input_ids=ids,
            attention_mask=mask,
            decoder_input_ids=target,
            output_attentions=True,
            output_hidden_states=True,
            return_dict=False,
        )
    assert all(item is not None for item in as_tuple)


# ---------------------------------------------------------------------------------------------- generate outputs


MODES = {
    "greedy": dict(),
    "sample": dict(do_sample=True, top_k=10),
    "beam": dict(num_beams=2, num_return_sequences=2),
    "beam-sample": dict(do_sample=True, num_beams=2),
}
NEW_TOKENS = 3


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", VARIANTS)
def test_generate_returns_every_output_per_step_and_layer(name, mode, use_cache):
    model = make_model(name)
    config = model.config
    ids, mask, _ = batch()
    settings = MODES[mode]
    torch.manual_seed(0)
    out = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        use_cache=use_cache,
        return_dict_in_generate=True,
        output_attentions=True,
        output_hidden_states=True,
        output_scores=True,
        output_logits=True,
        **settings,
    )
    rows = BATCH * settings.get("num_beams", 1)
    num_states, num_maps = expected_encoder_counts(config)
    # The encoder runs once, before the batch is expanded for beams (as for every transformers model).
    assert_states(out.encoder_hidden_states, num_states, (BATCH, SOURCE, config.d_model), "encoder_hidden_states")
    assert_maps(out.encoder_attentions, num_maps, (BATCH, HEADS, SOURCE, SOURCE), "encoder_attentions")
    assert out.sequences.shape == (BATCH * settings.get("num_return_sequences", 1), NEW_TOKENS + 1)
    assert len(out.scores) == len(out.logits) == NEW_TOKENS
    assert all(scores.shape == (rows, config.decoder_vocab_size) for scores in out.scores)
    for field in ("decoder_attentions", "cross_attentions", "decoder_hidden_states"):
        assert len(getattr(out, field)) == NEW_TOKENS, field
    for step in range(NEW_TOKENS):
        queries = 1 if use_cache else step + 1
        assert_maps(
            out.decoder_attentions[step],
            config.decoder_layers,
            (rows, HEADS, queries, step + 1),
            f"decoder_attentions[{step}]",
        )
        assert_maps(
            out.cross_attentions[step],
            config.decoder_layers,
            (rows, HEADS, queries, SOURCE),
            f"cross_attentions[{step}]",
        )
        assert_states(
            out.decoder_hidden_states[step],
            config.decoder_layers + 1,
            (rows, queries, config.d_model),
            f"decoder_hidden_states[{step}]",
        )
    if "num_beams" in settings:
        assert out.beam_indices.shape[0] == BATCH * settings.get("num_return_sequences", 1)


# ---------------------------------------------------------------------------------------------- the cache


@pytest.mark.parametrize("name", VARIANTS)
def test_cache_layers_can_be_inspected_layer_by_layer(name):
    model = make_model(name)
    config = model.config
    ids, mask, target = batch()
    with torch.no_grad():
        outputs = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target, use_cache=True)
        cache = getattr(outputs, CACHE_FIELD)
        assert cache.get_seq_length() == TARGET
        head_dim = config.d_model // config.decoder_attention_heads
        layers = config.decoder_layers
        assert len(cache.self_attention_cache.layers) == len(cache.cross_attention_cache.layers) == layers
        keyless = config.decoder_attention_type in ("aan", "merged")
        for layer in cache.self_attention_cache.layers:
            assert isinstance(layer.keys, torch.Tensor) and isinstance(layer.values, torch.Tensor)
            # [batch, heads, positions, head_dim]; layers without self-attention keys (average attention, merged
            # attention) hold none along the positions and count them in `get_seq_length()`
            positions = 0 if keyless else TARGET
            assert layer.keys.shape == layer.values.shape == (BATCH, HEADS, positions, head_dim)
            assert layer.get_seq_length() == TARGET
        for layer in cache.cross_attention_cache.layers:
            assert layer.keys.shape == layer.values.shape == (BATCH, HEADS, SOURCE, head_dim)
        # The cache still continues decoding and follows beam reordering / batch expansion.
        step = model(
            encoder_outputs=model.get_encoder()(input_ids=ids, attention_mask=mask),
            attention_mask=mask,
            decoder_input_ids=target[:, :1],
            cache=cache,
            use_cache=True,
        )
        assert getattr(step, CACHE_FIELD).get_seq_length() == TARGET + 1
        cache.reorder_cache(torch.tensor([1, 0]))
        cache.batch_repeat_interleave(2)
        for layer in cache.self_attention_cache.layers:
            assert layer.keys.shape[0] == layer.values.shape[0] == 2 * BATCH


# ---------------------------------------------------------------------------------------------- tied weights


@pytest.mark.parametrize("name", VARIANTS)
def test_tied_weights_absent_from_a_checkpoint_are_the_keys_the_trainer_expects(name, tmp_path):
    """The Trainer loads the best (or a resumed) checkpoint with `load_state_dict(strict=False)` and warns about
    missing keys unless they are exactly `model._keys_to_ignore_on_save`: the tied targets, saved once under their
    source."""
    from safetensors.torch import load_file

    model = make_model(name)
    model.save_pretrained(tmp_path)
    result = model.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=False)
    assert not result.unexpected_keys
    assert set(result.missing_keys) == set(model._keys_to_ignore_on_save)
    assert "lm_head.weight" in result.missing_keys  # tied to the target embedding in every tiny config
    # A projection untied after construction is saved (only matrices that are tied right now are left out).
    untied = copy.deepcopy(model)
    untied.lm_head.weight = torch.nn.Parameter(untied.lm_head.weight.detach().clone())
    untied.save_pretrained(tmp_path / "untied")
    assert "lm_head.weight" in load_file(tmp_path / "untied" / "model.safetensors")
    assert "lm_head.weight" not in untied._keys_to_ignore_on_save


# ---------------------------------------------------------------------------------------------- the checkpoint boundary

PACKAGE_DIR = Path(hf_unified_mt.__file__).parent


def _global_hook_counts() -> dict[str, int]:
    """Sizes of torch's process-wide hook registries: optimizer step hooks and module hooks."""
    optimizer = importlib.import_module("torch.optim.optimizer")
    registries = {
        "optimizer_pre": optimizer._global_optimizer_pre_hooks,
        "optimizer_post": optimizer._global_optimizer_post_hooks,
    }
    module = importlib.import_module("torch.nn.modules.module")
    for name in dir(module):
        if name.startswith("_global_") and name.endswith("_hooks") and isinstance(getattr(module, name), dict):
            registries[name] = getattr(module, name)
    return {name: len(registry) for name, registry in registries.items()}


@pytest.mark.parametrize("name", VARIANTS)
def test_a_checkpoint_carries_exactly_the_modeling_closure_and_no_global_hooks(name, tmp_path):
    """The saved remote code is the architecture's two files plus the shared ones, nothing from
    `hf_unified_mt.training`; building, saving and loading (also as remote code) installs no process-wide hook."""
    before = _global_hook_counts()
    arch, preset, overrides = VARIANTS[name]
    config = tiny_config(arch, preset, **{**TINY, **overrides})
    model = AutoModelForSeq2SeqLM.from_config(config)
    model.save_pretrained(tmp_path)
    saved = {path.name for path in tmp_path.glob("*.py")}
    # Compositions carry the files of the papers they compose: Prime layers (paper 000) in the Multi-Encoder, the
    # Multi-Pass encoder and MUTE's units; paper 001's decoder variants (their own module) in every architecture with a
    # Transformer-style decoder.
    prime = {"modeling_unified_transformer.py", "configuration_unified_transformer.py"}
    variants = set(DECODER_VARIANT_FILES)
    composed = {
        "deep_transformer": variants,
        "multi_encoder_transformer": prime | variants,
        "multi_pass_transformer": prime | variants,
        "multi_unit_transformer": prime | variants,
    }
    assert saved == {f"modeling_{arch}.py", f"configuration_{arch}.py", *COMMON_CODE_FILES, *composed.get(arch, ())}
    assert not list(tmp_path.glob("**/training/*.py"))
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, trust_remote_code=True)
    reloaded.train()(**dict(zip(("input_ids", "attention_mask", "labels"), batch())))
    assert _global_hook_counts() == before


SENTENCES = ["hola mundo", "el gato ve al perro en la casa grande"]


@pytest.mark.subprocess
def test_remote_code_without_the_package_generates_identically_and_installs_no_global_hooks(tmp_path):
    """Every variant's trained checkpoint (with a tokenizer), loaded where `hf_unified_mt` cannot be imported, in one
    fresh interpreter (each start costs seconds): refused without `trust_remote_code`; with it, the class comes from
    the checkpoint's code, and beam search (with and without the cache), greedy search (MPT: also reading the first
    pass) and `pipeline("translation")` give what the package's classes give here. All models are loaded before any
    generates (each checkpoint brings its own copy of the cache layer, registered under one global name). Loading,
    generating and a training forward (MUTE's AutoShuffle included) leave torch's process-wide hooks as they were."""
    tokenizer = make_tokenizer()
    ids, mask, _ = batch()
    expected = {}
    for name in VARIANTS:
        folder = tmp_path / name
        trained_model(name).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        config = json.loads((folder / "config.json").read_text())
        model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()  # the package's classes, default attention
        assert config["auto_map"]["AutoModelForSeq2SeqLM"] == f"modeling_{config['model_type']}.{type(model).__name__}"
        assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_translation.TranslationPipeline"
        translator = hf_unified_mt.TranslationPipeline(model=model, tokenizer=tokenizer, max_new_tokens=8)
        expected[name] = dict(
            beam=model.generate(ids, attention_mask=mask, num_beams=4, max_new_tokens=10).tolist(),
            greedy=model.generate(ids, attention_mask=mask, max_new_tokens=10).tolist(),
            pipeline=translator(SENTENCES, batch_size=2),
        )
        assert len({token for row in expected[name]["beam"] for token in row}) > 4, name  # varied outputs
        if getattr(model.config, "num_passes", 1) > 1:
            expected[name]["first_pass"] = model.generate(
                ids, attention_mask=mask, max_new_tokens=10, encoder_pass=1
            ).tolist()
    remote = run_without_package(
        f"""
        import importlib, json, torch
        from transformers import AutoModelForSeq2SeqLM, pipeline

        def counts():
            names = ("torch.optim.optimizer", "torch.nn.modules.module")
            registries = [importlib.import_module(name) for name in names]
            return {{name: len(value) for module in registries for name, value in vars(module).items()
                    if name.startswith("_global_") and name.endswith("_hooks") and isinstance(value, dict)}}

        before = counts()
        try:
            AutoModelForSeq2SeqLM.from_pretrained("unified-prime", trust_remote_code=False)
            refused = False
        except ValueError:
            refused = True
        ids, mask = torch.tensor({ids.tolist()}), torch.tensor({mask.tolist()})
        names = {list(VARIANTS)!r}
        models = {{name: AutoModelForSeq2SeqLM.from_pretrained(name, trust_remote_code=True).eval() for name in names}}
        results = {{}}
        for name, model in models.items():
            results[name] = dict(
                module=type(model).__module__,
                beam=model.generate(ids, attention_mask=mask, num_beams=4, max_new_tokens=10).tolist(),
                beam_no_cache=model.generate(ids, attention_mask=mask, num_beams=4, max_new_tokens=10,
                                             use_cache=False).tolist(),
                greedy=model.generate(ids, attention_mask=mask, max_new_tokens=10).tolist(),
                pipeline=pipeline("translation", model=name, trust_remote_code=True, max_new_tokens=8)(
                    {SENTENCES!r}, batch_size=2),
            )
            if getattr(model.config, "num_passes", 1) > 1:
                results[name]["first_pass"] = model.generate(ids, attention_mask=mask, max_new_tokens=10,
                                                             encoder_pass=1).tolist()
        for model in models.values():
            model.train()(input_ids=ids, attention_mask=mask, labels=ids)
        print(json.dumps(dict(refused=refused, results=results, before=before, after=counts())))
    """,
        tmp_path,
    )
    assert remote["refused"], "without trust_remote_code the checkpoint's code must not run"
    assert remote["before"] and remote["before"] == remote["after"]
    for name, result in remote["results"].items():
        assert result["module"].startswith("transformers_modules"), (name, result["module"])
        assert result.pop("beam_no_cache") == result["beam"], name
        assert {key: value for key, value in result.items() if key != "module"} == expected[name], name


def test_the_flat_package_folder_is_exactly_the_union_of_the_checkpoint_closures():
    modules = {path.name for path in PACKAGE_DIR.glob("*.py")} - {"__init__.py"}
    closures = {f"{kind}_{arch}.py" for arch in hf_unified_mt.ARCHITECTURES for kind in ("modeling", "configuration")}
    assert modules == closures | set(COMMON_CODE_FILES) | set(DECODER_VARIANT_FILES)
    for path in PACKAGE_DIR.glob("*.py"):
        if path.name != "__init__.py":
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"^\s*(from|import)\s+(\.|hf_unified_mt\.)training\b", text, re.M), path.name


# ---------------------------------------------------------------------------------------------- print(model)


def expected_in_repr(config) -> list[str]:
    """What `print(model)` must show of each architecture's options."""
    norm = "pre-norm" if config.normalize_before else "post-norm"
    shown = [f"heads={config.decoder_attention_heads}"]
    if config.model_type == "unified_transformer":
        shown.append("post-norm (one LayerNorm)")
        if config.use_convolution:
            shown += [f"kernel_sizes={list(config.conv_kernel_sizes)}", "convolution_projection=shared"]
    elif config.model_type == "multi_unit_transformer":
        combination = "sequential" if config.use_sequential_dependency else "weighted sum"
        units = "Prime units, post-norm" if config.unit_layer["type"] == "prime" else "pre-norm"
        shown.append(f"units={config.num_units}, {units}, combination={combination}")
        if config.unit_layer["type"] == "prime":
            shown.append(f"kernel_sizes={list(config.unit_layer['conv_kernel_sizes'])}")
        if config.decoder_attention_type in ("self", "merged_self"):  # relative-position self-attention
            shown.append("relative_max_distance=")
        if config.use_bias_module:
            shown.append(f"noise_types={list(config.unit_noise_types)}")
    elif config.model_type == "multi_pass_transformer":
        shown += [f"passes={config.num_passes}", norm]
        shown.append(
            "MultiPassConnections(soft"
            if config.connection_type == "soft"
            else f"permutation={list(config.hard_connections)}"
        )
    elif config.model_type == "multi_encoder_transformer":
        shown.append("BranchCombination(sum)")
        if any(spec["type"] == "fnet" for spec in config.encoder_branches):
            shown.append("fft_length=")
    else:
        shown.append(norm)
        if config.decoder_attention_type == "aan":
            shown.append(f"ffn={config.aan_use_ffn}, gated=True")
    return shown


@pytest.mark.parametrize("name", VARIANTS)
def test_print_model_shows_the_architecture_options(name):
    model = make_model(name)
    text = repr(model)
    for expected in expected_in_repr(model.config):
        assert expected in text, f"{expected!r} not in print(model)"
