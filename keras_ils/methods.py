"""The registry of comparison methods: one entry per method, read by everything that lists or trains methods.

An entry (`Method`) says what the method is called, how to build its loss,
which hyperparameters it tunes over which grids, whether its targets read a
teacher, and whether the vectorised engine of `keras_ils.comparison` can
train it. The command's `--methods`, the main job, the engine, the KerasTuner
hypermodel (`keras_ils.tuning`) and the paper-table runner read this registry;
nothing else lists method names. Adding a method is one loss plus one
`register(Method(...))`.

| id        | name    | loss                                          | tuned              | teacher           |
|-----------|---------|-----------------------------------------------|--------------------|-------------------|
| `none`    | No LS   | `ILSLoss("none")`                             | -                  | -                 |
| `dis`     | Dis     | `DistillationCrossEntropy(1, 1, 1)`           | -                  | calibrated        |
| `cls`     | cLS     | `ILSLoss("ils2")` on class-similarity rows    | eps (LS's)         | class similarity  |
| `bs_soft` | BS_Soft | `BootstrapSoftLoss(beta=0.95)`                | -                  | -                 |
| `beta`    | Beta    | `BetaSmoothingLoss(alpha=0.4, a from eps)`    | eps (LS's)         | -                 |
| `ls`      | LS      | `ILSLoss("ls")`                               | eps                | -                 |
| `ils1`    | ILS1    | `ILSLoss("ils1")`                             | P1 x P2            | calibrated        |
| `ils2`    | ILS2    | `ILSLoss("ils2")`                             | eps x T            | calibrated        |
| `ils`     | ILS     | `ILSLoss("ils")`                              | P1 x P2 x T        | calibrated        |
| `focal`   | Focal   | `FocalLoss(gamma)`                            | gamma              | -                 |
| `flsd53`  | FLSD-53 | `FocalLoss(gamma="flsd53")`                   | -                  | -                 |
| `mbls`    | MbLS    | `MarginLabelSmoothingLoss(margin, alpha=0.1)` | margin             | -                 |
| `mmce`    | MMCE    | `MMCELoss(weight)`                            | weight             | -                 |
| `mdca`    | MDCA    | `MDCALoss(beta)`                              | beta               | -                 |
| `ols`     | OLS     | `OnlineLabelSmoothing(K, alpha)` + callback   | alpha              | -                 |

The calibration losses after ILS (Focal to OLS) are the peers a user compares
ILS with; their grids are their authors' (the same for `"paper"` and
`"synthetic"`). The vectorised engine of `keras_ils.comparison` trains every
method whose loss has a functional form (`Method.engine`,
`keras_ils.losses.functional_form`: all but BS_Soft and Beta,
`ids(engine=False)`), through that form; in `model.fit`, OLS's loss needs its
`OnlineLabelSmoothingCallback` (`Method.callbacks`).

Example:

>>> get("ils").name, get("ils").hyperparameters
('ILS', ('p1', 'p2', 'temperature'))
>>> get("ils1").grid("paper")["p1"]
(0.975, 0.95, 0.925, 0.9, 0.85)
>>> type(get("beta").loss(num_classes=10, epsilon=0.1)).__name__
'BetaSmoothingLoss'

Registering your own method (a loss plus its grid) makes it a choice of
`keras-ils run --methods` and of `keras_ils.tuning.ILSHyperModel`:

```python
keras_ils.methods.register(
    keras_ils.methods.Method(
        id="keras_focal",
        name="Keras focal",
        make_loss=lambda num_classes, gamma: keras.losses.CategoricalFocalCrossentropy(gamma=gamma, from_logits=True),
        hyperparameters=("gamma",),
        grids={"paper": {"gamma": (1.0, 2.0, 3.0)}},
    )
)
```

A loss with a functional form (Keras' function-wrapping losses, as here, or
yours with a `functional_form()` method) is trained by the vectorised engine
where `run` uses it, with no other edit.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal

import keras

from keras_ils import baselines, distillation, losses, targets
from keras_ils._checks import invalid
from keras_ils.losses import ILSLoss

__all__ = [
    "GRID_NAMES",
    "Method",
    "TeacherSource",
    "get",
    "ids",
    "lender",
    "make_search_space",
    "register",
    "unregister",
]

TeacherSource = Literal["calibrated", "class_similarity"]
GRID_NAMES = ("paper", "synthetic")

# The paper's grids (§5 and appendix A) of the hyperparameters the ILS family shares.
_SYNTHETIC_EPSILONS = (0.001, 0.005, 0.01) + tuple(round(0.03 + 0.02 * i, 3) for i in range(9))
_PAPER_GRIDS = {
    "paper": {
        "epsilon": (0.01, 0.05, 0.1, 0.15, 0.2),
        "p1": (0.975, 0.95, 0.925, 0.9, 0.85),
        "p2": (0.75, 1.0, 1.25, 1.5, 2.0),
        "temperature": (1.0, 2.0, 4.0, 8.0, 16.0),
    },
    "synthetic": {
        "epsilon": _SYNTHETIC_EPSILONS,
        "p1": (0.75, 0.775, 0.8, 0.825, 0.85),
        "p2": (0.75, 1.0, 1.25, 1.5, 1.75, 2.0),
        "temperature": (1.0, 2.0, 4.0, 6.0),
    },
}


@dataclasses.dataclass(frozen=True)
class Method:
    """One comparison method: its names, its loss, its grids, and what it needs.

    Attributes:
        id: what `--methods` and the APIs take, e.g. `"ils"`.
        name: the display name of its rows, e.g. `"ILS"`.
        make_loss: `(num_classes, **settings, **hyperparameters) -> keras.losses.Loss`.
        hyperparameters: the hyperparameters a search tunes, in grid order.
        grids: `{grid name: {hyperparameter: values}}`; `"paper"` is the
            real-data grid, `"synthetic"` the synthetic task's.
        settings: fixed arguments of `make_loss` (the paper's values),
            reported beside the tuned ones.
        teacher: the teacher logits its targets read: `"calibrated"` (the
            temperature-scaled teacher), `"class_similarity"`
            (`keras_ils.baselines.class_similarity_logits` rows) or `None`.
        borrows: hyperparameters it takes from LS's chosen value instead of
            tuning them (cLS and Beta take LS's epsilon, as the paper does).
        callbacks: `loss -> list` of the Keras callbacks that every
            `model.fit` with the method's loss needs (OLS's
            `OnlineLabelSmoothingCallback`); `None`: none.
        derived: `(num_classes, **arguments) -> dict` of values the loss
            derives from its arguments that reports should show; or `None`.
        always_run: trained in every run (the No LS teacher), so not a
            `--methods` choice.
    """

    id: str
    name: str
    make_loss: Callable[..., keras.losses.Loss]
    hyperparameters: tuple[str, ...] = ()
    grids: Mapping[str, Mapping[str, tuple[float, ...]]] = dataclasses.field(default_factory=dict)
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    teacher: TeacherSource | None = None
    borrows: tuple[str, ...] = ()
    derived: Callable[..., dict] | None = None
    always_run: bool = False
    callbacks: Callable[[keras.losses.Loss], list] | None = None

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id.isidentifier():
            raise invalid("id", "a method id made of letters, digits and underscores", self.id)
        if self.teacher not in (None, "calibrated", "class_similarity"):
            raise invalid("teacher", "None, 'calibrated' or 'class_similarity'", self.teacher)
        for grid_name, grid in self.grids.items():
            if set(grid) != set(self.hyperparameters):
                raise invalid("grids", f"grids with exactly the keys {list(self.hyperparameters)}", grid_name)
        object.__setattr__(self, "grids", types.MappingProxyType({k: dict(v) for k, v in self.grids.items()}))
        object.__setattr__(self, "settings", types.MappingProxyType(dict(self.settings)))

    @property
    def reads_teacher(self) -> bool:
        """Whether its training targets carry teacher logits (`keras_ils.data.with_teacher_targets`)."""
        return self.teacher is not None

    @property
    def tunable(self) -> bool:
        """Whether it has hyperparameters of its own to search."""
        return bool(self.hyperparameters)

    @functools.cached_property
    def engine(self) -> bool:
        """Whether the vectorised engine can train it: its loss, built with its grid's first values, has a
        functional form on logits (`keras_ils.losses.functional_form`)."""
        values = {name: values[0] for name, values in (next(iter(self.grids.values()), {})).items()}
        values.update({name: _lent_example(name) for name in self.borrows})
        try:
            form = losses.functional_form(self.loss(2, **values))
        except (TypeError, ValueError):
            return False
        return form.arguments.get("from_logits", True) is True

    def grid(self, name: str = "paper") -> dict:
        """`{hyperparameter: values}` of the named grid."""
        if name not in self.grids:
            raise invalid("search_space", f"one of {tuple(self.grids)} or a dict of values for {self.id!r}", name)
        return dict(self.grids[name])

    def loss(self, num_classes: int, **hyperparameters) -> keras.losses.Loss:
        """The method's loss for `num_classes` classes with these hyperparameter values."""
        return self.make_loss(num_classes, **self.settings, **hyperparameters)

    def training_callbacks(self, loss: keras.losses.Loss) -> list:
        """The callbacks a `model.fit` with `loss` (this method's) needs; `[]` for most methods."""
        return list(self.callbacks(loss)) if self.callbacks is not None else []

    def reported(self, num_classes: int, **hyperparameters) -> dict:
        """The settings a results table reports: the fixed settings, derived values, then the hyperparameters."""
        arguments = {**self.settings, **hyperparameters}
        derived = self.derived(num_classes, **arguments) if self.derived else {}
        return {**self.settings, **derived, **hyperparameters}


_REGISTRY: dict[str, Method] = {}


def make_search_space(method: str, grid: str | Mapping = "paper") -> dict:
    """The values a search tries for `method`: a named grid, or your own, checked.

    Each value is checked by building the method's loss with it (the other
    hyperparameters at their first values), so a bad value fails here with the
    loss's own error, before any training.

    Args:
        method: a tunable registered id (`ids(tunable=True)`), e.g. `"ils"`.
        grid: `"paper"` (real-data grids, paper §5), `"synthetic"` (appendix A),
            or a dict `{hyperparameter: values}` holding exactly the method's
            hyperparameters (`get(method).hyperparameters`); one value fixes it.

    Returns:
        `{hyperparameter: tuple of floats}`.

    Example:

    >>> make_search_space("ils2", "synthetic")["temperature"]
    (1.0, 2.0, 4.0, 6.0)
    >>> make_search_space("ils1", {"p1": [0.9], "p2": [1, 2]})
    {'p1': (0.9,), 'p2': (1.0, 2.0)}
    """
    if method not in ids(tunable=True):
        raise invalid("method", f"one of {ids(tunable=True)} (the others have nothing to tune)", method)
    entry = get(method)
    names = entry.hyperparameters
    if isinstance(grid, str):
        grid = entry.grid(grid)
    if not isinstance(grid, Mapping) or set(grid) != set(names):
        got = sorted(grid) if isinstance(grid, Mapping) else grid
        raise invalid("search_space", f"a grid name or a dict with exactly the keys {list(names)} for {method!r}", got)
    space = {}
    for name in names:
        values = grid[name]
        values = (values,) if isinstance(values, (int, float)) else tuple(values)
        if not values:
            raise invalid("search_space", f"at least one value for `{name}`", grid)
        space[name] = values
    first = {name: values[0] for name, values in space.items()}
    for name, values in space.items():
        for value in values:
            entry.loss(2, **{**first, name: value})  # raises the loss's own error for a bad value
    return {name: tuple(float(value) for value in values) for name, values in space.items()}


def register(method: Method, *, overwrite: bool = False) -> Method:
    """Adds `method` to the registry (after the existing entries) and returns it."""
    if not isinstance(method, Method):
        raise TypeError(f"Argument `method` must be a keras_ils.methods.Method. Received: {method!r}")
    if method.id in _REGISTRY and not overwrite:
        raise invalid("method", f"an id not registered yet (or overwrite=True); taken: {tuple(_REGISTRY)}", method.id)
    _REGISTRY[method.id] = method
    return method


def unregister(method_id: str) -> Method:
    """Removes and returns the entry `method_id`."""
    return _REGISTRY.pop(get(method_id).id)


def get(method_id: str) -> Method:
    """The entry of `method_id`; a `ValueError` naming the registered ids otherwise."""
    if method_id not in _REGISTRY:
        raise invalid("method", f"one of {tuple(_REGISTRY)}", method_id)
    return _REGISTRY[method_id]


def ids(
    *,
    tunable: bool | None = None,
    engine: bool | None = None,
    reads_teacher: bool | None = None,
    selectable: bool | None = None,
) -> tuple[str, ...]:
    """The registered ids in registration order, filtered by the properties given.

    `selectable=True` leaves out the entries trained in every run (No LS);
    `keras-ils run --methods all` is `ids(selectable=True)`.

    Example:

    >>> ids(tunable=True)
    ('ls', 'ils1', 'ils2', 'ils', 'focal', 'mbls', 'mmce', 'mdca', 'ols')
    >>> ids(selectable=True)
    ('dis', 'cls', 'bs_soft', 'beta', 'ls', 'ils1', 'ils2', 'ils', 'focal', 'flsd53', 'mbls', 'mmce', 'mdca', 'ols')
    >>> ids(engine=False)
    ('bs_soft', 'beta')
    """
    wanted = {"tunable": tunable, "engine": engine, "reads_teacher": reads_teacher}
    return tuple(
        method_id
        for method_id, method in _REGISTRY.items()
        if all(value is None or getattr(method, name) == value for name, value in wanted.items())
        and (selectable is None or selectable != method.always_run)
    )


def lender(hyperparameter: str) -> str:
    """The method whose chosen value of `hyperparameter` the methods that borrow it take (`Method.borrows`).

    It is the first registered method that tunes that hyperparameter alone:
    LS for `epsilon`, whose choice cLS and Beta take, as the paper does.

    Example:

    >>> lender("epsilon")
    'ls'
    """
    for method_id, method in _REGISTRY.items():
        if method.hyperparameters == (hyperparameter,):
            return method_id
    raise invalid("hyperparameter", "a hyperparameter that a registered method tunes alone", hyperparameter)


def _ils_family(method_id: str, name: str) -> Method:
    names = targets.METHOD_HYPERPARAMETERS[method_id]
    return Method(
        id=method_id,
        name=name,
        make_loss=lambda num_classes, **values: ILSLoss(method=method_id, **values),
        hyperparameters=names,
        grids={grid: {n: values[n] for n in names} for grid, values in _PAPER_GRIDS.items()},
        teacher="calibrated" if method_id in ("ils1", "ils2", "ils") else None,
        always_run=method_id == "none",
    )


def _lent_example(hyperparameter: str) -> float:
    """A value of `hyperparameter` to build a borrowing method's loss with: its lender's first grid value."""
    return next(iter(get(lender(hyperparameter)).grids.values()))[hyperparameter][0]


def _beta_shape(num_classes, alpha, epsilon):
    return {"a": round(baselines.beta_shape_for_epsilon(epsilon, num_classes, alpha), 4)}


def _authors_grid(name: str, values: tuple) -> dict:
    """One hyperparameter's grid, its authors', for both the real-data and the synthetic runs."""
    return {grid: {name: values} for grid in GRID_NAMES}


# The calibration losses users compare ILS with, each on its authors' grid (the same for the synthetic task).
_CALIBRATION_LOSSES = (
    Method(
        id="focal",
        name="Focal",
        make_loss=lambda num_classes, gamma: losses.FocalLoss(gamma=gamma),
        hyperparameters=("gamma",),
        grids=_authors_grid("gamma", (1.0, 2.0, 3.0)),
    ),
    Method(
        id="flsd53",
        name="FLSD-53",
        make_loss=lambda num_classes: losses.FocalLoss(gamma="flsd53"),
    ),
    Method(
        id="mbls",
        name="MbLS",
        make_loss=lambda num_classes, alpha, margin: losses.MarginLabelSmoothingLoss(margin=margin, alpha=alpha),
        hyperparameters=("margin",),
        grids=_authors_grid("margin", (2.0, 4.0, 6.0, 8.0, 10.0)),
        settings=dict(alpha=0.1),
    ),
    Method(
        id="mmce",
        name="MMCE",
        make_loss=lambda num_classes, weight: losses.MMCELoss(weight=weight),
        hyperparameters=("weight",),
        grids=_authors_grid("weight", (1.0, 2.0, 4.0, 8.0)),
    ),
    Method(
        id="mdca",
        name="MDCA",
        make_loss=lambda num_classes, beta: losses.MDCALoss(beta=beta),
        hyperparameters=("beta",),
        grids=_authors_grid("beta", (1.0, 5.0, 10.0, 15.0, 20.0)),
    ),
    Method(
        id="ols",
        name="OLS",
        make_loss=lambda num_classes, alpha: losses.OnlineLabelSmoothing(num_classes, alpha=alpha),
        hyperparameters=("alpha",),
        grids=_authors_grid("alpha", (0.25, 0.5, 0.75)),
        callbacks=lambda loss: [losses.OnlineLabelSmoothingCallback(loss)],
    ),
)


for _method in (
    _ils_family("none", "No LS"),
    Method(
        id="dis",
        name="Dis",
        make_loss=lambda num_classes, **settings: distillation.DistillationCrossEntropy(**settings),
        # the paper's self-distillation (appendix): log-loss against the teacher's predictions, both temperatures 1
        settings=dict(weight=1.0, teacher_temperature=1.0, student_temperature=1.0),
        teacher="calibrated",
    ),
    Method(
        id="cls",
        name="cLS",
        make_loss=lambda num_classes, epsilon: ILSLoss(method="ils2", epsilon=epsilon),
        teacher="class_similarity",
        borrows=("epsilon",),
    ),
    Method(
        id="bs_soft",
        name="BS_Soft",
        make_loss=lambda num_classes, beta: baselines.BootstrapSoftLoss(beta=beta),
        settings=dict(beta=0.95),
    ),
    Method(
        id="beta",
        name="Beta",
        make_loss=lambda num_classes, alpha, epsilon: baselines.BetaSmoothingLoss(
            alpha=alpha, a=baselines.beta_shape_for_epsilon(epsilon, num_classes, alpha)
        ),
        settings=dict(alpha=0.4),
        borrows=("epsilon",),
        derived=_beta_shape,
    ),
    _ils_family("ls", "LS"),
    _ils_family("ils1", "ILS1"),
    _ils_family("ils2", "ILS2"),
    _ils_family("ils", "ILS"),
    *_CALIBRATION_LOSSES,
):
    register(_method)
del _method
