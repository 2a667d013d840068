"""The MLP's default recipe on tables: No LS (the verdict's reference) under candidate recipes, on five data sets.

Run:  python scripts/table_recipe.py --seeds 10 > table_recipe.md

Per data set and seed, `compare`'s split (a stratified 20 % test split, 20 % of the rest for validation; the
synthetic task keeps its own splits), then the teacher of `compare`'s vectorised engine (the package's 5 x 64 MLP,
batch 32, at most 500 epochs, early stopping after 10 epochs on the validation NLL, the best epoch restored) under
each recipe, and its test NLL as trained and temperature-scaled. A Markdown table on stdout.
"""

import argparse
import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

# (learning rate, coupled weight decay): the paper's recipe, then the candidates
RECIPES = {
    "Adam 1e-2 (MLP_RECIPE)": (1e-2, 0.0),
    "Adam 1e-3": (1e-3, 0.0),
    "Adam 1e-3, weight decay 1e-3": (1e-3, 1e-3),
    "Adam 1e-3, weight decay 1e-2 (TABLE_RECIPE)": (1e-3, 1e-2),
}
SETS = ("iris", "wine", "breast_cancer", "digits", "synthetic")


def splits_of(name, seed):
    from keras_ils.comparison.data.arrays import array_splits
    from keras_ils.comparison.data.datasets import load_synthetic

    if name == "synthetic":
        return load_synthetic(seed=seed)
    from sklearn import datasets

    x, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    return array_splits(x, y, test_fraction=0.2, validation_fraction=0.2, seed=seed, name=name)


def teacher(splits, seed, learning_rate, weight_decay):
    """`(test NLL, test NLL + TempS, accuracy, the worst test example's NLL)` of the engine's No LS network."""
    from scipy.special import log_softmax

    from keras_ils.comparison.engine import students, vectorised
    from keras_ils.comparison.main_job.engine_path import _arrays

    train, validation, (x_test, y_test) = (_arrays(d) for d in (splits.train, splits.validation, splits.test))
    training = vectorised.MLPTraining(
        learning_rate=learning_rate, weight_decay=weight_decay, pool_size=students.POOL_SIZE
    )
    settings = students.SearchSettings(methods=("ls",), fixed={"epsilon": 0.1}, training=training, seed=seed)
    found = students.search_students(*train, *validation, settings, num_classes=splits.num_classes)
    logits = found.keras_model(0).predict(x_test, verbose=0).astype(np.float64)
    rows = np.arange(len(y_test))
    nll = -log_softmax(logits, axis=1)[rows, y_test]
    scaled = -log_softmax(logits / found.teacher_fit.temperature, axis=1)[rows, y_test]
    return nll.mean(), scaled.mean(), (logits.argmax(axis=1) == y_test).mean(), nll.max()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--sets", default=",".join(SETS))
    args = parser.parse_args()
    print("| data set | recipe | No LS test NLL: mean | median | largest | + TempS: mean | accuracy | worst example |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.sets.split(","):
        found = {recipe: [] for recipe in RECIPES}
        for seed in range(args.seeds):
            splits = splits_of(name, seed)
            for recipe, (learning_rate, weight_decay) in RECIPES.items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # small validation splits warn
                    found[recipe].append(teacher(splits, seed, learning_rate, weight_decay))
        for recipe, values in found.items():
            nll, scaled, accuracy, worst = np.array(values).T
            print(f"| {name} | {recipe} | {nll.mean():.3f} | {np.median(nll):.3f} | {nll.max():.2f} | "
                  f"{scaled.mean():.3f} | {accuracy.mean():.3f} | {worst.mean():.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
