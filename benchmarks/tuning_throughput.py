"""Trials per minute of a KerasTuner ILS search on the synthetic task, by what each trial does.

Every variant runs the same grid trials (ILS, P1 x P2 x T points of the
synthetic grid) with `keras_ils.tuning.ILSHyperModel` and the package's
`GridSearch`, on the same cached teacher targets; the variants differ only in
the training pipeline and the fit settings:

- `uncached, no early stop`: the teacher targets are attached by a `tf.data`
  map every epoch and every trial runs all `--epochs` (what a search does
  without the paper's early stopping);
- `cached, no early stop`: the targets are attached once (`.cache()`);
- `cached, early stop 10`: the paper's protocol and the package default;
- `... + jit_compile`: the same with XLA.

Rounds are interleaved (variant order rotates) and the median per variant is
reported, so machine noise hits all variants alike. Ratios are against the
package default (`cached, early stop 10`).

    python benchmarks/tuning_throughput.py [--trials 4] [--rounds 3] [--epochs 500]
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ils import compute_teacher_logits, tuning, with_teacher_targets  # noqa: E402
from keras_ils.comparison import networks  # noqa: E402
from keras_ils.comparison.data import datasets  # noqa: E402
from keras_ils.comparison.engine import training  # noqa: E402

VARIANTS = {
    "uncached, no early stop": dict(cache=False, patience=None, jit_compile=False),
    "cached, no early stop": dict(cache=True, patience=None, jit_compile=False),
    "cached, early stop 10 (default)": dict(cache=True, patience=10, jit_compile=False),
    "cached, early stop 10, jit_compile": dict(cache=True, patience=10, jit_compile=True),
}
DEFAULT = "cached, early stop 10 (default)"
EPOCHS_RUN = []  # module-level: KerasTuner deep-copies callbacks per trial


class CountEpochs(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        EPOCHS_RUN.append(epoch)


def run_variant(settings, splits, teacher_logits, validation, trials, epochs, directory):
    """Seconds and epochs of `trials` grid trials under `settings`."""
    train = with_teacher_targets(splits.train, teacher_logits)
    if settings["cache"]:
        train = train.cache()
    train = train.shuffle(1024, seed=0).batch(32).prefetch(tf.data.AUTOTUNE)

    def build_model(hp):
        model = networks.mlp(3, (2,))
        model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=settings["jit_compile"])
        return model

    space = dict(tuning.make_search_space("ils", "synthetic"))
    space["p1"] = space["p1"][:trials]
    space["p2"], space["temperature"] = space["p2"][:1], space["temperature"][:1]
    hypermodel = tuning.ILSHyperModel(
        build_model, 3, method="ils", search_space=space, patience=settings["patience"], seed=0
    )
    tuner = tuning.tuner_for("grid", hypermodel, directory=directory, project_name="bench", overwrite=True)
    EPOCHS_RUN.clear()
    start = time.perf_counter()
    tuner.search(train, validation_data=validation, epochs=epochs, callbacks=[CountEpochs()], verbose=0)
    seconds = time.perf_counter() - start
    completed = [t for t in tuner.oracle.trials.values() if t.status == "COMPLETED"]
    assert len(completed) == trials, [t.status for t in tuner.oracle.trials.values()]
    return seconds, len(EPOCHS_RUN)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4, help="grid trials per variant and round (<= 5)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--epochs", type=int, default=500, help="maximum epochs per trial (paper: 500)")
    args = parser.parse_args(argv)

    splits = datasets.load_synthetic(seed=0, n_test=10)
    keras.utils.set_random_seed(0)
    teacher = networks.mlp(3, (2,))
    teacher.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    teacher.fit(*next(iter(splits.train.batch(150))), epochs=30, verbose=0)
    teacher_logits = compute_teacher_logits(teacher, splits.train)
    validation = training.evaluation_pipeline(splits.validation)

    seconds = {name: [] for name in VARIANTS}
    epochs = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    with tempfile.TemporaryDirectory() as directory:
        for round_index in range(args.rounds):
            for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
                took, ran = run_variant(
                    VARIANTS[name], splits, teacher_logits, validation, args.trials, args.epochs, directory
                )
                seconds[name].append(took)
                epochs[name].append(ran)
                print(f"round {round_index}: {name:<38} {took:6.1f} s, {ran} epochs", flush=True)

    default = statistics.median(seconds[DEFAULT])
    print(f"\n{args.trials} trials per variant, median of {args.rounds} interleaved rounds; TF {tf.__version__}")
    header = f"{'variant':<38}{'s/trial':>9}{'trials/min':>12}{'epochs/trial':>14}{'time vs default':>17}"
    print(header)
    print("-" * len(header))
    for name in VARIANTS:
        median = statistics.median(seconds[name])
        per_trial = median / args.trials
        epochs_per_trial = statistics.median(epochs[name]) / args.trials
        print(f"{name:<38}{per_trial:>9.2f}{60 / per_trial:>12.1f}{epochs_per_trial:>14.1f}{median / default:>16.2f}x")


if __name__ == "__main__":
    main()
