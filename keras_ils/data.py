"""`tf.data` integration: read `(x, y)` or tfds dicts, attach teacher targets, hard labels.

The maps here never call a Keras model (that would run on the CPU inside
`tf.data`): teacher logits are computed beforehand in one batched pass
(`keras_ils.teacher.compute_teacher_logits`) and attached by position.

Order of a training pipeline::

    source (unbatched, fixed order) -> with_teacher_targets -> cache -> shuffle -> augment -> batch -> prefetch

Attaching before shuffling is what guarantees that every example keeps its
own teacher row: the row travels inside the element from then on.

Backends: the maps (`as_pairs`, `with_teacher_targets`, `with_hard_labels`)
are TensorFlow: they run in `tf.data`, whatever `KERAS_BACKEND` is, and
their labels are checked there by `tf.debugging` assertions. Keras reads a
`tf.data.Dataset` under every backend (TensorFlow is a dependency of this
package), so a JAX or torch student trains on their output too.
`predict_with_labels` (behind `calibrate` and `evaluate`) is not TensorFlow:
it reads arrays, `tf.data`, a `keras.utils.PyDataset` or Python generators
on every backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras
import numpy as np
import tensorflow as tf
from keras import ops
from numpy.typing import ArrayLike

from keras_ils import _labels

if TYPE_CHECKING:
    from keras_ils.teacher import TeacherLogits

__all__ = ["as_pairs", "predict_with_labels", "with_hard_labels", "with_teacher_targets"]

_ATTACH_CHUNK = 256


def as_pairs(dataset: tf.data.Dataset, image_key: str = "image", label_key: str = "label") -> tf.data.Dataset:
    """Maps tfds dicts `{"image", "label"}` to `(x, y)` tuples; `(x, y)` datasets pass through.

    Raises:
        ValueError: when the elements carry no labels.

    Example:

    >>> ds = tf.data.Dataset.from_tensor_slices({"image": np.zeros((2, 3)), "label": [0, 1]})
    >>> [int(y) for _, y in as_pairs(ds)]
    [0, 1]
    """
    spec = dataset.element_spec
    if isinstance(spec, dict):
        if image_key not in spec or label_key not in spec:
            raise ValueError(
                f"The dataset yields dicts with keys {sorted(spec)}; expected `{image_key}` and `{label_key}` "
                "(set `image_key`/`label_key`). A dataset without labels cannot be used here."
            )
        return dataset.map(lambda element: (element[image_key], element[label_key]))
    if isinstance(spec, tuple) and len(spec) >= 2:
        return dataset if len(spec) == 2 else dataset.map(lambda x, y, *_: (x, y))
    raise ValueError(
        "The dataset must yield (x, y) pairs or tfds dicts with an image and a label; "
        f"it yields {spec}. A dataset without labels cannot be used here."
    )


def with_teacher_targets(
    dataset: tf.data.Dataset, teacher_logits: TeacherLogits | ArrayLike, **keys
) -> tf.data.Dataset:
    """Attaches a teacher row to every example: `(x, y)` becomes `(x, teacher_targets(y, row))`.

    A `tf.data` map: TensorFlow under every Keras backend (see the module
    docstring); without `tf.data`, build the targets with
    `keras_ils.teacher_targets(y, logits)` on arrays.

    Args:
        dataset: UNBATCHED `(x, y)` or tfds-dict dataset, in the order the
            teacher logits were computed (shuffle after this map, not before).
        teacher_logits: a `keras_ils.teacher.TeacherLogits` (its stored labels
            are checked against the dataset's, example by example, so a
            re-ordered source fails loudly) or a `[N, K]` array.
        **keys: `image_key`/`label_key` for tfds dicts.

    Returns:
        A dataset of `(x, y_teacher)` with `y_teacher` of shape `[2K]`, one
        element per example. Examples whose features all have a fixed shape
        are attached 256 at a time (batched, mapped, unbatched: a per-example
        map costs about seven times more), so a failed label check ends the
        iteration at the start of its chunk of 256.

    Example:

    >>> ds = tf.data.Dataset.from_tensor_slices((np.zeros((2, 1)), [1, 0]))
    >>> out = with_teacher_targets(ds, np.array([[0.0, 2.0], [1.0, -1.0]]))
    >>> [y.numpy().tolist() for _, y in out]
    [[0.0, 1.0, 0.0, 2.0], [1.0, 0.0, 1.0, -1.0]]
    """
    dataset = as_pairs(dataset, **keys)
    if len(dataset.element_spec[1].shape) != 0:
        raise ValueError(
            f"`dataset` must be unbatched with scalar labels; its labels have shape {dataset.element_spec[1].shape}. "
            "Attach teacher targets before `.batch()`."
        )
    logits = np.asarray(getattr(teacher_logits, "logits", teacher_logits), dtype=np.float32)
    stored_labels = getattr(teacher_logits, "labels", None)
    if logits.ndim != 2 or logits.shape[1] < 2:
        raise ValueError(f"Argument `teacher_logits` must have shape [N, K >= 2]. Received shape: {logits.shape}")
    count = int(dataset.cardinality())
    if count >= 0 and count != len(logits):
        raise ValueError(
            f"The dataset has {count} examples but `teacher_logits` has {len(logits)} rows: "
            "the teacher logits were computed on another dataset."
        )
    num_classes = logits.shape[1]
    rows = tf.data.Dataset.from_tensor_slices(
        (logits, np.asarray(stored_labels if stored_labels is not None else np.full(len(logits), -1), np.int64))
    )

    def attach(pair, row):  # one example, or a chunk of them (every tensor with a leading axis)
        (x, y), (teacher_row, stored_label) = pair, row
        y, checks = _labels.class_indices(y, num_classes)
        y = tf.cast(y, tf.int64)
        if stored_labels is not None:
            checks.append(
                tf.debugging.assert_equal(
                    y,
                    stored_label,
                    message="An example's label differs from the label stored with its teacher row: the dataset's "
                    "order changed since the teacher logits were computed (shuffle after attaching, not before).",
                )
            )
        with tf.control_dependencies(checks):
            return x, _labels.pack_teacher_targets(tf.one_hot(y, num_classes), teacher_row)

    paired = tf.data.Dataset.zip((dataset, rows))
    if not all(
        isinstance(spec, tf.TensorSpec) and spec.shape.is_fully_defined()
        for spec in tf.nest.flatten(dataset.element_spec[0])
    ):  # examples of different shapes: one at a time
        return paired.map(attach, num_parallel_calls=tf.data.AUTOTUNE)
    # fixed shapes: attached a chunk at a time (per-example maps cost ~7x more), then single examples again
    attached = paired.batch(_ATTACH_CHUNK).map(attach, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    return attached.apply(tf.data.experimental.assert_cardinality(count)) if count >= 0 else attached


def with_hard_labels(dataset: tf.data.Dataset, num_classes: int | None = None, **keys) -> tf.data.Dataset:
    """The validation/test twin of `with_teacher_targets`: `(x, int32 label)`.

    A `tf.data` map: TensorFlow under every Keras backend, its label checks
    `tf.debugging` assertions that run in the input pipeline.

    The same model compiled with `ILSLoss` accepts these sparse labels, and
    its loss on them is the cross-entropy against hard labels.

    Args:
        dataset: `(x, y)` or tfds-dict dataset, batched or not.
        num_classes: when given, labels outside `[0, num_classes)` raise.
            Float labels that are not whole numbers always raise.
        **keys: `image_key`/`label_key` for tfds dicts.

    Example:

    >>> ds = tf.data.Dataset.from_tensor_slices({"image": np.zeros((2, 3)), "label": [2, 0]})
    >>> [int(y) for _, y in with_hard_labels(ds, num_classes=3)]
    [2, 0]
    """

    def cast(x, y):
        y, checks = _labels.class_indices(y, num_classes)
        with tf.control_dependencies(checks):
            return x, tf.identity(y)

    return as_pairs(dataset, **keys).map(cast, num_parallel_calls=tf.data.AUTOTUNE)


def predict_with_labels(
    model: keras.Model, data: tf.data.Dataset | tuple, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Runs `model` over `(x, y)` data once and returns `(outputs, y)` as numpy, paired.

    Works on every Keras backend. `data` is one of:

    - a tuple (or list) `(x, y)` of arrays (`model.predict` batches `x`);
    - a `tf.data.Dataset` of `(x, y)` pairs or tfds dicts, batched or not
      (read as numpy, so JAX and torch models read it too);
    - a `keras.utils.PyDataset` or any other finite iterable of `(x, y)`
      batches: a Python generator, a `torch.utils.data.DataLoader`.

    A third element of a batch (sample weights) is ignored. Outputs and `y`
    come from the same pass, so a shuffling dataset can never mis-pair them.

    Example:

    >>> import keras
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
    if isinstance(data, tf.data.Dataset):
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
