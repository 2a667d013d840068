"""Compare label smoothing methods and calibrators with your own small CNN on scikit-learn's digits (8x8 images).

One call, `keras_ils.compare`: per seed the 1,797 digits are split into
train, validation and test (stratified); the teacher (No LS) is trained and
temperature-scaled; LS, ILS1, ILS2 and ILS are each searched over their grid
by KerasTuner (Hyperband) with the network below; every model is calibrated
on the validation split and scored on the test split; the verdict compares
each row with No LS + TempS on the per-example test NLL, Holm-corrected.

Run:  python examples/compare_digits_cnn.py [--seeds 3] [--epochs 30] [--output-dir runs/digits-cnn]
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import keras_ils  # noqa: E402


def small_cnn(num_classes):
    """Two 3x3 convolutions and a dense head on 8x8 grey images; logits out (no softmax)."""
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(num_classes),
        ],
        name="small_cnn",
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30, help="the most epochs a network trains (early stopping)")
    parser.add_argument("--methods", default="ls,ils1,ils2,ils")
    parser.add_argument("--calibrators", default="temperature,vector,dirichlet,isotonic")
    parser.add_argument("--no-tune", action="store_true", help="fixed hyperparameters instead of searches")
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args(argv)
    digits = load_digits()
    images = digits.images[..., None] / 16.0  # [1797, 8, 8, 1]
    start = time.perf_counter()
    found = keras_ils.compare(
        images,
        digits.target,
        build_model=small_cnn,
        methods=args.methods.split(","),
        calibrators=args.calibrators.split(","),
        seeds=args.seeds,
        tune=not args.no_tune,
        epochs=args.epochs,
        output_dir=args.output_dir,
    )
    print(found)
    print(f"\nBest: {found.best}; results in {found.directory} ({time.perf_counter() - start:.0f} s)")
    return found


if __name__ == "__main__":
    main()
