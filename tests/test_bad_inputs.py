"""Bad inputs and faults of `keras_ils.compare` and `keras-ils run`, one table row each.

Every row runs in a fresh folder holding a folder of the user's files
(`user/`: data sets, a folder named like a `.npz`, unrelated notes) and
states what must happen: the exception (`compare`) or exit code 2 with one
`keras-ils: error:` line (`keras-ils run`), and the words its message must
hold (plain substrings: the argument as the user wrote it, the value, the
fix). Every row then checks that

- no file or folder under `user/` changed (names, bytes, modification times);
- nothing else was written (the output folder `out/` was not made);
- no training began (the engine, the KerasTuner path and `Model.fit` fail the
  row if called), unless the row says `trains=True`.

To add a row, append a `Case` to `COMPARE` or `COMMAND`: its `args` builds
the call from the `Folder` (paths of the user's files, `out`), so rows can
name files, arrays and datasets alike; an `output_dir` (`--output-dir`)
there replaces `out`. A row that must succeed says `error=None` (its words
are then looked for in the printed table and messages); a row that may write
says `writes=True`: every file of the user's must then still be there,
unchanged, and new files are allowed. Rows that train are slow: wrap them in
`pytest.param(case, marks=pytest.mark.slow)`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_ils
import keras_ils_cli as cli
from keras_ils.comparison.engine import students
from keras_ils.comparison.main_job import engine_path, keras_path

N = 120  # 40 examples of each of 3 classes: every split has 5 or more of every class
_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(N, 4)) + (np.arange(N) % 3)[:, None]
Y = np.arange(N) % 3


@dataclasses.dataclass(frozen=True)
class Folder:
    """Where a row runs: `user` (the user's files, snapshotted before and after) and `out` (the output folder)."""

    root: str
    user: str
    out: str

    def __getattr__(self, name):  # `folder.data_csv` is user/data.csv, `folder.x_npz` user/x.npz
        if name.startswith("_"):
            raise AttributeError(name)
        stem, _, extension = name.rpartition("_")
        return os.path.join(self.__dict__["user"], f"{stem}.{extension}")


@dataclasses.dataclass(frozen=True)
class Case:
    """One row: `args(folder)` gives `compare`'s keywords or the command's argv (`output_dir`, `--output-dir`:
    `folder.out` unless given); `error` the exception `compare` must raise (the command: exit code 2), `None` for
    success; `words` what its message must contain; `trains` allows training; `writes` allows new files."""

    id: str
    args: Callable
    error: type | None = ValueError
    words: tuple = ()
    trains: bool = False
    writes: bool = False


def _user_files(user: str) -> None:
    """The user's folder: good and broken data, a folder named like a data file, and files of theirs."""
    os.makedirs(os.path.join(user, "x.npz"))
    os.makedirs(os.path.join(user, "tables.csv"))
    with open(os.path.join(user, "notes.txt"), "w") as file:
        file.write("my notes\n")
    lines = [
        "a,b,label",
        *(f"{a:.3f},{b:.3f},{'yes' if y else 'no'}" for (a, b), y in zip(X[:, :2], Y % 2, strict=True)),
    ]
    with open(os.path.join(user, "data.csv"), "w") as file:
        file.write("\n".join(lines) + "\n")
    lines[4] = "3.1O," + lines[4].split(",", 1)[1]  # a typo: the letter O for a zero, on line 5 of the file
    with open(os.path.join(user, "typo.csv"), "w") as file:
        file.write("\n".join(lines) + "\n")
    np.savez(os.path.join(user, "data.npz"), x_train=X, y_train=Y, x_test=X[:9], y_test=Y[:9])
    os.makedirs(os.path.join(user, "mine", "seedlings"))  # a folder of the user's named like results (issue 36)
    for name in ("model_final.keras", "seed_data.csv", "seedlings/a.txt"):
        with open(os.path.join(user, "mine", name), "w") as file:
            file.write(f"the user's {name}\n")
    images = X.reshape(N, 1, 2, 2, 1).repeat(2, axis=1)  # [n, 2, 2, 2, 1]: 5-D
    np.savez(os.path.join(user, "video.npz"), x_train=images, y_train=Y, x_test=images[:9], y_test=Y[:9])


def _snapshot(folder: str) -> dict:
    found = {}
    for directory, names, files in os.walk(folder):
        for name in names + files:
            path = os.path.join(directory, name)
            stat = os.stat(path)
            content = _FOLDER if os.path.isdir(path) else hashlib.sha256(open(path, "rb").read()).hexdigest()
            found[os.path.relpath(path, folder)] = (stat.st_mtime_ns, content)
    return found


_FOLDER = "a folder"


def _arrays(**changes):
    return lambda folder: {"x": X, "y": Y, **changes}


def _dataset(transform, **changes):
    return lambda folder: {"x": transform(tf.data.Dataset.from_tensor_slices((X, Y))), **changes}


def _frame_with_a_typo(folder):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"a": X[:, 0].round(3).astype(object), "b": X[:, 1], "label": Y})
    frame.loc[3, "a"] = "3.1O"
    return {"x": frame, "target": "label"}


def _same_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    return lambda num_classes: model


def _shared_layer():
    layer = keras.layers.Dense(3)
    return lambda num_classes: keras.Sequential([keras.Input((4,)), layer])


COMPARE = [
    # endless or unreadable data
    Case("repeated dataset", _dataset(lambda d: d.repeat()), words=("`x`", "infinite", "x.take(n)", "steps=n")),
    Case(
        "dataset of unknown length",
        _dataset(lambda d: d.filter(lambda x, y: True).batch(8)),
        words=("`x`", "cardinality is unknown", "steps=n", "assert_cardinality(n)"),
    ),
    Case("steps of 0", _dataset(lambda d: d.repeat(), steps=0), words=("`steps`", ">= 1", "steps=0")),
    Case("steps with arrays", _arrays(steps=3), words=("`steps`", "tf.data.Dataset", "ndarray")),
    Case("dataset of single values", lambda f: {"x": tf.data.Dataset.range(5)}, words=("`x`", "(features, label)")),
    Case(
        "dataset of ragged examples",
        lambda f: {
            "x": tf.data.Dataset.from_generator(
                lambda: ((np.ones(1 + i % 2), i % 3) for i in range(N)),
                output_signature=(tf.TensorSpec([None], "float64"), tf.TensorSpec([], "int64")),
            ),
            "steps": N,
        },
        words=("`x`", "not of one shape"),
    ),
    # silent-wrong data
    Case(
        "csv number column with a typo",
        lambda f: {"x": f.typo_csv, "target": "label"},
        words=("column 'a'", "119 of its 120 cells", "'3.1O' (line 5)", "categorical=['a']"),
    ),
    Case("dataframe number column with a typo", _frame_with_a_typo, words=("column 'a'", "'3.1O' (row 3)")),
    Case(
        "categorical names no column",
        lambda f: {"x": f.data_csv, "target": "label", "categorical": ["c"]},
        words=("`categorical`", "'a', 'b'", "categorical=['c']"),
    ),
    Case(
        "categorical names the target",
        lambda f: {"x": f.data_csv, "target": "label", "categorical": "label"},
        words=("`categorical`", "target 'label'"),
    ),
    Case("categorical with arrays", _arrays(categorical=["a"]), words=("`categorical`", "table")),
    Case("NaN in x", lambda f: {"x": np.where(np.eye(N, 4) > 0, np.nan, X), "y": Y}, words=("`x`", "4 NaN")),
    Case(
        "build_model returns the same model",
        _arrays(build_model=_same_model()),
        words=("`build_model`", "new model on every call", "the same model object"),
    ),
    Case(
        "build_model shares weights",
        _arrays(build_model=_shared_layer()),
        words=("`build_model`", "shares trainable weights"),
    ),
    # unclear refusals, now naming the argument as written
    Case(
        "validation_split of 1.5", _arrays(validation_split=1.5), words=("`validation_split`", "validation_split=1.5")
    ),
    Case("test_split of 0", _arrays(test_split=0), words=("`test_split`", "(0, 1)", "test_split=0")),
    Case("one unknown method", _arrays(methods="lsx"), words=("`methods`", "Received: methods='lsx'")),
    Case("one unknown calibrator", _arrays(calibrators="platt"), words=("`calibrators`", "calibrators='platt'")),
    Case("10**12 seeds", _arrays(seeds=10**12), words=("`seeds`", "[1, 10000]", "seeds=1000000000000")),
    Case("seeds past 2**63", _arrays(seed=2**63 - 1, seeds=2), words=("`seed` and `seeds`", "overflows [0, 2**63)")),
    Case(
        "5-D x",
        lambda f: {"x": X.reshape(N, 1, 2, 2, 1).repeat(2, axis=1), "y": Y},
        words=("`x`", "vectors [n, features] or images", "`build_model`", "(2, 2, 2, 1)"),
    ),
    Case(
        "build_model is a model",
        _arrays(build_model=keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])),
        error=TypeError,
        words=("`build_model`", "function", "not a model", "clone_model"),
    ),
    Case("a folder named .npz", lambda f: {"x": f.x_npz}, words=("x.npz is a directory, not a .npz file",)),
    Case(
        "a folder named .csv",
        lambda f: {"x": f.tables_csv, "target": "label"},
        words=("tables.csv is a directory, not a .csv file",),
    ),
    Case("no such .npz", lambda f: {"x": f.missing_npz}, words=("No such .npz file",)),
    Case(
        "output_dir holding a file named like a result",
        lambda f: {"x": X, "y": Y, "output_dir": os.path.join(f.user, "mine")},
        words=("`output_dir`", "holds model_final.keras, which keras_ils did not write", "nothing was written"),
    ),
    pytest.param(
        Case(
            "output_dir '.': the results beside the user's files",
            lambda f: {"x": f.data_csv, "target": "label", "output_dir": "."},
            error=None,
            words=("LS + TempS",),
            trains=True,
            writes=True,
        ),
        marks=pytest.mark.slow,
    ),
]

COMMAND = [
    Case(
        "csv number column with a typo",
        lambda f: ["--dataset", f.typo_csv, "--target", "label"],
        words=("column 'a'", "'3.1O' (line 5)", "--categorical 'a'"),
    ),
    pytest.param(  # a whole run, which trains: the declared column is read, the typo's file left untouched
        Case(
            "the typo's column declared a category",
            lambda f: [
                "--dataset",
                f.typo_csv,
                "--target",
                "label",
                "--categorical",
                "a",
                "--no-tune",
                "--methods",
                "ls",
            ],
            error=None,
            words=("LS + TempS", "Results written to"),
            trains=True,
            writes=True,
        ),
        marks=pytest.mark.slow,
    ),
    Case(
        "--categorical names no column",
        lambda f: ["--dataset", f.data_csv, "--target", "label", "--categorical", "c"],
        words=("`categorical` (on the command line: --categorical)", "categorical=('c',)"),
    ),
    Case(
        "--categorical with a .npz",
        lambda f: ["--dataset", f.data_npz, "--categorical", "a"],
        words=("`categorical` applies to .csv tables only",),
    ),
    Case(
        "--seed past 2**63",
        lambda f: ["--dataset", f.data_npz, "--seed", str(2**63 - 1), "--seeds", "2"],
        words=("`--seed` and `--seeds`", "--seed + --seeds - 1 = 9223372036854775808", "overflows [0, 2**63)"),
    ),
    Case("--seeds 10**12", lambda f: ["--dataset", f.data_npz, "--seeds", str(10**12)], words=("`--seeds`", "10000")),
    Case("a folder named .npz", lambda f: ["--dataset", f.x_npz], words=("x.npz is a directory, not a .npz file",)),
    Case("5-D .npz", lambda f: ["--dataset", f.video_npz], words=("`--dataset`", "vectors", "(2, 2, 2, 1)")),
    Case(
        "5-D .npz and the MLP named",
        lambda f: ["--dataset", f.video_npz, "--model", "mlp"],
        words=("`--model`", "'mlp' cannot take", "outputs shape (None, 2, 2, 2, 3), not [n, 3]"),
    ),
    Case(
        "--validation-fraction 1.5",
        lambda f: ["--dataset", f.data_npz, "--validation-fraction", "1.5"],
        words=("`--validation-fraction`", "--validation-fraction=1.5"),
    ),
    Case(
        "--output-dir holding a file named like a result",
        lambda f: ["--dataset", f.data_npz, "--output-dir", os.path.join(f.user, "mine")],
        words=("`--output-dir`", "holds model_final.keras, which keras_ils did not write"),
    ),
    pytest.param(
        Case(
            "--output-dir: the input data in the output folder",
            lambda f: [
                "--dataset",
                f.data_csv,
                "--target",
                "label",
                "--no-tune",
                "--methods",
                "ls",
                "--output-dir",
                f.user,
            ],
            error=None,
            words=("LS + TempS", "Results written to"),
            trains=True,
            writes=True,
        ),
        marks=pytest.mark.slow,
    ),
]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A row's folder (the working directory too), the user's files in it, and training made to fail the row."""
    found = Folder(str(tmp_path), str(tmp_path / "user"), str(tmp_path / "out"))
    _user_files(found.user)
    monkeypatch.chdir(tmp_path)
    return found


@pytest.fixture
def no_training(monkeypatch):
    def trained(*args, **kwargs):
        pytest.fail("training began before the input was refused")

    for owner, name in ((engine_path, "run_engine"), (keras_path, "run_keras"), (keras.Model, "fit")):
        monkeypatch.setattr(owner, name, trained)
    monkeypatch.setattr(students, "search_students", trained)


def _checked_row(case, folder, request, run) -> str:
    """Runs the row (`run()` returns its message), then checks the user's files and that nothing was written."""
    if not case.trains:
        request.getfixturevalue("no_training")
    before = _snapshot(folder.user)
    message = run()
    for word in case.words:
        assert word in message, f"{word!r} not in the message: {message}"
    after = _snapshot(folder.user)
    if not case.writes:
        assert after == before, "a file of the user's changed"
        assert sorted(os.listdir(folder.root)) == ["user"], "something was written beside the user's folder"
        return message
    for path, (modified, content) in before.items():  # a folder's own time changes when files are added to it
        assert path in after, f"the user's {path} is gone"
        assert content == after[path][1] and (modified == after[path][0] or content == _FOLDER), f"{path} changed"
    return message


@pytest.mark.parametrize("case", COMPARE, ids=lambda case: case.id)
def test_compare(case, folder, request):
    def run():
        arguments = {"methods": ["ls"], "tune": False, "epochs": 1, "log": None, "output_dir": folder.out}
        arguments.update(case.args(folder))
        if case.error is None:
            return str(keras_ils.compare(**arguments))
        with pytest.raises(case.error) as raised:
            keras_ils.compare(**arguments)
        return str(raised.value)

    _checked_row(case, folder, request, run)


@pytest.mark.parametrize("case", COMMAND, ids=lambda case: case.id)
def test_command(case, folder, request, capsys):
    def run():
        argv = ["run", "--epochs", "1", *case.args(folder)]
        argv += [] if "--output-dir" in argv else ["--output-dir", folder.out]
        code, printed = cli.main(argv), capsys.readouterr()
        if case.error is None:
            assert code == 0, printed.err
            return printed.out + printed.err
        errors = [line for line in printed.err.splitlines() if line.startswith("keras-ils: error: ")]
        assert code == 2 and len(errors) == 1, printed.err
        return errors[0]

    _checked_row(case, folder, request, run)
