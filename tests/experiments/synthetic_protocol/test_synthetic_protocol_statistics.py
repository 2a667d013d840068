import numpy as np
import pytest

from keras_ils_experiments import synthetic_protocol


@pytest.mark.parametrize("wins, losses", [(0, 0), (9, 1), (1, 9), (30, 20), (50, 50), (0, 12)])
def test_sign_test_is_scipys_exact_binomial_test(wins, losses):
    scipy_stats = pytest.importorskip("scipy.stats")
    expected = 1.0 if wins + losses == 0 else scipy_stats.binomtest(wins, wins + losses, 0.5).pvalue
    np.testing.assert_allclose(synthetic_protocol.sign_test(wins, losses), expected, rtol=1e-12)


def test_win_rates_count_replicates_in_the_right_direction(fake_results):
    results = fake_results(
        {
            "ILS": [dict(nll=0.4, accuracy=0.9), dict(nll=0.6, accuracy=0.9), dict(nll=0.4), dict(nll=0.5)],
            "Standard LS": [dict(nll=0.5, accuracy=0.8)] * 4,
        }
    )
    claims = {c["claim"]: c for c in synthetic_protocol.summarise(results)["claims"]}
    nll = claims["ILS beats Standard LS in nll"]
    assert (nll["wins"], nll["losses"], nll["ties"], nll["win_rate"]) == (2, 1, 1, 0.5)
    accuracy = claims["ILS beats Standard LS in accuracy"]  # higher is better
    assert (accuracy["wins"], accuracy["losses"]) == (2, 2)
    np.testing.assert_allclose(nll["mean_difference"], np.mean([-0.1, 0.1, -0.1, 0.0]))


def test_best_smoothing_curve_picks_the_epsilon_whose_students_match_the_teacher(fake_results):
    results = fake_results()
    curve = results["curves"]["bayes/train"]
    curve["count"][10] = 2
    curve["teacher_sum"][10] = 2 * 0.42
    curve["student_sum"][0][10] = 2 * 0.60  # eps 0.01: mean 0.60, far
    curve["student_sum"][1][10] = 2 * 0.45  # eps 0.2: mean 0.45, closest
    out = synthetic_protocol.best_smoothing_curves(results)
    assert out["bayes/train"]["best_epsilon"][10] == 0.2
    assert out["bayes/train"]["best_epsilon"][11] is None and out["bayes/test"]["best_epsilon"][10] is None
    np.testing.assert_allclose(out["bin_centres"][10], 0.2 + 10.5 * 0.8 / 50)
