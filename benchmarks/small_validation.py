"""Every post-hoc calibrator fitted on small validation sets: its test NLL against the uncalibrated model's.

    nice -n 10 python benchmarks/small_validation.py               # 20 seeds, every data set: a few minutes, 2 cores
    python benchmarks/small_validation.py --seeds 5 --datasets iris digits6 --methods vector dirichlet

The rule checked (issue 24, item 4): on small validation sets no calibrator
of `keras_ils.calibration.METHODS` may give an absurd row; a calibrated row's
test NLL stays within `2 x` its uncalibrated row's, `+ 0.1`.

For each data set, seed and model: a stratified split into a training set,
a validation set and a test set; the model's logits on standardised
features; every calibrator fitted on the validation logits and scored on the
test set. The models:

- `C=1`, `C=1000`: a scikit-learn `LogisticRegression` (`decision_function`),
  moderately regularised, and over-confident on its small training set; the
  validation set holds about 30 examples, the test set the rest;
- `mlp`: a network, scikit-learn's `MLPClassifier` (two hidden layers of 64,
  nearly unregularised, trained to convergence) on the main job's split of a
  user's data (70/30 train/test, 20 % of train for validation: iris 21,
  wine 25, breast cancer 80, digits 251 validation examples); its logits are
  its last layer's pre-activations. A trained network's validation logits
  are nearly separable, the case where plain vector, matrix and Dirichlet
  fits overfit at any size of validation set.
 Data sets: scikit-learn's iris (3 classes),
wine (3), breast cancer (2), digits restricted to the classes 0-5
(`digits6`) and all ten (`digits10`, 3 validation examples a class), and a
synthetic six-class Gaussian mixture (`synthetic`). The tables give, per
calibrator, the ratio test NLL(calibrated) / test NLL(uncalibrated) (worst
and mean), how many runs break `<= 2x + 0.1`, and how many fits warned.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import _common
import keras
import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

from keras_ils.calibration import METHODS, fit_calibrator


def _digits(classes):
    x, y = load_digits(return_X_y=True)
    keep = y < classes
    return x[keep], y[keep]


def _synthetic(seed, n=1200, k=6, dims=8):
    """Six overlapping Gaussian classes in 8 dimensions (means 1.2 standard deviations from the origin)."""
    rng = np.random.default_rng(1000 + seed)
    means = 1.2 * rng.normal(size=(k, dims)) / np.sqrt(dims) * 2.0
    y = rng.integers(0, k, n)
    return means[y] + rng.normal(size=(n, dims)), y


# name -> (loader(seed) -> (x, y), training examples, validation examples)
DATASETS = {
    "iris": (lambda seed: load_iris(return_X_y=True), 60, 30),
    "wine": (lambda seed: load_wine(return_X_y=True), 70, 30),
    "breast_cancer": (lambda seed: load_breast_cancer(return_X_y=True), 200, 30),
    "digits6": (lambda seed: _digits(6), 150, 30),
    "digits10": (lambda seed: _digits(10), 300, 30),
    "synthetic": (_synthetic, 200, 30),
}
MODELS = ("C=1", "C=1000", "mlp")  # LogisticRegression's C (moderately regularised, over-confident), a network


def _log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _nll(logits, labels):
    return float(-np.mean(_log_softmax(np.asarray(logits, np.float64))[np.arange(len(labels)), labels]))


def _splits(name, seed, model):
    """The six arrays of a split: about 30 validation examples, or the main job's split for `mlp`."""
    loader, train, validation = DATASETS[name]
    x, y = loader(seed)
    if model == "mlp":  # 70/30 train/test, then 20 % of train for validation
        x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, stratify=y, random_state=seed)
        x_train, x_val, y_train, y_val = train_test_split(
            x_train, y_train, test_size=0.2, stratify=y_train, random_state=seed
        )
        return x_train, y_train, x_val, y_val, x_test, y_test
    x_train, x_rest, y_train, y_rest = train_test_split(x, y, train_size=train, stratify=y, random_state=seed)
    x_val, x_test, y_val, y_test = train_test_split(
        x_rest, y_rest, train_size=validation, stratify=y_rest, random_state=seed
    )
    return x_train, y_train, x_val, y_val, x_test, y_test


def _fitted(model, seed, x_train, y_train):
    """`logits(x)` of the model trained on standardised features."""
    scaler = StandardScaler().fit(x_train)
    if model == "mlp":
        network = MLPClassifier((64, 64), alpha=1e-5, max_iter=2000, random_state=seed)
        network.fit(scaler.transform(x_train), y_train)
        return lambda x: _network_logits(network, scaler.transform(x))
    regression = LogisticRegression(C=float(model[2:]), max_iter=10000).fit(scaler.transform(x_train), y_train)
    return lambda x: _two_columns(regression.decision_function(scaler.transform(x)))


def _network_logits(network, x):
    """The network's last pre-activations (ReLU hidden layers), whose softmax (or sigmoid) is `predict_proba`."""
    for weights, bias in zip(network.coefs_[:-1], network.intercepts_[:-1], strict=True):
        x = np.maximum(x @ weights + bias, 0.0)
    return _two_columns(x @ network.coefs_[-1] + network.intercepts_[-1])


def _two_columns(scores):
    """Scores as `[n, K]` logits: `[0, score]` for two classes, whose softmax is the sigmoid of the score."""
    scores = np.squeeze(scores, axis=1) if scores.ndim == 2 and scores.shape[1] == 1 else scores
    return np.stack([np.zeros_like(scores), scores], axis=1) if scores.ndim == 1 else scores


def run_one(name, seed, model, methods):
    """`{method: (test NLL, warned, seconds)}` and the uncalibrated test NLL of one data set, seed and model."""
    x_train, y_train, x_val, y_val, x_test, y_test = _splits(name, seed, model)
    logits = _fitted(model, seed, x_train, y_train)
    val_logits, test_logits = logits(x_val), logits(x_test)
    results = {}
    for method in methods:
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            layer = fit_calibrator(method, val_logits, y_val)
        seconds = time.perf_counter() - start
        calibrated = keras.ops.convert_to_numpy(layer(test_logits.astype("float32")))
        warned = any("Fit" in type(w.message).__name__ for w in caught)
        results[method] = (_nll(calibrated, y_test), warned, seconds)
    return _nll(test_logits, y_test), results


def summarise(records, methods):
    """Markdown tables: per calibrator overall, then worst ratio and breaks per calibrator and data set."""
    rows = []
    for method in methods:
        mine = [r for r in records if r["method"] == method]
        ratios = np.array([r["nll"] / r["uncalibrated"] for r in mine])
        breaks = sum(r["nll"] > 2 * r["uncalibrated"] + 0.1 for r in mine)
        worst = max(mine, key=lambda r: r["nll"] - 2 * r["uncalibrated"])
        rows.append(
            [
                method,
                f"{ratios.max():.2f}",
                f"{ratios.mean():.3f}",
                f"{np.median(ratios):.3f}",
                f"{breaks}/{len(mine)}",
                f"{sum(r['warned'] for r in mine)}/{len(mine)}",
                f"{worst['dataset']} {worst['model']} seed {worst['seed']}: {worst['nll']:.3f} vs "
                f"{worst['uncalibrated']:.3f}",
                f"{1000 * np.mean([r['seconds'] for r in mine]):.0f}",
            ]
        )
    headers = ["calibrator", "worst ratio", "mean ratio", "median ratio", "breaks 2x+0.1", "warned", "worst run",
               "ms/fit"]  # fmt: skip
    out = [_common.table(headers, rows), ""]
    for key, label in (("dataset", "data set"), ("model", "model")):
        groups = list(dict.fromkeys(r[key] for r in records))
        detail = []
        for method in methods:
            cells = [method]
            for group in groups:
                mine = [r for r in records if r["method"] == method and r[key] == group]
                ratios = [r["nll"] / r["uncalibrated"] for r in mine]
                breaks = sum(r["nll"] > 2 * r["uncalibrated"] + 0.1 for r in mine)
                cells.append(f"{max(ratios):.2f} / {np.mean(ratios):.2f} ({breaks})")
            detail.append(cells)
        out += [f"Worst / mean ratio (breaks) per {label}:", "", _common.table(["calibrator", *groups], detail), ""]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per data set and model (default 20)")
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--json", help="also write every run's figures to this file")
    args = parser.parse_args()
    _common.print_header("Calibrators on small validation sets: test NLL ratio to the uncalibrated model")
    records = []
    for name in args.datasets:
        for model in args.models:
            for seed in range(args.seeds):
                uncalibrated, results = run_one(name, seed, model, args.methods)
                for method, (nll, warned, seconds) in results.items():
                    records.append(
                        dict(
                            dataset=name,
                            model=model,
                            seed=seed,
                            method=method,
                            nll=nll,
                            warned=warned,
                            seconds=seconds,
                            uncalibrated=uncalibrated,
                        )  # fmt: skip
                    )
    print(f"{len(records) // len(args.methods)} runs: {args.datasets} x models {args.models} x {args.seeds} seeds")
    print()
    print(summarise(records, args.methods))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(records, file, indent=1)


if __name__ == "__main__":
    main()
