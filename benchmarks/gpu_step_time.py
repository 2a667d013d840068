"""Steady epoch time of every package loss, and of the calibration metrics, beside Keras' cross-entropy (issue 37).

    python benchmarks/gpu_step_time.py                               # an accelerator: the issue's setup, N = 50,000
    python benchmarks/gpu_step_time.py --n 512 --epochs 3            # a CPU: small N
    KERAS_BACKEND=jax python benchmarks/gpu_step_time.py ...         # any backend: jax, tensorflow, torch

Setup: a ResNet-20 in the CIFAR layout (He et al. 2016: a 3x3 convolution
of 16 filters, then 3 stages of 3 basic blocks of 16, 32, 64 filters, batch
normalisation, global average pooling, a dense head; 0.27 M weights), built
here so that nothing imports TensorFlow under JAX or torch; `--n` synthetic
32x32x3 images, K = 100 classes, batch 128, SGD (learning rate 0.1, momentum
0.9); every variant is its own model, compiled once, trained by `model.fit`
on numpy arrays as a user would.

Variants: Keras' `SparseCategoricalCrossentropy(from_logits=True)` (the
baseline of the losses); `ILSLoss` with every method ("none" and "ls" on
sparse labels, "ils1", "ils2" and "ils" on `keras_ils.teacher_targets`);
`FocalLoss(gamma=3)`, `MarginLabelSmoothingLoss()`, `MDCALoss()`,
`MMCELoss()`, `OnlineLabelSmoothing(K)` (with its callback on TensorFlow,
the only backend it supports; elsewhere the loss alone, its soft labels
uniform); and Keras' cross-entropy with validation (`--n // 5` images),
without and with `keras_ils.metrics.calibration_metrics(K, from_logits=True)`
(the baseline of the metrics).

Timing: a variant's value in a round is its steady epoch, the median of its
epochs 2.. (the first compiles); rounds run every variant once, in rotating
order, so a slow spell hits all of them alike; a ratio is taken within a
round and its median over rounds reported. Epoch times come from a callback
at each epoch's end, when Keras has read the epoch's logs from the device.
The last line says whether TensorFlow was imported (it must not be, under
JAX or torch).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import NamedTuple

import _common
import keras
import numpy as np

import keras_ils

NUM_CLASSES = 100
BATCH = 128


def resnet20(num_classes: int) -> keras.Model:
    """A ResNet-20 in the CIFAR layout (3 stages of 3 basic blocks; 16, 32, 64 filters), logits out."""
    layers = keras.layers

    def convolution(x, filters, strides=1):
        x = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False)(x)
        return layers.BatchNormalization()(x)

    inputs = keras.Input((32, 32, 3))
    x = layers.ReLU()(convolution(inputs, 16))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            strides = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            y = convolution(layers.ReLU()(convolution(x, filters, strides)), filters)
            if strides != 1:
                shortcut = layers.BatchNormalization()(layers.Conv2D(filters, 1, strides=2, use_bias=False)(x))
            x = layers.ReLU()(layers.Add()([shortcut, y]))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(num_classes)(x), name="resnet20")


class Variant(NamedTuple):
    """A row: its loss, its targets (`"labels"` or `"teacher"`), whether it validates, its metrics, its baseline."""

    loss: object
    targets: str = "labels"
    validation: bool = False
    metrics: bool = False
    baseline: str = "Keras SparseCategoricalCrossentropy(from_logits=True)"


def variants(num_classes: int) -> dict[str, Variant]:
    losses = keras_ils.losses
    keras_ce = "Keras SparseCategoricalCrossentropy(from_logits=True)"
    table = {keras_ce: Variant(lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True))}
    for method in ("none", "ls"):
        table[f'ILSLoss("{method}"), sparse labels'] = Variant(lambda m=method: losses.ILSLoss(method=m))
    for method in ("ils1", "ils2", "ils"):
        table[f'ILSLoss("{method}"), teacher_targets'] = Variant(lambda m=method: losses.ILSLoss(method=m), "teacher")
    table["FocalLoss(gamma=3)"] = Variant(lambda: losses.FocalLoss(gamma=3.0))
    table["MarginLabelSmoothingLoss()"] = Variant(lambda: losses.MarginLabelSmoothingLoss())
    table["MDCALoss()"] = Variant(lambda: losses.MDCALoss())
    table["MMCELoss()"] = Variant(lambda: losses.MMCELoss())
    table[f"OnlineLabelSmoothing({num_classes})"] = Variant(lambda: losses.OnlineLabelSmoothing(num_classes))
    validated = "Keras CE + validation"
    table[validated] = Variant(table[keras_ce].loss, validation=True, baseline=validated)
    table["Keras CE + validation + calibration_metrics"] = Variant(
        table[keras_ce].loss, validation=True, metrics=True, baseline=validated
    )
    return table


class _EpochTimes(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def _runner(name: str, variant: Variant, data: dict, epochs: int, num_classes: int):
    """A function that trains `variant`'s model for `epochs` more epochs and returns its steady epoch `Seconds`."""
    keras.utils.set_random_seed(0)
    model = resnet20(num_classes)
    loss = variant.loss()
    metrics = keras_ils.metrics.calibration_metrics(num_classes, from_logits=True) if variant.metrics else None
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=loss, metrics=metrics)
    callbacks = []
    if isinstance(loss, keras_ils.losses.OnlineLabelSmoothing) and keras.backend.backend() == "tensorflow":
        callbacks.append(keras_ils.losses.OnlineLabelSmoothingCallback(loss))
    y = data["teacher"] if variant.targets == "teacher" else data["labels"]
    validation = (data["x_val"], data["y_val"]) if variant.validation else None

    def run():
        timer = _EpochTimes()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # OnlineLabelSmoothing without its callback says so
                model.fit(data["x"], y, batch_size=BATCH, epochs=epochs, validation_data=validation, verbose=0,
                          callbacks=[*callbacks, timer])  # fmt: skip
        except Exception as error:  # a variant that fails is a row that says so, not a lost table
            print(f"[{time.strftime('%H:%M:%S')}] {name} FAILED: {error!r:.2000}", file=sys.stderr, flush=True)
            return _common.Seconds(np.nan)
        seconds = ", ".join(f"{value:.3f}" for value in timer.seconds)
        print(f"[{time.strftime('%H:%M:%S')}] {name}: epochs of {seconds} s", file=sys.stderr, flush=True)
        return _common.Seconds(np.median(timer.seconds[1:]))

    return run


def synthetic(n: int, num_classes: int, seed: int = 0) -> dict:
    """`n` training and `n // 5` validation images (standard normal), uniform labels, and teacher targets."""
    rng = np.random.default_rng(seed)
    n_val = max(BATCH, n // 5)
    labels = rng.integers(0, num_classes, n)
    teacher_logits = 2.0 * rng.standard_normal((n, num_classes), dtype=np.float32)
    return {
        "x": rng.standard_normal((n, 32, 32, 3), dtype=np.float32),
        "labels": labels.astype(np.int32),
        "teacher": keras.ops.convert_to_numpy(keras_ils.teacher_targets(labels, teacher_logits)),
        "x_val": rng.standard_normal((n_val, 32, 32, 3), dtype=np.float32),
        "y_val": rng.integers(0, num_classes, n_val).astype(np.int32),
    }


def rows(n: int, epochs: int, rounds: int, only=None) -> list[list]:
    table = variants(NUM_CLASSES)
    if only:
        unknown = sorted(set(only) - set(table))
        if unknown:
            raise SystemExit(f"unknown variants {unknown}; the variants are {list(table)}")
        wanted = set(only) | {table[name].baseline for name in only}
        table = {name: variant for name, variant in table.items() if name in wanted}
    data = synthetic(n, NUM_CLASSES)
    calls = {name: _runner(name, variant, data, epochs, NUM_CLASSES) for name, variant in table.items()}
    times = _common.interleaved(calls, rounds=rounds, warmup=0)
    result = []
    for name, variant in table.items():
        seconds = float(np.median(times[name]))
        if np.isnan(seconds):
            result.append([name, "failed (its error is in the log)", "", "", variant.baseline])
            continue
        ratio = (
            "1"
            if name == variant.baseline
            else "{:.2f} ({:.2f}-{:.2f})".format(*_common.paired_ratio(times, name, variant.baseline))
        )
        result.append([name, f"{seconds:.3f}", f"{n / seconds:,.0f}", ratio, variant.baseline])
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000, help="training images (validation: n // 5)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per round (the steady epoch: median of 2..)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--only", nargs="*", help="variants to run (names as in the table), with their baselines")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first epoch compiles)")
    _common.print_header(f"Steady epoch time, ResNet-20, K = {NUM_CLASSES} (benchmarks/gpu_step_time.py)")
    print(f"N = {args.n} training images, {max(BATCH, args.n // 5)} validation, batch {BATCH}, "
          f"{args.epochs} epochs per round, {args.rounds} rounds; steady epoch = median of epochs 2..\n")  # fmt: skip
    headers = ["variant", "s / epoch", "images / s", "vs baseline (IQR over rounds)", "baseline"]
    print(_common.table(headers, rows(args.n, args.epochs, args.rounds, args.only)))
    imported = "tensorflow" in sys.modules
    print(f"\nTensorFlow imported: {'yes' if imported else 'no'} (backend: {keras.backend.backend()})")


if __name__ == "__main__":
    main()
