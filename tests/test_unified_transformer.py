"""What the Unified Transformer (Zhao et al., paper 000) adds, on tiny CPU models: the Prime options (convolution,
Separate Projection, kernel sizes), the fused inference projections of §3.3.1, padding before the convolution and the
authors' initialisation. The checks every architecture shares are in `test_model_contract.py`."""

import pytest
import torch
from torch import nn

from conftest import random_batch, tiny_config, tiny_model, trained_tiny_model
from hf_unified_mt.modeling_mt_common import CACHE_FIELD
from hf_unified_mt.modeling_unified_transformer import UnifiedTransformerPrimeLayer
from mt_checks import assert_generate_is_identical_without_cache, assert_incremental_decoding_matches_full_forward


VARIANTS = {
    "prime": {},
    "prime-simple": {"use_convolution": False},
    "separate-projection": {"shared_projection": False},
    "single-kernel": {"conv_kernel_sizes": [7]},
}


# The contract covers Prime and Prime-simple unfused; here: the other Prime options and the fused projections.
PRIME_OPTIONS = [
    ("prime", True),
    ("prime-simple", True),
    ("separate-projection", False),
    ("separate-projection", True),
    ("single-kernel", False),
    ("single-kernel", True),
]


@pytest.mark.parametrize("variant, fused", PRIME_OPTIONS)
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_incremental_decoding_matches_full_forward_for_each_prime_option(variant, fused, attn_implementation):
    model = tiny_model(**VARIANTS[variant])
    if fused:
        assert model.fuse_projections() == model.config.encoder_layers + model.config.decoder_layers
    model.set_attn_implementation(attn_implementation)
    ids, mask = random_batch(model.config.vocab_size)
    target = torch.randint(
        4, model.config.decoder_vocab_size, (ids.shape[0], 8), generator=torch.Generator().manual_seed(3)
    )
    assert_incremental_decoding_matches_full_forward(model, ids, mask, target)


@pytest.mark.parametrize("variant", ["separate-projection", "single-kernel"])
def test_generate_with_and_without_cache_is_identical_for_each_prime_option(variant):
    model = trained_tiny_model(**VARIANTS[variant])
    ids, mask = random_batch(model.config.vocab_size)
    assert_generate_is_identical_without_cache(model, ids, mask)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(conv_kernel_sizes=[4]), "conv_kernel_sizes"),
        (dict(conv_kernel_sizes=[0, 3]), "conv_kernel_sizes"),
        (dict(conv_kernel_sizes=[-3]), "conv_kernel_sizes"),
        (dict(conv_kernel_sizes=[]), "conv_kernel_sizes"),
        (dict(conv_kernel_size=[3]), "conv_kernel_sizes"),  # a misspelled option
    ],
)
def test_bad_config_raises_value_error_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(**overrides)


def test_share_without_tie_keeps_output_projection_separate():
    model = tiny_model(tie_word_embeddings=False)
    assert model.model.encoder.embed_tokens.weight is model.model.decoder.embed_tokens.weight
    assert model.lm_head.weight is not model.model.decoder.embed_tokens.weight


def test_fused_projections_match_unfused_and_are_explicit():
    """The fused path (§3.3.1) gives the unfused logits; it is built by an explicit call from the current weights, is
    dropped by `unfuse_projections()` and by `train()`, and nothing is cached implicitly."""
    model = tiny_model()
    ids, mask = random_batch(model.config.vocab_size)

    def logits():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits

    unfused = logits()
    layer = model.model.encoder.layers[0]
    assert layer._fused is None  # nothing is fused behind the caller's back
    model.fuse_projections()
    torch.testing.assert_close(logits(), unfused, atol=1e-5, rtol=1e-4)
    model.train()
    assert layer._fused is None  # training drops the fused copies
    model.eval()
    with torch.no_grad():
        model.model.encoder.layers[0].fc1.weight.add_(0.5)
    changed = logits()  # unfused: the current weights
    model.fuse_projections()
    torch.testing.assert_close(logits(), changed, atol=1e-5, rtol=1e-4)
    model.unfuse_projections()
    assert all(layer._fused is None for layer in model.model.encoder.layers)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_training_stacks_the_projections_with_the_same_loss_and_gradients(monkeypatch, dropout):
    """Without input dropout, a training forward computes the layer's input projections as one stacked product of the
    live weights, and without branch dropout its output projections too: the loss and every gradient, accumulated
    over micro-batches, are those of the projections one by one (the same dropout masks drawn); with input dropout
    it does not stack."""
    model = tiny_model(dropout=dropout).train()
    ids, mask = random_batch(model.config.vocab_size, pad_last=3)
    labels = torch.roll(ids, 1, dims=1).masked_fill(mask == 0, -100)
    layers = [*model.model.encoder.layers, *model.model.decoder.layers]
    for layer in layers:
        stacked_inputs, stacked_outputs = layer.projections_for_forward()
        assert stacked_inputs is not None and (stacked_outputs is not None) == (dropout == 0)

    def loss_and_gradients():
        """The loss, and the gradients accumulated over two backward passes of micro-batches padded differently."""
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        for rows in (slice(0, 2), slice(2, None)):
            loss = model(input_ids=ids[rows], attention_mask=mask[rows], labels=labels[rows]).loss
            loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    stacked_loss, stacked = loss_and_gradients()
    monkeypatch.setattr(UnifiedTransformerPrimeLayer, "projections_for_forward", lambda layer: (None, None))
    single_loss, single = loss_and_gradients()
    monkeypatch.undo()
    torch.testing.assert_close(stacked_loss, single_loss)
    assert stacked.keys() == single.keys()
    for name, gradient in single.items():
        torch.testing.assert_close(stacked[name], gradient, atol=1e-6, rtol=1e-4, msg=name)
    assert layers[0]._fused is None  # nothing kept
    assert tiny_model(input_dropout=0.1).train().model.encoder.layers[0].projections_for_forward() == (None, None)


@pytest.mark.parametrize("optimizer", ["fused", "foreach"])
def test_generate_fuses_from_the_current_weights_after_optimizer_steps(optimizer):
    """`generate()` fuses for its own call from the current weights (also after a fused optimizer's steps, which do
    not bump parameter version counters) and leaves nothing fused behind."""
    model = tiny_model(fuse_projections_for_inference=True)
    ids, mask = random_batch(model.config.vocab_size)
    adamw = torch.optim.AdamW(model.parameters(), lr=0.05, **{optimizer: True})

    def generated(fused: bool):
        model.config.fuse_projections_for_inference = fused
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, num_beams=2, do_sample=False)

    for _ in range(2):
        model.train()
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
        adamw.step()
        adamw.zero_grad()
        model.eval()
        assert torch.equal(generated(True), generated(False))
        assert all(layer._fused is None for layer in model.model.encoder.layers)


def test_padding_is_zeroed_before_the_convolution():
    model = tiny_model()
    ids, mask = random_batch(model.config.vocab_size, pad_last=3)
    other = ids.clone()
    other[-1, -3:] = 7  # different tokens in the padded positions
    with torch.no_grad():
        a = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        b = model.get_encoder()(input_ids=other, attention_mask=mask).last_hidden_state
    assert torch.allclose(a[:, :-3], b[:, :-3], atol=1e-6)
    model.config.mask_padding_before_conv = False  # the authors' behaviour: padding leaks into real positions
    with torch.no_grad():
        c = model.get_encoder()(input_ids=other, attention_mask=mask).last_hidden_state
    assert not torch.allclose(a[-1, :-3], c[-1, :-3], atol=1e-4)


@pytest.mark.parametrize("variant", ["prime", "separate-projection"])
def test_cached_decoding_of_a_left_padded_target_prefix(variant):
    """A target prefix with left padding, fed as one cached chunk and then continued a token at a time, gives the
    logits of one uncached forward at every real position, whatever tokens stand in the pads. With the shared
    projection the decoder's convolution reads its window back from the self-attention cache's values (where the
    pads are zeroed); with a separate projection it keeps a window of its own."""
    model = tiny_model(**VARIANTS[variant]).eval()
    ids, mask = random_batch(model.config.vocab_size)
    generator = torch.Generator().manual_seed(5)
    target = torch.randint(4, model.config.decoder_vocab_size, (ids.shape[0], 9), generator=generator)
    target_mask = torch.ones_like(target)
    target_mask[0, :3] = 0  # the first row's prefix starts with three pads
    other = target.clone()
    other[0, :3] = 5  # other tokens in the pads
    prefix = 5
    with torch.no_grad():
        full = model(
            input_ids=ids,
            attention_mask=mask,
            decoder_input_ids=target,
            decoder_attention_mask=target_mask,
            use_cache=False,
        ).logits
        for decoder_ids in (target, other):
            out = model(
                input_ids=ids,
                attention_mask=mask,
                decoder_input_ids=decoder_ids[:, :prefix],
                decoder_attention_mask=target_mask[:, :prefix],
                use_cache=True,
            )
            steps, cache = [out.logits], getattr(out, CACHE_FIELD)
            for t in range(prefix, target.shape[1]):
                out = model(
                    input_ids=ids,
                    attention_mask=mask,
                    decoder_input_ids=decoder_ids[:, t : t + 1],
                    decoder_attention_mask=target_mask[:, : t + 1],
                    cache=cache,
                    use_cache=True,
                )
                steps.append(out.logits)
                cache = getattr(out, CACHE_FIELD)
            steps = torch.cat(steps, dim=1)
            real = target_mask.bool()
            torch.testing.assert_close(steps[real], full[real], atol=1e-5, rtol=1e-5)


def test_initialisation_follows_the_authors_code():
    import math

    model = tiny_model()
    d = model.config.d_model
    layer = model.model.decoder.layers[0]
    out_proj = layer.self_attn.out_proj.weight  # kaiming-uniform, a=1, fan_in 2d
    assert math.sqrt(3 / (2 * d)) * 0.9 < out_proj.abs().max() <= math.sqrt(3 / (2 * d))
    cross = layer.encoder_attn.q_proj.weight  # the same attention class: PyTorch default U(±1/sqrt(d))
    assert 0.9 / math.sqrt(d) < cross.abs().max() <= 1 / math.sqrt(d)
    cross_out = layer.encoder_attn.out_proj.weight  # kaiming-uniform, a=1, fan_in d
    assert math.sqrt(3 / d) * 0.9 < cross_out.abs().max() <= math.sqrt(3 / d)
    generator = layer.self_attn.conv.kernel_generators[0].weight  # Xavier, then redrawn by nn.Linear's default
    assert 0.9 / math.sqrt(d) < generator.abs().max() <= 1 / math.sqrt(d)
    query = layer.self_attn.q_proj.weight  # PyTorch default U(±1/sqrt(d))
    assert 0.9 / math.sqrt(d) < query.abs().max() <= 1 / math.sqrt(d)
    assert torch.equal(layer.self_attn.conv.kernel_gate, torch.full_like(layer.self_attn.conv.kernel_gate, 0.5))
    assert layer.self_attn.q_proj.bias.abs().max() == 0


@pytest.mark.parametrize("kernel_sizes", [[3, 7], [7, 3, 5], [5]])
@pytest.mark.parametrize("is_causal", [False, True])
def test_the_exported_convolution_is_the_same_function_in_fewer_operations(kernel_sizes, is_causal):
    """The forward the ONNX export traces (`onnx_export_forward`): the kernels from one padded product (a narrower
    cell's missing taps a zero row with a -1e9 bias, exactly 0 after the softmax) give the convolution's outputs, with
    a padded batch and from a cache's values; the module is left as it was; a generator that is not a plain
    `nn.Linear` keeps the forward."""
    from hf_unified_mt.modeling_unified_transformer import PrimeDynamicConvolution

    torch.manual_seed(0)
    config = tiny_config(conv_kernel_sizes=kernel_sizes, d_model=16)
    conv = PrimeDynamicConvolution(config, 4, is_causal=is_causal).eval()
    nn.init.normal_(conv.kernel_gate)  # unequal cells
    inputs = torch.randn(3, 9, 16)
    padding = torch.ones(3, 9, dtype=torch.bool)
    padding[-1, 5:] = False
    values = torch.randn(3, 4, 12, 4)  # a decoding step reads its window from the cached values
    with torch.no_grad():
        expected = [conv(inputs, padding), conv(inputs[:, -1:], cached_values=values)]
        weight, bias = conv.padded_generator()
        exported = conv.onnx_export_forward()
        outputs = [exported(inputs, padding), exported(inputs[:, -1:], cached_values=values)]
    for output, reference in zip(outputs, expected):
        torch.testing.assert_close(output, reference, rtol=1e-5, atol=1e-6)
    width, cells = max(kernel_sizes), len(kernel_sizes)
    assert weight.shape == (4 * width * cells, 16) and bias.shape == (4 * width * cells,)
    assert int((bias == 0).sum()) == 4 * sum(kernel_sizes) and not weight[bias != 0].any()
    assert "kernels" not in vars(conv) and conv.band_max_length == 256
    adapted = type("WithAdapter", (nn.Linear,), {})  # not a plain nn.Linear, as a quantised or LoRA-wrapped one
    conv.kernel_generators[0] = adapted(16, 4 * kernel_sizes[0], bias=False)
    assert conv.onnx_export_forward() is None


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("length", [1, 2, 7, 40])
def test_band_and_window_convolutions_are_the_same_convolution(is_causal, length):
    """The band-matrix form (short sequences) and the sliding-window form (long ones) give the same outputs and the
    same gradients; the layer picks by length."""
    from hf_unified_mt.modeling_unified_transformer import PrimeDynamicConvolution

    torch.manual_seed(0)
    config = tiny_config(conv_kernel_sizes=[3, 7], d_model=16)
    conv = PrimeDynamicConvolution(config, 4, is_causal=is_causal)
    conv.init_own_parameters(config)  # a module built outside a model: its gate is drawn by the model's hook
    inputs = torch.randn(3, length, 16, requires_grad=True)
    padding = torch.ones(3, length, dtype=torch.bool)
    padding[-1, length // 2 + 1 :] = False

    outputs, gradients = [], []
    for band_max_length in (length, length - 1):  # band, then windows
        conv.band_max_length = band_max_length
        output = conv(inputs, padding)
        (output * torch.linspace(-1, 1, output.numel()).view_as(output)).sum().backward()
        outputs.append(output.detach())
        gradients.append([inputs.grad.clone()] + [p.grad.clone() for p in conv.parameters()])
        inputs.grad = None
        conv.zero_grad()
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    for band, window in zip(*gradients):
        torch.testing.assert_close(band, window, rtol=1e-5, atol=1e-6)
    # the output at t reads the inputs at t-K+1 .. t (causal) or t-K//2 .. t+K//2 (centred), nothing else
    jacobian = torch.autograd.functional.jacobian(lambda x: conv(x)[0, :, 0], inputs.detach())[:, 0, :, 0]
    distance = torch.arange(length)[None, :] - torch.arange(length)[:, None]
    reach = (distance <= 0) & (distance > -7) if is_causal else distance.abs() <= 3
    assert not jacobian[~reach].any()


@pytest.mark.parametrize("is_causal", [False, True])
def test_the_cells_computed_at_once_are_eq_6_and_7_cell_by_cell(is_causal):
    """`kernels` computes every cell in one product, one softmax and one gate-weighted sum; the taps and their
    gradients are those of Eq. 6-7 written cell by cell (each cell's softmax over its own taps, a narrower cell at
    the centre or, causal, the most recent taps, mixed by softmax(gate))."""
    from hf_unified_mt.modeling_unified_transformer import PrimeDynamicConvolution

    torch.manual_seed(0)
    config = tiny_config(conv_kernel_sizes=[3, 7, 1], d_model=16, conv_weight_dropout=0.0)
    conv = PrimeDynamicConvolution(config, 4, is_causal=is_causal)
    with torch.no_grad():
        conv.kernel_gate.copy_(torch.tensor([0.3, -0.2, 0.5]))
    inputs = torch.randn(2, 5, 16, requires_grad=True)

    def cell_by_cell():
        gates = torch.softmax(conv.kernel_gate, dim=0)
        taps = torch.zeros(2, 5, 4, 7)
        for gate, size, generator in zip(gates, conv.kernel_sizes, conv.kernel_generators):
            weights = torch.softmax(generator(inputs).view(2, 5, 4, size), dim=-1)
            start = 7 - size if is_causal else (7 - size) // 2
            taps = taps + nn.functional.pad(gate * weights, (start, 7 - size - start))
        return taps

    weight = torch.randn(2, 5, 4, 7)
    gradients = []
    for kernels in (lambda: conv.kernels(inputs), cell_by_cell):
        taps = kernels()
        (taps * weight).sum().backward()
        gradients.append((taps.detach(), inputs.grad.clone(), *(p.grad.clone() for p in conv.parameters())))
        inputs.grad = None
        conv.zero_grad()
    for at_once, by_cell in zip(*gradients):
        torch.testing.assert_close(at_once, by_cell, rtol=1e-5, atol=1e-6)


def test_dropconnect_keeps_the_expected_taps():
    """DropConnect on the cells' taps (Wu et al.'s weight dropout) drops each tap independently and rescales the kept
    ones: averaged over draws the training taps are the evaluation taps, and a narrower cell never reads outside its
    own taps."""
    from hf_unified_mt.modeling_unified_transformer import PrimeDynamicConvolution

    torch.manual_seed(0)
    config = tiny_config(conv_kernel_sizes=[3, 7], d_model=16, conv_weight_dropout=0.5)
    conv = PrimeDynamicConvolution(config, 4, is_causal=False)
    conv.init_own_parameters(config)
    inputs = torch.randn(1, 3, 16)
    with torch.no_grad():
        expected = conv.eval().kernels(inputs)
        conv.train()
        draws = torch.stack([conv.kernels(inputs) for _ in range(4000)])
    torch.testing.assert_close(draws.mean(0), expected, atol=0.02, rtol=0.05)
    assert (draws != expected).any()


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("kernel_sizes", [[3, 7], [5]])
@pytest.mark.parametrize("length", [1, 2, 9])
def test_the_training_convolutions_written_out_backward_is_its_gradient(is_causal, kernel_sizes, length):
    """`PrimeConvolutionFunction` (the training forward, backward written out): float64 gradcheck of the inputs',
    generators' and gates' gradients, centred and causal, with a narrower cell beside the widest or one width alone,
    with padding and without; 9 positions are more than the widest kernel reaches on either side."""
    from hf_unified_mt.modeling_unified_transformer import PrimeConvolutionFunction

    torch.manual_seed(0)
    heads, channels = 2, 4
    inputs = torch.randn(2, length, channels, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(heads * sum(kernel_sizes), channels, dtype=torch.float64, requires_grad=True)
    gates = torch.softmax(torch.randn(len(kernel_sizes), dtype=torch.float64), dim=0).requires_grad_()
    mask = torch.ones(2, length, dtype=torch.bool)
    mask[-1, length // 2 + 1 :] = False
    for padding_mask in (mask, None):

        def convolution(inputs, weight, gates, padding_mask=padding_mask):
            layout = (heads, tuple(kernel_sizes), is_causal)
            return PrimeConvolutionFunction.apply(inputs, weight, gates, padding_mask, *layout, 0.0)

        assert torch.autograd.gradcheck(convolution, (inputs, weight, gates))


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("kernel_sizes", [[3, 7], [7]])
@pytest.mark.parametrize("length", [1, 6, 11])
def test_the_training_convolution_gives_autograds_outputs_and_gradients(is_causal, kernel_sizes, length):
    """In training with grad enabled, up to `band_max_length` positions the convolution is `PrimeConvolutionFunction`:
    with DropConnect on, the outputs and every gradient of `kernels` + `band_convolution` under autograd, the same
    dropout draws (float64); beyond `band_max_length` (here 8) it takes the sliding windows, which the Function
    equals too; in evaluation and without grad it keeps the computation of the paper's form."""
    from hf_unified_mt.modeling_unified_transformer import PrimeDynamicConvolution

    torch.manual_seed(0)
    config = tiny_config(conv_kernel_sizes=kernel_sizes, d_model=16, conv_weight_dropout=0.3)
    conv = PrimeDynamicConvolution(config, 4, is_causal=is_causal).double().train()
    conv.band_max_length = 8
    with torch.no_grad():
        conv.kernel_gate.copy_(torch.linspace(-0.5, 0.5, len(kernel_sizes)))
    inputs = torch.randn(3, length, 16, dtype=torch.float64, requires_grad=True)
    padding = torch.ones(3, length, dtype=torch.bool)
    padding[-1, length // 2 + 1 :] = False
    weight = torch.randn(3, length, 16, dtype=torch.float64)

    def autograd_band_form():
        window = conv.padded_window(inputs * padding.unsqueeze(-1), 4, conv.max_kernel_size, is_causal)
        return conv.band_convolution(window, conv.kernels(inputs)).transpose(1, 2).reshape(inputs.shape)

    results = []
    for convolution in (lambda: conv(inputs, padding), lambda: conv.training_convolution(inputs, padding).flatten(2)):
        for form in (convolution, autograd_band_form):
            torch.manual_seed(1)  # the same DropConnect draws
            output = form()
            (output * weight).sum().backward()
            results.append([output.detach(), inputs.grad.clone(), *(p.grad.clone() for p in conv.parameters())])
            inputs.grad = None
            conv.zero_grad()
    for expected, *received in zip(*results):
        for value in received:
            torch.testing.assert_close(value, expected, rtol=1e-10, atol=1e-12)

    def backward_nodes(output: torch.Tensor) -> set[str]:
        nodes, pending = set(), [output.grad_fn]
        while pending:
            node = pending.pop()
            if node is not None:
                nodes.add(type(node).__name__)
                pending.extend(next_node for next_node, _ in node.next_functions)
        return nodes

    function = "PrimeConvolutionFunctionBackward"
    assert (function in backward_nodes(conv(inputs, padding))) == (length <= conv.band_max_length)
    with torch.no_grad():
        assert not conv.trains_in_one_function(length)
    assert not conv.eval().trains_in_one_function(length)


@pytest.mark.parametrize("is_causal", [False, True])
def test_the_training_convolution_under_bfloat16_autocast(is_causal):
    """Under autocast (bfloat16 on the CPU) the written-out backward runs in the dtypes autocast gave the forward:
    the outputs are the autograd form's, and the gradients are float32's up to bfloat16 rounding, as autograd's are
    (about 1% apart, on either side, for the gates)."""
    from hf_unified_mt.modeling_unified_transformer import PrimeDynamicConvolution

    torch.manual_seed(0)
    config = tiny_config(conv_kernel_sizes=[3, 7], d_model=16, conv_weight_dropout=0.0)
    conv = PrimeDynamicConvolution(config, 4, is_causal=is_causal).train()
    with torch.no_grad():
        conv.kernel_gate.copy_(torch.tensor([0.3, -0.2]))
    inputs = torch.randn(3, 10, 16, requires_grad=True)
    padding = torch.ones(3, 10, dtype=torch.bool)
    padding[-1, 6:] = False
    weight = torch.randn(3, 10, 16)

    def autograd_band_form():
        window = conv.padded_window(inputs * padding.unsqueeze(-1), 4, conv.max_kernel_size, is_causal)
        return conv.band_convolution(window, conv.kernels(inputs)).transpose(1, 2).reshape(inputs.shape)

    results = []
    for form, bfloat16 in (
        (lambda: conv(inputs, padding), True),
        (autograd_band_form, True),
        (autograd_band_form, False),
    ):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
            output = form()
        (output.float() * weight).sum().backward()
        results.append([output.detach(), inputs.grad.clone(), *(p.grad.clone() for p in conv.parameters())])
        inputs.grad = None
        conv.zero_grad()
    (output, *gradients), (autograd_output, *_), (_, *float32_gradients) = results
    assert output.dtype == torch.bfloat16 and torch.equal(output, autograd_output)
    for gradient, expected in zip(gradients, float32_gradients):
        assert gradient.dtype == torch.float32
        assert (gradient - expected).norm() <= 0.03 * expected.norm()


@pytest.mark.parametrize("is_decoder", [False, True])
def test_a_training_forward_concatenates_the_convolutions_heads_as_they_lie(is_decoder):
    """Asked for the concatenation of its branches (the layer's output projection without stacking), a training
    self-attention returns [attention, convolution] as one branch, read from the convolution's heads where they lie:
    the same values and input gradients as concatenating the branches it returns otherwise (same DropConnect draws);
    evaluation returns the branches."""
    torch.manual_seed(0)
    model = tiny_model(conv_weight_dropout=0.2).train()
    attention = (model.model.decoder if is_decoder else model.model.encoder).layers[0].self_attn
    states = torch.randn(2, 7, model.config.d_model, requires_grad=True)
    padding = torch.ones(2, 7, dtype=torch.bool)
    padding[1, 5:] = False
    weight = torch.randn(2, 7, 2 * model.config.d_model)

    def concatenation(concatenate: bool):
        torch.manual_seed(1)
        branches, _ = attention(states, padding_mask=padding if not is_decoder else None, concatenate=concatenate)
        assert len(branches) == (1 if concatenate else 2)
        output = torch.cat(branches, dim=-1)
        (output * weight).sum().backward()
        gradient, states.grad = states.grad, None
        return output.detach(), gradient

    for joined, apart in zip(concatenation(True), concatenation(False), strict=True):
        torch.testing.assert_close(joined, apart, rtol=0, atol=0)
    attention.eval()
    with torch.no_grad():
        assert len(attention(states, concatenate=True)[0]) == 2
