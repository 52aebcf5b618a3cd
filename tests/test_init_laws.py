"""One initialisation mechanism for every architecture (`init_law`, `MTPreTrainedModel._init_weights`,
`initialization_mt.py`): every matrix's role is declared by the module that builds it, and a moved or renamed
projection keeps it; each law draws the matrices it promises, by role and depth, on every architecture; the papers'
own modules keep their laws; the options of earlier releases are read as `init_law`."""

import math

import pytest
import torch
from torch import nn
from transformers import AutoModelForSeq2SeqLM

import hf_unified_mt
from conftest import VOCAB_SIZE
from hf_unified_mt.configuration_mt_common import INIT_LAWS
from hf_unified_mt.initialization_mt import MatrixRole, ds_init_scale, with_role
from hf_unified_mt.modeling_mt_common import MTEncoderLayer


ARCHS = {
    "unified_transformer": "tiny",
    "deep_transformer": "tiny",
    "multi_unit_transformer": "tiny",
    "multi_encoder_transformer": "tiny-dual",
    "multi_pass_transformer": "tiny",
}
WIDE = dict(
    vocab_size=VOCAB_SIZE, d_model=64, encoder_ffn_dim=256, decoder_ffn_dim=256, encoder_layers=3, decoder_layers=3
)


def build(arch, **overrides):
    config = hf_unified_mt.get_config(arch, ARCHS[arch], **{**WIDE, **overrides})
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(config)


def linears(model, leaf: str):
    """(name, module) of the decoder's and encoder's linear layers whose name ends in `leaf`."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.endswith(leaf) and ".layers." in name
    ]


COMPOSITIONS = {
    "deep-aan-ffn": ("deep_transformer", "tiny", dict(decoder_attention_type="aan", aan_use_ffn=True)),
    "deep-merged-self": ("deep_transformer", "tiny", dict(decoder_attention_type="merged_self")),
    "mute-prime-units": (
        "multi_unit_transformer",
        "tiny-prime-units",
        dict(unit_layer=dict(type="prime"), num_units=2),
    ),
    "mute-merged-self": ("multi_unit_transformer", "tiny", dict(decoder_attention_type="merged_self")),
    "multi-encoder-all": (
        "multi_encoder_transformer",
        "tiny-prime-dual",
        dict(
            encoder_branches=[
                dict(type=kind, layers=2)
                for kind in ("self_attention", "static_expansion", "lstm", "convs2s", "fnet", "prime")
            ],
            branch_combination="concat",
        ),
    ),
    "mpt-prime": ("multi_pass_transformer", "tiny", dict(encoder_layer=dict(type="prime"))),
    "unified-separate-projection": ("unified_transformer", "tiny", dict(shared_projection=False)),
}


def composed(name: str):
    arch, preset, overrides = COMPOSITIONS[name]
    config = hf_unified_mt.get_config(arch, preset, **{**WIDE, **overrides})
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(config)


def test_the_modules_declare_the_roles_of_their_matrices():
    """Kind, self/cross attention and depth (the layer index given at construction, plus one), per module."""
    model = build("deep_transformer", decoder_attention_type="self")
    encoder, decoder = model.model.encoder.layers, model.model.decoder.layers
    assert encoder[2].self_attn.q_proj.init_role == MatrixRole("attention_input", "self", depth=3)
    assert encoder[0].self_attn.out_proj.init_role == MatrixRole("attention_output", "self", depth=1)
    assert decoder[1].encoder_attn.k_proj.init_role == MatrixRole("attention_input", "cross", depth=2)
    assert decoder[1].encoder_attn.out_proj.init_role == MatrixRole("attention_output", "cross", depth=2)
    assert decoder[2].ffn.fc2.init_role == MatrixRole("ffn", depth=3)
    assert model.lm_head.init_role == MatrixRole("output_embedding")
    merged = build("deep_transformer", decoder_attention_type="merged").model.decoder.layers[1].encoder_attn
    assert merged.v_proj.init_role == MatrixRole("attention_input", "cross", depth=2)  # MAtt's shared value projection
    branches = composed("multi-encoder-all").model.encoder
    assert branches.branches[1].layers[1].expansion.key_proj.init_role == MatrixRole("other", depth=2)
    assert branches.branches[4].layers[1].ffn.fc1.init_role == MatrixRole("ffn", depth=2)
    assert branches.combination.projection.init_role == MatrixRole("other")
    assert branches.branches[3].input_proj.init_role.kind == "own_law"  # fairseq's ConvS2S law
    units = composed("mute-prime-units").model.encoder.layers[1].prime_units.units[0]
    assert units.self_attn.q_proj.init_role == MatrixRole("attention_input", "self", depth=2)
    assert units.self_attn.conv.kernel_generators[0].init_role.kind == "own_law"  # the authors' draw


@pytest.mark.parametrize("name", [*sorted(ARCHS), *sorted(COMPOSITIONS)])
def test_every_linear_layer_declares_its_role_and_own_laws_draw_only_direct_parameters(name):
    """No matrix is drawn by a guess. transformers skips a module of remote code that holds no parameter directly, so an
    `init_own_parameters` that drew its children's parameters would silently not run: a module that defines it holds
    its parameters itself (or none at all, as MUTE's bias module without mask noise)."""
    model = build(name) if name in ARCHS else composed(name)
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            assert isinstance(getattr(module, "init_role", None), MatrixRole), module_name
        if hasattr(module, "init_own_parameters"):
            assert list(module.parameters(recurse=False)) or not list(module.parameters()), module_name


def reinitialised(model, module):
    """`module` (inside `model`) drawn again by the model's hook, from a fixed seed."""
    torch.manual_seed(123)
    holder = next(sub for sub in (model.model.encoder, model.model.decoder) if any(m is module for m in sub.modules()))
    holder._init_weights(module)
    return module.weight.detach().clone()


def test_a_moved_or_renamed_projection_keeps_its_law():
    """The law reads the role declared at construction, never the parameter's name. Under DS-Init with query, key and
    value drawn as one d × 3d matrix (the Deep Transformer's default), a query projection moved to another name in
    another layer is drawn exactly as in its own place (a name-based reading would see no self-attention query, or
    another depth, and draw it wider)."""
    model, renamed = build("deep_transformer"), build("deep_transformer")
    expected = reinitialised(model, model.model.encoder.layers[2].self_attn.q_proj)
    layer = renamed.model.encoder.layers[2]
    query = layer.self_attn._modules.pop("q_proj")
    layer.self_attn.query_projection = query
    renamed.model.encoder.layers[0].extra_query = query  # also visible under another layer's index
    assert torch.equal(reinitialised(renamed, query), expected)
    bound = math.sqrt(6 / (64 + 3 * 64)) / math.sqrt(3)  # Eq. 15 at depth 3, fused q/k/v fan-out
    assert 0.9 * bound < expected.abs().max().item() <= bound + 1e-7


def test_a_linear_layer_without_a_declared_role_is_an_error_at_initialisation():
    """A contributor's new projection must say what it is; it is not drawn by a guess (nor silently as "other")."""

    class LayerWithAnUndeclaredProjection(MTEncoderLayer):
        def __init__(self, config, layer_idx):
            super().__init__(config, layer_idx)
            self.gate = nn.Linear(config.d_model, config.d_model)

    model = build("deep_transformer")
    layer = LayerWithAnUndeclaredProjection(model.config, layer_idx=0)
    model.model.encoder.layers[0] = layer
    with pytest.raises(ValueError, match="no declared initialisation role"):
        model.model.encoder._init_weights(layer.gate)
    with_role(layer.gate, MatrixRole("other", depth=1))
    model.model.encoder._init_weights(layer.gate)  # declared: drawn by the law
    assert torch.count_nonzero(layer.gate.bias) == 0


def test_an_untied_output_projection_is_drawn_like_an_embedding_also_when_resized():
    """`lm_head` declares itself an output embedding, N(0, d^-1/2); transformers' resizing builds the new projection
    outside the model and draws it through the hook, which draws it the same way."""
    model = build("deep_transformer", tie_word_embeddings=False)
    assert abs(model.lm_head.weight.std().item() - 64**-0.5) < 0.01
    model.resize_decoder_token_embeddings(VOCAB_SIZE + 300, mean_resizing=False)
    assert model.lm_head.init_role == MatrixRole("output_embedding")
    assert abs(model.lm_head.weight[VOCAB_SIZE:].std().item() - 64**-0.5) < 0.01


def test_a_role_is_well_formed():
    with pytest.raises(ValueError, match="kind"):
        MatrixRole("query")
    with pytest.raises(ValueError, match="attention"):
        MatrixRole("attention_input")  # self or cross?
    with pytest.raises(ValueError, match="attention"):
        MatrixRole("ffn", "self")
    with pytest.raises(ValueError, match="own_law"):
        MatrixRole("own_law")


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("law", INIT_LAWS)
def test_every_law_builds_every_architecture_and_draws_ffn_matrices_within_its_bound(arch, law):
    model = build(arch, init_law=law)
    assert model.config.init_law == law
    fc1 = linears(model, "fc1")
    if not fc1:  # MUTE's encoder keeps its FFN as stacked unit weights; its decoder has `ffn.fc1`
        pytest.fail(f"no fc1 in {arch}")
    for name, linear in fc1:
        fan_in, fan_out = linear.in_features, linear.out_features
        depth = linear.init_role.depth
        bound = {
            "pytorch": 1 / math.sqrt(fan_in),
            "fairseq": 1 / math.sqrt(fan_in),
            "km": 1 / math.sqrt(fan_in),
            "xavier": math.sqrt(6 / (fan_in + fan_out)),
            "ds_init": math.sqrt(6 / (fan_in + fan_out)) * ds_init_scale(model.config, depth),
            "normal": None,
        }[law]
        weight = linear.weight
        if bound is None:
            assert abs(weight.std().item() - 0.02) < 0.002, name
        else:
            assert weight.abs().max().item() <= bound + 1e-7, name
            assert weight.abs().max().item() > 0.9 * bound, name  # the whole range is used: it is this law
        assert torch.count_nonzero(linear.bias) == 0


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_normal_law_reads_init_std_for_matrices_and_embeddings(arch):
    model = build(arch, init_law="normal", init_std=0.05)
    embedding = model.get_input_embeddings().weight
    assert abs(embedding[2:].std().item() - 0.05) < 0.005
    for name, linear in linears(model, "q_proj"):
        assert abs(linear.weight.std().item() - 0.05) < 0.01, name


def test_ds_init_scales_a_prime_stack_by_depth():
    """DS-Init (Eq. 15 of Zhang et al.) under Prime layers: the bound of layer l is the Xavier bound times 1/sqrt(l)."""
    model = build("unified_transformer", init_law="ds_init", encoder_layers=4)
    maxima = [layer.fc1.weight.abs().max().item() for layer in model.model.encoder.layers]
    xavier = math.sqrt(6 / (64 + 256))
    for depth, maximum in enumerate(maxima, start=1):
        assert 0.9 * xavier / math.sqrt(depth) < maximum <= xavier / math.sqrt(depth) + 1e-7


@pytest.mark.parametrize("law", INIT_LAWS)
def test_prime_kernel_generators_keep_the_authors_draw_under_every_init_law(law):
    """The authors' `DynamicConv1dTBC` draws its kernel generator Xavier-uniform, then `reset_parameters()` redraws
    it with `nn.Linear.reset_parameters()`: PyTorch's default U(±1/sqrt(fan_in)), whatever `init_method`."""
    model = build("unified_transformer", init_law=law)
    for generator in model.model.encoder.layers[0].self_attn.conv.kernel_generators:
        bound = 1 / math.sqrt(generator.in_features)
        assert bound * 0.9 < generator.weight.abs().max().item() <= bound + 1e-7


def test_km_draws_the_cross_attention_as_the_self_attention():
    """Under `km` the authors' decoder uses one attention class for both attentions (`ParallelMultiheadAttention`,
    `reset_parameters`): q/k/v kaiming-uniform a = sqrt(5), U(±1/sqrt(d)); the output projection a = 1,
    U(±sqrt(3/d))."""
    model = build("unified_transformer", init_law="km")
    for layer in model.model.decoder.layers:
        for attention in (layer.self_attn, layer.encoder_attn):
            for projection in ("q_proj", "k_proj", "v_proj"):
                weight = getattr(attention, projection).weight
                bound = 1 / math.sqrt(weight.shape[1])
                assert 0.9 * bound < weight.abs().max().item() <= bound + 1e-7, projection
            weight = attention.out_proj.weight
            bound = math.sqrt(3 / weight.shape[1])
            assert 0.9 * bound < weight.abs().max().item() <= bound + 1e-7


def test_bad_init_options_are_refused_naming_the_field():
    get = hf_unified_mt.get_config
    with pytest.raises(ValueError, match="init_std"):
        get("unified_transformer", "tiny", init_std=0.0)
    with pytest.raises(ValueError, match="init_law"):
        get("unified_transformer", "tiny", init_law="glorot")


@pytest.mark.parametrize(
    "arch, retired", [("deep_transformer", dict(ds_init=True)), ("multi_pass_transformer", dict(linear_init="fairseq"))]
)
def test_the_init_options_that_init_law_replaced_are_refused_pointing_to_it(arch, retired):
    """`ds_init=` / `linear_init=` (a version never released) are not read: refused, naming `init_law`."""
    (option,) = retired
    with pytest.raises(ValueError, match=rf"`{option}` is not an option.*`init_law`"):
        hf_unified_mt.get_config(arch, ARCHS[arch], **retired)
