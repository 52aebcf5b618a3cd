"""Golden values: for every preset family and contract variant, a seeded tiny model's loss, a logits slice and
per-parameter checksums of its initialisation, pinned as transformers pins `expected_slice`.

Regenerate (only when a change is *meant* to alter outputs, and say why in the commit):

    python tests/golden/make_golden.py                 # rewrites the "configs" values of golden_values.json
    python tests/golden/make_golden.py --checkpoints   # also rewrites the saved tiny checkpoints and their values

`tests/test_golden.py` rebuilds every configuration and compares with "configs"; it also loads the saved checkpoints
(written by the code of an earlier release: keep them unless their format is meant to break) and compares their
outputs with "checkpoints", so that a refactor that renames a parameter or changes a forward is caught.

History: the seeded values of the Deep Transformer, MUTE and Prime configurations were regenerated once, when the
initialisation became one mechanism (`init_law`): each matrix is now drawn once from its law, where it was drawn twice
(PyTorch's default, then its law), so the random stream differs. Replaying the old draws through the new code gave the
earlier values exactly. The untied output projection is now drawn like the embedding it replaces.
Regenerated again when Prime's draws followed its authors' code: the kernel generators U(±1/sqrt(d)) under every law
(they were Xavier-uniform) and, under `km`, the cross-attention's query/key/value U(±1/sqrt(d)) (they were
Xavier-uniform, sqrt(3) wider); only those parameters' checksums changed, in the configurations with Prime layers or
the `km` law.
`mute-merged-self` was added when MUTE's variant-6 decoder kept its relative-position self-attention (it had become
plain attention); the regeneration left every other configuration's values unchanged.
The training-mode values ("training": dropout, MUTE's bias-module noise and AutoShuffle projection, the Multi-Pass sum
objective) and the cached greedy decodes ("cached_decode", every configuration) were added before the initialisation
path and the layer building were refactored (issue 46, part 3); the "configs" values were left byte-identical.
`train-unified-prime-dropout` was regenerated alone when Prime's convolution computed its cells at once (issue 61):
DropConnect now draws one mask over all cells' taps instead of one per cell, so the random stream differs; with the
dropout off every value, and every gradient, is unchanged (the other configurations' values are byte-identical).
The saved checkpoints were rewritten (`--checkpoints`) when the init options of a version never released (`ds_init=`,
`linear_init=`, which `init_law` replaced) stopped being read (issue 63): 13 of the 21 checkpoints' config.json held
them. Every configuration now has a checkpoint saved by the current code (the 8 added since the last rewrite too), so
the checkpoints' values are their configurations' values; the Deep Transformer's, MUTE's and Prime's changed (their
checkpoints held the draws from before the initialisation was regenerated), the Multi-Encoder's and Multi-Pass ones'
did not. The machine of the rewrite computes float32 forwards that differ from the pinned values in the last bits
(relative 7e-5 at most; parameter checksums identical): the "configs", "training" and "cached_decode" values were kept
byte-identical, and the checkpoints' values are those pinned configuration values.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import hf_unified_mt  # noqa: E402
from hf_unified_mt.modeling_mt_common import CACHE_FIELD  # noqa: E402


VALUES_FILE = HERE / "golden_values.json"
CHECKPOINTS = HERE / "checkpoints"
VOCAB, PAD = 99, 1
TINY = dict(
    vocab_size=VOCAB,
    pad_token_id=PAD,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=64,
)
NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)

# name -> (architecture, preset, overrides). The contract suite's variants, every option that changes the
# initialisation or the forward, and every preset family's tiny member.
CONFIGS = {
    # paper 000
    "unified-prime": ("unified_transformer", "tiny", dict(conv_weight_dropout=0.0)),
    "unified-prime-simple": ("unified_transformer", "tiny", dict(use_convolution=False)),
    "unified-separate-projection": (
        "unified_transformer",
        "tiny",
        dict(shared_projection=False, conv_weight_dropout=0.0),
    ),
    "unified-unmasked-padding": (
        "unified_transformer",
        "tiny",
        dict(mask_padding_before_conv=False, conv_weight_dropout=0.0),
    ),
    "unified-separate-vocab": (
        "unified_transformer",
        "tiny",
        dict(
            share_encoder_decoder_embeddings=False,
            tie_word_embeddings=False,
            decoder_vocab_size=77,
            conv_weight_dropout=0.0,
        ),
    ),
    # paper 001
    "deep-self": ("deep_transformer", "tiny", dict(decoder_attention_type="self")),
    "deep-aan": ("deep_transformer", "tiny", dict(decoder_attention_type="aan")),
    "deep-merged": ("deep_transformer", "tiny", dict(decoder_attention_type="merged")),
    "deep-xavier": ("deep_transformer", "tiny", dict(init_law="xavier")),
    "deep-released-code": ("deep_transformer", "tiny", dict(ds_init_mode="released_code", ds_init_alpha=0.5)),
    "deep-prenorm": ("deep_transformer", "tiny", dict(normalize_before=True)),
    "deep-untied": ("deep_transformer", "tiny", dict(tie_word_embeddings=False)),
    # paper 002
    "mute": ("multi_unit_transformer", "tiny", dict()),
    "mute-bias-seq": ("multi_unit_transformer", "tiny", dict(use_bias_module=True, use_sequential_dependency=True)),
    "mute-one-unit": ("multi_unit_transformer", "tiny", dict(num_units=1)),
    # paper 003
    "multi-encoder-dual": ("multi_encoder_transformer", "tiny-dual", dict()),
    "multi-encoder-quintuple": ("multi_encoder_transformer", "tiny-quintuple", dict()),
    "multi-encoder-xavier": ("multi_encoder_transformer", "tiny-dual", dict(init_law="xavier")),
    # paper 004
    "mpt-hard": ("multi_pass_transformer", "tiny", dict(encoder_layers=3, num_passes=2, hard_connections=[2, 0, 1])),
    "mpt-soft": ("multi_pass_transformer", "tiny", dict(num_passes=2, connection_type="soft")),
    "mpt-default-init": ("multi_pass_transformer", "tiny", dict(num_passes=2, init_law="pytorch")),
    # compositions
    "deep-merged-self": ("deep_transformer", "tiny", dict(decoder_attention_type="merged_self")),
    "mute-merged": ("multi_unit_transformer", "tiny", dict(decoder_attention_type="merged")),
    "mute-merged-self": ("multi_unit_transformer", "tiny", dict(decoder_attention_type="merged_self")),
    "unified-dsinit": ("unified_transformer", "tiny", dict(init_law="ds_init", conv_weight_dropout=0.0)),
    "mute-normal": ("multi_unit_transformer", "tiny", dict(init_law="normal")),
    "multi-encoder-prime": (
        "multi_encoder_transformer",
        "tiny-prime-dual",
        dict(
            encoder_branches=[
                dict(type="self_attention", layers=2),
                dict(type="prime", layers=2, conv_kernel_sizes=[3, 5], conv_weight_dropout=0.0),
            ]
        ),
    ),
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
    "mute-prime-units": (
        "multi_unit_transformer",
        "tiny-prime-units",
        dict(unit_layer=dict(type="prime", conv_kernel_sizes=[3, 5], conv_weight_dropout=0.0)),
    ),
}


# name -> (architecture, preset, overrides), measured in training mode (`measure_training`): the paths that eval mode
# never takes. Dropout stays at the tiny presets' values (0.1) unless an override says otherwise.
TRAINING_CONFIGS = {
    # paper 000: residual, activation and convolution-weight (DropConnect) dropout, input dropout
    "train-unified-prime-dropout": ("unified_transformer", "tiny", dict(attention_dropout=0.1, input_dropout=0.1)),
    # paper 002: every noise type of the bias module with the switch always on (Eq. 11), and AutoShuffle (Eq. 13-20)
    # from an M that is not doubly stochastic, so that the training forward projects it (Eq. 17-18); no dropout, so
    # that the values pin the noise and the projection
    "train-mute-bias-autoshuffle": (
        "multi_unit_transformer",
        "tiny",
        dict(
            NO_DROPOUT,
            use_bias_module=True,
            use_sequential_dependency=True,
            unit_noise_types=["swap", "disorder", "mask", "identity"],
            bias_sample_rate=1.0,
            mask_probability=0.3,
        ),
    ),
    # paper 004: the sum objective, L(S_{N-1}, T) + L(S~_{N-1}, T) (§3.2), hard and soft connections
    "train-mpt-hard-sum": (
        "multi_pass_transformer",
        "tiny",
        dict(NO_DROPOUT, encoder_layers=3, num_passes=2, hard_connections=[2, 0, 1], training_objective="sum"),
    ),
    "train-mpt-soft-sum": (
        "multi_pass_transformer",
        "tiny",
        dict(NO_DROPOUT, num_passes=3, connection_type="soft", training_objective="sum"),
    ),
}
DECODE_STEPS = 4


def build(name: str):
    arch, preset, overrides = CONFIGS[name]
    config = hf_unified_mt.get_config(arch, preset, **{**TINY, **NO_DROPOUT, **overrides})
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager").eval()


def build_training(name: str):
    """A `TRAINING_CONFIGS` model in training mode; MUTE's AutoShuffle matrices start from a fixed matrix that is not
    doubly stochastic (the training forward projects them)."""
    arch, preset, overrides = TRAINING_CONFIGS[name]
    config = hf_unified_mt.get_config(arch, preset, **{**TINY, **overrides})
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager").train()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in getattr(model.model.encoder, "layers", ()):
            if getattr(layer, "unit_order", None) is not None:
                layer.unit_order.weight.copy_(torch.rand(layer.unit_order.weight.shape, generator=generator))
    return model


def batch():
    """Source ids, the second row right-padded by two positions, and labels."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, VOCAB, (2, 7), generator=generator)
    ids[:, -1] = 2
    mask = torch.ones_like(ids)
    ids[1, -2:], mask[1, -2:] = PAD, 0
    ids[1, -3] = 2
    labels = torch.randint(4, 77, (2, 5), generator=generator)
    return ids, mask, labels


@torch.no_grad()
def measure(model) -> dict:
    """Loss, a logits slice, and the sum and absolute sum of every parameter (which pins the initialisation law of
    each matrix, not only its effect on one batch)."""
    ids, mask, labels = batch()
    output = model(input_ids=ids, attention_mask=mask, labels=labels)
    return {
        "loss": output.loss.item(),
        "logits_slice": output.logits[:, :3, :4].flatten().tolist(),
        "parameters": {
            name: [parameter.double().sum().item(), parameter.double().abs().sum().item()]
            for name, parameter in model.named_parameters()
        },
    }


def measure_training(model) -> dict:
    """A seeded training-mode forward with labels and its backward pass (dropout, noise and sampled choices drawn after
    `torch.manual_seed(1)`): the loss, a logits slice, and what the training forward changed of the model (MUTE's
    projected AutoShuffle matrices, and its penalty)."""
    ids, mask, labels = batch()
    torch.manual_seed(1)
    output = model(input_ids=ids, attention_mask=mask, labels=labels)
    output.loss.backward()
    measured = {"loss": output.loss.item(), "logits_slice": output.logits[:, :3, :4].flatten().tolist()}
    layers = getattr(model.model.encoder, "layers", ())
    orders = [layer.unit_order.weight for layer in layers if getattr(layer, "unit_order", None) is not None]
    if orders:
        measured["auto_shuffle"] = torch.stack(orders).flatten().tolist()
        measured["shuffle_penalty"] = output.shuffle_penalty.item()
    return measured


@torch.no_grad()
def measure_cached_decode(model, steps: int = DECODE_STEPS) -> dict:
    """Greedy decoding with the generation cache (`use_cache=True`, one target position per step, the encoder run
    once), as `generate()` drives the model: the chosen tokens and each step's logits slice."""
    ids, mask, _ = batch()
    encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
    step_ids = torch.full((ids.shape[0], 1), model.config.decoder_start_token_id)
    cache, tokens, logits = None, [], []
    for _ in range(steps):
        output = model(
            encoder_outputs=encoder_outputs,
            attention_mask=mask,
            decoder_input_ids=step_ids,
            cache=cache,
            use_cache=True,
        )
        cache = getattr(output, CACHE_FIELD)
        step_logits = output.logits[:, -1]
        step_ids = step_logits.argmax(-1, keepdim=True)
        tokens.append(step_ids.squeeze(-1).tolist())
        logits.append(step_logits[:, :4].tolist())
    return {"tokens": tokens, "logits_slice": torch.tensor(logits).flatten().tolist()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", action="store_true", help="also rewrite the saved tiny checkpoints")
    args = parser.parse_args()
    torch.set_num_threads(1)
    previous = json.loads(VALUES_FILE.read_text()) if VALUES_FILE.exists() else {}
    values = {"torch": torch.__version__, "configs": {}, "checkpoints": previous.get("checkpoints", {})}
    values["training"], values["cached_decode"] = {}, {}
    for name in CONFIGS:
        model = build(name)
        values["configs"][name] = measure(model)
        values["cached_decode"][name] = measure_cached_decode(model)
        if args.checkpoints:
            folder = CHECKPOINTS / name
            model.save_pretrained(folder)
            for code in folder.glob("*.py"):  # the package's classes load it; the code closure is tested elsewhere
                code.unlink()
            values["checkpoints"][name] = values["configs"][name]
    for name in TRAINING_CONFIGS:
        values["training"][name] = measure_training(build_training(name))
    VALUES_FILE.write_text(json.dumps(values, indent=1) + "\n")
    print(f"wrote {VALUES_FILE} ({len(CONFIGS)} configurations, {len(TRAINING_CONFIGS)} in training mode)")


if __name__ == "__main__":
    main()
