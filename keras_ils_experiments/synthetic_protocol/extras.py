"""Table 2 (self-distillation) and Fig. 2 (histograms of predicted probabilities) of one replicate.

- Table 2: a student of the same MLP is trained on each teacher's predicted
  probabilities on the training set (teacher temperature 1, paper appendix A):
  the Bayes-optimal model, the No LS model, and the LS and ILS models the
  validation set chose (without TempS). Students are scored on the test set
  without TempS.
- Fig. 2: on the test points of every replicate, counts of the confidence
  (the highest of the 3 predicted probabilities) and of the two other
  probabilities, for the Bayes-optimal model, No LS and LS + TempS.
"""

from __future__ import annotations

import numpy as np

from keras_ils.comparison.data import synthetic
from keras_ils.comparison.engine import vectorised
from keras_ils_experiments.synthetic_protocol.printed_values import HYPERPARAMETERS, row_key
from keras_ils_experiments.synthetic_protocol.scoring import scores

DISTILLATION_TEACHERS = ("Bayes-Optimal", "No LS", "Standard LS", "ILS")
# The rows whose chosen models Table 2 and Fig. 2 use.
USED_ROWS = (("No LS", False), ("Standard LS", False), ("Standard LS", True), ("ILS", False))
HISTOGRAM_BINS = 25
HISTOGRAM_MODELS = ("bayes", "no_ls", "ls_temps")
HISTOGRAM_KINDS = ("confidence", "others")
STUDENT_SEED_OFFSET = 1_000_000  # students' seeds never equal a grid model's


def chosen_model(configs, per_replicate, row) -> int:
    """The index in `configs` of the model the replicate's last record of `row` chose, by its hyperparameters.

    Example:

    >>> configs = [("No LS", {"method": "none"}), ("Standard LS", {"method": "ls", "epsilon": 0.05})]
    >>> chosen_model(configs, {"Standard LS": [{"epsilon": 0.05, "nll": 0.5}]}, ("Standard LS", False))
    1
    """
    record = per_replicate[row_key(row)][-1]
    matches = [
        i
        for i, (name, hp) in enumerate(configs)
        if name == row[0] and all(float(hp[h]) == record[h] for h in HYPERPARAMETERS if h in hp)
    ]
    if len(matches) != 1:
        raise RuntimeError(f"{len(matches)} models of row {row_key(row)} match its record {record}.")
    return matches[0]


def _softmax(z):
    z = np.asarray(z, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


def teacher_probabilities(data, weights, chosen) -> dict:
    """Each Table 2 teacher's predicted probabilities on the replicate's training set, `{teacher: [n, K]}`."""
    x = data["train"].x
    trained = DISTILLATION_TEACHERS[1:]  # the No LS, LS and ILS models the replicate chose
    models = [chosen[(name, False)] for name in trained]
    logits = vectorised.mlp_logits([(k[models], b[models]) for k, b in weights], x)
    return {"Bayes-Optimal": synthetic.bayes_probabilities(x), **dict(zip(trained, map(_softmax, logits), strict=True))}


def student_seeds(seed: int, replicates: int, shared_seeds: bool) -> list:
    """Seeds of the Table 2 students, replicate-major: one per replicate (shared by its students), or one each.

    Example:

    >>> student_seeds(0, 2, True), student_seeds(0, 1, False)
    ([1000000, 1000000, 1000000, 1000000, 1000001, 1000001, 1000001, 1000001], [1000000, 1000001, 1000002, 1000003])
    """
    count = len(DISTILLATION_TEACHERS)
    if shared_seeds:
        return [STUDENT_SEED_OFFSET + seed + r for r in range(replicates) for _ in range(count)]
    return [STUDENT_SEED_OFFSET + (seed + r) * count + j for r in range(replicates) for j in range(count)]


def score_students(data, weights) -> dict:
    """Test scores of the students (`len(DISTILLATION_TEACHERS)` per replicate, replicate-major): `{teacher: [...]}`."""
    count = len(DISTILLATION_TEACHERS)
    logits = vectorised.mlp_logits(weights, np.repeat(np.stack([r["test"].x for r in data]), count, axis=0))
    out = {name: [] for name in DISTILLATION_TEACHERS}
    for r, replicate in enumerate(data):
        test = replicate["test"]
        for name, z in zip(DISTILLATION_TEACHERS, logits[r * count : (r + 1) * count], strict=True):
            out[name].append(scores(z, test.y, test.dense))
    return out


def empty_histograms() -> dict:
    """Zeroed Fig. 2 counts: `{"bayes/confidence": [bins], "bayes/others": [bins], ...}`."""
    return {f"{m}/{k}": np.zeros(HISTOGRAM_BINS, np.int64) for m in HISTOGRAM_MODELS for k in HISTOGRAM_KINDS}


def probability_counts(probabilities) -> dict:
    """`{"confidence": counts, "others": counts}` of `[n, K]` probabilities in `HISTOGRAM_BINS` bins on [0, 1].

    The confidence is each row's highest probability, the others its remaining
    `K - 1`; the last bin includes 1.

    Example:

    >>> c = probability_counts(np.array([[0.98, 0.01, 0.01], [0.5, 0.3, 0.2]]))
    >>> int(c["confidence"][-1]), int(c["confidence"][12]), int(c["others"][0]), int(c["others"].sum())
    (1, 1, 2, 4)
    """
    p = np.sort(np.asarray(probabilities, np.float64), axis=-1)
    edges = np.linspace(0.0, 1.0, HISTOGRAM_BINS + 1)
    return dict(
        confidence=np.histogram(p[:, -1], bins=edges)[0],
        others=np.histogram(p[:, :-1].ravel(), bins=edges)[0],
    )


def add_histograms(histograms, data, test_logits, chosen, per_replicate) -> None:
    """Adds the replicate's test-set counts for Fig. 2: Bayes-optimal, No LS, and LS + TempS (with its temperature).

    `test_logits` are `{model index: [n_test, K]}` (what `scoring.replicate_rows` returns).
    """
    test = data["test"]
    ls_temperature = per_replicate[row_key(("Standard LS", True))][-1]["temps"]
    probabilities = dict(
        bayes=synthetic.bayes_probabilities(test.x),
        no_ls=_softmax(test_logits[chosen[("No LS", False)]]),
        ls_temps=_softmax(test_logits[chosen[("Standard LS", True)]] / ls_temperature),
    )
    for model, p in probabilities.items():
        for kind, counts in probability_counts(p).items():
            histograms[f"{model}/{kind}"] += counts


__all__ = [
    "DISTILLATION_TEACHERS",
    "HISTOGRAM_BINS",
    "HISTOGRAM_KINDS",
    "HISTOGRAM_MODELS",
    "STUDENT_SEED_OFFSET",
    "USED_ROWS",
    "add_histograms",
    "chosen_model",
    "empty_histograms",
    "probability_counts",
    "score_students",
    "student_seeds",
    "teacher_probabilities",
]
