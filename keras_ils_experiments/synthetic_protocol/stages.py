"""The protocol's pieces: every replicate's datasets, the students' targets, a training stage, the teachers."""

from __future__ import annotations

import numpy as np

from keras_ils.calibration import temperature
from keras_ils.comparison.data import synthetic
from keras_ils.comparison.engine import vectorised
from keras_ils.targets import ils_targets
from keras_ils_experiments.synthetic_protocol.options import ProtocolOptions


def replicate_datasets(replicates: int, seed: int, n_test: int) -> list:
    """Every replicate's `{"train", "val", "test"}` datasets (seeds `s`, `s + 10000`, `s + 20000`, `s = seed + r`).

    Train and validation hold 50 points per class, test `n_test` per class
    (`keras_ils.comparison.data.synthetic.make_dataset`).

    Example:

    >>> data = replicate_datasets(2, seed=0, n_test=10)
    >>> len(data), len(data[1]["train"].y), len(data[1]["test"].y)
    (2, 150, 30)
    """
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


def train_stage(data, reps, configs, offset: int, teachers, options: ProtocolOptions):
    """Every model of `configs` on every replicate of `reps`, replicate-major, in one call of the trainer.

    `offset` is the index of `configs`' first model among a replicate's
    models; `teachers` is `(T* per replicate, calibrated teacher logits on
    each training set)` from `calibrated_teachers`, or `None` for
    teacher-free targets.
    """
    settings = options.settings
    teacher_t, teacher_logits = (None, None) if teachers is None else teachers
    targets = stage_targets(
        data, reps, configs, teacher_logits, teacher_t, settings["teacher_grid"], settings["smoothing_mass"]
    )
    seeds = _model_seeds(options.seed, reps, offset, len(configs), settings["shared_seeds"])
    return train(data, [r for r in reps for _ in configs], targets, seeds, options)


def stage_targets(data, reps, configs, teacher_logits, teacher_t, teacher_grid="paper", smoothing_mass="all_classes"):
    """`[len(reps) * len(configs), n, K]` training targets of every config on every replicate, replicate-major.

    The targets are a function of each training example alone (its label and
    teacher logits), so one `student_targets` call per config covers all the
    replicates' examples at once (a few hundred calls instead of thousands of
    small ones); only the authors' teacher grid, whose temperature depends on
    each replicate's `T*`, takes one call per replicate and config.

    Example:

    >>> data = replicate_datasets(2, seed=0, n_test=1)
    >>> configs = [("Standard LS", dict(method="ls", epsilon=0.3)), ("No LS", dict(method="none"))]
    >>> y = stage_targets(data, [0, 1], configs, None, None)   # replicate 0's two configs, then replicate 1's
    >>> y.shape, bool(np.allclose(y[2], 0.7 * np.eye(3)[data[1]["train"].y] + 0.1))
    ((4, 150, 3), True)
    """
    n = len(data[reps[0]]["train"].y)
    if teacher_grid == "authors" and teacher_logits is not None:  # one block per replicate
        blocks = [(data[r]["train"].y, teacher_logits[r], teacher_t[r]) for r in reps]
    else:  # one block of the replicates' examples, stacked
        stacked = None if teacher_logits is None else np.concatenate([teacher_logits[r] for r in reps])
        blocks = [(np.concatenate([data[r]["train"].y for r in reps]), stacked, None)]
    per_block = [
        np.stack(
            [
                student_targets(y, logits, hp, teacher_t=t, teacher_grid=teacher_grid, smoothing_mass=smoothing_mass)
                for _, hp in configs
            ]
        )  # [configs, block's examples, K]
        for y, logits, t in blocks
    ]
    targets = np.concatenate(per_block, axis=1).reshape(len(configs), len(reps), n, -1)
    return targets.transpose(1, 0, 2, 3).reshape(len(reps) * len(configs), n, -1)


def student_targets(
    labels, calibrated_logits, hp, *, teacher_t=None, teacher_grid="paper", smoothing_mass="all_classes"
):
    """One model's training targets by `keras_ils.targets.ils_targets`, under the protocol's target options.

    - `teacher_grid="authors"`: the grid's `T` divides the teacher's raw
      logits, i.e. the package's `temperature = T / T*` on the calibrated
      ones (ILS1's `p_t` stays the calibrated teacher's).
    - `smoothing_mass="wrong_classes"`: ILS1's `eps_x` goes to the wrong
      classes only, `eps_x / (K - 1)` each, `1 - eps_x` to the true class (the
      authors' code): the package's targets `y` with their off-true mass scaled
      by `K / (K - 1)`, `onehot + (y - onehot) * K / (K - 1)`.

    Example:

    >>> y = student_targets(np.array([0]), np.log([[0.9, 0.05, 0.05]]), dict(method="ils1", p1=0.8, p2=2.0),
    ...                     smoothing_mass="wrong_classes")
    >>> np.round(y, 4).tolist()   # eps_x = 2 * (0.9 - 0.8) ** 2 = 0.02
    [[0.98, 0.01, 0.01]]
    """
    hp = dict(hp)
    if teacher_grid == "authors" and "temperature" in hp:
        hp["temperature"] = hp["temperature"] / float(teacher_t)
    y = np.asarray(ils_targets(labels, calibrated_logits, num_classes=synthetic.NUM_CLASSES, **hp), np.float64)
    if smoothing_mass == "wrong_classes" and hp["method"] == "ils1":
        one_hot = np.eye(synthetic.NUM_CLASSES)[np.asarray(labels)]
        k = synthetic.NUM_CLASSES
        y = one_hot + (y - one_hot) * k / (k - 1)
    return y.astype(np.float32)


def train(data, rows, targets, seeds, options: ProtocolOptions):
    """Trains one model per entry of `rows` (a replicate index) on `targets` from `seeds`, in one trainer call.

    The initialisation (`options.settings["init"]`) and the trainer's
    settings (`options.training()`) come from `options`.
    """
    weights = vectorised.initial_weights(seeds, 2, synthetic.NUM_CLASSES, scheme=options.settings["init"])
    x = np.stack([data[r]["train"].x for r in rows])
    x_val = np.stack([data[r]["val"].x for r in rows])
    y_val = np.stack([data[r]["val"].y for r in rows])
    return vectorised.train_mlps(x, targets, x_val, y_val, seeds=seeds, weights=weights, training=options.training())


def calibrated_teachers(data, first_stage, models_per_replicate: int, estimator: str) -> tuple:
    """Every replicate's No LS teacher (its first model): `(T* on validation, calibrated logits on training)`."""
    reps = range(len(data))
    teacher_rows = np.arange(len(data)) * models_per_replicate
    teacher_weights = [(k[teacher_rows], b[teacher_rows]) for k, b in first_stage.weights]
    teacher_val = vectorised.mlp_logits(teacher_weights, np.stack([data[r]["val"].x for r in reps]))
    teacher_t = temperature._fit_temperatures(
        teacher_val, np.stack([data[r]["val"].y for r in reps]), estimator=estimator
    )
    teacher_train = vectorised.mlp_logits(teacher_weights, np.stack([data[r]["train"].x for r in reps]))
    return teacher_t, (teacher_train / teacher_t[:, None, None]).astype(np.float32)


def replicate_weights(first_stage, r: int, free_count: int, second_stage, i: int, taught_count: int) -> list:
    """Replicate `r`'s weights: its teacher-free models, then its taught models (`i`-th in the second stage)."""
    index = np.r_[r * free_count : (r + 1) * free_count]
    index2 = np.r_[i * taught_count : (i + 1) * taught_count]
    return [
        (np.concatenate([k1[index], k2[index2]]), np.concatenate([b1[index], b2[index2]]))
        for (k1, b1), (k2, b2) in zip(first_stage.weights, second_stage.weights, strict=True)
    ]


__all__ = [
    "calibrated_teachers",
    "replicate_datasets",
    "replicate_weights",
    "stage_targets",
    "student_targets",
    "train",
    "train_stage",
]
