"""Your own network in the main job: `RunConfig(build_model=...)`, checked before training, searched by KerasTuner."""

import csv
import json
import warnings

import keras
import numpy as np
import pytest
from scipy.special import softmax

from keras_ils.calibration import TemperatureFitWarning
from keras_ils.comparison.data.arrays import array_splits
from keras_ils.comparison.data.splits import as_trained
from keras_ils.comparison.main_job import pipeline
from keras_ils.comparison.main_job.config import CUSTOM_RECIPE, RunConfig
from keras_ils.comparison.main_job.conformal_split import calibration_split


@pytest.fixture(scope="module")
def splits():
    rng = np.random.default_rng(0)
    y = np.arange(150) % 3
    x = rng.normal(size=(150, 4)) + 1.5 * np.eye(3, 4)[y]
    return array_splits(x, y, test_fraction=0.2, validation_fraction=0.25, seed=0, name="blobs")


def tiny_net(num_classes):
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu", name="mine"), keras.layers.Dense(num_classes)]
    )


@pytest.mark.parametrize(
    "tune",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # slow: a KerasTuner search (about 20 s idle)
)
def test_the_users_network_is_trained_searched_and_saved(splits, tmp_path, tune):
    config = RunConfig(
        build_model=tiny_net,
        output_dir=str(tmp_path / "out"),
        methods=("ls",),
        tune=tune,
        search="full",
        search_space={"epsilon": (0.05, 0.1)},
        epochs=2,
        conformal=0.2,
        log=lambda line: None,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TemperatureFitWarning)  # 30 validation examples: the small-set warning
        results = pipeline.run(splits, config)
    assert results["model"] == "tiny_net" and results.get("engine") != "vectorised"
    assert results["validation_examples"] == results["calibration_examples"] == 15  # T* saw the other half
    assert results["recipe"]["learning_rate"] == CUSTOM_RECIPE.learning_rate and results["recipe"]["epochs"] == 2
    rows = {row["model"]: row for row in results["rows"]}
    assert list(rows) == ["No LS", "No LS + TempS", "LS", "LS + TempS"]
    assert rows["LS"]["hyperparameters"]["epsilon"] in (0.05, 0.1)
    saved = keras.saving.load_model(tmp_path / "out" / "model_ls.keras")
    assert "mine" in [layer.name for layer in saved.layers[-1].layers]  # the user's layers, behind the preprocessing
    stored = json.loads((tmp_path / "out" / "results.json").read_text())
    assert stored["rows"][2]["all"]["nll"] == pytest.approx(rows["LS"]["all"]["nll"])
    _check_lac_sets(splits, as_trained(saved), rows["LS"]["conformal"], tmp_path / "out", alpha=0.2)
    with open(tmp_path / "out" / "results.csv") as file:
        table = list(csv.DictReader(file))
    assert float(table[2]["lac_mean_set_size"]) == pytest.approx(rows["LS"]["conformal"]["lac"]["mean_set_size"])


def _arrays(dataset):
    x, y = zip(*dataset.as_numpy_iterator(), strict=True)
    return np.stack(x), np.array(y)


def _check_lac_sets(splits, model, found, directory, alpha):
    """LAC written out: the ceil((n + 1)(1 - alpha))-th smallest score 1 - p_y of the calibration examples, half of
    the validation split held out from every fit, is the threshold."""
    carved = calibration_split(splits, alpha, seed=0)
    (x_val, y_val), (x_test, y_test) = _arrays(carved.calibration), _arrays(splits.test)
    (x_kept, _), (x_all, _) = _arrays(carved.validation), _arrays(splits.validation)
    assert len(x_kept) + len(x_val) == len(x_all) and len(y_val) == 15  # disjoint halves of the 30
    assert not (x_kept[:, None, :] == x_val[None, :, :]).all(-1).any()
    p_val, p_test = (softmax(model.predict(x, verbose=0), axis=1) for x in (x_val, x_test))
    scores = np.sort(1.0 - p_val[np.arange(len(y_val)), y_val])
    threshold = scores[int(np.ceil((len(scores) + 1) * (1 - alpha))) - 1]
    sets = (1.0 - p_test) <= threshold + 1e-6
    assert found["alpha"] == alpha
    assert found["lac"]["coverage"] == pytest.approx(sets[np.arange(len(y_test)), y_test].mean())
    assert found["lac"]["mean_set_size"] == pytest.approx(sets.sum(axis=1).mean())
    assert 0 < found["aps"]["mean_set_size"] <= splits.num_classes
    with np.load(directory / "test_set_sizes.npz") as sizes:
        np.testing.assert_array_equal(sizes["lac:LS"], sets.sum(axis=1))


@pytest.mark.parametrize(
    "build_model, error, match",
    [
        (lambda k: keras.Sequential([keras.Input((4,)), keras.layers.Dense(k, activation="softmax")]), ValueError,
         "ends in a softmax"),
        (lambda k: keras.Sequential([keras.Input((5,)), keras.layers.Dense(k)]), ValueError,
         r"cannot take blobs's examples, shaped \(4,\)"),
        (lambda k: keras.Sequential([keras.Input((4,)), keras.layers.Dense(k + 1)]), ValueError,
         r"must output \[n, 3\] logits for 3 classes"),
        (lambda k: "a model", TypeError, "must return a keras.Model"),
    ],
)  # fmt: skip
def test_a_network_the_job_cannot_train_is_refused_before_training(splits, tmp_path, build_model, error, match):
    config = RunConfig(build_model=build_model, output_dir=str(tmp_path / "out"), methods=("ls",), tune=False)
    with pytest.raises(error, match=match):
        pipeline.run(splits, config)
    assert not (tmp_path / "out").exists()


def test_build_model_must_be_callable():
    with pytest.raises(TypeError, match="Argument `build_model` must be a function"):
        RunConfig(build_model="resnet20")
