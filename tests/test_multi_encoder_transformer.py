"""What the Multi-Encoder Transformer (paper 003) adds, on tiny CPU models: every branch alone and every preset
trains and generates with and without the cache, padding independence per branch, the branches' maths, the saved
branch specs, presets, errors, and the parameter counts of the paper's presets (Table 8). The checks every
architecture shares are in `test_model_contract.py`."""

import json
import math
from functools import partial

import pytest
import torch
from transformers import AutoConfig, AutoModel

import hf_unified_mt
from conftest import SPECIALS, VOCAB_WORDS, random_batch, tiny_config
from hf_unified_mt.modeling_multi_encoder_transformer import (
    FourierMixing,
    LSTMBranch,
    StaticExpansion,
    StaticExpansionBranch,
)


VOCAB = len(SPECIALS) + len(VOCAB_WORDS)
ARCH = "multi_encoder_transformer"
BRANCH_TYPES = ["self_attention", "static_expansion", "lstm", "convs2s", "fnet"]
TINY_PRESETS = ["tiny-single", "tiny-dual", "tiny-triple", "tiny-quadruple", "tiny-quintuple"]
# Each branch alone (two layers), and the variants that change a branch's computation.
VARIANTS = {
    **{kind: [dict(type=kind, layers=2)] for kind in BRANCH_TYPES},
    "static_expansion-block": [
        dict(type="static_expansion", layers=2, expansion_sizes=[3, 5, 2], expansion_mode="block")
    ],
    "static_expansion-sequence-aware": [dict(type="static_expansion", layers=2, sequence_aware_expansion=True)],
}


encoder_config = partial(tiny_config, ARCH)


def tiny_model(preset: str = "tiny", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    model = hf_unified_mt.MultiEncoderTransformerForConditionalGeneration(encoder_config(preset, **overrides))
    for module in model.modules():  # give the (zero-initialised) sequence-aware gain a visible effect
        if isinstance(module, StaticExpansion) and module.sequence_gain is not None:
            torch.nn.init.normal_(module.sequence_gain, std=1.0)
    return model.eval()


def variant_model(name: str, **overrides):
    return tiny_model(encoder_branches=VARIANTS[name], **overrides)


# ---------------------------------------------------------------------------------------------- training, generation


@pytest.mark.parametrize("name", sorted(VARIANTS) + TINY_PRESETS + ["tiny-concat"])
def test_every_branch_alone_and_every_preset_trains_and_generates(name):
    if name in VARIANTS:
        model = variant_model(name)
    elif name == "tiny-concat":
        model = tiny_model(branch_combination="concat")
    else:
        model = tiny_model(name)
    model.train()
    ids, mask = random_batch(VOCAB, batch=4, length=9)
    labels = ids.masked_fill(mask == 0, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # Memorising one batch: the loss falls well below its start (about ln(vocab) = 4.2) within 8 steps.
    assert losses[-1] < losses[0] - 1.0, losses
    model.eval()
    for kwargs in (dict(), dict(num_beams=4)):
        kwargs.update(attention_mask=mask, max_new_tokens=6, min_new_tokens=6)
        cached, uncached = model.generate(ids, **kwargs), model.generate(ids, use_cache=False, **kwargs)
        assert cached.shape == (4, 7) and torch.equal(cached, uncached)


# ---------------------------------------------------------------------------------------------- padding


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_branch_encodes_a_sentence_independently_of_the_batch_padding(name):
    model = variant_model(name)
    ids, mask = random_batch(VOCAB, batch=3, pad_last=4)
    alone = ids[-1:, : ids.shape[1] - 4]
    # The same batch with 5 more padding columns, and with other tokens in the padded positions.
    wider_ids = torch.cat([ids, torch.zeros(3, 5, dtype=torch.long)], dim=1)
    wider_mask = torch.cat([mask, torch.zeros(3, 5, dtype=torch.long)], dim=1)
    noisy_ids = ids.masked_fill(mask == 0, 7)
    encoder = model.get_encoder()
    with torch.no_grad():
        batched = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        single = encoder(input_ids=alone).last_hidden_state[0]
        wider = encoder(input_ids=wider_ids, attention_mask=wider_mask).last_hidden_state
        noisy = encoder(input_ids=noisy_ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert torch.allclose(batched[-1, : alone.shape[1]], single, atol=1e-5)
    assert torch.allclose(wider[:, : ids.shape[1]][real], batched[real], atol=1e-5)
    assert torch.allclose(noisy[real], batched[real], atol=1e-5)


def test_fourier_mixing_needs_the_fixed_transform_length():
    """Negative control for the FNet branch: a transform over the batch's own length (the official FNet on
    dynamically padded batches) changes a sentence's mixing with its padding; the fixed length does not."""
    generator = torch.Generator().manual_seed(0)
    sentence = torch.randn(1, 5, 8, generator=generator)
    padded = torch.cat([sentence, torch.randn(1, 4, 8, generator=generator)], dim=1)
    mask = torch.tensor([[True] * 5 + [False] * 4])
    fixed = FourierMixing(fft_length=16)
    assert torch.allclose(fixed(padded, mask)[:, :5], fixed(sentence), atol=1e-5)
    assert torch.equal(fixed(padded, mask)[:, 5:], torch.zeros(1, 4, 8))
    batch_length = FourierMixing(fft_length=9)(padded, mask)[:, :5]
    own_length = FourierMixing(fft_length=5)(sentence)
    assert not torch.allclose(batch_length, own_length, atol=1e-3)


# ---------------------------------------------------------------------------------------------- the branches' maths


def test_fourier_mixing_is_the_real_part_of_the_two_dimensional_dft():
    x = torch.randn(1, 5, 6, dtype=torch.float64)
    n = 8  # the sequence axis is zero-padded to n
    seq = torch.exp(-2j * math.pi * torch.outer(torch.arange(n), torch.arange(5)) / n).to(torch.complex128)
    hidden = torch.exp(-2j * math.pi * torch.outer(torch.arange(6), torch.arange(6)) / 6).to(torch.complex128)
    expected = (seq @ x[0].to(torch.complex128) @ hidden.T).real[:5]
    assert torch.allclose(FourierMixing(fft_length=n)(x.float())[0].double(), expected, atol=1e-4)


def test_static_expansion_follows_equations_1_to_4():
    """A per-sentence loop over the written-out equations (docs/architectures.md §4), against the batched module."""
    torch.manual_seed(0)
    d, sizes = 8, [3, 2]
    module = StaticExpansion(d, sizes, dropout=0.0, sequence_aware=False, layer_idx=0)
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter)
    x = torch.randn(2, 6, d)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    output = module(x, mask)
    for b in range(2):
        xs = x[b, : int(mask[b].sum())]
        z = module.query_vectors @ module.key_proj(xs).T / math.sqrt(d)  # Eq. (1), [N, L]
        results = []
        for sign, proj in ((1, module.positive_proj), (-1, module.negative_proj)):
            forward = torch.relu(sign * z)
            expanded = forward / (forward.sum(1, keepdim=True) + 1e-9) @ proj(xs) + module.bias_vectors  # Eq. (2)
            backward = torch.relu(sign * z).T  # [L, N], normalised per group, averaged over groups: Eq. (3)
            restored = sum(
                group / (group.sum(1, keepdim=True) + 1e-9) @ rows
                for group, rows in zip(backward.split(sizes, dim=1), expanded.split(sizes, dim=0))
            ) / len(sizes)
            results.append(restored)
        gate = torch.sigmoid(module.selector_proj(xs))
        expected = gate * results[0] + (1 - gate) * results[1]  # Eq. (4)
        assert torch.allclose(output[b, : xs.shape[0]], expected, atol=1e-5)


def test_static_expansion_sizes_per_layer_and_per_block():
    branches = [
        dict(type="static_expansion", layers=14),
        dict(type="static_expansion", layers=2, expansion_sizes=[3, 5], expansion_mode="block"),
    ]
    model = hf_unified_mt.MultiEncoderTransformerForConditionalGeneration(encoder_config(encoder_branches=branches))
    per_layer, block = model.model.encoder.branches
    assert isinstance(per_layer, StaticExpansionBranch)
    expected = [6, 6, 12, 8, 12, 8, 6, 6, 12, 8, 12, 8, 6, 6]  # paper 003's list, cycled over the layers
    assert [layer.expansion.query_vectors.shape[0] for layer in per_layer.layers] == expected
    assert [layer.expansion.group_sizes for layer in block.layers] == [[3, 5], [3, 5]]


def test_lstm_branch_is_a_uni_directional_stacked_lstm_without_residual():
    model = variant_model("lstm")
    branch = model.model.encoder.branches[0]
    assert isinstance(branch, LSTMBranch)
    lstm = branch.layers[0].lstm
    assert lstm.num_layers == 2 and not lstm.bidirectional and lstm.hidden_size == model.config.d_model
    x = torch.randn(2, 7, model.config.d_model)
    mask = torch.tensor([[True] * 7, [True] * 3 + [False] * 4])
    with torch.no_grad():
        output = branch(x, padding_mask=mask)
        assert torch.allclose(output[1, :3], branch.layer_norm(lstm(x[1:, :3])[0])[0], atol=1e-6)
        # uni-directional: a prefix's states do not depend on what follows
        assert torch.allclose(branch(x[:1, :4])[0], output[0, :4], atol=1e-6)


def test_hidden_states_are_embedding_branch_outputs_and_memory():
    """The contract checks how many encoder states there are (the embedding, one per branch, the memory); here what
    they are."""
    model = tiny_model()
    ids, mask = random_batch(VOCAB)
    with torch.no_grad():
        states = model.get_encoder()(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        assert torch.allclose(states[0], model.model.encoder.embed(ids, None))
    assert torch.allclose(sum(states[1:-1]), states[-1], atol=1e-5)  # the memory is the sum of the branches


def test_output_attentions_without_a_self_attention_branch_is_a_clear_error():
    """Static Expansion, LSTM, ConvS2S and FNet compute no attention maps: an encoder made of them has none to return,
    which is an error naming the option, not an empty or None-filled tuple."""
    model = tiny_model(encoder_branches=[dict(type="static_expansion", layers=2), dict(type="lstm", layers=2)])
    model.set_attn_implementation("eager")
    ids, mask = random_batch(VOCAB)
    with pytest.raises(ValueError, match="output_attentions"):
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5], output_attentions=True)
    with pytest.raises(ValueError, match="output_attentions"):
        model.generate(ids, attention_mask=mask, max_new_tokens=2, return_dict_in_generate=True, output_attentions=True)
    out = model.generate(
        ids, attention_mask=mask, max_new_tokens=2, return_dict_in_generate=True, output_hidden_states=True
    )  # the other outputs are available
    assert len(out.encoder_hidden_states) == 4 and len(out.decoder_hidden_states[0]) == model.config.decoder_layers + 1


def test_concatenation_projects_the_branch_outputs():
    model = tiny_model(branch_combination="concat")
    projection = model.model.encoder.combination.projection
    assert projection.in_features == 5 * model.config.d_model and projection.out_features == model.config.d_model
    ids, mask = random_batch(VOCAB)
    with torch.no_grad():
        out = model.get_encoder()(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert torch.allclose(projection(torch.cat(out.hidden_states[1:-1], dim=-1)), out.last_hidden_state, atol=1e-6)


# ---------------------------------------------------------------------------------------------- saved config, presets


def test_a_saved_config_holds_the_complete_branch_specs(tmp_path):
    config = encoder_config()
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["encoder_branches"] == config.encoder_branches  # complete specs, options filled in
    assert saved["encoder_branches"][1]["expansion_sizes"] == [6, 6, 12, 8, 12, 8, 6, 6, 12, 8, 12, 8]
    assert AutoConfig.from_pretrained(tmp_path).encoder_branches == config.encoder_branches


def test_default_config_is_the_single_encoder_transformer_and_presets_stay_untouched():
    config = hf_unified_mt.MultiEncoderTransformerConfig()
    assert config.encoder_branches == [{"type": "self_attention", "layers": 6}]
    config = encoder_config("tiny-dual", dropout=0.3)
    assert config.encoder_branches[1]["dropout"] == 0.3  # option defaults come from the shared fields
    assert "dropout" not in hf_unified_mt.PRESETS[ARCH]["tiny-dual"]["encoder_branches"][1]


def test_presets_follow_table_7():
    """Single = B, Dual = B+S, Triple = B+S+L, Quadruple = B+S+L+C, Quintuple = B+S+L+C+F, with Table 7's depths:
    N / M / Q / U / V = 6 / 12 / 18 / 6 / 6 layers (Sk-En, En-Vi, En-It) and 3 / 6 / 6 / 6 / 6 (Gl-En, Sp-En)."""
    letters = ["B", "B+S", "B+S+L", "B+S+L+C", "B+S+L+C+F"]
    for prefix, depths in (("", [6, 12, 18, 6, 6]), ("lowres-", [3, 6, 6, 6, 6])):
        for i, name in enumerate(["single", "dual", "triple", "quadruple", "quintuple"]):
            config = hf_unified_mt.get_config(ARCH, prefix + name)
            assert config.branch_letters == letters[i]
            assert [branch["layers"] for branch in config.encoder_branches] == depths[: i + 1]
    base, dual = hf_unified_mt.get_config(ARCH, "base"), hf_unified_mt.get_config(ARCH, "dual")
    assert base.encoder_branches == dual.encoder_branches and base.d_model == dual.d_model
    assert hf_unified_mt.get_config(ARCH, "small").branch_letters == "B+S"


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(encoder_branches=[]), r"encoder_branches"),
        (dict(encoder_branches=["lstm"]), r"encoder_branches\[0\]"),
        (dict(encoder_branches=[dict(type="self_attention"), dict(type="lstn")]), r"encoder_branches\[1\].*'lstn'"),
        (dict(encoder_branches=[dict(layers=2)]), r"encoder_branches\[0\].*type"),
        (dict(encoder_branches=[dict(type="lstm", layers=0)]), r"encoder_branches\[0\]` \(lstm\).*layers"),
        (dict(encoder_branches=[dict(type="lstm", kernel_size=3)]), r"encoder_branches\[0\]` \(lstm\).*kernel_size"),
        (dict(encoder_branches=[dict(type="convs2s", kernel_size=4)]), r"\[0\]` \(convs2s\).*kernel_size"),
        (dict(encoder_branches=[dict(type="fnet", dropout=1.0)]), r"encoder_branches\[0\]` \(fnet\).*dropout"),
        (dict(encoder_branches=[dict(type="fnet", fft_length=32)]), r"encoder_branches\[0\]` \(fnet\).*fft_length"),
        (dict(encoder_branches=[dict(type="fnet", activation="swishy")]), r"\[0\]` \(fnet\).*activation"),
        (dict(encoder_branches=[dict(type="static_expansion", expansion_sizes=[6, 0])]), r"expansion_sizes"),
        (dict(encoder_branches=[dict(type="static_expansion", expansion_size=[6])]), r"did you mean 'expansion_sizes'"),
        (dict(encoder_branches=[dict(type="static_expansion", expansion_mode="grouped")]), r"expansion_mode"),
        (dict(branch_combination="mean"), r"branch_combination"),
        (dict(encoder_branch=[dict(type="lstm")]), r"encoder_branches"),  # a misspelled field
    ],
)
def test_bad_config_raises_value_error_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        encoder_config(**overrides)


# ---------------------------------------------------------------------------------------------- parameter counts

# Table 8 of paper 003, Sk-En / En-Vi / En-It row (millions of parameters, rounded by the paper to 1M).
TABLE_8 = {"single": 48, "dual": 61, "triple": 99, "quadruple": 109, "quintuple": 135}
# The vocabulary is not reported; docs/architectures.md §4 reads 48M as a Transformer base with two embedding matrices
# (source; target tied with the output projection) of ~4K types. 4,000 each puts Single at 48.2M.
EN_VI = dict(vocab_size=4000, share_encoder_decoder_embeddings=False)


def count(config) -> int:
    with torch.device("meta"):  # no memory, no initialisation: only the shapes
        model = hf_unified_mt.MultiEncoderTransformerForConditionalGeneration(config)
    return sum(p.numel() for p in model.parameters())


def test_preset_parameter_counts_follow_the_per_branch_formulas():
    d, ffn, vocab = 512, 2048, 4000
    attention, layer_norm = 4 * (d * d + d), 2 * d
    encoder_layer = attention + 2 * d * ffn + ffn + d + 2 * layer_norm
    decoder_layer = 2 * attention + 2 * d * ffn + ffn + d + 3 * layer_norm
    single = 6 * encoder_layer + 6 * decoder_layer + 2 * vocab * d
    sizes = [6, 6, 12, 8, 12, 8, 6, 6, 12, 8, 12, 8]
    static_expansion = sum(4 * (d * d + d) + 2 * n * d + layer_norm for n in sizes) + layer_norm  # no FFN
    lstm = 18 * (4 * d * (d + d) + 2 * 4 * d) + layer_norm  # nn.LSTM(512, 512) x 18, final LN
    convs2s = 6 * (3 * d * 2 * d + 2 * d + 2 * d) + 2 * (d * d + d)  # conv (v, g, bias) x 6, in/out projections
    fnet = 6 * (2 * d * 4096 + 4096 + d + 2 * layer_norm)
    expected = {"single": single}
    for name, branch in zip(("dual", "triple", "quadruple", "quintuple"), (static_expansion, lstm, convs2s, fnet)):
        expected[name] = list(expected.values())[-1] + branch
    for name, value in expected.items():
        assert count(hf_unified_mt.get_config(ARCH, name, **EN_VI)) == value, name


def test_preset_parameter_counts_are_near_table_8():
    """How close: with 4,000-type vocabularies the totals are 48.2 / 61.0 / 98.8 / 108.8 / 134.0M against the paper's
    48 / 61 / 99 / 109 / 135M, all within 1% (Single to Quadruple round to the paper's figure; Quintuple is 0.8% low).
    What each encoder adds does not depend on the vocabulary: +12.7 / +37.8 / +10.0 / +25.2M against +13 / +38 / +10 /
    +26M, each inside the interval the paper's 1M rounding allows (±1M on a difference)."""
    counts = {name: count(hf_unified_mt.get_config(ARCH, name, **EN_VI)) / 1e6 for name in TABLE_8}
    for name, paper in TABLE_8.items():
        assert abs(counts[name] - paper) / paper < 0.01, (name, counts[name], paper)
    for name in ("single", "dual", "triple", "quadruple"):
        assert round(counts[name]) == TABLE_8[name], (name, counts[name])
    names = list(TABLE_8)
    for previous, name in zip(names, names[1:]):
        added, paper_added = counts[name] - counts[previous], TABLE_8[name] - TABLE_8[previous]
        assert abs(added - paper_added) <= 1.0, (name, added, paper_added)


def test_init_law_option_and_presets():
    """`init_law="xavier"` (paper 003's recipe, its presets) vs the package's shared law (`small`, `tiny`)."""

    def linear_std(model):
        return model.model.encoder.branches[0].layers[0].ffn.fc1.weight.std().item()

    assert hf_unified_mt.get_config("multi_encoder_transformer", "base").init_law == "xavier"
    assert hf_unified_mt.get_config("multi_encoder_transformer", "lowres-dual").init_law == "xavier"
    assert hf_unified_mt.get_config("multi_encoder_transformer", "small").init_law == "pytorch"
    d, ffn = 32, 64  # tiny sizes: fc1 is d -> ffn
    xavier = linear_std(tiny_model(init_law="xavier"))
    default = linear_std(tiny_model())
    assert abs(xavier - (2.0 / (d + ffn)) ** 0.5) < 0.02  # Xavier-uniform: std sqrt(2 / (fan_in + fan_out))
    assert abs(default - (1.0 / (3.0 * d)) ** 0.5) < 0.02  # U(±1/sqrt(fan_in)): std 1/sqrt(3 fan_in)
    with pytest.raises(ValueError, match="init_law"):
        tiny_model(init_law="glorot")
    with pytest.raises(ValueError, match="linear_init"):  # the retired keyword is refused, naming it
        tiny_model(linear_init="glorot")


@pytest.mark.parametrize("init_law", ["pytorch", "xavier", "normal", "ds_init"])
def test_convs2s_projections_keep_fairseq_initialisation(init_law):
    """fairseq's Linear law N(0, sqrt((1 - p) / fan_in)) on the ConvS2S branch's in/out projections, whatever the
    model's `init_law`. Wide layers so that the sample std is close to the law's."""
    branch = dict(type="convs2s", layers=1, conv_dim=256, dropout=0.1)
    config = hf_unified_mt.get_config(
        ARCH, "tiny", vocab_size=VOCAB, d_model=128, init_law=init_law, encoder_branches=[branch]
    )
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    convs2s = model.encoder.branches[0]
    for linear in (convs2s.input_proj, convs2s.output_proj):
        expected = math.sqrt(0.9 / linear.in_features)
        assert abs(linear.weight.std().item() - expected) / expected < 0.03, (linear, linear.weight.std().item())
        assert abs(linear.weight.mean().item()) < 0.1 * expected
        assert torch.count_nonzero(linear.bias) == 0


# ------------------------------------------------------------------------------------------ composition: Prime branch


def test_a_prime_branch_composes_with_the_papers_branches_and_keeps_the_prime_laws():
    """A Prime encoder (paper 000) beside the self-attention branch: its layers are the Unified Transformer's, with
    the spec's convolution options, and its kernel generators and gates keep their own initialisation."""
    branches = [dict(type="self_attention", layers=2), dict(type="prime", layers=2, conv_kernel_sizes=[3, 5])]
    config = hf_unified_mt.get_config(ARCH, "tiny-dual", vocab_size=VOCAB, encoder_branches=branches)
    assert config.branch_letters == "B+P"
    assert config.encoder_branches[1] == dict(
        type="prime", layers=2, use_convolution=True, conv_kernel_sizes=[3, 5], conv_weight_dropout=0.1
    )
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    layer = model.encoder.branches[1].layers[0]
    assert type(layer).__name__ == "UnifiedTransformerEncoderLayer"
    assert layer.self_attn.conv.kernel_sizes == [3, 5]
    assert torch.equal(layer.self_attn.conv.kernel_gate.detach(), torch.full((2,), 0.5))
    generator = layer.self_attn.conv.kernel_generators[0]
    bound = 1 / math.sqrt(generator.in_features)  # the authors' draw, U(±1/sqrt(d)), under every law
    assert 0.8 * bound < generator.weight.abs().max().item() <= bound
    config.encoder_branches[1]["use_convolution"] = False
    simple = AutoModel.from_config(
        hf_unified_mt.get_config(ARCH, "tiny-dual", vocab_size=VOCAB, encoder_branches=config.encoder_branches)
    )
    assert simple.encoder.branches[1].layers[0].self_attn.conv is None


@pytest.mark.parametrize(
    "overrides, fields",
    [
        (dict(normalize_before=True), ("prime", "normalize_before")),
        (dict(branch=dict(conv_kernel_sizes=[4])), ("conv_kernel_sizes",)),
        (dict(branch=dict(conv_kernel_sizes=[3, 3])), ("conv_kernel_sizes",)),
        (dict(branch=dict(conv_weight_dropout=1.0)), ("conv_weight_dropout",)),
        (dict(branch=dict(kernel_sizes=[3])), ("kernel_sizes", "conv_kernel_sizes")),
    ],
)
def test_a_prime_branch_that_does_not_combine_raises_naming_the_fields(overrides, fields):
    branch = dict(type="prime", layers=1, **overrides.pop("branch", {}))
    with pytest.raises(ValueError) as error:
        hf_unified_mt.get_config(ARCH, "tiny-dual", vocab_size=VOCAB, encoder_branches=[branch], **overrides)
    for field in fields:
        assert field in str(error.value)


def test_output_attentions_gives_the_maps_of_every_self_attention_and_prime_branch_in_branch_order():
    """The docs said `output_attentions` returns only the self-attention branch's maps; a Prime branch's attention maps
    come too: one per layer of each self-attention or Prime branch, branches in config order (a Prime-only encoder
    has maps, so it is no error)."""
    prime = dict(type="prime", layers=2, conv_kernel_sizes=[3, 5], conv_weight_dropout=0.0)
    branches = [prime, dict(type="lstm", layers=1), dict(type="self_attention", layers=1)]
    ids, mask = random_batch(VOCAB)
    for encoder_branches, kinds in (
        (branches, ["PrimeSelfAttention", "PrimeSelfAttention", "MTAttention"]),
        ([prime], ["PrimeSelfAttention", "PrimeSelfAttention"]),
    ):
        model = tiny_model("tiny-dual", encoder_branches=encoder_branches)
        model.set_attn_implementation("eager")
        attention_modules = [
            module
            for branch in model.model.encoder.branches
            for module in branch.modules()
            if type(module).__name__.endswith("Attention")
        ]
        assert [type(module).__name__ for module in attention_modules] == kinds
        captured = []

        def keep_map(module, inputs, output, captured=captured):
            captured.append(output[1])

        handles = [module.register_forward_hook(keep_map) for module in attention_modules]
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5], output_attentions=True)
        for handle in handles:
            handle.remove()
        assert len(out.encoder_attentions) == len(captured) == len(kinds)
        for returned, computed in zip(out.encoder_attentions, captured):
            assert torch.equal(returned, computed)
