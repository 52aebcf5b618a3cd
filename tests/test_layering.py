"""Which part of the package may import which, read from the source (every import statement, including those inside
functions): deployment never depends on training; the ONNX runtime reads an export through the folder and format
modules only (never the exporter or its module substitutions), the exporter never the runtime; loading an export reads
one way (runtime -> folder -> int8 -> format); the format module imports no deployment module; and no deployment
module imports itself in a circle."""

import ast

import pytest

from mt_checks import ROOT


PACKAGE = ROOT / "src" / "hf_unified_mt"
DEPLOYMENT = "hf_unified_mt.deployment"


def module_name(path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path) -> set[str]:
    """The modules of the package that `path` imports: `from .x import y` resolved against its package, and for
    `from package import name` both the package and `package.name` (which may be a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {module for module in found if module.startswith("hf_unified_mt")}


MODULES = {module_name(path): imported_modules(path) for path in sorted(PACKAGE.rglob("*.py"))}


# The modules of the deployment package, by their short names (`onnx_export`, ...).
DEPLOYMENT_MODULES = {name.removeprefix(f"{DEPLOYMENT}.") for name in MODULES if name.startswith(f"{DEPLOYMENT}.")}
EXPORTER = {"onnx_export", "onnx_patcher"}  # tracing, verification, writing; the module substitutions
# ORTModelForSeq2SeqLM, its search loops and the search graphs' shortlist projection
RUNTIME = {"onnx_runtime", "onnx_search", "onnx_search_graph", "onnx_shortlist"}


def test_the_import_reader_sees_relative_absolute_and_function_level_imports():
    assert "hf_unified_mt.cache_mt" in MODULES["hf_unified_mt.deployment.onnx_export"]  # `from ..cache_mt import`
    assert "hf_unified_mt.deployment.onnx_folder" in MODULES["hf_unified_mt.deployment.onnx_runtime"]
    assert "hf_unified_mt.deployment.onnx_format" in MODULES["hf_unified_mt.deployment.onnx_folder"]
    assert "hf_unified_mt.training.run" in MODULES["hf_unified_mt.analysis.ablation_study"]  # inside a function


@pytest.mark.parametrize("module", sorted(name for name in MODULES if name.startswith(DEPLOYMENT)))
def test_deployment_does_not_depend_on_training(module):
    assert not {name for name in MODULES[module] if name.startswith("hf_unified_mt.training")}


# What each ONNX module of deployment must not import (`onnx_backend`, the one module that uses both sides, has no row).
ONNX_LAYERS = [
    # reads what the exporter wrote through `onnx_folder` (which quantises int8 graphs under the folder's lock)
    ("onnx_runtime", {*EXPORTER, "onnx_backend", "onnx_int8"}),
    ("onnx_search", {*EXPORTER, "onnx_runtime", "onnx_backend", "onnx_folder", "onnx_int8"}),  # the search loops
    ("onnx_search_graph", {*EXPORTER, "onnx_runtime", "onnx_backend", "onnx_folder", "onnx_int8"}),
    ("onnx_shortlist", {*EXPORTER, "onnx_runtime", "onnx_backend", "onnx_folder", "onnx_int8"}),
    ("onnx_export", {*RUNTIME, "onnx_backend"}),
    ("onnx_patcher", {*RUNTIME, "onnx_export", "onnx_backend", "onnx_folder", "onnx_int8"}),  # touches the model only
    ("onnx_folder", {*EXPORTER, *RUNTIME, "onnx_backend", "inference"}),  # read by the runtime, written by the exporter
    ("onnx_int8", DEPLOYMENT_MODULES - {"onnx_format"}),  # quantises one graph
    ("onnx_format", DEPLOYMENT_MODULES),  # the contract of both sides: names and the cache layout
]


def test_the_shortlist_table_imports_no_deployment_module():
    """`shortlist` (the vocabulary shortlist's table and file) is shared by the exporter and the runtime."""
    assert not {name for name in MODULES[f"{DEPLOYMENT}.shortlist"] if name.startswith(DEPLOYMENT)}


@pytest.mark.parametrize("module, forbidden", ONNX_LAYERS)
def test_the_onnx_runtime_and_exporter_share_only_the_folder_and_format_modules(module, forbidden):
    imported = MODULES[f"{DEPLOYMENT}.{module}"]
    assert not imported & {f"{DEPLOYMENT}.{name}" for name in forbidden}


def test_every_onnx_module_of_deployment_has_its_row_in_the_layering_table():
    onnx_modules = {name for name in DEPLOYMENT_MODULES if name.startswith("onnx_")}
    assert onnx_modules == {"onnx_backend", *(module for module, _ in ONNX_LAYERS)}


def test_no_deployment_module_imports_itself_in_a_circle():
    graph = {
        name: {other for other in imports if other in MODULES and other != name and other.startswith(DEPLOYMENT)}
        for name, imports in MODULES.items()
        if name.startswith(DEPLOYMENT) and name != DEPLOYMENT
    }

    def reaches(start, target, seen=()):
        return any(
            step == target or (step not in seen and reaches(step, target, (*seen, step))) for step in graph[start]
        )

    assert not [name for name in graph if reaches(name, name)]


PUBLISHING = "hf_unified_mt.publishing"


@pytest.mark.parametrize("module", sorted(name for name in MODULES if name.startswith(PUBLISHING)))
def test_publishing_depends_on_neither_training_nor_analysis(module):
    """Publishing (`hub_upload.py`'s library) sits beside deployment: it reads checkpoints and writes the Hub folder,
    never trains or measures."""
    assert not {
        name for name in MODULES[module] if name.startswith(("hf_unified_mt.training", "hf_unified_mt.analysis"))
    }
