"""The paper's tables as ranked tables: per metric the means over seeds, ranks, Friedman tests, critical
differences and the paper's printed values; `TABLE.md`, `TABLE.json` and the critical-difference diagrams.

`summarise` computes them from every pair's and seed's scores, `format_markdown`
prints them and `write_outputs` writes them (see
`keras_ils_experiments.paper_tables` for how the runs are made).
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from keras_ils._checks import invalid
from keras_ils._files import atomic_write
from keras_ils.comparison.reporting import ranks
from keras_ils_experiments import printed_tables

__all__ = [
    "ALPHA",
    "COLUMNS",
    "CONTROL",
    "KD_SETTINGS",
    "METRICS",
    "PAIRS",
    "PAPER",
    "STUDENT",
    "TABLES",
    "check_table",
    "format_markdown",
    "pair_label",
    "slug",
    "statistics",
    "summarise",
    "write_json",
    "write_outputs",
]

TABLES = ("3", "distillation")
ALPHA = 0.05  # the level of the Friedman test and of the post-hoc tests that follow it
CONTROL = {"3": "ILS + TempS", "distillation": "ILS"}
COLUMNS = {"3": printed_tables.TABLE3_COLUMNS, "distillation": printed_tables.DISTILLATION_COLUMNS}
PAIRS = {"3": printed_tables.TABLE3_PAIRS, "distillation": printed_tables.DISTILLATION_PAIRS}
PAPER = {"3": printed_tables.TABLE3, "distillation": printed_tables.DISTILLATION}
# (score key of keras_ils.evaluation, title, lower is better, the paper's metric printed beside it)
METRICS = (
    ("nll", "Cross-entropy", True, "nll"),
    ("accuracy", "Accuracy %", False, "accuracy"),
    ("ece", "ECE", True, "ece"),
    ("cwece", "cwECE (classwise-ECE, Eq. 2)", True, None),
    ("class_conditional_ece", "paper-cwECE (the authors' variant the paper printed)", True, "cwece"),
)


KD_SETTINGS = dict(weight=0.9, teacher_temperature=20.0, student_temperature=1.0)  # the paper's KD (appendix)
STUDENT = "alexnet"  # the distillation table's student network


def check_table(table):
    """A `ValueError` unless `table` is one of `TABLES`."""
    if table not in TABLES:
        raise invalid("table", f"one of {TABLES}", table)


def slug(text: str) -> str:
    """A folder name for a dataset or model (`tfds:cifar10` -> `cifar10`, `data/iris.npz` -> `iris`)."""
    text = os.path.basename(text.removeprefix("tfds:"))
    text = text.removesuffix(".npz")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text) or "_"


def pair_label(pair) -> str:
    """`'MODEL / DATASET'` as the tables print it."""
    dataset, model = pair
    return f"{model} / {slug(dataset)}"


def write_json(path, value):
    """`value` as JSON at `path`, written atomically (its folder made)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, lambda file: file.write(json.dumps(value, indent=2).encode()))


def summarise(table, pairs, seeds, runs, command=None) -> dict:
    """Means over seeds per metric, ranks, average ranks, Friedman tests, critical differences, the paper's values.

    `runs[(pair, seed)]` is `{column: scores}` (a main job row's `all`
    scores). Returns a JSON-ready dict; `format_markdown` prints it.
    """
    columns = COLUMNS[table]
    control = CONTROL[table]
    summary = {
        "table": table,
        "command": command,
        "pairs": [list(p) for p in pairs],
        "labels": [pair_label(p) for p in pairs],
        "seeds": list(seeds),
        "columns": list(columns),
        "control": control,
        "metrics": {},
    }
    for key, title, lower, paper_key in METRICS:
        per_seed = np.array([[[runs[(p, s)][c][key] for c in columns] for s in seeds] for p in pairs])
        means = np.round(per_seed.mean(axis=1), 12)  # equal means summed in another order are equal, not ranked apart
        entry = {"title": title, "lower_is_better": lower, "per_seed": per_seed.tolist(), "mean": means.tolist()}
        entry.update(statistics(means, columns, lower, control))
        if paper_key is not None and paper_key in PAPER[table]:
            rows = [PAIRS[table].index(p) for p in pairs if p in PAIRS[table]]
            if rows:
                paper = np.array([PAPER[table][paper_key][i] for i in rows])
                paper_entry = {"pairs": [pair_label(PAIRS[table][i]) for i in rows], "values": paper.tolist()}
                paper_entry.update(statistics(paper, columns, lower, control))
                entry["paper"] = paper_entry
        summary["metrics"][key] = entry
    return summary


def statistics(values, columns, lower, control) -> dict:
    """Ranks, average ranks and, over two or more pairs, the Friedman test and both critical differences.

    `against_control[column][test]` is whether `test` finds `column` and the
    control different: only when the Friedman test rejects at `ALPHA` (its
    `"rejects"`), as Demšar (2006, §3.2.2) runs the post-hoc tests. The test
    that gates them is the Iman-Davenport F, the Friedman statistic Demšar
    recommends (the chi-square is "undesirably conservative"); both are
    reported.
    """
    rank_table = ranks.ranks(values, lower_is_better=lower)
    average = dict(zip(columns, rank_table.mean(axis=0).tolist(), strict=True))
    result = {"ranks": rank_table.tolist(), "average_ranks": average}
    num_pairs, k = values.shape
    if num_pairs >= 2:
        friedman = ranks.friedman_test(values, lower_is_better=lower)
        rejects = bool(friedman.f_pvalue < ALPHA)
        result["friedman"] = {name: float(value) for name, value in friedman._asdict().items()}
        result["friedman"]["rejects"] = rejects
        cds = {test: ranks.critical_difference(k, num_pairs, ALPHA, test=test) for test in ranks.TESTS}
        result["critical_difference"] = cds
        result["against_control"] = {
            column: {
                "difference": average[column] - average[control],
                **{test: rejects and abs(average[column] - average[control]) >= cd for test, cd in cds.items()},
            }
            for column in columns
            if column != control
        }
    return result


def _cell(value, rank, key, best):
    text = f"{100 * value:.2f}" if key == "accuracy" else f"{value:.3f}"
    text = f"{text} ({rank:g})"
    return f"**{text}**" if best else text


def _metric_table(labels, columns, values, stats, key):
    lines = ["| pair | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for label, row, rank_row in zip(labels, values, stats["ranks"], strict=True):
        best = min(rank_row)
        cells = [_cell(v, r, key, r == best) for v, r in zip(row, rank_row, strict=True)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| average rank | " + " | ".join(f"{stats['average_ranks'][c]:.2f}" for c in columns) + " |")
    return lines


def _tests_text(stats, control, num_pairs):
    if "friedman" not in stats:
        return ["One pair: no Friedman test or critical difference (they need two or more)."]
    f = stats["friedman"]
    cd = stats["critical_difference"]
    lines = [
        f"Friedman over {num_pairs} pairs (Iman-Davenport F, as Demšar recommends): F({f['df1']:.0f}, "
        f"{f['df2']:.0f}) = {f['f_statistic']:.2f}, p = {f['f_pvalue']:.3g} (chi-square {f['statistic']:.2f}, "
        f"p = {f['pvalue']:.3g}).",
    ]
    differences = f"Nemenyi {cd['nemenyi']:.2f}, Bonferroni-Dunn {cd['bonferroni-dunn']:.2f}"
    if not f["rejects"]:
        return lines + [
            f"The Friedman test does not reject that all methods are equivalent at alpha {ALPHA:g}: no post-hoc "
            f"difference is claimed. The critical differences ({differences}) and diagrams are for reference only."
        ]
    lines.append(f"Rejected at alpha {ALPHA:g}, so the post-hoc tests follow. Critical differences: {differences}.")
    for test in ranks.TESTS:
        beaten = [c for c, d in stats["against_control"].items() if d[test] and d["difference"] > 0]
        lost = [c for c, d in stats["against_control"].items() if d[test] and d["difference"] < 0]
        text = f"{control} is significantly better ({test}) than: {', '.join(beaten) or 'none'}"
        lines.append(text + (f"; significantly worse than: {', '.join(lost)}." if lost else "."))
    return lines


def format_markdown(summary: dict) -> str:
    """The markdown of `TABLE.md`: per metric our table, its tests, the paper's values for the paper's pairs."""
    table, columns, control = summary["table"], summary["columns"], summary["control"]
    name = "Table 3" if table == "3" else "The distillation table"
    lines = [f"# {name}: ours beside the paper's", ""]
    if summary.get("command"):
        lines += ["```", summary["command"], "```", ""]
    lines += [
        f"Pairs (model / dataset): {len(summary['labels'])}; seeds {summary['seeds']} (cells are means over seeds). "
        "Each cell: value (rank in its row, 1 the best, ties averaged); the best in bold. Ranks are taken on "
        f"means, not on the printed digits. After Demšar (2006): the Friedman test at alpha {ALPHA:g}, then, only "
        f"if it rejects, the Nemenyi and Bonferroni-Dunn tests (against {control}).",
        "",
    ]
    if table == "distillation":
        lines += [
            f"Columns: how the teacher was trained. Cells: the {STUDENT} student distilled from it "
            f"(KD weight {KD_SETTINGS['weight']}, teacher temperature {KD_SETTINGS['teacher_temperature']:g} on raw "
            f"logits, student temperature {KD_SETTINGS['student_temperature']:g}), as trained.",
            "",
        ]
    for key, entry in summary["metrics"].items():
        lines += [f"## {entry['title']}", ""]
        lines += _metric_table(summary["labels"], columns, entry["mean"], entry, key)
        lines += [""] + _tests_text(entry, control, len(summary["labels"])) + [""]
        for test in ranks.TESTS:
            if "friedman" in entry:
                label = test if entry["friedman"]["rejects"] else f"{test}, for reference only (Friedman not rejected)"
                lines.append(f"![{label}]({_diagram_name(table, key, test)})")
        if "paper" in entry:
            paper = entry["paper"]
            lines += ["", f"The paper's printed values for its pairs among these ({entry['title']}):", ""]
            lines += _metric_table(paper["pairs"], columns, paper["values"], paper, key)
            if "friedman" in paper:
                lines += [""] + _tests_text(paper, control, len(paper["pairs"]))
        lines.append("")
    return "\n".join(lines)


def _diagram_name(table, key, test):
    return f"cd_{'table3' if table == '3' else table}_{key}_{test}.png"


def write_outputs(summary: dict, output_dir: str) -> None:
    """`TABLE.md`, `TABLE.json` and the critical-difference diagrams (two or more pairs) into `output_dir`."""
    table = summary["table"]
    base = "table3" if table == "3" else table
    os.makedirs(output_dir, exist_ok=True)
    for key, entry in summary["metrics"].items():
        if "friedman" not in entry:
            continue
        reference = "" if entry["friedman"]["rejects"] else " (Friedman not rejected: for reference only)"
        for test in ranks.TESTS:
            ranks.critical_difference_diagram(
                entry["average_ranks"],
                len(summary["labels"]),
                alpha=ALPHA,
                test=test,
                control=summary["control"] if test == "bonferroni-dunn" else None,
                title=f"{entry['title']}: {'Nemenyi' if test == 'nemenyi' else 'Bonferroni-Dunn'}, "
                f"{len(summary['labels'])} pairs{reference}",
                path=os.path.join(output_dir, _diagram_name(table, key, test)),
            )
    write_json(os.path.join(output_dir, f"{base}.json"), summary)
    markdown = format_markdown(summary)
    atomic_write(os.path.join(output_dir, f"{base}.md"), lambda file: file.write(markdown.encode()))
