"""Helpers the test modules share (test modules never import each other): the generation and gradient checks
every architecture's tests run the same way, a fresh interpreter without the package (remote code), a list dataset
for the Trainer, and loading a `training/` script as a module."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from hf_unified_mt.modeling_mt_common import CACHE_FIELD


ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "training"


# Greedy, beam search (with several returned sequences and a length penalty), sampling, beam sampling.
GENERATION_SETTINGS = (
    dict(),
    dict(num_beams=4, num_return_sequences=2),
    dict(num_beams=4, num_return_sequences=2, length_penalty=0.7),
    dict(do_sample=True, top_k=10),
    dict(do_sample=True, num_beams=3, temperature=1.5),
)

# Files every checkpoint carries besides the architecture's own modeling / configuration files (remote code).
COMMON_CODE_FILES = (
    "modeling_mt_common.py",
    "configuration_mt_common.py",
    "initialization_mt.py",
    "cache_mt.py",
    "loss_mt.py",
    "pipeline_translation.py",
)
# Paper 001's decoder variants, carried by every architecture with a Transformer-style decoder (all but paper 000).
DECODER_VARIANT_FILES = ("modeling_decoder_variants.py",)


def assert_generate_is_identical_without_cache(
    model, input_ids, attention_mask=None, settings=GENERATION_SETTINGS, new_tokens: int = 12, varied: bool = True
):
    """`generate()` gives the same ids with and without the cache (same seed for sampling) for every setting, decodes
    `new_tokens` tokens, and (with `varied`) more than three distinct ones: a model that repeats one token would
    hide a cache bug."""
    for kwargs in settings:
        outputs = []
        for use_cache in (True, False):
            torch.manual_seed(0)
            outputs.append(
                model.generate(
                    input_ids,
                    attention_mask=attention_mask,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    use_cache=use_cache,
                    **kwargs,
                )
            )
        assert torch.equal(outputs[0], outputs[1]), kwargs
        assert outputs[0].shape[1] == new_tokens + 1  # start token + new tokens: really decoded a long output
        if varied:
            assert len(outputs[0][:, 1:].unique()) > 3, f"varied outputs, not one repeated token ({kwargs})"


def assert_incremental_decoding_matches_full_forward(model, input_ids, attention_mask, target, atol=1e-5, **kwargs):
    """Decoding `target` one token at a time with the cache gives the logits of one full teacher-forced forward."""
    with torch.no_grad():
        full = model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target, use_cache=False, **kwargs
        ).logits
        encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        cache, steps = None, []  # the cache is created by the first step, as generate() does
        for t in range(target.shape[1]):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=attention_mask,
                decoder_input_ids=target[:, t : t + 1],
                cache=cache,
                use_cache=True,
            )
            cache = getattr(out, CACHE_FIELD)
            steps.append(out.logits)
    steps = torch.cat(steps, dim=1)
    assert torch.allclose(steps, full, atol=atol), (steps - full).abs().max()


def assert_translation_does_not_depend_on_batch_or_padding(
    model,
    input_ids,
    attention_mask,
    pad: int,
    settings=(dict(), dict(num_beams=4)),
    encoder_kwargs=(dict(),),
    varied: bool = True,
):
    """The last sentence of the batch, right-padded by `pad` positions, is encoded (for each of `encoder_kwargs`) and
    translated (for each of `settings`) exactly as when it is alone, and its translation is not one repeated token."""
    alone_ids = input_ids[-1:, : input_ids.shape[1] - pad]
    with torch.no_grad():
        for kwargs in encoder_kwargs:
            batched = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            alone = model.get_encoder()(input_ids=alone_ids, **kwargs)
            batched = batched.last_hidden_state[-1, : alone_ids.shape[1]]
            assert torch.allclose(batched, alone.last_hidden_state[0], atol=1e-5), kwargs
    for kwargs in settings:
        batched = model.generate(
            input_ids, attention_mask=attention_mask, max_new_tokens=10, min_new_tokens=10, **kwargs
        )
        alone = model.generate(alone_ids, max_new_tokens=10, min_new_tokens=10, **kwargs)
        assert torch.equal(batched[-1], alone[0]), kwargs
        if varied:
            assert len(set(alone[0].tolist())) > 2, f"varied outputs, not one repeated token ({kwargs})"


def assert_gradient_checkpointing_gives_the_same_gradients(build, seed: int = 7, **inputs):
    """`build()` twice (a fresh model in training mode), the second with activation checkpointing: one training
    forward on `inputs` (labels included) with the same seed gives the same gradients, parameter by parameter, so
    recomputation replays the random draws (dropout, noise) and every input that needs a gradient reaches it."""
    grads = []
    for checkpointing in (False, True):
        model = build()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.is_activation_checkpointing
        torch.manual_seed(seed)
        model(**inputs).loss.backward()
        grads.append({name: p.grad for name, p in model.named_parameters()})
    plain, checkpointed = grads
    assert [n for n, g in plain.items() if g is None] == [n for n, g in checkpointed.items() if g is None]
    assert sum(g.abs().sum() for g in plain.values() if g is not None) > 0
    for name, grad in plain.items():
        if grad is not None:
            assert torch.allclose(grad, checkpointed[name], atol=1e-6), name


def run_without_package(script: str, cwd) -> dict:
    """Runs `script` in a fresh interpreter where `import hf_unified_mt` fails, and returns its JSON output."""
    prelude = (
        "import sys; sys.modules['hf_unified_mt'] = None  # the package is not importable\n"
        "import torch; torch.set_num_threads(1)  # as the `single_thread` fixture does in this process\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_MODULES_CACHE": str(cwd / "modules")}
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def load_script(name):
    """Import a training/ script as a module (under a name of its own: `training/` is not a package)."""
    spec = importlib.util.spec_from_file_location(f"mt_script_{name}", TRAINING / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


def benchmark_script(name):
    """A `benchmarks/` script (`studies/<name>` for a study) as a module, under a name of its own, with `benchmarks/`
    on the path while it loads (the scripts import the harness, `benchmarks/harness/`)."""
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"mt_benchmark_{name.replace('/', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module
