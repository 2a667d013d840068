import keras
import pytest

from keras_ils import models


def test_mlp_is_the_papers_network():
    model = models.mlp(num_classes=3, input_shape=(2,))
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert [layer.units for layer in dense] == [64] * 5 + [3]
    assert all(layer.activation is keras.activations.relu for layer in dense[:-1])
    assert dense[-1].activation is keras.activations.linear  # logits
    assert model.count_params() == (2 * 64 + 64) + 4 * (64 * 64 + 64) + (64 * 3 + 3)


def test_bad_class_count():
    with pytest.raises(ValueError, match="Invalid value for argument `num_classes`"):
        models.mlp(num_classes=1, input_shape=(2,))
