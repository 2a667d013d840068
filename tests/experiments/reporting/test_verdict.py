"""The ranked verdict over seeds, against scipy's Friedman test and Demšar's table of critical values."""

import json

import numpy as np
import pytest
from scipy import stats

from keras_ils.experiments.reporting import verdict

# Demšar (2006), Table 5(a): the Nemenyi test's q_0.05 for k = 2, 3, 4 classifiers
Q_005 = {2: 1.960, 3: 2.343, 4: 2.569}


def _summary(scores: dict, metric="nll") -> dict:
    return {"rows": [{"model": name, metric: {"values": list(values)}} for name, values in scores.items()]}


def test_ranks_and_tests_against_scipy_and_demsar():
    rng = np.random.default_rng(0)
    scores = {"No LS": rng.normal(1.0, 0.1, 8), "LS": rng.normal(0.9, 0.1, 8), "ILS": rng.normal(0.5, 0.1, 8)}
    found = verdict.verdict(_summary(scores))["nll"]
    table = np.column_stack(list(scores.values()))
    want_ranks = stats.rankdata(table, axis=1).mean(axis=0)
    assert found["average_ranks"] == pytest.approx(dict(zip(scores, want_ranks, strict=True)))
    assert found["friedman_pvalue"] == pytest.approx(stats.friedmanchisquare(*scores.values()).pvalue, rel=1e-6)
    assert found["critical_difference"] == pytest.approx(Q_005[3] * np.sqrt(3 * 4 / (6 * 8)), rel=1e-3)
    assert found["best"] == "ILS" and found["runner_up"] in ("LS", "No LS")
    lead = found["average_ranks"][found["runner_up"]] - found["average_ranks"]["ILS"]
    assert found["significant"] == (found["iman_davenport_pvalue"] < 0.05 and lead >= found["critical_difference"])


def test_a_clear_winner_over_many_seeds_is_significant_and_a_tie_is_not():
    seeds = 12
    clear = {
        "No LS": np.full(seeds, 0.9) + np.arange(seeds) * 1e-3,
        "LS": np.full(seeds, 0.8),
        "ILS": np.full(seeds, 0.5),
    }
    found = verdict.verdict(_summary(clear))["nll"]
    # ILS first in every seed, LS second: ranks 1, 2, 3; CD = 2.343 sqrt(12 / 72) = 0.957 < 1
    assert found["significant"] and found["rejects"] and found["best"] == "ILS"
    rng = np.random.default_rng(1)
    tie = {name: rng.normal(0.7, 0.05, seeds) for name in ("No LS", "LS", "ILS")}
    assert not verdict.verdict(_summary(tie))["nll"]["significant"]


def test_accuracy_is_ranked_higher_is_better():
    scores = {"A": [0.9, 0.91, 0.92], "B": [0.8, 0.81, 0.82]}
    assert verdict.verdict(_summary(scores, "accuracy"))["accuracy"]["best"] == "A"


def test_hand_computed_ranks_of_a_seeds_summary_and_its_table():
    """Three seeds, three rows, two metrics. NLL ranks per seed (1 best): seed 1: C 1, B 2, A 3; seed 2: B 1, C 2, A 3;
    seed 3: C 1, A 2, B 3 -> A (3+3+2)/3 = 2.67, B (2+1+3)/3 = 2, C (1+2+1)/3 = 1.33. Accuracy (higher is better)
    ties A and B in every seed: A 1.5, B 1.5, C 3."""
    rows = [
        {"model": "A", "nll": {"values": [0.9, 0.8, 0.6]}, "accuracy": {"values": [0.9, 0.8, 0.7]}},
        {"model": "B", "nll": {"values": [0.7, 0.5, 0.7]}, "accuracy": {"values": [0.9, 0.8, 0.7]}},
        {"model": "C", "nll": {"values": [0.6, 0.6, 0.5]}, "accuracy": {"values": [0.8, 0.7, 0.6]}},
    ]
    summary = {"dataset": "wine.npz", "model": "mlp", "seeds": [0, 1, 2], "rows": rows}
    found = verdict.verdict(summary)
    assert list(found) == ["nll", "accuracy"]
    assert found["nll"]["average_ranks"] == pytest.approx({"C": 4 / 3, "B": 2.0, "A": 8 / 3})
    assert list(found["nll"]["average_ranks"]) == ["C", "B", "A"]  # best first
    assert found["accuracy"]["average_ranks"] == pytest.approx({"A": 1.5, "B": 1.5, "C": 3.0})
    nll = np.array([row["nll"]["values"] for row in rows])
    assert found["nll"]["friedman_pvalue"] == pytest.approx(stats.friedmanchisquare(*nll).pvalue, rel=1e-6)
    accuracy = -np.array([row["accuracy"]["values"] for row in rows])
    assert found["accuracy"]["friedman_pvalue"] == pytest.approx(stats.friedmanchisquare(*accuracy).pvalue, rel=1e-6)
    text = verdict.format_verdict(found, summary).splitlines()
    assert text[0] == "Verdict (wine.npz / mlp, seeds 0, 1, 2; Friedman test, Nemenyi at alpha 0.05)"
    assert text[1].split() == ["average", "rank", "(1", "is", "best)", "NLL", "accuracy"]
    assert [line.split() for line in text[3:6]] == [["C", "1.33", "3.00"], ["B", "2.00", "1.50"], ["A", "2.67", "1.50"]]
    cd = f"{Q_005[3] * np.sqrt(3 * 4 / (6 * 3)):.2f}"
    assert text[7].split() == ["Nemenyi", "CD", cd, cd]
    assert text[-2].startswith("NLL: best is C (average rank 1.33 of 3 over 3 seeds), then B (2.00);")
    assert text[-1] == "accuracy: A, B share the best average rank (1.50 of 3 over 3 seeds); no row leads."


def test_format_and_write(tmp_path):
    scores = {"No LS": [0.9, 0.8, 0.95, 0.9], "LS": [0.7, 0.72, 0.69, 0.7], "ILS": [0.6, 0.61, 0.58, 0.6]}
    found = verdict.verdict(_summary(scores))
    text = verdict.format_verdict(found)
    assert text.splitlines()[0] == "Verdict (4 seeds; Friedman test, Nemenyi at alpha 0.05)"
    assert "NLL: best is ILS (average rank 1.00 of 3 over 4 seeds)" in text
    summary = {"dataset": "d.npz", "model": "mlp", "seeds": [0, 1, 2, 3], **_summary(scores)}
    paths = verdict.write_verdict(found, str(tmp_path), summary)
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == ["cd_nll.png", "verdict.json", "verdict.md"]
    record = json.loads((tmp_path / "verdict.json").read_text())
    assert record["seeds"] == [0, 1, 2, 3] and record["metrics"]["nll"]["best"] == "ILS"
    markdown = (tmp_path / "verdict.md").read_text()
    assert markdown.startswith("# Verdict (d.npz / mlp, seeds 0, 1, 2, 3;") and "![NLL](cd_nll.png)" in markdown
    assert "| ILS | 1.00 |" in markdown and "- NLL: best is ILS" in markdown


def test_no_verdict_says_why():
    assert verdict.no_verdict(2).startswith("No verdict: ranking the rows needs at least 3 seeds (--seeds 3 or more)")


@pytest.mark.parametrize(
    "summary, match",
    [
        (_summary({"A": [0.1, 0.2], "B": [0.2, 0.3]}), "at least 3 seeds"),
        (_summary({"A": [0.1, 0.2, 0.3]}), "2 rows"),
        (_summary({"A": [0.1, np.nan, 0.3], "B": [0.2, 0.3, 0.4]}), "finite scores"),
    ],
)
def test_refused(summary, match):
    with pytest.raises(ValueError, match=f"Invalid value for argument `summary`.*{match}"):
        verdict.verdict(summary)
