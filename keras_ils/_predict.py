"""`predict_with_labels`: a model's outputs over `(x, y)` data with the labels beside them, on every backend.

TensorFlow-free: a `tf.data.Dataset` is read through `keras_ils.data` only when
one is given (which means TensorFlow is imported already); arrays, a
`keras.utils.PyDataset` and Python iterables need no TensorFlow. Public as
`keras_ils.data.predict_with_labels`; `calibrate`, `evaluate` and
`conformalize` read their data through it.
"""

from __future__ import annotations

import sys

import keras
import numpy as np
from keras import ops

__all__ = ["predict_with_labels"]


def predict_with_labels(model: keras.Model, data, batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Runs `model` over `(x, y)` data once and returns `(outputs, y)` as numpy, paired.

    Works on every Keras backend. `data` is one of:

    - a tuple (or list) `(x, y)` of arrays (batched by `batch_size`);
    - a `tf.data.Dataset` of `(x, y)` pairs or tfds dicts, batched or not
      (read as numpy, so JAX and torch models read it too);
    - a `keras.utils.PyDataset` or any other finite iterable of `(x, y)`
      batches: a Python generator, a `torch.utils.data.DataLoader`.

    A third element of a batch (sample weights) is ignored. Outputs and `y`
    come from the same pass, so a shuffling dataset can never mis-pair them.

    Example:

    >>> import keras
    >>> import tensorflow as tf
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    >>> ds = tf.data.Dataset.from_tensor_slices((np.zeros((5, 2)), [0, 1, 2, 1, 0])).shuffle(5)
    >>> outputs, labels = predict_with_labels(model, ds.batch(2))
    >>> outputs.shape, sorted(labels.tolist())
    ((5, 3), [0, 0, 1, 1, 2])
    >>> batches = ((np.zeros((2, 2)), np.array([i, i])) for i in range(3))   # a generator
    >>> predict_with_labels(model, batches)[1].tolist()
    [0, 0, 1, 1, 2, 2]
    """
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise ValueError("Argument `data` must be (x, y) or a dataset of (x, y) batches.")
        x, y = data
        size = len(keras.tree.flatten(x)[0])
        rows = [slice(start, start + batch_size) for start in range(0, size, batch_size)]
        outputs = [_called(model, keras.tree.map_structure(lambda a, r=r: a[r], x)) for r in rows]
        if not outputs:
            raise ValueError("Argument `data` is empty.")
        return np.concatenate(outputs), _numpy(y)
    tf = sys.modules.get("tensorflow")  # a tf.data.Dataset exists only where TensorFlow was imported
    if tf is not None and isinstance(data, tf.data.Dataset):
        from keras_ils.data import as_pairs

        data = as_pairs(data)
        if len(data.element_spec[1].shape) == 0:
            data = data.batch(batch_size)
        data = data.as_numpy_iterator()
    elif isinstance(data, keras.utils.PyDataset) and data.num_batches is None:
        raise ValueError("Argument `data` must be finite. Received: a PyDataset with `num_batches=None`.")
    elif isinstance(data, (np.ndarray, str, bytes, dict)) or ops.is_tensor(data) or not hasattr(data, "__iter__"):
        raise TypeError(
            "Argument `data` must be a tuple (x, y), a tf.data.Dataset, a keras.utils.PyDataset or an iterable of "
            f"(x, y) batches. Received: {type(data).__name__}"
        )
    outputs, ys = [], []
    for batch in data:
        if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
            raise ValueError(
                "Argument `data` must yield (x, y) or (x, y, sample_weight) batches. "
                f"Received: a batch of type {type(batch).__name__}"
            )
        outputs.append(_called(model, batch[0]))
        ys.append(_numpy(batch[1]))
    if not outputs:
        raise ValueError("Argument `data` is empty.")
    return np.concatenate(outputs), np.concatenate(ys)


def _called(model, x) -> np.ndarray:
    """`model`'s outputs on one batch, as numpy, by an eager call (`training=False`): no `tf.function` is traced
    per model, so a loop over many models (the main job scores dozens) neither retraces nor warns that it does."""
    return np.asarray(ops.convert_to_numpy(model(x, training=False)))


def _numpy(values) -> np.ndarray:
    """Labels of any backend (or a `tf.Tensor`, a CPU `torch.Tensor`, a list) as numpy."""
    return np.asarray(ops.convert_to_numpy(values) if ops.is_tensor(values) else values)
