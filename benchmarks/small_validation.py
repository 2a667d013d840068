"""Every post-hoc calibrator fitted on about 30 validation examples: its test NLL against the uncalibrated model's.

    nice -n 10 python benchmarks/small_validation.py               # 20 seeds, every data set: a few minutes, 2 cores
    python benchmarks/small_validation.py --seeds 5 --datasets iris digits6 --methods vector dirichlet

The rule checked (issue 24, item 4): on small validation sets no calibrator
of `keras_ils.calibration.METHODS` may give an absurd row; a calibrated row's
test NLL stays within `2 x` its uncalibrated row's, `+ 0.1`.

For each data set and seed: a stratified split into a training set, a
validation set of about 30 examples and a test set (the rest); a
scikit-learn `LogisticRegression` on standardised features, at two
regularisations (`C = 1`, and `C = 1000`, which leaves the model
over-confident on its small training set), gives the logits
(`decision_function`); every calibrator is fitted on the validation logits
and scored on the test set. Data sets: scikit-learn's iris (3 classes),
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
from sklearn.pipeline import make_pipeline
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
REGULARISATIONS = (1.0, 1000.0)  # LogisticRegression's C: moderately regularised, and over-confident


def _log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _nll(logits, labels):
    return float(-np.mean(_log_softmax(np.asarray(logits, np.float64))[np.arange(len(labels)), labels]))


def _splits(name, seed):
    loader, train, validation = DATASETS[name]
    x, y = loader(seed)
    x_train, x_rest, y_train, y_rest = train_test_split(x, y, train_size=train, stratify=y, random_state=seed)
    x_val, x_test, y_val, y_test = train_test_split(
        x_rest, y_rest, train_size=validation, stratify=y_rest, random_state=seed
    )
    return x_train, y_train, x_val, y_val, x_test, y_test


def _logits(model, x):
    """The model's logits: its linear scores (`[0, score]` for two classes), whose softmax is `predict_proba`."""
    scores = model.decision_function(x)
    return np.stack([np.zeros_like(scores), scores], axis=1) if scores.ndim == 1 else scores


def run_one(name, seed, regularisation, methods):
    """`{method: (test NLL, warned, seconds)}` and the uncalibrated test NLL of one data set, seed and `C`."""
    x_train, y_train, x_val, y_val, x_test, y_test = _splits(name, seed)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=regularisation, max_iter=10000))
    model.fit(x_train, y_train)
    val_logits, test_logits = _logits(model, x_val), _logits(model, x_test)
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
                f"{worst['dataset']} C={worst['C']:g} seed {worst['seed']}: {worst['nll']:.3f} vs "
                f"{worst['uncalibrated']:.3f}",
                f"{1000 * np.mean([r['seconds'] for r in mine]):.0f}",
            ]
        )
    headers = ["calibrator", "worst ratio", "mean ratio", "median ratio", "breaks 2x+0.1", "warned", "worst run",
               "ms/fit"]  # fmt: skip
    out = [_common.table(headers, rows), ""]
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    detail = []
    for method in methods:
        cells = [method]
        for name in datasets:
            mine = [r for r in records if r["method"] == method and r["dataset"] == name]
            ratios = [r["nll"] / r["uncalibrated"] for r in mine]
            breaks = sum(r["nll"] > 2 * r["uncalibrated"] + 0.1 for r in mine)
            cells.append(f"{max(ratios):.2f} / {np.mean(ratios):.2f} ({breaks})")
        detail.append(cells)
    out += ["Worst / mean ratio (breaks) per data set:", "", _common.table(["calibrator", *datasets], detail)]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per data set and C (default 20)")
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--json", help="also write every run's figures to this file")
    args = parser.parse_args()
    _common.print_header("Calibrators on ~30-example validation sets: test NLL ratio to the uncalibrated model")
    records = []
    for name in args.datasets:
        for regularisation in REGULARISATIONS:
            for seed in range(args.seeds):
                uncalibrated, results = run_one(name, seed, regularisation, args.methods)
                for method, (nll, warned, seconds) in results.items():
                    records.append(
                        dict(
                            dataset=name,
                            C=regularisation,
                            seed=seed,
                            method=method,
                            nll=nll,
                            warned=warned,
                            seconds=seconds,
                            uncalibrated=uncalibrated,
                        )  # fmt: skip
                    )
    print(f"{len(records) // len(args.methods)} runs: {args.datasets} x C in {REGULARISATIONS} x {args.seeds} seeds")
    print()
    print(summarise(records, args.methods))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(records, file, indent=1)


if __name__ == "__main__":
    main()
