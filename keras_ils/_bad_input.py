"""Bad input found where no value can be read: counted on the device inside a compiled step, raised on the host.

A value check that raises needs the value on the host. Inside a compiled step (a JAX trace, a TensorFlow graph,
`torch.compile`) that takes a host callback or a conditional on device data, and either makes an accelerator wait for
the host at every step. So the package's checks (`keras_ils._labels`) call `report`, which raises at once where the
values are on the host and otherwise only counts, with arithmetic:

| where the values are                              | a check that fails                                           |
|---------------------------------------------------|--------------------------------------------------------------|
| numpy, eager tensors (any backend, and torch's    | `ValueError` at once                                         |
| `fit`, which Keras runs eagerly by default)       |                                                              |
| the package's `tf.data` maps (`keras_ils.data`)   | a `tf.debugging` assertion in the input pipeline:            |
|                                                   | `InvalidArgumentError` with the same text                    |
| a compiled step (JAX, TensorFlow `tf.function`    | a loss: the batch's loss values are NaN, and so are their    |
| with or without XLA, `torch.compile`), in a loss  | gradients (`loss: nan`, NaN weights: no silent training)     |
| the same, in a package metric (`keras_ils.metrics`| counted in the metric's state; `result()` raises the same    |
| and `InputCheck`, `keras_ils.conformal`'s)        | `ValueError` on the host, where Keras reads it: at the end   |
|                                                   | of every epoch and of `evaluate`                             |

Keras' trainers carry no state for a loss (`Model.compile` does not track the loss object, and the JAX trainer threads
only the model's, optimizer's and metrics' variables through its step), so a loss alone cannot say why its value is
NaN: a model compiled with a package metric, or with `keras_ils.metrics.InputCheck()`, gets the reason at the end of
the epoch.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import threading
import warnings
import weakref

import keras
import numpy as np
from keras import ops

try:  # Keras has no public test for its symbolic build's scope; without it, torch's placeholder build reads as eager
    from keras.src.backend.common.symbolic_scope import in_symbolic_scope
except ImportError:  # pragma: no cover - a Keras that moved it

    def in_symbolic_scope() -> bool:
        return False


__all__ = [
    "UncheckedLossWarning",
    "FRACTIONAL_LABELS",
    "LABELS_OUT_OF_RANGE",
    "NOT_ONE_HOT",
    "NOT_PROBABILITIES",
    "NOT_SET_MASKS",
    "CheckedMetric",
    "Found",
    "collecting",
    "poisons_bad_input",
    "report",
    "traced",
]

# What a compiled step counts, one slot each in a metric's state, with what it counts.
FRACTIONAL_LABELS, LABELS_OUT_OF_RANGE, NOT_ONE_HOT, NOT_PROBABILITIES, NOT_SET_MASKS = range(5)
_UNITS = ("labels", "labels", "rows", "rows", "rows")

_local = threading.local()


def traced(value) -> bool:
    """Whether `value` belongs to a compiled step or a symbolic build, where it has no value to read on the host.

    Keras' symbolic build (`compute_output_spec`) may run on placeholder values (torch's fills tensors with ones when
    its "meta" device fails): in its scope every value is a placeholder. Keras has no public test for that scope.
    """
    if isinstance(value, (np.ndarray, np.generic, numbers.Number)):
        return False
    if in_symbolic_scope():
        return True
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return isinstance(value, jax.core.Tracer)
    if backend == "tensorflow":
        import tensorflow as tf

        return not tf.executing_eagerly()
    if backend == "torch":
        import torch

        return torch.compiler.is_compiling() or getattr(getattr(value, "device", None), "type", None) == "meta"
    return False


class Found:
    """The bad input the checks of one compiled call counted: `{kind: count}` as tensors, with each kind's message."""

    def __init__(self):
        self.counts, self.messages = {}, {}

    def add(self, kind: int, message: str, bad) -> None:
        count = ops.sum(ops.cast(bad, "float32"))
        self.counts[kind] = self.counts[kind] + count if kind in self.counts else count
        self.messages[kind] = message

    def vector(self):
        """The counts as one float32 tensor, a slot per kind."""
        zero = ops.zeros((), "float32")
        return ops.stack([self.counts.get(kind, zero) for kind in range(len(_UNITS))])

    def poison(self, values):
        """`values` (a tensor or a structure of them), its floats NaN when anything was counted, else as they are.

        A product, so that a loss's gradients are NaN too: nothing trains on a bad batch.
        """
        if not self.counts:
            return values
        factor = ops.where(sum(self.counts.values()) > 0, float("nan"), 1.0)

        def poisoned(value):
            if not keras.backend.is_float_dtype(keras.backend.standardize_dtype(value.dtype)):
                return value
            return value * ops.cast(factor, value.dtype)

        return keras.tree.map_structure(poisoned, values)


@contextlib.contextmanager
def collecting():
    """A block whose checks in a compiled step count into the `Found` it yields (eager checks raise as always)."""
    stack = _local.__dict__.setdefault("stack", [])
    found = Found()
    stack.append(found)
    try:
        yield found
    finally:
        stack.pop()


def report(kind: int, message: str, bad, detail) -> None:
    """The one place a failed check goes: `ValueError(message + " " + detail())` now, or a count.

    `bad` is a boolean array, one entry per label or row, true where the check
    fails; `detail()` (called only to raise, on numpy copies the caller makes)
    says what was received. In a compiled step `bad` is counted into the
    innermost `collecting()` block; a check there outside any block is a bug
    of the package, refused when the step is traced.
    """
    if traced(bad):
        stack = _local.__dict__.get("stack")
        if not stack:
            raise RuntimeError(f"keras_ils: a check inside a compiled step has nowhere to report. {message}")
        stack[-1].add(kind, message, bad)
        return
    failed = np.any(bad) if isinstance(bad, np.ndarray) else ops.convert_to_numpy(ops.any(bad))
    if bool(failed):
        raise ValueError(f"{message} {detail()}")


class UncheckedLossWarning(UserWarning):
    """A package loss compiled into a model with no package metric: bad input in its steps can only make it NaN."""


_UNCHECKED = (
    "keras_ils: a loss of the package checks its inputs (labels in range and whole, teacher targets' one-hot half, "
    "probabilities) "
    "inside the compiled training step without waiting for the host, so bad input there makes the loss NaN but cannot "
    "raise by itself, and this model has no keras_ils metric to raise it. Add `keras_ils.metrics.InputCheck()` (or "
    "any keras_ils metric, e.g. `keras_ils.metrics.calibration_metrics(K)`) to `compile(metrics=...)`: bad input is "
    "then a ValueError naming it at the end of the epoch. (A model that runs eagerly raises at once.)"
)


_LIVE_CHECKED_METRICS = weakref.WeakSet()  # every package metric that exists: what a TensorFlow trace can know


def _warn_when_unchecked() -> None:
    """Warns, on the backends whose steps are compiled by default, when a package loss's model has no package metric.

    At a model's symbolic build (JAX, and TensorFlow under a strategy) Keras
    builds its metrics before its loss, so the loss knows; a TensorFlow
    `tf.function` traces the loss first, so there it warns only when no
    package metric exists at all (never wrongly, sometimes not at all).
    """
    backend = keras.backend.backend()
    if backend not in ("jax", "tensorflow"):
        return
    if in_symbolic_scope():
        unchecked = not _local.__dict__.pop("checked_build", False)
    else:
        unchecked = backend == "tensorflow" and not _LIVE_CHECKED_METRICS
    if unchecked:
        warnings.warn(_UNCHECKED, UncheckedLossWarning, stacklevel=4)


def poisons_bad_input(function):
    """Decorates a function of the package's inputs (a loss's per-example values, targets): its float outputs are NaN
    when its checks fail in a compiled step (eager calls raise as always).

    Traced, a decorated function with checks that is not called inside another
    one (a loss, not the targets it reads) warns `UncheckedLossWarning` when
    its model has no package metric to raise what its steps count
    (`_warn_when_unchecked`).
    """

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        outermost = not _local.__dict__.get("stack")
        with collecting() as found:
            result = function(*args, **kwargs)
        if outermost and found.counts:  # counts: the checks ran traced
            _warn_when_unchecked()
        return found.poison(result)

    return wrapper


class CheckedMetric(keras.metrics.Metric):
    """A metric that checks its inputs: what its steps count is in its state, and `result()` raises it on the host.

    Subclasses read their inputs inside `self.counting()` and compute their
    value in `_result()`. The count lives in a variable with a slot per
    kind, so it is summed over replicas, zeroed by `reset_state` with the
    rest of the state, and carried through Keras' JAX steps like any metric
    variable. Inside a compiled step `result()` is NaN while anything was
    counted; on the host (where Keras reads it at the end of every epoch and
    of `evaluate`, or a user's call) it raises the checks' `ValueError`.
    """

    def __init__(self, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self._bad_input = self.add_variable(
            shape=(len(_UNITS),), initializer="zeros", dtype="float32", name="bad_input"
        )
        self._bad_input_messages = {}
        _LIVE_CHECKED_METRICS.add(self)

    @contextlib.contextmanager
    def counting(self):
        """A block whose checks count into this metric's state (eager checks raise as always)."""
        with collecting() as found:
            yield found
        if in_symbolic_scope():  # the model's symbolic build: its package loss, built next, has a metric to raise
            _local.checked_build = True
        if found.counts:
            self._bad_input.assign_add(found.vector())
            self._bad_input_messages.update(found.messages)

    def result(self):
        value = self._result()
        counts = self._bad_input.value
        if traced(counts):
            return ops.where(ops.sum(counts) > 0, ops.cast(float("nan"), value.dtype), value)
        counts = np.asarray(ops.convert_to_numpy(counts))
        if counts.any():
            raise ValueError(self._bad_input_text(counts))
        return value

    def _bad_input_text(self, counts) -> str:
        since = f"read by the metric `{self.name}` since it was last reset (the start of an epoch or of `evaluate`)"
        return "\n".join(
            f"{self._bad_input_messages.get(kind, 'Invalid input.')} Received: {int(counts[kind])} such "
            f"{_UNITS[kind]} in the batches {since}."
            for kind in np.flatnonzero(counts)
        )
