"""One replicate's rows: each row's model chosen on validation, its test scores, and the Fig. 4 bin sums."""

from __future__ import annotations

import numpy as np

from keras_ils import evaluation
from keras_ils.calibration import temperature
from keras_ils.comparison.data import synthetic
from keras_ils.comparison.engine import vectorised
from keras_ils_experiments.synthetic_protocol.printed_values import HYPERPARAMETERS, ROWS, row_key

METRICS = ("accuracy", "accuracy_dense", "accuracy_sparse", "nll", "ece", "cwece", "class_conditional_ece")

CURVE_BINS = 50
CURVE_RANGE = (0.2, 1.0)
CURVE_TEACHERS = ("bayes", "no_ls_temps")
# The paper does not say on which instances it compared students with the teacher. ILS1's factor smooths
# training labels, so the training instances are the natural reading; the test instances are shown too.
CURVE_INSTANCES = ("train", "test")


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


def empty_curves(num_students: int) -> dict:
    """Zeroed Fig. 4 bin sums, one set per teacher and instances: `{"bayes/train": {...}, ...}`."""
    return {
        f"{teacher}/{instances}": dict(
            teacher_sum=np.zeros(CURVE_BINS),
            student_sum=np.zeros((num_students, CURVE_BINS)),
            count=np.zeros(CURVE_BINS),
        )
        for teacher in CURVE_TEACHERS
        for instances in CURVE_INSTANCES
    }


def replicate_rows(data, configs, weights, teacher_temperature, per_replicate, curves, temperature_estimator="map"):
    """Chooses every row's model of one replicate on validation, scores it on test, adds the Fig. 4 bin sums.

    Args:
        data: the replicate's `{"train", "val", "test"}` synthetic datasets.
        configs: its models' `(row method, hyperparameters)`; model 0 is the
            No LS teacher.
        weights: its models' trained weights, in the order of `configs`.
        teacher_temperature: the teacher's `T*`.
        per_replicate: `{row key: [...]}`; each row's scores are appended.
        curves: `empty_curves`' sums, added to.

    Returns:
        `{model index: test logits [n_test, K]}` of every model it scored (each
        row's chosen model, the No LS teacher and the LS models), for the
        figures that read them (`extras.add_histograms`).
    """
    temperatures, chosen = _choose(data["val"], configs, weights, temperature_estimator)
    ls_models = [i for i, (name, _) in enumerate(configs) if name.startswith("Standard LS")]
    needed = sorted({m for m, _ in chosen.values()} | set(ls_models) | {0})
    test_logits = dict(
        zip(needed, vectorised.mlp_logits([(k[needed], b[needed]) for k, b in weights], data["test"].x), strict=True)
    )
    _append_test_rows(data, configs, temperatures, chosen, test_logits, per_replicate)
    _add_curve_sums(data, weights, ls_models, test_logits, teacher_temperature, curves)
    return test_logits


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


def _select(values, candidates):
    return candidates[int(np.argmin(values[candidates]))]


def _choose(val, configs, weights, temperature_estimator):
    """Every model's temperature, and each row's `(chosen model, the validation losses it was chosen by)`."""
    val_logits = vectorised.mlp_logits(weights, val.x)
    val_labels = np.broadcast_to(val.y, val_logits.shape[:2])
    temperatures = temperature._fit_temperatures(val_logits, val_labels, estimator=temperature_estimator)
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
        else:
            candidates = np.flatnonzero(names == name)
            loss = scaled_loss if temps else raw_loss
        chosen[(name, temps)] = (_select(loss, candidates), loss)
    return temperatures, chosen


def _append_test_rows(data, configs, temperatures, chosen, test_logits, per_replicate):
    """The Bayes-optimal row, then every chosen model's test scores, validation loss and hyperparameters."""
    val, test = data["val"], data["test"]
    bayes = synthetic.bayes_logits(test.x)
    per_replicate[row_key(("Bayes-Optimal", False))].append(
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
        per_replicate[row_key((name, temps))].append(row)


def _add_curve_sums(data, weights, ls_models, test_logits, teacher_temperature, curves):
    """Fig. 4: true-class probabilities of the teachers and of every LS student, binned by the teacher's."""
    train, test = data["train"], data["test"]
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


__all__ = [
    "CURVE_BINS",
    "CURVE_INSTANCES",
    "CURVE_RANGE",
    "CURVE_TEACHERS",
    "METRICS",
    "empty_curves",
    "replicate_rows",
    "scores",
]
