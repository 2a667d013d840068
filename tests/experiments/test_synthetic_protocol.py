import numpy as np
import pytest

from keras_ils import tuning
from keras_ils.experiments import synthetic_protocol

import reference


@pytest.mark.parametrize("seed", [0, 1])
def test_scores_against_reference_and_the_dense_and_sparse_accuracies(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, 3000)
    logits = (rng.normal(size=(3000, 3)) * (1 + seed) + 2 * np.eye(3)[labels]).astype(np.float32)
    dense = rng.random(3000) < 0.8
    result = synthetic_protocol.scores(logits, labels, dense)
    assert tuple(result) == ("accuracy", "accuracy_dense", "accuracy_sparse", *synthetic_protocol.METRICS[3:])
    probs = reference.softmax(logits)
    correct = probs.argmax(1) == labels
    assert result["accuracy"] == correct.mean()
    assert result["accuracy_dense"] == correct[dense].mean() and result["accuracy_sparse"] == correct[~dense].mean()
    np.testing.assert_allclose(result["nll"], reference.nll(probs, labels), rtol=1e-5)
    np.testing.assert_allclose(result["ece"], reference.ece(probs, labels), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(result["cwece"], reference.classwise_ece(probs, labels), rtol=1e-4, atol=1e-7)
    expected = reference.class_conditional_ece(probs, labels)
    np.testing.assert_allclose(result["class_conditional_ece"], expected, rtol=1e-4)


def test_grids_are_the_appendix_grids_and_counts():
    grid = synthetic_protocol.grids()
    assert grid == {name: tuple(values) for name, values in tuning.GRIDS["synthetic"].items()}
    assert grid["epsilon"] == (0.001, 0.005, 0.01, 0.03, 0.05, 0.07, 0.09, 0.11, 0.13, 0.15, 0.17, 0.19)
    free, taught = synthetic_protocol.model_configs(grid)
    methods = [name for name, _ in free + taught]
    assert [methods.count(m) for m in ("No LS", "Standard LS", "Standard LS-0.2", "ILS1", "ILS2", "ILS")] == [
        1,
        12,
        1,
        5 * 6,
        12 * 4,
        5 * 6 * 4,
    ]


@pytest.mark.parametrize("wins, losses", [(0, 0), (9, 1), (1, 9), (30, 20), (50, 50), (0, 12)])
def test_sign_test_is_scipys_exact_binomial_test(wins, losses):
    scipy_stats = pytest.importorskip("scipy.stats")
    expected = 1.0 if wins + losses == 0 else scipy_stats.binomtest(wins, wins + losses, 0.5).pvalue
    np.testing.assert_allclose(synthetic_protocol.sign_test(wins, losses), expected, rtol=1e-12)


def _fake_results(per_row):
    """`run_replicates`-shaped results whose every row holds the given metric values."""
    metrics = dict.fromkeys(synthetic_protocol.METRICS, 0.5)
    per_replicate = {}
    for method, temps in synthetic_protocol.ROWS:
        key = f"{method}{' +TempS' if temps else ''}"
        values = per_row.get(key, [{}] * 4)
        per_replicate[key] = [dict(metrics, temps=1.0, val_loss=0.5, **v) for v in values]
    per_replicate["ILS1"] = [dict(r, p1=0.8, p2=2.0) for r in per_replicate["ILS1"]]
    curves = {
        t: dict(teacher_sum=[0.0] * 50, student_sum=[[0.0] * 50, [0.0] * 50], count=[0] * 50)
        for t in ("bayes/train", "bayes/test", "no_ls_temps/train", "no_ls_temps/test")
    }
    return dict(per_replicate=per_replicate, curves=curves, ls_epsilons=[0.01, 0.2])


def test_win_rates_count_replicates_in_the_right_direction():
    results = _fake_results(
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


def test_best_smoothing_curve_picks_the_epsilon_whose_students_match_the_teacher():
    results = _fake_results({})
    curve = results["curves"]["bayes/train"]
    curve["count"][10] = 2
    curve["teacher_sum"][10] = 2 * 0.42
    curve["student_sum"][0][10] = 2 * 0.60  # eps 0.01: mean 0.60, far
    curve["student_sum"][1][10] = 2 * 0.45  # eps 0.2: mean 0.45, closest
    out = synthetic_protocol.best_smoothing_curves(results)
    assert out["bayes/train"]["best_epsilon"][10] == 0.2
    assert out["bayes/train"]["best_epsilon"][11] is None and out["bayes/test"]["best_epsilon"][10] is None
    np.testing.assert_allclose(out["bin_centres"][10], 0.2 + 10.5 * 0.8 / 50)
