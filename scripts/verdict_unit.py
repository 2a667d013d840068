"""The verdict's unit (issue 38): digits with a fixed test split, the calls before and after, and an A/A test.

Run:  python scripts/verdict_unit.py --run --output results/verdict_unit      (about 1 h on 2 shared CPU cores)
      python scripts/verdict_unit.py --output results/verdict_unit            (the report from the stored arrays)

1. The data: scikit-learn's digits (1,797 images of 8 x 8), split once into a training part and a fixed test
   part of 540 images (30 %, stratified, `train_test_split(random_state=0)`), saved as a `.npz`: every seed of
   `compare` keeps that test split and carves its own validation split from the training part.
2. `compare` on it with the default methods (LS, ILS1, ILS2, ILS, each tuned over its grid) and isotonic
   regression beside temperature scaling, 10 seeds (0-9). The verdicts of the first 3 and of all 10 seeds are
   drawn from the stored per-example test NLL, before (the verdict at commit cd82f02: differences pooled over the
   seeds, the SE blocked by seed on N - S degrees of freedom) and after (`reporting.verdict`).
3. The A/A test: `compare(methods=["ls"], tune=False)` on the same `.npz`, 40 more seeds (100-139). One replicate
   of an A/A test at S seeds draws 2 S of the 40 runs without replacement; the row is the first S runs' No LS +
   TempS, the reference the other S runs' (seed k of the row paired with seed k of the reference: the same test
   examples, other networks); the same for LS + TempS. Both rows are one method under other seeds: every call of
   "significant" is a false positive. 2,000 replicates per S; they reuse the 40 runs, so they are not independent
   (at S = 10 each replicate uses half of them): the rate's Monte Carlo error is larger than a binomial one.
4. The same before/after on the committed `results/held_out_verdicts` arrays (arrays given to `compare`: each
   seed draws its own test split, so `shared_examples=False`).

The report (OUTPUT/report.md and OUTPUT/report.json) is what docs/results/verdict-unit.md shows.
"""

import argparse
import json
import os
import shutil
import warnings

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MAIN_SEEDS, AA_SEEDS = list(range(10)), list(range(100, 140))
CALIBRATORS = ("temperature", "isotonic")
REPLICATES = 2000
HELD_OUT = ("iris", "wine", "breast_cancer", "digits")


def make_data(path):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, stratify=y, random_state=0)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


def run(output):
    import keras_ils

    os.makedirs(output, exist_ok=True)
    data = os.path.join(output, "digits_fixed.npz")
    make_data(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small validation splits warn on every row
        keras_ils.compare(data, calibrators=CALIBRATORS, seeds=MAIN_SEEDS, output_dir=f"{output}/main", log=print)
        keras_ils.compare(data, methods=["ls"], tune=False, seeds=AA_SEEDS, output_dir=f"{output}/aa", log=print)
    for root, _, files in os.walk(output):  # keep the tables and arrays, not the models and figures
        for file in files:
            if file.endswith((".keras", ".png")):
                os.remove(os.path.join(root, file))
    for part in ("main", "aa"):
        shutil.rmtree(os.path.join(output, part, "search"), ignore_errors=True)
    for name in ("verdict.json", "verdict.md"):  # the A/A runs' own verdict (LS against No LS + TempS) is not used
        os.remove(os.path.join(output, "aa", name))


def before(example_nll, reference, groups, alpha=0.05):
    """The verdict at cd82f02: `{row: (difference, p, Holm p, significant)}`, pooled over seeds, SE blocked by seed."""
    from scipy import stats

    from keras_ils.comparison.reporting.difference import SAME, holm

    found = {}
    for rows in groups.values():
        raw = {}
        for row in rows:
            pairs = list(zip(example_nll[row], example_nll[reference], strict=True))
            d = [r - f for r, f in pairs]
            if all(np.allclose(r, f, rtol=SAME, atol=SAME) for r, f in pairs):
                d = [np.zeros_like(x) for x in d]
            total = sum(len(x) for x in d)
            mean = float(np.concatenate(d).mean())
            se = np.sqrt(sum(len(x) * x.var(ddof=1) for x in d)) / total
            raw[row] = (mean, 2 * stats.t.sf(abs(mean / se), total - len(d)) if se > 0 else float(mean == 0))
        adjusted = holm([p for _, p in raw.values()])
        for (row, (mean, p)), q in zip(raw.items(), adjusted, strict=True):
            found[row] = (mean, p, float(q), bool(q <= alpha))
    return found


def _choice(calls, nll):
    better = [row for row, (mean, _, _, significant) in calls.items() if significant and mean < 0]
    return min(better, key=lambda row: np.mean(nll[row])) if better else "No LS + TempS"


def _calls(example_nll, shared):
    """Before and after on one set of seeds: each row's call, and the choice."""
    from keras_ils.comparison.main_job.config import CALIBRATORS as NAMES
    from keras_ils.comparison.reporting import verdict

    groups = verdict.verdict_groups(list(example_nll), tuple(NAMES.values()))
    old = before(example_nll, verdict.REFERENCE, groups)
    new = verdict.paired_verdict(example_nll, verdict.REFERENCE, groups, shared_examples=shared)
    rows = {}
    for family, entry in new["families"].items():
        for row, r in entry["rows"].items():
            rows[row] = dict(
                family=family,
                difference=r["difference"],
                before_holm_p=old[row][2],
                before=old[row][3],
                after_interval=r["adjusted_interval"],
                after_holm_p=r["holm_pvalue"],
                after=r["significant"],
                seeds=r["seed_differences"],
                training_share=r["training_share"],
                seeds_to_halve=r["seeds_to_halve"],
            )
    return dict(
        rows=rows,
        before_choice=_choice(old, example_nll),
        after_choice=new["choice"],
        sentence=new["sentence"],
        advice=new["advice"],
        shared_examples=new["shared_examples"],
    )


def _subset(example_nll, seeds):
    return {row: [arrays[i] for i in seeds] for row, arrays in example_nll.items()}


def verified_shared(npz, seeds):
    """Whether the `.npz` gives every seed the same test examples: its splits loaded as `compare` loads them, seed by
    seed, compared by `reporting.examples` (the A/A runs were made before `test_nll.npz` held the fingerprint)."""
    from keras_ils.comparison.data import datasets
    from keras_ils.comparison.reporting import examples

    prints = [examples.fingerprint(datasets.load(npz, seed=seed).test.batch(4096).as_numpy_iterator) for seed in seeds]
    return examples.shared_examples(prints, seeds)


def aa_rates(example_nll, shared, seeds_counts=(2, 3, 5, 10), replicates=REPLICATES):
    """`{row: {S: {"before", "after"}}}`: the share of A/A replicates called significant at 5 %."""
    from keras_ils.comparison.reporting import verdict

    rng = np.random.default_rng(0)
    runs = len(next(iter(example_nll.values())))
    rates = {}
    for row in ("No LS + TempS", "LS + TempS"):
        rates[row] = {}
        for seeds in seeds_counts:
            called = {"before": 0, "after": 0}
            for _ in range(replicates):
                drawn = rng.permutation(runs)[: 2 * seeds]
                nll = {
                    "B": [example_nll[row][i] for i in drawn[seeds:]],
                    "A": [example_nll[row][i] for i in drawn[:seeds]],
                }
                called["before"] += before(nll, "B", {"f": ["A"]})["A"][3]
                found = verdict.paired_verdict(nll, "B", {"f": ["A"]}, shared_examples=shared)
                called["after"] += found["families"]["f"]["rows"]["A"]["significant"]
            rates[row][seeds] = {k: v / replicates for k, v in called.items()}
    return rates


def simulate(replicates=2000, n=540):
    """The false-positive rate at 5 % of the package's test (Student t on S - 1 df) and of Satterthwaite's degrees
    of freedom for the same variance, on draws of the crossed model d_si = a_s + b_i + e_si with one shared test
    split of `n` examples, heavy-tailed example terms (t with 3 df) and no difference in expectation."""
    from scipy import stats

    from keras_ils.comparison.reporting.difference import row_difference

    rng = np.random.default_rng(0)
    found = []
    for seeds in (2, 3, 5, 10):
        for seed_sd in (0.0, 0.005, 0.02):
            called = {"t on S - 1": 0, "Satterthwaite": 0}
            for _ in range(replicates):
                example = rng.standard_t(3, n) * 0.1 / np.sqrt(3)
                d = rng.normal(0, seed_sd, (seeds, 1)) + example + rng.standard_t(3, (seeds, n)) * 0.1 / np.sqrt(3)
                found_row = row_difference(list(d), [np.zeros(n)] * seeds, shared=True, confidence=0.95)
                called["t on S - 1"] += found_row["pvalue"] <= 0.05
                seed_part = d.mean(axis=1).var(ddof=1) / seeds
                example_part = found_row["standard_error"] ** 2 - seed_part
                df = (seed_part + example_part) ** 2 / (seed_part**2 / (seeds - 1) + example_part**2 / (n - 1))
                called["Satterthwaite"] += 2 * stats.t.sf(abs(d.mean()) / found_row["standard_error"], df) <= 0.05
            share = seed_sd**2 / seeds / (seed_sd**2 / seeds + 0.01 / n + 0.01 / (seeds * n))  # t(3) / sqrt(3): var 1
            found.append(dict(seeds=seeds, seed_sd=seed_sd, training_share=share,
                              **{k: v / replicates for k, v in called.items()}))  # fmt: skip
    return found


def held_out(directory):
    from keras_ils.comparison.reporting import verdict

    found = {}
    for name in HELD_OUT:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            found[name] = _calls(verdict.read_example_nll(path), shared=False)
    return found


def report(output, held_out_directory):
    from keras_ils.comparison.reporting import verdict

    main = verdict.read_example_nll(f"{output}/main")
    shared = verdict.read_shared_examples(f"{output}/main")
    found = {"main_shared_examples": shared, "digits": {}}
    for seeds in (1, 3, 10):
        found["digits"][seeds] = _calls(_subset(main, range(seeds)), shared)
    aa = verdict.read_example_nll(f"{output}/aa")
    data = os.path.join(output, "digits_fixed.npz")
    if not os.path.exists(data):  # not committed: the same split again, from scikit-learn's digits
        make_data(data)
    found["aa_shared_examples"] = verified_shared(data, AA_SEEDS[:3])
    found["aa"] = aa_rates(aa, found["aa_shared_examples"])
    found["held_out"] = held_out(held_out_directory)
    found["simulation"] = simulate()
    with open(os.path.join(output, "report.json"), "w") as file:
        json.dump(found, file, indent=1)
    text = markdown(found)
    with open(os.path.join(output, "report.md"), "w") as file:
        file.write(text)
    return text


def _table(calls):
    lines = ["| row | family | difference | before: Holm p | after: Holm p | after: 95% CI (Holm) | per seed |"]
    lines.append("|---|---|---:|---:|---:|---:|---|")
    for row, r in sorted(calls["rows"].items(), key=lambda item: item[1]["difference"]):
        mark = lambda p, call: f"**{p:.2g}**" if call else f"{p:.2g}"  # noqa: E731
        low, high = r["after_interval"]
        seeds = " ".join(f"{d:+.3f}" for d in r["seeds"])
        lines.append(
            f"| {row} | {r['family']} | {r['difference']:+.4f} | {mark(r['before_holm_p'], r['before'])} | "
            f"{mark(r['after_holm_p'], r['after'])} | [{low:+.3f}, {high:+.3f}] | {seeds} |"
        )
    return lines


def markdown(found):
    lines = ["# The verdict's unit: digits with a fixed test split", ""]
    lines += [f"The 10 main runs share their test examples (fingerprints): {found['main_shared_examples']}.", ""]
    for seeds, calls in found["digits"].items():
        significant = {k: sum(r[k] for r in calls["rows"].values()) for k in ("before", "after")}
        lines += [f"## {seeds} seed{'s' if seeds > 1 else ''}", ""]
        counts = f"before {significant['before']}, after {significant['after']} of {len(calls['rows'])}"
        lines += [f"Significant rows (Holm, 5 %): {counts}. Choice before: {calls['before_choice']}; after: "
                  f"{calls['after_choice']}.", ""]  # fmt: skip
        lines += [f"After: {calls['sentence']}", "", f"{calls['advice']}", ""]
        lines += [*_table(calls), ""]
    lines += ["## A/A: one method under other seeds (false-positive rate at 5 %)", ""]
    lines += [f"The A/A runs share their test examples (their splits reloaded and fingerprinted): "
              f"{found['aa_shared_examples']}.", ""]  # fmt: skip
    lines += ["| row | seeds | before | after |", "|---|---:|---:|---:|"]
    for row, by_seeds in found["aa"].items():
        for seeds, rate in by_seeds.items():
            lines.append(f"| {row} | {seeds} | {rate['before']:.3f} | {rate['after']:.3f} |")
    lines += ["", "## Simulation: the test's false-positive rate at 5 % against Satterthwaite's", ""]
    lines += ["| seeds | seed sd | training share | t on S - 1 | Satterthwaite |", "|---:|---:|---:|---:|---:|"]
    for r in found["simulation"]:
        lines.append(f"| {r['seeds']} | {r['seed_sd']:g} | {r['training_share']:.2f} | {r['t on S - 1']:.3f} | "
                     f"{r['Satterthwaite']:.3f} |")  # fmt: skip
    lines += ["", "## The held-out verdicts' arrays (each seed its own test split), 3 seeds", ""]
    lines += ["| set | significant before | after | choice before | choice after |", "|---|---:|---:|---|---|"]
    for name, calls in found["held_out"].items():
        significant = {k: sum(r[k] for r in calls["rows"].values()) for k in ("before", "after")}
        lines.append(f"| {name} | {significant['before']} of {len(calls['rows'])} | {significant['after']} | "
                     f"{calls['before_choice']} | {calls['after_choice']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/verdict_unit")
    parser.add_argument("--held-out", default="results/held_out_verdicts")
    parser.add_argument("--run", action="store_true", help="train the runs first (else read the stored arrays)")
    args = parser.parse_args(argv)
    if args.run:
        run(args.output)
    print(report(args.output, args.held_out))


if __name__ == "__main__":
    main()
