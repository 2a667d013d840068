"""The run: the grids, every replicate's datasets, the two training stages, and each replicate's rows."""

from __future__ import annotations

import time

import numpy as np

from keras_ils import calibration, tuning
from keras_ils._checks import integer_at_least, invalid
from keras_ils.experiments import synthetic, vectorised
from keras_ils.experiments.synthetic_protocol.paper import ROWS, row_key
from keras_ils.experiments.synthetic_protocol.scoring import empty_curves, replicate_rows
from keras_ils.targets import ils_targets

LS_FIXED_EPSILON = 0.2


def grids(quick: bool = False) -> dict:
    """The appendix grids, or a small subset for `quick` runs (tests, smoke checks).

    Example:

    >>> {name: len(values) for name, values in grids().items()}
    {'epsilon': 12, 'p1': 5, 'p2': 6, 'temperature': 4}
    """
    full = tuning.GRIDS["synthetic"]
    if not quick:
        return {name: tuple(values) for name, values in full.items()}
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
    init: str = "keras",
    shared_seeds: bool = True,
    temperature_estimator: str = "map",
    log=print,
) -> dict:
    """Runs the protocol on `replicates` datasets; returns per-replicate rows, curve sums and timings.

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
        init: the models' initialisation, `"keras"` (the package's) or
            `"pytorch"` (`keras_ils.experiments.vectorised.initial_weights`). Defaults
            to `"keras"`.
        shared_seeds: all models of a replicate start from the same weights
            and see the same batch order (common random numbers), so they
            differ only in their targets; `False` gives every model its own
            seed, so that selecting the best of a grid also selects a lucky
            initialisation (more so for larger grids). Defaults to `True`.
        temperature_estimator: every model's temperature fit,
            `keras_ils.calibration.fit_temperatures`' `estimator`: `"map"`
            (the package's), `"mle"` (Guo et al., what the tables of
            docs/synthetic_experiments.md were made with) or `"authors"`
            (T in [0.8, 3], the paper's code). Defaults to `"map"`.
        log: progress printer, or `None`. Defaults to `print`.

    Returns:
        A dict with `"per_replicate"` (`{row key: [metrics and chosen
        hyperparameters per replicate]}`), `"curves"` (bin sums for Fig. 4),
        `"models_trained"`, `"seconds"` and the settings.
    """
    _check_arguments(replicates, n_test, group, init, temperature_estimator)
    grid = grids(quick)
    free, taught = model_configs(grid)
    training = dict(seed=seed, shared_seeds=shared_seeds, init=init, epochs=epochs, pool_size=pool_size)
    per_replicate = {row_key(row): [] for row in ROWS}
    ls_epsilons = [hp["epsilon"] for name, hp in free if name.startswith("Standard LS")]
    curves = empty_curves(len(ls_epsilons))
    started = time.time()
    data = _datasets(replicates, seed, n_test)
    # 1. teacher-free models of every replicate: No LS (the teacher), LS, LS-0.2
    first_stage = _train_stage(data, list(range(replicates)), free, 0, None, **training)
    trained, epochs_total = replicates * len(free), int(first_stage.epochs.sum())
    if log:
        log(f"No LS and LS models of {replicates} replicates: {trained} models, {time.time() - started:.0f} s")
    # 2. the calibrated teacher's logits on the training set
    teacher_t, calibrated = _calibrated_teachers(data, first_stage, len(free), temperature_estimator)
    for first in range(0, replicates, group):
        # 3. every ILS target from the calibrated teacher, once; the ILS models of `group` replicates together
        reps = list(range(first, min(first + group, replicates)))
        second_stage = _train_stage(data, reps, taught, len(free), calibrated, **training)
        trained += len(reps) * len(taught)
        epochs_total += int(second_stage.epochs.sum())
        # 4. selection and test metrics, replicate by replicate
        for i, r in enumerate(reps):
            weights = _replicate_weights(first_stage, r, len(free), second_stage, i, len(taught))
            replicate_rows(data[r], free + taught, weights, teacher_t[r], per_replicate, curves, temperature_estimator)
        if log:
            log(f"replicates {reps[-1] + 1}/{replicates}: {trained} models, {time.time() - started:.0f} s")
    return dict(
        replicates=replicates,
        seed=seed,
        quick=quick,
        n_test=n_test,
        epochs=epochs,
        init=init,
        shared_seeds=shared_seeds,
        temperature_estimator=temperature_estimator,
        grid={name: list(values) for name, values in grid.items()},
        per_replicate=per_replicate,
        curves={t: {k: v.tolist() for k, v in c.items()} for t, c in curves.items()},
        ls_epsilons=ls_epsilons,
        models_trained=trained,
        model_epochs=epochs_total,
        seconds=time.time() - started,
    )


def _check_arguments(replicates, n_test, group, init, temperature_estimator):
    integer_at_least("replicates", replicates, 1)
    integer_at_least("n_test", n_test, 1)
    integer_at_least("group", group, 1)
    if init not in vectorised.INITIALISATIONS:
        raise ValueError(
            f"Invalid value for argument `init`. Expected one of {vectorised.INITIALISATIONS}. Received: init={init!r}"
        )
    if temperature_estimator not in calibration.ESTIMATORS:
        raise invalid("temperature_estimator", f"one of {calibration.ESTIMATORS}", temperature_estimator)


def _datasets(replicates, seed, n_test):
    """Every replicate's `{"train", "val", "test"}` datasets (seeds `s`, `s + 10000`, `s + 20000`)."""
    return [
        dict(
            train=synthetic.make_dataset(50, seed + r),
            val=synthetic.make_dataset(50, seed + r + 10_000),
            test=synthetic.make_dataset(n_test, seed + r + 20_000),
        )
        for r in range(replicates)
    ]


def _model_seeds(seed, reps, offset, count, shared):
    """Seeds of `count` models (configuration indices `offset...`) of each replicate, replicate-major."""
    if shared:  # common random numbers: one initialisation and batch order per replicate
        return [seed + r for r in reps for _ in range(count)]
    return [(seed + r) * 1000 + offset + j + 1 for r in reps for j in range(count)]


def _train_stage(data, reps, configs, offset, teacher_logits, *, seed, shared_seeds, init, epochs, pool_size):
    """Every model of `configs` on every replicate of `reps`, replicate-major, in one call of the trainer.

    `offset` is the index of `configs`' first model among a replicate's
    models; `teacher_logits` are the replicates' calibrated teachers' logits
    on their training sets, or `None` for teacher-free targets.
    """
    rows = [r for r in reps for _ in configs]
    teachers = [None] * len(data) if teacher_logits is None else teacher_logits
    targets = [
        np.asarray(ils_targets(data[r]["train"].y, teachers[r], num_classes=synthetic.NUM_CLASSES, **hp), np.float32)
        for r in reps
        for _, hp in configs
    ]
    seeds = _model_seeds(seed, reps, offset, len(configs), shared_seeds)
    weights = vectorised.initial_weights(seeds, 2, synthetic.NUM_CLASSES, scheme=init)
    x = np.stack([data[r]["train"].x for r in rows])
    x_val = np.stack([data[r]["val"].x for r in rows])
    y_val = np.stack([data[r]["val"].y for r in rows])
    return vectorised.train_mlps(
        x, np.stack(targets), x_val, y_val, seeds=seeds, weights=weights, epochs=epochs, pool_size=pool_size
    )


def _calibrated_teachers(data, first_stage, models_per_replicate, estimator):
    """Every replicate's No LS teacher (its first model): `T*` on validation, calibrated logits on training."""
    reps = range(len(data))
    teacher_rows = np.arange(len(data)) * models_per_replicate
    teacher_weights = [(k[teacher_rows], b[teacher_rows]) for k, b in first_stage.weights]
    teacher_val = vectorised.mlp_logits(teacher_weights, np.stack([data[r]["val"].x for r in reps]))
    teacher_t = calibration.fit_temperatures(
        teacher_val, np.stack([data[r]["val"].y for r in reps]), estimator=estimator
    )
    teacher_train = vectorised.mlp_logits(teacher_weights, np.stack([data[r]["train"].x for r in reps]))
    return teacher_t, (teacher_train / teacher_t[:, None, None]).astype(np.float32)


def _replicate_weights(first_stage, r, free_count, second_stage, i, taught_count):
    """Replicate `r`'s weights: its teacher-free models, then its taught models (`i`-th in the second stage)."""
    index = np.r_[r * free_count : (r + 1) * free_count]
    index2 = np.r_[i * taught_count : (i + 1) * taught_count]
    return [
        (np.concatenate([k1[index], k2[index2]]), np.concatenate([b1[index], b2[index2]]))
        for (k1, b1), (k2, b2) in zip(first_stage.weights, second_stage.weights, strict=True)
    ]
