"""The figure of docs/guide/prediction-sets.md: set sizes at alpha = 0.1, and a risk-coverage curve.

A small Keras MLP is trained on scikit-learn's digits (10 classes, 8 x 8
images) with few examples, 300 training images, so that it errs more often
than alpha; 400 images calibrate, 1,097 test. Left: how many classes the
sets of the test images hold (LAC, plain and randomised APS, RAPS), with
their coverage (the guarantee: at least 90 %). Right: the network's error rate when
it predicts only on its most confident test images (the risk-coverage curve,
confidence = top probability), with AURC and AUGRC. It also prints the
figures it draws.

    python scripts/prediction_sets_figure.py       # about 20 s on 2 CPU cores; writes the PNG below
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from keras_ils.conformal import coverage, fit_conformal, mean_set_size  # noqa: E402
from keras_ils.evaluation._selective import augrc, aurc, risk_coverage_curve  # noqa: E402

OUTPUT = os.path.join(os.path.dirname(__file__), "..", "docs", "guide", "figures", "prediction-sets.png")
METHODS = {"LAC": ("lac", {}), "APS": ("aps", {}), "APS, randomised": ("aps", {"randomized": True, "seed": 0}),
           "RAPS": ("raps", {})}  # fmt: skip


def _data(seed):
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = (x[order] / 16.0).astype("float32"), y[order]
    return (x[:300], y[:300]), (x[300:700], y[300:700]), (x[700:], y[700:])


def _logits(seed):
    """Test and calibration logits of an MLP trained on the training images (no early stopping: over-confident)."""
    keras.utils.set_random_seed(seed)
    train, calibration, test = _data(seed)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(*train, epochs=20, batch_size=32, verbose=0)
    return [(model.predict(x, verbose=0), y) for x, y in (calibration, test)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)
    (cal_logits, cal_labels), (test_logits, test_labels) = _logits(args.seed)

    figure = Figure(figsize=(10, 3.8), layout="constrained")
    sizes_axes, curve_axes = figure.subplots(1, 2)
    width = 0.8 / len(METHODS)
    for i, (name, (method, options)) in enumerate(METHODS.items()):
        layer = fit_conformal(method, cal_logits, cal_labels, alpha=args.alpha, **options)
        sets = keras.ops.convert_to_numpy(layer(test_logits))
        counts = np.bincount(sets.sum(axis=1).astype(int), minlength=11)
        label = f"{name}: coverage {coverage(sets, test_labels):.3f}, mean size {mean_set_size(sets):.2f}"
        print(label)
        sizes_axes.bar(np.arange(11) + (i - 1.5) * width, counts, width, label=label)
    sizes_axes.set(xlabel="classes in the set", ylabel="test images", xticks=range(11))
    sizes_axes.set_title(f"Set sizes at alpha = {args.alpha:g} (400 calibration images)", fontsize=10)
    sizes_axes.legend(fontsize=8)

    curve = risk_coverage_curve(test_logits, test_labels)
    scores = f"AURC {aurc(test_logits, test_labels):.4f}, AUGRC {augrc(test_logits, test_labels):.4f}"
    print(scores, f"error at full coverage {curve.risks[-1]:.4f}")
    curve_axes.step(curve.coverages, curve.risks, where="post", label=f"selective risk ({scores})")
    curve_axes.plot(curve.coverages, curve.generalized_risks, label="generalized risk (errors accepted / all)")
    curve_axes.set(xlabel="coverage (fraction of test images predicted)", ylabel="error rate", xlim=(0, 1))
    curve_axes.set_title("Abstaining below a confidence threshold", fontsize=10)
    curve_axes.legend(fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    figure.savefig(args.output, dpi=100)
    print("wrote", os.path.normpath(args.output))


if __name__ == "__main__":
    main()
