"""The library and the experiment machinery are two parts: no library module imports `keras_ils.experiments`."""

import ast
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_ils"
LIBRARY_MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "experiments" not in p.relative_to(PACKAGE).parts)
# the command, keras_ils_cli, lives beside the package


def _imported_modules(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@pytest.mark.parametrize("path", LIBRARY_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_library_module_does_not_import_the_experiments(path):
    imported = [name for name in _imported_modules(path) if name.startswith("keras_ils.experiments")]
    assert not imported, f"{path.name} imports {imported}"


def test_importing_the_library_loads_no_experiment_module():
    code = "import sys, keras_ils; print(sorted(m for m in sys.modules if m.startswith('keras_ils.experiments')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
