import os

import keras
import keras_tuner
import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

from keras_ils import ILSLoss, TemperatureScaling, compute_teacher_logits, tuning
from keras_ils import metrics as ils_metrics
from keras_ils.comparison import networks
from keras_ils.comparison.data import datasets
from keras_ils.comparison.engine import training
from keras_ils.data import with_teacher_targets


def _build_model(hp=None, outputs=3, compiled=True, metrics=None):
    model = networks.mlp(outputs, (2,), hidden_layers=2, units=16)
    if compiled:
        model.compile(optimizer=keras.optimizers.Adam(1e-2), metrics=metrics)
    return model


def _arrays(dataset):
    x, y = zip(*dataset.as_numpy_iterator(), strict=True)
    return np.stack(x), np.array(y)


@pytest.fixture(scope="module")
def synthetic():
    """Training data with a cached teacher's targets (and a counter of the teacher's forward examples)."""
    splits = datasets.load_synthetic(seed=0, n_test=10)

    class Counter(keras.layers.Layer):
        def build(self, input_shape):
            self.examples = self.add_weight(shape=(), initializer="zeros", trainable=False, name="examples")

        def call(self, x):
            self.examples.assign_add(keras.ops.cast(keras.ops.shape(x)[0], "float32"))
            return x

    keras.utils.set_random_seed(1)
    counter = Counter()
    teacher = keras.Sequential(
        [keras.Input((2,)), counter, keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]
    )
    teacher_logits = compute_teacher_logits(teacher, splits.train)
    train = training.training_pipeline(with_teacher_targets(splits.train, teacher_logits), networks.Recipe(), seed=0)
    return splits, train, training.evaluation_pipeline(splits.validation), counter


class TestSearchSpace:
    def test_named_grids_are_the_papers(self):
        assert tuning.make_search_space("ls") == {"epsilon": (0.01, 0.05, 0.1, 0.15, 0.2)}
        assert tuning.make_search_space("ils") == {
            "p1": (0.975, 0.95, 0.925, 0.9, 0.85),
            "p2": (0.75, 1.0, 1.25, 1.5, 2.0),
            "temperature": (1.0, 2.0, 4.0, 8.0, 16.0),
        }
        synthetic = tuning.make_search_space("ils2", "synthetic")
        np.testing.assert_allclose(
            synthetic["epsilon"], [0.001, 0.005, 0.01, 0.03, 0.05, 0.07, 0.09, 0.11, 0.13, 0.15, 0.17, 0.19]
        )
        assert synthetic["temperature"] == (1.0, 2.0, 4.0, 6.0)
        assert tuning.make_search_space("ils1", "synthetic") == {
            "p1": (0.75, 0.775, 0.8, 0.825, 0.85),
            "p2": (0.75, 1.0, 1.25, 1.5, 1.75, 2.0),
        }

    def test_objective_is_the_hard_label_validation_nll_minimised(self):
        assert tuning.OBJECTIVE == keras_tuner.Objective("val_nll", direction="min")
        assert tuning.ILSHyperModel(_build_model, 3).objective == tuning.OBJECTIVE

    def test_own_values_and_a_fixed_one(self):
        assert tuning.make_search_space("ils2", {"epsilon": [0.1, 0.2], "temperature": 3}) == {
            "epsilon": (0.1, 0.2),
            "temperature": (3.0,),
        }

    @pytest.mark.parametrize(
        "method, grid, message",
        [
            ("none", "paper", "argument `method`"),
            ("ils", "coarse", "argument `search_space`"),
            ("ls", {"epsilon": []}, "at least one value for `epsilon`"),
            ("ls", {"epsilon": [0.1], "p1": [0.9]}, "exactly the keys"),
            ("ils1", {"p1": [0.9]}, "exactly the keys"),
            ("ils1", {"p1": [0.9, 1.5], "p2": [1]}, "argument `p1`"),
            ("ils1", {"p1": [0.0], "p2": [1]}, "argument `p1`"),
            ("ils1", {"p1": [0.9], "p2": [-1]}, "argument `p2`"),
            ("ils2", {"epsilon": [0.1], "temperature": [0]}, "argument `temperature`"),
            ("ils2", {"epsilon": [1.0], "temperature": [1]}, "argument `epsilon`"),
        ],
    )
    def test_bad_space(self, method, grid, message):
        with pytest.raises(ValueError, match=message):
            tuning.make_search_space(method, grid)


class TestILSHyperModel:
    def test_a_trial_compiles_the_ils_loss_with_its_values_and_keeps_the_users_setup(self):
        hypermodel = tuning.ILSHyperModel(
            lambda hp: _build_model(metrics=["accuracy"]), 3, method="ils", loss_options={"max_epsilon": 0.3}
        )
        hp = keras_tuner.HyperParameters()
        hp.values.update(p1=0.925, p2=1.5, temperature=8.0)
        model = hypermodel.build(hp)
        assert isinstance(model.loss, ILSLoss)
        assert {k: model.loss.get_config()[k] for k in ("method", "p1", "p2", "temperature", "max_epsilon")} == {
            "method": "ils",
            "p1": 0.925,
            "p2": 1.5,
            "temperature": 8.0,
            "max_epsilon": 0.3,
        }
        assert model.optimizer.learning_rate.numpy() == pytest.approx(1e-2)
        model.evaluate(np.zeros((4, 2), "float32"), np.array([0, 1, 2, 0]), verbose=0)
        assert {"accuracy", "nll"} <= set(model.get_metrics_result())

    def test_build_registers_exactly_the_grid(self):
        hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ils2", search_space="synthetic")
        hp = keras_tuner.HyperParameters()
        hypermodel.build(hp)
        assert {p.name: tuple(p.values) for p in hp.space} == tuning.make_search_space("ils2", "synthetic")

    @pytest.mark.parametrize(
        "build_model, kwargs, error, message",
        [
            (lambda hp: _build_model(compiled=False), {}, ValueError, "must return a compiled model"),
            (lambda hp: _build_model(outputs=4), {}, ValueError, "4 outputs; the data has num_classes=3"),
            (lambda hp: "model", {}, TypeError, "must return a keras.Model"),
            (_build_model, {"objective": "val_accuracy"}, ValueError, "argument `objective`"),
        ],
    )
    def test_bad_model_or_objective_fails_when_the_tuner_is_made_before_any_trial(
        self, tmp_path, build_model, kwargs, error, message
    ):
        hypermodel = tuning.ILSHyperModel(build_model, 3, method="ls", **kwargs)
        hypermodel.fit = lambda *a, **k: pytest.fail("a trial started")
        with pytest.raises(error, match=message):
            keras_tuner.GridSearch(hypermodel, objective=hypermodel.objective, directory=str(tmp_path))
        assert not any(name.startswith("trial_") for _, dirs, _ in os.walk(tmp_path) for name in dirs)

    def test_objective_of_a_metric_the_model_logs_is_accepted(self):
        hypermodel = tuning.ILSHyperModel(
            lambda hp: _build_model(metrics=[ils_metrics.ExpectedCalibrationError()]), 3, objective="val_ece"
        )
        hypermodel.build(keras_tuner.HyperParameters())
        assert hypermodel.objective == keras_tuner.Objective("val_ece", "min")

    @pytest.mark.parametrize(
        "kwargs, error, message",
        [
            ({"build_model": None}, TypeError, "`build_model` must be a callable"),
            ({"num_classes": 1}, ValueError, "argument `num_classes`"),
            ({"method": "none"}, ValueError, "argument `method`"),
            ({"search_space": {"epsilon": [0.1, -0.1]}, "method": "ls"}, ValueError, "argument `epsilon`"),
            ({"patience": 0}, ValueError, "argument `patience`"),
            ({"objective": 3}, TypeError, "`objective` must be"),
            ({"loss_options": {"family": "cubic"}}, ValueError, "argument `family`"),
        ],
    )
    def test_bad_arguments(self, kwargs, error, message):
        arguments = {"build_model": _build_model, "num_classes": 3, **kwargs}
        with pytest.raises(error, match=message):
            tuning.ILSHyperModel(**arguments)


class TestSearch:
    @pytest.mark.parametrize(  # ~13 s each on 2 cores: the default run searches the grid, `-m slow` every algorithm
        "algorithm", [a if a == "grid" else pytest.param(a, marks=pytest.mark.slow) for a in tuning.ALGORITHMS]
    )
    def test_every_keras_tuner_algorithm_selects_by_hard_label_validation_nll(self, tmp_path, synthetic, algorithm):
        splits, train, validation, counter = synthetic
        examples_before = float(counter.examples.numpy())
        hypermodel = tuning.ILSHyperModel(
            _build_model, 3, method="ils", search_space={"p1": [0.8, 0.9], "p2": [2.0], "temperature": [1.0, 4.0]}
        )
        tuner = tuning.tuner_for(
            algorithm, hypermodel, directory=str(tmp_path), project_name=algorithm, max_trials=3, max_epochs=4, seed=0
        )
        tuner.search(train, validation_data=validation, epochs=4, verbose=0)
        trials = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
        assert len(trials) >= 2
        # no trial ran the teacher: the cached logits are all they read
        assert float(counter.examples.numpy()) == examples_before == 150
        best = tuner.oracle.get_best_trials(1)[0]
        assert best.score == min(t.score for t in trials)
        # the score is the hard-label cross-entropy of the best epoch's weights, recomputed here in numpy
        x, y = _arrays(splits.validation)
        logits = tuning.best_student(tuner).predict(x, verbose=0)
        nll = -np.mean(log_softmax(logits.astype(np.float64), axis=1)[np.arange(len(y)), y])
        np.testing.assert_allclose(best.score, nll, rtol=1e-4)
        history = best.metrics.get_history("val_nll")
        assert best.score == min(h.value[0] for h in history)

    @pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
    def test_best_student_temperature_scaled_on_request(self, tmp_path, synthetic):
        splits, train, validation, _ = synthetic
        hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ls", search_space={"epsilon": [0.05, 0.15]})
        tuner = tuning.tuner_for("grid", hypermodel, directory=str(tmp_path), project_name="ls")
        tuner.search(train, validation_data=validation, epochs=5, verbose=0)
        x, y = _arrays(splits.validation)
        logits = tuning.best_student(tuner).predict(x, verbose=0).astype(np.float64)
        scaled = tuning.best_student(tuner, calibrate_on=validation)
        assert isinstance(scaled.layers[-1], TemperatureScaling)

        def map_objective(log_temperature):  # the default MAP fit: summed NLL + (log T)^2 / (2 * 0.5^2)
            log_p = log_softmax(logits / np.exp(log_temperature), axis=1)[np.arange(len(y)), y]
            return -np.sum(log_p) + log_temperature**2 / (2 * 0.5**2)

        bounds = (np.log(0.05), np.log(20))
        expected = np.exp(minimize_scalar(map_objective, bounds=bounds, method="bounded", options={"xatol": 1e-10}).x)
        temperature = float(scaled.layers[-1].temperature.numpy())
        np.testing.assert_allclose(temperature, expected, rtol=2e-3)
        np.testing.assert_allclose(scaled.predict(x, verbose=0), logits / temperature, rtol=1e-4, atol=1e-5)

    def test_early_stopping_patience_and_the_users_own_early_stopping(self, synthetic):
        splits, train, validation, _ = synthetic
        hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ls", patience=2)
        hp = keras_tuner.HyperParameters()
        history = hypermodel.fit(hp, hypermodel.build(hp), train, validation_data=validation, epochs=300, verbose=0)
        stopped_after = len(history.history["val_nll"])
        assert stopped_after < 300
        best = int(np.argmin(history.history["val_nll"]))
        assert stopped_after - 1 - best == 2
        own = keras.callbacks.EarlyStopping(monitor="val_nll", patience=1)
        history = hypermodel.fit(
            hp, hypermodel.build(hp), train, validation_data=validation, epochs=300, callbacks=[own], verbose=0
        )
        assert len(history.history["val_nll"]) - 1 - int(np.argmin(history.history["val_nll"])) == 1

    def test_an_ols_trial_gets_the_callback_that_updates_its_soft_labels(self, synthetic):
        """OLS's loss learns its soft labels only through `OnlineLabelSmoothingCallback`; the hypermodel adds it."""
        splits, train, validation, _ = synthetic
        hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ols", search_space={"alpha": [0.5]}, patience=None)
        hp = keras_tuner.HyperParameters()
        model = hypermodel.build(hp)
        np.testing.assert_allclose(model.loss.soft_labels.numpy(), np.full((3, 3), 1 / 3))
        hypermodel.fit(hp, model, train, validation_data=validation, epochs=2, verbose=0)
        soft_labels = model.loss.soft_labels.numpy()
        # each row is the mean prediction on that class's correctly classified examples: its own class first
        np.testing.assert_allclose(soft_labels.sum(axis=1), 1.0, rtol=1e-5)
        assert np.all(np.diag(soft_labels) > 0.35) and np.all(soft_labels.argmax(axis=1) == np.arange(3))  # not 1/3

    def test_a_trial_traces_its_train_step_once_not_per_epoch(self, synthetic):
        splits, train, validation, _ = synthetic  # 150 examples in batches of 32: the last batch is partial
        hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ils", patience=None)
        hp = keras_tuner.HyperParameters()
        model = hypermodel.build(hp)
        traces = []
        train_step = model.train_step
        model.train_step = lambda data: traces.append(1) or train_step(data)
        history = hypermodel.fit(hp, model, train, validation_data=validation, epochs=6, verbose=0)
        assert len(history.history["val_nll"]) == 6 and len(traces) == 1

    def test_tuner_for_bad_arguments(self, tmp_path):
        hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ls")
        with pytest.raises(ValueError, match="argument `algorithm`"):
            tuning.tuner_for("annealing", hypermodel, directory=str(tmp_path), project_name="p")
        with pytest.raises(ValueError, match="argument `max_trials`"):
            tuning.tuner_for("random", hypermodel, directory=str(tmp_path), project_name="p", max_trials=0)


class TestReproducibleTrials:
    @pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
    def test_a_trial_resumed_in_a_new_search_scores_what_it_scores_uninterrupted(self, tmp_path, synthetic):
        """Trial 2 run after a restart (a fresh dataset, as in a new process) equals the uninterrupted run."""
        splits, _, validation, _ = synthetic
        teacher_logits = compute_teacher_logits(_build_model(compiled=False), splits.train)
        make_train = lambda: training.training_pipeline(  # noqa: E731
            with_teacher_targets(splits.train, teacher_logits), networks.Recipe(), seed=0
        )
        space = {"epsilon": [0.05, 0.2]}

        def search(directory, max_trials):
            hypermodel = tuning.ILSHyperModel(_build_model, 3, method="ls", search_space=space, seed=7)
            tuner = tuning.tuner_for("grid", hypermodel, directory=str(directory), project_name="ls",
                                     max_trials=max_trials)  # fmt: skip
            tuner.search(make_train, validation_data=validation, epochs=4, verbose=0)
            return {t.hyperparameters.get("epsilon"): t.score for t in tuner.oracle.trials.values()}

        uninterrupted = search(tmp_path / "a", 2)
        search(tmp_path / "b", 1)
        keras.utils.set_random_seed(12345)  # whatever the process did in between
        resumed = search(tmp_path / "b", 2)
        assert sorted(uninterrupted) == sorted(resumed) == space["epsilon"]
        assert resumed == uninterrupted
