"""The library and the paper's machinery are two packages: `keras_ils` never imports `keras_ils_experiments`, nor
the command line beside it (`keras_ils_cli`, which imports the library).

`keras_ils_experiments` is built on the library and registers its networks and datasets with it on import
(`keras_ils.comparison.networks.register`, `keras_ils.comparison.data.datasets.register_source`).
"""

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_ils"
LIBRARY_MODULES = sorted(PACKAGE.rglob("*.py"))
# the command, keras_ils_cli, lives beside the package and joins the two


def _imported_modules(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@pytest.mark.parametrize("path", LIBRARY_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_library_module_does_not_import_the_experiments(path):
    imported = [name for name in _imported_modules(path) if name.startswith("keras_ils_experiments")]
    assert not imported, f"{path.name} imports {imported}"


@pytest.mark.parametrize("path", LIBRARY_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_library_module_does_not_import_the_command_line(path):
    """The command imports the library once its arguments are parsed; the library never imports the command (any
    import statement, a function's lazy one too)."""
    imported = [name for name in _imported_modules(path) if name.split(".")[0] == "keras_ils_cli"]
    assert not imported, f"{path.name} imports {imported}"


# One interpreter (importing TensorFlow costs seconds) answers all three questions about `import keras_ils`.
_IMPORT_PROBE = """
import json, sys, keras
before = set(sys.modules)
import keras_ils
added = sorted({m.split('.')[0] for m in set(sys.modules) - before})
experiments = sorted(m for m in sys.modules if m.startswith('keras_ils_experiments'))
keras_ils.tuning.GridSearch
print(json.dumps({"added": added, "experiments": experiments, "tuner_on_use": 'keras_tuner' in sys.modules}))
"""


@pytest.fixture(scope="module")
def bare_import():
    """What a fresh `import keras_ils` (after `import keras`) loads, and what first use of `keras_ils.tuning` loads."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_importing_the_library_loads_no_experiment_module(bare_import):
    assert bare_import["experiments"] == []


def test_importing_the_library_costs_what_importing_keras_costs(bare_import):
    """`import keras_ils` loads none of KerasTuner, matplotlib, scipy, scikit-learn or tensorflow-datasets beyond
    what Keras loads."""
    heavy = {"keras_tuner", "matplotlib", "scipy", "sklearn", "tensorflow_datasets"}
    assert not set(bare_import["added"]) & heavy, bare_import["added"]
    assert bare_import["tuner_on_use"]  # keras_ils.tuning loads on first use


PUBLIC_MODULES = sorted(
    p
    for p in PACKAGE.rglob("*.py")
    if not any(part.startswith("_") for part in p.relative_to(PACKAGE).with_suffix("").parts[:-1])
    and (not p.name.startswith("_") or p.name == "__init__.py")
)


@pytest.mark.parametrize("path", PUBLIC_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_public_module_lists_its_names(path):
    tree = ast.parse(path.read_text())
    imports_or_defines = any(
        isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)) for node in tree.body
    )
    if path.name == "__init__.py" and not imports_or_defines:
        return  # a sub-package whose __init__ is only its docstring
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if hasattr(t, "id")}
    assert "__all__" in assigned, f"{path.relative_to(PACKAGE)} has no __all__"


# The size limits of the code (DESIGN.md "Layout"): functions of at most 60 lines (their docstrings aside) and 10
# parameters, modules of at most 500 lines. Constructors (Keras-style layers, losses, metrics) and the command's
# argparse tables are the documented exceptions.
SOURCES = [*sorted(PACKAGE.rglob("*.py")), PACKAGE.parent / "keras_ils_cli.py"]
SOURCES += sorted((PACKAGE.parent / "keras_ils_experiments").rglob("*.py"))
# and the package's one call with keyword arguments for every setting, as scikit-learn's `cross_validate`
ARGPARSE_TABLES = {"keras_ils_cli.py": ("build_parser",), "runs.py": ("compare",)}


def _functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _body_lines(node) -> int:
    first = node.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    start = node.body[1].lineno if docstring and len(node.body) > 1 else first.lineno
    return node.end_lineno - start + 1


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name if p.parent != PACKAGE else str(p.relative_to(PACKAGE)))
def test_size_limits(path):
    assert len(path.read_text().splitlines()) <= 500, f"{path.name} is over 500 lines"
    exempt = ARGPARSE_TABLES.get(path.name, ())
    for node in _functions(ast.parse(path.read_text())):
        if node.name == "__init__" or node.name in exempt:
            continue
        arguments = node.args
        names = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
        names = [n for n in names if n not in ("self", "cls")]
        assert len(names) <= 10, f"{path.name}:{node.lineno} {node.name} has {len(names)} parameters"
        assert _body_lines(node) <= 60, f"{path.name}:{node.lineno} {node.name} is {_body_lines(node)} lines long"


# The parts of the library that are TensorFlow by design (issue 37 item 3): the `tf.data` maps, the teacher's cache,
# the main job and KerasTuner's. Everything else is the core, which runs under JAX or torch without TensorFlow.
TENSORFLOW_PARTS = ("keras_ils.data", "keras_ils.teacher", "keras_ils.comparison", "keras_ils.tuning")


def _module_name(path):
    return ".".join(("keras_ils", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")


def _within(name, parts):
    return any(name == part or name.startswith(part + ".") for part in parts)


CORE_MODULES = [p for p in LIBRARY_MODULES if not _within(_module_name(p), TENSORFLOW_PARTS)]


def _module_level_imports(tree):
    """The modules a module imports when it is imported: its top-level imports, those under `if`/`try` included
    (`if TYPE_CHECKING:` blocks excepted), not those inside functions or classes."""
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
        elif isinstance(node, (ast.If, ast.Try)):
            pending.extend(node.body + node.orelse + getattr(node, "handlers", []) + getattr(node, "finalbody", []))
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_module_imports_no_tensorflow_at_import(path):
    """A core module may use TensorFlow inside a function (until the fits move to `keras.ops`), never on import, and
    never through a part of the package that does."""
    imported = _module_level_imports(ast.parse(path.read_text()))
    found = sorted({name for name in imported if _within(name, ("tensorflow", *TENSORFLOW_PARTS))})
    assert not found, f"{path.name} imports {found} on import"


_BLOCKED_IMPORT_PROBE = """
import importlib.abc, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(name, name=name)

sys.meta_path.insert(0, Refuse())
import keras_ils
from keras_ils import baselines, calibration, conformal, distillation, evaluation, losses, methods, metrics, plots
print(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"))
"""


def test_the_library_imports_under_jax_without_tensorflow():
    """The quick twin of CI's TensorFlow-blocked pass (`tests/test_without_tensorflow.py`), in every run."""
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    out = subprocess.run([sys.executable, "-c", _BLOCKED_IMPORT_PROBE], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
