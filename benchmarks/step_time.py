"""Training-step time of ILS against plain training, measured side by side in one process.

    python benchmarks/step_time.py                          # small defaults: a few minutes on 2 CPU cores
    python benchmarks/step_time.py --rounds 30 --steps 20   # tighter medians (a GPU, or patience)
    python benchmarks/step_time.py --models resnet110 --num-classes 100

For each model (a CIFAR-shaped ResNet and the paper's MLP), with the same data,
batch, initial weights and optimizer (the package's training recipe), every
variant trains with `model.fit` as a user would:

| variant                  | what it is                                                                 |
|--------------------------|----------------------------------------------------------------------------|
| plain cross-entropy      | `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`, labels    |
| LS                       | `ILSLoss(method="ls")`, labels                                             |
| ILS, cached teacher      | `ILSLoss(method="ils")` on `with_teacher_targets` rows                     |
| ILS, online teacher      | `OnlineTeacher(student, calibrated_teacher)` + `ILSLoss`, labels           |
| ILS, teacher in the loss | the authors' code's pattern: the loss runs the teacher on each batch, then |
|                          | `keras_ils.ils_targets` and cross-entropy (`TeacherInLoss` below)          |

then plain and cached ILS again under XLA (`jit_compile=True`, online too) and
under `mixed_float16` / `mixed_bfloat16`.

How it is timed: every variant is a compiled model fed the same pre-drawn
batches (the package's pipeline output, materialised, so the input pipeline
is not what is measured: see `input_pipeline.py`). One round runs a short
`fit` of every variant, in rotating order; a variant's value in a round is
its median step over that `fit` (first step dropped). The first round (tracing,
XLA compilation) is dropped. Ratios are taken within each round and the
median over rounds is reported with its interquartile range. The teacher's
forward pass is timed inside one `tf.function` loop (no per-call dispatch), and
so are the losses alone (loss and gradient on one batch of logits): the cost
ILS adds to a step without the noise of whole steps.

Targets (issue "performance and scale"):
    cached ILS <= 1.03 x plain cross-entropy;
    online ILS <= 1 + teacher forward / plain step + 0.03.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

import _common
import keras
import numpy as np
import tensorflow as tf
from keras import ops

import keras_ils
from keras_ils import data
from keras_ils.comparison.data import synthetic
from keras_ils_experiments.zoo import models, recipes

ILS = dict(method="ils", p1=0.9, p2=1.5, temperature=1.0)


class TeacherInLoss(keras.Model):
    """The pattern of the paper's reference code: the loss itself runs the teacher on every batch.

    The authors' PyTorch losses take the inputs and call `orig_net(inputs) / T`
    inside `forward`; here `compute_loss` does the same and builds the targets
    with the package's one implementation (`keras_ils.ils_targets`).
    """

    def __init__(self, student, teacher, **kwargs):
        super().__init__(**kwargs)
        self.student = student
        self.teacher = teacher
        self.teacher.trainable = False

    def call(self, inputs, training=None):
        return self.student(inputs, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        teacher_logits = ops.stop_gradient(self.teacher(x, training=False))
        targets = keras_ils.ils_targets(y, teacher_logits, **ILS)
        return ops.mean(ops.categorical_crossentropy(targets, ops.cast(y_pred, "float32"), from_logits=True))


def _arrays(model_name, num_examples, num_classes, seed):
    rng = np.random.default_rng(seed)
    if model_name == "mlp":
        x, y, _ = synthetic.make_dataset(-(-num_examples // synthetic.NUM_CLASSES), seed=seed)
        return x[:num_examples], y[:num_examples], synthetic.NUM_CLASSES
    x = rng.normal(size=(num_examples, 32, 32, 3)).astype("float32")  # standardised CIFAR-shaped images
    return x, rng.integers(0, num_classes, num_examples).astype("int32"), num_classes


def _batches(dataset, batch_size, count):
    """`count` batches of the package's pipeline output, held in memory and repeated."""
    stacked = next(iter(dataset.batch(batch_size, drop_remainder=True).batch(count)))
    return tf.data.Dataset.from_tensor_slices(stacked).repeat().prefetch(tf.data.AUTOTUNE)


def _build(model_name, num_classes, input_shape, weights, policy="float32"):
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = models.build(model_name, num_classes, input_shape)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.set_weights(weights)
    return model


class _Setup(NamedTuple):
    """One model's data, recipe, initial weights and calibrated teacher, shared by every variant."""

    model_name: str
    x: np.ndarray
    num_classes: int
    batch_size: int
    recipe: recipes.Recipe
    weights: list
    teacher: keras.Model
    sparse: tf.data.Dataset  # batches with hard labels
    teacher_rows: tf.data.Dataset  # batches with teacher targets


def _setup(model_name, args) -> _Setup:
    batch_size = args.batch_size_for(model_name)
    x, y, num_classes = _arrays(model_name, args.batches * batch_size, args.num_classes, 0)
    keras.utils.set_random_seed(0)
    weights = models.build(model_name, num_classes, x.shape[1:]).get_weights()
    teacher = models.build(model_name, num_classes, x.shape[1:])
    calibrated_teacher = keras_ils.calibrate(teacher, (x[:512], y[:512]))
    source = tf.data.Dataset.from_tensor_slices((x, y))
    rows = keras_ils.compute_teacher_logits(calibrated_teacher, source)
    sparse = _batches(data.with_hard_labels(source), batch_size, args.batches)
    teacher_rows = _batches(data.with_teacher_targets(source, rows), batch_size, args.batches)
    recipe = recipes.recipe_for(model_name)
    return _Setup(model_name, x, num_classes, batch_size, recipe, weights, calibrated_teacher, sparse, teacher_rows)


def _plain_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _variants(setup: _Setup, args) -> dict:
    """`{name: (compiled model, batches)}`: every variant of the module table, XLA and mixed precision."""

    def variant(loss, policy="float32", jit_compile=False, wrap=None):
        student = _build(setup.model_name, setup.num_classes, setup.x.shape[1:], setup.weights, policy)
        model = wrap(student) if wrap else student
        model.compile(optimizer=setup.recipe.build_optimizer(), loss=loss, jit_compile=jit_compile)
        return model

    online = lambda student: keras_ils.OnlineTeacher(student, setup.teacher)  # noqa: E731
    in_loss = lambda student: TeacherInLoss(student, setup.teacher)  # noqa: E731
    sparse, teacher_rows = setup.sparse, setup.teacher_rows
    variants = {
        "plain cross-entropy": (variant(_plain_loss()), sparse),
        "LS": (variant(keras_ils.ILSLoss(method="ls", epsilon=0.1)), sparse),
        "ILS, cached teacher": (variant(keras_ils.ILSLoss(**ILS)), teacher_rows),
        "ILS, online teacher": (variant(keras_ils.ILSLoss(**ILS), wrap=online), sparse),
        "ILS, teacher in the loss": (variant(None, wrap=in_loss), sparse),
    }
    if not args.no_xla:
        variants["plain cross-entropy, XLA"] = (variant(_plain_loss(), jit_compile=True), sparse)
        variants["ILS, cached teacher, XLA"] = (variant(keras_ils.ILSLoss(**ILS), jit_compile=True), teacher_rows)
        variants["ILS, online teacher, XLA"] = (
            variant(keras_ils.ILSLoss(**ILS), jit_compile=True, wrap=online),
            sparse,
        )
    for policy in args.policies_for(setup.model_name):
        variants[f"plain cross-entropy, {policy}"] = (variant(_plain_loss(), policy=policy), sparse)
        variants[f"ILS, cached teacher, {policy}"] = (variant(keras_ils.ILSLoss(**ILS), policy=policy), teacher_rows)
    return variants


def _losses(setup: _Setup) -> dict:
    """`{name: (loss, y batch)}` of the losses timed alone."""
    sparse_batch, teacher_batch = next(iter(setup.sparse))[1], next(iter(setup.teacher_rows))[1]
    return {
        "plain cross-entropy": (_plain_loss(), sparse_batch),
        "LS": (keras_ils.ILSLoss(method="ls", epsilon=0.1), sparse_batch),
        "ILS, cached teacher": (keras_ils.ILSLoss(**ILS), teacher_batch),
    }


def _calls(setup: _Setup, variants, losses, steps, args) -> dict:
    """The timed functions: each variant's `fit`, the teacher's forward pass, each loss and its gradient alone."""
    calls = {name: (lambda m=m, d=d: _common.fit_step_seconds(m, d, steps)) for name, (m, d) in variants.items()}
    x_batch = tf.convert_to_tensor(setup.x[: setup.batch_size])
    forward = lambda x, i: ops.sum(setup.teacher(x + 1e-6 * i, training=False))  # noqa: E731
    calls["teacher forward"] = _common.in_graph_seconds(forward, (x_batch,), steps)
    if not args.no_xla:
        calls["teacher forward, XLA"] = _common.in_graph_seconds(forward, (x_batch,), steps, jit_compile=True)
    logits = tf.constant(setup.teacher.predict(setup.x[: setup.batch_size], verbose=0))
    for name, (loss, y_batch) in losses.items():
        calls[f"loss alone: {name}"] = _common.in_graph_seconds(_loss_and_gradient(loss), (y_batch, logits), 200)
    return calls


def benchmark_model(model_name, args):
    setup = _setup(model_name, args)
    variants, losses = _variants(setup, args), _losses(setup)
    steps = args.steps_for(model_name)
    calls = _calls(setup, variants, losses, steps, args)
    policies = ", ".join(args.policies_for(model_name)) or "none"
    print(
        f"## {model_name}: {setup.num_classes} classes, input {tuple(setup.x.shape[1:])}, batch {setup.batch_size}, "
        f"{setup.recipe.optimizer} optimizer, mixed precision: {policies}; "
        f"{args.rounds_for(model_name)} rounds of {steps} steps per variant",
        flush=True,
    )
    times = _common.interleaved(calls, rounds=args.rounds_for(model_name), warmup=1)
    utilisation = _utilisation(variants, steps) if _common.GpuUtilisation.available() else {}
    _print_steps(times, variants, utilisation, setup.batch_size)
    _print_losses(times, losses, setup)
    return times


def _print_steps(times, variants, utilisation, batch_size):
    rows = []
    for name in variants:
        baseline = _baseline(name)
        median = float(np.median(times[name]))
        ratio, low, high = _common.paired_ratio(times, name, baseline)
        target = _target(name, times, baseline)
        rows.append(
            [
                name,
                f"{1e3 * median:.2f}",
                f"{batch_size / median:,.0f}",
                _common.describe_utilisation(utilisation.get(name)),
                f"{ratio:.3f} [{low:.3f}, {high:.3f}]" if name != baseline else "1 (baseline)",
                target,
            ]
        )
    for name in ("teacher forward", "teacher forward, XLA"):
        if name in times:
            median = float(np.median(times[name]))
            rows.append([name, f"{1e3 * median:.2f}", f"{batch_size / median:,.0f}", "", "", ""])
    headers = ["variant", "step ms (median)", "examples/s", "GPU util", "ratio to plain [IQR]", "target"]
    print(_common.table(headers, rows))
    print()


def _print_losses(times, losses, setup: _Setup):
    plain_step = float(np.median(times["plain cross-entropy"]))
    plain_loss_time = float(np.median(times["loss alone: plain cross-entropy"]))
    loss_rows = []
    for name in losses:
        median = float(np.median(times[f"loss alone: {name}"]))
        added = median - plain_loss_time
        loss_rows.append([name, f"{1e6 * median:.1f}", f"{1e6 * added:+.1f}", f"{100 * added / plain_step:+.3f} %"])
    print(
        f"loss and its gradient alone, on a [{setup.batch_size}, {setup.num_classes}] batch of logits, "
        "in a tf.function loop:"
    )
    print(_common.table(["loss", "us per step", "added vs plain, us", "added, % of the plain step"], loss_rows))
    print(flush=True)


def _loss_and_gradient(loss):
    def body(y, logits, i):
        logits = logits + 1e-6 * i
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(y, logits)
        return value + tf.reduce_sum(tape.gradient(value, logits))

    return body


def _baseline(name):
    """The plain cross-entropy variant in the same mode (XLA, mixed precision) as `name`."""
    teacher = ("cached teacher", "online teacher", "teacher in the loss")
    mode = [part for part in name.split(", ")[1:] if part not in teacher]
    return ", ".join(["plain cross-entropy", *mode])


def _target(name, times, baseline):
    ratio = _common.paired_ratio(times, name, baseline)[0]
    if "cached teacher" in name:
        return _common.verdict(ratio, 1.03)
    if "online teacher" in name:
        forward = "teacher forward, XLA" if "XLA" in name else "teacher forward"
        limit = 1 + float(np.median(times[forward])) / float(np.median(times[baseline])) + 0.03
        return _common.verdict(ratio, limit)
    return ""


def _utilisation(variants, steps):
    """Mean GPU utilisation of each variant over a `fit` of its own (GPU machines only)."""
    result = {}
    for name, (model, dataset) in variants.items():
        with _common.GpuUtilisation() as monitor:
            _common.fit_step_seconds(model, dataset, max(steps, 50))
        result[name] = monitor.mean
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument(
        "--models", default="resnet20,mlp", help="comma-separated names of keras_ils_experiments.zoo.models.build"
    )
    parser.add_argument("--num-classes", type=int, default=10, help="classes of the image models (CIFAR-10: 10)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the paper's (128 images, 32 MLP)")
    parser.add_argument("--batches", type=int, default=4, help="distinct batches cycled through")
    parser.add_argument("--rounds", type=int, default=None, help="rounds after a warm-up (5 images, 40 MLP)")
    parser.add_argument("--steps", type=int, default=None, help="steps per variant per round (3 images, 40 MLP)")
    parser.add_argument(
        "--policies",
        default="auto",
        help="comma-separated mixed-precision policies ('' for none); auto: mixed_float16 and mixed_bfloat16,\n"
        "but no mixed_float16 for convolutional models without a GPU (TensorFlow has no fast float16\n"
        "convolutions on CPU: one ResNet-20 step took 80-100 s on the 2-core machine of RESULTS.md)",
    )
    parser.add_argument("--no-xla", action="store_true", help="skip the jit_compile=True variants")
    args = parser.parse_args(argv)
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if args.policies == "auto":
        args.policies_for = lambda name: (
            ["mixed_float16", "mixed_bfloat16"] if has_gpu or name == "mlp" else ["mixed_bfloat16"]
        )
    else:
        policies = [p for p in args.policies.split(",") if p]
        args.policies_for = lambda name: policies
    recipe_batch = lambda name: recipes.recipe_for(name).batch_size  # noqa: E731
    args.batch_size_for = lambda name: args.batch_size or recipe_batch(name)
    args.steps_for = lambda name: args.steps or (40 if name == "mlp" else 3)
    args.rounds_for = lambda name: args.rounds or (40 if name == "mlp" else 5)

    _common.print_header("Step time: ILS against plain training, side by side")
    results = {}
    for name in args.models.split(","):
        results[name] = benchmark_model(name.strip(), args)
    return results


if __name__ == "__main__":
    main()
