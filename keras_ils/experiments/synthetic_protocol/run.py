"""The run: the grids, every replicate's datasets, the two training stages, and each replicate's rows."""

from __future__ import annotations

import time

import numpy as np

from keras_ils import methods
from keras_ils._checks import integer_at_least, invalid
from keras_ils.experiments.synthetic_protocol import extras
from keras_ils.experiments.synthetic_protocol.options import (
    AUTHORS_TEACHER_TEMPERATURES,
    OPTIONS,
    PRESETS,
    SMOOTHING_MASSES,
    TEACHER_GRIDS,
    VALIDATION_LOSSES,
    resolve_options,
)
from keras_ils.experiments.synthetic_protocol.printed_values import ROWS, row_key
from keras_ils.experiments.synthetic_protocol.scoring import empty_curves, replicate_rows
from keras_ils.experiments.synthetic_protocol.stages import (
    _calibrated_teachers,
    _datasets,
    _replicate_weights,
    _train_stage,
    stage_targets,
    student_targets,
    train,
)

LS_FIXED_EPSILON = 0.2


def grids(quick: bool = False, teacher_grid: str = "paper") -> dict:
    """The appendix grids, or a small subset for `quick` runs (tests, smoke checks).

    `teacher_grid="authors"` replaces the teacher temperatures {1, 2, 4, 6} by
    the authors' code's {1, 2, 4, 8, 16} (which divide the teacher's raw logits).

    Example:

    >>> {name: len(values) for name, values in grids().items()}
    {'epsilon': 12, 'p1': 5, 'p2': 6, 'temperature': 4}
    >>> grids(teacher_grid="authors")["temperature"]
    (1.0, 2.0, 4.0, 8.0, 16.0)
    """
    if teacher_grid not in TEACHER_GRIDS:
        raise invalid("teacher_grid", f"one of {TEACHER_GRIDS}", teacher_grid)
    full = {**methods.get("ls").grid("synthetic"), **methods.get("ils").grid("synthetic")}
    if not quick:
        grid = {name: tuple(values) for name, values in full.items()}
        if teacher_grid == "authors":
            grid["temperature"] = AUTHORS_TEACHER_TEMPERATURES
        return grid
    return {"epsilon": (0.01, 0.05, 0.11), "p1": (0.8,), "p2": (1.0, 2.0), "temperature": (1.0, 4.0)}


def model_configs(grid: dict) -> tuple[list, list]:
    """`(teacher-free configs, teacher configs)`: each a list of `(row method, hyperparameters)`.

    Example:

    >>> free, taught = model_configs(grids())
    >>> len(free), len(taught)   # No LS + 12 LS + LS-0.2; 30 ILS1 + 48 ILS2 + 120 ILS
    (14, 198)
    """
    free = [("No LS", dict(method="none"))]
    free += [("Standard LS", dict(method="ls", epsilon=e)) for e in grid["epsilon"]]
    free += [("Standard LS-0.2", dict(method="ls", epsilon=LS_FIXED_EPSILON))]
    taught = [("ILS1", dict(method="ils1", p1=p1, p2=p2)) for p1 in grid["p1"] for p2 in grid["p2"]]
    taught += [
        ("ILS2", dict(method="ils2", epsilon=e, temperature=t)) for e in grid["epsilon"] for t in grid["temperature"]
    ]
    taught += [
        ("ILS", dict(method="ils", p1=p1, p2=p2, temperature=t))
        for p1 in grid["p1"]
        for p2 in grid["p2"]
        for t in grid["temperature"]
    ]
    return free, taught


def run_replicates(
    replicates: int = 100,
    seed: int = 0,
    *,
    quick: bool = False,
    n_test: int = 5000,
    epochs: int = 500,
    group: int = 25,
    pool_size: int = 256,
    preset: str = "package",
    init: str | None = None,
    shared_seeds: bool | None = None,
    temperature_estimator: str | None = None,
    teacher_grid: str | None = None,
    batch_size: int | None = None,
    weight_decay: float | None = None,
    smoothing_mass: str | None = None,
    validation_loss: str | None = None,
    log=print,
) -> dict:
    """Runs the protocol on `replicates` datasets; returns per-replicate rows, curve sums and timings.

    The training and tuning settings come from `preset` (`PRESETS`), and any
    of them given here overrides the preset's.

    Args:
        replicates: datasets, seeds `seed, seed + 1, ...`. Defaults to `100`.
        seed: the first replicate's seed. Defaults to `0`.
        quick: small grids (`grids(quick=True)`). Defaults to `False`.
        n_test: test points per class. Defaults to `5000` (the paper's).
        epochs: maximum epochs. Defaults to `500` (the paper's).
        group: replicates whose ILS models are trained together in one call
            of the trainer (the No LS and LS models of all replicates train
            first, in one call). Defaults to `25`.
        pool_size: the trainer's `pool_size`. Defaults to `256`.
        preset: `"package"` (the package's settings, below) or `"authors"`
            (the habits of the authors' public code: PyTorch initialisation,
            one seed per model, T in [0.8, 3], teacher temperatures
            {1, 2, 4, 8, 16} on raw logits, batch 128, weight decay 1e-4,
            eps / (K - 1) per wrong class for ILS1, batch-mean validation
            loss). Defaults to `"package"`.
        init: the models' initialisation, `"keras"` (the package's) or
            `"pytorch"` (`keras_ils.experiments.engine.vectorised.initial_weights`).
            Package default `"keras"`.
        shared_seeds: all models of a replicate start from the same weights
            and see the same batch order (common random numbers), so they
            differ only in their targets; `False` gives every model its own
            seed, so that selecting the best of a grid also selects a lucky
            initialisation (more so for larger grids). Package default `True`.
        temperature_estimator: every model's temperature fit,
            `keras_ils.calibration.fit_temperatures`' `estimator`: `"map"`
            (the package's), `"mle"` (Guo et al., what the tables of
            docs/results/synthetic-protocol.md were made with) or `"authors"`
            (T in [0.8, 3], the paper's code). Package default `"map"`.
        teacher_grid: ILS2's and ILS's teacher temperatures: `"paper"`, the
            appendix's {1, 2, 4, 6} dividing the calibrated teacher's logits
            (the package's convention, `keras_ils.targets`), or `"authors"`,
            {1, 2, 4, 8, 16} dividing the teacher's raw logits (the authors'
            code). Package default `"paper"`.
        batch_size: mini-batch size. Package default `32`.
        weight_decay: coupled (L2, added to the gradient as PyTorch's Adam
            does) weight decay; `0` for none. Package default `0.0`.
        smoothing_mass: how ILS1 spreads its smoothing mass `eps_x`:
            `"all_classes"` (the paper's Eq. 3, `eps_x / K` on every class,
            as LS) or `"wrong_classes"` (the authors' code, `1 - eps_x` on the
            true class and `eps_x / (K - 1)` on each wrong one). LS keeps
            `eps / K` in both (the authors' LS loss does too), and ILS2 / ILS
            put all of `eps` on the wrong classes in both. Package default
            `"all_classes"`.
        validation_loss: the early-stopping loss, `"example_mean"` (the mean
            over validation points) or `"batch_mean"` (a mean of per-batch
            means in batches of `batch_size`, the authors' code; a short last
            batch weighs its points more). Model selection uses the mean
            over points in both. Package default `"example_mean"`.
        log: progress printer, or `None`. Defaults to `print`.

    Returns:
        A dict with `"per_replicate"` (`{row key: [metrics and chosen
        hyperparameters per replicate]}`), `"curves"` (bin sums for Fig. 4),
        `"distillation"` (Table 2's students, per teacher and replicate),
        `"histograms"` (Fig. 2's counts), `"models_trained"`, `"seconds"` and
        the settings.
    """
    options = resolve_options(
        preset,
        init=init,
        shared_seeds=shared_seeds,
        temperature_estimator=temperature_estimator,
        teacher_grid=teacher_grid,
        batch_size=batch_size,
        weight_decay=weight_decay,
        smoothing_mass=smoothing_mass,
        validation_loss=validation_loss,
    )
    _check_arguments(replicates, n_test, group)
    grid = grids(quick, options["teacher_grid"])
    free, taught = model_configs(grid)
    training = dict(
        seed=seed,
        epochs=epochs,
        pool_size=pool_size,
        **{k: options[k] for k in ("shared_seeds", "init", "batch_size", "weight_decay", "validation_loss")},
    )
    target_options = dict(teacher_grid=options["teacher_grid"], smoothing_mass=options["smoothing_mass"])
    estimator = options["temperature_estimator"]
    per_replicate = {row_key(row): [] for row in ROWS}
    ls_epsilons = [hp["epsilon"] for name, hp in free if name.startswith("Standard LS")]
    curves = empty_curves(len(ls_epsilons))
    histograms = extras.empty_histograms()
    distillation_teachers = []
    started = time.time()
    planned = replicates * (len(free) + len(taught) + len(extras.DISTILLATION_TEACHERS))
    if log:
        log(f"{planned:,} models of {replicates} replicates: No LS and LS, then ILS in groups of {group} replicates")
    data = _datasets(replicates, seed, n_test)
    # 1. teacher-free models of every replicate: No LS (the teacher), LS, LS-0.2
    first_stage = _train_stage(data, list(range(replicates)), free, 0, None, None, **training, **target_options)
    trained, epochs_total = replicates * len(free), int(first_stage.epochs.sum())
    if log:
        log(f"No LS and LS models of {replicates} replicates: {_progress(trained, planned, started)}")
    # 2. the calibrated teacher's logits on the training set
    teacher_t, calibrated = _calibrated_teachers(data, first_stage, len(free), estimator)
    for first in range(0, replicates, group):
        # 3. every ILS target from the calibrated teacher, once; the ILS models of `group` replicates together
        reps = list(range(first, min(first + group, replicates)))
        second_stage = _train_stage(data, reps, taught, len(free), calibrated, teacher_t, **training, **target_options)
        trained += len(reps) * len(taught)
        epochs_total += int(second_stage.epochs.sum())
        # 4. selection and test metrics, replicate by replicate; Fig. 2's counts and Table 2's teachers
        for i, r in enumerate(reps):
            weights = _replicate_weights(first_stage, r, len(free), second_stage, i, len(taught))
            configs = free + taught
            test_logits = replicate_rows(data[r], configs, weights, teacher_t[r], per_replicate, curves, estimator)
            chosen = {row: extras.chosen_model(configs, per_replicate, row) for row in extras.USED_ROWS}
            extras.add_histograms(histograms, data[r], test_logits, chosen, per_replicate)
            distillation_teachers.append(extras.teacher_probabilities(data[r], weights, chosen))
        if log:
            log(f"ILS models of replicates {reps[-1] + 1}/{replicates}: {_progress(trained, planned, started)}")
    # 5. Table 2: a student of every teacher (Bayes-optimal, No LS, LS, ILS) on every replicate, together
    rows = [r for r in range(replicates) for _ in extras.DISTILLATION_TEACHERS]
    targets = np.stack([t[name] for t in distillation_teachers for name in extras.DISTILLATION_TEACHERS])
    student_seeds = extras.student_seeds(seed, replicates, options["shared_seeds"])
    train_options = {k: v for k, v in training.items() if k not in ("seed", "shared_seeds")}
    students = train(data, rows, targets.astype(np.float32), student_seeds, **train_options)
    distillation = extras.score_students(data, students.weights)
    trained += students.epochs.size
    epochs_total += int(students.epochs.sum())
    if log:
        log(f"self-distillation students: {_progress(trained, planned, started)}")
    return dict(
        replicates=replicates,
        seed=seed,
        quick=quick,
        n_test=n_test,
        epochs=epochs,
        preset=preset,
        **options,
        grid={name: list(values) for name, values in grid.items()},
        per_replicate=per_replicate,
        curves={t: {k: v.tolist() for k, v in c.items()} for t, c in curves.items()},
        ls_epsilons=ls_epsilons,
        distillation=distillation,
        histograms={k: np.asarray(v).tolist() for k, v in histograms.items()},
        models_trained=trained,
        model_epochs=epochs_total,
        seconds=time.time() - started,
    )


def _progress(trained: int, planned: int, started: float) -> str:
    """`"3,600/21,600 models, 1:05 so far, about 5:30 left"`: the mean time per model so far times the models left.

    Example:

    >>> _progress(100, 400, time.time() - 65)
    '100/400 models, 1:05 so far, about 3:15 left'
    """
    elapsed = time.time() - started
    text = f"{trained:,}/{planned:,} models, {_minutes(elapsed)} so far"
    if trained < planned:
        text += f", about {_minutes(elapsed / trained * (planned - trained))} left"
    return text


def _minutes(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


def _check_arguments(replicates, n_test, group):
    integer_at_least("replicates", replicates, 1)
    integer_at_least("n_test", n_test, 1)
    integer_at_least("group", group, 1)


__all__ = [
    "AUTHORS_TEACHER_TEMPERATURES",
    "LS_FIXED_EPSILON",
    "OPTIONS",
    "PRESETS",
    "SMOOTHING_MASSES",
    "TEACHER_GRIDS",
    "VALIDATION_LOSSES",
    "grids",
    "model_configs",
    "resolve_options",
    "run_replicates",
    "stage_targets",
    "student_targets",
    "train",
]
