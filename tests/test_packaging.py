"""Packaging: one version source, the licence, and a core install that loads and generates without the training
extras (`pip install hf-unified-mt` without `[train]`)."""

import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

import hf_unified_mt
from mt_checks import ROOT


tomllib = pytest.importorskip("tomllib")  # Python 3.11+
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# What `[train]` adds and the model code must not need (pyyaml, tqdm and numpy come with transformers anyway).
TRAINING_EXTRAS = ("datasets", "accelerate", "evaluate", "sacrebleu", "pyarrow", "jinja2")


def test_the_version_has_one_source():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hf_unified_mt.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", hf_unified_mt.__version__)
    assert importlib.metadata.version("hf-unified-mt") == hf_unified_mt.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {hf_unified_mt.__version__}" in changelog


def test_license_file_is_the_apache_license_pyproject_names():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_core_dependencies_are_what_loading_and_generating_needs():
    names = {re.split(r"[<>=!~ \[]", spec)[0].lower() for spec in PYPROJECT["project"]["dependencies"]}
    assert names == {"torch", "transformers", "tokenizers", "huggingface-hub", "safetensors"}
    extras = PYPROJECT["project"]["optional-dependencies"]
    train = {re.split(r"[<>=!~ \[]", spec)[0].lower() for spec in extras["train"]}
    assert {"datasets", "accelerate", "evaluate", "sacrebleu"} <= train


@pytest.mark.subprocess
def test_the_package_loads_and_generates_without_the_training_extras(tmp_path):
    """In a fresh interpreter where the `[train]` packages cannot be imported, `import hf_unified_mt` works, and a model
    builds, saves, reloads through the Auto classes and generates."""
    blocked = ", ".join(repr(name) for name in TRAINING_EXTRAS)
    script = f"""
import sys
for name in ({blocked},):
    sys.modules[name] = None  # importing it raises ImportError
import torch
torch.set_num_threads(1)
import hf_unified_mt
from transformers import AutoModelForSeq2SeqLM
for arch in hf_unified_mt.ARCHITECTURES:
    config = hf_unified_mt.get_config(arch, "tiny", vocab_size=40)
    torch.manual_seed(0)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(r"{tmp_path}/" + arch)
    model = AutoModelForSeq2SeqLM.from_pretrained(r"{tmp_path}/" + arch).eval()
    out = model.generate(torch.tensor([[5, 6, 7, 2]]), max_new_tokens=3, num_beams=2)
    assert out.shape[0] == 1, out
loaded = sorted(name for name in ({blocked},) if sys.modules.get(name) is not None)
print("loaded:", loaded)
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "loaded: []"
