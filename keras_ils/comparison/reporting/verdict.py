"""The verdict of `keras-ils run` and `compare`: each row against a stated reference, per test example and per
training run, Holm per family.

The reference is `No LS + TempS`, the plain network temperature-scaled: what
everyone already does. Each row's per-example test NLL minus the reference's
on the same examples (negative: the row is better) is averaged per seed, and
the seeds' means are averaged: every training run counts once, and every test
example once, even when every seed scored it (a `.npz` or `tfds:` test
split). The interval and the two-sided p-value include both sources of noise,
the seed-to-seed spread of training and the test examples'
(`difference.row_difference`: a crossed seed x example random-effects model,
Student's t on the seeds' degrees of freedom). With one seed there is no
training spread to measure, and the verdict says that it holds for that one
training run.

The families are ranked separately (`verdict_groups`): the training methods
(as trained and + TempS), the post-hoc calibrators on the reference network,
and the methods with the other calibrators; each answers its own question,
and Holm controls the family-wise error over the methods compared within
each: the chance that any row of a family is called different from the
reference when none is stays at most `1 - confidence`, however many rows the
family holds. Beside Holm's adjusted p-value stands the interval at the level
Holm tested the row at (`difference.holm_intervals`): it excludes zero
exactly when the row is significant, so no sentence sets an unadjusted
interval beside an adjusted p-value. A significant row whose seeds disagree
in sign is called so, with its seeds' differences.

Why not Friedman and Nemenyi. Demšar's procedure ranks the rows within each
block (here a seed) and compares average ranks. Its critical difference grows
with the rows and shrinks only with the blocks: 120 rows over 3 seeds need a
gap of about 124 average ranks, more than the ranks span. The paired
difference says by how much a row beats the reference, with an interval.

`keras-ils run --seeds N` prints `format_verdict`'s tables and sentences and
writes `verdict.json` and `verdict.md` (`write_verdict`) beside the seeds'
folders, from their `test_nll.npz` files (`read_example_nll`; whether the
seeds share their test examples: `read_shared_examples`).

References:
    Holm (1979), "A Simple Sequentially Rejective Multiple Test Procedure", Scand. J. Statist. 6.
    Demšar (2006), "Statistical Comparisons of Classifiers over Multiple Data Sets", JMLR 7.
    Clark (1973), "The language-as-fixed-effect fallacy", J. Verbal Learning and Verbal Behavior 12.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from keras_ils._checks import invalid, number_in
from keras_ils._files import atomic_write
from keras_ils.comparison.reporting import examples as test_examples
from keras_ils.comparison.reporting.difference import SAME, holm, holm_intervals, row_difference
from keras_ils.comparison.reporting.verdict_text import closing_sentence, family_sentence, format_verdict, markdown

__all__ = [
    "FAMILIES",
    "REFERENCE",
    "VERDICT_FILES",
    "format_verdict",
    "holm",
    "paired_verdict",
    "read_example_nll",
    "read_shared_examples",
    "verdict_groups",
    "write_verdict",
]

REFERENCE = "No LS + TempS"  # the plain network, temperature-scaled
FAMILIES = ("training methods", "post-hoc calibrators", "methods with other calibrators")
VERDICT_FILES = ("verdict.md", "verdict.json")  # what `write_verdict` writes


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


def paired_verdict(
    example_nll: Mapping,
    reference: str,
    groups: Mapping,
    *,
    confidence: float = 0.95,
    shared_examples: bool | None = None,
) -> dict:
    """Each row of each family against `reference`: the per-example test-NLL difference over test examples and seeds.

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
        shared_examples: `True` when every seed scored the same test examples
            in the same order (one test split: a `.npz`, `tfds:`), `False`
            when each seed scored its own (a split or draw per seed: arrays,
            a table, the synthetic task), `None` when unknown
            (`read_shared_examples`' result for runs that stored no
            fingerprint): seeds with as many examples each are then matched by
            position, which overstates the interval a little if they do not
            share them, and others are taken as their own. Defaults to `None`.

    Returns:
        `{"reference", "reference_nll", "confidence", "seeds", "examples"
        (test examples per seed), "shared_examples" (as given; `None` matched
        by position), "families", "best", "choice", "choice_family",
        "sentence", "advice"}`. `families` is `{family: {"rows", "compared",
        "best", "sentence"}}`, its `rows` lowest test NLL first, each `{"nll",
        "difference" (row minus reference, mean per example), "interval"
        (unadjusted), "adjusted_interval" (at Holm's level), "standard_error",
        "df", "pvalue" (unadjusted, two-sided), "holm_pvalue", "significant",
        "seed_differences", "training_share", "seeds_to_halve"}`
        (`difference.row_difference`). A family's `best` and the top-level
        `best` are the lowest test NLL (maybe the reference's; on a tie, the
        first family's). `choice` is the row to use: the lowest test NLL of
        the rows significantly better than the reference, else the reference;
        `sentence` says so, with the numbers, and `advice` whether more seeds
        would narrow its interval. A row within float32 rounding of the
        reference in every example (`1e-5`, relative and absolute: the same
        map fitted twice) differs by exactly 0.

    Raises:
        ValueError: naming `example_nll` for seeds that the verdict cannot
            pool: rows with other seeds or examples than the reference's, or,
            with `shared_examples=True`, seeds of different lengths.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> base = [rng.gamma(2.0, 0.2, 3000) for _ in range(3)]
    >>> nll = {"No LS + TempS": base, "ILS + TempS": [b - 0.02 + rng.normal(0, 0.1, 3000) for b in base],
    ...        "LS": [b + rng.normal(0, 0.1, 3000) for b in base]}
    >>> found = paired_verdict(nll, "No LS + TempS", {"training methods": ["LS", "ILS + TempS"]},
    ...                        shared_examples=False)
    >>> found["choice"], found["families"]["training methods"]["rows"]["ILS + TempS"]["significant"]
    ('ILS + TempS', True)
    >>> ils = found["families"]["training methods"]["rows"]["ILS + TempS"]
    >>> round(ils["difference"], 4), [round(end, 4) for end in ils["interval"]], ils["df"]
    (-0.0203, [-0.0216, -0.019], 2)
    """
    confidence = number_in("confidence", confidence, 0, 1, low_open=True, high_open=True)
    if not (shared_examples is None or isinstance(shared_examples, bool | np.bool_)):
        raise invalid("shared_examples", "True, False or None", shared_examples)
    shared_examples = None if shared_examples is None else bool(shared_examples)
    if not isinstance(example_nll, Mapping) or reference not in example_nll:
        raise invalid("reference", "a row of `example_nll`", reference)
    base = _seeds_of(reference, example_nll[reference], None)
    examples = [len(a) for a in base]
    if shared_examples and len(set(examples)) > 1:
        raise invalid(
            "example_nll",
            "one test split scored by every seed (shared_examples=True): as many test examples in every seed",
            f"seeds of {examples} examples",
        )
    missing = sorted({row for rows in groups.values() for row in rows if row not in example_nll})
    if not groups or missing:
        raise invalid("groups", "families of rows that `example_nll` holds", f"missing {missing}" if groups else {})
    found = {"reference": reference, "reference_nll": float(np.mean([a.mean() for a in base]))}
    found.update(confidence=confidence, seeds=len(base), examples=examples, shared_examples=shared_examples)
    shared = shared_examples if shared_examples is not None else len(set(examples)) == 1
    found["families"] = {}
    for family, rows in groups.items():
        compared = [row for row in dict.fromkeys(rows) if row != reference]
        if not compared:
            raise invalid("groups", f"a row other than the reference in family {family!r}", list(rows))
        seeds = {row: _seeds_of(row, example_nll[row], base) for row in compared}
        found["families"][family] = _family(found, seeds, base, shared)
        found["families"][family]["sentence"] = family_sentence(found, family)
    rows = [(r["nll"], (row, family, r)) for family, e in found["families"].items() for row, r in e["rows"].items()]
    better = [(nll, (row, family)) for nll, (row, family, r) in rows if r["significant"] and r["difference"] < 0]
    found["choice"], found["choice_family"] = _lowest(better) if better else (reference, None)
    found["best"] = _lowest([(found["reference_nll"], (reference, None, None)), *rows])[0]
    found["sentence"], found["advice"] = closing_sentence(found)
    return found


def _family(found: dict, seeds: dict, base: list, shared: bool) -> dict:
    """One family's rows compared with the reference, Holm-corrected, lowest test NLL first; its best row."""
    confidence = found["confidence"]
    results = {row: row_difference(arrays, base, shared=shared, confidence=confidence) for row, arrays in seeds.items()}
    adjusted = holm([r["pvalue"] for r in results.values()])
    intervals = holm_intervals(list(results.values()), 1.0 - confidence)
    for result, p, interval in zip(results.values(), adjusted, intervals, strict=True):
        result.update(adjusted_interval=interval, holm_pvalue=float(p), significant=bool(p <= 1.0 - confidence))
    ordered = dict(sorted(results.items(), key=lambda item: item[1]["nll"]))
    best = _lowest([(found["reference_nll"], found["reference"]), *((r["nll"], row) for row, r in ordered.items())])
    return {"rows": ordered, "compared": len(ordered), "best": best}


def _lowest(candidates: list):
    """The first candidate of `[(nll, candidate)]` whose NLL is the lowest up to rounding (`SAME`): a tie goes to the
    reference, then to the first family's row."""
    low = min(nll for nll, _ in candidates)
    return next(candidate for nll, candidate in candidates if nll <= low + SAME * max(1.0, abs(low)))


def write_verdict(found: dict, output_dir: str) -> list:
    """Writes `verdict.json` (every number of `found`) and `verdict.md` into `output_dir`, each atomically; returns
    their paths.

    Args:
        found: `paired_verdict`'s result.
        output_dir: the directory (made if missing).
    """
    paths = [os.path.join(output_dir, name) for name in VERDICT_FILES]
    atomic_write(paths[0], lambda file: file.write(markdown(found).encode()))
    atomic_write(paths[1], lambda file: file.write(json.dumps(found, indent=2, allow_nan=False).encode()))
    return paths


def _run_paths(directories: str | Sequence[str]) -> list:
    """The runs' `test_nll.npz` paths, one per seed, in order (`read_example_nll`'s `directories`)."""
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
    paths = _run_paths(directories)
    per_seed = []
    for path in paths:
        with np.load(path) as file:
            names = [name for name in file.files if name != test_examples.FINGERPRINT_KEY]
            per_seed.append({row: file[row].astype(np.float64) for row in names})
    for path, rows in zip(paths[1:], per_seed[1:], strict=True):
        if set(rows) != set(per_seed[0]):
            raise ValueError(f"{path} holds the rows {sorted(rows)}; {paths[0]} holds {sorted(per_seed[0])}.")
    return {row: [rows[row] for rows in per_seed] for row in per_seed[0]}


def read_shared_examples(directories: str | Sequence[str]) -> bool | None:
    """Whether the runs' seeds scored the same test examples (`paired_verdict`'s `shared_examples`), from the test
    fingerprints their `test_nll.npz` files hold (`examples.shared_examples`); `None` when a file holds none.

    Args:
        directories: as `read_example_nll`'s.
    """
    paths, fingerprints = _run_paths(directories), []
    for path in paths:
        with np.load(path) as file:
            key = test_examples.FINGERPRINT_KEY
            fingerprints.append(file[key] if key in file.files else None)
    return test_examples.shared_examples(fingerprints, [os.path.basename(os.path.dirname(p)) for p in paths])
