"""Does the cross-fitted teacher's ILS1 smoothing factor track true difficulty? (issue 13 item 5)

The findings are in docs/results/real-data.md.

On the paper's synthetic task the true class posterior is known
(`keras_ils.comparison.data.synthetic.bayes_logits`), so the Bayes-optimal
`p_t` of every training example is its true difficulty. Per seed, on the
task's 150 training examples (`datasets.load_synthetic(seed)`: 50 per class,
validation 50 per class), the script takes the calibrated teacher logits that
`keras_ils.comparison.engine.students.search_students(..., SearchSettings(methods=()))`
makes the targets from (only the teachers train; the package's MLP recipe, seed `seed`):

- (i) in-sample: the teacher trained on all 150 examples, `teacher_folds=1`
  (the paper's teacher);
- (ii) out of fold: `SearchSettings(teacher_folds=5)`, each example scored by the teacher that
  did not train on it, one temperature for the five;
- (iii) Bayes-optimal: `p_t` of the true posterior.

From each it computes ILS1's per-example smoothing factor
`eps_x = min(0.2, P2 (p_t - P1)^2)` (`keras_ils.targets.smoothing_factor`)
for the paper's synthetic ILS1 values (P1 0.8, P2 2.0) and for the
package's real-data fixed values (P1 0.9, P2 1.5), and reports, against
(iii), the Spearman and Pearson correlations and the mean absolute
difference of `eps_x` and of `p_t` itself: mean ± standard error over seeds,
and a paired exact two-sided sign test of (ii) against (i) (a win: higher
correlation, lower difference).

    nice -n 19 python scripts/crossfit_teacher.py --seeds 20 --output results/real_data_ils/crossfit_teacher.json

`--real-seeds N` adds, for scikit-learn's iris, wine and breast cancer (the
splits of scripts/real_data_ils.py: stratified 70/30, 20 % validation, seeds
0..N-1), where no true posterior is known, how confident each teacher is on
the training examples it reads `p_t` from, beside the full teacher's `p_t` on
the held-out validation examples: a teacher that memorised its training set
reads far higher `p_t` on it than on validation.

    nice -n 19 python scripts/crossfit_teacher.py --seeds 0 --real-seeds 10 \\
        --output results/real_data_ils/crossfit_teacher.json
"""

from __future__ import annotations

import argparse
import json
import os
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from keras_ils.comparison.data import datasets, synthetic  # noqa: E402
from keras_ils.comparison.engine import students  # noqa: E402
from keras_ils.targets import smoothing_factor  # noqa: E402
from keras_ils_experiments.synthetic_protocol.statistics import sign_test  # noqa: E402

PAIRS = ((0.8, 2.0), (0.9, 1.5))
TEACHERS = {"in-sample": 1, "5-fold out of fold": 5}
STATISTICS = ("spearman", "pearson", "mean_abs_diff")


def _arrays(dataset):
    x, y = dataset.batch(1 << 30).get_single_element()
    return x.numpy(), y.numpy()


def _true_class(probabilities, labels):
    return probabilities[np.arange(len(labels)), labels]


def _softmax(logits):
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _agreement(estimate, truth):
    """Spearman, Pearson, mean absolute difference; a correlation of a constant vector is NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        constant = np.ptp(estimate) == 0 or np.ptp(truth) == 0
        spearman = np.nan if constant else float(stats.spearmanr(estimate, truth).statistic)
        pearson = np.nan if constant else float(stats.pearsonr(estimate, truth).statistic)
    return dict(spearman=spearman, pearson=pearson, mean_abs_diff=float(np.mean(np.abs(estimate - truth))))


def _teachers_only(folds, seed):
    """The search's settings that train the teachers only: no student, `folds` teachers, the seed's weights."""
    return students.SearchSettings(methods=(), teacher_folds=folds, seed=seed)


def one_seed(seed):
    splits = datasets.load_synthetic(seed=seed, n_test=1)
    (x, y), (x_val, y_val) = _arrays(splits.train), _arrays(splits.validation)
    p_bayes = _true_class(synthetic.bayes_probabilities(x), y)
    quantities = {"p_t": {"Bayes-optimal": p_bayes}}
    for pair in PAIRS:
        quantities[f"eps_x (P1 {pair[0]}, P2 {pair[1]})"] = {
            "Bayes-optimal": np.asarray(smoothing_factor(p_bayes, *pair), np.float64)
        }
    teacher_info = {}
    for teacher, folds in TEACHERS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = students.search_students(x, y, x_val, y_val, _teachers_only(folds, seed))
        p_t = _true_class(_softmax(found.teacher_logits), y)
        quantities["p_t"][teacher] = p_t
        for pair in PAIRS:
            eps = np.asarray(smoothing_factor(p_t.astype(np.float32), *pair), np.float64)
            quantities[f"eps_x (P1 {pair[0]}, P2 {pair[1]})"][teacher] = eps
        fit = found.folds_fit or found.teacher_fit
        teacher_info[teacher] = dict(temperature=fit.temperature, status=fit.status, mean_p_t=float(p_t.mean()),
                                     share_p_t_above_099=float(np.mean(p_t > 0.99)), seconds=found.seconds)  # fmt: skip
    teacher_info["Bayes-optimal"] = dict(
        mean_p_t=float(p_bayes.mean()), share_p_t_above_099=float(np.mean(p_bayes > 0.99))
    )
    out = {"seed": seed, "teachers": teacher_info, "agreement": {}, "mean": {}}
    for quantity, values in quantities.items():
        out["agreement"][quantity] = {t: _agreement(values[t], values["Bayes-optimal"]) for t in TEACHERS}
        out["mean"][quantity] = {t: float(np.mean(v)) for t, v in values.items()}
    return out


def real_teachers(name, seed, directory):
    """`p_t` summaries of the in-sample and out-of-fold teachers on a scikit-learn set's training examples."""
    from sklearn import datasets as sklearn_datasets
    from sklearn.model_selection import train_test_split

    x, y = getattr(sklearn_datasets, f"load_{name}")(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=seed, stratify=y)
    path = os.path.join(directory, f"{name}-{seed}.npz")
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        splits = datasets.load(path, seed=seed)
    (x, y), (x_val, y_val) = _arrays(splits.train), _arrays(splits.validation)
    out = {"dataset": name, "seed": seed}
    for teacher, folds in TEACHERS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = students.search_students(x, y, x_val, y_val, _teachers_only(folds, seed))
        p_t = _true_class(_softmax(found.teacher_logits), y)
        eps = np.asarray(smoothing_factor(p_t.astype(np.float32), 0.9, 1.5), np.float64)
        out[teacher] = dict(mean_p_t=float(p_t.mean()), share_p_t_above_099=float(np.mean(p_t > 0.99)),
                            mean_eps=float(eps.mean()), std_eps=float(eps.std()))  # fmt: skip
        if folds == 1:
            val_logits = found.logits(x_val, 0) / found.teacher_fit.temperature
            p_val = _true_class(_softmax(val_logits), y_val)
            out["validation"] = dict(mean_p_t=float(p_val.mean()), share_p_t_above_099=float(np.mean(p_val > 0.99)))
    return out


def real_markdown(rows):
    lines = [f"{len(rows) // len(REAL_SETS)} seeds per set; the calibrated teachers' p_t (eps_x at P1 0.9, P2 1.5).",
             "", "| data set | p_t read from | mean p_t | share of p_t > 0.99 | mean eps_x "
                 "| s.d. of eps_x within a seed |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name in REAL_SETS:
        mine = [r for r in rows if r["dataset"] == name]
        for key, label in (("in-sample", "in-sample teacher, training examples"),
                           ("5-fold out of fold", "5-fold out of fold, training examples"),
                           ("validation", "full teacher, validation examples (held out)")):  # fmt: skip
            cells = [name, label, _mean_se([r[key]["mean_p_t"] for r in mine]),
                     _mean_se([r[key]["share_p_t_above_099"] for r in mine])]  # fmt: skip
            if key == "validation":
                cells += ["-", "-"]
            else:
                cells += [_mean_se([r[key]["mean_eps"] for r in mine]), _mean_se([r[key]["std_eps"] for r in mine])]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


REAL_SETS = ("iris", "wine", "breast_cancer")


def _mean_se(values):
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if not len(values):
        return "-"
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{values.mean():.3f} ± {se:.3f}"


def markdown(per_seed):
    n = len(per_seed)
    lines = [f"{n} seeds ({per_seed[0]['seed']}..{per_seed[-1]['seed']}); 150 training examples each.", ""]
    lines += ["| teacher | T* (median) | mean p_t on train | share of p_t > 0.99 |", "|---|---|---|---|"]
    for teacher in (*TEACHERS, "Bayes-optimal"):
        info = [s["teachers"][teacher] for s in per_seed]
        t = "-" if teacher == "Bayes-optimal" else f"{np.median([i['temperature'] for i in info]):.2f}"
        lines.append(f"| {teacher} | {t} | {_mean_se([i['mean_p_t'] for i in info])} | "
                     f"{_mean_se([i['share_p_t_above_099'] for i in info])} |")  # fmt: skip
    lines += ["", "Agreement with the Bayes-optimal value on the training examples (mean ± s.e. over seeds); "
              "5-fold vs in-sample: wins/losses of the out-of-fold teacher (higher correlation, lower difference), "
              "exact two-sided sign test.", "",
              "| quantity | statistic | in-sample | 5-fold out of fold | 5-fold vs in-sample |",
              "|---|---|---|---|---|"]  # fmt: skip
    for quantity in per_seed[0]["agreement"]:
        for statistic in STATISTICS:
            a = np.array([s["agreement"][quantity]["in-sample"][statistic] for s in per_seed])
            b = np.array([s["agreement"][quantity]["5-fold out of fold"][statistic] for s in per_seed])
            both = np.isfinite(a) & np.isfinite(b)
            better = (b > a) if statistic != "mean_abs_diff" else (b < a)
            worse = (b < a) if statistic != "mean_abs_diff" else (b > a)
            wins, losses = int((better & both).sum()), int((worse & both).sum())
            undefined = int((~both).sum())
            note = f" ({undefined} seeds undefined)" if undefined else ""
            lines.append(f"| {quantity} | {statistic.replace('_', ' ')} | {_mean_se(a)} | {_mean_se(b)} | "
                         f"{wins}/{losses}, p {sign_test(wins, losses):.2g}{note} |")  # fmt: skip
    lines += ["", "Means on the training examples (mean ± s.e. over seeds):", "",
              "| quantity | in-sample | 5-fold out of fold | Bayes-optimal |", "|---|---|---|---|"]  # fmt: skip
    for quantity in per_seed[0]["mean"]:
        cells = [_mean_se([s["mean"][quantity][t] for s in per_seed]) for t in (*TEACHERS, "Bayes-optimal")]
        lines.append(f"| {quantity} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--output", help="optional JSON file of the per-seed numbers (the table goes beside it, .md)")
    parser.add_argument("--real-seeds", type=int, default=0, help="also the scikit-learn sets' teachers, N seeds")
    args = parser.parse_args(argv)
    if args.real_seeds:
        import tempfile

        with tempfile.TemporaryDirectory() as directory:
            rows = [real_teachers(n, s, directory) for s in range(args.real_seeds) for n in REAL_SETS]
        table = real_markdown(rows)
        print(table)
        if args.output:
            with open(os.path.splitext(args.output)[0] + "_real.json", "w") as file:
                json.dump(rows, file, indent=1)
            with open(os.path.splitext(args.output)[0] + "_real.md", "w") as file:
                file.write(table + "\n")
    if not args.seeds:
        return None
    per_seed = []
    for seed in range(args.seeds):
        per_seed.append(one_seed(seed))
        print(f"seed {seed}: done", flush=True)
    table = markdown(per_seed)
    print(table)
    if args.output:
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
        with open(args.output, "w") as file:
            json.dump(per_seed, file, indent=1)
        with open(os.path.splitext(args.output)[0] + ".md", "w") as file:
            file.write(table + "\n")
    return per_seed


if __name__ == "__main__":
    main()
