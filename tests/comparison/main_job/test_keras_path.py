"""`keras_path.train_student`: which methods are searched over what, and what a single-fit student is given.

The searches and fits themselves are replaced by recorders here (they are run for real by the command's tests):
this checks the bookkeeping between them, cheaply.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from keras_ils import methods, tuning
from keras_ils.comparison.data import datasets
from keras_ils.comparison.main_job import keras_path
from keras_ils.comparison.main_job.config import RunConfig
from keras_ils.comparison.main_job.fitting import Setup
from keras_ils.comparison.main_job.progress import Progress
from keras_ils.comparison.main_job.report import Report
from keras_ils.teacher import TeacherLogits


class _FinishedSearch:
    """What `train_student` reads of a finished KerasTuner search: its best trial took each value's last choice."""

    def __init__(self, space):
        values = {name: choices[-1] for name, choices in space.items()}
        trial = SimpleNamespace(hyperparameters=SimpleNamespace(get=values.get), score=0.5)
        self.oracle = SimpleNamespace(get_best_trials=lambda count: [trial], trials={"a": trial, "b": trial})
        self.hypermodel = SimpleNamespace(space=space)


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    searched, fitted = [], []

    def search(spec, method, space, train_set, callbacks=(), borrowed=None):
        searched.append((method, space, borrowed))
        return _FinishedSearch(space)

    def single_fit(students, method, loss, train_set, used, callbacks):
        fitted.append((method, used, type(loss).__name__))
        return f"student {method}"

    monkeypatch.setattr(keras_path, "search", search)
    monkeypatch.setattr(keras_path, "_single_fit", single_fit)
    monkeypatch.setattr(tuning, "best_student", lambda tuner: "best student")
    splits = datasets.load("synthetic")
    config = RunConfig("mlp", str(tmp_path / "out"), methods=("ls", "ils2", "cls"), hyperparameters={"temperature": 2})
    setup = Setup.make(splits, config)
    labels = np.concatenate([y.numpy() for _, y in splits.train.batch(1000)])
    teacher = TeacherLogits(np.zeros((len(labels), 3), np.float32), labels.astype(np.int64), None)
    spec = keras_path.SearchSpec(setup, "grid", None, str(tmp_path / "search"))
    report = Report(splits, str(tmp_path), Progress(20, verbose=1))
    return keras_path.Students(setup, report, teacher, spec, keep=True), searched, fitted


def test_a_lenders_choice_reaches_its_borrowers_and_never_narrows_a_search(recorded):
    students, searched, fitted = recorded
    chosen = dict(students.setup.fixed)
    for method in keras_path.search_order(("ils2", "cls")):  # LS first: cLS takes its epsilon
        _, used, found = keras_path.train_student(students, method, chosen)
        for name in keras_path.lent_by(method):
            chosen.setdefault(name, used[name])
    epsilons = methods.get("ls").grid("synthetic")["epsilon"]
    assert [m for m, _, _ in searched] == ["ls", "ils2"]
    assert searched[0][1] == {"epsilon": epsilons} and chosen["epsilon"] == epsilons[-1]
    # ILS2 searches every epsilon (LS's choice is lent to borrowers only), its temperature fixed by the run
    assert searched[1][1] == {"epsilon": epsilons, "temperature": (2,)} and searched[1][2] == {}
    assert fitted == [("cls", {"epsilon": epsilons[-1]}, "ILSLoss")]
    assert found == {}  # a single fit has no search facts
