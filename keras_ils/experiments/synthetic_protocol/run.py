"""The run: the grids, every replicate's datasets, the two training stages, and each replicate's rows."""

from __future__ import annotations

import time

import numpy as np

from keras_ils import calibration, methods
from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils.experiments.data import synthetic
from keras_ils.experiments.engine import vectorised
from keras_ils.experiments.synthetic_protocol import extras
from keras_ils.experiments.synthetic_protocol.printed_values import ROWS, row_key
from keras_ils.experiments.synthetic_protocol.scoring import empty_curves, replicate_rows
from keras_ils.targets import ils_targets

LS_FIXED_EPSILON = 0.2
# The teacher temperatures of the authors' code (main.py), which divide the teacher's raw logits.
AUTHORS_TEACHER_TEMPERATURES = (1.0, 2.0, 4.0, 8.0, 16.0)
TEACHER_GRIDS = ("paper", "authors")
SMOOTHING_MASSES = ("all_classes", "wrong_classes")
VALIDATION_LOSSES = ("example_mean", "batch_mean")

# The settings `run_replicates` reads from a preset; the package's defaults first.
OPTIONS = dict(
    init="keras",
    shared_seeds=True,
    temperature_estimator="map",
    teacher_grid="paper",
    batch_size=32,
    weight_decay=0.0,
    smoothing_mass="all_classes",
    validation_loss="example_mean",
)
# The habits of the authors' public code (github.com/mmaher22/Instance-based-label-smoothing) that the paper does not
# state: PyTorch's initialisation, one seed per model, T in [0.8, 3], teacher temperatures {1, 2, 4, 8, 16} on raw
# logits, batch 128 (its default; its README says 512), coupled weight decay 1e-4, eps / (K - 1) on each wrong class
# for ILS1, and the validation loss as a mean of per-batch means.
PRESETS = {
    "package": dict(OPTIONS),
    "authors": dict(
        init="pytorch",
        shared_seeds=False,
        temperature_estimator="authors",
        teacher_grid="authors",
        batch_size=128,
        weight_decay=1e-4,
        smoothing_mass="wrong_classes",
        validation_loss="batch_mean",
    ),
}


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


def resolve_options(preset: str = "package", **overrides) -> dict:
    """The preset's settings (`PRESETS`) with every override that is not `None`, each checked.

    Example:

    >>> resolve_options("authors", batch_size=32)["batch_size"], resolve_options()["init"]
    (32, 'keras')
    """
    if preset not in PRESETS:
        raise invalid("preset", f"one of {tuple(PRESETS)}", preset)
    unknown = set(overrides) - set(OPTIONS)
    if unknown:
        raise TypeError(f"Unknown options: {sorted(unknown)}. Expected some of {sorted(OPTIONS)}.")
    options = dict(PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None})
    if options["init"] not in vectorised.INITIALISATIONS:
        raise invalid("init", f"one of {vectorised.INITIALISATIONS}", options["init"])
    if not isinstance(options["shared_seeds"], bool):
        raise invalid("shared_seeds", "True or False", options["shared_seeds"])
    if options["temperature_estimator"] not in calibration.ESTIMATORS:
        raise invalid("temperature_estimator", f"one of {calibration.ESTIMATORS}", options["temperature_estimator"])
    if options["teacher_grid"] not in TEACHER_GRIDS:
        raise invalid("teacher_grid", f"one of {TEACHER_GRIDS}", options["teacher_grid"])
    integer_at_least("batch_size", options["batch_size"], 1)
    options["weight_decay"] = number_in("weight_decay", options["weight_decay"], 0.0, expected="a float >= 0")
    if options["smoothing_mass"] not in SMOOTHING_MASSES:
        raise invalid("smoothing_mass", f"one of {SMOOTHING_MASSES}", options["smoothing_mass"])
    if options["validation_loss"] not in VALIDATION_LOSSES:
        raise invalid("validation_loss", f"one of {VALIDATION_LOSSES}", options["validation_loss"])
    return options


def _check_arguments(replicates, n_test, group):
    integer_at_least("replicates", replicates, 1)
    integer_at_least("n_test", n_test, 1)
    integer_at_least("group", group, 1)


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


def _train_stage(
    data,
    reps,
    configs,
    offset,
    teacher_logits,
    teacher_t,
    *,
    seed,
    shared_seeds,
    teacher_grid="paper",
    smoothing_mass="all_classes",
    **training,
):
    """Every model of `configs` on every replicate of `reps`, replicate-major, in one call of the trainer.

    `offset` is the index of `configs`' first model among a replicate's
    models; `teacher_logits` are the replicates' calibrated teachers' logits
    on their training sets and `teacher_t` their temperatures, or `None` for
    teacher-free targets.
    """
    targets = stage_targets(data, reps, configs, teacher_logits, teacher_t, teacher_grid, smoothing_mass)
    seeds = _model_seeds(seed, reps, offset, len(configs), shared_seeds)
    return train(data, [r for r in reps for _ in configs], targets, seeds, **training)


def stage_targets(data, reps, configs, teacher_logits, teacher_t, teacher_grid="paper", smoothing_mass="all_classes"):
    """`[len(reps) * len(configs), n, K]` training targets of every config on every replicate, replicate-major.

    The targets are a function of each training example alone (its label and
    teacher logits), so one `student_targets` call per config covers all the
    replicates' examples at once (a few hundred calls instead of thousands of
    small ones); only the authors' teacher grid, whose temperature depends on
    each replicate's `T*`, takes one call per replicate and config.

    Example:

    >>> data = _datasets(2, seed=0, n_test=1)
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


def train(data, rows, targets, seeds, *, init, epochs, pool_size, batch_size, weight_decay, validation_loss):
    """Trains one model per entry of `rows` (a replicate index) on `targets` from `seeds`, in one trainer call."""
    weights = vectorised.initial_weights(seeds, 2, synthetic.NUM_CLASSES, scheme=init)
    x = np.stack([data[r]["train"].x for r in rows])
    x_val = np.stack([data[r]["val"].x for r in rows])
    y_val = np.stack([data[r]["val"].y for r in rows])
    engine = vectorised.MLPTraining(
        epochs=epochs,
        pool_size=pool_size,
        batch_size=batch_size,
        weight_decay=weight_decay,
        validation_loss="mean" if validation_loss == "example_mean" else validation_loss,
    )
    return vectorised.train_mlps(x, targets, x_val, y_val, seeds=seeds, weights=weights, training=engine)


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
