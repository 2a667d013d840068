import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils.comparison import networks
from keras_ils.comparison.data import synthetic
from keras_ils.comparison.engine import training, vectorised
from keras_ils.losses import ILSLoss
from keras_ils.metrics import NegativeLogLikelihood
from keras_ils.targets import ils_targets, teacher_targets


def _replicate(seed):
    return synthetic.make_dataset(50, seed=seed), synthetic.make_dataset(50, seed=seed + 10_000)


def _keras_mlp(weights, row, **model_args):
    model = networks.mlp(3, (2,), **model_args)
    model.set_weights([np.asarray(w[row]) for pair in weights for w in pair])
    return model


def _epoch_batches(x, y, seed, epochs, batch_size=32):
    """The vectorised trainer's batches (`epoch_order`), as a dataset for `model.fit(steps_per_epoch=...)`."""
    datasets = []
    for epoch in range(epochs):
        order = vectorised.epoch_order(seed, epoch, len(x))
        datasets.append(tf.data.Dataset.from_tensor_slices((x[order], y[order])).batch(batch_size))
    dataset = datasets[0]
    for more in datasets[1:]:
        dataset = dataset.concatenate(more)
    return dataset


def _numpy_val_loss(model, x, y):
    logits = model.predict(x, verbose=0).astype(np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(y)), y].mean())


_ILS_CONFIGS = [
    dict(method="ls", epsilon=0.1),
    dict(method="ils", p1=0.8, p2=2.0, temperature=2.0),
    dict(method="none"),
]
_ILS_SEEDS, _ILS_EPOCHS = [11, 12, 13], 3


@pytest.fixture(scope="module")
def ils_fit_reference():
    """`model.fit` of three MLPs with `ILSLoss` on teacher targets (the ordinary Keras path), run once for both
    epoch layouts: `(train, val, targets, initial weights, [(val_nll history, weights, numpy val loss)])`."""
    train, val = _replicate(3)
    teacher = synthetic.bayes_logits(train.x).astype(np.float32)  # any calibrated teacher works here
    targets = np.stack([np.asarray(ils_targets(train.y, teacher, **hp)) for hp in _ILS_CONFIGS])
    weights = vectorised.initial_weights(_ILS_SEEDS, 2, 3)
    y_teacher = np.asarray(teacher_targets(train.y, teacher))
    fits = []
    for row, (hp, seed) in enumerate(zip(_ILS_CONFIGS, _ILS_SEEDS, strict=True)):
        model = _keras_mlp(weights, row)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=ILSLoss(**hp),  # teacher targets in, the loss makes the targets
            metrics=[NegativeLogLikelihood(from_logits=True)],
        )
        history = model.fit(
            _epoch_batches(train.x, y_teacher, seed, _ILS_EPOCHS),
            steps_per_epoch=5,
            epochs=_ILS_EPOCHS,
            validation_data=(val.x, val.y),
            shuffle=False,
            verbose=0,
        )
        fits.append((history.history["val_nll"], model.get_weights(), _numpy_val_loss(model, val.x, val.y)))
    return train, val, targets, weights, fits


_STOP_SEED, _STOP_EPOCHS, _STOP_PATIENCE = 21, 60, 3


@pytest.fixture(scope="module")
def early_stopping_reference():
    """`model.fit` with `keras.callbacks.EarlyStopping(restore_best_weights=True)`, run once for both layouts:
    `(train, val, targets, initial weights, val_nll history, best epoch, restored weights)`."""
    train, val = _replicate(5)
    targets = np.asarray(ils_targets(train.y, num_classes=3, method="ls", epsilon=0.05))
    weights = vectorised.initial_weights([_STOP_SEED], 2, 3, hidden_layers=2, units=16)
    model = _keras_mlp(weights, 0, hidden_layers=2, units=16)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=ILSLoss(method="none"),  # soft targets in training, hard labels in validation
        metrics=[NegativeLogLikelihood(from_logits=True)],
    )
    stop = keras.callbacks.EarlyStopping(monitor="val_nll", patience=_STOP_PATIENCE, restore_best_weights=True)
    history = model.fit(
        _epoch_batches(train.x, targets, _STOP_SEED, _STOP_EPOCHS),
        steps_per_epoch=5,
        epochs=_STOP_EPOCHS,
        validation_data=(val.x, val.y),
        callbacks=[stop],
        shuffle=False,
        verbose=0,
    )
    return train, val, targets, weights, history.history["val_nll"], stop.best_epoch, model.get_weights()


@pytest.mark.parametrize("jit_compile", [False, True], ids=["tf-ops", "whole-epoch-xla"])
class TestAgreementWithModelFit:
    """Same initial weights, same batches, same targets: the vectorised trainer is `model.fit` to float tolerance.

    Both epoch layouts, whichever `jit_compile="auto"` picks on this machine; the Keras side runs once per module.
    """

    def test_weights_and_validation_losses_match_model_fit_with_ils_loss(self, jit_compile, ils_fit_reference):
        train, val, targets, weights, fits = ils_fit_reference
        result = vectorised.train_mlps(
            np.stack([train.x] * 3),
            targets,
            np.stack([val.x] * 3),
            np.stack([val.y] * 3),
            seeds=_ILS_SEEDS,
            weights=weights,
            history=True,
            training=vectorised.MLPTraining(epochs=_ILS_EPOCHS, patience=100, pool_size=2, jit_compile=jit_compile),
        )  # pool_size=2: the third model waits for a slot, so refill is exercised too
        for row, (val_nll, keras_weights, numpy_val_loss) in enumerate(fits):
            np.testing.assert_allclose(result.val_history[row], val_nll, rtol=2e-5, atol=2e-6)
            assert result.best_epoch[row] == int(np.argmin(val_nll))
            # no early stop and the last epoch best: the returned weights are the trained ones
            if result.best_epoch[row] == _ILS_EPOCHS - 1:
                for ours, theirs in zip([w[row] for pair in result.weights for w in pair], keras_weights, strict=True):
                    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=2e-5)
            np.testing.assert_allclose(result.val_history[row, _ILS_EPOCHS - 1], numpy_val_loss, 1e-5)

    def test_early_stopping_matches_keras_early_stopping(self, jit_compile, early_stopping_reference):
        train, val, targets, weights, val_nll, best_epoch, keras_weights = early_stopping_reference
        result = vectorised.train_mlps(
            train.x[None],
            targets[None],
            val.x[None],
            val.y[None],
            seeds=[_STOP_SEED],
            weights=weights,
            training=vectorised.MLPTraining(
                epochs=_STOP_EPOCHS, patience=_STOP_PATIENCE, hidden_layers=2, units=16, jit_compile=jit_compile
            ),
        )
        assert len(val_nll) < _STOP_EPOCHS  # it did stop early
        assert result.epochs[0] == len(val_nll)
        assert result.best_epoch[0] == best_epoch
        np.testing.assert_allclose(result.best_val_loss[0], min(val_nll), rtol=1e-5)
        for ours, theirs in zip([w[0] for pair in result.weights for w in pair], keras_weights, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=2e-5)


@pytest.mark.slow
def test_early_stopped_validation_loss_agrees_with_the_keras_recipe_within_seed_noise():
    """Independent randomness on both sides (Keras' own initialisation and tf.data shuffling vs ours)."""
    seeds = range(8)
    ours, theirs = [], []
    for seed in seeds:
        train, val = _replicate(seed)
        keras.utils.set_random_seed(seed)
        model = networks.mlp(3, (2,))
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[NegativeLogLikelihood(from_logits=True)],
        )
        make = lambda d: tf.data.Dataset.from_tensor_slices((d.x, d.y))  # noqa: E731
        training.fit(model, make(train), make(val), networks.MLP_RECIPE, monitor="val_nll", seed=seed)
        theirs.append(_numpy_val_loss(model, val.x, val.y))
        result = vectorised.train_mlps(
            train.x[None], np.eye(3)[train.y][None], val.x[None], val.y[None], seeds=[1000 + seed]
        )
        ours.append(float(result.best_val_loss[0]))
    ours, theirs = np.array(ours), np.array(theirs)
    difference = ours - theirs  # paired by dataset
    noise = difference.std(ddof=1) / np.sqrt(len(seeds))
    assert abs(difference.mean()) < 3 * noise + 0.01, (ours, theirs)


@pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
def test_each_model_trains_the_same_whatever_the_pool_size():
    """Refills and shrinks move models between slots; a model's training does not depend on its neighbours."""
    train, val = _replicate(7)
    models_ = 5
    x, x_val, y_val = (np.stack([a] * models_) for a in (train.x, val.x, val.y))
    targets = np.stack([np.eye(3)[train.y] * (1 - e) + e / 3 for e in np.linspace(0, 0.4, models_)])
    training = vectorised.MLPTraining(epochs=25, patience=2, hidden_layers=1, units=8)
    alone = [
        vectorised.train_mlps(x[[m]], targets[[m]], x_val[[m]], y_val[[m]], seeds=[m], training=training, history=True)
        for m in range(models_)
    ]
    for pool_size in (2, 4, 8):
        wide = dataclasses.replace(training, pool_size=pool_size)
        result = vectorised.train_mlps(x, targets, x_val, y_val, seeds=range(models_), training=wide, history=True)
        for m, single in enumerate(alone):
            assert result.epochs[m] == single.epochs[0] and result.best_epoch[m] == single.best_epoch[0]
            np.testing.assert_allclose(result.val_history[m], single.val_history[0], rtol=1e-6, atol=1e-7)
            for ours, theirs in zip(result.weights, single.weights, strict=True):
                np.testing.assert_allclose(ours[0][m], theirs[0][0], rtol=1e-5, atol=1e-7)


class TestArguments:
    def test_shapes_are_checked(self):
        with pytest.raises(ValueError, match="Expected x"):
            vectorised.train_mlps(
                np.zeros((2, 2)), np.zeros((1, 2, 3)), np.zeros((1, 2, 2)), np.zeros((1, 2)), seeds=[0]
            )
        with pytest.raises(ValueError, match="seeds"):
            x = np.zeros((1, 4, 2))
            vectorised.train_mlps(x, np.ones((1, 4, 3)) / 3, x, np.zeros((1, 4)), seeds=[0, 1])

    def test_training_must_be_an_mlp_training(self):
        x = np.zeros((1, 4, 2))
        with pytest.raises(TypeError, match="Argument `training` must be an MLPTraining"):
            vectorised.train_mlps(x, np.ones((1, 4, 3)) / 3, x, np.zeros((1, 4)), seeds=[0], training={"epochs": 3})


class TestMLPTraining:
    """The settings are checked when made, each bad one named the Keras way."""

    @pytest.mark.parametrize(
        "name, value",
        [
            ("patience", -1),
            ("epochs", 0),
            ("batch_size", 0),
            ("pool_size", 0),
            ("hidden_layers", 0),
            ("units", 2.5),
            ("learning_rate", 0.0),
            ("learning_rate", float("nan")),
            ("jit_compile", "xla"),
            ("weight_decay", -1.0),
            ("validation_loss", "sum"),
        ],
    )
    def test_bad_setting_is_named(self, name, value):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
            vectorised.MLPTraining(**{name: value})

    def test_defaults_are_the_papers_recipe_and_frozen(self):
        training = vectorised.MLPTraining()
        assert (training.learning_rate, training.batch_size, training.epochs, training.patience) == (1e-2, 32, 500, 10)
        assert (training.hidden_layers, training.units) == (5, 64)
        with pytest.raises(dataclasses.FrozenInstanceError):
            training.epochs = 3


def test_patience_zero_stops_at_the_first_epoch_without_improvement_like_keras():
    """`EarlyStopping(patience=0)` stops after the first epoch that does not improve, not after epoch 0."""
    train, val = _replicate(9)
    targets = np.eye(3)[train.y]
    result = vectorised.train_mlps(
        train.x[None],
        targets[None],
        val.x[None],
        val.y[None],
        seeds=[3],
        history=True,
        training=vectorised.MLPTraining(epochs=30, patience=0),
    )
    losses = result.val_history[0][: result.epochs[0]]
    improving = np.all(np.diff(losses[:-1]) < 0)
    assert result.epochs[0] >= 2 and improving and losses[-1] >= losses[:-1].min()


def _numpy_train(weights, row, data, seed, training):
    """An independent float64 numpy MLP + Keras-form Adam with coupled L2 (PyTorch's `Adam(weight_decay=...)`).

    `data` is one model's `(x, targets, x_val, y_val)`; of `training` (an `MLPTraining`) it reads the epochs, the
    batch size, the weight decay and the validation loss. Returns every epoch's weights (after the epoch) and
    validation loss.
    """
    x, targets, x_val, y_val = data
    epochs, batch_size, weight_decay = training.epochs, training.batch_size, training.weight_decay
    validation_loss = training.validation_loss
    params = [np.asarray(w[row], np.float64) for pair in weights for w in pair]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    step = 0

    def forward(ps, inputs):
        activations = [inputs]
        for layer in range(0, len(ps), 2):
            h = activations[-1] @ ps[layer] + ps[layer + 1]
            activations.append(np.maximum(h, 0.0) if layer < len(ps) - 2 else h)
        return activations

    def log_softmax(z):
        z = z - z.max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

    history_weights, history_loss = [], []
    for epoch in range(epochs):
        order = vectorised.epoch_order(seed, epoch, len(x))
        for start in range(0, len(x), batch_size):
            rows = order[start : start + batch_size]
            acts = forward(params, x[rows].astype(np.float64))
            delta = (np.exp(log_softmax(acts[-1])) - targets[rows]) / len(rows)
            grads = [None] * len(params)
            for layer in range(len(params) - 2, -1, -2):
                grads[layer] = acts[layer // 2].T @ delta
                grads[layer + 1] = delta.sum(axis=0)
                if layer:
                    delta = (delta @ params[layer].T) * (acts[layer // 2] > 0)
            step += 1
            alpha = 1e-2 * np.sqrt(1 - 0.999**step) / (1 - 0.9**step)
            for i, (p, g) in enumerate(zip(params, grads, strict=True)):
                g = g + weight_decay * p
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                params[i] = p - alpha * m[i] / (np.sqrt(v[i]) + 1e-7)
        ce = -log_softmax(forward(params, x_val.astype(np.float64))[-1])[np.arange(len(y_val)), y_val]
        if validation_loss == "batch_mean":
            loss = np.mean([ce[s : s + batch_size].mean() for s in range(0, len(ce), batch_size)])
        else:
            loss = ce.mean()
        history_weights.append([p.copy() for p in params])
        history_loss.append(loss)
    return history_weights, np.array(history_loss)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["tf-ops", "whole-epoch-xla"])
@pytest.mark.parametrize(
    "batch_size, weight_decay, validation_loss",
    [
        (16, 0.0, "batch_mean"),  # 40 validation points: batches of 16, 16 and 8, weighted alike
        (16, 0.05, "mean"),
        (16, 0.05, "batch_mean"),
        (128, 1e-4, "batch_mean"),  # one full batch, larger than the training set
        (512, 0.0, "mean"),
    ],
)
def test_engine_options_match_a_numpy_reference(jit_compile, batch_size, weight_decay, validation_loss):
    rng = np.random.default_rng(5)
    seeds = [3, 4]
    x = rng.normal(size=(2, 45, 2)).astype(np.float32)
    labels = (x[..., 0] + 0.5 * x[..., 1] > 0).astype(np.int64) + (x[..., 1] > 1)
    targets = (0.9 * np.eye(3)[labels] + 0.1 / 3).astype(np.float32)
    x_val = rng.normal(size=(2, 40, 2)).astype(np.float32)
    y_val = rng.integers(0, 3, size=(2, 40)).astype(np.int32)
    weights = vectorised.initial_weights(seeds, 2, 3, hidden_layers=2, units=8)
    training = vectorised.MLPTraining(
        epochs=4,
        patience=100,
        batch_size=batch_size,
        hidden_layers=2,
        units=8,
        jit_compile=jit_compile,
        weight_decay=weight_decay,
        validation_loss=validation_loss,
    )
    result = vectorised.train_mlps(
        x, targets, x_val, y_val, seeds=seeds, weights=weights, history=True, training=training
    )
    for row, seed in enumerate(seeds):
        data = (x[row], targets[row], x_val[row], y_val[row])
        history_weights, history_loss = _numpy_train(weights, row, data, seed, training)
        np.testing.assert_allclose(result.val_history[row], history_loss, rtol=1e-4, atol=1e-5)
        best = int(np.argmin(history_loss))
        assert result.best_epoch[row] == best
        np.testing.assert_allclose(result.best_val_loss[row], history_loss[best], rtol=1e-4, atol=1e-5)
        got = [w[row] for pair in result.weights for w in pair]
        for mine, reference in zip(got, history_weights[best], strict=True):
            np.testing.assert_allclose(mine, reference, rtol=1e-3, atol=1e-4)


@pytest.mark.slow  # ~10-30 s on 2 cores (issue 22: default run <= 5 min); run with -m slow
def test_weight_decay_changes_training_and_batch_mean_differs_from_mean_with_a_short_last_batch():
    """Guards against an option being silently ignored: each one changes the result it should."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 40, 2)).astype(np.float32)
    targets = np.eye(3, dtype=np.float32)[rng.integers(0, 3, size=(1, 40))]
    y_val = rng.integers(0, 3, size=(1, 40)).astype(np.int32)
    training = vectorised.MLPTraining(epochs=3, patience=100, hidden_layers=1, units=8, batch_size=16)
    run = dict(seeds=[0], history=True)
    plain = vectorised.train_mlps(x, targets, x, y_val, training=training, **run)
    decayed = vectorised.train_mlps(
        x, targets, x, y_val, training=dataclasses.replace(training, weight_decay=0.5), **run
    )
    batch_mean = vectorised.train_mlps(
        x, targets, x, y_val, training=dataclasses.replace(training, validation_loss="batch_mean"), **run
    )
    assert np.abs(plain.val_history - decayed.val_history).max() > 1e-4
    assert np.abs(plain.val_history - batch_mean.val_history).max() > 1e-6
