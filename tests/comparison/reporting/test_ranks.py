import math

import numpy as np
import pytest
from scipy import stats

from keras_ils.comparison.reporting import ranks

# Demšar (2006), Table 5: critical values q_alpha for k = 2..10 methods (two-tailed)
NEMENYI = {
    0.05: [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164],
    0.10: [1.645, 2.052, 2.291, 2.459, 2.589, 2.693, 2.780, 2.855, 2.920],
}
BONFERRONI_DUNN = {
    0.05: [1.960, 2.241, 2.394, 2.498, 2.576, 2.638, 2.690, 2.724, 2.773],
    0.10: [1.645, 1.960, 2.128, 2.241, 2.326, 2.394, 2.450, 2.498, 2.539],
}

# The paper's Table 3, cross-entropy as printed: 11 dataset-architecture pairs (rows) x 12 methods (columns)
METHODS = ["No LS", "No LS + TempS", "Dis", "cLS", "BS_Soft", "Beta", "LS", "LS + TempS", "ILS1", "ILS2", "ILS"]
METHODS += ["ILS + TempS"]
PAPER_CROSS_ENTROPY = [
    [0.858, 0.858, 0.854, 0.811, 0.833, 0.787, 0.808, 0.800, 0.723, 0.784, 0.720, 0.706],  # LeNet, CIFAR-10
    [0.312, 0.265, 0.311, 0.284, 0.309, 0.362, 0.308, 0.293, 0.293, 0.272, 0.270, 0.264],  # ResNet-110
    [0.310, 0.274, 0.314, 0.289, 0.318, 0.420, 0.303, 0.293, 0.289, 0.269, 0.266, 0.226],  # ResNet-110-SD
    [0.331, 0.294, 0.301, 0.323, 0.311, 0.334, 0.306, 0.299, 0.311, 0.301, 0.307, 0.306],  # DenseNet-40
    [0.206, 0.154, 0.168, 0.170, 0.163, 0.240, 0.172, 0.159, 0.164, 0.162, 0.153, 0.149],  # ResNet32W
    [2.361, 2.350, 2.704, 2.221, 2.540, 2.452, 2.292, 2.288, 2.183, 2.274, 2.173, 2.132],  # LeNet, CIFAR-100
    [1.382, 1.183, 1.163, 1.218, 1.292, 1.298, 1.283, 1.248, 1.222, 1.186, 1.103, 1.055],
    [1.070, 0.992, 1.065, 0.954, 1.059, 1.165, 0.993, 0.987, 0.946, 0.937, 0.909, 0.873],
    [1.295, 1.197, 1.205, 1.273, 1.286, 1.285, 1.273, 1.208, 1.212, 1.202, 1.147, 1.126],
    [1.047, 0.954, 0.890, 0.935, 0.944, 0.966, 0.947, 0.878, 0.902, 0.925, 0.879, 0.795],
    [0.104, 0.100, 0.122, 0.089, 0.104, 0.230, 0.108, 0.109, 0.103, 0.099, 0.089, 0.087],  # ResNet-152-SD, SVHN
]


def _tied_table(seed, rows=9, methods=6):
    return np.random.default_rng(seed).integers(0, 4, size=(rows, methods)).astype(float)  # many ties


class TestRanks:
    @pytest.mark.parametrize("seed", range(5))
    @pytest.mark.parametrize("lower_is_better", [True, False])
    def test_rows_agree_with_scipy_rankdata(self, seed, lower_is_better):
        table = _tied_table(seed)
        expected = np.array([stats.rankdata(row if lower_is_better else -row) for row in table])
        np.testing.assert_array_equal(ranks.ranks(table, lower_is_better), expected)
        np.testing.assert_allclose(ranks.average_ranks(table, lower_is_better), expected.mean(axis=0))

    def test_a_mapping_gives_ranks_by_name(self):
        table = _tied_table(0)
        scores = {f"m{j}": table[:, j].tolist() for j in range(table.shape[1])}
        expected = np.array([stats.rankdata(row) for row in table]).mean(axis=0)
        result = ranks.average_ranks(scores)
        assert list(result) == list(scores)
        np.testing.assert_allclose(list(result.values()), expected)

    def test_the_papers_table_3_cross_entropy(self):
        # the recomputation from the printed values: ILS + TempS 1.41, No LS + TempS 5.32
        result = ranks.average_ranks({m: [row[j] for row in PAPER_CROSS_ENTROPY] for j, m in enumerate(METHODS)})
        assert round(result["ILS + TempS"], 2) == 1.41 and round(result["No LS + TempS"], 2) == 5.32
        expected = np.mean([stats.rankdata(row) for row in PAPER_CROSS_ENTROPY], axis=0)
        np.testing.assert_allclose(list(result.values()), expected)

    @pytest.mark.parametrize(
        "scores",
        [
            [1.0, 2.0, 3.0],  # 1-D
            [[1.0], [2.0]],  # one method
            [[1.0, float("nan")]],
            [[1.0, float("inf")]],
            [["a", "b"]],
            [[True, False]],
            np.empty((0, 3)),
            {"a": [1, 2], "b": [1]},  # ragged
        ],
    )
    def test_bad_scores(self, scores):
        with pytest.raises(ValueError, match="Invalid value for argument `scores`"):
            ranks.average_ranks(scores)


class TestFriedman:
    @pytest.mark.parametrize("seed", range(6))
    def test_agrees_with_scipy_and_the_iman_davenport_formula(self, seed):
        table = _tied_table(seed, rows=5 + seed, methods=3 + seed)
        result = ranks.friedman_test(table)
        chi2, pvalue = stats.friedmanchisquare(*table.T)  # tie-corrected
        n, k = table.shape
        f = (n - 1) * chi2 / (n * (k - 1) - chi2)  # Demšar (2006), §3.2.2
        np.testing.assert_allclose([result.statistic, result.pvalue], [chi2, pvalue], rtol=1e-10)
        np.testing.assert_allclose(result.f_statistic, f, rtol=1e-10)
        np.testing.assert_allclose(result.f_pvalue, stats.f.sf(f, k - 1, (k - 1) * (n - 1)), rtol=1e-8, atol=1e-300)
        assert (result.df1, result.df2) == (k - 1, (k - 1) * (n - 1))

    def test_the_papers_table_3_rejects_equivalence(self):
        result = ranks.friedman_test(PAPER_CROSS_ENTROPY)
        chi2, pvalue = stats.friedmanchisquare(*np.array(PAPER_CROSS_ENTROPY).T)
        np.testing.assert_allclose([result.statistic, result.pvalue], [chi2, pvalue], rtol=1e-9)
        assert result.f_pvalue < 1e-20 and result.pvalue < 1e-11

    def test_identical_rankings(self):
        result = ranks.friedman_test([[1, 2, 3], [4, 5, 6], [0, 1, 9]])
        assert result.statistic == pytest.approx(6.0) and result.f_statistic == math.inf and result.f_pvalue == 0
        assert result.pvalue == pytest.approx(stats.chi2.sf(6.0, 2))

    def test_needs_two_data_sets(self):
        with pytest.raises(ValueError, match="at least 2 data sets"):
            ranks.friedman_test([[1, 2, 3]])


class TestCriticalValues:
    @pytest.mark.parametrize("alpha", [0.05, 0.10])
    def test_nemenyi_is_demsars_table_5(self, alpha):
        computed = [ranks.critical_value(k, alpha) for k in range(2, 11)]
        np.testing.assert_allclose(computed, NEMENYI[alpha], atol=1e-3)  # printed to 3 decimals

    @pytest.mark.parametrize("alpha", [0.05, 0.10])
    def test_bonferroni_dunn_is_demsars_table_5(self, alpha):
        computed = [ranks.critical_value(k, alpha, "bonferroni-dunn") for k in range(2, 11)]
        published = list(BONFERRONI_DUNN[alpha])
        if alpha == 0.05:
            # k = 9: Demšar prints 2.724; the normal quantile at 1 - 0.05 / 16 is 2.734 (a misprint)
            assert computed[7] == pytest.approx(stats.norm.ppf(1 - 0.05 / 16)) == pytest.approx(2.7344, abs=1e-4)
            published[7] = 2.734
        np.testing.assert_allclose(computed, published, atol=6e-4)

    @pytest.mark.parametrize("alpha", [0.01, 0.05, 0.10])
    def test_against_scipy_up_to_20_methods(self, alpha):
        for k in (2, 3, 5, 8, 12, 16, 20):
            expected = stats.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2)
            assert ranks.critical_value(k, alpha) == pytest.approx(expected, abs=1e-6)
            expected = stats.norm.ppf(1 - alpha / (2 * (k - 1)))
            assert ranks.critical_value(k, alpha, "bonferroni-dunn") == pytest.approx(expected, abs=1e-9)

    def test_demsars_worked_example_and_the_papers_table(self):
        # Demšar (2006), §3.2.4: 4 classifiers on 14 data sets, Nemenyi CD = 2.569 * sqrt(4 * 5 / (6 * 14)) = 1.25
        assert round(ranks.critical_difference(4, 14), 2) == 1.25
        assert ranks.critical_difference(4, 14) == pytest.approx(2.569 * math.sqrt(20 / 84), abs=1e-3)
        # the issue: 12 methods, 11 pairs, about 5.02
        assert round(ranks.critical_difference(12, 11), 2) == 5.02
        expected = stats.norm.ppf(1 - 0.05 / 22) * math.sqrt(12 * 13 / 66)
        assert ranks.critical_difference(12, 11, test="bonferroni-dunn") == pytest.approx(expected)

    @pytest.mark.parametrize(
        "kwargs, argument",
        [
            (dict(num_methods=1, num_datasets=5), "num_methods"),
            (dict(num_methods=3.0, num_datasets=5), "num_methods"),
            (dict(num_methods=3, num_datasets=0), "num_datasets"),
            (dict(num_methods=3, num_datasets=5, alpha=0.0), "alpha"),
            (dict(num_methods=3, num_datasets=5, alpha=1.0), "alpha"),
            (dict(num_methods=3, num_datasets=5, test="tukey"), "test"),
        ],
    )
    def test_bad_arguments(self, kwargs, argument):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{argument}`"):
            ranks.critical_difference(**kwargs)


class TestDiagram:
    AVERAGE = {"A": 1.0, "B": 1.5, "C": 3.9, "D": 3.6}  # k = 4, N = 14: CD = 1.25

    def _thick(self, figure):
        return sorted(
            tuple(np.round(line.get_xdata(), 2)) for line in figure.axes[0].lines if line.get_linewidth() == 3
        )

    def test_nemenyi_joins_the_groups_within_the_critical_difference(self, tmp_path):
        path = tmp_path / "cd.png"
        figure = ranks.critical_difference_diagram(self.AVERAGE, 14, title="demo", path=str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # A-B (0.5 apart) and D-C (0.3) are groups; B-D is 2.1 > 1.25 apart
        assert self._thick(figure) == [(0.95, 1.55), (3.55, 3.95)]
        texts = [text.get_text() for text in figure.axes[0].texts]
        assert "CD = 1.25" in texts and "A (1.00)" in texts and "(3.90) C" in texts

    def test_bonferroni_dunn_spans_the_control(self):
        figure = ranks.critical_difference_diagram(self.AVERAGE, 14, test="bonferroni-dunn", control="B")
        cd = stats.norm.ppf(1 - 0.05 / 6) * math.sqrt(20 / 84)
        assert self._thick(figure) == [(0.95, round(1.5 + cd + 0.05, 2))]
        bold = [text.get_text() for text in figure.axes[0].texts if text.get_fontweight() == "bold"]
        assert bold == ["B (1.50)"]

    @pytest.mark.parametrize(
        "kwargs, argument",
        [
            (dict(average_ranks={"A": 1.0}), "average_ranks"),
            (dict(average_ranks=[1.0, 2.0]), "average_ranks"),
            (dict(average_ranks={"A": 1.0, "B": 3.0}), "average_ranks"),  # ranks of 2 methods lie in [1, 2]
            (dict(average_ranks={"A": 1.0, "B": 2.0}, test="bonferroni-dunn", control="C"), "control"),
        ],
    )
    def test_bad_arguments(self, kwargs, argument):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{argument}`"):
            ranks.critical_difference_diagram(num_datasets=5, **kwargs)
