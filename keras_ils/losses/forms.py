"""A loss as plain functions of a batch: what a trainer of many models at once evaluates (`functional_form`).

A Keras loss object computes one model's loss. A trainer that steps many
models side by side (the vectorised engine of `keras_ils.comparison`: a
leading models axis, `y_pred` `[M, batch, K]`) needs the function behind it,
its settings, and the parts that are not a mean over examples. A loss's
`FunctionalForm` says so, and `functional_form(loss)` finds it:

- the package's losses (`ILSLoss`, `FocalLoss`, `MarginLabelSmoothingLoss`,
  `MMCELoss`, `MDCALoss`, `OnlineLabelSmoothing`,
  `keras_ils.distillation.DistillationCrossEntropy`) give theirs
  (`loss.functional_form()`);
- a loss of your own gives its own the same way: a `functional_form()`
  method returning a `FunctionalForm`;
- Keras' built-in losses that wrap a function (`keras.losses.CategoricalCrossentropy`,
  `CategoricalFocalCrossentropy`, ...: a callable `fn` attribute) are that
  function with the settings of their config;
- other losses have none (`TypeError`): a trainer steps them one model at a
  time, with `model.fit`.

The functions broadcast: `y_pred` may carry leading axes, and a setting may
hold one value per model, `[M, 1, 1]`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import keras

__all__ = ["EpochState", "FunctionalForm", "functional_form"]

# a loss config's entries that are not arguments of its function
_NOT_ARGUMENTS = ("name", "reduction", "dtype", "fn")


class EpochState(NamedTuple):
    """Settings of a loss that it learns from its own training, once an epoch (OLS's soft labels).

    Attributes:
        initial: `{argument: value}` now, e.g. `{"soft_labels": [K, K]}`.
        statistics: `(y_true, y_pred) -> tuple` of a batch's statistics
            (one value per leading index of `y_pred`), summed over an epoch's
            batches; their shapes do not depend on the batch's size.
        update: `(statistics, **current) -> {argument: value}`, the values
            for the next epoch from the epoch's summed statistics.
    """

    initial: Mapping[str, Any]
    statistics: Callable[..., tuple]
    update: Callable[..., dict]


class FunctionalForm(NamedTuple):
    """A loss as plain functions: its value on a batch is the mean over examples of `function` plus `batch_term`.

    Per example, the loss is `function(y_true, y_pred, **arguments)` plus,
    when there is one, `batch_term`'s function of the same batch (one value
    per batch that every example carries: MMCE's, MDCA's penalty), so that
    its mean over the batch is `mean(function) + batch_term`.

    Attributes:
        function: `(y_true, y_pred, **arguments) -> [..., batch]`.
        arguments: `{name: value}`: the loss's settings (numbers, strings,
            booleans), and the `EpochState` ones.
        batch_term: `(term, term_arguments)`, `term(y_true, y_pred,
            **term_arguments) -> [..., 1]`; or `None`.
        targets: `(y_true, num_classes) -> [..., K]` for a loss that is
            `function` applied to targets that depend on `y_true` alone
            (one-hot or soft rows `[..., K]`, or teacher targets `[..., 2K]`):
            ILS's, distillation's, which a trainer computes once; or `None`
            (`function` reads `y_true`).
        state: the settings the loss learns once an epoch (`EpochState`),
            or `None`.

    Example:

    >>> import numpy as np
    >>> from keras_ils.losses import FocalLoss
    >>> form = functional_form(FocalLoss(gamma=2.0))
    >>> form.function.__name__, form.arguments
    ('focal_crossentropy', {'gamma': 2.0, 'from_logits': True})
    >>> logits = np.log([[[0.6, 0.3, 0.1]], [[0.6, 0.3, 0.1]]])   # two models, one example each
    >>> gamma = np.array([0.0, 2.0]).reshape(2, 1, 1)   # one gamma per model
    >>> values = form.function(np.eye(3)[[[0], [0]]], logits, gamma=gamma)
    >>> np.round(keras.ops.convert_to_numpy(values), 4).tolist()   # -log 0.6, then (1 - 0.6)^2 * -log 0.6
    [[0.5108], [0.0817]]
    """

    function: Callable[..., Any]
    arguments: Mapping[str, Any]
    batch_term: tuple[Callable[..., Any], Mapping[str, Any]] | None = None
    targets: Callable[[Any, int], Any] | None = None
    state: EpochState | None = None


def functional_form(loss: keras.losses.Loss) -> FunctionalForm:
    """The `FunctionalForm` of `loss`: its `functional_form()`, or a Keras loss's `fn` and config.

    Args:
        loss: a `keras.losses.Loss`.

    Returns:
        Its `FunctionalForm`.

    Raises:
        TypeError: for a loss that has none (a `keras.losses.Loss` subclass
            with its own `call` and no `functional_form` method).

    Example:

    >>> form = functional_form(keras.losses.CategoricalFocalCrossentropy(gamma=3.0, from_logits=True))
    >>> form.function.__name__, form.arguments["gamma"], form.arguments["from_logits"]
    ('categorical_focal_crossentropy', 3.0, True)
    """
    own = getattr(loss, "functional_form", None)
    if callable(own):
        return own()
    if isinstance(loss, keras.losses.Loss) and callable(getattr(loss, "fn", None)):  # Keras' function wrappers
        config = loss.get_config()
        return FunctionalForm(loss.fn, {name: value for name, value in config.items() if name not in _NOT_ARGUMENTS})
    raise TypeError(
        "Argument `loss` must have a functional form: a `functional_form()` method returning a "
        f"keras_ils.losses.FunctionalForm, or a Keras loss wrapping a function (`fn`). Received: loss={loss!r}"
    )
