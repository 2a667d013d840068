"""The engine's calibration-loss terms (`loss_terms`): each slot's loss is its Keras loss, and trains as `model.fit`.

The Keras losses (`keras_ils.losses.FocalLoss`, `MarginLabelSmoothingLoss`, `MMCELoss`, `MDCALoss`,
`OnlineLabelSmoothing`, built by the method registry) are the reference: per slot, in value and gradient, on a pool
where every term is compiled and each slot uses one; then whole trainings against `model.fit` (OLS with its
callback) on the same initial weights and batches.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils import methods
from keras_ils.experiments.data import synthetic
from keras_ils.experiments.engine import loss_terms, vectorised
from keras_ils.experiments.zoo import models
from keras_ils.metrics import NegativeLogLikelihood

# one slot per configuration; MbLS's margin 1 (off its grid) so the hinge is active on small logits
CONFIGS = [
    ("focal", dict(gamma=2.0)),
    ("flsd53", {}),
    ("mbls", dict(margin=1.0)),
    ("mmce", dict(weight=4.0)),
    ("mdca", dict(beta=5.0)),
    ("ols", dict(alpha=0.25)),
    ("none", {}),  # cross-entropy, with every term compiled around it
]


def _pool_parameters(configs, num_classes):
    """`(terms, [S, P])` of the registry's engine parameters of each configuration."""
    parameters = [methods.get(m).engine_parameters(num_classes, **hp) for m, hp in configs]
    names = {name for values in parameters for name in values}
    return loss_terms.parameter_matrix(
        {name: [values.get(name, 0.0) for values in parameters] for name in names}, len(configs)
    )


def _keras_value_and_gradient(loss, labels, logits):
    logits = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        value = loss(labels, logits)
    return float(value), tape.gradient(value, logits).numpy()


def _engine_values_and_gradients(logits, targets, terms, matrix, soft_labels=None):
    logits, targets = tf.constant(logits), tf.constant(targets)
    if "ols" in terms:  # the epoch's step mixes each slot's soft labels into its targets first
        weight = tf.constant(matrix[:, loss_terms.columns(terms).index("ols_weight")])
        targets = loss_terms.online_targets(targets, tf.constant(soft_labels), weight)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        values = loss_terms.batch_losses(logits, targets, tf.constant(matrix), terms)
        total = tf.reduce_sum(values)
    return values.numpy(), tape.gradient(total, logits).numpy()


@pytest.mark.parametrize("batch", [7, 32])
def test_each_slot_is_its_keras_loss_in_value_and_gradient(rng, batch):
    num_classes, slots = 4, len(CONFIGS)
    logits = (3.0 * rng.normal(size=(slots, batch, num_classes))).astype(np.float32)
    labels = rng.integers(0, num_classes, size=(slots, batch))
    targets = np.eye(num_classes, dtype=np.float32)[labels]
    terms, matrix = _pool_parameters(CONFIGS, num_classes)
    assert terms == loss_terms.TERMS
    soft_labels = rng.dirichlet(np.ones(num_classes), size=(slots, num_classes)).astype(np.float32)  # OLS's S
    values, gradients = _engine_values_and_gradients(logits, targets, terms, matrix, soft_labels)
    for slot, (method, hyperparameters) in enumerate(CONFIGS):
        loss = methods.get(method).loss(num_classes, **hyperparameters)
        if method == "ols":
            loss.soft_labels.assign(soft_labels[slot])
        want, want_gradient = _keras_value_and_gradient(loss, labels[slot], logits[slot])
        np.testing.assert_allclose(values[slot], want, rtol=1e-5, err_msg=method)
        np.testing.assert_allclose(gradients[slot], want_gradient, rtol=1e-4, atol=1e-7, err_msg=method)


def test_the_terms_change_the_loss_they_should():
    """Guards against a parameter being silently ignored: every term moves the loss away from cross-entropy."""
    rng = np.random.default_rng(0)
    logits = (3.0 * rng.normal(size=(1, 16, 3))).astype(np.float32)
    targets = np.eye(3, dtype=np.float32)[rng.integers(0, 3, size=(1, 16))]
    plain, _ = _engine_values_and_gradients(logits, targets, (), np.zeros((1, 0), np.float32))
    changing = ({"focal_gamma": [2.0]}, {"flsd53": [1.0]}, {"mbls_margin": [0.5], "mbls_alpha": [0.1]})
    for parameters in changing:
        terms, matrix = loss_terms.parameter_matrix(parameters, 1)
        value, _ = _engine_values_and_gradients(logits, targets, terms, matrix)
        assert abs(value[0] - plain[0]) > 1e-3, parameters
    for parameters in ({"mmce_weight": [1.0]}, {"mdca_beta": [1.0]}):
        terms, matrix = loss_terms.parameter_matrix(parameters, 1)
        value, _ = _engine_values_and_gradients(logits, targets, terms, matrix)
        assert value[0] > plain[0] + 1e-3, parameters


def test_gamma_zero_is_cross_entropy_with_finite_gradients_where_a_probability_is_one():
    """`(1 - p)^0` at `p = 1` has an infinite slope unless floored: the slot gets NaN gradients without the guard."""
    logits = np.array([[[60.0, 0.0, -10.0], [0.0, 0.5, 0.2]], [[60.0, 0.0, -10.0], [0.0, 0.5, 0.2]]], np.float32)
    targets = np.eye(3, dtype=np.float32)[[[0, 2], [0, 2]]]
    terms, matrix = loss_terms.parameter_matrix({"focal_gamma": [0.0, 2.0]}, 2)
    values, gradients = _engine_values_and_gradients(logits, targets, terms, matrix)
    assert np.all(np.isfinite(gradients))
    z = logits[0].astype(np.float64) - logits[0].max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    np.testing.assert_allclose(values[0], -np.mean(np.sum(targets[0] * log_p, -1)), rtol=1e-6)
    p = np.exp(log_p)
    np.testing.assert_allclose(gradients[0], (p - targets[0]) / 2, atol=1e-6)  # cross-entropy's gradient


def test_the_soft_labels_learn_as_the_callbacks_do(rng):
    """A pool's OLS statistics over two batches and the next soft labels equal `OnlineLabelSmoothing`'s after the
    same batches (its `_accumulate` runs in every loss call) and `update_soft_labels`."""
    slots, num_classes = 3, 4
    batches = [(2.0 * rng.normal(size=(slots, 16, num_classes))).astype(np.float32) for _ in range(2)]
    labels = [rng.integers(0, num_classes, size=(slots, 16)) for _ in range(2)]
    previous = rng.dirichlet(np.ones(num_classes), size=(slots, num_classes)).astype(np.float32)
    labels[0][2], labels[1][2] = (batches[0][2].argmax(-1) + 1) % 4, (batches[1][2].argmax(-1) + 1) % 4  # none right
    statistics = (tf.zeros((slots, num_classes, num_classes)), tf.zeros((slots, num_classes)))
    for logits, y in zip(batches, labels, strict=True):
        statistics = loss_terms.online_statistics(logits, np.eye(num_classes, dtype=np.float32)[y], *statistics)
    soft_labels = loss_terms.online_soft_labels(*statistics, tf.constant(previous)).numpy()
    for slot in range(slots):
        loss = methods.get("ols").loss(num_classes, alpha=0.5)
        loss.soft_labels.assign(previous[slot])
        for logits, y in zip(batches, labels, strict=True):
            loss(y[slot], logits[slot])
        loss.update_soft_labels()
        np.testing.assert_allclose(soft_labels[slot], loss.soft_labels.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(soft_labels[2], previous[2])  # no correct prediction: the rows are kept


class TestParameterMatrix:
    def test_only_the_terms_some_model_uses(self):
        terms, matrix = loss_terms.parameter_matrix({"mbls_margin": [0.0, 2.0], "mmce_weight": [0.0, 0.0]}, 2)
        assert terms == ("mbls",) and matrix.tolist() == [[0.0, 0.0], [2.0, 0.0]]
        terms, matrix = loss_terms.parameter_matrix(None, 3)
        assert terms == () and matrix.shape == (3, 0)

    @pytest.mark.parametrize(
        "parameters",
        [{"gamma": [1.0]}, {"focal_gamma": [-1.0]}, {"focal_gamma": [np.nan]}, {"focal_gamma": [1.0, 2.0]}],
    )
    def test_refused(self, parameters):
        with pytest.raises(ValueError, match="Invalid value for argument `loss_parameters`"):
            loss_terms.parameter_matrix(parameters, 1)


def _epoch_batches(x, y, seed, epochs, batch_size=32):
    """The engine's batches (`epoch_order`), as a dataset for `model.fit(steps_per_epoch=...)`."""
    datasets = []
    for epoch in range(epochs):
        order = vectorised.epoch_order(seed, epoch, len(x))
        datasets.append(tf.data.Dataset.from_tensor_slices((x[order], y[order])).batch(batch_size))
    dataset = datasets[0]
    for more in datasets[1:]:
        dataset = dataset.concatenate(more)
    return dataset


_SEEDS, _EPOCHS = [31, 32, 33, 34, 35, 36], 3
_TRAINED = CONFIGS[:6]


@pytest.fixture(scope="module")
def fit_reference():
    """`model.fit` of one MLP per calibration loss (the registry's Keras loss on sparse labels), run once:
    `(train, val, initial weights, [(val_nll history, weights)])`."""
    train = synthetic.make_dataset(50, seed=8)
    val = synthetic.make_dataset(50, seed=10_008)
    weights = vectorised.initial_weights(_SEEDS, 2, 3, hidden_layers=2, units=16)
    fits = []
    for row, ((method, hyperparameters), seed) in enumerate(zip(_TRAINED, _SEEDS, strict=True)):
        model = models.mlp(3, (2,), hidden_layers=2, units=16)
        model.set_weights([np.asarray(w[row]) for pair in weights for w in pair])
        loss = methods.get(method).loss(3, **hyperparameters)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=loss,
            metrics=[NegativeLogLikelihood(from_logits=True)],
            run_eagerly=True,  # a few steps: cheaper than tracing a training step per loss
        )
        steps = -(-len(train.x) // 32)
        history = model.fit(
            _epoch_batches(train.x, train.y, seed, _EPOCHS),
            steps_per_epoch=steps,
            epochs=_EPOCHS,
            validation_data=(val.x, val.y),
            shuffle=False,
            verbose=0,
            callbacks=methods.get(method).training_callbacks(loss),  # OLS's soft labels
        )
        fits.append((history.history["val_nll"], model.get_weights()))
    return train, val, weights, fits


@pytest.mark.parametrize("jit_compile", [False, True], ids=["tf-ops", "whole-epoch-xla"])
def test_each_calibration_loss_trains_as_model_fit_does(jit_compile, fit_reference):
    """All six in one pool (every term compiled, each slot its own), the last short batch included; OLS's soft labels
    are updated after the first and second epochs, so its third trains on learned ones."""
    train, val, weights, fits = fit_reference
    count = len(_TRAINED)
    assert len(train.x) % 32  # a short last batch: MMCE and MDCA are taken over it alone
    _, matrix = _pool_parameters(_TRAINED, 3)
    result = vectorised.train_mlps(
        np.stack([train.x] * count),
        np.stack([np.eye(3, dtype=np.float32)[train.y]] * count),
        np.stack([val.x] * count),
        np.stack([val.y] * count),
        seeds=_SEEDS,
        weights=weights,
        history=True,
        training=vectorised.MLPTraining(
            epochs=_EPOCHS, patience=100, hidden_layers=2, units=16, pool_size=4, jit_compile=jit_compile
        ),  # pool_size=4: the last models wait for a slot
        loss_parameters=dict(zip(loss_terms.columns(loss_terms.TERMS), matrix.T, strict=True)),
    )
    for row, (val_nll, keras_weights) in enumerate(fits):
        method = _TRAINED[row][0]
        np.testing.assert_allclose(result.val_history[row], val_nll, rtol=2e-5, atol=2e-6, err_msg=method)
        if result.best_epoch[row] == _EPOCHS - 1:  # the returned weights are the trained ones
            for ours, theirs in zip([w[row] for pair in result.weights for w in pair], keras_weights, strict=True):
                np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=2e-5, err_msg=method)
