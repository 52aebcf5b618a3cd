"""What the Multi-Pass Transformer (paper 004) adds, on tiny CPU models (the checks every architecture shares are in
`test_model_contract.py`).

Most generation checks use models briefly trained on a toy word-mapping task: the untrained tiny models (tied
embeddings) repeat the start token, which would let a cache or padding bug go unnoticed."""

import copy
import importlib
import json
import logging
from functools import partial
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig
from transformers.testing_utils import CaptureLogger

import hf_unified_mt
from conftest import SPECIALS, VOCAB_WORDS, random_batch, tiny_config
from hf_unified_mt import modeling_multi_pass_transformer
from hf_unified_mt.modeling_mt_common import (
    MTDecoder,
    MTDecoderLayer,
    MTEncoder,
    MTEncoderLayer,
    MTForConditionalGeneration,
    MTModel,
)
from hf_unified_mt.modeling_multi_pass_transformer import (
    MultiPassTransformerForConditionalGeneration,
    MultiPassTransformerModel,
)
from mt_checks import (
    assert_generate_is_identical_without_cache,
    assert_gradient_checkpointing_gives_the_same_gradients,
    assert_incremental_decoding_matches_full_forward,
    assert_translation_does_not_depend_on_batch_or_padding,
)


VOCAB = len(SPECIALS) + len(VOCAB_WORDS)


mpt_config = partial(tiny_config, "multi_pass_transformer")


def tiny_model(seed: int = 0, **overrides) -> MultiPassTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return MultiPassTransformerForConditionalGeneration(mpt_config(**overrides)).eval()


# ------------------------------------------------------------------------------------------ toy-trained models


def toy_task(num_pairs: int = 8, length: int = 6):
    """Word-by-word 'translation' through a fixed vocabulary permutation, with the first three words reversed."""
    generator = torch.Generator().manual_seed(0)
    mapping = torch.randperm(VOCAB - 4, generator=generator) + 4
    source = torch.randint(4, VOCAB, (num_pairs, length), generator=generator)
    source[:, -1] = 2
    target = mapping[source - 4]
    target[:, -1] = 2
    target = torch.cat([target[:, :3].flip(1), target[:, 3:]], dim=1)
    return source, target


VARIANTS = {
    # the sum objective trains both passes, so that pass 1 translates too
    "hard": dict(hard_connections=[2, 0, 1], training_objective="sum"),
    "soft-c": dict(connection_type="soft", routing_pattern="c", training_objective="random"),
    "pre-norm-b-3-passes": dict(normalize_before=True, routing_pattern="b", num_passes=3, hard_connections=[1, 2, 0]),
}
_TRAINED = {}


def trained_model(variant: str) -> MultiPassTransformerForConditionalGeneration:
    if variant not in _TRAINED:
        model = tiny_model(**VARIANTS[variant]).train()
        source, target = toy_task()
        # lr 1e-2 trained the hard variant at the edge of stability: a rounding-level change of the loss's arithmetic
        # (blockwise cross-entropy) ended it at loss 0.11 instead of 0.006; at 5e-3 both end at 0.011
        optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
        for _ in range(120):
            loss = model(input_ids=source, labels=target).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        _TRAINED[variant] = model.eval()
    return _TRAINED[variant]


# ------------------------------------------------------------------------------------------ reference forward


def reference_encoder(model, input_ids, num_passes):
    """The multi-pass encoder written out from the paper (§3.2-3.3, Eq. 2, 3, 6), post-norm, no padding, no dropout."""
    encoder, config = model.model.encoder, model.config
    if config.connection_type == "soft":
        alpha = torch.softmax(encoder.connections.logits, dim=-1)  # Eq. (6)
    else:
        alpha = torch.eye(config.encoder_layers)[config.hard_connections]  # alpha_kj = 1 iff j = tau_k
    x = encoder.embed(input_ids, None)
    previous = None
    for _ in range(num_passes):
        hidden, features = x, []  # each pass starts from the original input X
        for k, layer in enumerate(encoder.layers):
            connection = None if previous is None else sum(alpha[k, j] * previous[j] for j in range(len(previous)))
            branch = 0.0
            if connection is not None and config.routing_pattern in "ac":
                hidden = hidden + connection  # before the residual branch point
            elif connection is not None:
                branch = connection  # on the self-attention branch only
            mid = layer.self_attn_sublayer.layer_norm(hidden + layer.self_attn(hidden + branch)[0])
            out = layer.ffn_sublayer.layer_norm(mid + layer.ffn(mid))
            features.append(mid if config.routing_pattern in "cd" else out)
            hidden = out
        previous = features
    return hidden


@pytest.mark.parametrize("pattern", ["a", "b", "c", "d"])
@pytest.mark.parametrize("connection_type", ["hard", "soft"])
def test_encoder_matches_the_paper_equations(pattern, connection_type):
    extra = dict(hard_connections=[2, 0, 1]) if connection_type == "hard" else {}
    model = tiny_model(connection_type=connection_type, routing_pattern=pattern, num_passes=3, **extra)
    if connection_type == "soft":
        with torch.no_grad():
            model.model.encoder.connections.logits.normal_(0, 2.0)
    ids, _ = random_batch(VOCAB, pad_last=0)
    with torch.no_grad():
        for num_passes in (1, 2, 3):
            expected = reference_encoder(model, ids, num_passes)
            actual = model.get_encoder()(input_ids=ids, encoder_pass=num_passes).last_hidden_state
            assert torch.allclose(actual, expected, atol=1e-5), (num_passes, (actual - expected).abs().max())
        # the connections matter: another permutation / other weights give another second pass
        before = model.get_encoder()(input_ids=ids, encoder_pass=2).last_hidden_state
        if connection_type == "hard":
            model.model.encoder.connections.permutation = [0, 1, 2]
        else:
            model.model.encoder.connections.logits.zero_()
        after = model.get_encoder()(input_ids=ids, encoder_pass=2).last_hidden_state
        assert not torch.allclose(before, after, atol=1e-3)


def test_hard_connections_are_one_hot_and_soft_weights_sum_to_one():
    hard = tiny_model(hard_connections=[2, 0, 1]).model.encoder.connection_weights
    assert torch.equal(hard, torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    soft_model = tiny_model(connection_type="soft")
    assert torch.allclose(soft_model.model.encoder.connection_weights, torch.full((3, 3), 1 / 3))  # zero logits
    with torch.no_grad():
        soft_model.model.encoder.connections.logits.normal_(0, 3.0)
    alpha = soft_model.model.encoder.connection_weights
    assert torch.allclose(alpha.sum(-1), torch.ones(3), atol=1e-6) and (alpha >= 0).all()
    identity = tiny_model(connection_type="soft", soft_connection_init="identity").model.encoder.connection_weights
    assert torch.allclose(identity.diagonal(), torch.full((3,), 0.99))
    assert tiny_model(num_passes=1, connection_type="soft").model.encoder.connection_weights is None


def test_initialisation_follows_fairseq():
    model = tiny_model()
    d = model.config.d_model
    default_bound, xavier_qkv, xavier_out = d**-0.5, 2**-0.5 * (6 / (2 * d)) ** 0.5, (6 / (2 * d)) ** 0.5
    for layer in list(model.model.encoder.layers) + [layer.encoder_attn for layer in model.model.decoder.layers]:
        attention = getattr(layer, "self_attn", layer)
        for projection, bound in (
            (attention.q_proj, xavier_qkv),
            (attention.v_proj, xavier_qkv),
            (attention.out_proj, xavier_out),
        ):
            assert default_bound < projection.weight.abs().max() <= bound  # Xavier-uniform, not PyTorch's default
            assert projection.bias.abs().max() == 0
    assert model.model.encoder.layers[0].ffn.fc1.weight.abs().max() <= default_bound


def test_the_shared_init_law_changes_only_the_attention_projections():
    """`init_law="pytorch"`: every attention projection under
    PyTorch's U(±1/sqrt(fan_in)); the other
    parameters drawn exactly as under the fairseq law (same seed, same order)."""
    torch.manual_seed(0)
    fairseq = tiny_model()
    torch.manual_seed(0)
    shared = tiny_model(init_law="pytorch")
    bound = shared.config.d_model**-0.5
    attention = ("q_proj", "k_proj", "v_proj", "out_proj")
    for name, parameter in shared.named_parameters():
        if any(f".{projection}.weight" in name for projection in attention):
            assert parameter.abs().max() <= bound, name
            assert not torch.equal(parameter, fairseq.get_parameter(name)), name
        else:
            assert torch.equal(parameter, fairseq.get_parameter(name)), name
    assert shared.config.init_law == "pytorch" and fairseq.config.init_law == "fairseq"


# ------------------------------------------------------------------------------------------ plain Transformer


class PlainEncoder(MTEncoder):
    def build_layer(self, config, layer_idx):
        return MTEncoderLayer(config, layer_idx)


class PlainDecoder(MTDecoder):
    def build_layer(self, config, layer_idx):
        return MTDecoderLayer(config, layer_idx)


class PlainModel(MTModel):
    encoder_class, decoder_class = PlainEncoder, PlainDecoder


class PlainForConditionalGeneration(MTForConditionalGeneration):
    base_model_class = PlainModel


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("normalize_before", [False, True])
def test_one_pass_is_exactly_a_plain_transformer(normalize_before):
    model = tiny_model(num_passes=1, connection_type="soft", normalize_before=normalize_before)
    plain = PlainForConditionalGeneration(model.config).eval()
    plain.load_state_dict(model.state_dict(), strict=True)  # same parameters, same names
    ids, mask = random_batch(VOCAB)
    with torch.no_grad():
        expected = plain(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits
        assert torch.equal(model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits, expected)
        # the first pass of a two-pass model is the same plain encoder
        two_pass = tiny_model(num_passes=2, normalize_before=normalize_before)
        plain.load_state_dict(two_pass.state_dict(), strict=True)
        first = two_pass.get_encoder()(input_ids=ids, attention_mask=mask, encoder_pass=1).last_hidden_state
        assert torch.equal(first, plain.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_parameter_count_is_a_plain_transformer_plus_n_squared_for_soft():
    plain = count(PlainForConditionalGeneration(mpt_config()))
    n = mpt_config().encoder_layers
    for passes in (1, 2, 3):
        assert count(tiny_model(num_passes=passes)) == plain
        assert count(tiny_model(num_passes=passes, connection_type="soft")) == plain + (n * n if passes > 1 else 0)
    # Transformer base (6+6, d 512, FFN 2048, shared and tied embeddings): 44,138,496 + 512 V
    # (Gao et al., Table 1: 61.2M)
    for preset, extra in (("base", 0), ("base-searched", 0), ("base-soft", 36)):
        config = hf_unified_mt.get_config("multi_pass_transformer", preset, vocab_size=1000)
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            assert count(MultiPassTransformerForConditionalGeneration(config)) == 44_138_496 + 512 * 1000 + extra


# ------------------------------------------------------------------------------------------ objectives


def _loss(model, ids, labels, **kwargs):
    return model(input_ids=ids, labels=labels, **kwargs).loss


def test_training_objectives():
    ids, _ = random_batch(VOCAB, pad_last=0)
    labels = torch.roll(ids, 1, dims=1)
    model = tiny_model(num_passes=2).train()  # dropout 0: train and eval compute the same function
    per_pass = [_loss(model, ids, labels, encoder_pass=p) for p in (1, 2)]
    assert not torch.allclose(per_pass[0], per_pass[1])
    assert torch.equal(_loss(model, ids, labels), per_pass[1])  # "last"

    model.config.training_objective = "sum"
    total = _loss(model, ids, labels)
    assert torch.allclose(total, per_pass[0] + per_pass[1], atol=1e-6)
    total.backward()
    assert all(p.grad is not None for p in model.parameters())
    with torch.no_grad():  # evaluation reads one pass
        assert torch.allclose(_loss(model.eval(), ids, labels), per_pass[1].detach())
    # A Trainer that computes the loss from the logits cannot sum over passes: that is said, not silently dropped.
    logging.Logger.warning_once.cache_clear()  # shown once per process: make sure this call shows it
    with CaptureLogger(modeling_multi_pass_transformer.logger) as captured:
        model.train()(input_ids=ids, decoder_input_ids=labels)
    assert "only the last pass is trained" in captured.out

    model.train().config.training_objective = "random"
    torch.manual_seed(0)
    draws = [_loss(model, ids, labels).item() for _ in range(12)]
    matches = [min(range(2), key=lambda p: abs(loss - per_pass[p].item())) for loss in draws]
    assert all(abs(loss - per_pass[p].item()) < 1e-5 for loss, p in zip(draws, matches, strict=True))
    assert set(matches) == {0, 1}, "both passes are drawn"


def test_sum_objective_keeps_every_pass_under_train_py_label_smoothing(tmp_path):
    """train.py's --label_smoothing_factor (on by default) goes into the model, which keeps its labels in the
    Trainer and so still sums the losses of all passes."""
    from hf_unified_mt.training.batching import TokenBatchSeq2SeqTrainer

    train_script = importlib.import_module("hf_unified_mt.training.run")
    ids, _ = random_batch(VOCAB, pad_last=0)
    labels = torch.roll(ids, 1, dims=1)
    model = tiny_model(num_passes=2, training_objective="sum").train()
    args = train_script.MTTrainingArguments(
        output_dir=str(tmp_path), label_smoothing_factor=0.1, eval_strategy="no", use_cpu=True, report_to="none"
    )
    train_script.move_label_smoothing_into_model(model, args)
    assert args.label_smoothing_factor == 0.0 and model.config.label_smoothing == 0.1
    trainer = TokenBatchSeq2SeqTrainer(model=model, args=args)
    assert trainer.label_smoother is None
    loss = trainer.compute_loss(model, {"input_ids": ids, "labels": labels})
    per_pass = [_loss(model, ids, labels, encoder_pass=p) for p in (1, 2)]
    assert torch.allclose(loss, per_pass[0] + per_pass[1], atol=1e-6)
    model.config.label_smoothing = 0.0
    assert not torch.allclose(_loss(model, ids, labels, encoder_pass=2), per_pass[1])  # the passes were smoothed


def test_gradient_checkpointing_with_pattern_c_and_the_sum_objective():
    """The contract checks checkpointing on pattern (a) with the last pass trained; here the connections read the
    layers' inner features and every pass is trained, and the connection weights still get their gradient."""
    ids, mask = random_batch(VOCAB)
    built = []

    def build():
        built.append(tiny_model(connection_type="soft", routing_pattern="c", training_objective="sum").train())
        return built[-1]

    assert_gradient_checkpointing_gives_the_same_gradients(
        build, input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)
    )
    assert all(model.model.encoder.connections.logits.grad.abs().sum() > 0 for model in built)


# ------------------------------------------------------------------------------------------ choosing the pass


def _count_layer_calls(model):
    calls = []
    handles = [layer.register_forward_hook(lambda *_: calls.append(1)) for layer in model.model.encoder.layers]
    return calls, handles


def test_choosing_the_pass_changes_the_encoder_cost_and_translates():
    model = trained_model("hard")
    source, target = toy_task()
    calls, handles = _count_layer_calls(model)
    outputs = {}
    for encoder_pass in (1, 2):
        calls.clear()
        outputs[encoder_pass] = model.generate(source, encoder_pass=encoder_pass, max_new_tokens=8, num_beams=2)
        assert len(calls) == encoder_pass * model.config.encoder_layers  # the encoder ran once, that many passes
    for handle in handles:
        handle.remove()
    for encoder_pass, generated in outputs.items():
        # a valid translation from either pass: the toy targets, then </s>
        assert torch.equal(generated[:, 1 : target.shape[1] + 1], target), encoder_pass
    with torch.no_grad():
        full = model.get_encoder()(input_ids=source, output_pass_hidden_states=True)
        first = model.get_encoder()(input_ids=source, encoder_pass=1).last_hidden_state
    assert len(full.pass_hidden_states) == 2 and torch.equal(full.pass_hidden_states[-1], full.last_hidden_state)
    assert torch.equal(full.pass_hidden_states[0], first) and not torch.allclose(first, full.last_hidden_state)

    # the config default, and the same choice through the translation pipeline
    chosen = copy.deepcopy(model)
    chosen.config.inference_pass = 1
    assert torch.equal(chosen.generate(source, max_new_tokens=8, num_beams=2), outputs[1])
    with pytest.raises(ValueError, match="encoder_pass"):
        model.generate(source, encoder_pass=3, max_new_tokens=2)


def test_pipeline_reads_the_chosen_pass(tokenizer):
    model = trained_model("hard")
    translator = hf_unified_mt.TranslationPipeline(model=model, tokenizer=tokenizer, max_new_tokens=6, num_beams=2)
    sentences = ["hola mundo", "el gato ve al perro"]
    for encoder_pass in (1, 2):
        direct = model.generate(
            **tokenizer(sentences, return_tensors="pt", padding=True),
            max_new_tokens=6,
            num_beams=2,
            encoder_pass=encoder_pass,
        )
        expected = [{"translation_text": t} for t in tokenizer.batch_decode(direct, skip_special_tokens=True)]
        assert translator(sentences, batch_size=2, encoder_pass=encoder_pass) == expected


# ------------------------------------------------------------------------------------------ decoding


# The contract covers two passes with pattern (a); here: patterns (b) and (c), three passes, pre-norm.
@pytest.mark.parametrize("variant", ["soft-c", "pre-norm-b-3-passes"])
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_incremental_decoding_matches_full_forward_for_each_routing_pattern(variant, attn_implementation):
    model = copy.deepcopy(trained_model(variant))
    model.set_attn_implementation(attn_implementation)
    ids, mask = random_batch(VOCAB)
    target = torch.randint(4, VOCAB, (ids.shape[0], 8), generator=torch.Generator().manual_seed(3))
    assert_incremental_decoding_matches_full_forward(model, ids, mask, target)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_generate_with_and_without_cache_is_identical(variant):
    model = trained_model(variant)
    source, _ = toy_task()
    settings = [
        dict(),
        dict(encoder_pass=1),
        dict(num_beams=4, num_return_sequences=2),
        dict(num_beams=4, num_return_sequences=2, encoder_pass=1),
        dict(do_sample=True, top_k=10),
    ]
    assert_generate_is_identical_without_cache(model, source[:4], settings=settings, new_tokens=10)


@pytest.mark.parametrize("variant", ["hard", "pre-norm-b-3-passes"])
def test_every_pass_is_independent_of_batch_and_padding(variant):
    model = trained_model(variant)
    ids, mask = random_batch(VOCAB, batch=3, pad_last=4)
    passes = [dict(encoder_pass=p) for p in range(1, model.config.num_passes + 1)]
    assert_translation_does_not_depend_on_batch_or_padding(
        model,
        ids,
        mask,
        pad=4,
        settings=(dict(), dict(num_beams=4), dict(num_beams=4, encoder_pass=1)),
        encoder_kwargs=passes,
        varied=False,
    )


# ------------------------------------------------------------------------------------------ saved config


def test_a_saved_config_keeps_the_connections_and_the_passes(tmp_path):
    hard = tiny_model(hard_connections=[2, 0, 1], num_passes=3, inference_pass=2)
    hard.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["hard_connections"], saved["num_passes"], saved["inference_pass"]) == ([2, 0, 1], 3, 2)
    assert AutoConfig.from_pretrained(tmp_path).hard_connections == [2, 0, 1]


# ------------------------------------------------------------------------------------------ outputs and errors


def test_hidden_states_and_attentions_are_those_of_the_read_pass_and_every_pass_is_in_its_own_field():
    model = tiny_model(num_passes=2)
    model.set_attn_implementation("eager")
    ids, mask = random_batch(VOCAB)
    n = model.config.encoder_layers
    for encoder_pass in (1, 2):
        out = model(
            input_ids=ids,
            attention_mask=mask,
            decoder_input_ids=ids[:, :5],
            output_attentions=True,
            output_hidden_states=True,
            encoder_pass=encoder_pass,
        )
        # as config.encoder_layers says: the embeddings and one state per layer, one map per layer
        assert len(out.encoder_hidden_states) == n + 1
        assert len(out.encoder_attentions) == n
        assert torch.equal(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
        assert out.encoder_attentions[-1][-1, :, :, -3:].abs().max() == 0  # padding gets no attention
        # every pass that ran, each laid out the same way; the read pass is the last
        assert len(out.encoder_per_pass_hidden_states) == len(out.encoder_per_pass_attentions) == encoder_pass
        assert all(len(states) == n + 1 for states in out.encoder_per_pass_hidden_states)
        assert all(len(maps) == n for maps in out.encoder_per_pass_attentions)
        assert out.encoder_per_pass_hidden_states[-1] == out.encoder_hidden_states
        assert out.encoder_per_pass_attentions[-1] == out.encoder_attentions
    encoder = model.get_encoder()(
        input_ids=ids,
        attention_mask=mask,
        output_hidden_states=True,
        output_attentions=True,
        output_pass_hidden_states=True,
    )
    first, second = encoder.per_pass_hidden_states
    assert torch.equal(first[0], second[0]), "every pass starts from the embeddings X"
    assert torch.equal(first[-1], encoder.pass_hidden_states[0])  # end of the first pass
    assert not torch.allclose(first[1], second[1]), "the second pass's layers read the connections"
    assert not torch.allclose(encoder.per_pass_attentions[0][0], encoder.per_pass_attentions[1][0])
    # index selection picks among the read pass's n + 1 states; the tuple form carries the same
    selected = model.get_encoder()(input_ids=ids, attention_mask=mask, output_hidden_states=[0, -1])
    assert [state is None for state in selected.hidden_states] == [False] + [True] * (n - 1) + [False]
    assert torch.equal(selected.hidden_states[-1], encoder.last_hidden_state)
    as_tuple = model.get_encoder()(input_ids=ids, attention_mask=mask, output_hidden_states=True, return_dict=False)
    assert torch.equal(as_tuple[0], encoder.last_hidden_state) and len(as_tuple[1]) == n + 1


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(hard_connections=[0, 0, 1]), "hard_connections"),  # not a permutation
        (dict(hard_connections=[0, 1, 3]), "hard_connections"),
        (dict(hard_connections=[0, 1]), "hard_connections"),  # wrong length
        (dict(hard_connections=[1, 0, 2, 3]), "hard_connections"),
        (dict(connection_type="soft", hard_connections=[0, 1, 2]), "hard_connections"),
        (dict(connection_type="dense"), "connection_type"),
        (dict(routing_pattern="e"), "routing_pattern"),
        (dict(training_objective="mean"), "training_objective"),
        (dict(soft_connection_init="delta"), "soft_connection_init"),
        (dict(init_law="xavier_normal"), "init_law"),
        # the retired keyword of a version never released: refused, naming it
        (dict(linear_init="glorot"), "linear_init"),
        (dict(init_law="normal", linear_init="fairseq"), "linear_init"),
        (dict(num_passes=0), "num_passes"),
        (dict(inference_pass=3), "inference_pass"),
        (dict(inference_pass=0), "inference_pass"),
        (dict(num_pass=2), "num_passes"),  # a misspelled option
    ],
)
def test_bad_config_raises_value_error_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        mpt_config(**overrides)


def test_searched_preset_and_the_base_model_reading_a_chosen_pass():
    assert hf_unified_mt.get_config("multi_pass_transformer", "base-searched").hard_connections == [0, 4, 1, 5, 2, 3]
    base = MultiPassTransformerModel(mpt_config())
    ids, mask = random_batch(VOCAB)
    out = base(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :4], encoder_pass=1)
    assert out.last_hidden_state.shape == (3, 4, base.config.d_model)


# ------------------------------------------------------------------------------------------ connection search tool


def _load_search_tool():
    return importlib.import_module("hf_unified_mt.analysis.search_connections")


def test_connection_search_is_coarse_to_fine_and_resumable(tmp_path):
    """The search logic with a stand-in for train.py whose validation loss is the number of swaps to a hidden best
    permutation: refining around the best candidates must walk to it, and a rerun must train nothing again."""
    search = _load_search_tool()
    best = [3, 1, 4, 0, 2]

    def swaps_to_best(permutation):
        relative, seen, cycles = [best.index(j) for j in permutation], set(), 0
        for start in range(len(relative)):
            cycles += start not in seen
            while start not in seen:
                seen.add(start)
                start = relative[start]
        return len(relative) - cycles

    trained = []

    def fake_train_main(argv, callbacks):
        permutation = json.loads(argv[argv.index("--config_overrides") + 1])["hard_connections"]
        run_dir = tmp_path / "search" / "runs" / search.key_of(permutation)
        (run_dir / "checkpoint-2").mkdir(parents=True)
        trained.append((permutation, argv))
        callbacks[0].on_evaluate(None, None, None, metrics={"eval_loss": float(swaps_to_best(permutation))})

    options = [
        "--output_dir",
        str(tmp_path / "search"),
        "--preset",
        "tiny",
        "--config_overrides",
        '{"encoder_layers": 5}',
        "--coarse_samples",
        "3",
        "--refine_top",
        "1",
        "--refine_neighbours",
        "10",
        "--max_steps",
        "7",
    ]
    ranking = search.main(options + ["--refine_rounds", "1"], train_main=fake_train_main)
    first_round = len(trained)
    # identity + 3 random permutations, then the unseen ones of the best candidate's 10 one-swap neighbours
    assert trained[0][0] == [0, 1, 2, 3, 4] and 4 < first_round <= 4 + 10
    assert trained[0][1][-2:] != ["--resume_from_checkpoint", "last"] and "--max_steps" in trained[0][1]
    assert "--tokenizer_name_or_path" in trained[1][1], "later candidates reuse the first run's tokenizer"
    assert [e["value"] for e in ranking] == sorted(e["value"] for e in ranking)
    assert not any((tmp_path / "search" / "runs").glob("*/checkpoint-*")), "finished candidates' checkpoints go"

    ranking = search.main(options + ["--refine_rounds", "6"], train_main=fake_train_main)  # resumes, goes on
    assert ranking[0]["permutation"] == best and ranking[0]["value"] == 0
    assert len({tuple(p) for p, _ in trained}) == len(trained), "no candidate is trained twice"
    assert len(trained) < 120, "the fine stage explores neighbourhoods, not the whole space"
    board = json.loads((tmp_path / "search" / "leaderboard.json").read_text())
    assert board[0]["hard_connections"] == best and board[0]["rank"] == 1 and len(board) == len(trained)
    assert "| 1 | [3, 1, 4, 0, 2] | 0.0000 |" in (tmp_path / "search" / "leaderboard.md").read_text()

    count = len(trained)
    search.main(options + ["--refine_rounds", "6"], train_main=fake_train_main)
    assert len(trained) == count, "a finished search trains nothing when run again"
    with pytest.raises(ValueError, match="metric"):
        search.main(options + ["--metric", "bleu"], train_main=fake_train_main)


def test_connection_search_trains_through_train_py(tmp_path):
    """Two candidates trained for real by training/train.py on a slice of the embedded corpus."""
    search = _load_search_tool()
    output = tmp_path / "search"
    ranking = search.main(
        [
            "--output_dir",
            str(output),
            "--preset",
            "tiny",
            "--coarse_samples",
            "1",
            "--refine_rounds",
            "0",
            "--max_train_samples",
            "48",
            "--max_eval_samples",
            "8",
            "--tokenizer_vocab_size",
            "300",
            "--max_source_length",
            "64",
            "--max_target_length",
            "64",
            "--overlong",
            "skip",
            "--max_tokens",
            "600",
            "--max_steps",
            "2",
            "--eval_steps",
            "100",
            "--save_steps",
            "100",
            "--warmup_steps",
            "1",
            "--use_cpu",
            "--disable_tqdm",
            "True",
            "--report_to",
            "none",
            "--dataloader_num_workers",
            "0",
        ]
    )
    assert len(ranking) == 2 and all(entry["value"] > 0 for entry in ranking)
    for entry in ranking:
        saved = json.loads((Path(entry["run_dir"]) / "config.json").read_text())
        assert saved["model_type"] == "multi_pass_transformer" and saved["hard_connections"] == entry["permutation"]
    assert (output / "leaderboard.md").exists()


# ------------------------------------------------------------------------------------------ composition: Prime passes


def test_prime_layers_run_in_the_passes_and_refuse_the_patterns_they_cannot_carry():
    """Composition: the passes run the Unified Transformer's Prime encoder layer (paper 000) with the connection added
    to its input (pattern (a)); patterns (b)-(d) and pre-norm raise naming the fields."""
    model = tiny_model(encoder_layer=dict(type="prime", conv_kernel_sizes=[3, 5]))
    assert model.config.encoder_layer == dict(
        type="prime", use_convolution=True, conv_kernel_sizes=[3, 5], conv_weight_dropout=0.1
    )
    layer = model.model.encoder.layers[0]
    assert type(layer).__name__ == "MultiPassPrimeEncoderLayer" and layer.self_attn.conv.kernel_sizes == [3, 5]
    for overrides, fields in (
        (dict(routing_pattern="c"), ("encoder_layer", "routing_pattern")),
        (dict(normalize_before=True), ("encoder_layer", "normalize_before")),
        (dict(encoder_layer=dict(type="prime", kernel_sizes=[3])), ("encoder_layer", "kernel_sizes")),
        (dict(encoder_layer=dict(type="lstm")), ("encoder_layer",)),
    ):
        with pytest.raises(ValueError) as error:
            tiny_model(**{"encoder_layer": dict(type="prime"), **overrides})
        assert all(field in str(error.value) for field in fields), (overrides, str(error.value))
