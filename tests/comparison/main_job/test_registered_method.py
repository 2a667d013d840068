"""A method registered from outside (a loss plus one hyperparameter with a 2-value grid) runs everywhere, unedited.

The throwaway method is Keras' focal loss (`keras.losses.categorical_focal_crossentropy`) on sparse labels,
its `gamma` searched over {1, 2}. Registering it is the only change: `keras-ils methods` lists it, `keras-ils
run --methods` trains and searches it, and `keras_ils.tuning.ILSHyperModel` searches its `gamma`.
"""

import json
import os

import keras
import numpy as np
import pytest
from keras import ops

import keras_ils_cli as cli
from keras_ils import methods, tuning
from keras_ils.comparison.data import datasets

GAMMAS = (1.0, 2.0)


@keras.saving.register_keras_serializable(package="keras_ils_tests")
class SparseFocal(keras.losses.Loss):
    """Keras' categorical focal cross-entropy on integer labels (the pipeline feeds sparse labels)."""

    def __init__(self, num_classes, gamma, name="sparse_focal", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes, self.gamma = num_classes, gamma

    def call(self, y_true, y_pred):
        one_hot = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), self.num_classes)
        return keras.losses.categorical_focal_crossentropy(one_hot, y_pred, gamma=self.gamma, from_logits=True)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "gamma": self.gamma}


@pytest.fixture
def throwaway():
    method = methods.register(
        methods.Method(
            id="throwaway",
            name="Focal",
            make_loss=lambda num_classes, gamma: SparseFocal(num_classes, gamma),
            hyperparameters=("gamma",),
            grids={"paper": {"gamma": GAMMAS}, "synthetic": {"gamma": GAMMAS}},
        )
    )
    try:
        yield method
    finally:
        methods.unregister("throwaway")


def _numpy_focal(labels, logits, gamma, alpha=0.25):
    """Lin et al.'s focal loss, as Keras' `categorical_focal_crossentropy` weights it (alpha on every class)."""
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    p_t = p[np.arange(len(labels)), labels]
    return -alpha * (1 - p_t) ** gamma * np.log(p_t)


def _numpy_nll(logits, labels):
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    return float(-(z - np.log(np.exp(z).sum(axis=1, keepdims=True)))[np.arange(len(labels)), labels].mean())


def test_run_searches_and_reports_it_and_the_methods_command_lists_it(throwaway, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "--methods", "throwaway,throwaway", "--epochs", "2", "--search", "full"]
    assert cli.main([*argv, "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [row["model"] for row in results["rows"]] == ["No LS", "No LS + TempS", "Focal", "Focal + TempS"]
    focal = results["rows"][2]
    # the whole grid searched (--search full: one KerasTuner trial per gamma), the best trial's gamma reported
    trials = [
        json.loads((out / "search" / "throwaway" / name / "trial.json").read_text())
        for name in sorted(os.listdir(out / "search" / "throwaway"))
        if name.startswith("trial_")
    ]
    assert sorted(t["hyperparameters"]["values"]["gamma"] for t in trials) == list(GAMMAS)
    best = min(trials, key=lambda t: t["score"])
    assert focal["hyperparameters"] == {"gamma": best["hyperparameters"]["values"]["gamma"]}
    assert focal["trials"] == 2 and focal["candidates"] == 2 and focal["search_val_nll"] == pytest.approx(best["score"])
    # its saved model gives its row's test NLL, computed here
    test_x, test_y = datasets.load("synthetic").test.batch(1 << 20).get_single_element()
    logits = keras.saving.load_model(out / "model_focal.keras").predict(test_x, verbose=0)
    assert _numpy_nll(logits, test_y.numpy()) == pytest.approx(focal["all"]["nll"], rel=1e-4)
    assert "Focal + TempS" in capsys.readouterr().out
    assert cli.main(["methods"]) == 0
    listed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["throwaway", "Focal", "gamma", "no", "model.fit"] in listed


def test_run_without_tuning_takes_the_first_value_of_its_grid(throwaway):
    from keras_ils.comparison.main_job.budget import fixed_space
    from keras_ils.comparison.main_job.config import RunConfig
    from keras_ils.comparison.main_job.fitting import Setup

    setup = Setup.make(datasets.load("synthetic"), RunConfig(methods=("throwaway", "ls"), tune=False))
    assert setup.fixed == {"epsilon": 0.05, "p1": 0.8, "p2": 2.0, "temperature": 1.0, "gamma": GAMMAS[0]}
    assert fixed_space("throwaway", setup.config.search_space, setup.fixed) == {"gamma": (GAMMAS[0],)}  # one fit


def test_the_keras_tuner_hypermodel_searches_its_hyperparameter(throwaway, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 2)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0.5)

    def build_model(hp):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(8, "relu"), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.Adam(1e-2))
        return model

    hypermodel = tuning.ILSHyperModel(build_model, num_classes=3, method="throwaway", seed=0)
    assert hypermodel.space == {"gamma": GAMMAS}
    tuner = tuning.tuner_for("grid", hypermodel, directory=str(tmp_path), project_name="focal")
    tuner.search(x, y, validation_data=(x, y), epochs=2, batch_size=16, verbose=0)
    trials = list(tuner.oracle.trials.values())
    assert sorted(t.hyperparameters.get("gamma") for t in trials) == list(GAMMAS)
    # each trial's model was compiled with the focal loss of its own gamma
    for trial in trials:
        model = hypermodel.build(trial.hyperparameters)
        logits = np.asarray(model.predict(x, verbose=0))
        expected = _numpy_focal(y, logits, trial.hyperparameters.get("gamma")).mean()
        assert float(model.loss(y, logits)) == pytest.approx(expected, rel=1e-5)
    best = tuner.oracle.get_best_trials(1)[0]
    assert best.score == min(t.score for t in trials)


def test_tune_takes_it_and_unknown_ids_are_usage_errors(throwaway, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tune", "--methods", "throwaway,nope"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "usage: keras-ils tune" in err
    assert (
        "expected a comma-separated subset of ls,ils1,ils2,ils,focal,mbls,mmce,mdca,ols,throwaway; got 'throwaway,nope'"
    ) in err
