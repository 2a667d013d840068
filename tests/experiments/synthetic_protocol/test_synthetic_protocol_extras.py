"""Table 2 (self-distillation) and Fig. 2 (histograms of predicted probabilities): their pieces and their report."""

import numpy as np
import pytest
from scipy import stats

from keras_ils_experiments import synthetic_protocol
from keras_ils_experiments.synthetic_protocol import extras, printed_values, report
from keras_ils_experiments.synthetic_protocol.figures import plot_histograms
from keras_ils_experiments.synthetic_protocol.statistics import paired_comparison, summarise_distillation


def test_probability_counts_match_numpy():
    rng = np.random.default_rng(0)
    p = rng.dirichlet([1.0, 2.0, 0.5], size=500)
    counts = extras.probability_counts(p)
    edges = np.linspace(0, 1, extras.HISTOGRAM_BINS + 1)
    top = p.max(axis=1)
    others = np.array([np.delete(row, np.argmax(row)) for row in p]).ravel()
    np.testing.assert_array_equal(counts["confidence"], np.histogram(top, edges)[0])
    np.testing.assert_array_equal(counts["others"], np.histogram(others, edges)[0])


def test_chosen_model_matches_the_record_by_hyperparameters():
    free, taught = synthetic_protocol.model_configs(synthetic_protocol.grids())
    configs = free + taught
    record = dict(p1=0.825, p2=1.25, temperature=4.0)
    index = extras.chosen_model(configs, {"ILS": [record]}, ("ILS", False))
    assert configs[index] == ("ILS", dict(method="ils", p1=0.825, p2=1.25, temperature=4.0))
    assert extras.chosen_model(configs, {"No LS": [{}]}, ("No LS", False)) == 0


def test_student_seeds_never_equal_a_grid_models():
    grid_seeds = set(range(0, 100)) | {(s + r) * 1000 + j + 1 for s in (0,) for r in range(100) for j in range(212)}
    assert not grid_seeds & set(extras.student_seeds(0, 100, False))
    assert not grid_seeds & set(extras.student_seeds(0, 100, True))
    assert len(set(extras.student_seeds(0, 100, False))) == 400


@pytest.mark.parametrize("metric", ["nll", "accuracy"])
def test_paired_comparison_against_scipy(metric):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=40).round(1), rng.normal(size=40).round(1)
    c = paired_comparison(a, b, metric)
    wins = int((a > b).sum() if metric == "accuracy" else (a < b).sum())
    losses = int((a < b).sum() if metric == "accuracy" else (a > b).sum())
    assert (c["wins"], c["losses"], c["ties"]) == (wins, losses, 40 - wins - losses)
    assert c["sign_test_p"] == pytest.approx(stats.binomtest(wins, wins + losses).pvalue)
    assert c["mean_difference"] == pytest.approx(np.mean(a - b))


def _distillation(n=6):
    rng = np.random.default_rng(2)
    return {
        teacher: [
            {m: float(v) for m, v in zip(synthetic_protocol.METRICS, rng.uniform(0.05, 0.8, 7), strict=True)}
            for _ in range(n)
        ]
        for teacher in extras.DISTILLATION_TEACHERS
    }


def test_summarise_distillation_means_and_paper_values():
    distillation = _distillation()
    summary = summarise_distillation(distillation)
    assert [r["teacher"] for r in summary["rows"]] == list(extras.DISTILLATION_TEACHERS)
    for row in summary["rows"]:
        values = distillation[row["teacher"]]
        assert row["ours"]["nll"] == pytest.approx(sum(v["nll"] for v in values) / len(values))
        assert row["paper"] == printed_values.PAPER_DISTILLATION[row["teacher"]]
    assert len(summary["claims"]) == 12


def test_markdown_holds_tables_1_and_2(fake_results):
    results = dict(fake_results(), distillation=_distillation(4))
    summary = synthetic_protocol.summarise(results)
    text = synthetic_protocol.markdown(results, summary, "x")
    assert "Table 1 (the motivation table)" in text and "Table 2 (self-distillation" in text
    table2 = report.table2(summary["distillation"])
    assert sum(line.startswith("| ILS | ") for line in table2.splitlines()) == 1
    assert "(79.57%)" in next(line for line in table2.splitlines() if line.startswith("| ILS | "))
    # an older result without the students still reports
    assert "Table 2" not in synthetic_protocol.markdown(
        fake_results(), synthetic_protocol.summarise(fake_results()), "x"
    )


def test_paper_table2_values_as_printed():
    assert printed_values.PAPER_DISTILLATION["No LS"] == dict(
        accuracy=0.7847, nll=0.5592, ece=0.0405, cwece_printed=0.0649
    )
    assert printed_values.PAPER_DISTILLATION["Standard LS"]["cwece_printed"] == 0.0726
    assert set(printed_values.TABLE1_ROWS) <= set(printed_values.PAPER)


def test_plot_histograms_writes_a_png(tmp_path):
    histograms = {
        f"{m}/{k}": np.arange(1, extras.HISTOGRAM_BINS + 1).tolist()
        for m in extras.HISTOGRAM_MODELS
        for k in extras.HISTOGRAM_KINDS
    }
    path = plot_histograms(histograms, str(tmp_path / "h.png"), 3)
    with open(path, "rb") as file:
        assert file.read(8) == b"\x89PNG\r\n\x1a\n"
