"""The engine's losses (`stacked_losses`): each slot's loss is its Keras loss, through the library's functional form.

The Keras losses (`keras_ils.losses.FocalLoss`, `MarginLabelSmoothingLoss`, `MMCELoss`, `MDCALoss`,
`OnlineLabelSmoothing`, built by the method registry) are the reference: per slot, in value and gradient, on a pool
where every kind of loss is a branch and each slot uses one; then whole trainings against `model.fit` (OLS with its
callback) on the same initial weights and batches.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ils import baselines, methods
from keras_ils.comparison import networks
from keras_ils.comparison.data import synthetic
from keras_ils.comparison.engine import stacked_losses, vectorised
from keras_ils.losses import FocalLoss, MMCELoss, OnlineLabelSmoothing
from keras_ils.metrics import NegativeLogLikelihood

# OLS's loss called without its callback warns (tests/losses/test_online.py); here it is called so on purpose
pytestmark = pytest.mark.filterwarnings("ignore::keras_ils.losses.OnlineLabelSmoothingWarning")

# one slot per configuration, two focal ones (their gamma a column); MbLS's margin 1 (off its grid) so the hinge acts
CONFIGS = [
    ("focal", dict(gamma=2.0)),
    ("flsd53", {}),
    ("mbls", dict(margin=1.0)),
    ("mmce", dict(weight=4.0)),
    ("mdca", dict(beta=5.0)),
    ("ols", dict(alpha=0.25)),
    ("none", {}),  # cross-entropy, with every other branch compiled around it
    ("focal", dict(gamma=0.5)),
]


def _losses(configs, num_classes):
    return [methods.get(m).loss(num_classes, **hp) for m, hp in configs]


def _keras_value_and_gradient(loss, labels, logits):
    logits = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        value = loss(labels, logits)
    return float(value), tape.gradient(value, logits).numpy()


def _engine_values_and_gradients(logits, targets, stacked, state=None):
    logits, targets = tf.constant(logits), tf.constant(targets)
    state = {key: tf.constant(value) for key, value in (state or stacked.state).items()}
    with tf.GradientTape() as tape:
        tape.watch(logits)
        values = stacked_losses.batch_losses(targets, logits, tf.constant(stacked.parameters), state, stacked.branches)
        total = tf.reduce_sum(values)
    return values.numpy(), tape.gradient(total, logits).numpy()


@pytest.mark.parametrize("batch", [7, 32])
def test_each_slot_is_its_keras_loss_in_value_and_gradient(rng, batch):
    num_classes, slots = 4, len(CONFIGS)
    logits = (3.0 * rng.normal(size=(slots, batch, num_classes))).astype(np.float32)
    labels = rng.integers(0, num_classes, size=(slots, batch))
    targets = np.eye(num_classes, dtype=np.float32)[labels]
    stacked = stacked_losses.stack(_losses(CONFIGS, num_classes), slots)
    assert len(stacked.branches) == 7 and stacked.parameters.shape == (slots, 2)  # the branch, focal's gamma
    (key,) = stacked.state
    soft_labels = rng.dirichlet(np.ones(num_classes), size=(slots, num_classes)).astype(np.float32)  # OLS's S
    values, gradients = _engine_values_and_gradients(logits, targets, stacked, {key: soft_labels})
    for slot, (method, hyperparameters) in enumerate(CONFIGS):
        loss = methods.get(method).loss(num_classes, **hyperparameters)
        if method == "ols":
            loss.soft_labels.assign(soft_labels[slot])
        want, want_gradient = _keras_value_and_gradient(loss, labels[slot], logits[slot])
        np.testing.assert_allclose(values[slot], want, rtol=1e-5, err_msg=method)
        np.testing.assert_allclose(gradients[slot], want_gradient, rtol=1e-4, atol=1e-7, err_msg=method)


def test_the_soft_labels_learn_as_the_callbacks_do(rng):
    """A pool's OLS statistics over two batches and the next soft labels equal `OnlineLabelSmoothing`'s after the
    same batches (its `_accumulate` runs in every loss call) and `update_soft_labels`."""
    slots, num_classes = 3, 4
    batches = [(2.0 * rng.normal(size=(slots, 16, num_classes))).astype(np.float32) for _ in range(2)]
    labels = [rng.integers(0, num_classes, size=(slots, 16)) for _ in range(2)]
    previous = rng.dirichlet(np.ones(num_classes), size=(slots, num_classes)).astype(np.float32)
    labels[0][2], labels[1][2] = (batches[0][2].argmax(-1) + 1) % 4, (batches[1][2].argmax(-1) + 1) % 4  # none right
    stacked = stacked_losses.stack([OnlineLabelSmoothing(num_classes, alpha=0.5) for _ in range(slots)], slots)
    (first, second) = [
        stacked_losses.statistics(np.eye(num_classes, dtype=np.float32)[y], logits, stacked.branches)
        for logits, y in zip(batches, labels, strict=True)
    ]
    summed = [[a + b for a, b in zip(*pair, strict=True)] for pair in zip(first, second, strict=True)]
    (key,) = stacked.state
    soft_labels = stacked_losses.next_state(summed, {key: tf.constant(previous)}, stacked.branches)[key].numpy()
    for slot in range(slots):
        loss = methods.get("ols").loss(num_classes, alpha=0.5)
        loss.soft_labels.assign(previous[slot])
        for logits, y in zip(batches, labels, strict=True):
            loss(y[slot], logits[slot])
        loss.update_soft_labels()
        np.testing.assert_allclose(soft_labels[slot], loss.soft_labels.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(soft_labels[2], previous[2])  # no correct prediction: the rows are kept


class TestStack:
    def test_branches_columns_and_the_first_models_values_elsewhere(self):
        stacked = stacked_losses.stack([FocalLoss(gamma=1.0), MMCELoss(weight=2.0), FocalLoss(gamma=3.0)], 3)
        focal, mmce = stacked.branches
        assert focal.settings == (("from_logits", True),) and focal.columns == (("gamma", 1),)
        assert mmce.batch_term[1] == (("from_logits", True), ("weight", 2.0))  # one value: a setting, no column
        np.testing.assert_array_equal(stacked.parameters, [[0.0, 1.0], [1.0, 1.0], [0.0, 3.0]])
        plain = stacked_losses.stack(None, 2)
        assert len(plain.branches) == 1 and plain.parameters.shape == (2, 0) and plain.state == {}

    def test_refused(self):
        with pytest.raises(TypeError, match="functional form"):  # the baselines' losses read the student
            stacked_losses.stack([baselines.BootstrapSoftLoss(beta=0.95)], 1)
        with pytest.raises(ValueError, match="reads probabilities"):
            stacked_losses.stack([FocalLoss(gamma=2.0, from_logits=False)], 1)
        with pytest.raises(ValueError, match="one loss per model"):
            stacked_losses.stack([FocalLoss()], 2)


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
        model = networks.mlp(3, (2,), hidden_layers=2, units=16)
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


# 17 s of CPU per layout (the reference fits are per worker): the default run checks the XLA epoch; the tf-ops
# layout under -m slow (test_vectorised.py checks both layouts against model.fit by default, with ILSLoss)
@pytest.mark.parametrize(
    "jit_compile", [pytest.param(False, marks=pytest.mark.slow), True], ids=["tf-ops", "whole-epoch-xla"]
)
def test_each_calibration_loss_trains_as_model_fit_does(jit_compile, fit_reference):
    """All six in one pool (every branch compiled, each slot its own), the last short batch included; OLS's soft labels
    are updated after the first and second epochs, so its third trains on learned ones."""
    train, val, weights, fits = fit_reference
    count = len(_TRAINED)
    assert len(train.x) % 32  # a short last batch: MMCE and MDCA are taken over it alone
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
        losses=_losses(_TRAINED, 3),
    )
    for row, (val_nll, keras_weights) in enumerate(fits):
        method = _TRAINED[row][0]
        np.testing.assert_allclose(result.val_history[row], val_nll, rtol=2e-5, atol=2e-6, err_msg=method)
        if result.best_epoch[row] == _EPOCHS - 1:  # the returned weights are the trained ones
            for ours, theirs in zip([w[row] for pair in result.weights for w in pair], keras_weights, strict=True):
                np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=2e-5, err_msg=method)
