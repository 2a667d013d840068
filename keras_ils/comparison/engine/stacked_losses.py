"""Every slot's loss on its own mini-batch, computed by the library's functional forms of the models' Keras losses.

Each model trains with a Keras loss that has a functional form
(`keras_ils.losses.functional_form`: the package's losses, Keras' function
wrappers, yours with a `functional_form()` method); none given, cross-entropy
against its targets (`ILSLoss(method="none")`'s form). The models of one
`train_mlps` call whose forms share a function and their non-number settings
make a `Branch`: its number settings that differ between its models are
columns of the pool's loss-parameter matrix, given to the function as
`[slots, 1, 1]` tensors, the others as they are. Every branch's function
runs on every slot's batch (`y_true`, `logits` `[slots, m, K]`), and each
slot keeps its own branch's value (so a slot's loss, and its gradient, are
its branch's exactly): the mean over the batch of the function, plus the
form's batch term (MMCE's, MDCA's penalty, of the slot's own batch). A form
with an `EpochState` (OLS's soft labels) has its state in the pool, one per
slot: its statistics are summed over an epoch's steps and the state updated
at the epoch's end, as `OnlineLabelSmoothingCallback` does for `model.fit`.

A form with `targets` (ILS's, distillation's: targets made from the labels
alone) is trained on them: `model_targets` makes them once, before training.
Each slot's loss equals its Keras loss on the same batch, in value and
gradient (tests/comparison/engine/test_stacked_losses.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from keras_ils.losses import ILSLoss, functional_form

__all__ = ["Branch", "StackedLosses", "batch_losses", "model_targets", "next_state", "stack", "statistics"]


class Branch(NamedTuple):
    """The models of a `train_mlps` call whose losses share a function (and their non-number settings).

    Attributes:
        function: the forms' `function`.
        settings: `((name, value), ...)` its arguments that its models share.
        columns: `((name, column), ...)` its number arguments that differ:
            their column in the loss-parameter matrix.
        batch_term: `(term, settings, columns)` of the forms' batch term, or `None`.
        state: the names of its `EpochState` arguments (`()`: none).
        statistics, update: the `EpochState`'s functions, or `None`.
    """

    function: Callable[..., Any]
    settings: tuple
    columns: tuple
    batch_term: tuple | None = None
    state: tuple[str, ...] = ()
    statistics: Callable[..., tuple] | None = None
    update: Callable[..., dict] | None = None


class StackedLosses(NamedTuple):
    """What `stack` makes of the models' losses: the branches, the loss-parameter matrix, the initial state.

    Attributes:
        branches: the `Branch`es, a setting of the epoch's compiled function.
        parameters: `[models, P]` float32: each model's branch (column 0,
            when there are several), then every branch's differing numbers
            (a model outside a branch holds its first model's values).
        state: `{key: [models, ...]}` float32 initial values of the branches'
            `EpochState` arguments (`state_key`).
    """

    branches: tuple[Branch, ...]
    parameters: np.ndarray
    state: dict


def state_key(branch: int, name: str) -> str:
    """The pool-state key of branch `branch`'s `EpochState` argument `name`."""
    return f"loss_state_{branch}_{name}"


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))


def _signature(form) -> tuple:
    """What the models of one branch share: the functions, their non-number settings, their number settings' names."""

    def part(function, arguments):
        shared = tuple(sorted((n, v) for n, v in arguments.items() if not _is_number(v)))
        return function, shared, tuple(sorted(n for n, v in arguments.items() if _is_number(v)))

    term = part(*form.batch_term) if form.batch_term is not None else None
    state = (tuple(form.state.initial), form.state.statistics, form.state.update) if form.state else ((), None, None)
    return part(form.function, form.arguments), term, state


def _forms(losses, num_models: int) -> list:
    """The functional forms of `losses` (`None`: every model's is cross-entropy against its targets), checked."""
    if losses is None:
        return [functional_form(ILSLoss(method="none"))] * num_models
    if len(losses) != num_models:
        raise ValueError(f"Argument `losses` must hold one loss per model ({num_models}). Received: {len(losses)}")
    forms = [functional_form(loss) for loss in losses]
    for loss, form in zip(losses, forms, strict=True):
        if form.arguments.get("from_logits", True) is not True:
            raise ValueError(f"Argument `losses`: the engine's models output logits; {loss!r} reads probabilities.")
    return forms


def stack(losses: Sequence | None, num_models: int) -> StackedLosses:
    """The branches, loss-parameter matrix and initial state of each model's loss (`None`: cross-entropy).

    Example:

    >>> from keras_ils.losses import FocalLoss, MMCELoss
    >>> stacked = stack([FocalLoss(gamma=1.0), FocalLoss(gamma=3.0), MMCELoss(weight=2.0)], 3)
    >>> [branch.function.__name__ for branch in stacked.branches], stacked.parameters.tolist()
    (['focal_crossentropy', 'ils_crossentropy'], [[0.0, 1.0], [0.0, 3.0], [1.0, 1.0]])
    """
    forms = _forms(losses, num_models)
    signatures = [_signature(form) for form in forms]
    kinds = list(dict.fromkeys(signatures))
    matrix = [np.asarray([[kinds.index(s)] for s in signatures], np.float32)] if len(kinds) > 1 else []
    branches, state = [], {}
    for index, signature in enumerate(kinds):
        members = [row for row, s in enumerate(signatures) if s == signature]
        first = forms[members[0]]
        main = _split([forms[row].arguments for row in members], members, matrix, num_models)
        term = None
        if first.batch_term is not None:
            arguments = [forms[row].batch_term[1] for row in members]
            term = (first.batch_term[0], *_split(arguments, members, matrix, num_models))
        names, functions = (), (None, None)
        if first.state is not None:
            names, functions = tuple(first.state.initial), tuple(first.state[1:])
            for name in names:
                initial = np.repeat(np.asarray(first.state.initial[name], np.float32)[None], num_models, axis=0)
                initial[members] = [np.asarray(forms[row].state.initial[name], np.float32) for row in members]
                state[state_key(index, name)] = initial
        branches.append(Branch(first.function, *main, term, names, *functions))
    parameters = np.concatenate(matrix, axis=1) if matrix else np.zeros((num_models, 0), np.float32)
    return StackedLosses(tuple(branches), parameters, state)


def _split(arguments, members, matrix, num_models) -> tuple:
    """`(settings, columns)` of a branch's arguments (one dict per member): a number that differs between members
    becomes a new column appended to `matrix` (the other models hold the first member's value), the rest settings."""
    settings, columns, first = [], [], arguments[0]
    for name in sorted(first):
        if not _is_number(first[name]) or all(values[name] == first[name] for values in arguments):
            settings.append((name, first[name]))
            continue
        column = np.full((num_models, 1), first[name], np.float32)
        column[members, 0] = [values[name] for values in arguments]
        columns.append((name, sum(block.shape[1] for block in matrix)))
        matrix.append(column)
    return tuple(settings), tuple(columns)


def _call(function, settings, columns, parameters, y_true, logits, **state):
    """`function` on the batch with the shared settings and each slot's differing numbers (`[slots, 1, 1]`)."""
    stacked = {name: parameters[:, column][:, None, None] for name, column in columns}
    return function(y_true, logits, **dict(settings), **stacked, **state)


def _branch_state(branch, index, state) -> dict:
    return {name: state[state_key(index, name)] for name in branch.state}


@tf.autograph.experimental.do_not_convert  # plain Python over the branches: tracing it as is is faster
def batch_losses(y_true, logits, parameters, state, branches) -> tf.Tensor:
    """`[slots]` each slot's loss on its batch: `y_true` `[slots, m, W]`, `logits` `[slots, m, K]`, `parameters`
    `[slots, P]` and `state` (the pool's) as `stack` made them for `branches`."""
    values, means = [], {}
    for index, branch in enumerate(branches):
        own = _branch_state(branch, index, state)
        key = (branch.function, *branch[1:3], index if own else None)  # branches that differ in their batch term alone
        if key not in means:  # share their mean (MMCE's and MDCA's cross-entropy)
            means[key] = tf.reduce_mean(_call(branch.function, *branch[1:3], parameters, y_true, logits, **own), -1)
        value = means[key]
        if branch.batch_term is not None:
            value += tf.squeeze(_call(*branch.batch_term, parameters, y_true, logits), axis=-1)
        values.append(value)
    loss = values[-1]
    for index in range(len(values) - 2, -1, -1):  # each slot its own branch's value
        loss = tf.where(tf.equal(parameters[:, 0], float(index)), values[index], loss)
    return loss


@tf.autograph.experimental.do_not_convert  # plain Python over the branches: tracing it as is is faster
def statistics(y_true, logits, branches) -> list:
    """`[per stateful branch: tuple of its statistics]` of the batch (`EpochState.statistics`), for every slot."""
    return [list(branch.statistics(y_true, logits)) for branch in branches if branch.statistics is not None]


@tf.autograph.experimental.do_not_convert  # plain Python over the branches: tracing it as is is faster
def next_state(summed, state, branches) -> dict:
    """`{key: value}` of the stateful branches' `EpochState` arguments for the next epoch, from the epoch's `summed`
    statistics (`statistics`' layout)."""
    updated, stateful = {}, iter(summed)
    for index, branch in enumerate(branches):
        if branch.update is not None:
            values = branch.update(tuple(next(stateful)), **_branch_state(branch, index, state))
            updated.update({state_key(index, name): value for name, value in values.items()})
    return updated


def model_targets(loss, y_true, num_classes: int) -> np.ndarray:
    """`[n, W]` float32: what a model trained with `loss` reads per example, made once: the targets its form makes
    from `y_true` (`FunctionalForm.targets`: ILS's, distillation's), or `y_true` (one-hot rows or teacher targets).

    Example:

    >>> model_targets(ILSLoss(method="ls", epsilon=0.3), np.eye(3, dtype="float32")[[0]], 3).round(2).tolist()
    [[0.8, 0.1, 0.1]]
    """
    form = functional_form(loss)
    made = y_true if form.targets is None else form.targets(y_true, num_classes)
    return np.asarray(made, np.float32)
