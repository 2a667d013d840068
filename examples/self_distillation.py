"""Self-distillation on the synthetic task: students of a Bayes-optimal, a No-LS, an LS and an ILS teacher.

The paper's Table 2 (and its appendix version with the ILS row): a student of
the teacher's own architecture (the 5x64 MLP) is distilled from each teacher;
LS teachers make worse students, ILS teachers better ones.

Per replicate (train/validation 50 per class, test 5000 per class):
1. a No-LS teacher, its temperature-scaled logits cached on the training set;
2. an LS teacher (epsilon 0.05) and an ILS teacher (P1 0.8, P2 2, T 1; its
   targets from the No-LS teacher), each calibrated on validation;
3. one student per teacher trained with `DistillationCrossEntropy` from the
   teacher's cached calibrated logits, in the paper's setting (appendix,
   "Self-distillation Experiments"): log-loss against the teacher's
   predictions only (weight 1), teacher and student temperatures 1.

Run:  python examples/self_distillation.py --replicates 10
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_ils  # noqa: E402
from keras_ils import distillation  # noqa: E402
from keras_ils.comparison import networks  # noqa: E402
from keras_ils.comparison.data import datasets, synthetic  # noqa: E402
from keras_ils.comparison.engine import training  # noqa: E402

PAPER = {  # paper appendix, self-distillation table: accuracy, cross-entropy, ECE, cwECE (authors' variant)
    "Bayes-optimal": (0.8192, 0.4451, 0.0137, 0.0338),
    "No LS": (0.7847, 0.5592, 0.0405, 0.0649),
    "LS": (0.7843, 0.5621, 0.0408, 0.0726),
    "ILS": (0.7957, 0.5201, 0.0473, 0.0661),
}


def train(loss, train_set, splits, recipe, seed):
    keras.utils.set_random_seed(seed)
    model = networks.mlp(synthetic.NUM_CLASSES, (2,))
    model.compile(
        optimizer=recipe.build_optimizer(),
        loss=loss,
        metrics=[keras_ils.metrics.NegativeLogLikelihood(from_logits=True)],
    )
    training.fit(model, train_set, splits.validation, recipe, monitor="val_nll", seed=seed)
    return model


def replicate(seed, recipe, n_test):
    splits = datasets.load_synthetic(seed=seed, n_test=n_test)
    validation = training.evaluation_pipeline(splits.validation)
    x_train = np.stack([x for x, _ in splits.train.as_numpy_iterator()])

    no_ls = keras_ils.calibrate(train(keras_ils.ILSLoss(method="none"), splits.train, splits, recipe, seed), validation)
    no_ls_rows = keras_ils.compute_teacher_logits(no_ls, splits.train)
    ils_train = keras_ils.with_teacher_targets(splits.train, no_ls_rows)
    teachers = {
        "Bayes-optimal": synthetic.bayes_logits(x_train).astype("float32"),
        "No LS": no_ls_rows.logits,
        "LS": keras_ils.calibrate(
            train(keras_ils.ILSLoss(method="ls", epsilon=0.05), splits.train, splits, recipe, seed + 1), validation
        ),
        "ILS": keras_ils.calibrate(
            train(keras_ils.ILSLoss(method="ils", p1=0.8, p2=2.0), ils_train, splits, recipe, seed + 2), validation
        ),
    }
    loss = distillation.DistillationCrossEntropy(weight=1.0, teacher_temperature=1.0)
    rows = {}
    for index, (name, teacher) in enumerate(teachers.items()):
        logits = teacher if isinstance(teacher, np.ndarray) else keras_ils.compute_teacher_logits(teacher, splits.train)
        student = train(loss, keras_ils.with_teacher_targets(splits.train, logits), splits, recipe, seed + 10 + index)
        scores = keras_ils.evaluate(student, training.evaluation_pipeline(splits.test))["all"]
        rows[name] = (
            scores["accuracy"],
            scores["nll"],
            scores["ece"],
            scores["class_conditional_ece"],
            scores["cwece"],
        )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=5, help="synthetic datasets (paper: 100; default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="20 epochs, 500 test points per class (smoke test)")
    args = parser.parse_args(argv)
    recipe = networks.recipe_for("mlp", epochs=20 if args.quick else None)
    n_test = 500 if args.quick else 5000
    tf.get_logger().setLevel("ERROR")

    runs = [replicate(args.seed + 1000 * r, recipe, n_test) for r in range(args.replicates)]
    means = {name: np.mean([run[name] for run in runs], axis=0) for name in PAPER}
    print(f"Self-distillation on the synthetic task, mean of {args.replicates} replicate(s); paper: 100 replicates")
    print("paper-cwECE is the authors' variant (the paper's column); cwECE is Eq. 2")
    header = f"{'teacher':<15}{'accuracy':>10}{'(paper)':>9}{'CE':>9}{'(paper)':>9}{'ECE':>9}{'(paper)':>9}"
    header += f"{'paper-cwECE':>13}{'(paper)':>9}{'cwECE':>9}"
    print(header)
    print("-" * len(header))
    for name, (acc, ce, ece, paper_cwece, cwece) in means.items():
        p_acc, p_ce, p_ece, p_cw = PAPER[name]
        print(
            f"{name:<15}{100 * acc:>9.2f}%{100 * p_acc:>8.2f}%{ce:>9.4f}{p_ce:>9.4f}{ece:>9.4f}{p_ece:>9.4f}"
            f"{paper_cwece:>13.4f}{p_cw:>9.4f}{cwece:>9.4f}"
        )
    return means


if __name__ == "__main__":
    main()
