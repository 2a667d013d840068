"""`keras-ils run --methods all` on vector data with the calibration losses (issue 24) against the old method set.

The issue's requirement: with Focal, FLSD-53, MbLS, MMCE, MDCA and OLS in the
registry, `--methods all` on vector data stays within 2x of the time the old
`all` (Dis, cLS, BS_Soft, Beta, LS, ILS1, ILS2, ILS) took. Both method sets
run through the same code (`--methods dis,cls,...,ils` is what `all` meant
before), on two data sets:

- the synthetic task (`--dataset synthetic`, its appendix grids);
- scikit-learn's iris as an `.npz` (150 x 4, 3 classes; 80/20 train/test,
  stratified, seed 0; the command carves its 20 % validation split), the
  paper's real-data grids.

Each run is one command in a fresh process, timed by wall clock from start
to exit (TensorFlow's import, the engine, the `model.fit`s, every row's
scores, diagrams and saved models). Rounds are interleaved and the order
alternates, so a slow spell on a shared machine hits both method sets; the
ratio is taken per round and summarised by its median. The engine's own
time (its "N models trained in S s" line) is reported beside. Needs
scikit-learn (in the test extra).

    python benchmarks/calibration_losses.py [--rounds 2] [--datasets synthetic,iris] [--keep DIR]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from _common import machine  # noqa: E402  (puts the repository first on sys.path)

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD_ALL = "dis,cls,bs_soft,beta,ls,ils1,ils2,ils"  # `--methods all` before the calibration losses


def iris_npz(path):
    import numpy as np
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    x, y = load_iris(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


def timed(argv):
    """`(seconds, (engine seconds, models) or None)` of `python -m keras_ils_cli ARGV`, a fresh process."""
    environment = dict(os.environ, PYTHONPATH=REPOSITORY, TF_CPP_MIN_LOG_LEVEL="3")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "keras_ils_cli", *argv], capture_output=True, text=True, env=environment
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"keras-ils {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    engine = re.search(r"(\d+) models trained in ([\d.]+) s", done.stdout + done.stderr)
    return seconds, (float(engine.group(2)), int(engine.group(1))) if engine else None


def cell(seconds, engine):
    """A table cell: wall seconds, and the engine's seconds and models when it ran."""
    return f"{seconds:.1f} ({engine[0]:.1f} s, {engine[1]})" if engine else f"{seconds:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--datasets", default="synthetic,iris")
    parser.add_argument("--keep", default=None, help="keep every run's output directory here (default: removed)")
    args = parser.parse_args()
    lines = [f"# {line}" for line in machine()]
    print("\n".join(lines), flush=True)
    table = [
        "| data | round | old all: s (engine s, models) | new all: s (engine s, models) | ratio |",
        "|---|---|---|---|---|",
    ]
    ratios = {}
    with tempfile.TemporaryDirectory() as temporary:
        work = args.keep or temporary
        datasets = {"synthetic": "synthetic"}
        if "iris" in args.datasets.split(","):
            datasets["iris"] = os.path.join(work, "iris.npz")
            iris_npz(datasets["iris"])
        for name in args.datasets.split(","):
            for round_ in range(args.rounds):
                order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
                result = {}
                for variant in order:
                    methods = OLD_ALL if variant == "old" else "all"
                    out = os.path.join(work, f"{name}_{variant}_{round_}")
                    argv = ["run", "--dataset", datasets[name], "--methods", methods, "--output-dir", out]
                    result[variant] = timed(argv)
                    print(f"{name} round {round_} {variant}: {result[variant]}", flush=True)
                ratio = result["new"][0] / result["old"][0]
                ratios.setdefault(name, []).append(ratio)

                table.append(f"| {name} | {round_} | {cell(*result['old'])} | {cell(*result['new'])} | {ratio:.2f}x |")
    print("\n".join(table))
    for name, values in ratios.items():
        print(f"{name}: median ratio {statistics.median(values):.2f}x over {len(values)} rounds")


if __name__ == "__main__":
    main()
