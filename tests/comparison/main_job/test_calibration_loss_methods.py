"""The calibration losses as comparison methods of the main job: Focal, FLSD-53, MbLS, MMCE, MDCA and OLS by the
vectorised engine on vector data; OLS by `model.fit` with its soft-label callback on the keras path."""

import json

import numpy as np
import pytest

import keras_ils_cli as cli
from keras_ils.comparison.data import datasets
from keras_ils.comparison.main_job import keras_path
from keras_ils.comparison.main_job.config import RunConfig
from keras_ils.comparison.main_job.fitting import Setup
from keras_ils.comparison.main_job.progress import Progress
from keras_ils.comparison.main_job.report import Report
from keras_ils.teacher import TeacherLogits

NEW = ("focal", "flsd53", "mbls", "mmce", "mdca", "ols")
# what each row reports (the authors' grids, typed in from the issue) and its candidates
REPORTED = {
    "Focal": ({"gamma": (1.0, 2.0, 3.0)}, 3),
    "FLSD-53": ({}, 1),
    "MbLS": ({"alpha": (0.1,), "margin": (2.0, 4.0, 6.0, 8.0, 10.0)}, 5),
    "MMCE": ({"weight": (1.0, 2.0, 4.0, 8.0)}, 4),
    "MDCA": ({"beta": (1.0, 5.0, 10.0, 15.0, 20.0)}, 5),
    "OLS": ({"alpha": (0.25, 0.5, 0.75)}, 3),
}


def _students(tmp_path, config) -> keras_path.Students:
    """What `run`'s `model.fit` students share, on the synthetic task, with an all-zero teacher."""
    splits = datasets.load_synthetic(seed=0, n_test=10)
    setup = Setup.make(splits, config)
    labels = np.concatenate([y.numpy() for _, y in splits.train.batch(1000)])
    teacher = TeacherLogits(np.zeros((len(labels), 3), np.float32), labels.astype(np.int64), None)
    spec = keras_path.SearchSpec(setup, keras_path.ALGORITHMS[config.search], None, str(tmp_path / "search"))
    return keras_path.Students(setup, Report(splits, str(tmp_path), Progress(1, verbose=1)), teacher, spec, False)


def test_ols_through_the_keras_path_gets_its_callback_and_learns_its_soft_labels(tmp_path):
    """A single-fit OLS student of `run` (as `--no-tune` trains it): its soft labels leave the uniform start."""
    students = _students(tmp_path, RunConfig("mlp", str(tmp_path / "out"), methods=("ols",), tune=False, epochs=3))
    setup = students.setup
    student, used, found = keras_path.train_student(students, "ols", dict(setup.fixed))
    assert used == {"alpha": 0.25} and found == {}  # the grid's first value, one fit
    soft_labels = student.loss.soft_labels.numpy()
    np.testing.assert_allclose(soft_labels.sum(axis=1), 1.0, rtol=1e-5)
    assert np.abs(soft_labels - 1 / 3).max() > 0.02 and np.all(soft_labels.argmax(axis=1) == np.arange(3))


def test_a_budgeted_search_of_a_small_grid_is_the_full_grid(tmp_path, monkeypatch):
    """KerasTuner's Hyperband stops once its first round has drawn the 3 values of OLS's grid, each trained 3 of 500
    epochs; `run --search budget` searches such a grid whole (3 x 500 epochs, fewer than Hyperband's plan)."""
    searched, logged = [], []
    monkeypatch.setattr(keras_path, "search", lambda spec, method, *args: searched.append(spec.algorithm) or 1 / 0)
    students = _students(tmp_path, RunConfig("mlp", str(tmp_path / "out"), methods=("ols", "ils"), log=logged.append))
    setup = students.setup
    assert setup.config.search == "budget" and setup.config.recipe.epochs == 500
    for method in ("ols", "ils"):
        with pytest.raises(ZeroDivisionError):  # stopped once the search is made
            keras_path.train_student(students, method, dict(setup.fixed))
    assert searched == ["grid", "hyperband"]  # ILS's 120 candidates x 500 epochs exceed Hyperband's plan
    assert logged[0] == "OLS: the full grid, 3 models of up to 500 epochs (at most 1500 epochs)"


@pytest.fixture
def vector_npz(tmp_path):
    """Four features, three classes, 240 training and 90 test examples (Gaussian blobs)."""
    rng = np.random.default_rng(0)
    means = 1.5 * rng.normal(size=(3, 4))

    def draw(count):
        y = rng.integers(0, 3, count)
        return (means[y] + rng.normal(size=(count, 4))).astype(np.float32), y.astype(np.int64)

    (x_train, y_train), (x_test, y_test) = draw(240), draw(90)
    path = tmp_path / "blobs.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


@pytest.mark.slow
def test_run_trains_and_reports_the_calibration_losses_on_vector_data(vector_npz, tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--dataset", str(vector_npz), "--methods", ",".join(NEW), "--epochs", "3"]
    assert cli.main([*argv, "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    rows = {row["model"]: row for row in results["rows"]}
    names = ["No LS"] + list(REPORTED)
    assert set(rows) == {name + suffix for name in names for suffix in ("", " + TempS")}
    # the engine trained the teacher and every candidate of the six methods
    assert results["engine"] == "vectorised" and results["models_trained"] == 1 + 3 + 1 + 5 + 4 + 5 + 3
    for name, (grid, candidates) in REPORTED.items():
        for row in (rows[name], rows[name + " + TempS"]):
            assert set(row["hyperparameters"]) == set(grid), name
            assert all(row["hyperparameters"][key] in values for key, values in grid.items()), name
            assert row["candidates"] == candidates or (candidates == 1 and "candidates" not in row), name
