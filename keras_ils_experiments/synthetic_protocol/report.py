"""The outputs: the tables as markdown (ours beside the paper's, win rates) and the files of a run."""

from __future__ import annotations

import io
import json
import os

from keras_ils._files import atomic_write, staged_directory
from keras_ils_experiments.synthetic_protocol.figures import plot_curves, plot_histograms
from keras_ils_experiments.synthetic_protocol.printed_values import HYPERPARAMETERS, TABLE1_ROWS
from keras_ils_experiments.synthetic_protocol.scoring import CURVE_TEACHERS
from keras_ils_experiments.synthetic_protocol.statistics import summarise


def _fmt(value, digits=4, percent=False):
    if value is None:
        return "–"
    return f"{100 * value:.2f}%" if percent else f"{value:.{digits}f}"


_COLUMNS = (
    ("Avg T", "temps", 3, False),
    ("Val loss", "val_loss", 4, False),
    ("Acc", "accuracy", 4, True),
    ("Acc dense", "accuracy_dense", 4, True),
    ("Acc sparse", "accuracy_sparse", 4, True),
    ("CE", "nll", 4, False),
    ("ECE", "ece", 4, False),
)


_MASS = {"all_classes": "eps/K on every class", "wrong_classes": "eps/(K-1) on each wrong class"}
_VALIDATION = {"example_mean": "mean validation loss", "batch_mean": "mean of per-batch validation losses"}
_SEEDS = {True: "one seed per replicate, shared by its models", False: "one seed per model"}


def markdown(results: dict, summary: dict, command: str) -> str:
    """The tables as markdown: ours beside the paper's (in parentheses), win rates, settings."""
    out = io.StringIO()
    w = out.write
    w(f"Command: `{command}`\n\n")
    w(
        f"{results['replicates']} replicates (seeds {results['seed']}..{results['seed'] + results['replicates'] - 1}), "
        f"{results['n_test']} test points per class, {results['models_trained']} models trained "
        f"({results['model_epochs']} model-epochs) in {results['seconds']:.0f} s"
        f"{' (quick grids)' if results['quick'] else ''}; initialisation: {results.get('init', 'keras')}, "
        f"{_SEEDS[results.get('shared_seeds', True)]}; temperature fit: "
        f"{results.get('temperature_estimator', 'mle')}"
    )
    if "batch_size" in results:
        w(
            f"; preset {results.get('preset', 'package')}: batch size {results['batch_size']}, weight decay "
            f"{results['weight_decay']:g}, teacher temperatures {results['grid']['temperature']} on the "
            f"{'raw' if results['teacher_grid'] == 'authors' else 'calibrated'} teacher logits, ILS1 smoothing mass "
            f"{_MASS[results['smoothing_mass']]}, early stopping on the {_VALIDATION[results['validation_loss']]}"
        )
    w(".\n\n")
    w("Each cell: ours (paper). cwECE (authors' code) is the package's `class_conditional_ece`, the quantity the ")
    w("paper's cwECE column prints; cwECE (Eq. 2) is the package's `cwece`. The paper prints only the first.\n\n")
    header = ["Method", "TempS"] + [c[0] for c in _COLUMNS]
    header += ["cwECE (authors' code)", "cwECE (Eq. 2)", "eps", "P1", "P2", "T (ILS2/ILS)"]
    w("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
    for row in summary["rows"]:
        ours, paper = row["ours"], row["paper"]
        cells = [row["method"], "Yes" if row["temps"] else "No"]
        for _, key, digits, percent in _COLUMNS:
            cells.append(f"{_fmt(ours.get(key), digits, percent)} ({_fmt(paper.get(key), digits, percent)})")
        cells.append(f"{_fmt(ours['class_conditional_ece'])} ({_fmt(paper.get('cwece_printed'))})")
        cells.append(_fmt(ours["cwece"]))
        for h in HYPERPARAMETERS:
            cells.append(f"{_fmt(ours.get(h), 3)} ({_fmt(paper.get(h), 3)})" if h in ours or h in paper else "–")
        w("| " + " | ".join(cells) + " |\n")
    w(
        "\nThe paper's claims, replicate by replicate (paired: same dataset; exact two-sided sign test, "
        "ties left out):\n\n"
    )
    w(
        "| Claim | wins | losses | ties | win rate | mean difference (a - b) | sign test p |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    for c in summary["claims"]:
        w(
            f"| {c['claim']} | {c['wins']} | {c['losses']} | {c['ties']} | {c['win_rate']:.2f} | "
            f"{c['mean_difference']:+.4f} | {c['sign_test_p']:.2g} |\n"
        )
    w(table1(summary))
    if "distillation" in summary:
        w(table2(summary["distillation"]))
    return out.getvalue()


_TABLE1_COLUMNS = (
    ("Acc", "accuracy", 4, True),
    ("Acc dense", "accuracy_dense", 4, True),
    ("Acc sparse", "accuracy_sparse", 4, True),
    ("CE", "nll", 4, False),
    ("ECE", "ece", 4, False),
    ("cwECE (authors' code)", "class_conditional_ece", 4, False),
    ("Avg T", "temps", 3, False),
    ("Avg eps", "epsilon", 3, False),
)
_TABLE1_NAMES = {
    "Standard LS (dense validation)": "Standard LS, eps tuned on the dense validation points",
    "Standard LS (sparse validation)": "Standard LS, eps tuned on the sparse validation points",
}


def table1(summary: dict) -> str:
    """Table 1 of the paper (tab:motivate-calibration) in its layout: ours (paper)."""
    rows = {(r["method"], r["temps"]): r for r in summary["rows"]}
    header = ["Method", "TempS"] + [c[0] for c in _TABLE1_COLUMNS]
    lines = [
        "\nTable 1 (the motivation table), ours (paper):\n",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for key in TABLE1_ROWS:
        ours, paper = rows[key]["ours"], rows[key]["paper"]
        paper = dict(paper, class_conditional_ece=paper.get("cwece_printed"))
        cells = [_TABLE1_NAMES.get(key[0], key[0]), "Yes" if key[1] else "No"]
        for _, name, digits, percent in _TABLE1_COLUMNS:
            cells.append(
                "–"
                if name not in ours and name not in paper
                else f"{_fmt(ours.get(name), digits, percent)} ({_fmt(paper.get(name), digits, percent)})"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def table2(distillation: dict) -> str:
    """Table 2 of the paper (self-distillation, with the appendix's ILS teacher): ours (paper), and paired claims."""
    lines = [
        "\nTable 2 (self-distillation: a student of the same MLP trained on each teacher's probabilities, T = 1), "
        "the student's test scores, ours (paper):\n",
        "| Teacher | Accuracy | Cross-entropy | ECE | cwECE (authors' code) | cwECE (Eq. 2) |",
        "|---|---|---|---|---|---|",
    ]
    for row in distillation["rows"]:
        ours, paper = row["ours"], row["paper"]
        cells = [row["teacher"]]
        for name, paper_name, percent in (
            ("accuracy", "accuracy", True),
            ("nll", "nll", False),
            ("ece", "ece", False),
            ("class_conditional_ece", "cwece_printed", False),
        ):
            cells.append(f"{_fmt(ours[name], 4, percent)} ({_fmt(paper.get(paper_name), 4, percent)})")
        cells.append(_fmt(ours["cwece"]))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "\nPaired by replicate (exact two-sided sign test, ties left out):\n",
        "| Claim | wins | losses | ties | win rate | mean difference (a - b) | sign test p |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in distillation["claims"]:
        lines.append(
            f"| {c['claim']} | {c['wins']} | {c['losses']} | {c['ties']} | {c['win_rate']:.2f} | "
            f"{c['mean_difference']:+.4f} | {c['sign_test_p']:.2g} |"
        )
    return "\n".join(lines) + "\n"


# what `write_outputs` writes (the user's other files in the output directory are never touched)
OUTPUT_FILES = ("synthetic_protocol.json", "synthetic_protocol.md", "best_smoothing_*.png", "prediction_histograms.png")


def write_outputs(results: dict, output_dir: str, command: str) -> dict:
    """Writes `synthetic_protocol.json`, `synthetic_protocol.md`, the two Fig. 4 PNGs and (where the run has its
    counts) Fig. 2's `prediction_histograms.png`; returns the summary."""
    summary = summarise(results)
    text = markdown(results, summary, command)
    with staged_directory(output_dir, OUTPUT_FILES, argument="--output-dir") as staging:
        document = dict(command=command, summary=summary, results=results)
        payload = json.dumps(document, indent=1).encode()
        atomic_write(os.path.join(staging, "synthetic_protocol.json"), lambda f: f.write(payload))
        atomic_write(os.path.join(staging, "synthetic_protocol.md"), lambda f: f.write(text.encode()))
        for teacher in CURVE_TEACHERS:
            plot_curves(summary, os.path.join(staging, f"best_smoothing_{teacher}.png"), teacher)
        if results.get("histograms"):
            plot_histograms(
                results["histograms"], os.path.join(staging, "prediction_histograms.png"), results["replicates"]
            )
    return summary


__all__ = ["OUTPUT_FILES", "markdown", "table1", "table2", "write_outputs"]
