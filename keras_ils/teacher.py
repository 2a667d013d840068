"""The teacher's side: logits computed once (with a disk cache), or the teacher online.

Cached path (the default): `compute_teacher_logits` runs the calibrated
teacher over the training set in one batched pass; `keras_ils.data.with_teacher_targets`
attaches the rows to the examples. Every student (every tuner trial) shares them.

The cached path reads its data through `tf.data` (arrays are made a
`tf.data.Dataset`), under every Keras backend: the teacher itself is a Keras
model of the chosen backend, fed numpy batches.

Online path: `OnlineTeacher` (`keras_ils.online_teacher`, TensorFlow-free,
re-exported here) wraps a student; the teacher runs inside each training step
on the very batch the student sees, so augmentation applied in the input
pipeline reaches both. It costs a teacher forward pass per step.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_ils import _labels
from keras_ils._checks import positive
from keras_ils._files import atomic_write
from keras_ils.data import as_pairs
from keras_ils.online_teacher import OnlineTeacher

__all__ = [
    "check_cache_data",
    "CACHE_FORMAT",
    "OnlineTeacher",
    "StaleCacheError",
    "TeacherLogits",
    "cache_teacher_logits",
    "compute_teacher_logits",
    "read_cache",
    "teacher_fingerprint",
]

CACHE_FORMAT = 1


class StaleCacheError(ValueError):
    """A teacher-logits cache that belongs to another dataset or teacher."""


class TeacherLogits(NamedTuple):
    """Calibrated teacher logits `[N, K]` with the labels `[N]` they were computed beside."""

    logits: np.ndarray
    labels: np.ndarray
    fingerprint: dict


def teacher_fingerprint(teacher: keras.Model, temperature: float = 1.0) -> str:
    """sha256 of the teacher's weights and the temperature dividing its logits."""
    digest = hashlib.sha256(repr(float(temperature)).encode())
    for weight in teacher.weights:
        digest.update(np.ascontiguousarray(ops.convert_to_numpy(weight)).tobytes())
    return digest.hexdigest()


def _dataset_pass(dataset, batch_size, teacher=None):
    """One pass over `dataset`: `(labels [N] int64, sha256 of features and labels in order, teacher outputs)`.

    The outputs are `None` without a teacher (a cache hit only needs the fingerprint).
    """
    digest, labels, outputs = hashlib.sha256(), [], []
    for x, y in dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE).as_numpy_iterator():  # numpy: any backend
        for array in tf.nest.flatten(x):
            digest.update(np.ascontiguousarray(array).tobytes())
        labels.append(y)
        if teacher is not None:
            outputs.append(np.asarray(teacher.predict_on_batch(x)))
    if not labels:
        raise ValueError("Argument `dataset` is empty.")
    labels = np.concatenate(labels).astype(np.int64)
    digest.update(labels.tobytes())
    return labels, digest.hexdigest(), np.concatenate(outputs) if outputs else None


def _fingerprint(labels, data_hash, num_classes, teacher_hash):
    return {
        "format": CACHE_FORMAT,
        "count": int(len(labels)),
        "num_classes": int(num_classes),
        "labels_sha256": hashlib.sha256(np.ascontiguousarray(labels, dtype=np.int64).tobytes()).hexdigest(),
        "data_sha256": data_hash,
        "teacher_sha256": teacher_hash,
    }


def read_cache(path: str) -> TeacherLogits:
    """Reads a teacher-logits cache; anything that is not one raises `StaleCacheError`."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            fingerprint = json.loads(str(stored["fingerprint"]))
            return TeacherLogits(stored["logits"], stored["labels"], fingerprint)
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise StaleCacheError(
            f"{path} is not a readable teacher-logits cache ({type(error).__name__}: {error}). "
            "Delete it or choose another cache path."
        ) from error


def check_cache_data(path: str, dataset: tf.data.Dataset, num_classes: int, batch_size: int = 256, **keys) -> None:
    """Refuses now, before any teacher trains, a cache at `path` that was made from other data or classes.

    The data part of the fingerprint (example count, classes, labels and
    features in order) is compared; the teacher's part can only be once the
    teacher exists (`compute_teacher_logits` does). Raises `StaleCacheError`.
    """
    cached = read_cache(path)
    labels, data_hash, _ = _dataset_pass(as_pairs(dataset, **keys), batch_size)
    expected = _fingerprint(labels, data_hash, num_classes, None)
    stale = [
        key
        for key in ("count", "num_classes", "labels_sha256", "data_sha256")
        if cached.fingerprint.get(key) != expected[key]
    ]
    if stale:
        raise StaleCacheError(
            f"{path} holds teacher logits of other data ({', '.join(stale)} differ from the training split's). "
            "Delete it or choose another cache path."
        )


def _load(path, expected):
    cached = read_cache(path)
    if cached.fingerprint != expected:
        differing = sorted(k for k in expected if cached.fingerprint.get(k) != expected[k])
        raise StaleCacheError(
            f"The teacher-logits cache {path} was computed for another dataset or teacher "
            f"(differs in: {', '.join(differing)}). Delete it or choose another cache path."
        )
    return cached


def _save(path, teacher_logits):
    fingerprint = np.array(json.dumps(teacher_logits.fingerprint, sort_keys=True))

    def write(file):
        np.savez(file, logits=teacher_logits.logits, labels=teacher_logits.labels, fingerprint=fingerprint)

    atomic_write(path, write)


def compute_teacher_logits(
    teacher: keras.Model,
    dataset: tf.data.Dataset,
    *,
    temperature: float = 1.0,
    batch_size: int = 256,
    cache_path: str | None = None,
    **keys,
) -> TeacherLogits:
    """The calibrated teacher's logits over a dataset, in one batched pass, optionally cached.

    Args:
        teacher: a Keras classifier returning logits; pass the calibrated one
            (`keras_ils.calibrate`) or the raw one with `temperature=T*`.
        dataset: UNBATCHED `(x, y)` or tfds-dict `tf.data.Dataset` in a fixed
            order (the order `with_teacher_targets` will see), or `(x, y)` arrays.
        temperature: the raw logits are divided by it. Defaults to `1.0`.
        batch_size: batch size of the pass. Defaults to `256`.
        cache_path: an `.npz` file. When it exists and its fingerprint (example
            count, class count, sha256 of the labels in order, sha256 of the
            features and labels in order, sha256 of the teacher's weights and
            temperature) matches, it is loaded instead of running the teacher;
            when it does not match, or is no cache at all, `StaleCacheError`.
            Written atomically (temporary file + rename).
        **keys: `image_key`/`label_key` for tfds dicts.

    Returns:
        `TeacherLogits(logits [N, K] float32, labels [N] int64, fingerprint)`.

    Example:

    >>> teacher = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    >>> ds = tf.data.Dataset.from_tensor_slices((np.ones((5, 2), "float32"), [0, 1, 2, 1, 0]))
    >>> computed = compute_teacher_logits(teacher, ds, temperature=2.0)
    >>> computed.logits.shape, computed.labels.tolist()
    ((5, 3), [0, 1, 2, 1, 0])
    """
    positive("temperature", temperature)
    dataset = _pairs(dataset, keys)
    teacher_hash = teacher_fingerprint(teacher, temperature)
    num_classes = teacher.output_shape[-1] if hasattr(teacher, "output_shape") else None

    if cache_path is not None and os.path.exists(cache_path):
        labels, data_hash, _ = _dataset_pass(dataset, batch_size)
        if num_classes is None:  # a subclassed teacher: read K from the cache itself
            num_classes = read_cache(cache_path).logits.shape[-1]
        return _load(cache_path, _fingerprint(labels, data_hash, num_classes, teacher_hash))

    labels, data_hash, logits = _dataset_pass(dataset, batch_size, teacher)
    if logits.ndim != 2 or logits.shape[1] < 2:
        raise ValueError(f"The teacher must output logits [batch, K >= 2]. It output shape {logits.shape[1:]}.")
    _labels.check_labels_in_range(labels, logits.shape[1])
    result = TeacherLogits(
        (logits / temperature).astype(np.float32),
        labels,
        _fingerprint(labels, data_hash, logits.shape[1], teacher_hash),
    )
    if cache_path is not None:
        _save(cache_path, result)
    return result


def _pairs(dataset, keys) -> tf.data.Dataset:
    """An unbatched `(x, y)` dataset of `dataset` (a dataset, tfds dicts, or `(x, y)` arrays)."""
    if isinstance(dataset, (tuple, list)):
        dataset = tf.data.Dataset.from_tensor_slices(tuple(dataset))
    dataset = as_pairs(dataset, **keys)
    if len(dataset.element_spec[1].shape) != 0:
        raise ValueError("Argument `dataset` must be unbatched, with scalar labels.")
    return dataset


def cache_teacher_logits(
    teacher: keras.Model,
    dataset: tf.data.Dataset,
    logits,
    *,
    temperature: float = 1.0,
    cache_path: str,
    batch_size: int = 256,
    **keys,
) -> TeacherLogits:
    """`compute_teacher_logits`' cache for calibrated logits computed elsewhere (e.g. by a vectorised trainer).

    The data are read once, for the cache's fingerprint (the teacher is not
    run); `cache_path` is written, or, when it exists, must match (else
    `StaleCacheError`) and is returned as `compute_teacher_logits` returns it.

    Args:
        teacher: the Keras teacher the logits are of (its weights and
            `temperature` are fingerprinted).
        dataset: the data, as `compute_teacher_logits` takes it.
        logits: `[N, K]` the teacher's logits over `dataset`, in order,
            divided by `temperature` already.
        temperature: the temperature they were divided by.
        cache_path: the `.npz` file.
        batch_size: batch size of the pass over the data.
        **keys: `image_key`/`label_key` for tfds dicts.

    Returns:
        `TeacherLogits(logits [N, K] float32, labels [N] int64, fingerprint)`.

    Example:

    >>> import tempfile
    >>> teacher = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    >>> x, y = np.ones((5, 2), "float32"), np.array([0, 1, 2, 1, 0])
    >>> path = os.path.join(tempfile.mkdtemp(), "teacher.npz")
    >>> logits = teacher.predict(x, verbose=0) / 2.0
    >>> written = cache_teacher_logits(teacher, (x, y), logits, temperature=2.0, cache_path=path)
    >>> read = compute_teacher_logits(teacher, (x, y), temperature=2.0, cache_path=path)  # a cache hit
    >>> read.fingerprint == written.fingerprint, np.allclose(read.logits, logits)
    (True, True)
    """
    positive("temperature", temperature)
    labels, data_hash, _ = _dataset_pass(_pairs(dataset, keys), batch_size)
    logits = np.asarray(logits, np.float32)
    if logits.shape != (len(labels), teacher.output_shape[-1]):
        raise ValueError(
            f"Argument `logits` must have shape [N, K] = {(len(labels), teacher.output_shape[-1])} (the data's "
            f"examples, the teacher's classes). Received shape: {logits.shape}"
        )
    _labels.check_labels_in_range(labels, logits.shape[1])
    fingerprint = _fingerprint(labels, data_hash, logits.shape[1], teacher_fingerprint(teacher, temperature))
    if os.path.exists(cache_path):
        return _load(cache_path, fingerprint)
    result = TeacherLogits(logits, labels, fingerprint)
    _save(cache_path, result)
    return result
