"""The README's code runs as written (issue 62): its Usage block, in a fresh interpreter, in an empty folder."""

import os
import re
import subprocess
import sys

import pytest

from mt_checks import ROOT


def readme_block(section: str) -> str:
    """The first ```python block under the README heading `## <section>`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", body, re.S).group(1)


@pytest.mark.subprocess
def test_the_usage_block_runs_verbatim(tmp_path):
    (tmp_path / "usage.py").write_text(readme_block("Usage"), encoding="utf-8")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "default",
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    result = subprocess.run(
        [sys.executable, "usage.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Warning" not in result.stderr, result.stderr[-3000:]
    printed = result.stdout.strip().splitlines()[-1]
    assert printed.startswith("['") and printed.endswith("']"), printed  # one translation, as a list
    assert (tmp_path / "my-checkpoint" / "tokenizer.json").is_file()
