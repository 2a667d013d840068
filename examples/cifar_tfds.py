"""ILS on CIFAR-10 / CIFAR-100 / SVHN from tensorflow-datasets, written out with the package's pieces.

What `keras-ils run --dataset tfds:cifar10` does, by hand, so you can copy the
parts you need into your own pipeline:

1. load with tfds, standardise, carve the last 10 % of train for validation (the paper's 45K/5K);
2. train the teacher with plain cross-entropy (SGD 0.1, momentum 0.9, weight
   decay 1e-4, step decay, random crop + flip), best validation epoch restored;
3. calibrate it (`keras_ils.calibrate`), compute its logits on the CLEAN
   training images once (`compute_teacher_logits`, cached on disk);
4. attach them with `with_teacher_targets` BEFORE shuffling and augmenting,
   train the ILS student, then temperature-scale it;
   or, with `--online`, let `OnlineTeacher` score each augmented batch instead.

Run (downloads the dataset through tfds on first use):

    python examples/cifar_tfds.py --dataset cifar10 --model resnet20 --epochs 200
    python examples/cifar_tfds.py --dataset cifar10 --online      # teacher on the augmented images

On several GPUs, wrap model building in `tf.distribute.MirroredStrategy().scope()`
(this script's `--mirrored`); the datasets need no change.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

import keras_ils  # noqa: E402
from keras_ils import data  # noqa: E402
from keras_ils.comparison.data import datasets  # noqa: E402
from keras_ils.comparison.engine import training  # noqa: E402
from keras_ils.teacher import OnlineTeacher, compute_teacher_logits  # noqa: E402
from keras_ils_experiments.zoo import models, recipes  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description="ILS on a tfds image dataset.")
    parser.add_argument("--dataset", default="cifar10", help="tfds name: cifar10, cifar100, svhn_cropped, ...")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--p1", type=float, default=0.9)
    parser.add_argument("--p2", type=float, default=1.5)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--online", action="store_true", help="run the teacher inside each training step")
    parser.add_argument("--mirrored", action="store_true", help="MirroredStrategy over the visible GPUs")
    parser.add_argument("--cache", default=None, help="teacher-logits cache file (refused if it is stale)")
    args = parser.parse_args(argv)

    splits = datasets.load_tfds(args.dataset, data_dir=args.data_dir, validation_fraction=0.1)
    recipe = recipes.recipe_for(args.model, args.dataset, epochs=args.epochs, batch_size=args.batch_size)
    strategy = tf.distribute.MirroredStrategy() if args.mirrored else tf.distribute.get_strategy()
    validation = training.evaluation_pipeline(splits.validation)
    loss = keras_ils.ILSLoss(method="ils", p1=args.p1, p2=args.p2, temperature=args.temperature)
    metrics = lambda: keras_ils.metrics.calibration_metrics(splits.num_classes, from_logits=True)  # noqa: E731

    with strategy.scope():
        teacher = models.build(args.model, splits.num_classes, splits.input_shape, recipe.weight_decay)
        teacher.compile(recipe.build_optimizer(), keras_ils.ILSLoss(method="none"), metrics=metrics()[:1])
    training.fit(teacher, splits.train, splits.validation, recipe, verbose=2)
    with strategy.scope():
        calibrated_teacher = keras_ils.calibrate(teacher, validation)

    with strategy.scope():
        student = models.build(args.model, splits.num_classes, splits.input_shape, recipe.weight_decay)
        if args.online:  # the teacher scores every augmented batch; the labels stay sparse
            trainee, train = OnlineTeacher(student, calibrated_teacher), splits.train
        else:  # cached: clean-image teacher rows attached before shuffling and augmentation
            rows = compute_teacher_logits(calibrated_teacher, splits.train, cache_path=args.cache)
            trainee, train = student, data.with_teacher_targets(splits.train, rows)
        trainee.compile(recipe.build_optimizer(), loss, metrics=metrics())
    training.fit(trainee, train, splits.validation, recipe, verbose=2)
    with strategy.scope():
        calibrated_student = keras_ils.calibrate(student, validation)

    test = training.evaluation_pipeline(splits.test)
    for name, model in (("teacher + TempS", calibrated_teacher), ("ILS", student), ("ILS + TempS", calibrated_student)):
        scores = keras_ils.evaluation.evaluate(model, test)["all"]
        print(f"{name:<16}" + "  ".join(f"{k} {v:.4f}" for k, v in scores.items()))


if __name__ == "__main__":
    main()
