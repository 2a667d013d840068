"""The worked example's data for `keras-ils benchmark paper`: scikit-learn's sets as .npz.

The example itself is docs/results/paper-tables.md.

Each of iris, wine and breast cancer is split 70/30 into train and test,
stratified, with `random_state=0`, and saved as a user's `.npz`
(`x_train, y_train, x_test, y_test`) in `results/paper_tables/data/`. The
command then carves its own 20 % stratified validation split from train,
seeded by each run's seed. Needs scikit-learn (the test extra); the package
itself never imports it.

    python scripts/paper_tables_data.py
"""

import argparse
import os

import numpy as np
from sklearn import datasets
from sklearn.model_selection import train_test_split

DIRECTORY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "paper_tables", "data")

if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help only
    os.makedirs(DIRECTORY, exist_ok=True)
    for name in ("iris", "wine", "breast_cancer"):
        x, y = getattr(datasets, f"load_{name}")(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
        path = os.path.join(DIRECTORY, f"{name}.npz")
        np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
        print(f"{path}: {len(y_train)} train, {len(y_test)} test, {len(np.unique(y))} classes")
