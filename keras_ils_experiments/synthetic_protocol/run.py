"""The run: the grids, every replicate's datasets, the two training stages, and each replicate's rows."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from keras_ils import methods
from keras_ils._checks import invalid
from keras_ils_experiments.synthetic_protocol import extras, scoring, stages
from keras_ils_experiments.synthetic_protocol.options import (
    AUTHORS_TEACHER_TEMPERATURES,
    OPTIONS,
    PRESETS,
    SMOOTHING_MASSES,
    TEACHER_GRIDS,
    VALIDATION_LOSSES,
    ProtocolOptions,
    resolve_options,
)
from keras_ils_experiments.synthetic_protocol.printed_values import ROWS, row_key
from keras_ils_experiments.synthetic_protocol.stages import stage_targets, student_targets, train

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


@dataclasses.dataclass
class _Tables:
    """What the replicates add up to: each row's metrics, Fig. 4's bin sums, Fig. 2's counts, Table 2's teachers."""

    per_replicate: dict
    curves: dict
    histograms: dict
    teachers: list


class _Progress:
    """Models and epochs trained so far, and the log lines that report them."""

    def __init__(self, planned: int, log):
        self.planned, self.log, self.started = planned, log, time.time()
        self.trained = self.epochs = 0

    def count(self, stage) -> None:
        self.trained += stage.epochs.size
        self.epochs += int(stage.epochs.sum())

    def report(self, what: str) -> None:
        if self.log:
            self.log(f"{what}: {_progress(self.trained, self.planned, self.started)}")


def run_replicates(options: ProtocolOptions | None = None, *, log=print) -> dict:
    """Runs the protocol on `options.replicates` datasets; returns per-replicate rows, curve sums and timings.

    Args:
        options: a `ProtocolOptions`: the run's size and its training and
            tuning settings (a preset's, or each given). Defaults to `None`:
            `ProtocolOptions()`, the paper's 100 replicates with the
            package's settings.
        log: progress printer, or `None`. Defaults to `print`.

    Returns:
        A dict with `"per_replicate"` (`{row key: [metrics and chosen
        hyperparameters per replicate]}`), `"curves"` (bin sums for Fig. 4),
        `"distillation"` (Table 2's students, per teacher and replicate),
        `"histograms"` (Fig. 2's counts), `"models_trained"`, `"seconds"` and
        the settings.
    """
    if options is None:
        options = ProtocolOptions()
    elif not isinstance(options, ProtocolOptions):
        raise TypeError(f"Argument `options` must be a ProtocolOptions. Received: options={options!r}")
    settings = options.settings
    grid = grids(options.quick, settings["teacher_grid"])
    free, taught = model_configs(grid)
    ls_epsilons = [hp["epsilon"] for name, hp in free if name.startswith("Standard LS")]
    tables = _Tables(
        {row_key(row): [] for row in ROWS}, scoring.empty_curves(len(ls_epsilons)), extras.empty_histograms(), []
    )
    replicates = options.replicates
    progress = _Progress(replicates * (len(free) + len(taught) + len(extras.DISTILLATION_TEACHERS)), log)
    if log:
        log(
            f"{progress.planned:,} models of {replicates} replicates: No LS and LS, then ILS in groups of "
            f"{options.group} replicates"
        )
    data = stages.replicate_datasets(replicates, options.seed, options.n_test)
    # 1. teacher-free models of every replicate: No LS (the teacher), LS, LS-0.2
    first_stage = stages.train_stage(data, list(range(replicates)), free, 0, None, options)
    progress.count(first_stage)
    progress.report(f"No LS and LS models of {replicates} replicates")
    # 2. the calibrated teacher's logits on the training set
    teachers = stages.calibrated_teachers(data, first_stage, len(free), settings["temperature_estimator"])
    for first in range(0, replicates, options.group):
        reps = list(range(first, min(first + options.group, replicates)))
        _ils_group(data, reps, (free, taught, first_stage), teachers, options, tables, progress)
        progress.report(f"ILS models of replicates {reps[-1] + 1}/{replicates}")
    distillation = _distillation_students(data, tables.teachers, options, progress)
    return dict(
        replicates=replicates,
        seed=options.seed,
        quick=options.quick,
        n_test=options.n_test,
        epochs=options.epochs,
        preset=options.preset,
        **settings,
        grid={name: list(values) for name, values in grid.items()},
        per_replicate=tables.per_replicate,
        curves={t: {k: v.tolist() for k, v in c.items()} for t, c in tables.curves.items()},
        ls_epsilons=ls_epsilons,
        distillation=distillation,
        histograms={k: np.asarray(v).tolist() for k, v in tables.histograms.items()},
        models_trained=progress.trained,
        model_epochs=progress.epochs,
        seconds=time.time() - progress.started,
    )


def _ils_group(data, reps, stage_one, teachers, options, tables, progress):
    """The ILS models of the replicates `reps` in one stage, then each replicate's rows, counts and teachers.

    `stage_one` is `(teacher-free configs, teacher configs, the first stage's TrainedMLPs)`, `teachers`
    `calibrated_teachers`' `(T*, calibrated logits)`.
    """
    free, taught, first_stage = stage_one
    # 3. every ILS target from the calibrated teacher, once; the ILS models of the group together
    second_stage = stages.train_stage(data, reps, taught, len(free), teachers, options)
    progress.count(second_stage)
    # 4. selection and test metrics, replicate by replicate; Fig. 2's counts and Table 2's teachers
    estimator = options.settings["temperature_estimator"]
    configs = free + taught
    for i, r in enumerate(reps):
        weights = stages.replicate_weights(first_stage, r, len(free), second_stage, i, len(taught))
        test_logits = scoring.replicate_rows(
            data[r], configs, weights, teachers[0][r], tables.per_replicate, tables.curves, estimator
        )
        chosen = {row: extras.chosen_model(configs, tables.per_replicate, row) for row in extras.USED_ROWS}
        extras.add_histograms(tables.histograms, data[r], test_logits, chosen, tables.per_replicate)
        tables.teachers.append(extras.teacher_probabilities(data[r], weights, chosen))


def _distillation_students(data, teachers, options, progress) -> dict:
    """5. Table 2: a student of every teacher (Bayes-optimal, No LS, LS, ILS) on every replicate, together."""
    rows = [r for r in range(options.replicates) for _ in extras.DISTILLATION_TEACHERS]
    targets = np.stack([t[name] for t in teachers for name in extras.DISTILLATION_TEACHERS])
    seeds = extras.student_seeds(options.seed, options.replicates, options.settings["shared_seeds"])
    students = stages.train(data, rows, targets.astype(np.float32), seeds, options)
    distillation = extras.score_students(data, students.weights)
    progress.count(students)
    progress.report("self-distillation students")
    return distillation


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


__all__ = [
    "AUTHORS_TEACHER_TEMPERATURES",
    "LS_FIXED_EPSILON",
    "OPTIONS",
    "PRESETS",
    "ProtocolOptions",
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
