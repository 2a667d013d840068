"""`keras_ils.compare` on digits with the package MLP against `keras-ils run --dataset digits.npz` of an earlier tree.

Issue 30 asks that `compare` be no slower than the command was before it became a shell over `compare`. Each round
runs both, in turn, as fresh processes (the same interpreter, the same data: scikit-learn's digits, 1,437 training
and 360 test examples in a `.npz`), and the ratio of their wall times is the figure to read; rounds alternate which
goes first. By default `compare` reads the same `.npz` (`compare("digits.npz")`), so both train on the same split
and the ratio measures the code; `--arrays` passes the arrays instead (`compare(x, y)`, its own 80/20 test split:
other examples train, so early stopping ends at other epochs and the ratio also measures the data).

Run:  git worktree add /tmp/before <commit> && python benchmarks/compare_vs_run.py --before /tmp/before --rounds 3
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import _common
import numpy as np

COMPARE = """
import sys, warnings
warnings.simplefilter("ignore")
import numpy as np, keras_ils
data = np.load(sys.argv[1])
x = np.concatenate([data["x_train"], data["x_test"]]); y = np.concatenate([data["y_train"], data["y_test"]])
inputs = (x, y) if sys.argv[5] == "arrays" else (sys.argv[1],)
keras_ils.compare(*inputs, methods=sys.argv[3].split(","), tune=sys.argv[4] == "tune", output_dir=sys.argv[2], log=None)
"""


def _digits_npz(directory) -> str:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order].astype(np.float32), y[order]
    path = os.path.join(directory, "digits.npz")
    np.savez(path, x_train=x[:1437], y_train=y[:1437], x_test=x[1437:], y_test=y[1437:])
    return path


def _timed(command, env) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a checkout of the earlier tree (git worktree add)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", default="ls,ils1,ils2,ils")
    parser.add_argument("--no-tune", action="store_true")
    parser.add_argument("--arrays", action="store_true", help="compare(x, y) with its own test split")
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = tempfile.mkdtemp(prefix="compare_vs_run_")
    npz = _digits_npz(work)
    tune = [] if not args.no_tune else ["--no-tune"]
    run = [sys.executable, "-m", "keras_ils_cli", "run", "--dataset", npz, "--methods", args.methods, *tune]
    compare = [sys.executable, "-c", COMPARE, npz, os.path.join(work, "c"), args.methods,
               "fixed" if args.no_tune else "tune", "arrays" if args.arrays else "npz"]  # fmt: skip
    env = lambda tree: {**os.environ, "PYTHONPATH": tree, "TF_CPP_MIN_LOG_LEVEL": "3"}  # noqa: E731
    ratios = []
    for round_ in range(args.rounds):
        before_command = [*run, "--output-dir", os.path.join(work, f"r{round_}")]
        if round_ % 2 == 0:
            seconds_before, seconds_after = _timed(before_command, env(args.before)), _timed(compare, env(here))
        else:
            seconds_after, seconds_before = _timed(compare, env(here)), _timed(before_command, env(args.before))
        ratios.append(seconds_after / seconds_before)
        print(f"round {round_}: run (before) {seconds_before:.1f} s, compare {seconds_after:.1f} s", flush=True)
    _common.print_header("compare against the command before it (benchmarks/compare_vs_run.py)")
    print(f"compare / run (before), median of {args.rounds}: {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
