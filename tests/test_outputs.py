"""keras_ils._outputs: the kind of a classifier's outputs, read from the model or checked against a declaration."""

import keras
import numpy as np
import pytest

from keras_ils import _outputs


def _dense_softmax():
    return keras.layers.Dense(3, activation="softmax")


def _models_ending_in_softmax():
    inputs = keras.Input((4,))
    functional = keras.Model(inputs, _dense_softmax()(keras.layers.Dense(5)(inputs)))
    outer_inputs = keras.Input((4,))
    return {
        "sequential dense": keras.Sequential([keras.Input((4,)), _dense_softmax()]),
        "softmax layer": keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Softmax()]),
        "activation layer": keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(3), keras.layers.Activation("softmax")]
        ),
        "functional": functional,
        "nested sequential": keras.Sequential([keras.Input((4,)), functional]),
        "nested functional": keras.Model(outer_inputs, functional(outer_inputs)),
    }


@pytest.mark.parametrize("name", sorted(_models_ending_in_softmax()))
def test_models_ending_in_softmax_are_read_as_probabilities(name):
    model = _models_ending_in_softmax()[name]
    outputs = model.predict(np.random.default_rng(0).normal(size=(8, 4)), verbose=0)
    assert _outputs.model_ends_in_softmax(model)
    assert _outputs.model_from_logits(model, outputs, None) is False


def test_logit_models_are_read_as_logits():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    outputs = model.predict(np.random.default_rng(0).normal(size=(8, 4)), verbose=0)
    assert not _outputs.model_ends_in_softmax(model)
    assert _outputs.model_from_logits(model, outputs, None) is True


def test_a_subclassed_model_is_read_from_its_values():
    class Probabilities(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return keras.ops.softmax(self.dense(x))

    model = Probabilities()
    outputs = keras.ops.convert_to_numpy(model(np.ones((5, 4))))
    assert not _outputs.model_ends_in_softmax(model)
    assert _outputs.model_from_logits(model, outputs, None) is False


def test_a_declaration_that_the_values_contradict_is_refused():
    softmax = _models_ending_in_softmax()["sequential dense"]
    outputs = softmax.predict(np.ones((4, 4)), verbose=0)
    with pytest.raises(ValueError, match="declared as logits .* Pass `from_logits=False`"):
        _outputs.model_from_logits(softmax, outputs, True)
    with pytest.raises(ValueError, match="declared as probabilities .* Pass `from_logits=True`"):
        _outputs.check_outputs_kind(np.array([[2.0, -1.0], [0.5, 0.5]]), from_logits=False, name="logits")
    with pytest.raises(TypeError, match="`from_logits` must be True, False or None"):
        _outputs.model_from_logits(softmax, outputs, "yes")


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([[0.2, 0.8], [1.0, 0.0]], True),
        ([[0.2, 0.795]], True),  # within the tolerance (bfloat16 softmax rounds by up to 0.4 %)
        ([[0.2, 0.7]], False),  # sums to 0.9
        ([[1.2, -0.2]], False),  # sums to 1, outside [0, 1]
        ([[2.0, -1.0]], False),
        (np.zeros((0, 3)), False),
    ],
)
def test_is_distribution(rows, expected):
    assert _outputs.is_distribution(np.asarray(rows, dtype=np.float64)) is expected
