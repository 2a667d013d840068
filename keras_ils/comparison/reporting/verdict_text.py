"""The verdict in words: its title, each family's table and sentence, the closing sentence and the advice on seeds.

Every sentence that calls a row significant or not sets Holm's adjusted
p-value beside the interval at Holm's level (`adjusted_interval`), which
excludes zero exactly when the row is significant; a row whose seeds disagree
in sign says so; one seed says that the verdict holds for that one training
run.
"""

from __future__ import annotations

import math

__all__ = ["closing_sentence", "family_sentence", "format_verdict", "markdown"]


def _percent(confidence: float) -> str:
    return f"{100 * confidence:g}%"


def _p(pvalue: float) -> str:
    return "p < 0.0001" if pvalue < 1e-4 else f"p = {pvalue:.2g}"


def _gain(found: dict, result: dict) -> str:
    """'test NLL 0.412 vs 0.431 for REF, -0.019 per example (95% CI at Holm's level [-0.027, -0.011])', to the
    interval's digits."""
    low, high = result["adjusted_interval"]
    half = (high - low) / 2
    digits = 3 if not 0 < half < 0.005 else min(6, 1 - math.floor(math.log10(half)))
    return (
        f"test NLL {result['nll']:.{digits}f} vs {found['reference_nll']:.{digits}f} for {found['reference']}, "
        f"{result['difference']:+.{digits}f} per example ({_percent(found['confidence'])} CI at Holm's level "
        f"[{low:+.{digits}f}, {high:+.{digits}f}])"
    )


def _holm_text(result: dict, entry: dict, family: str) -> str:
    verdict = "significant" if result["significant"] else "not significant"
    adjusted = _p(result["holm_pvalue"])
    return f"{verdict} after Holm over the {family} ({entry['compared']} compared, adjusted {adjusted})"


def _split(result: dict) -> bool:
    """Whether some seed's mean difference has the other sign than the row's difference (or is zero)."""
    sign = math.copysign(1.0, result["difference"]) if result["difference"] else 0.0
    return any(math.copysign(1.0, d) != sign or d == 0 for d in result["seed_differences"])


def _seeds_text(found: dict, result: dict) -> str:
    """'; lower in all 3 seeds', or the seeds' differences where they disagree in sign."""
    seeds, differences = found["seeds"], result["seed_differences"]
    if seeds == 1:
        return ""
    if not _split(result):
        every = "both seeds" if seeds == 2 else f"all {seeds} seeds"
        return f"; {'lower' if result['difference'] < 0 else 'higher'} in {every}"
    values = ", ".join(f"{d:+.4f}" for d in differences)
    lower = f"lower in {sum(d < 0 for d in differences)} of {seeds} seeds ({values})"
    return f"; but its seeds disagree in sign: {lower}" if result["significant"] else f"; {lower}"


def family_sentence(found: dict, family: str) -> str:
    """A family's sentence: its best row against the reference, or that none beats it."""
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
    return (
        f"{head}: best is {entry['best']}, {_gain(found, result)}, {_holm_text(result, entry, family)}"
        f"{_seeds_text(found, result)}."
    )


def _one_seed(found: dict) -> str:
    if found["seeds"] > 1:
        return ""
    return (
        " With one seed this holds for the networks trained here, conditional on that one training run: the spread "
        "between training runs is not in the interval (3 or more seeds measure it)."
    )


def _advice(found: dict, name: str, result: dict) -> str:
    """Whether more seeds would narrow the interval of row `name`, from its variance components."""
    if found["seeds"] == 1:
        return ""
    head = "2 seeds measure the spread between training runs on 1 degree of freedom. " if found["seeds"] == 2 else ""
    share = f"Training runs make {result['training_share']:.0%} of the variance of {name}'s difference"
    if result["seeds_to_halve"] is None:
        return f"{head}{share}; no number of seeds would halve its interval: a larger test set would."
    return f"{head}{share}; about {result['seeds_to_halve']} seeds would halve its interval."


def closing_sentence(found: dict) -> tuple[str, str]:
    """`(sentence, advice)`: the row to use with its numbers, and whether more seeds would narrow its interval."""
    reference, choice, lowest = found["reference"], found["choice"], found["best"]
    of = {}  # each row's result and family, from the first family that holds it
    for family, entry in found["families"].items():
        for row, result in entry["rows"].items():
            of.setdefault(row, (result, entry, family))
    if choice != reference:
        result, entry, family = of[choice]
        sentence = f"Use {choice}: {_gain(found, result)}, {_holm_text(result, entry, family)}"
        sentence += f"{_seeds_text(found, result)}."
        if lowest not in (choice, reference):
            other = of[lowest][0]
            sentence += (
                f" {lowest} has a lower test NLL ({other['nll']:.3f}) but does not beat {reference} significantly "
                f"(adjusted {_p(other['holm_pvalue'])})."
            )
        return sentence + _one_seed(found), _advice(found, choice, result)
    if lowest == reference:
        sentence = f"Keep {reference}: it has the lowest test NLL ({found['reference_nll']:.3f}) of the rows compared."
        return sentence + _one_seed(found), ""
    result = of[lowest][0]
    sentence = (
        f"Keep {reference}: no row beats it significantly after Holm. The closest, {lowest}, has "
        f"{_gain(found, result)}, adjusted {_p(result['holm_pvalue'])}: a gain the data cannot tell from zero"
        f"{_seeds_text(found, result)}."
    )
    return sentence + _one_seed(found), _advice(found, lowest, result)


def _table(found: dict, family: str) -> tuple[list, list]:
    """`(header, rows)` of a family's table, lowest test NLL first, the reference in its place."""
    entry, reference = found["families"][family], found["reference"]
    header = ["row", "test NLL", "vs reference", f"{_percent(found['confidence'])} CI (Holm)", "Holm p", "verdict"]
    header += ["per seed"] if found["seeds"] > 1 else []
    rows, placed = [], False
    for name, result in entry["rows"].items():
        if not placed and result["nll"] >= found["reference_nll"]:
            rows.append([f"{reference} (reference)", f"{found['reference_nll']:.4f}", *[""] * (len(header) - 2)])
            placed = True
        verdict = ("better" if result["difference"] < 0 else "worse") if result["significant"] else "n.s."
        if result["significant"] and found["seeds"] > 1 and _split(result):
            verdict += " (seeds split)"
        low, high = result["adjusted_interval"]
        cells = [name, f"{result['nll']:.4f}", f"{result['difference']:+.4f}", f"[{low:+.4f}, {high:+.4f}]"]
        cells += [_p(result["holm_pvalue"]).removeprefix("p = ").removeprefix("p "), verdict]
        rows.append(cells + ([" ".join(f"{d:+.4f}" for d in result["seed_differences"])] if found["seeds"] > 1 else []))
    if not placed:
        rows.append([f"{reference} (reference)", f"{found['reference_nll']:.4f}", *[""] * (len(header) - 2)])
    return header, rows


def _unit(found: dict) -> str:
    """What was counted: '3 seeds on one test split of 540 examples, each counted once', ..."""
    seeds, examples = found["seeds"], found["examples"]
    if seeds == 1:
        return f"1 seed, {examples[0]:,} test examples: conditional on this one training run"
    if found["shared_examples"]:
        return f"{seeds} seeds on one test split of {examples[0]:,} examples, each counted once"
    if found["shared_examples"] is None and len(set(examples)) == 1:
        return f"{seeds} seeds of {examples[0]:,} test examples, matched by position (no test fingerprint stored)"
    sizes = f"{examples[0]:,}" if len(set(examples)) == 1 else f"{min(examples):,} to {max(examples):,}"
    return f"{seeds} seeds, each on its own test examples ({sizes} each)"


def _title(found: dict) -> str:
    spread = "; the intervals include the spread between training runs" if found["seeds"] > 1 else ""
    return (
        f"Verdict: test NLL per example, each row minus {found['reference']} on the same examples ({_unit(found)}"
        f"{spread}; {_percent(found['confidence'])} CIs at Holm's levels within each family)"
    )


def _aligned(cells: list, widths: list) -> str:
    """The first and last columns left-aligned, the numbers between right-aligned."""
    last = len(cells) - 1
    return "  ".join(
        f"{cell:<{width}}" if i in (0, last) else f"{cell:>{width}}"
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
    ).rstrip()


def format_verdict(found: dict) -> str:
    """The lines `keras-ils run --seeds N` ends with: a table and a sentence per family, the advice on seeds, then
    the closing sentence.

    Args:
        found: `verdict.paired_verdict`'s result.
    """
    lines = [_title(found)]
    for family, entry in found["families"].items():
        header, rows = _table(found, family)
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        head = _aligned(header, widths)
        lines += ["", f"{family[0].upper()}{family[1:]} ({entry['compared']} compared)", head, "-" * len(head)]
        lines += [_aligned(row, widths) for row in rows]
        lines.append(entry["sentence"])
    return "\n".join([*lines, "", *([found["advice"]] if found["advice"] else []), found["sentence"]])


def markdown(found: dict) -> str:
    """`verdict.md`: the title, each family's table and sentence, the advice on seeds, the closing sentence."""
    lines = [f"# {_title(found)}"]
    for family, entry in found["families"].items():
        header, rows = _table(found, family)
        lines += ["", f"## {family[0].upper()}{family[1:]} ({entry['compared']} compared)", ""]
        align = ("---" if name in ("row", "verdict", "per seed") else "---:" for name in header)
        lines += ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines += ["", entry["sentence"]]
    lines += ["", *([found["advice"], ""] if found["advice"] else []), f"**{found['sentence']}**", ""]
    return "\n".join(lines)
