"""Parameter counts against the figures derived from the authors' logs of Zhao et al. (docs/architectures.md §1)."""

import hf_unified_mt


# IWSLT14 De-En setting of the authors' run: fairseq dictionaries of 8,848 (de) and 6,632 (en) types, separate
# source/target embeddings and an untied output matrix.
IWSLT = dict(
    vocab_size=8848,
    decoder_vocab_size=6632,
    share_encoder_decoder_embeddings=False,
    tie_word_embeddings=False,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
)
# The released code allocates a decoder LayerNorm (`encoder_attn_layer_norm`, 2d parameters per decoder layer)
# that it never uses; we do not allocate it, so our counts are the logged ones minus 12 * 2d.
UNUSED_LAYER_NORM = 12 * 2 * 384


def count(model):
    return sum(p.numel() for p in model.parameters())


def prime_layer_formula(d, heads, ffn, kernels, decoder):
    """Per Prime layer: 3d²+3d (in) + 2d²+d (out) + Σ_k d·H·k (generators) + 2 (gate) + 2d (LN) + FFN,
    plus 4d²+4d for the decoder's cross-attention."""
    total = 3 * d * d + 3 * d + 2 * d * d + d + sum(d * heads * k for k in kernels) + len(kernels) + 2 * d
    total += 2 * d * ffn + ffn + d
    return total + (4 * d * d + 4 * d if decoder else 0)


def test_base_prime_matches_the_authors_logged_count():
    config = hf_unified_mt.get_config("unified_transformer", "base", **IWSLT)
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(config)
    assert count(model) == 48_193_584 - UNUSED_LAYER_NORM  # log: 48,193,584 (paper: 49M)


def test_base_prime_simple_matches_the_derived_count():
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(
        hf_unified_mt.get_config("unified_transformer", "base-simple", **IWSLT)
    )
    assert count(model) == 43_991_040 - UNUSED_LAYER_NORM  # Prime-simple, computed: 43,991,040 (paper: 44M)


def test_count_follows_the_per_layer_formula_for_a_joint_vocabulary():
    vocab = 10_000
    config = hf_unified_mt.get_config("unified_transformer", "base", vocab_size=vocab)  # shared + tied embeddings
    model = hf_unified_mt.UnifiedTransformerForConditionalGeneration(config)
    d, h, ffn, kernels = 384, 4, 768, [3, 15]
    expected = 12 * prime_layer_formula(d, h, ffn, kernels, False) + 12 * prime_layer_formula(d, h, ffn, kernels, True)
    assert count(model) == expected + vocab * d


def test_separate_projection_adds_one_value_projection_per_layer():
    shared = hf_unified_mt.get_config("unified_transformer", "tiny", vocab_size=100)
    separate = hf_unified_mt.get_config("unified_transformer", "tiny", vocab_size=100, shared_projection=False)
    d, layers = shared.d_model, shared.encoder_layers + shared.decoder_layers
    difference = count(hf_unified_mt.UnifiedTransformerForConditionalGeneration(separate)) - count(
        hf_unified_mt.UnifiedTransformerForConditionalGeneration(shared)
    )
    assert difference == layers * (d * d + d)


def test_small_presets_form_a_comparable_family():
    """Every architecture's `small` has one width, depth and FFN width; the parameter counts of the models shaped like
    a Transformer stay within 12% of the smallest (MUTE's extra units are what its paper adds); MPT's passes add no
    parameters; the Deep Transformer's `deep-small` is the same layer at 12+12."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    def params(arch, preset="small", **overrides):
        with torch.device("meta"):
            return count(
                AutoModelForSeq2SeqLM.from_config(hf_unified_mt.get_config(arch, preset, vocab_size=8000, **overrides))
            )

    shape_keys = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "encoder_ffn_dim")
    shapes = {
        arch: tuple(getattr(hf_unified_mt.get_config(arch, "small"), k) for k in shape_keys)
        for arch in hf_unified_mt.ARCHITECTURES
    }
    assert set(shapes.values()) == {(256, 4, 4, 4, 1024)}, shapes
    counts = {arch: params(arch) for arch in hf_unified_mt.ARCHITECTURES if arch != "multi_unit_transformer"}
    counts["one-unit MUTE"] = params("multi_unit_transformer", num_units=1)
    assert max(counts.values()) / min(counts.values()) < 1.12, counts
    assert params("multi_pass_transformer", num_passes=1) == counts["multi_pass_transformer"]
    deep = hf_unified_mt.get_config("deep_transformer", "deep-small")
    assert (deep.d_model, deep.encoder_layers, deep.decoder_layers, deep.encoder_ffn_dim) == (256, 12, 12, 1024)


def test_the_prime_dual_family_adds_one_prime_encoder_of_the_self_attention_depth_at_every_size():
    """The B+P family (tiny / small / base): the single self-attention encoder of the same size plus exactly as many
    Prime encoder layers (Zhao et al.'s per-layer count above), nothing else."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    def params(preset):
        config = hf_unified_mt.get_config("multi_encoder_transformer", preset, vocab_size=8000)
        with torch.device("meta"):
            return config, count(AutoModelForSeq2SeqLM.from_config(config))

    for size, single in (("tiny", "tiny-single"), ("small", "small-single"), ("base", "single")):
        config, dual = params(f"{size}-prime-dual")
        self_attention, prime = config.encoder_branches
        assert self_attention["type"] == "self_attention" and prime["type"] == "prime"
        assert prime["layers"] == self_attention["layers"] == config.decoder_layers
        d, heads, ffn = config.d_model, config.encoder_attention_heads, config.encoder_ffn_dim
        extra = prime["layers"] * prime_layer_formula(d, heads, ffn, prime["conv_kernel_sizes"], decoder=False)
        assert dual == params(single)[1] + extra
