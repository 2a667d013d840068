"""Every student of the paper's grids on a vector dataset at once: the tuned method in seconds.

The paper's method is ILS whose hyperparameters were chosen on the
validation cross-entropy against hard labels over its grids (LS: 5 values of
epsilon; ILS1: 5 x 5 of P1, P2; ILS2: 5 x 5 of epsilon, T; ILS: 5 x 5 x 5 of
P1, P2, T). On vector data, with any plain MLP, every one of those students
is one row of stacked weights in `keras_ils.comparison.engine.vectorised.train_mlps`,
so the whole search is a few batched training calls instead of one
`model.fit` per candidate. The engine trains every `keras_ils.methods` entry
whose loss has a functional form (`Method.engine`, `methods.ids(engine=True)`),
each candidate with its entry's Keras loss through that form
(`keras_ils.comparison.engine.stacked_losses`; the targets of a loss that
makes them from the labels alone, ILS's, made once):

1. the No LS teacher and every candidate whose loss reads no teacher
   (`Method.teacher`; those that are not cross-entropy against their
   targets in a call of their own, so that the others train exactly as
   without them), and, with `teacher_folds=k`, `k` cross-fitted teachers;
2. the teacher's `T*` on the validation set (`keras_ils.calibration`'s
   robust fit) and its calibrated logits on the training set;
3. every teacher-reading candidate on those logits; a method that borrows a
   value (`Method.borrows`: cLS takes LS's chosen epsilon, as the paper
   does) takes its lender's choice;
4. every candidate's validation logits, temperature fit (`temperature._temperature_fits`) and
   validation NLL as trained and temperature-scaled.

Selection is the paper's: a method's row is its candidate with the lowest
validation NLL as trained; its "+ TempS" row is the candidate with the lowest
NLL after its own temperature scaling (`StudentSearch.best(method, temps=True)`).
Every candidate starts from the same initial weights and sees the same batch
order (the seed's), so candidates differ only in their targets, as every
trial of `keras_ils.tuning`'s KerasTuner search does; each agrees with
`model.fit` on the same weights and batches to float tolerance (tests/comparison/engine).

Cross-fitted teacher (beyond the paper). ILS1 reads the teacher's `p_t` on the
teacher's own training examples, where a network that fitted them says about
1 whatever their difficulty. `teacher_folds=k` trains `k` more teachers, each
on all training folds but one, and takes each example's logits from the
teacher that never saw it (out of fold); one temperature, fitted on the `k`
teachers' pooled validation logits, calibrates them as a whole. The No LS
rows stay the teacher trained on the whole training set.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import types
from collections.abc import Mapping

import numpy as np

from keras_ils import baselines, calibration, methods
from keras_ils._checks import integer_at_least, invalid
from keras_ils.calibration import ESTIMATORS, fit_calibrator, temperature
from keras_ils.comparison import networks
from keras_ils.comparison.engine import cross_fit, stacked_losses, vectorised
from keras_ils.comparison.engine.cross_fit import fold_rows

__all__ = [
    "POOL_SIZE",
    "SearchSettings",
    "StudentSearch",
    "candidate_grid",
    "checked_fixed",
    "fold_rows",
    "method_space",
    "search_students",
]

# Models trained side by side by default (`MLPTraining.pool_size`; finished models' slots are refilled): the paper's
# 180 digits students trained fastest so on 2 CPU cores (15 % faster than all at once; benchmarks/RESULTS.md).
POOL_SIZE = 64


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """What `search_students` trains and how: the methods, their grids, the MLPs' training, the teacher.

    Attributes:
        methods: ids of the `keras_ils.methods` registry that the engine
            trains (`methods.ids(engine=True)`); the teacher (No LS) is always
            trained. Defaults to the paper's method, `("ls", "ils1", "ils2", "ils")`.
        search_space: `"paper"` (real-data grids), `"synthetic"` (appendix)
            or `{hyperparameter: values}`. Defaults to `"paper"`.
        fixed: `{hyperparameter: value}` that every method reading it uses
            instead of searching it. Defaults to `{}` (search all).
        training: a `vectorised.MLPTraining`: the MLP (the paper's 5 x 64) and
            its recipe (the paper's Adam 1e-2, batch 32, 500 epochs, patience
            10). Defaults to `MLPTraining(pool_size=POOL_SIZE)`.
        seed: every model's initial weights and batch order. Defaults to `0`.
        teacher_folds: `1` for the paper's teacher, `k >= 2` for out-of-fold
            teacher logits from `k` cross-fitted teachers. Defaults to `1`.
        temperature_estimator: the temperature fit's
            `estimator` for every temperature. Defaults to `"map"`.
    """

    methods: tuple[str, ...] = ("ls", "ils1", "ils2", "ils")
    search_space: str | Mapping = "paper"
    fixed: Mapping[str, float] = dataclasses.field(default_factory=dict)
    training: vectorised.MLPTraining = dataclasses.field(
        default_factory=lambda: vectorised.MLPTraining(pool_size=POOL_SIZE)
    )
    seed: int = 0
    teacher_folds: int = 1
    temperature_estimator: str = "map"

    def __post_init__(self):
        chosen = tuple(dict.fromkeys(self.methods))
        if any(m not in methods.ids(engine=True) for m in chosen):
            raise invalid("methods", f"some of {methods.ids(engine=True)}", tuple(self.methods))
        object.__setattr__(self, "methods", chosen)
        object.__setattr__(self, "fixed", types.MappingProxyType(checked_fixed(self.fixed)))
        if not isinstance(self.training, vectorised.MLPTraining):
            raise TypeError(f"Argument `training` must be a vectorised.MLPTraining. Received: {self.training!r}")
        integer_at_least("teacher_folds", self.teacher_folds, 1)
        if self.temperature_estimator not in ESTIMATORS:
            raise invalid("temperature_estimator", f"one of {ESTIMATORS}", self.temperature_estimator)


@dataclasses.dataclass(frozen=True)
class StudentSearch:
    """What `search_students` trained and measured: one entry per candidate, the teacher first.

    Attributes:
        candidates: `((method, hyperparameters), ...)`; index 0 is the No LS
            teacher trained on the whole training set.
        weights: `[(kernel [M, in, out], bias [M, out]), ...]`, each
            candidate's best-epoch weights.
        val_nll: `[M]` validation NLL (hard labels) as trained.
        temperature_fits: each candidate's temperature fit on validation, a
            `CalibratorFit` (the teacher's is `teacher_fit`), its warning
            not issued.
        temperatures: `[M]` their temperatures.
        val_nll_scaled: `[M]` validation NLL after that temperature.
        epochs: `[M]` epochs each candidate trained.
        teacher_fit: the teacher's temperature fit, a `CalibratorFit` (its `T*`).
        teacher_logits: `[n, K]` the calibrated teacher logits on the training
            set that the targets were made from (out of fold with folds).
        folds_fit: the cross-fitted teachers' joint temperature fit, or `None`.
        teacher_folds: `1` (the paper's teacher) or `k`.
        hidden_layers, units: the MLP.
        seconds: wall time of the search.
    """

    candidates: tuple
    weights: list
    val_nll: np.ndarray
    temperature_fits: tuple
    temperatures: np.ndarray
    val_nll_scaled: np.ndarray
    epochs: np.ndarray
    teacher_fit: calibration.CalibratorFit
    teacher_logits: np.ndarray
    folds_fit: calibration.CalibratorFit | None
    teacher_folds: int
    hidden_layers: int
    units: int
    seconds: float

    def indices(self, method: str) -> np.ndarray:
        """The candidates of `method`, in grid order."""
        return np.array([i for i, (m, _) in enumerate(self.candidates) if m == method], np.int64)

    def best(self, method: str, temps: bool = False) -> int:
        """The chosen candidate of `method`: lowest validation NLL as trained, or after temperature scaling."""
        indices = self.indices(method)
        if not len(indices):
            raise invalid("method", f"one of the searched methods {self.methods}", method)
        loss = self.val_nll_scaled if temps else self.val_nll
        return int(indices[np.argmin(loss[indices])])

    @property
    def methods(self) -> tuple:
        """The methods searched, the teacher's first, in training order."""
        return tuple(dict.fromkeys(m for m, _ in self.candidates))

    def logits(self, x, index: int) -> np.ndarray:
        """Candidate `index`'s logits `[n, K]` on features `x` (as trained; divide by its temperature for TempS)."""
        return vectorised.mlp_logits([(k[index : index + 1], b[index : index + 1]) for k, b in self.weights], x)[0]

    def keras_model(self, index: int):
        """Candidate `index` as a Keras model (`keras_ils.comparison.networks.mlp`) holding its weights."""
        kernel = self.weights[0][0]
        model = networks.mlp(self.weights[-1][0].shape[-1], (kernel.shape[1],), self.hidden_layers, self.units)
        model.set_weights([np.asarray(w[index]) for pair in self.weights for w in pair])
        return model


def checked_fixed(fixed) -> dict:
    """`fixed` as a dict, each value checked by building the loss of a method that tunes it (its grid's first
    values for the others), so a bad value fails with that loss's own error.

    Example:

    >>> checked_fixed({"p1": 0.9})
    {'p1': 0.9}
    """
    fixed = dict(fixed or {})
    for name, value in fixed.items():
        readers = [m for m in methods.ids(tunable=True) if name in methods.get(m).hyperparameters]
        if not readers:
            tuned = dict.fromkeys(n for m in methods.ids(tunable=True) for n in methods.get(m).hyperparameters)
            raise invalid(
                "fixed", f"a dict whose keys are tuned by a registered method ({', '.join(tuned)}, ...)", fixed
            )
        entry = methods.get(readers[0])
        grid = entry.grid(next(iter(entry.grids))) if entry.grids else {}
        entry.loss(2, **{**{n: values[0] for n, values in grid.items()}, name: value})
    return fixed


def method_space(method: str, search_space="paper") -> dict:
    """`{hyperparameter: values}` that `method` searches: its named grid, or its hyperparameters' values in a
    dict `search_space` that may hold other methods' too (`keras_ils.methods.make_search_space` checks them)."""
    if isinstance(search_space, Mapping):
        names = methods.get(method).hyperparameters
        search_space = {name: search_space[name] for name in names if name in search_space}
    return methods.make_search_space(method, search_space)


def candidate_grid(chosen, search_space="paper", fixed=None) -> list:
    """`[(method, hyperparameters), ...]` that a search trains for the methods `chosen` (the values a method
    borrows, cLS's epsilon, come later, from their lender's choice).

    A hyperparameter in `fixed` takes that one value in every method that
    reads it; the others range over `search_space` (`"paper"` or
    `"synthetic"`, the registry's grids, or `{hyperparameter: values}`).

    Example:

    >>> len(candidate_grid(("ls", "ils1", "ils2", "ils")))   # the paper's grids: 5 + 25 + 25 + 125
    180
    >>> candidate_grid(("ils2",), fixed={"epsilon": 0.1, "temperature": 2.0})
    [('ils2', {'epsilon': 0.1, 'temperature': 2.0})]
    """
    fixed = checked_fixed(fixed)
    grid = []
    for method in chosen:
        if method not in methods.ids(engine=True):
            raise invalid("methods", f"some of {methods.ids(engine=True)}", tuple(chosen))
        names = methods.get(method).hyperparameters
        if not names:
            grid.append((method, {}))
            continue
        space = method_space(method, search_space)
        axes = [(fixed[name],) if name in fixed else space[name] for name in names]
        grid += [(method, dict(zip(names, values, strict=True))) for values in itertools.product(*axes)]
    return grid


def search_students(
    x_train,
    y_train,
    x_validation,
    y_validation,
    settings: SearchSettings | None = None,
    *,
    num_classes: int | None = None,
    teacher_logits=None,
) -> StudentSearch:
    """Trains the teacher and every candidate of the settings' methods on vector data; see the module docstring.

    Args:
        x_train, y_train: `[n, d]` features (standardised, as
            `keras_ils.comparison.data.datasets` loads them) and integer labels.
        x_validation, y_validation: the validation split: early stopping,
            every temperature, every selection.
        settings: a `SearchSettings` (the methods, grids, MLP training, seed,
            teacher folds, temperature fit). Defaults to `SearchSettings()`:
            LS, ILS1, ILS2, ILS over the paper's grids with the paper's MLP.
        num_classes: `K`. Defaults to one more than the largest label.
        teacher_logits: optional `[n, K]` calibrated teacher logits on the
            training set to make the targets from instead of the teacher's
            own (e.g. read from a cache); not with `teacher_folds > 1`.

    Returns:
        A `StudentSearch`.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(120, 4)).astype("float32"); y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1)
    >>> training = vectorised.MLPTraining(epochs=5, hidden_layers=1, units=8, pool_size=POOL_SIZE)
    >>> settings = SearchSettings(methods=("ls", "ils"), fixed={"p1": 0.9, "p2": 1.0}, training=training)
    >>> search = search_students(x[:80], y[:80], x[80:], y[80:], settings)
    >>> len(search.candidates), search.methods   # the teacher, 5 LS, 5 ILS (T over the paper's grid)
    (11, ('none', 'ls', 'ils'))
    >>> search.candidates[search.best("ils")][0]
    'ils'
    """
    started = time.time()
    settings = settings or SearchSettings()
    x_train, y_train, x_validation, y_validation, num_classes = _checked_data(
        x_train, y_train, x_validation, y_validation, num_classes
    )
    if teacher_logits is not None and settings.teacher_folds > 1:
        raise ValueError("Arguments `teacher_logits` and `teacher_folds > 1` exclude each other: pass one.")
    train, validation = (x_train, y_train, num_classes), (x_validation, y_validation)
    free, taught, borrowers = _stages(settings)
    first = _train_stage(train, validation, free, None, settings)
    val_logits = vectorised.mlp_logits(first.weights, x_validation)
    estimator = settings.temperature_estimator
    teacher_fit = fit_calibrator("temperature", val_logits[0], y_validation, estimator=estimator, return_fit=True)[1]
    folds_fit = None
    if teacher_logits is not None:
        teacher_logits = _checked_teacher_logits(teacher_logits, len(y_train), num_classes)
    elif settings.teacher_folds > 1:
        teacher_logits, folds_fit = cross_fit.out_of_fold_logits(train, validation, settings)
    else:
        raw = vectorised.mlp_logits([(k[:1], b[:1]) for k, b in first.weights], x_train)[0]
        teacher_logits = (raw / teacher_fit.temperature).astype(np.float32)
    taught += _with_lent_values(borrowers, free, _nll(val_logits, y_validation), settings)
    candidates, weights, epochs_run = list(free), first.weights, first.epochs
    if taught:
        second = _train_stage(train, validation, taught, teacher_logits, settings)
        candidates += taught
        weights = [
            (np.concatenate([k1, k2]), np.concatenate([b1, b2]))
            for (k1, b1), (k2, b2) in zip(first.weights, second.weights, strict=True)
        ]
        epochs_run = np.concatenate([first.epochs, second.epochs])
        val_logits = np.concatenate([val_logits, vectorised.mlp_logits(second.weights, x_validation)])
    students_fits = []  # the teacher's is `teacher_fit`: each candidate's temperature is fitted once
    if len(val_logits) > 1:
        labels = np.broadcast_to(y_validation, (len(val_logits) - 1, len(y_validation)))
        students_fits = temperature._temperature_fits(val_logits[1:], labels, estimator=estimator)
    temperature_fits = (teacher_fit, *students_fits)
    temperatures = np.array([fit.temperature for fit in temperature_fits])
    return StudentSearch(
        candidates=tuple(candidates),
        weights=weights,
        val_nll=_nll(val_logits, y_validation),
        temperature_fits=temperature_fits,
        temperatures=temperatures,
        val_nll_scaled=_nll(val_logits / temperatures[:, None, None], y_validation),
        epochs=epochs_run,
        teacher_fit=teacher_fit,
        teacher_logits=teacher_logits,
        folds_fit=folds_fit,
        teacher_folds=settings.teacher_folds,
        hidden_layers=settings.training.hidden_layers,
        units=settings.training.units,
        seconds=time.time() - started,
    )


def _stages(settings) -> tuple:
    """`(first stage, second stage, borrowers)`: the candidates trained first (the teacher, then those needing no
    teacher, LS among them, and the lenders the borrowers need), the teacher-reading ones trained on the teacher's
    logits, and the methods that take a lender's choice (cLS takes LS's epsilon), trained last.

    Example:

    >>> free, taught, borrowers = _stages(SearchSettings(methods=("ils1", "cls"), search_space="synthetic"))
    >>> sorted({m for m, _ in free}), len(taught), borrowers
    (['ls', 'none'], 30, ['cls'])
    """
    teacher = methods.ids(selectable=False)[0]
    wanted = tuple(dict.fromkeys((teacher,) + settings.methods))
    borrowers = [m for m in wanted if methods.get(m).borrows]
    grid = candidate_grid([m for m in wanted if m not in borrowers], settings.search_space, settings.fixed)
    free = [c for c in grid if not methods.get(c[0]).reads_teacher]
    needed = dict.fromkeys(methods.lender(name) for m in borrowers for name in methods.get(m).borrows)
    for lender in needed:
        if methods.get(lender).reads_teacher or lender not in methods.ids(engine=True):
            raise invalid("methods", "borrowers whose lenders the engine trains before the teacher's targets", lender)
        if not any(m == lender for m, _ in free):
            free += candidate_grid((lender,), settings.search_space, settings.fixed)
    return free, [c for c in grid if methods.get(c[0]).reads_teacher], borrowers


def _with_lent_values(borrowers, free, val_nll, settings) -> list:
    """The borrowers' candidates, each with its lenders' choices (their candidate of lowest validation NLL)."""
    taught = []
    for method in borrowers:
        lent = {}
        for name in methods.get(method).borrows:
            rows = [i for i, (m, _) in enumerate(free) if m == methods.lender(name)]
            lent[name] = free[rows[int(np.argmin(val_nll[rows]))]][1][name]
        own = candidate_grid((method,), settings.search_space, settings.fixed)
        taught += [(m, {**values, **lent}) for m, values in own]
    return taught


def _checked_data(x_train, y_train, x_validation, y_validation, num_classes):
    x_train, x_validation = np.asarray(x_train, np.float32), np.asarray(x_validation, np.float32)
    y_train, y_validation = np.asarray(y_train), np.asarray(y_validation)
    for name, x, y in (("x_train", x_train, y_train), ("x_validation", x_validation, y_validation)):
        if x.ndim != 2 or not len(x):
            raise invalid(name, "a non-empty [n, features] array (vector data)", f"shape {x.shape}")
        if not np.isfinite(x).all():
            raise invalid(name, "finite features", f"{int((~np.isfinite(x)).sum())} NaN or infinite values")
        label_name = "y" + name[1:]
        if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
            raise invalid(label_name, f"integer class indices of shape ({len(x)},)", f"{y.dtype} {y.shape}")
    if x_train.shape[1] != x_validation.shape[1]:
        raise invalid("x_validation", f"{x_train.shape[1]} features like x_train", f"{x_validation.shape[1]}")
    largest = int(max(y_train.max(), y_validation.max()))
    if num_classes is None:
        num_classes = largest + 1
    integer_at_least("num_classes", num_classes, 2)
    if min(y_train.min(), y_validation.min()) < 0 or largest >= num_classes:
        raise invalid("y_train", f"labels in [0, {num_classes})", f"labels from {min(y_train.min(), 0)} to {largest}")
    return x_train, y_train.astype(np.int32), x_validation, y_validation.astype(np.int32), int(num_classes)


def _checked_teacher_logits(teacher_logits, n, num_classes):
    teacher_logits = np.asarray(teacher_logits, np.float32)
    if teacher_logits.shape != (n, num_classes) or not np.isfinite(teacher_logits).all():
        raise invalid("teacher_logits", f"finite logits of shape ({n}, {num_classes})", f"{teacher_logits.shape}")
    return teacher_logits


# The teacher rows a method's loss reads, by its registry entry's `teacher`: none, the calibrated teacher's, or
# cLS's class-similarity rows (`keras_ils.baselines`), one per example by its label.
_TEACHER_ROWS = {
    None: lambda x, labels, teacher_logits, num_classes: None,
    "calibrated": lambda x, labels, teacher_logits, num_classes: teacher_logits,
    "class_similarity": lambda x, labels, teacher_logits, num_classes: baselines.class_similarity_logits(
        (x, labels), num_classes
    )[labels],
}


def _targets(x, labels, teacher_logits, method, loss, num_classes):
    """One candidate's `[n, W]` training rows: what its loss reads per example (`stacked_losses.model_targets`) of
    the one-hot labels, with the teacher rows its entry reads (`keras_ils.teacher_targets`' layout)."""
    rows = _TEACHER_ROWS[methods.get(method).teacher](x, labels, teacher_logits, num_classes)
    one_hot = np.eye(num_classes, dtype=np.float32)[labels]
    y_true = one_hot if rows is None else np.concatenate([one_hot, np.asarray(rows, np.float32)], axis=-1)
    return stacked_losses.model_targets(loss, y_true, num_classes)


def _train_stage(train, validation, configs, teacher_logits, settings) -> vectorised.TrainedMLPs:
    """Every model of `configs` on the training set, all from the seed's weights, each with its method's Keras loss:
    those whose loss is cross-entropy against their targets (`stacked_losses.stack`'s one branch of `None`) in one
    call of the trainer, the others (the calibration losses) in calls of their own by the width of what they read,
    so that the first train exactly as they would without the others' losses."""
    x, y, num_classes = train
    losses = [methods.get(m).loss(num_classes, **hp) for m, hp in configs]
    rows = [_targets(x, y, teacher_logits, m, loss, num_classes) for (m, _), loss in zip(configs, losses, strict=True)]
    plain = stacked_losses.stack(None, 1).branches
    groups = {}
    for row, (loss, targets) in enumerate(zip(losses, rows, strict=True)):
        key = (stacked_losses.stack([loss], 1).branches != plain, targets.shape[-1])
        groups.setdefault(key, []).append(row)
    trained = []
    for (termed, _), members in sorted(groups.items()):
        chosen = ([rows[i] for i in members], [losses[i] for i in members] if termed else None)
        trained.append((members, _train_models(train, validation, *chosen, settings)))
    return trained[0][1] if len(trained) == 1 else _merged(trained, len(configs))


def _merged(trained, count) -> vectorised.TrainedMLPs:
    """One `TrainedMLPs` of `count` models from `[(rows, TrainedMLPs of those rows), ...]`."""
    first = trained[0][1]
    weights = [tuple(np.empty((count,) + w.shape[1:], w.dtype) for w in pair) for pair in first.weights]
    fields = {name: np.empty(count, getattr(first, name).dtype) for name in ("best_val_loss", "best_epoch", "epochs")}
    for rows, result in trained:
        for (kernel, bias), (k, b) in zip(weights, result.weights, strict=True):
            kernel[rows], bias[rows] = k, b
        for name, values in fields.items():
            values[rows] = getattr(result, name)
    return vectorised.TrainedMLPs(weights, **fields)


def _train_models(train, validation, targets, losses, settings) -> vectorised.TrainedMLPs:
    """The models of `targets` (each one's training rows), with their `losses` (`None`: cross-entropy), in one call
    of the trainer."""
    x = train[0]
    x_validation, y_validation = validation
    count = len(targets)
    return vectorised.train_mlps(
        np.broadcast_to(x, (count,) + x.shape),
        np.stack(targets),
        np.broadcast_to(x_validation, (count,) + x_validation.shape),
        np.broadcast_to(y_validation, (count,) + y_validation.shape),
        seeds=[settings.seed] * count,
        training=settings.training,
        losses=losses,
    )


def _nll(logits, labels):
    """Mean hard-label cross-entropy per model: `[M, n, K]`, `[n]` -> `[M]` (float64)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    rows = np.broadcast_to(np.asarray(labels)[None, :, None], log_p.shape[:2] + (1,))
    return -np.take_along_axis(log_p, rows, axis=-1)[..., 0].mean(axis=-1)
