"""Where the post-hoc fits' passes over the data run: on the Keras backend's own device, compiled by the backend.

The passes of the temperature fit (`_temperature_solver`), of the affine
maps (`_affine_passes`) and of ensemble temperature scaling are `keras.ops`
functions. `compiled` hands one to the backend's compiler (`jax.jit`, a
`tf.function`; torch and the other backends run it eagerly), and `tensor`
copies an array once to where the backend computes, so the passes run there:
under JAX on a GPU, on that GPU, with no TensorFlow imported and no second
framework holding its memory. No pass branches on device data: its loop
over blocks has a trip count fixed by the shapes, and the solvers' control
(Newton's steps, L-BFGS) stays on the host, reading a pass's few sums.

The passes sum over rows in float64. JAX has 64-bit types only where
`jax_enable_x64` is on, so `float64()` turns it on for the calls inside it
(JAX's thread-local `enable_x64` context) and does nothing on the other
backends: the package changes no global setting, and every backend computes
the same sums.

`blocked` lays rows out for a pass: on the CPU, blocks of rows that fit a
core's cache (a pass streams the data once); on an accelerator, one block per
transfer chunk. The last block is padded with rows of zeros, weighted 0.
"""

from __future__ import annotations

import contextlib
import functools
import math
import types
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

__all__ = [
    "HOST",
    "Layout",
    "accelerated",
    "blocked",
    "compiled",
    "float64",
    "layout",
    "numpy",
    "row_weights",
    "tensor",
]


def _jax_jit(function):
    import jax

    return jax.jit(function)


def _tf_function(function):
    import tensorflow as tf

    return tf.function(function, reduce_retracing=True)


def _jax_accelerated() -> bool:
    import jax

    return jax.default_backend() != "cpu"


def _tf_accelerated() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def _torch_accelerated() -> bool:
    import torch

    return torch.cuda.is_available()


def _tf_tensor(array):
    import tensorflow as tf

    return tf.identity(tf.convert_to_tensor(array))  # placed on the default device (a GPU), not left on the host


def _jax_float64():
    import jax

    enable = getattr(jax, "enable_x64", None)  # JAX >= 0.6; earlier, jax.experimental.enable_x64
    if enable is None:
        from jax.experimental import enable_x64 as enable
    return enable(True)


# what differs between the backends: the compiler, whether it computes on an accelerator, how an array gets there,
# and the scope of 64-bit types
_COMPILERS = {"jax": _jax_jit, "tensorflow": _tf_function}
_ACCELERATED = {"jax": _jax_accelerated, "tensorflow": _tf_accelerated, "torch": _torch_accelerated}
_TENSORS = {"tensorflow": _tf_tensor}
_FLOAT64 = {"jax": _jax_float64}


# the array functions of the passes' shared arithmetic, in NumPy: data that fit one block of a CPU pass are passed
# on the host (a compiled call would cost more in dispatch, and under JAX a compilation per shape)
HOST = types.SimpleNamespace(
    cast=lambda x, dtype: np.asarray(x, dtype),
    exp=np.exp,
    log=np.log,
    max=np.max,
    maximum=np.maximum,
    min=np.min,
    stack=np.stack,
    sum=np.sum,
    take_along_axis=np.take_along_axis,
)


def compiled(function):
    """`function` (of tensors) compiled by the backend: `jax.jit`, a `tf.function`, else itself (run eagerly)."""
    return _COMPILERS.get(keras.backend.backend(), lambda f: f)(function)


@functools.cache
def _accelerated(backend: str) -> bool:
    return _ACCELERATED.get(backend, lambda: False)()


def accelerated() -> bool:
    """Whether the backend computes on an accelerator (a GPU or TPU)."""
    return _accelerated(keras.backend.backend())


def tensor(array):
    """`array` copied once to where the backend computes."""
    return _TENSORS.get(keras.backend.backend(), ops.convert_to_tensor)(array)


def numpy(value) -> np.ndarray:
    """A tensor's value on the host."""
    return ops.convert_to_numpy(value)


def float64():
    """The scope in which the passes' float64 tensors exist: JAX's `enable_x64` context, else nothing to do."""
    return _FLOAT64.get(keras.backend.backend(), contextlib.nullcontext)()


class Layout(NamedTuple):
    """How `count` rows are cut for a pass: blocks of `rows` rows, `blocks` of them per chunk (one tensor)."""

    count: int
    rows: int
    blocks: int


def layout(count: int, rows: int, blocks: int) -> Layout:
    """Blocks of `rows` rows (all `count` in one block when they fit), at most `blocks` blocks per chunk."""
    rows = max(1, min(rows, count))
    return Layout(count, rows, max(1, min(blocks, math.ceil(count / rows))))


def blocked(array, axis: int, cut: Layout) -> list:
    """`array`'s chunks along `axis`, each with that axis split into `[blocks, rows]`; the last block padded with
    zero rows (numpy views but for the last chunk)."""
    per_chunk = cut.rows * cut.blocks
    parts = np.split(array, range(per_chunk, cut.count, per_chunk), axis=axis)
    last = parts[-1]
    missing = -last.shape[axis] % cut.rows
    if missing:
        shape = list(last.shape)
        shape[axis] = missing
        parts[-1] = np.concatenate([last, np.zeros(shape, last.dtype)], axis=axis)
    return [part.reshape(part.shape[:axis] + (-1, cut.rows) + part.shape[axis + 1 :]) for part in parts]


def row_weights(cut: Layout) -> list:
    """`blocked`'s chunks of a row weight: `[blocks, rows]` float32, 1 for a row of the data, 0 for padding."""
    return blocked(np.ones(cut.count, np.float32), 0, cut)
