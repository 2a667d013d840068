"""Post-hoc calibration at deep-network scale: every calibrator and every numpy score, with baselines side by side.

    python benchmarks/calibration_scale.py                                # the full table (minutes on 2 cores)
    python benchmarks/calibration_scale.py --sizes 5000x10 --rounds 1    # a short run
    python benchmarks/calibration_scale.py --methods temperature --no-scores --sizes 50000x1000

Data: synthetic over-confident logits. Labels are uniform over `K` classes;
the features `x = e_y * 2 + N(0, I)` make `2 x` the true log-posterior (up to
a constant), so `2 x` are calibrated logits; the benchmark fits on `6 x`,
three times over-confident (`T* = 3`), in float32 as a network gives them.

Sections:

- every calibrator of `keras_ils.calibration.METHODS` through
  `fit_calibrator`, and every numpy score (`keras_ils.evaluation.scores` and
  the score functions) on the softmax of the same logits, at each size;
- baselines run in the same process, on the same arrays, their calls
  interleaved with the package's (`_common.interleaved`): scipy temperature
  scaling (`minimize_scalar` on log T over `scipy.special.logsumexp`, Brent
  from its default bracket), scikit-learn's
  `CalibratedClassifierCV(method="temperature")` (on a frozen estimator
  whose decision function is the logits), and scikit-learn's
  `IsotonicRegression` fitted per class (one-vs-rest, as `"isotonic"`);
- the temperature fit's cost at four sizes (`--linear`, 6.25 to 50 million
  logits, `N` and `K` both varied): seconds per million logits at each, flat
  when the cost is linear in `N K`;
- with `--old-solver REV`, the temperature fit by the solver module of git
  revision `REV` (`keras_ils/calibration/_temperature_solver.py` as
  `git show` gives it, put in place of today's for its calls), interleaved
  with today's and the baselines: old and new side by side in one process;
- a device section on an accelerator (or with `--device`): the fits on the
  Keras backend's own device (temperature and ensemble temperature scaling,
  vector scaling and Dirichlet calibration at `--device-sizes`), with their
  iterations (temperature: full passes). Under JAX or torch nothing here
  imports TensorFlow but `--old-solver` (the old passes were TensorFlow).

Timings are medians over `--rounds` (after one warm-up round that traces and
compiles the passes); ratios are per round, then their median.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import subprocess
import tempfile
import types
import warnings
from unittest import mock

import _common
import numpy as np


def logits_and_labels(n: int, k: int, seed: int = 0):
    """`(6 x as float32 [n, k], labels [n])`: three times over-confident logits (see the module docstring)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    x = rng.standard_normal((n, k), dtype=np.float32)
    x[np.arange(n), labels] += 2.0
    return 6.0 * x, labels


def scipy_temperature(logits, labels):
    """The baseline: `minimize_scalar` on `log T` of the mean NLL written with `logsumexp`, as a user would."""
    from scipy.optimize import minimize_scalar
    from scipy.special import logsumexp

    true = logits[np.arange(len(labels)), labels]

    def nll(log_t):
        t = np.exp(log_t)
        return float(np.mean(logsumexp(logits / t, axis=1) - true / t))

    return float(np.exp(minimize_scalar(nll).x))


def sklearn_temperature(logits, labels):
    """scikit-learn's `CalibratedClassifierCV(method="temperature")` on a frozen classifier returning `logits`."""
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Logits(ClassifierMixin, BaseEstimator):
        def fit(self, x, y):
            self.classes_ = np.arange(x.shape[1])
            return self

        def decision_function(self, x):
            return x

        def predict(self, x):
            return x.argmax(axis=1)

    frozen = FrozenEstimator(Logits().fit(logits, labels))
    calibrated = CalibratedClassifierCV(frozen, method="temperature").fit(logits, labels)
    return float(1.0 / calibrated.calibrated_classifiers_[0].calibrators[0].beta_)


def sklearn_has_temperature() -> bool:
    import inspect

    from sklearn import calibration

    return "temperature" in inspect.getsource(calibration.CalibratedClassifierCV)


def sklearn_isotonic(probabilities, labels):
    """scikit-learn's `IsotonicRegression` per class, one-vs-rest on each class's probability."""
    from sklearn.isotonic import IsotonicRegression

    for j in range(probabilities.shape[1]):
        IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(probabilities[:, j], labels == j)


def _softmax(logits):
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _fit(method, solver=None):
    """`fit_calibrator(method, ...)`'s report, warnings silenced; with `solver`, the temperature fits use that
    solver module in place of today's."""
    from keras_ils.calibration import fit_calibrator, temperature

    def run(logits, labels):
        with warnings.catch_warnings(), mock.patch.object(temperature, "solver", solver or temperature.solver):
            warnings.simplefilter("ignore")
            return fit_calibrator(method, logits, labels, return_fit=True)[1]

    return run


def old_solver(revision: str) -> types.ModuleType:
    """`keras_ils/calibration/_temperature_solver.py` at git `revision`, as a module of its own (from a temporary
    file, so that TensorFlow's AutoGraph reads its source)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = "keras_ils/calibration/_temperature_solver.py"
    source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=root, capture_output=True, text=True,
                            check=True).stdout  # fmt: skip
    folder = tempfile.mkdtemp(prefix="old_solver_")
    file = os.path.join(folder, "_temperature_solver_old.py")
    with open(file, "w") as stream:
        stream.write(source)
    spec = importlib.util.spec_from_file_location(f"_temperature_solver_at_{revision}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _score_calls(probabilities, labels):
    from keras_ils import evaluation

    names = ("adaptive_ece", "brier_decomposition", "debiased_calibration_error", "ks_calibration_error", "smooth_ece",
             "top_label_bins")  # fmt: skip
    calls = {f"score: {name}": functools.partial(getattr(evaluation, name), probabilities, labels) for name in names}
    calls["score: scores (all)"] = functools.partial(evaluation.scores, probabilities, labels, from_logits=False)
    return calls


def size_rows(n, k, methods, baselines, scores, rounds, old=None):
    """The table's rows at one size: `[size, what, median seconds, a baseline's seconds / the package's, note]`.

    `old` is `(revision, solver module)`: the temperature fit by that solver, beside today's.
    """
    logits, labels = logits_and_labels(n, k)
    fits = {method: _fit(method) for method in methods}
    compared = ["temperature"] if "temperature" in methods else []
    if old and "temperature" in methods:
        fits[f"temperature (solver at {old[0]})"] = _fit("temperature", old[1])
        compared.append(f"temperature (solver at {old[0]})")
    reports = {}
    calls = {m: (lambda m=m: reports.__setitem__(m, fits[m](logits, labels))) for m in fits}
    pairs = {}  # baseline call -> the package's calls it is compared with
    if old and "temperature" in methods:
        pairs[compared[1]] = compared[:1]
    if baselines and compared:
        calls["baseline: scipy temperature"] = lambda: scipy_temperature(logits, labels)
        pairs["baseline: scipy temperature"] = compared
        if sklearn_has_temperature():
            name = "baseline: sklearn CalibratedClassifierCV(temperature)"
            calls[name], pairs[name] = (lambda: sklearn_temperature(logits, labels)), compared
    probabilities = _softmax(logits) if (scores or (baselines and "isotonic" in methods)) else None
    if baselines and "isotonic" in methods:
        calls["baseline: sklearn IsotonicRegression per class"] = lambda: sklearn_isotonic(probabilities, labels)
        pairs["baseline: sklearn IsotonicRegression per class"] = ["isotonic"]
    if scores:
        calls.update(_score_calls(probabilities, labels))
    times = _common.interleaved(calls, rounds=rounds, warmup=1)
    rows = []
    for name, seconds in times.items():
        ratios = []
        for package in pairs.get(name, []):
            median, low, high = _common.paired_ratio(times, name, package)
            ratios.append(f"{median:.2f} ({low:.2f}-{high:.2f}) x `{package}`")
        report = reports.get(name)
        note = f"{report.status}" + (f", T = {report.temperature:.4f}" if report.temperature else "") if report else ""
        rows.append([f"{n} x {k}", name, f"{np.median(seconds):.3f}", "; ".join(ratios), note])
    return rows


def linearity_rows(sizes, rounds):
    """The temperature fit at each size: median seconds and seconds per million logits."""
    fit = _fit("temperature")
    rows = []
    for n, k in sizes:
        logits, labels = logits_and_labels(n, k)
        seconds = np.median(_common.interleaved({"t": functools.partial(fit, logits, labels)}, rounds=rounds)["t"])
        rows.append([f"{n} x {k}", f"{n * k / 1e6:g}", f"{seconds:.3f}", f"{seconds / (n * k / 1e6):.4f}"])
    return rows


DEVICE_METHODS = ("temperature", "ensemble_temperature", "vector", "dirichlet")


def device_rows(n, k, methods, rounds, warmup=1):
    """The fits on the Keras backend's device at one size: median seconds (the whole call: the input checks, the
    copy to the device, the warm start), the report's iterations (temperature: full passes), status."""
    logits, labels = logits_and_labels(n, k)
    reports = {}
    calls = {m: (lambda m=m: reports.__setitem__(m, _fit(m)(logits, labels))) for m in methods}
    times = _common.interleaved(calls, rounds=rounds, warmup=warmup)
    rows = []
    for method in methods:
        report = reports[method]
        rows.append([f"{n} x {k}", method, f"{np.median(times[method]):.3f}", report.iterations, report.status])
    return rows


def _sizes(text):
    return [tuple(int(v) for v in size.lower().split("x")) for size in text]


def main(argv=None):
    from keras_ils.calibration import METHODS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["5000x10", "5000x100", "50000x1000"], help="N x K")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up round")
    parser.add_argument("--no-scores", dest="scores", action="store_false", help="skip the numpy scores")
    parser.add_argument("--no-baselines", dest="baselines", action="store_false", help="skip scipy and scikit-learn")
    parser.add_argument("--linear", nargs="*", default=["6250x1000", "25000x500", "50000x500", "50000x1000"],
                        help="the temperature fit's sizes for the linearity check (none: skip it)")  # fmt: skip
    parser.add_argument("--old-solver", metavar="REV", help="also time the temperature solver of git revision REV")
    parser.add_argument("--device", action="store_true", help="the device section without an accelerator too")
    parser.add_argument("--device-only", action="store_true", help="only the device section")
    parser.add_argument("--device-sizes", nargs="+", default=["50000x1000"], help="N x K of the device section")
    parser.add_argument("--device-methods", nargs="+", default=list(DEVICE_METHODS), choices=METHODS)
    parser.add_argument("--device-warmup", type=int, default=1, help="untimed rounds first (0: the compilation timed)")
    args = parser.parse_args(argv)
    _common.print_header("Post-hoc calibration at scale (benchmarks/calibration_scale.py)")
    if not args.device_only:
        _tables(args)
    accelerators = _common.accelerators()
    if accelerators or args.device or args.device_only:
        where = ", ".join(accelerators) if accelerators else "the CPU (no accelerator)"
        print(f"\nThe fits on the Keras backend's device ({where}), medians of {args.rounds} rounds after "
              f"{args.device_warmup} untimed:\n")  # fmt: skip
        headers = ["N x K", "method", "seconds", "iterations (temperature: full passes)", "status"]
        rows = [
            row for n, k in _sizes(args.device_sizes) for row in device_rows(n, k, args.device_methods, args.rounds)
        ]
        print(_common.table(headers, rows))


def _tables(args):
    """The main table and the linearity check."""
    if args.baselines and not sklearn_has_temperature():
        print("(this scikit-learn has no CalibratedClassifierCV(method='temperature'): that baseline is skipped)\n")
    old = (args.old_solver, old_solver(args.old_solver)) if args.old_solver else None
    rows = []
    for n, k in _sizes(args.sizes):
        rows += size_rows(n, k, args.methods, args.baselines, args.scores, args.rounds, old)
    headers = ["N x K", "fit or score", "seconds (median)", "baseline's time / package's (IQR)", "report"]
    print(_common.table(headers, rows))
    if args.linear:
        print("\nTemperature scaling's cost against N K (linear: seconds per million logits flat):\n")
        headers = ["N x K", "million logits", "seconds", "seconds per million"]
        print(_common.table(headers, linearity_rows(_sizes(args.linear), args.rounds)))


if __name__ == "__main__":
    main()
