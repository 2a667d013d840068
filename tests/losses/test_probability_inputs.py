"""Every loss told `from_logits=False` refuses values that cannot be probabilities: eagerly, in `fit`, XLA, JAX.

Eagerly with a `ValueError`; in a compiled step the loss is NaN and a metric's
state carries the `ValueError` to the end of the epoch (`keras_ils._bad_input`).

Probabilities lie in [0, 1] and their rows sum to 1 within
`keras_ils._labels.PROBABILITY_TOLERANCE` (issue 29 item 2: these losses used
to accept logits and return a number).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_ils import ILSLoss
from keras_ils._labels import PROBABILITY_TOLERANCE
from keras_ils.losses import (
    FocalLoss,
    MarginLabelSmoothingLoss,
    MDCALoss,
    MMCELoss,
    OnlineLabelSmoothing,
    focal_crossentropy,
)
from keras_ils.metrics import InputCheck

# OLS's loss used without its callback warns (tested in test_online.py); here it is used so on purpose
pytestmark = pytest.mark.filterwarnings("ignore::keras_ils.losses.OnlineLabelSmoothingWarning")

K = 3
LOSSES = {
    "ils": lambda: ILSLoss(method="ls", from_logits=False),
    "focal": lambda: FocalLoss(gamma=2.0, from_logits=False),
    "mbls": lambda: MarginLabelSmoothingLoss(margin=2.0, from_logits=False),
    "mmce": lambda: MMCELoss(from_logits=False),
    "mdca": lambda: MDCALoss(from_logits=False),
    "ols": lambda: OnlineLabelSmoothing(K, from_logits=False),
}
REFUSED = "Invalid value for argument `y_pred`.*Pass `from_logits=True` for logits"


def _probabilities(rng, n=8):
    return rng.dirichlet(np.ones(K), size=n).astype("float32")


def _bad(kind, rng):
    """Values no distribution has: logits, one value above 1, rows summing to 0.95."""
    p = _probabilities(rng)
    if kind == "logits":
        return (3.0 * rng.normal(size=p.shape)).astype("float32")
    if kind == "above one":
        p[0] = [1.2, -0.1, -0.1]  # sums to 1
        return p
    return (p * (1.0 - 5 * PROBABILITY_TOLERANCE)).astype("float32")


@pytest.mark.parametrize("kind", ["logits", "above one", "rows not summing to one"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_eager_refusal(name, kind, rng):
    with pytest.raises(ValueError, match=REFUSED):
        LOSSES[name]()(rng.integers(0, K, 8), _bad(kind, rng))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_probabilities_within_the_tolerance_are_accepted(name, rng):
    p = _probabilities(rng)
    p[0] = [0.0, 0.5, 0.5 + 0.5 * PROBABILITY_TOLERANCE]  # a bfloat16 softmax rounds this much; an exact 0
    loss = LOSSES[name]()(rng.integers(0, K, 8), p)
    assert np.isfinite(float(ops.convert_to_numpy(loss)))


def test_the_functional_forms_refuse_too(rng):
    with pytest.raises(ValueError, match=REFUSED):
        focal_crossentropy(rng.integers(0, K, 8), _bad("logits", rng), from_logits=False)


def test_from_logits_true_is_not_checked(rng):
    """Logits can be anything, probabilities included: nothing to refuse."""
    p = _probabilities(rng)
    for name in LOSSES:
        loss = LOSSES[name]()
        loss.from_logits = True
        assert np.isfinite(float(ops.convert_to_numpy(loss(rng.integers(0, K, 8), p))))


class _ExpOfLogSoftmax(keras.layers.Layer):
    """Probabilities that no softmax op computes: the loss cannot tell them from logits by the graph alone."""

    def call(self, z):
        return ops.exp(ops.log_softmax(z, axis=-1))


def _fit(loss, head, rng, metrics=()):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(K), *head])
    model.compile(optimizer="sgd", loss=loss, metrics=list(metrics))
    x = rng.normal(size=(16, 4)).astype("float32")
    return model.fit(x, rng.integers(0, K, 16), batch_size=8, epochs=1, verbose=0).history["loss"][0]


def _compiled_fit_refuses(name, rng):
    """Keras' compiled step (JAX's `jax.jit`, TensorFlow's `tf.function`): the loss is NaN, and the `ValueError`
    comes from a metric's state at the end of the epoch."""
    assert np.isnan(_fit(LOSSES[name](), [], rng))
    with pytest.raises(ValueError, match=REFUSED):
        _fit(LOSSES[name](), [], rng, metrics=[InputCheck(from_logits=False)])


def test_compiled_fit_refuses_logits(rng):
    _compiled_fit_refuses("ols", rng)


@pytest.mark.slow  # two compiled fits per loss (about 1 s each); every loss reads y_pred through the door eagerly above
@pytest.mark.parametrize("name", sorted(set(LOSSES) - {"ols"}))
def test_every_compiled_loss_refuses_logits(name, rng):
    _compiled_fit_refuses(name, rng)


def test_compiled_fit_accepts_probabilities(rng):
    got = _fit(LOSSES["focal"](), [_ExpOfLogSoftmax()], rng, metrics=[InputCheck(from_logits=False)])
    assert np.isfinite(got)  # checked in the step, and passed


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("name", ["ils", "ols"])
def test_xla_gives_a_nan_loss_not_a_silent_one(name, rng):
    """Under XLA (Keras' default on a GPU) as in any compiled step, the refused batch's loss is NaN."""
    import tensorflow as tf

    loss = LOSSES[name]()
    compiled = tf.function(lambda y, p: loss(y, p), jit_compile=True)
    y = rng.integers(0, K, 8)
    assert np.isnan(float(compiled(y, _bad("logits", rng))))
    assert np.isfinite(float(compiled(y, _probabilities(rng))))


@pytest.mark.tensorflow_only
def test_a_softmax_output_costs_no_check_in_a_graph():
    """A softmax op's output is a distribution by construction: no check in the graph, as Keras reads it."""
    import tensorflow as tf

    def op_types(activation):  # the loss's graph on a softmax's output, or on another distribution
        @tf.function(input_signature=[tf.TensorSpec([8, K], tf.float32)])
        def loss(z):
            return LOSSES["focal"]()(tf.zeros([8], tf.int32), activation(z))

        return {op.type for op in loss.get_concrete_function().graph.get_operations()}

    check = {"StopGradient", "Abs"}  # the check's input and |row sum - 1|
    assert not check & op_types(tf.nn.softmax)
    assert check <= op_types(lambda z: tf.exp(tf.nn.log_softmax(z)))
