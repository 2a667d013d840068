"""Models trained per second: `experiments.vectorised.train_mlps` against sequential `model.fit`, side by side.

Both train models of the paper's synthetic protocol (a replicate's grid:
No LS, LS, LS-0.2, ILS1, ILS2, ILS: 212 models; MLP 5 x 64, Adam 1e-2,
batch 32, early stopping 10 on the hard-label validation cross-entropy, at
most 500 epochs) on the same data and targets:

- `vectorised`: all models of `--replicates` replicates in one `train_mlps`
  call (the full protocol trains 25 replicates' ILS models per call), in
  both of its epoch layouts: `TF ops` (`jit_compile=False`: batched matrix
  products as TensorFlow ops, oneDNN's where TensorFlow uses it, the Adam
  update XLA-fused) and `whole-epoch XLA` (`jit_compile=True`); the line
  `auto picks` says which `jit_compile="auto"` takes on this machine;
- `model.fit`: the ordinary Keras path, one model at a time
  (`keras_ils_experiments.zoo.models.mlp`, `ILSLoss` on the package's teacher targets,
  `keras_ils.comparison.engine.training.fit` with the MLP recipe), for `--fit-models` of the
  same configurations (of the round's first replicate) spread over the grid.

Rounds are interleaved (the order alternates, a new replicate each round) and
medians reported: models per second, and model-epochs per second (the models
stop at different epochs, so this is the like-for-like rate). The last lines
extrapolate both to the full protocol (100 replicates, 21,200 models).

    python benchmarks/synthetic_protocol.py [--rounds 3] [--fit-models 4] [--replicates 5]
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ils.calibration import temperature  # noqa: E402
from keras_ils.comparison import networks  # noqa: E402
from keras_ils.comparison.data import synthetic  # noqa: E402
from keras_ils.comparison.engine import training, vectorised  # noqa: E402
from keras_ils.losses import ILSLoss  # noqa: E402
from keras_ils.metrics import NegativeLogLikelihood  # noqa: E402
from keras_ils.targets import ils_targets, teacher_targets  # noqa: E402
from keras_ils_experiments import synthetic_protocol  # noqa: E402


def replicate(seed):
    """One replicate's data, its calibrated No LS teacher (trained by `train_mlps`), and every model's targets."""
    train, val = synthetic.make_dataset(50, seed), synthetic.make_dataset(50, seed + 10_000)
    free, taught = synthetic_protocol.model_configs(synthetic_protocol.grids())
    teacher = vectorised.train_mlps(train.x[None], np.eye(3)[train.y][None], val.x[None], val.y[None], seeds=[seed])
    t_star = temperature._fit_temperatures(vectorised.mlp_logits(teacher.weights, val.x), val.y[None])[0]
    calibrated = (vectorised.mlp_logits(teacher.weights, train.x)[0] / t_star).astype(np.float32)
    configs = [hp for _, hp in free + taught]
    targets = np.stack([np.asarray(ils_targets(train.y, calibrated, **hp), np.float32) for hp in configs])
    return train, val, calibrated, configs, targets


def run_vectorised(replicates, jit_compile):
    """All models of `replicates` (a list of `(seed, replicate(seed))`) in one `train_mlps` call."""
    x, targets, x_val, y_val, seeds = [], [], [], [], []
    for seed, (train, val, _, _, replicate_targets) in replicates:
        m = len(replicate_targets)
        x.append(np.broadcast_to(train.x, (m,) + train.x.shape))
        x_val.append(np.broadcast_to(val.x, (m,) + val.x.shape))
        y_val.append(np.broadcast_to(val.y, (m,) + val.y.shape))
        targets.append(replicate_targets)
        seeds += [seed] * m
    x, targets, x_val, y_val = (np.concatenate(a) for a in (x, targets, x_val, y_val))
    start = time.perf_counter()
    result = vectorised.train_mlps(
        x, targets, x_val, y_val, seeds=seeds, training=vectorised.MLPTraining(jit_compile=jit_compile)
    )
    return time.perf_counter() - start, len(seeds), int(result.epochs.sum())


def run_model_fit(train, val, calibrated, configs, picks, seed):
    make = lambda x, y: tf.data.Dataset.from_tensor_slices((x, y))  # noqa: E731
    y_train = np.asarray(teacher_targets(train.y, calibrated))
    start, epochs = time.perf_counter(), 0
    for pick in picks:
        keras.utils.set_random_seed(seed)
        model = networks.mlp(3, (2,))
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=ILSLoss(**configs[pick]),
            metrics=[NegativeLogLikelihood(from_logits=True)],
        )
        history = training.fit(
            model, make(train.x, y_train), make(val.x, val.y), networks.MLP_RECIPE, monitor="val_nll", seed=seed
        )
        epochs += len(history.history["loss"])
    return time.perf_counter() - start, len(picks), epochs


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fit-models", type=int, default=4, help="models trained by model.fit per round")
    parser.add_argument(
        "--replicates", type=int, default=5, help="replicates whose grids the vectorised trainer trains per round"
    )
    args = parser.parse_args()
    _print_machine()
    layouts = {"vectorised, TF ops": False, "vectorised, whole-epoch XLA": True}
    auto = next(variant for variant, jit_compile in layouts.items() if jit_compile == vectorised.whole_epoch_xla())
    print(f"auto picks: {auto}")
    rates = _rounds(args, layouts)
    print(f"load average at end: {load()}\n")
    _print_rates(rates, layouts, auto)


def _print_machine():
    cpu = platform.processor() or platform.machine()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    print(f"command: python {' '.join(sys.argv)}")
    print(f"cpu: {cpu}, {os.cpu_count()} logical cores; tensorflow {tf.__version__}, keras {keras.__version__}")
    print(f"load average at start: {load()}")


def _rounds(args, layouts) -> dict:
    """`{variant: [(models/s, model-epochs/s, models, model-epochs, seconds) per round]}`, in rotating order."""
    rates = {variant: [] for variant in [*layouts, "model.fit"]}
    # warm-up: trace and compile every path once, outside the timings
    warm = replicate(999)
    for jit_compile in layouts.values():
        run_vectorised([(999, warm)], jit_compile)
    run_model_fit(*warm[:4], [0], 999)
    for round_ in range(args.rounds):
        seeds = [1000 + args.replicates * round_ + i for i in range(args.replicates)]
        replicates = [(seed, replicate(seed)) for seed in seeds]
        seed, (train, val, calibrated, configs, _) = replicates[0]
        picks = np.linspace(0, len(configs) - 1, args.fit_models).round().astype(int).tolist()
        order = list(rates)[round_ % len(rates) :] + list(rates)[: round_ % len(rates)]
        for variant in order:
            if variant in layouts:
                seconds, n, epochs = run_vectorised(replicates, layouts[variant])
            else:
                seconds, n, epochs = run_model_fit(train, val, calibrated, configs, picks, seed)
            rates[variant].append((n / seconds, epochs / seconds, n, epochs, seconds))
            print(
                f"round {round_}: {variant:27s} {n:4d} models, {epochs:6d} model-epochs in {seconds:6.1f} s: "
                f"{n / seconds:8.2f} models/s, {epochs / seconds:8.1f} model-epochs/s (load {load()})"
            )
    return rates


def _print_rates(rates, layouts, auto):
    print("| route | models/s (median) | model-epochs/s (median) | full protocol, 21,200 models (extrapolated) |")
    print("|---|---|---|---|")
    for variant, values in rates.items():
        models_rate = statistics.median(v[0] for v in values)
        epochs_rate = statistics.median(v[1] for v in values)
        hours = 21_200 / models_rate / 3600
        name = f"{variant} (auto)" if variant == auto else variant
        print(f"| {name} | {models_rate:.2f} | {epochs_rate:.0f} | {hours:.2f} h |")
    print()
    fit = rates["model.fit"]
    for variant in layouts:
        ratio = [v[1] / f[1] for v, f in zip(rates[variant], fit, strict=True)]
        models_ratio = [v[0] / f[0] for v, f in zip(rates[variant], fit, strict=True)]
        print(
            f"{variant} / model.fit, per round (model-epochs/s): {', '.join(f'{r:.0f}x' for r in ratio)}; "
            f"median {statistics.median(ratio):.0f}x; models/s median {statistics.median(models_ratio):.0f}x"
        )
    ops, whole = (rates[variant] for variant in layouts)
    xla = [w[1] / o[1] for o, w in zip(ops, whole, strict=True)]
    print(
        f"whole-epoch XLA / TF ops, per round (model-epochs/s): {', '.join(f'{r:.2f}x' for r in xla)}; "
        f"median {statistics.median(xla):.2f}x"
    )


if __name__ == "__main__":
    main()
