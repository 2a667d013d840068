"""`keras_ils.compare` on the five sets of the calibration comparison: every method, a few calibrators, prediction
sets at alpha = 0.1; each set's paired verdict, set sizes and AURC, gathered into one Markdown report.

Run:  python scripts/held_out_verdicts.py --seeds 3 --output results/held_out_verdicts
      python scripts/held_out_verdicts.py --report-only --output results/held_out_verdicts

Each data set's comparison lands in OUTPUT/<set>/ (summary.json, verdict.json, verdict.md, comparison.png,
seed<k>/ with results.json, results.csv, test_nll.npz, test_set_sizes.npz; the trained models and the per-row
figures are not kept: see --keep-models); OUTPUT/report.md gathers the verdicts and, per set, every row's mean test
NLL, AURC and LAC/APS set size and coverage.
"""

import argparse
import json
import os
import shutil
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


SETS = ("iris", "wine", "breast_cancer", "digits", "synthetic")
CALIBRATORS = ("temperature", "dirichlet", "isotonic")
ALPHA = 0.1


def _data(name):
    if name == "synthetic":
        return dict(x="synthetic")
    from sklearn import datasets

    x, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    return dict(x=x, y=y)


def run(name, seeds, output, keep_models):
    import keras_ils

    directory = os.path.join(output, name)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small validation sets warn on every row; the report says what ran
        found = keras_ils.compare(
            **_data(name), methods="all", calibrators=CALIBRATORS, seeds=seeds, conformal=ALPHA,
            output_dir=directory, log=None,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    if not keep_models:  # the models and per-row figures stay out of the repository: tables, verdicts and arrays stay
        for root, _, files in os.walk(directory):
            for file in files:
                seed_figure = file == "comparison.png" and os.path.basename(root).startswith("seed")
                if file.endswith(".keras") or file.startswith("reliability_") or seed_figure:
                    os.remove(os.path.join(root, file))
        shutil.rmtree(os.path.join(directory, "search"), ignore_errors=True)
    with open(os.path.join(directory, "seconds.json"), "w") as file:
        json.dump({"seconds": seconds, "seeds": seeds}, file)
    return found


def set_size_lines(comparison, method="lac"):
    """The training methods ranked by their test set size at 1 - ALPHA against No LS + TempS's, paired per example
    (`Comparison.set_size_verdict`), Holm-corrected."""
    found = comparison.set_size_verdict(method)
    rows = found["families"]["training methods"]["rows"]
    lines = [f"{method.upper()} set size at {1 - ALPHA:.0%} coverage, training methods against "
             f"{found['reference']} ({found['reference_nll']:.3f}), paired per example, Holm over "
             f"{len(rows)} rows:", ""]  # fmt: skip
    lines += ["| row | mean set size | vs reference | 95% CI | Holm p |", "|---" * 5 + "|"]
    for row, r in rows.items():
        low, high = r["interval"]
        lines.append(f"| {row} | {r['nll']:.3f} | {r['difference']:+.3f} | [{low:+.3f}, {high:+.3f}] | "
                     f"{r['holm_pvalue']:.2g} |")  # fmt: skip
    return lines + [""]


def _comparison(directory):
    """The `Comparison` of a finished run read back from its directory (its runs' results.json and verdict)."""
    from keras_ils.comparison import Comparison

    seeds = sorted((d for d in os.listdir(directory) if d.startswith("seed")), key=lambda d: int(d[4:])) or ["."]
    runs = tuple(json.load(open(os.path.join(directory, s, "results.json"))) for s in seeds)
    return Comparison(runs, None, json.load(open(os.path.join(directory, "verdict.json"))), directory)


def report(output):
    lines = ["# keras_ils.compare on five data sets", ""]
    for name in SETS:
        directory = os.path.join(output, name)
        if not os.path.exists(os.path.join(directory, "verdict.json")):
            continue
        verdict = json.load(open(os.path.join(directory, "verdict.json")))
        seconds = json.load(open(os.path.join(directory, "seconds.json")))
        lines += [f"## {name}", "", f"{seconds['seeds']} seeds, {seconds['seconds']:.0f} s. {verdict['sentence']}", ""]
        lines += ["| row | test NLL | AURC | LAC size | LAC coverage | APS size | APS coverage |", "|---" * 7 + "|"]
        comparison = _comparison(directory)
        for row, v in comparison.table.sort_values("nll", kind="stable").iterrows():
            lines.append(
                f"| {row} | {v['nll']:.4f} | {v['aurc']:.4f} | {v['lac_mean_set_size']:.3f} | "
                f"{v['lac_coverage']:.3f} | {v['aps_mean_set_size']:.3f} | {v['aps_coverage']:.3f} |"
            )
        try:
            lines += ["", *set_size_lines(comparison)]
        except (OSError, ValueError):  # the synthetic task's per-example arrays (60 MB) are not committed
            lines += ["", "(The per-example set sizes were not kept for this set: no paired set-size ranking.)", ""]
    with open(os.path.join(output, "report.md"), "w") as file:
        file.write("\n".join(lines))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--output", default="results/held_out_verdicts")
    parser.add_argument("--keep-models", action="store_true")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.report_only:
        for name in args.sets.split(","):
            found = run(name, args.seeds, args.output, args.keep_models)
            print(f"{name}: {found.verdict.get('sentence', found.verdict.get('error'))}", flush=True)
    print(report(args.output))


if __name__ == "__main__":
    main()
