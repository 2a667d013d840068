"""Does attaching teacher targets starve the model? The input pipeline against what training consumes.

    python benchmarks/input_pipeline.py                     # 10,000 synthetic CIFAR-shaped images: ~2 minutes
    python benchmarks/input_pipeline.py --examples 45000    # CIFAR-10's training split size
    python benchmarks/input_pipeline.py --dataset tfds:cifar10 --data-dir ~/tensorflow_datasets

The pipelines are the package's, end to end: a source shaped like
`keras_ils.comparison.data.datasets.load_tfds` output (uint8 images scaled to [0, 1] and
standardised per channel by `tf.data` maps, int32 labels), then
`training.training_pipeline` with the CIFAR recipe (cache, shuffle, random crop
and flip, batch 128, prefetch):

- `hard labels`:     `with_hard_labels(source)`, what plain training reads;
- `teacher targets`: `with_teacher_targets(source, teacher_logits)`, the cached ILS path.

Each pipeline is iterated alone, with nothing else running in the process:
the first epoch (source maps and the attach map run, the cache fills) and
then steady epochs (read from the cache), in interleaved rounds. Training
consumption is the examples per second of a ResNet student (ILSLoss,
the package's SGD recipe) fitting on the teacher-target pipeline.

Target (issue "performance and scale"): the teacher-target pipeline alone
delivers >= 10x the examples per second that training consumes.
"""

from __future__ import annotations

import argparse
import time

import _common
import keras
import numpy as np
import tensorflow as tf

import keras_ils
from keras_ils import data
from keras_ils.comparison.data import datasets
from keras_ils.comparison.engine import training
from keras_ils.teacher import TeacherLogits
from keras_ils_experiments.zoo import models, recipes


def synthetic_source(num_examples, num_classes, seed=0):
    """uint8 CIFAR-shaped images through the same two maps as `datasets.load_tfds`."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(num_examples, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, num_classes, num_examples).astype(np.int64)
    mean, std = np.full(3, 0.5, np.float32), np.full(3, 0.25, np.float32)
    to_float = lambda x, y: (tf.cast(x, tf.float32) / 255.0, tf.cast(y, tf.int32))  # noqa: E731
    standardise = lambda x, y: ((x - mean) / std, y)  # noqa: E731
    source = tf.data.Dataset.from_tensor_slices((images, labels))
    source = source.map(to_float, num_parallel_calls=tf.data.AUTOTUNE)
    return source.map(standardise, num_parallel_calls=tf.data.AUTOTUNE), labels


def epoch_seconds(dataset):
    """Seconds to read one epoch of `dataset`, every batch fetched as a training loop would."""
    start = time.perf_counter()
    for _ in dataset:
        pass
    return _common.Seconds(time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--dataset", default="synthetic", help="'synthetic' or tfds:NAME (must be downloaded)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--examples", type=int, default=10_000, help="synthetic training examples")
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--model", default="resnet20", help="the student whose consumption is measured")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of steady epochs")
    parser.add_argument("--fresh", type=int, default=2, help="first epochs measured (a new pipeline each)")
    parser.add_argument("--train-steps", type=int, default=10, help="student steps timed for consumption")
    args = parser.parse_args(argv)

    _common.print_header("Input pipeline: teacher targets attached, against what training consumes")
    source, labels, num_classes = _source(args)
    count = len(labels)
    rng = np.random.default_rng(1)
    rows = TeacherLogits(2.0 * rng.normal(size=(count, num_classes)).astype(np.float32), labels.astype(np.int64), {})
    recipe = recipes.recipe_for(args.model, "cifar10", batch_size=args.batch_size)
    build = {
        "hard labels": lambda: training.training_pipeline(data.with_hard_labels(source), recipe),
        "teacher targets": lambda: training.training_pipeline(data.with_teacher_targets(source, rows), recipe),
    }
    print(
        f"## {args.dataset}: {count:,} examples, {num_classes} classes, batch {args.batch_size}, "
        f"augment={recipe.augment}",
        flush=True,
    )

    first = _common.interleaved({name: (lambda b=b: epoch_seconds(b())) for name, b in build.items()}, args.fresh, 0)
    pipelines = {name: b() for name, b in build.items()}
    for pipeline in pipelines.values():
        epoch_seconds(pipeline)  # fills the cache
    steady = _common.interleaved(
        {name: (lambda p=p: epoch_seconds(p)) for name, p in pipelines.items()}, args.rounds, warmup=0
    )
    step = _step_seconds(args, num_classes, recipe, pipelines["teacher targets"].repeat())
    consumed = args.batch_size / step
    _print_rates(count, first, steady, consumed)
    ratio, low, high = _common.paired_ratio(steady, "teacher targets", "hard labels")
    print()
    print(f"training consumes {consumed:,.0f} examples/s ({args.model}, ILSLoss, {1e3 * step:.1f} ms per step)")
    print(f"steady epoch time, teacher targets / hard labels: {ratio:.3f} [{low:.3f}, {high:.3f}]")
    return first, steady, consumed


def _source(args):
    """`(unbatched (x, y) dataset, its labels, the class count)` of `--dataset`."""
    if args.dataset == "synthetic":
        source, labels = synthetic_source(args.examples, args.num_classes)
        return source, labels, args.num_classes
    splits = datasets.load(args.dataset, data_dir=args.data_dir)
    labels = np.concatenate([y.numpy() for _, y in splits.train.batch(4096)])
    return splits.train, labels, splits.num_classes


def _step_seconds(args, num_classes, recipe, train):
    """The median seconds of one training step of `--model` with `ILSLoss` on `train` (after tracing)."""
    keras.utils.set_random_seed(0)
    student = models.build(args.model, num_classes, (32, 32, 3))
    student.compile(optimizer=recipe.build_optimizer(), loss=keras_ils.ILSLoss(method="ils", p1=0.9, p2=1.5))
    _common.fit_step_seconds(student, train, 2)  # traces
    return float(np.median([_common.fit_step_seconds(student, train, args.train_steps) for _ in range(3)]))


def _print_rates(count, first, steady, consumed):
    """The table: each pipeline's first and steady examples per second, against what training consumes."""
    table_rows = []
    for name in first:
        first_rate = count / float(np.median(first[name]))
        steady_rate = count / float(np.median(steady[name]))
        table_rows.append(
            [
                name,
                f"{first_rate:,.0f}",
                f"{steady_rate:,.0f}",
                f"{first_rate / consumed:.1f}x",
                f"{steady_rate / consumed:.1f}x",
                _common.verdict_at_least(steady_rate / consumed, 10) if name == "teacher targets" else "",
            ]
        )
    print(
        _common.table(
            ["pipeline", "first epoch ex/s", "steady ex/s", "first / training", "steady / training", "target"],
            table_rows,
        )
    )


if __name__ == "__main__":
    main()
