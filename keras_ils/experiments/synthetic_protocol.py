"""The paper's synthetic experiments at full scale: appendix table, dense/sparse LS rows, Fig. 4 curves, win rates.

Protocol (paper §3, §4.1 and appendix A), per replicate `r` (seed `seed + r`;
train/validation/test seeds as `keras_ils.experiments.datasets.load_synthetic`: `s`,
`s + 10000`, `s + 20000`; 50/50/5000 points per class):

1. Every model is `keras_ils.experiments.models.mlp` (5 x 64 ReLU) trained by the MLP
   recipe (Adam 1e-2, batch 32, at most 500 epochs, early stopping with
   patience 10 on the hard-label validation cross-entropy, best epoch kept),
   all of them at once by `keras_ils.experiments.vectorised.train_mlps`. By default the
   models of one replicate share their initial weights and batch order
   (common random numbers): they differ only in their targets
   (`shared_seeds=False`: one seed per model).
2. No LS (one-hot), LS over the appendix grid of `epsilon`, and LS-0.2.
3. The No LS model is the teacher: `T*` fitted on validation, its calibrated
   logits on the training set give every ILS target through
   `keras_ils.targets.ils_targets` (the package's one implementation), once.
4. ILS1 (`P1 x P2`), ILS2 (`epsilon x T`) and ILS (`P1 x P2 x T`) over the
   appendix grids (`keras_ils.tuning.GRIDS["synthetic"]`). The grid's `T` is
   the package's `temperature` on the calibrated teacher (see
   `keras_ils.targets`: the paper divides raw logits, so our `T = 1` is its
   `T = T*`).
5. Every model also gets its own temperature (`vectorised.fit_temperatures`
   on validation). Rows without TempS select by the raw validation
   cross-entropy, rows with TempS by the cross-entropy after scaling, both
   against hard labels; so the chosen hyperparameters may differ.
6. Table 1's extra rows: LS with `epsilon` selected on the dense-only or the
   sparse-only part of the validation set.

Test metrics are the package's (`keras_ils.evaluation.scores`, through `scores`): `cwece` is
Eq. 2 of the paper (Kull et al.'s classwise-ECE); `class_conditional_ece` is
the authors' code's quantity that the paper's cwECE column actually prints
(see `keras_ils.metrics.ClassConditionalECE`).
"""

from __future__ import annotations

import io
import json
import math
import time

import numpy as np

from keras_ils import evaluation, tuning
from keras_ils._checks import integer_at_least
from keras_ils.experiments import synthetic, vectorised
from keras_ils.targets import ils_targets, smoothing_factor

LS_FIXED_EPSILON = 0.2
METRICS = ("accuracy", "accuracy_dense", "accuracy_sparse", "nll", "ece", "cwece", "class_conditional_ece")
HYPERPARAMETERS = ("epsilon", "p1", "p2", "temperature")
ROWS = (
    ("Bayes-Optimal", False),
    ("No LS", False),
    ("No LS", True),
    ("Standard LS", False),
    ("Standard LS", True),
    ("Standard LS-0.2", False),
    ("Standard LS-0.2", True),
    ("ILS1", False),
    ("ILS1", True),
    ("ILS2", False),
    ("ILS2", True),
    ("ILS", False),
    ("ILS", True),
    ("Standard LS (dense validation)", False),
    ("Standard LS (sparse validation)", False),
)

# The paper's appendix table (tab:appendix-synthetic2) and Table 1's dense/sparse rows (tab:motivate-calibration):
# avg temperature, validation loss, acc, acc dense, acc sparse, CE, ECE, cwECE (printed; the authors'
# class-conditional ECE), and the average hyperparameters. The ILS row prints P1 = 1.63 and P2 = 0.80, outside
# the P1 grid {0.75..0.85}: the two are evidently swapped, and are given here as P1 = 0.80, P2 = 1.63.
# ILS1's hyperparameter cells are empty in the paper; §4.1 quotes P1 = 0.8, P2 = 2.0 for its Fig. 4.
_P = ("temps", "val_loss", "accuracy", "accuracy_dense", "accuracy_sparse", "nll", "ece", "cwece_printed")


def _paper(values, **hyperparameters):
    return dict(zip(_P, values, strict=True), **hyperparameters)


PAPER = {
    ("Bayes-Optimal", False): _paper((1.0, 0.4423, 0.8198, 0.8294, 0.7814, 0.4444, 0.0067, 0.0234)),
    ("No LS", False): _paper((1.0, 0.5222, 0.7845, 0.8143, 0.6654, 0.5589, 0.0426, 0.0668)),
    ("No LS", True): _paper((1.202, 0.5092, 0.7845, 0.8143, 0.6654, 0.5446, 0.0311, 0.0632)),
    ("Standard LS", False): _paper((1.0, 0.4851, 0.7944, 0.8117, 0.7251, 0.5318, 0.0293, 0.0723), epsilon=0.061),
    ("Standard LS", True): _paper((0.946, 0.4797, 0.7948, 0.8124, 0.7244, 0.5238, 0.0263, 0.0701), epsilon=0.079),
    ("Standard LS-0.2", False): _paper((1.0, 0.5073, 0.7939, 0.8111, 0.7253, 0.5439, 0.0650, 0.0785), epsilon=0.2),
    ("Standard LS-0.2", True): _paper((0.804, 0.4788, 0.7939, 0.8111, 0.7253, 0.5301, 0.0241, 0.0707), epsilon=0.2),
    ("ILS1", False): _paper((1.0, 0.4700, 0.8018, 0.8149, 0.7493, 0.5041, 0.0235, 0.0495)),
    ("ILS1", True): _paper((0.942, 0.4654, 0.8016, 0.8148, 0.7488, 0.5052, 0.0268, 0.0497)),
    ("ILS2", False): _paper(
        (1.0, 0.4804, 0.7956, 0.8150, 0.7337, 0.5232, 0.0287, 0.0496), temperature=11.48, epsilon=0.0494
    ),
    ("ILS2", True): _paper(
        (0.906, 0.4744, 0.7958, 0.8154, 0.7302, 0.5201, 0.0259, 0.0494), temperature=9.63, epsilon=0.0698
    ),
    ("ILS", False): _paper(
        (1.0, 0.4628, 0.8013, 0.8142, 0.7497, 0.5089, 0.0269, 0.0449), temperature=2.91, p1=0.80, p2=1.63
    ),
    ("ILS", True): _paper(
        (1.033, 0.4618, 0.8014, 0.8145, 0.7491, 0.5087, 0.0278, 0.0446), temperature=2.73, p1=0.81, p2=1.59
    ),
    ("Standard LS (dense validation)", False): _paper(
        (1.0, None, 0.7906, 0.8153, 0.6918, 0.5326, 0.0287, 0.0749), epsilon=0.047
    ),
    ("Standard LS (sparse validation)", False): _paper(
        (1.0, None, 0.7873, 0.8105, 0.7447, 0.5365, 0.0375, 0.0778), epsilon=0.122
    ),
}
PAPER_ILS1_CURVE = dict(p1=0.8, p2=2.0)  # §4.1, the black curve of Fig. 4

# The paper's claims tested per replicate: (name, row a, row b, metric); a beats b when its metric is lower
# (higher for accuracy).
CLAIMS = tuple(
    (f"{a[0]}{' +TempS' if a[1] else ''} beats {b[0]}{' +TempS' if b[1] else ''} in {metric}", a, b, metric)
    for temps in (False, True)
    for method in ("ILS1", "ILS")
    for a, b in [((method, temps), ("Standard LS", temps))]
    for metric in ("nll", "accuracy", "cwece", "class_conditional_ece")
) + tuple(
    (
        f"No LS +TempS beats Standard LS{' +TempS' if temps else ''} in {metric}",
        ("No LS", True),
        ("Standard LS", temps),
        metric,
    )
    for temps in (False, True)
    for metric in ("cwece", "class_conditional_ece")
)

CURVE_BINS = 50
CURVE_RANGE = (0.2, 1.0)
CURVE_TEACHERS = ("bayes", "no_ls_temps")
# The paper does not say on which instances it compared students with the teacher. ILS1's factor smooths
# training labels, so the training instances are the natural reading; the test instances are shown too.
CURVE_INSTANCES = ("train", "test")


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


def _nll(logits, labels):
    """Mean hard-label cross-entropy per model: `[M, n, K]`, `[M, n]` -> `[M]` (float64)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_p, np.asarray(labels)[..., None], axis=-1)[..., 0].mean(axis=-1)


def _softmax(z):
    z = np.asarray(z, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


def _model_seeds(seed, reps, offset, count, shared):
    """Seeds of `count` models (configuration indices `offset...`) of each replicate, replicate-major."""
    if shared:  # common random numbers: one initialisation and batch order per replicate
        return [seed + r for r in reps for _ in range(count)]
    return [(seed + r) * 1000 + offset + j + 1 for r in reps for j in range(count)]


def _train(data, rows, targets, seeds, train_args, init):
    weights = vectorised.initial_weights(seeds, 2, synthetic.NUM_CLASSES, scheme=init)
    x = np.stack([data[r]["train"].x for r in rows])
    x_val = np.stack([data[r]["val"].x for r in rows])
    y_val = np.stack([data[r]["val"].y for r in rows])
    return vectorised.train_mlps(x, np.stack(targets), x_val, y_val, seeds=seeds, weights=weights, **train_args)


def scores(logits, labels, dense, num_bins: int = 15) -> dict:
    """`keras_ils.evaluation.scores`' accuracy, NLL, ECE, cwECE and class-conditional ECE, plus the accuracy
    on the dense and on the sparse test points.

    Example:

    >>> out = scores(np.log([[0.9, 0.1], [0.2, 0.8]]), np.array([0, 0]), np.array([True, False]))
    >>> out["accuracy"], out["accuracy_dense"], round(out["nll"], 4)
    (0.5, 1.0, 0.8574)
    """
    values = evaluation.scores(logits, labels, num_bins=num_bins)
    probabilities, _ = evaluation.probabilities(logits)
    correct = probabilities.argmax(axis=-1) == np.asarray(labels)
    dense = np.asarray(dense, bool)
    return dict(
        accuracy=values["accuracy"],
        accuracy_dense=float(correct[dense].mean()) if dense.any() else float("nan"),
        accuracy_sparse=float(correct[~dense].mean()) if (~dense).any() else float("nan"),
        **{name: values[name] for name in ("nll", "ece", "cwece", "class_conditional_ece")},
    )


def _select(values, candidates):
    return candidates[int(np.argmin(values[candidates]))]


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
        log: progress printer, or `None`. Defaults to `print`.

    Returns:
        A dict with `"per_replicate"` (`{row key: [metrics and chosen
        hyperparameters per replicate]}`), `"curves"` (bin sums for Fig. 4),
        `"models_trained"`, `"seconds"` and the settings.
    """
    integer_at_least("replicates", replicates, 1)
    integer_at_least("n_test", n_test, 1)
    integer_at_least("group", group, 1)
    if init not in vectorised.INITIALISATIONS:
        raise ValueError(
            f"Invalid value for argument `init`. Expected one of {vectorised.INITIALISATIONS}. Received: init={init!r}"
        )
    grid = grids(quick)
    free, taught = model_configs(grid)
    train_args = dict(epochs=epochs, pool_size=pool_size)
    per_replicate = {_key(row): [] for row in ROWS}
    ls_epsilons = [hp["epsilon"] for name, hp in free if name.startswith("Standard LS")]
    curves = {
        f"{teacher}/{instances}": dict(
            teacher_sum=np.zeros(CURVE_BINS),
            student_sum=np.zeros((len(ls_epsilons), CURVE_BINS)),
            count=np.zeros(CURVE_BINS),
        )
        for teacher in CURVE_TEACHERS
        for instances in CURVE_INSTANCES
    }
    started = time.time()
    data = {
        r: dict(
            train=synthetic.make_dataset(50, seed + r),
            val=synthetic.make_dataset(50, seed + r + 10_000),
            test=synthetic.make_dataset(n_test, seed + r + 20_000),
        )
        for r in range(replicates)
    }
    # 1. teacher-free models of every replicate: No LS (the teacher), LS, LS-0.2
    reps = list(range(replicates))
    rows = [r for r in reps for _ in free]
    targets = [
        np.asarray(ils_targets(data[r]["train"].y, num_classes=3, **hp), np.float32) for r in reps for _, hp in free
    ]
    seeds = _model_seeds(seed, reps, 0, len(free), shared_seeds)
    first_stage = _train(data, rows, targets, seeds, train_args, init)
    trained, epochs_total = len(rows), int(first_stage.epochs.sum())
    if log:
        log(f"No LS and LS models of {replicates} replicates: {trained} models, {time.time() - started:.0f} s")
    # 2. the calibrated teacher's logits on the training set
    teacher_rows = np.arange(replicates) * len(free)
    teacher_weights = [(k[teacher_rows], b[teacher_rows]) for k, b in first_stage.weights]
    teacher_val = vectorised.mlp_logits(teacher_weights, np.stack([data[r]["val"].x for r in reps]))
    teacher_t = vectorised.fit_temperatures(teacher_val, np.stack([data[r]["val"].y for r in reps]))
    teacher_train = vectorised.mlp_logits(teacher_weights, np.stack([data[r]["train"].x for r in reps]))
    calibrated = (teacher_train / teacher_t[:, None, None]).astype(np.float32)
    for first in range(0, replicates, group):
        # 3. every ILS target from the calibrated teacher, once; the ILS models of `group` replicates together
        reps = list(range(first, min(first + group, replicates)))
        rows2 = [r for r in reps for _ in taught]
        targets2 = [
            np.asarray(ils_targets(data[r]["train"].y, calibrated[r], **hp), np.float32)
            for r in reps
            for _, hp in taught
        ]
        seeds2 = _model_seeds(seed, reps, len(free), len(taught), shared_seeds)
        second_stage = _train(data, rows2, targets2, seeds2, train_args, init)
        trained += len(rows2)
        epochs_total += int(second_stage.epochs.sum())
        # 4. selection and test metrics, replicate by replicate
        for i, r in enumerate(reps):
            index = np.r_[r * len(free) : (r + 1) * len(free)]
            index2 = np.r_[i * len(taught) : (i + 1) * len(taught)]
            weights = [
                (np.concatenate([k1[index], k2[index2]]), np.concatenate([b1[index], b2[index2]]))
                for (k1, b1), (k2, b2) in zip(first_stage.weights, second_stage.weights, strict=True)
            ]
            _replicate_rows(data[r], free + taught, weights, teacher_t[r], per_replicate, curves)
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
        grid={name: list(values) for name, values in grid.items()},
        per_replicate=per_replicate,
        curves={t: {k: v.tolist() for k, v in c.items()} for t, c in curves.items()},
        ls_epsilons=ls_epsilons,
        models_trained=trained,
        model_epochs=epochs_total,
        seconds=time.time() - started,
    )


def _key(row):
    return f"{row[0]}{' +TempS' if row[1] else ''}"


def _replicate_rows(data, configs, weights, teacher_temperature, per_replicate, curves):
    val, test = data["val"], data["test"]
    val_logits = vectorised.mlp_logits(weights, val.x)
    val_labels = np.broadcast_to(val.y, val_logits.shape[:2])
    temperatures = vectorised.fit_temperatures(val_logits, val_labels)
    raw_loss = _nll(val_logits, val_labels)
    scaled_loss = _nll(val_logits / temperatures[:, None, None], val_labels)
    dense_loss = _nll(val_logits[:, val.dense], val_labels[:, val.dense])
    sparse_loss = _nll(val_logits[:, ~val.dense], val_labels[:, ~val.dense])
    names = np.array([name for name, _ in configs])
    chosen = {}
    for name, temps in ROWS:
        if name == "Bayes-Optimal":
            continue
        if name.startswith("Standard LS ("):
            candidates = np.flatnonzero(names == "Standard LS")
            loss = dense_loss if "dense" in name else sparse_loss
            chosen[(name, temps)] = (_select(loss, candidates), loss)
        else:
            candidates = np.flatnonzero(names == name)
            loss = scaled_loss if temps else raw_loss
            chosen[(name, temps)] = (_select(loss, candidates), loss)
    ls_models = [i for i, (name, _) in enumerate(configs) if name.startswith("Standard LS")]
    needed = sorted({m for m, _ in chosen.values()} | set(ls_models) | {0})
    test_logits = dict(
        zip(needed, vectorised.mlp_logits([(k[needed], b[needed]) for k, b in weights], test.x), strict=True)
    )
    bayes = synthetic.bayes_logits(test.x)
    per_replicate[_key(("Bayes-Optimal", False))].append(
        dict(
            scores(bayes, test.y, test.dense),
            val_loss=float(_nll(synthetic.bayes_logits(val.x)[None], val.y[None])[0]),
            temps=1.0,
        )
    )
    for (name, temps), (model, loss) in chosen.items():
        temperature = float(temperatures[model]) if temps else 1.0
        row = dict(
            scores(test_logits[model] / temperature, test.y, test.dense), val_loss=float(loss[model]), temps=temperature
        )
        hp = configs[model][1]
        row.update({h: float(hp[h]) for h in HYPERPARAMETERS if h in hp})
        per_replicate[_key((name, temps))].append(row)
    # Fig. 4: true-class probabilities of the teachers and of every LS student, binned by the teacher's
    train = data["train"]
    ls_weights = [(k[[0] + ls_models], b[[0] + ls_models]) for k, b in weights]
    train_logits = vectorised.mlp_logits(ls_weights, train.x)  # the teacher (No LS), then the LS students
    for instances, x, y, teacher_logits, student_logits in (
        ("train", train.x, train.y, train_logits[0], train_logits[1:]),
        ("test", test.x, test.y, test_logits[0], [test_logits[m] for m in ls_models]),
    ):
        rows = np.arange(len(y))
        teacher_p = {
            "bayes": _softmax(synthetic.bayes_logits(x))[rows, y],
            "no_ls_temps": _softmax(teacher_logits / teacher_temperature)[rows, y],
        }
        student_p = [_softmax(z)[rows, y] for z in student_logits]
        for teacher, p in teacher_p.items():
            bins = np.floor((p - CURVE_RANGE[0]) / (CURVE_RANGE[1] - CURVE_RANGE[0]) * CURVE_BINS).astype(int)
            inside = (p >= CURVE_RANGE[0]) & (bins >= 0)
            bins = np.minimum(bins, CURVE_BINS - 1)[inside]
            curve = curves[f"{teacher}/{instances}"]
            curve["count"] += np.bincount(bins, minlength=CURVE_BINS)
            curve["teacher_sum"] += np.bincount(bins, weights=p[inside], minlength=CURVE_BINS)
            for j, student in enumerate(student_p):
                curve["student_sum"][j] += np.bincount(bins, weights=student[inside], minlength=CURVE_BINS)


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test: P(a result at least this lopsided | wins and losses equally likely).

    Ties are left out before calling it.

    Example:

    >>> round(sign_test(9, 1), 4), sign_test(5, 5)
    (0.0215, 1.0)
    """
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def summarise(results: dict) -> dict:
    """Means per row beside the paper's, win rates with sign tests, and the Fig. 4 curves."""
    per = results["per_replicate"]
    rows = []
    for row in ROWS:
        values = per[_key(row)]
        mean = {name: float(np.mean([v[name] for v in values])) for name in ("temps", "val_loss") + METRICS}
        for h in HYPERPARAMETERS:
            if values and h in values[0]:
                mean[h] = float(np.mean([v[h] for v in values]))
        rows.append(dict(method=row[0], temps=row[1], ours=mean, paper=PAPER.get(row, {})))
    claims = []
    for name, a, b, metric in CLAIMS:
        va = np.array([v[metric] for v in per[_key(a)]])
        vb = np.array([v[metric] for v in per[_key(b)]])
        better = va > vb if metric == "accuracy" else va < vb
        worse = va < vb if metric == "accuracy" else va > vb
        wins, losses = int(better.sum()), int(worse.sum())
        claims.append(
            dict(
                claim=name,
                metric=metric,
                wins=wins,
                losses=losses,
                ties=len(va) - wins - losses,
                win_rate=wins / len(va),
                mean_difference=float(np.mean(va - vb)),
                sign_test_p=sign_test(wins, losses),
            )
        )
    return dict(rows=rows, claims=claims, curves=best_smoothing_curves(results))


def best_smoothing_curves(results: dict) -> dict:
    """Fig. 4: per bin of the teacher's `p_t`, the LS `epsilon` whose student's mean `p_t` there is closest.

    Bins pool the points of all replicates (training and test points
    separately); empty bins give `None`.
    """
    epsilons = np.array(results["ls_epsilons"])
    edges = np.linspace(*CURVE_RANGE, CURVE_BINS + 1)
    out = {"bin_centres": ((edges[:-1] + edges[1:]) / 2).tolist()}
    for teacher, curve in results["curves"].items():
        count = np.array(curve["count"])
        with np.errstate(invalid="ignore", divide="ignore"):
            teacher_mean = np.array(curve["teacher_sum"]) / count
            student_mean = np.array(curve["student_sum"]) / count
        best = [
            None if count[b] == 0 else float(epsilons[int(np.argmin(np.abs(student_mean[:, b] - teacher_mean[b])))])
            for b in range(CURVE_BINS)
        ]
        out[teacher] = dict(best_epsilon=best, count=count.astype(int).tolist())
    return out


def _fmt(value, digits=4, percent=False):
    if value is None:
        return "–"
    return f"{100 * value:.2f}%" if percent else f"{value:.{digits}f}"


_COLUMNS = (
    ("Avg T", "temps", 3, False),
    ("Val loss", "val_loss", 4, False),
    ("Acc", "accuracy", 4, True),
    ("Acc dense", "accuracy_dense", 4, True),
    ("Acc sparse", "accuracy_sparse", 4, True),
    ("CE", "nll", 4, False),
    ("ECE", "ece", 4, False),
)


_SEEDS = {True: "one seed per replicate, shared by its models", False: "one seed per model"}


def markdown(results: dict, summary: dict, command: str) -> str:
    """The tables as markdown: ours beside the paper's (in parentheses), win rates, settings."""
    out = io.StringIO()
    w = out.write
    w(f"Command: `{command}`\n\n")
    w(
        f"{results['replicates']} replicates (seeds {results['seed']}..{results['seed'] + results['replicates'] - 1}), "
        f"{results['n_test']} test points per class, {results['models_trained']} models trained "
        f"({results['model_epochs']} model-epochs) in {results['seconds']:.0f} s"
        f"{' (quick grids)' if results['quick'] else ''}; initialisation: {results.get('init', 'keras')}, "
        f"{_SEEDS[results.get('shared_seeds', True)]}.\n\n"
    )
    w("Each cell: ours (paper). cwECE (authors' code) is the package's `class_conditional_ece`, the quantity the ")
    w("paper's cwECE column prints; cwECE (Eq. 2) is the package's `cwece`. The paper prints only the first.\n\n")
    header = ["Method", "TempS"] + [c[0] for c in _COLUMNS]
    header += ["cwECE (authors' code)", "cwECE (Eq. 2)", "eps", "P1", "P2", "T (ILS2/ILS)"]
    w("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
    for row in summary["rows"]:
        ours, paper = row["ours"], row["paper"]
        cells = [row["method"], "Yes" if row["temps"] else "No"]
        for _, key, digits, percent in _COLUMNS:
            cells.append(f"{_fmt(ours.get(key), digits, percent)} ({_fmt(paper.get(key), digits, percent)})")
        cells.append(f"{_fmt(ours['class_conditional_ece'])} ({_fmt(paper.get('cwece_printed'))})")
        cells.append(_fmt(ours["cwece"]))
        for h in HYPERPARAMETERS:
            cells.append(f"{_fmt(ours.get(h), 3)} ({_fmt(paper.get(h), 3)})" if h in ours or h in paper else "–")
        w("| " + " | ".join(cells) + " |\n")
    w(
        "\nThe paper's claims, replicate by replicate (paired: same dataset; exact two-sided sign test, "
        "ties left out):\n\n"
    )
    w(
        "| Claim | wins | losses | ties | win rate | mean difference (a - b) | sign test p |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    for c in summary["claims"]:
        w(
            f"| {c['claim']} | {c['wins']} | {c['losses']} | {c['ties']} | {c['win_rate']:.2f} | "
            f"{c['mean_difference']:+.4f} | {c['sign_test_p']:.2g} |\n"
        )
    return out.getvalue()


def plot_curves(summary: dict, path: str, teacher: str) -> str:
    """Fig. 4 as a PNG: the best-smoothing-factor curve and the tuned ILS1 curves over it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from keras_ils._files import atomic_write

    curves = summary["curves"]
    centres = np.array(curves["bin_centres"])
    figure, axis = plt.subplots(figsize=(5.5, 4))
    for instances, style in (("train", "o-"), ("test", "s:")):
        best = np.array([np.nan if v is None else v for v in curves[f"{teacher}/{instances}"]["best_epsilon"]])
        axis.plot(
            centres,
            best,
            style,
            color="tab:red",
            markersize=3,
            alpha=1.0 if instances == "train" else 0.5,
            label=f"best LS eps per bin, {instances} instances (ours)",
        )
    p = np.linspace(*CURVE_RANGE, 200)
    ils1 = next(r["ours"] for r in summary["rows"] if r["method"] == "ILS1" and not r["temps"])
    for p1, p2, style, label in (
        (ils1["p1"], ils1["p2"], "k-", f"tuned ILS1, ours (mean P1={ils1['p1']:.3f}, P2={ils1['p2']:.2f})"),
        (PAPER_ILS1_CURVE["p1"], PAPER_ILS1_CURVE["p2"], "k--", "tuned ILS1, paper (P1=0.8, P2=2.0)"),
    ):
        axis.plot(p, np.asarray(smoothing_factor(p, p1=p1, p2=p2)), style, label=label)
    title = {"bayes": "Bayes-optimal teacher", "no_ls_temps": "No LS + TempS teacher"}[teacher]
    axis.set(xlabel="teacher's true-class probability $p_t$", ylabel="smoothing factor $\\epsilon$", title=title)
    axis.set_ylim(-0.005, 0.21)
    axis.legend(fontsize=7)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    plt.close(figure)
    return atomic_write(path, lambda f: f.write(buffer.getvalue()))


def write_outputs(results: dict, output_dir: str, command: str) -> dict:
    """Writes `synthetic_protocol.json`, `synthetic_protocol.md` and the two Fig. 4 PNGs; returns the summary."""
    import os

    from keras_ils._files import atomic_write, staged_directory

    summary = summarise(results)
    text = markdown(results, summary, command)
    with staged_directory(output_dir) as staging:
        document = dict(command=command, summary=summary, results=results)
        payload = json.dumps(document, indent=1).encode()
        atomic_write(os.path.join(staging, "synthetic_protocol.json"), lambda f: f.write(payload))
        atomic_write(os.path.join(staging, "synthetic_protocol.md"), lambda f: f.write(text.encode()))
        for teacher in CURVE_TEACHERS:
            plot_curves(summary, os.path.join(staging, f"best_smoothing_{teacher}.png"), teacher)
    return summary


__all__ = [
    "CLAIMS",
    "PAPER",
    "ROWS",
    "best_smoothing_curves",
    "grids",
    "markdown",
    "model_configs",
    "run_replicates",
    "sign_test",
    "summarise",
    "write_outputs",
]
