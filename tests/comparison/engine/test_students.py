import keras
import numpy as np
import pytest
import scipy.optimize
import scipy.stats
import tensorflow as tf

from keras_ils import baselines
from keras_ils.comparison import networks
from keras_ils.comparison.data import synthetic
from keras_ils.comparison.engine import students, vectorised
from keras_ils.distillation import DistillationCrossEntropy
from keras_ils.losses import ILSLoss
from keras_ils.metrics import NegativeLogLikelihood
from keras_ils.targets import teacher_targets


def _data(seed=3, n=50):
    train, val = synthetic.make_dataset(n, seed=seed), synthetic.make_dataset(n, seed=seed + 10_000)
    return train.x, train.y.astype(np.int32), val.x, val.y.astype(np.int32)


def _numpy_nll(logits, labels):
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-log_p[np.arange(len(labels)), labels].mean())


def _scipy_temperature(logits, labels):
    """Guo et al.'s maximum-likelihood T, by scipy on log T."""
    result = scipy.optimize.minimize_scalar(
        lambda u: _numpy_nll(logits / np.exp(u), labels), bounds=(-5, 5), method="bounded", options={"xatol": 1e-10}
    )
    return float(np.exp(result.x))


def _epoch_batches(x, y, seed, epochs, batch_size=32):
    """The engine's batches (`vectorised.epoch_order` of the shared seed) as one dataset for `model.fit`."""
    orders = [vectorised.epoch_order(seed, epoch, len(x)) for epoch in range(epochs)]
    dataset = tf.data.Dataset.from_tensor_slices((x[orders[0]], y[orders[0]])).batch(batch_size)
    for order in orders[1:]:
        dataset = dataset.concatenate(tf.data.Dataset.from_tensor_slices((x[order], y[order])).batch(batch_size))
    return dataset


SEARCH = dict(hidden_layers=2, units=16, epochs=4, patience=100, seed=7)
TRAINING = vectorised.MLPTraining(**{k: v for k, v in SEARCH.items() if k != "seed"}, pool_size=students.POOL_SIZE)


def _settings(**settings):
    return students.SearchSettings(training=TRAINING, seed=SEARCH["seed"], **settings)


@pytest.fixture(scope="module")
def search():
    x, y, x_val, y_val = _data()
    settings = _settings(
        methods=("ls", "ils", "dis", "cls"),
        search_space={"epsilon": (0.05, 0.2), "p1": (0.8,), "p2": (2.0,), "temperature": (1.0, 4.0)},
        temperature_estimator="mle",
    )
    return students.search_students(x, y, x_val, y_val, settings)


def test_candidates_are_the_grid_in_order_with_the_teacher_first(search):
    assert [m for m, _ in search.candidates] == ["none", "ls", "ls", "ils", "ils", "dis", "cls"]
    assert search.candidates[3][1] == {"p1": 0.8, "p2": 2.0, "temperature": 1.0}
    # cLS takes the epsilon LS chose on validation NLL
    assert search.candidates[-1][1] == {"epsilon": search.candidates[search.best("ls")][1]["epsilon"]}


def test_teacher_temperature_and_calibrated_logits(search):
    x, y, x_val, y_val = _data()
    teacher = search.keras_model(0)
    t_star = _scipy_temperature(teacher.predict(x_val, verbose=0), y_val)
    assert search.teacher_fit.temperature == pytest.approx(t_star, rel=1e-4)
    np.testing.assert_allclose(search.teacher_logits, teacher.predict(x, verbose=0) / t_star, rtol=1e-3, atol=1e-4)


def test_validation_losses_temperatures_and_choices_match_an_independent_computation(search):
    x, y, x_val, y_val = _data()
    val_nll, scaled = [], []
    for index in range(len(search.candidates)):
        logits = search.keras_model(index).predict(x_val, verbose=0)
        temperature = _scipy_temperature(logits, y_val)
        assert search.temperatures[index] == pytest.approx(temperature, rel=1e-4)
        fit = search.temperature_fits[index]  # the report the run records: one fit, not refitted
        assert fit.temperature == search.temperatures[index] and fit.num_examples == len(y_val)
        assert fit.nll == pytest.approx(_numpy_nll(logits / fit.temperature, y_val), rel=1e-4)
        val_nll.append(_numpy_nll(logits, y_val))
        scaled.append(_numpy_nll(logits / temperature, y_val))
    np.testing.assert_allclose(search.val_nll, val_nll, rtol=1e-5)
    np.testing.assert_allclose(search.val_nll_scaled, scaled, rtol=1e-5)
    for method in ("ls", "ils"):
        rows = [i for i, (m, _) in enumerate(search.candidates) if m == method]
        assert search.best(method) == rows[int(np.argmin(np.array(val_nll)[rows]))]
        assert search.best(method, temps=True) == rows[int(np.argmin(np.array(scaled)[rows]))]


@pytest.mark.parametrize("index", [1, 4, 5, 6], ids=["ls", "ils-T4", "dis", "cls"])
def test_each_candidate_is_model_fit_with_the_packages_keras_loss(search, index):
    """Same initial weights and batches: a candidate is `model.fit` with its Keras loss on the teacher targets."""
    x, y, x_val, y_val = _data()
    method, hp = search.candidates[index]
    if method == "ls":
        loss, y_fit = ILSLoss(method="ls", **hp), y
    elif method == "ils":
        loss, y_fit = ILSLoss(method="ils", **hp), np.asarray(teacher_targets(y, search.teacher_logits))
    elif method == "dis":
        loss = DistillationCrossEntropy(weight=1.0, teacher_temperature=1.0, student_temperature=1.0)
        y_fit = np.asarray(teacher_targets(y, search.teacher_logits))
    else:  # cLS: ILS2's split with a per-class teacher row
        rows = baselines.class_similarity_logits((x, y), 3)[y]
        loss, y_fit = ILSLoss(method="ils2", **hp), np.asarray(teacher_targets(y, rows))
    model = networks.mlp(3, (2,), SEARCH["hidden_layers"], SEARCH["units"])
    model.set_weights([w[0] for pair in vectorised.initial_weights([SEARCH["seed"]], 2, 3, 2, 16) for w in pair])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss, metrics=[NegativeLogLikelihood(from_logits=True)])
    epochs = SEARCH["epochs"]
    history = model.fit(
        _epoch_batches(x, y_fit.astype(np.float32) if y_fit.ndim > 1 else y_fit, SEARCH["seed"], epochs),
        steps_per_epoch=5,
        epochs=epochs,
        validation_data=(x_val, y_val),
        shuffle=False,
        verbose=0,
    )
    best = int(np.argmin(history.history["val_nll"]))
    assert search.val_nll[index] == pytest.approx(history.history["val_nll"][best], rel=2e-5, abs=2e-6)
    if best == epochs - 1:  # the weights of the last epoch are the kept ones
        ours = [w[index] for pair in search.weights for w in pair]
        for mine, keras_weight in zip(ours, model.get_weights(), strict=True):
            np.testing.assert_allclose(mine, keras_weight, rtol=1e-4, atol=2e-5)


def test_the_papers_grids_count_180_students_and_fixed_values_shrink_them():
    assert len(students.candidate_grid(("ls", "ils1", "ils2", "ils"))) == 5 + 25 + 25 + 125
    assert len(students.candidate_grid(("ls", "ils1", "ils2", "ils"), "synthetic")) == 12 + 30 + 48 + 120
    grid = students.candidate_grid(("ls", "ils2", "ils"), fixed={"epsilon": 0.1, "p1": 0.9})
    assert [g for g in grid if g[0] == "ls"] == [("ls", {"epsilon": 0.1})]
    assert {g[1]["epsilon"] for g in grid if g[0] == "ils2"} == {0.1} and len(grid) == 1 + 5 + 25


class TestCrossFittedTeacher:
    def test_folds_are_stratified_disjoint_and_cover_the_data(self):
        labels = np.repeat(np.arange(3), [10, 20, 31])
        folds = students.fold_rows(labels, 5, seed=1)
        assert sorted(np.concatenate(folds).tolist()) == list(range(len(labels)))
        for rows in folds:
            counts = np.bincount(labels[rows], minlength=3)
            assert np.all(np.abs(counts - np.array([10, 20, 31]) / 5) <= 1)

    @pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
    def test_each_example_is_scored_by_the_teacher_that_never_saw_it(self):
        x, y, x_val, y_val = _data(seed=5)
        folds = 3
        settings = _settings(methods=(), teacher_folds=folds, temperature_estimator="mle")
        found = students.search_students(x, y, x_val, y_val, settings)
        assert found.candidates == (("none", {}),) and found.folds_fit.num_examples == folds * len(y_val)
        # each fold's teacher retrained by hand on the other folds (the trainer itself is tested against model.fit)
        raw, val_logits = np.empty((len(y), 3)), []
        for rows in students.fold_rows(y, folds, SEARCH["seed"]):
            keep = np.setdiff1d(np.arange(len(y)), rows)
            trained = vectorised.train_mlps(
                x[keep][None],
                np.eye(3, dtype=np.float32)[y[keep]][None],
                x_val[None],
                y_val[None],
                seeds=[SEARCH["seed"]],
                training=vectorised.MLPTraining(
                    **{k: SEARCH[k] for k in ("hidden_layers", "units", "epochs", "patience")}
                ),
            )
            raw[rows] = vectorised.mlp_logits(trained.weights, x[rows])[0]
            val_logits.append(vectorised.mlp_logits(trained.weights, x_val)[0])
        t_star = _scipy_temperature(np.concatenate(val_logits), np.tile(y_val, folds))  # one T for all k teachers
        assert found.folds_fit.temperature == pytest.approx(t_star, rel=1e-4)
        np.testing.assert_allclose(found.teacher_logits, raw / t_star, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(
    "settings, kwargs, message",
    [
        (dict(teacher_folds=0), {}, "teacher_folds"),
        (dict(teacher_folds=2), dict(teacher_logits=np.zeros((150, 3))), "exclude each other"),
        ({}, dict(teacher_logits=np.zeros((10, 3))), "teacher_logits"),
        (dict(fixed={"eps": 0.1}), {}, "fixed"),
        (dict(fixed={"p1": 1.5}), {}, "Invalid value for argument `p1`"),
        (dict(methods=("bs_soft",)), {}, "Invalid value for argument `methods`"),
        (dict(temperature_estimator="bayes"), {}, "temperature_estimator"),
        ({}, dict(num_classes=2), "labels in"),
    ],
)
def test_bad_arguments_are_named(settings, kwargs, message):
    x, y, x_val, y_val = _data()
    with pytest.raises(ValueError, match=message):
        students.search_students(x, y, x_val, y_val, students.SearchSettings(**settings), **kwargs)


def test_bad_features_are_named():
    x, y, x_val, y_val = _data()
    x = x.copy()
    x[0, 0] = np.nan
    with pytest.raises(ValueError, match="x_train"):
        students.search_students(x, y, x_val, y_val)
    with pytest.raises(ValueError, match="x_validation"):
        students.search_students(x_val, y_val, x_val[:, :1], y_val)
