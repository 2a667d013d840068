"""The verdict of `keras-ils run`: each row against a stated reference, paired per test example, Holm per family.

The reference is `No LS + TempS`, the plain network temperature-scaled: what
everyone already does. Each row's per-example test NLL minus the reference's
on the same examples (negative: the row is better) is pooled over the seeds,
with a confidence interval, a two-sided p-value and Holm's step-down
correction over the rows of its family. The families are ranked separately
(`verdict_groups`): the training methods (as trained and + TempS), the
post-hoc calibrators on the reference network, and the methods with the
other calibrators; each answers its own question, and Holm controls the
family-wise error over the methods compared within each: the chance that any
row of a family is called different from the reference when none is stays at
most `1 - confidence`, however many rows the family holds, and Holm rejects
at least what Bonferroni would.

Why not Friedman and Nemenyi. Demšar's procedure ranks the rows within each
block (here a seed) and compares average ranks. Its critical difference
grows with the rows and shrinks only with the blocks: 120 rows over 3 seeds
need a gap of about 124 average ranks, more than the ranks span, so every
run ended "within the critical difference" (30 rows: about 27). A seed
gives it one observation per row; the paired difference uses every test
example (thousands per seed), so it has power on one data set and even one
seed, and it says by how much a row beats the reference, with an interval.

The standard error is blocked by seed. With seed `s` holding `n_s` test
examples, differences `d_si`, their mean `m_s` and variance `v_s` (ddof 1),
and `N = sum n_s`:

    difference = sum_s n_s m_s / N
    SE = sqrt(sum_s n_s v_s) / N,   on N - S degrees of freedom (Student t)

A shift common to all examples of one seed (a seed whose network is worse
everywhere) moves `m_s`, never `v_s`: the SE measures the test set's noise
given the trained models, which is what the data can speak to. The seed-to-
seed spread of the training runs is not in it (three seeds estimate it on two
degrees of freedom, which is the powerless test this replaces); each row's
mean difference per seed is reported beside it, so a reader sees whether
the seeds agree. With one seed this is the paired t-test, so a verdict
needs no minimum number of seeds. The intervals are per row (not adjusted);
the significance calls are Holm's. The t tail is `ranks`' F tail (T squared
is F(1, df)): no scipy at run time.

`keras-ils run --seeds N` prints `format_verdict`'s tables and sentences and
writes `verdict.json` and `verdict.md` (`write_verdict`) beside the seeds'
folders, from their `test_nll.npz` files (`read_example_nll`).

References:
    Holm (1979), "A Simple Sequentially Rejective Multiple Test Procedure", Scand. J. Statist. 6.
    Demšar (2006), "Statistical Comparisons of Classifiers over Multiple Data Sets", JMLR 7.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from keras_ils._checks import invalid, number_in
from keras_ils._files import atomic_write
from keras_ils.comparison.reporting.ranks import f_sf

__all__ = [
    "FAMILIES",
    "REFERENCE",
    "VERDICT_FILES",
    "format_verdict",
    "holm",
    "paired_verdict",
    "read_example_nll",
    "verdict_groups",
    "write_verdict",
]

REFERENCE = "No LS + TempS"  # the plain network, temperature-scaled
FAMILIES = ("training methods", "post-hoc calibrators", "methods with other calibrators")
VERDICT_FILES = ("verdict.md", "verdict.json")  # what `write_verdict` writes
_SAME = 1e-5  # per-example NLLs this close (relative and absolute) in every example are one model's, rounded


def verdict_groups(row_names: Iterable[str], suffixes: Sequence[str], *, reference: str = REFERENCE) -> dict:
    """The families of rows compared with `reference`, each tested on its own.

    A row `"<Name> + <suffix>"` is `Name` with the calibrator whose display
    name is `suffix`; any other row is a network as trained. The reference is
    `"<teacher> + <temperature's suffix>"`.

    Args:
        row_names: the rows, e.g. the keys of `read_example_nll`'s result.
        suffixes: the calibrators' display names
            (`keras_ils.comparison.main_job.config.CALIBRATORS.values()`).
        reference: the row every family is compared with. Defaults to
            `"No LS + TempS"`.

    Returns:
        `{family: [row]}` in `FAMILIES`' order, rows in the given order, the
        reference in none, a family without rows left out:
        `"training methods"` (every network as trained and + the reference's
        calibrator, the teacher's plain row included), `"post-hoc
        calibrators"` (the teacher with each other calibrator) and `"methods
        with other calibrators"` (the other networks with them).

    Example:

    >>> rows = ["No LS", "No LS + TempS", "No LS + VS", "ILS", "ILS + TempS", "ILS + VS"]
    >>> verdict_groups(rows, ["TempS", "VS"])
    {'training methods': ['No LS', 'ILS', 'ILS + TempS'], 'post-hoc calibrators': ['No LS + VS'], \
'methods with other calibrators': ['ILS + VS']}
    """
    names = list(row_names)
    teacher, _, temperature = reference.rpartition(" + ")
    if not teacher or temperature not in suffixes:
        raise invalid("reference", f"'<teacher> + <suffix>' with a suffix in {list(suffixes)}", reference)
    if reference not in names:
        raise invalid("row_names", f"rows that include the reference {reference!r}", names)
    groups = {family: [] for family in FAMILIES}
    for name in names:
        if name == reference:
            continue
        base, calibrator = name, None
        for suffix in suffixes:
            if name.endswith(f" + {suffix}"):
                base, calibrator = name.removesuffix(f" + {suffix}"), suffix
        if calibrator in (None, temperature):
            groups["training methods"].append(name)
        else:
            groups["post-hoc calibrators" if base == teacher else "methods with other calibrators"].append(name)
    return {family: rows for family, rows in groups.items() if rows}


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values: reject row i at level alpha when `holm(pvalues)[i] <= alpha`.

    Sorted ascending, the j-th smallest of m p-values (j from 1) becomes
    `max over k <= j of min(1, (m - k + 1) p_(k))`; the running maximum keeps
    a row from being rejected after a smaller p-value was not.

    Example:

    >>> holm([0.01, 0.04, 0.03, 0.005]).round(3).tolist()
    [0.03, 0.06, 0.06, 0.02]
    """
    pvalues = np.asarray(pvalues, dtype=np.float64)
    if pvalues.ndim != 1 or not ((pvalues >= 0) & (pvalues <= 1)).all():
        raise invalid("pvalues", "a 1-D sequence of p-values in [0, 1]", pvalues.tolist())
    order = np.argsort(pvalues, kind="stable")
    scaled = np.minimum(1.0, (len(pvalues) - np.arange(len(pvalues))) * pvalues[order])
    adjusted = np.empty_like(pvalues)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def _two_sided_p(t: float, df: int) -> float:
    """P(|T| > |t|) for Student's T on `df` degrees of freedom: T squared is F(1, df)."""
    return f_sf(t * t, 1, df)


def _t_quantile(confidence: float, df: int) -> float:
    """The q with P(|T| <= q) = confidence, by bisection on the two-sided tail."""
    alpha, low, high = 1.0 - confidence, 0.0, 1.0
    while _two_sided_p(high, df) > alpha:
        low, high = high, 2.0 * high
    while high - low > 1e-12 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if _two_sided_p(middle, df) > alpha else (low, middle)
    return (low + high) / 2


def _seeds_of(name: str, value, expected: list | None) -> list:
    """`value`'s per-seed arrays as float64, checked against the reference's lengths `expected`."""
    arrays = [np.asarray(a, dtype=np.float64) for a in value] if isinstance(value, Sequence) else None
    shapes = [(len(e),) for e in expected] if expected is not None else None
    if arrays is None or not arrays or (shapes is not None and [a.shape for a in arrays] != shapes):
        wanted = f"{len(shapes)} arrays of lengths {[s[0] for s in shapes]}" if shapes else "a list of 1-D arrays"
        got = [np.shape(a) for a in value] if isinstance(value, Sequence) else type(value).__name__
        raise invalid("example_nll", f"for row {name!r}, one per seed: {wanted}", got)
    if any(a.ndim != 1 or len(a) < 2 for a in arrays):
        raise invalid("example_nll", f"for row {name!r}, 1-D arrays of 2 or more examples", [a.shape for a in arrays])
    if not all(np.isfinite(a).all() for a in arrays):
        raise invalid("example_nll", f"finite per-example NLL for row {name!r}", "arrays holding NaN or inf")
    return arrays


def _compare(row: list, reference: list, df: int, quantile: float) -> dict:
    """One row against the reference: the pooled mean difference, its seed-blocked SE, interval and p-value."""
    differences = [r - f for r, f in zip(row, reference, strict=True)]
    if all(np.allclose(r, f, rtol=_SAME, atol=_SAME) for r, f in zip(row, reference, strict=True)):
        differences = [np.zeros_like(d) for d in differences]  # the same map: float32 rounding is no evidence
    total = sum(len(d) for d in differences)
    mean = sum(float(d.sum()) for d in differences) / total
    se = math.sqrt(sum(len(d) * float(d.var(ddof=1)) for d in differences)) / total
    pvalue = _two_sided_p(mean / se, df) if se > 0 else float(mean == 0)
    return {
        "nll": sum(float(r.sum()) for r in row) / total,
        "difference": mean,
        "interval": [mean - quantile * se, mean + quantile * se],
        "standard_error": se,
        "pvalue": pvalue,
        "seed_differences": [float(d.mean()) for d in differences],
    }


def paired_verdict(example_nll: Mapping, reference: str, groups: Mapping, *, confidence: float = 0.95) -> dict:
    """Each row of each family against `reference`: the paired per-example test-NLL difference, pooled over seeds.

    Args:
        example_nll: `{row: [per-example test NLL of each seed]}`, every row
            with the reference's seeds and, per seed, its test examples in the
            same order (`read_example_nll`'s result).
        reference: the row compared with, e.g. `REFERENCE`.
        groups: `{family: [row]}` (`verdict_groups`' result); Holm's
            correction runs over each family's rows. The reference, if listed,
            is not compared with itself.
        confidence: the intervals' level; a row is significant when its Holm
            p-value is at most `1 - confidence`. Defaults to `0.95`.

    Returns:
        `{"reference", "reference_nll", "confidence", "seeds", "examples"
        (test examples per seed), "families", "best", "choice",
        "choice_family", "sentence"}`. `families` is `{family: {"rows",
        "compared", "best", "sentence"}}`, its `rows` lowest test NLL first,
        each `{"nll", "difference" (row minus reference, mean per example),
        "interval", "standard_error", "pvalue", "holm_pvalue", "significant",
        "seed_differences"}`. A family's `best` and the top-level `best` are
        the lowest test NLL (maybe the reference's; on a tie, the first
        family's). `choice` is the row to use: the lowest test NLL of the
        rows significantly better than the reference, else the reference;
        `sentence` says so, with the numbers. A row within float32 rounding
        of the reference in every example (`1e-5`, relative and absolute:
        the same map fitted twice) differs by exactly 0.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> base = [rng.gamma(2.0, 0.2, 3000) for _ in range(3)]
    >>> nll = {"No LS + TempS": base, "ILS + TempS": [b - 0.02 + rng.normal(0, 0.1, 3000) for b in base],
    ...        "LS": [b + rng.normal(0, 0.1, 3000) for b in base]}
    >>> found = paired_verdict(nll, "No LS + TempS", {"training methods": ["LS", "ILS + TempS"]})
    >>> found["choice"], found["families"]["training methods"]["rows"]["ILS + TempS"]["significant"]
    ('ILS + TempS', True)
    >>> ils = found["families"]["training methods"]["rows"]["ILS + TempS"]
    >>> round(ils["difference"], 4), [round(end, 4) for end in ils["interval"]]
    (-0.0203, [-0.0224, -0.0183])
    """
    confidence = number_in("confidence", confidence, 0, 1, low_open=True, high_open=True)
    if not isinstance(example_nll, Mapping) or reference not in example_nll:
        raise invalid("reference", "a row of `example_nll`", reference)
    base = _seeds_of(reference, example_nll[reference], None)
    missing = sorted({row for rows in groups.values() for row in rows if row not in example_nll})
    if not groups or missing:
        raise invalid("groups", "families of rows that `example_nll` holds", f"missing {missing}" if groups else {})
    examples = [len(a) for a in base]
    found = {"reference": reference, "reference_nll": sum(float(a.sum()) for a in base) / sum(examples)}
    found.update(confidence=confidence, seeds=len(base), examples=examples, families={})
    quantile = _t_quantile(confidence, sum(examples) - len(examples))
    for family, rows in groups.items():
        compared = [row for row in dict.fromkeys(rows) if row != reference]
        if not compared:
            raise invalid("groups", f"a row other than the reference in family {family!r}", list(rows))
        seeds = {row: _seeds_of(row, example_nll[row], base) for row in compared}
        found["families"][family] = _family(found, seeds, base, quantile)
        found["families"][family]["sentence"] = _family_sentence(found, family)
    rows = [(r["nll"], (row, family, r)) for family, e in found["families"].items() for row, r in e["rows"].items()]
    better = [(nll, (row, family)) for nll, (row, family, r) in rows if r["significant"] and r["difference"] < 0]
    found["choice"], found["choice_family"] = _lowest(better) if better else (reference, None)
    found["best"] = _lowest([(found["reference_nll"], (reference, None, None)), *rows])[0]
    found["sentence"] = _closing_sentence(found)
    return found


def _family(found: dict, seeds: dict, base: list, quantile: float) -> dict:
    """One family's rows compared with the reference, Holm-corrected, lowest test NLL first; its best row."""
    df = sum(found["examples"]) - found["seeds"]
    results = {row: _compare(arrays, base, df, quantile) for row, arrays in seeds.items()}
    for result, adjusted in zip(results.values(), holm([r["pvalue"] for r in results.values()]), strict=True):
        result.update(holm_pvalue=float(adjusted), significant=bool(adjusted <= 1.0 - found["confidence"]))
    ordered = dict(sorted(results.items(), key=lambda item: item[1]["nll"]))
    best = _lowest([(found["reference_nll"], found["reference"]), *((r["nll"], row) for row, r in ordered.items())])
    return {"rows": ordered, "compared": len(ordered), "best": best}


def _lowest(candidates: list):
    """The first candidate of `[(nll, candidate)]` whose NLL is the lowest up to rounding (`_SAME`): a tie goes to the
    reference, then to the first family's row."""
    low = min(nll for nll, _ in candidates)
    return next(candidate for nll, candidate in candidates if nll <= low + _SAME * max(1.0, abs(low)))


def _percent(confidence: float) -> str:
    return f"{100 * confidence:g}%"


def _p(pvalue: float) -> str:
    return "p < 0.0001" if pvalue < 1e-4 else f"p = {pvalue:.2g}"


def _gain(found: dict, result: dict) -> str:
    """'test NLL 0.412 vs 0.431 for REF, -0.019 per example (95% CI [-0.027, -0.011])', to the interval's digits."""
    low, high = result["interval"]
    half = (high - low) / 2
    digits = 3 if not 0 < half < 0.005 else min(6, 1 - math.floor(math.log10(half)))
    return (
        f"test NLL {result['nll']:.{digits}f} vs {found['reference_nll']:.{digits}f} for {found['reference']}, "
        f"{result['difference']:+.{digits}f} per example ({_percent(found['confidence'])} CI "
        f"[{low:+.{digits}f}, {high:+.{digits}f}])"
    )


def _holm_text(result: dict, entry: dict, family: str) -> str:
    verdict = "significant" if result["significant"] else "not significant"
    adjusted = _p(result["holm_pvalue"])
    return f"{verdict} after Holm over the {family} ({entry['compared']} compared, adjusted {adjusted})"


def _family_sentence(found: dict, family: str) -> str:
    entry = found["families"][family]
    head = family[0].upper() + family[1:]
    if entry["best"] == found["reference"]:
        worse = sum(r["significant"] and r["difference"] > 0 for r in entry["rows"].values())
        tail = f"{worse} of {entry['compared']} rows are significantly worse" if worse else "none differs significantly"
        return (
            f"{head}: none beats {found['reference']}, which has the lowest test NLL ({found['reference_nll']:.3f}); "
            f"{tail} after Holm."
        )
    result = entry["rows"][entry["best"]]
    agree = ""
    if found["seeds"] > 1:
        agree = f"; lower in {sum(d < 0 for d in result['seed_differences'])} of {found['seeds']} seeds"
    return f"{head}: best is {entry['best']}, {_gain(found, result)}, {_holm_text(result, entry, family)}{agree}."


def _closing_sentence(found: dict) -> str:
    reference, choice, lowest = found["reference"], found["choice"], found["best"]
    of = {}  # each row's result, from the first family that holds it
    for entry in found["families"].values():
        for row, result in entry["rows"].items():
            of.setdefault(row, result)
    if choice != reference:
        entry = found["families"][found["choice_family"]]
        sentence = f"Use {choice}: {_gain(found, of[choice])}, {_holm_text(of[choice], entry, found['choice_family'])}."
        if lowest not in (choice, reference):
            result = of[lowest]
            sentence += (
                f" {lowest} has a lower test NLL ({result['nll']:.3f}) but does not beat {reference} significantly "
                f"(adjusted {_p(result['holm_pvalue'])})."
            )
        return sentence
    if lowest == reference:
        return f"Keep {reference}: it has the lowest test NLL ({found['reference_nll']:.3f}) of the rows compared."
    result = of[lowest]
    return (
        f"Keep {reference}: no row beats it significantly after Holm. The closest, {lowest}, has "
        f"{_gain(found, result)}, adjusted {_p(result['holm_pvalue'])}: a gain the test examples cannot tell from zero."
    )


def _table(found: dict, family: str) -> tuple[list, list]:
    """`(header, rows)` of a family's table, lowest test NLL first, the reference in its place."""
    entry, reference = found["families"][family], found["reference"]
    header = ["row", "test NLL", "vs reference", f"{_percent(found['confidence'])} CI", "Holm p", "verdict"]
    header += ["per seed"] if found["seeds"] > 1 else []
    rows, placed = [], False
    for name, result in entry["rows"].items():
        if not placed and result["nll"] >= found["reference_nll"]:
            rows.append([f"{reference} (reference)", f"{found['reference_nll']:.4f}", *[""] * (len(header) - 2)])
            placed = True
        verdict = ("better" if result["difference"] < 0 else "worse") if result["significant"] else "n.s."
        low, high = result["interval"]
        cells = [name, f"{result['nll']:.4f}", f"{result['difference']:+.4f}", f"[{low:+.4f}, {high:+.4f}]"]
        cells += [_p(result["holm_pvalue"]).removeprefix("p = ").removeprefix("p "), verdict]
        rows.append(cells + ([" ".join(f"{d:+.4f}" for d in result["seed_differences"])] if found["seeds"] > 1 else []))
    if not placed:
        rows.append([f"{reference} (reference)", f"{found['reference_nll']:.4f}", *[""] * (len(header) - 2)])
    return header, rows


def _title(found: dict) -> str:
    seeds = f"{found['seeds']} seed{'s' if found['seeds'] > 1 else ''}"
    return (
        f"Verdict: test NLL per example, each row minus {found['reference']} on the same examples ({seeds}, "
        f"{sum(found['examples']):,} test examples; {_percent(found['confidence'])} CIs; Holm within each family)"
    )


def _aligned(cells: list, widths: list) -> str:
    """The first and last columns left-aligned, the numbers between right-aligned."""
    last = len(cells) - 1
    return "  ".join(
        f"{cell:<{width}}" if i in (0, last) else f"{cell:>{width}}"
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
    ).rstrip()


def format_verdict(found: dict) -> str:
    """The lines `keras-ils run --seeds N` ends with: a table and a sentence per family, then the closing sentence.

    Args:
        found: `paired_verdict`'s result.
    """
    lines = [_title(found)]
    for family, entry in found["families"].items():
        header, rows = _table(found, family)
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        head = _aligned(header, widths)
        lines += ["", f"{family[0].upper()}{family[1:]} ({entry['compared']} compared)", head, "-" * len(head)]
        lines += [_aligned(row, widths) for row in rows]
        lines.append(entry["sentence"])
    return "\n".join([*lines, "", found["sentence"]])


def _markdown(found: dict) -> str:
    """`verdict.md`: the title, each family's table and sentence, the closing sentence."""
    lines = [f"# {_title(found)}"]
    for family, entry in found["families"].items():
        header, rows = _table(found, family)
        lines += ["", f"## {family[0].upper()}{family[1:]} ({entry['compared']} compared)", ""]
        align = ("---" if name in ("row", "verdict", "per seed") else "---:" for name in header)
        lines += ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines += ["", entry["sentence"]]
    return "\n".join([*lines, "", f"**{found['sentence']}**", ""])


def write_verdict(found: dict, output_dir: str) -> list:
    """Writes `verdict.json` (every number of `found`) and `verdict.md` into `output_dir`, each atomically; returns
    their paths.

    Args:
        found: `paired_verdict`'s result.
        output_dir: the directory (made if missing).
    """
    paths = [os.path.join(output_dir, name) for name in VERDICT_FILES]
    atomic_write(paths[0], lambda file: file.write(_markdown(found).encode()))
    atomic_write(paths[1], lambda file: file.write(json.dumps(found, indent=2, allow_nan=False).encode()))
    return paths


def read_example_nll(directories: str | Sequence[str]) -> dict:
    """`{row: [per-example test NLL of each seed]}` from runs' `test_nll.npz` files, for `paired_verdict`.

    Args:
        directories: the runs' directories, one per seed, in order, each
            holding `test_nll.npz`; or one directory: a run's own (holding
            `test_nll.npz`), or a `--seeds N` output directory, whose
            `seed<k>/` folders are read, `k` ascending.

    Returns:
        The rows in the first file's order, each a list of float64 arrays,
        one per seed.
    """
    from keras_ils.comparison.main_job.report import TEST_NLL_FILE

    if isinstance(directories, str | os.PathLike):
        directory = os.fspath(directories)
        directories = [directory]
        if not os.path.exists(os.path.join(directory, TEST_NLL_FILE)):
            folders = os.listdir(directory) if os.path.isdir(directory) else []
            seeds = sorted(int(match[1]) for name in folders if (match := re.fullmatch(r"seed(\d+)", name)))
            directories = [os.path.join(directory, f"seed{seed}") for seed in seeds]
        if not directories:
            raise FileNotFoundError(f"No {TEST_NLL_FILE} in {directory} nor in its seed<k>/ folders.")
    paths = [os.path.join(directory, TEST_NLL_FILE) for directory in directories]
    if not paths:
        raise invalid("directories", "one run directory or more", directories)
    per_seed = []
    for path in paths:
        with np.load(path) as file:
            per_seed.append({row: file[row].astype(np.float64) for row in file.files})
    for path, rows in zip(paths[1:], per_seed[1:], strict=True):
        if set(rows) != set(per_seed[0]):
            raise ValueError(f"{path} holds the rows {sorted(rows)}; {paths[0]} holds {sorted(per_seed[0])}.")
    return {row: [rows[row] for rows in per_seed] for row in per_seed[0]}
