"""Which part of the package may import which, read from the source (every import statement, including those inside
functions): deployment never depends on training, the ONNX runtime reads only the export format (never the exporter),
the exporter never the runtime, the format module neither, and no deployment module imports itself in a circle."""

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


def test_the_import_reader_sees_relative_absolute_and_function_level_imports():
    assert "hf_unified_mt.cache_mt" in MODULES["hf_unified_mt.deployment.onnx_export"]  # `from ..cache_mt import`
    assert "hf_unified_mt.deployment.onnx_format" in MODULES["hf_unified_mt.deployment.onnx_runtime"]
    assert "hf_unified_mt.training.run" in MODULES["hf_unified_mt.analysis.ablation_study"]  # inside a function


@pytest.mark.parametrize("module", sorted(name for name in MODULES if name.startswith(DEPLOYMENT)))
def test_deployment_does_not_depend_on_training(module):
    assert not {name for name in MODULES[module] if name.startswith("hf_unified_mt.training")}


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("onnx_runtime", {"onnx_export", "onnx_backend"}),  # reads what the exporter wrote, through the format only
        ("onnx_export", {"onnx_runtime", "onnx_search", "onnx_backend"}),
        ("onnx_search", {"onnx_export", "onnx_runtime", "onnx_backend"}),  # the runtime's search loops
        ("onnx_format", {"onnx_export", "onnx_runtime", "onnx_search", "onnx_backend", "inference"}),
    ],
)
def test_the_onnx_runtime_and_exporter_share_only_the_format_module(module, forbidden):
    imported = MODULES[f"{DEPLOYMENT}.{module}"]
    assert not imported & {f"{DEPLOYMENT}.{name}" for name in forbidden}


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
