"""The layout maps (docs/design.md's tree, CONTRIBUTING.md's "Where things live") name every module of the package
that exists, and no module that does not: a module added, split or removed without its map changing fails here."""

import fnmatch
import re

import pytest

from mt_checks import ROOT


PACKAGE = ROOT / "src" / "hf_unified_mt"
# Data the `evaluate` library loads by path (a metric script), not a module of the package.
NOT_MODULES = ("training/local_metrics/",)


def layout_map(document: str) -> str:
    """The part of `document` that maps the package: design.md's tree (the first code block) and the text after it up
    to the next heading; CONTRIBUTING.md's "Where things live" section."""
    text = (ROOT / document).read_text(encoding="utf-8")
    if document == "CONTRIBUTING.md":
        return text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    tree = text.split("```\nsrc/hf_unified_mt/", 1)[1]
    return tree.split("\n## ", 1)[0]


def package_modules() -> list[str]:
    """Every module file of the package, relative to its folder (`deployment/onnx_export.py`), `__init__.py` aside."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if path.name != "__init__.py" and not relative.startswith(NOT_MODULES):
            found.append(relative)
    return found


def python_files() -> set[str]:
    """The names of every Python file of the project a map may name (package, scripts, benchmarks, tests)."""
    names = set()
    for folder in ("src", "training", "benchmarks", "tests"):
        names.update(path.name for path in (ROOT / folder).rglob("*.py") if ".venv" not in path.parts)
    names.update(path.name for path in ROOT.glob("*.py"))
    return names


MAPS = ("docs/design.md", "CONTRIBUTING.md")


def file_names(text: str) -> list[str]:
    """The Python file names and patterns in `text` (`run.py`, `modeling_*.py`); a bare `*.py` names no module."""
    return [name for name in re.findall(r"[\w*]+\.py\b", text) if name[: -len(".py")].strip("*")]


def named(module: str, text: str) -> bool:
    """Whether `text` names `module`: its file name (or a pattern such as `modeling_*.py` matching it), or, for a module
    of a subpackage, its bare name as a word (`data, tokenization, batching`)."""
    file_name = module.rsplit("/", 1)[-1]
    stem = file_name[: -len(".py")]
    patterns = file_names(text)
    if any(fnmatch.fnmatchcase(file_name, pattern) for pattern in patterns):
        return True
    return "/" in module and re.search(rf"(?<![\w.]){re.escape(stem)}(?![\w])", text) is not None


@pytest.mark.parametrize("document", MAPS)
def test_the_layout_map_names_every_module(document):
    text = layout_map(document)
    missing = [module for module in package_modules() if not named(module, text)]
    assert not missing, f"{document} does not name {missing}"


@pytest.mark.parametrize("document", MAPS)
def test_the_layout_map_names_no_module_that_does_not_exist(document):
    existing = python_files()
    named_files = set(file_names(layout_map(document)))
    gone = sorted(name for name in named_files if not any(fnmatch.fnmatchcase(file, name) for file in existing))
    assert not gone, f"{document} names {gone}, which do not exist"


def test_the_map_reader_sees_patterns_and_bare_names():
    text = "`configuration_*.py`, training library: data, tokenization, `run.py`"
    assert named("configuration_deep_transformer.py", text)
    assert named("training/data.py", text) and named("training/run.py", text)
    assert not named("training/batching.py", text)
    assert not named("modeling_mt_common.py", "`modeling_mt_common` alone")  # a flat module is named by its file
    assert not named("training/batching.py", "scripts: `training/*.py`")  # a bare wildcard names nothing
