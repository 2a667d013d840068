"""What the calibration metrics cost during `fit`, measured side by side in one process.

    python benchmarks/metric_overhead.py                    # ResNet-20, K = 10 and 100: a few minutes on 2 CPU cores
    python benchmarks/metric_overhead.py --rounds 30 --steps 20
    python benchmarks/metric_overhead.py --model mlp --num-classes 3

An ILS student (cached teacher targets, the package's training recipe) trains
with `model.fit` twice over the same pre-drawn batches: once with no metrics,
once with `ExpectedCalibrationError`, `ClasswiseExpectedCalibrationError`,
`NegativeLogLikelihood` and `BrierScore` attached (`from_logits=True`), for
each number of classes. Rounds of a short `fit` per variant run in rotating
order; the ratio is taken within each round and its median over rounds is
reported (first round dropped).

Two further checks that need no timing noise to settle:
- the metrics' `update_state` alone, run in a `tf.function` loop on one
  batch: its cost per step as a fraction of the student's step;
- the graph of `update_state`: its op count is the same for every K and
  number of bins (no Python loop over classes or bins) and it holds no op
  that returns to the host (py_function, print; `Assert` appears only for
  sparse labels, the range check of `hard_labels`).

Target (issue "performance and scale"): metrics <= 2 % of the step time.
"""

from __future__ import annotations

import argparse

import _common
import keras
import numpy as np
import tensorflow as tf
from keras import ops

import keras_ils
from keras_ils import data, metrics
from keras_ils_experiments.zoo import models, recipes

HOST_OPS = {"PyFunc", "EagerPyFunc", "PyFuncStateless", "Print", "PrintV2", "Assert"}


def attached_metrics(num_classes, num_bins=15):
    return [
        metrics.ExpectedCalibrationError(num_bins, from_logits=True),
        metrics.ClasswiseExpectedCalibrationError(num_classes, num_bins, from_logits=True),
        metrics.NegativeLogLikelihood(from_logits=True),
        metrics.BrierScore(from_logits=True),
    ]


def update_graph_ops(num_classes, batch_size, num_bins=15, sparse=False):
    """Op types in the traced graph of the attached metrics' `update_state` on one batch."""
    attached = attached_metrics(num_classes, num_bins)
    y_spec = (
        tf.TensorSpec([batch_size], tf.int32) if sparse else tf.TensorSpec([batch_size, 2 * num_classes], tf.float32)
    )

    @tf.function(input_signature=[y_spec, tf.TensorSpec([batch_size, num_classes], tf.float32)])
    def update(y, logits):
        for metric in attached:
            metric.update_state(y, logits)

    graph = update.get_concrete_function().graph
    return [op.type for op in graph.get_operations() if op.type not in ("Const", "Placeholder", "NoOp")]


def benchmark(num_classes, args, weights_by_classes):
    batch_size = args.batch_size or recipes.recipe_for(args.model).batch_size
    rng = np.random.default_rng(num_classes)
    if args.model == "mlp":
        shape = (2,)
    else:
        shape = (32, 32, 3)
    n = batch_size * args.batches
    x = rng.normal(size=(n, *shape)).astype("float32")
    y = rng.integers(0, num_classes, n).astype("int32")
    teacher_logits = 2.0 * rng.normal(size=(n, num_classes)).astype("float32")
    source = data.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y)), teacher_logits)
    stacked = next(iter(source.batch(batch_size, drop_remainder=True).batch(args.batches)))
    batches = tf.data.Dataset.from_tensor_slices(stacked).repeat().prefetch(tf.data.AUTOTUNE)
    recipe = recipes.recipe_for(args.model)

    def student(with_metrics):
        model = models.build(args.model, num_classes, shape)
        model.set_weights(weights_by_classes[num_classes])
        model.compile(
            optimizer=recipe.build_optimizer(),
            loss=keras_ils.ILSLoss(method="ils", p1=0.9, p2=1.5),
            metrics=attached_metrics(num_classes) if with_metrics else None,
        )
        return model

    plain, measured = student(False), student(True)
    attached = attached_metrics(num_classes)
    y_batch, logits = stacked[1][0], tf.constant(teacher_logits[:batch_size])

    def update(y, z, i):
        for metric in attached:
            metric.update_state(y, z + 1e-6 * i)
        return ops.sum(attached[0].counts)

    steps = args.steps or (40 if args.model == "mlp" else 3)
    return {
        f"K={num_classes}, loss only": lambda: _common.fit_step_seconds(plain, batches, steps),
        f"K={num_classes}, loss + 4 metrics": lambda: _common.fit_step_seconds(measured, batches, steps),
        f"K={num_classes}, metric updates alone": _common.in_graph_seconds(update, (y_batch, logits), 50),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--model", default="resnet20", help="a name of keras_ils_experiments.zoo.models.build")
    parser.add_argument("--num-classes", default="10,100", help="comma-separated K values")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the paper's (128 images, 32 MLP)")
    parser.add_argument("--batches", type=int, default=4, help="distinct batches cycled through")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (after one warm-up round)")
    parser.add_argument("--steps", type=int, default=None, help="steps per variant per round (3 images, 40 MLP)")
    args = parser.parse_args(argv)
    classes = [int(k) for k in args.num_classes.split(",")]
    batch_size = args.batch_size or recipes.recipe_for(args.model).batch_size
    shape = (2,) if args.model == "mlp" else (32, 32, 3)

    _common.print_header("Metric overhead: ECE, cwECE, NLL and Brier attached during fit")
    keras.utils.set_random_seed(0)
    weights = {k: models.build(args.model, k, shape).get_weights() for k in classes}
    calls = {}
    for k in classes:
        calls.update(benchmark(k, args, weights))
    steps = args.steps or (40 if args.model == "mlp" else 3)
    print(f"## {args.model}, batch {batch_size}: {args.rounds} rounds of {steps} steps per variant", flush=True)
    times = _common.interleaved(calls, rounds=args.rounds, warmup=1)

    rows = []
    for k in classes:
        base, with_metrics, alone = (f"K={k}, loss only", f"K={k}, loss + 4 metrics", f"K={k}, metric updates alone")
        ratio, low, high = _common.paired_ratio(times, with_metrics, base)
        fraction = float(np.median(times[alone])) / float(np.median(times[base]))
        for name in (base, with_metrics):
            median = float(np.median(times[name]))
            is_base = name == base
            rows.append(
                [
                    name,
                    f"{1e3 * median:.2f}",
                    f"{batch_size / median:,.0f}",
                    "1 (baseline)" if is_base else f"{ratio:.3f} [{low:.3f}, {high:.3f}]",
                    "" if is_base else _common.verdict(ratio, 1.02),
                ]
            )
        median = float(np.median(times[alone]))
        rows.append(
            [alone, f"{1e3 * median:.3f}", "", f"{fraction:.4f} of the step", _common.verdict(1 + fraction, 1.02)]
        )
    print(_common.table(["variant", "step ms (median)", "examples/s", "ratio to loss only [IQR]", "target"], rows))
    print()

    print("## update_state graph of the 4 metrics on one batch: ops other than constants")
    graph_rows = []
    for k in sorted({*classes, 2, 1000}):
        for bins in (15, 100):
            teacher, sparse = update_graph_ops(k, batch_size, bins), update_graph_ops(k, batch_size, bins, sparse=True)
            host = [", ".join(sorted({op for op in found if op in HOST_OPS})) or "none" for found in (teacher, sparse)]
            graph_rows.append([k, bins, len(teacher), host[0], len(sparse), host[1]])
    headers = ["K", "bins", "ops, teacher targets", "host-side", "ops, sparse labels", "host-side"]
    print(_common.table(headers, graph_rows))
    print("(Assert: the range check of sparse labels in `hard_labels`, as in the loss)")
    return times


if __name__ == "__main__":
    main()
