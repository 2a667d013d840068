"""The tuned main job end to end: the vectorised engine against KerasTuner, same data, same grids, same machine.

The data: scikit-learn's digits (1,797 examples, 64 features, 10 classes),
split 80/20 into train/test with a fixed seed and saved as `.npz`; the
command line carves its usual 20 % validation split from train (1,150 /
287 / 360). Both variants search LS, ILS1, ILS2 and ILS over the paper's
real-data grids (5 + 25 + 25 + 125 = 180 students, each also
temperature-scaled), select on validation NLL and print the table:

- `engine`: `keras-ils run --methods ls,ils1,ils2,ils` (the vectorised engine);
- `keras-tuner`: `keras-ils tune --methods ls,ils1,ils2,ils --engine keras-tuner`
  (one `model.fit` per trial, KerasTuner's grid).

Each is one command in a fresh process, timed by wall clock from start to
exit (TensorFlow import, teacher, cache, grid, selection, TempS, table), run
one after the other in one invocation: the engine, KerasTuner, the engine
again (the slower engine time is the one compared, so a load that rose
during the KerasTuner run does not flatter the engine). `--trials N` limits the KerasTuner
variant to N trials per method for a quick look (its students/second is then
measured on fewer students; the default runs the whole grid). Needs
scikit-learn (in the test extra).

    python benchmarks/main_job.py [--trials N] [--output benchmarks/main_job.md]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from _common import machine  # noqa: E402  (puts the repository first on sys.path)

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = "ls,ils1,ils2,ils"
STUDENTS = 5 + 25 + 25 + 125


def digits_npz(path):
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


def timed(argv):
    """`(seconds, stdout)` of `python -m keras_ils_cli ARGV` in a fresh process; fails loudly."""
    environment = dict(os.environ, PYTHONPATH=REPOSITORY)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "keras_ils_cli", *argv], capture_output=True, text=True, env=environment
    )
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"keras-ils {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=None, help="KerasTuner trials per method (default: all)")
    parser.add_argument("--output", default=None, help="also write the report (markdown) here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "digits.npz")
        digits_npz(data)
        common = ["--dataset", data, "--methods", METHODS, "--verbose", "0"]
        engine = ["run", *common]
        tuner = ["tune", *common, "--engine", "keras-tuner", "--search-space", "paper"]
        if args.trials:
            tuner += ["--algorithm", "random", "--max-trials", str(args.trials)]
        # engine, KerasTuner, engine again: the engine's two timings bracket the load the KerasTuner run saw
        engine_s, engine_out = timed([*engine, "--output-dir", os.path.join(work, "engine")])
        tuner_s, tuner_out = timed([*tuner, "--output-dir", os.path.join(work, "tuner")])
        engine_again_s, _ = timed([*engine, "--output-dir", os.path.join(work, "engine2")])
    # the students KerasTuner trained: the "NAME: N trials, best validation NLL ..." lines of `keras-ils tune`
    tuner_students = sum(
        int(line.split(": ")[1].split()[0]) for line in tuner_out.splitlines() if " trials, best" in line
    )
    engine_rate = STUDENTS / max(engine_s, engine_again_s)  # the slower of the two, against the KerasTuner run
    tuner_rate = tuner_students / tuner_s
    sampled = f", random search, {args.trials} trials per method" if args.trials else ""
    lines = [
        "| variant | students (+ TempS each) | wall time | students/s | ratio |",
        "|---|---|---|---|---|",
        f"| engine (`keras-ils run`), before / after | {STUDENTS} | {engine_s:.1f} s / {engine_again_s:.1f} s | "
        f"{engine_rate:.2f} | {engine_rate / tuner_rate:.0f}x |",
        f"| KerasTuner (`keras-ils tune --engine keras-tuner`{sampled}) | "
        f"{tuner_students} | {tuner_s:.1f} s | {tuner_rate:.3f} | 1x |",
        "",
        *machine(),
        "",
        "Engine table:",
        "```",
        *[line for line in engine_out.splitlines() if "━" not in line],
        "```",
        "KerasTuner table:",
        "```",
        *[line for line in tuner_out.splitlines() if "━" not in line],
        "```",
    ]
    report = "\n".join(lines)
    print(report)
    if args.output:
        with open(args.output, "w") as file:
            file.write(report + "\n")


if __name__ == "__main__":
    main()
