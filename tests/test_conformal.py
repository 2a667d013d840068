"""Split conformal classification: the quantile, the sets against MAPIE, the guarantee, the layer, the scores."""

import math
import warnings
from fractions import Fraction

import keras
import numpy as np
import pytest
import tensorflow as tf
from mapie.conformity_scores import APSConformityScore, LACConformityScore, RAPSConformityScore
from mapie.utils import _compute_classification_quantile
from scipy.special import softmax

import keras_ils
from keras_ils.conformal import (
    METHODS,
    ClassConditionalCoverage,
    ConformalSets,
    MeanSetSize,
    SetCoverage,
    SizeStratifiedCoverage,
    class_conditional_coverage,
    conformal_quantile,
    conformalize,
    coverage,
    fit_conformal,
    mean_set_size,
    minimum_examples,
    size_stratified_coverage,
)


def _outputs(rng, n, k=5, scale=2.0):
    """Logits of a fixed "model" and labels drawn from a softer posterior: over-confident, as networks are."""
    z = scale * rng.normal(size=(n, k))
    labels = (rng.random((n, 1)) < softmax(z / 2.0, axis=1).cumsum(axis=1)).argmax(axis=1)
    return z.astype(np.float32), labels


def _probabilities(logits):
    """The float32 probabilities the layer computes, as float64 (what MAPIE is given)."""
    return keras.ops.convert_to_numpy(keras.ops.softmax(logits)).astype(np.float64)


def _np(x):
    return keras.ops.convert_to_numpy(x)


class TestQuantile:
    @pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2, 0.3, 0.5])
    @pytest.mark.parametrize("n", [19, 20, 99, 100, 501])
    def test_the_finite_sample_order_statistic(self, rng, n, alpha):
        scores = rng.random(n)
        rank = math.ceil((n + 1) * (1 - Fraction(str(alpha))))  # exact decimal arithmetic, written here
        if rank > n:
            pytest.skip("alpha too small for n: the error is tested below")
        assert conformal_quantile(scores, alpha) == np.sort(scores)[rank - 1]
        # MAPIE's quantile: level ceil((n + 1)(1 - alpha)) / n, numpy's "lower" method
        assert conformal_quantile(scores, alpha) == _compute_classification_quantile(scores[:, None], [alpha])[0]

    def test_ties_the_quantile_is_one_of_the_scores(self):
        scores = np.array([0.2, 0.5, 0.5, 0.5, 0.9] * 4)  # n = 20: the ceil(21 * 0.9) = 19th smallest
        assert conformal_quantile(scores, 0.1) == 0.9
        assert conformal_quantile(scores, 0.3) == 0.5  # the 15th smallest, inside the run of 0.5

    @pytest.mark.parametrize("alpha", [0.1, 0.05, 0.3, 0.02])
    def test_minimum_examples_is_where_the_quantile_starts_to_exist(self, rng, alpha):
        n = minimum_examples(alpha)
        assert n == math.ceil(1 / Fraction(str(alpha)) - 1)
        conformal_quantile(rng.random(n), alpha)
        with pytest.raises(ValueError, match=rf"alpha={alpha:g} is too small for {n - 1} calibration examples"):
            conformal_quantile(rng.random(n - 1), alpha)

    @pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5, float("nan"), "0.1", True])
    def test_bad_alpha(self, alpha):
        with pytest.raises(ValueError, match="Invalid value for argument `alpha`"):
            conformal_quantile(np.arange(100.0), alpha)

    @pytest.mark.parametrize("scores", [np.zeros(0), np.zeros((4, 2))])
    def test_empty_or_not_one_dimensional(self, scores):
        with pytest.raises(ValueError, match="Invalid value for argument `scores`"):
            conformal_quantile(scores, 0.1)


def _mapie_sets(method, p_cal, labels, p_test, alpha, k_reg=1, lam=0.01):
    """MAPIE 1.6's quantile and sets on fixed probabilities, through its conformity-score classes.

    `SplitConformalClassifier` always randomises APS's calibration scores
    (it subtracts `u * p_y`), so the plain scores are taken from MAPIE's
    lower-level functions and its sets from `get_prediction_sets` with
    `include_last_label=True`, the sets of Angelopoulos & Bates (2021).
    """
    classes = np.arange(p_cal.shape[1])
    alphas = np.array([alpha])
    score = {"lac": LACConformityScore, "aps": APSConformityScore, "raps": RAPSConformityScore}[method]()
    score.classes = classes
    if method == "lac":
        calibration = score.get_conformity_scores(labels, p_cal, y_enc=labels)
    else:
        calibration, cutoff = score.get_true_label_cumsum_proba(labels, p_cal, classes)
    if method == "raps":
        calibration = score._regularize_conformity_score(np.array([k_reg]), lam, calibration, cutoff)
        score.k_star, score.lambda_star = np.array([k_reg]), lam
    score.quantiles_ = _compute_classification_quantile(calibration, alphas)
    options = {} if method == "lac" else {"include_last_label": True}
    sets = score.get_prediction_sets(p_test[:, :, None], calibration, alphas, cv="prefit", **options)
    return score.quantiles_[0], sets[:, :, 0]


class TestAgainstMapie:
    @pytest.mark.parametrize(
        "method, options, alpha",
        [
            ("lac", {}, 0.05),
            ("lac", {}, 0.2),
            ("aps", {}, 0.05),
            ("aps", {}, 0.2),
            ("raps", {}, 0.1),
            ("raps", {"k_reg": 2, "lam": 0.1}, 0.2),
            ("raps", {"k_reg": 0, "lam": 0.5}, 0.05),
        ],
    )
    def test_quantile_and_sets(self, rng, method, options, alpha):
        logits, labels = _outputs(rng, 700, k=6)
        p = _probabilities(logits)
        layer, fit = fit_conformal(method, logits[:400], labels[:400], alpha=alpha, return_fit=True, **options)
        quantile, sets = _mapie_sets(method, p[:400], labels[:400], p[400:], alpha, **options)
        np.testing.assert_allclose(fit.quantiles, quantile, rtol=1e-6)  # float32 scores against float64
        np.testing.assert_array_equal(_np(layer(logits[400:])), sets)
        assert 0 < sets.sum(axis=1).mean() < 6  # neither empty nor full: the comparison can fail

    def test_probabilities_in_give_the_same_sets(self, rng):
        logits, labels = _outputs(rng, 600)
        p = _probabilities(logits).astype(np.float32)
        from_logits = fit_conformal("aps", logits[:300], labels[:300])
        from_probabilities = fit_conformal("aps", p[:300], labels[:300], from_logits=False)
        np.testing.assert_array_equal(_np(from_probabilities(p[300:])), _np(from_logits(logits[300:])))


def _true_label_rule(method, p, labels, quantiles, uniform=None, k_reg=1, lam=0.01):
    """Whether each set holds its label, written here: the scores of Angelopoulos & Bates (2021), in numpy.

    `p [n, K]` without ties; `quantiles [n]` each example's quantile (its
    label's, for class-conditional sets).
    """
    rows = np.arange(len(labels))
    py = p[rows, labels]
    above = np.where(p > py[:, None], p, 0.0).sum(axis=1)  # the mass of the classes more probable than the label
    rank = (p >= py[:, None]).sum(axis=1)
    if method == "lac":
        return 1 - py <= quantiles
    if method == "top_k":
        return rank <= quantiles
    penalty = lam * np.maximum(rank - k_reg, 0) if method == "raps" else 0.0
    if uniform is not None:
        return above + uniform * py + penalty <= quantiles
    before = lam * np.maximum(rank - 1 - k_reg, 0) if method == "raps" else 0.0
    return above + before < quantiles  # plain sets: the label enters when the classes above stay below q


def _calibration_scores(method, p, labels, uniform=None, k_reg=1, lam=0.01):
    rows = np.arange(len(labels))
    py = p[rows, labels]
    above = np.where(p > py[:, None], p, 0.0).sum(axis=1)
    rank = (p >= py[:, None]).sum(axis=1)
    if method == "lac":
        return 1 - py
    if method == "top_k":
        return rank.astype(float)
    mass = above + (py if uniform is None else uniform * py)
    return mass + (lam * np.maximum(rank - k_reg, 0) if method == "raps" else 0.0)


class TestSets:
    @pytest.mark.parametrize("method", METHODS)
    @pytest.mark.parametrize("class_conditional", [False, True])
    def test_sets_hold_the_label_by_the_written_rule(self, rng, method, class_conditional):
        logits, labels = _outputs(rng, 800, k=4)
        p = _probabilities(logits)
        cal, test, alpha = slice(0, 500), slice(500, None), 0.1
        layer, fit = fit_conformal(
            method, logits[cal], labels[cal], alpha=alpha, class_conditional=class_conditional, return_fit=True
        )
        scores = _calibration_scores(method, p[cal], labels[cal])
        if class_conditional:  # Mondrian: each class's own order statistic
            counts = np.bincount(labels[cal], minlength=4)
            ranks = [math.ceil((counts[j] + 1) * Fraction(9, 10)) for j in range(4)]
            want = [np.sort(scores[labels[cal] == j])[ranks[j] - 1] for j in range(4)]
        else:
            want = [np.sort(scores)[math.ceil(501 * Fraction(9, 10)) - 1]] * 4
        np.testing.assert_allclose(fit.quantiles, want, rtol=1e-6)
        held = _np(layer(logits[test]))[np.arange(300), labels[test]] == 1
        want_held = _true_label_rule(method, p[test], labels[test], fit.quantiles[labels[test]])
        np.testing.assert_array_equal(held, want_held)

    def test_top_k_sets_are_the_top_classes(self, rng):
        logits, labels = _outputs(rng, 600)
        layer, fit = fit_conformal("top_k", logits[:300], labels[:300], alpha=0.2, return_fit=True)
        k = int(fit.quantiles[0])
        sets = _np(layer(logits[300:]))
        top = np.argsort(-logits[300:], axis=1)[:, :k]
        np.testing.assert_array_equal(sets, np.eye(5)[top].sum(axis=1))

    @pytest.mark.parametrize("method", ["aps", "raps"])
    def test_plain_sets_are_never_empty_and_nested_in_the_quantile(self, rng, method):
        logits, labels = _outputs(rng, 600)
        layer = fit_conformal(method, logits[:300], labels[:300], alpha=0.3)
        sets = _np(layer(logits[300:]))
        assert sets.sum(axis=1).min() >= 1
        # classes enter in order of probability: a set is a prefix of the ranking
        ranked = np.take_along_axis(sets, np.argsort(-logits[300:], axis=1), axis=1)
        assert np.all(np.diff(ranked, axis=1) <= 0)

    @pytest.mark.parametrize("method", METHODS)
    def test_tied_probabilities_enter_together_whatever_the_class_order(self, method):
        p = np.array([[0.4, 0.2, 0.2, 0.1, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2], [0.5, 0.25, 0.25, 0.0, 0.0]], "float32")
        layer = ConformalSets(method, from_logits=False)
        layer.build((None, 5))
        permutations = ([4, 3, 2, 1, 0], [2, 0, 4, 1, 3])
        for q in (0.3, 0.55, 0.8, 2.0, 3.0):
            layer.set_weights([np.full(5, q)])
            every = _np(layer(np.concatenate([p] + [p[:, permutation] for permutation in permutations])))
            sets = every[:3]
            for i, permutation in enumerate(permutations):
                np.testing.assert_array_equal(every[3 * (i + 1) : 3 * (i + 2)], sets[:, permutation])
            for row, members in zip(p, sets, strict=True):  # equal probabilities, equal membership
                for value in np.unique(row):
                    assert len(np.unique(members[row == value])) == 1

    def test_aps_with_ties_by_hand(self):
        layer = ConformalSets("aps", from_logits=False)
        layer.build((None, 4))
        layer.set_weights([np.full(4, 0.6)])
        # 0.4 enters (0 above < 0.6), the tied 0.25s enter together (0.4 above), 0.1 does not (0.9 above)
        np.testing.assert_array_equal(_np(layer(np.array([[0.25, 0.4, 0.1, 0.25]]))), [[1, 1, 0, 1]])

    def test_randomized_sets_draw_per_call_and_replay_with_the_seed(self, rng):
        logits, labels = _outputs(rng, 600)
        layer = fit_conformal("aps", logits[:300], labels[:300], alpha=0.5, randomized=True, seed=3)
        first, second = _np(layer(logits[300:])), _np(layer(logits[300:]))
        assert np.any(first != second)
        again = fit_conformal("aps", logits[:300], labels[:300], alpha=0.5, randomized=True, seed=3)
        np.testing.assert_array_equal(_np(again(logits[300:])), first)
        assert first.sum(axis=1).min() == 0  # randomised sets may be empty

    def test_randomized_rule_with_the_layers_uniform_numbers(self, rng):
        logits, labels = _outputs(rng, 500)
        layer, fit = fit_conformal("raps", logits[:300], labels[:300], randomized=True, seed=0, return_fit=True)
        generator = keras.random.SeedGenerator(0)  # the layer's draws, replayed from the same seed
        uniform = _np(keras.random.uniform((200, 1), seed=generator))[:, 0]
        held = _np(layer(logits[300:]))[np.arange(200), labels[300:]] == 1
        want = _true_label_rule("raps", _probabilities(logits[300:]), labels[300:], fit.quantiles[0], uniform)
        assert np.mean(held == want) > 0.99  # float32 against float64 at a few boundaries at most


class TestGuarantee:
    """Over 500 random calibration/test splits of one fixed model's outputs, the mean coverage is 1 - alpha.

    With `n` calibration examples and continuous scores, the expected
    coverage lies in `[1 - alpha, 1 - alpha + 1 / (n + 1)]`. The tolerance is
    4 Monte Carlo standard errors of the mean over the splits (the splits'
    own standard deviation over sqrt(500), about 0.001 here). The splits are
    vectorised: the package scores every example once (the fitted layer's
    `class_scores`, the uniform numbers drawn once per example), and each
    split's quantile is the package's `conformal_quantile`.
    """

    @pytest.mark.parametrize(
        "method, randomized, exact",
        [
            ("lac", False, True),
            ("aps", True, True),
            ("raps", True, True),
            ("aps", False, False),
            ("top_k", False, False),
        ],
    )
    def test_mean_coverage_over_500_splits(self, method, randomized, exact):
        rng = np.random.default_rng(7)
        n_pool, n, alpha, num_splits = 1000, 200, 0.1, 500
        logits, labels = _outputs(rng, n_pool, k=10)
        layer = fit_conformal(method, logits, labels, **({"randomized": True, "seed": 0} if randomized else {}))
        uniform = rng.random((n_pool, 1)).astype(np.float32) if randomized else None
        scores = _np(layer.class_scores(logits, uniform))[np.arange(n_pool), labels].astype(np.float64)
        order = np.argsort(rng.random((num_splits, n_pool)), axis=1)
        quantiles = np.array([conformal_quantile(scores[o[:n]], alpha) for o in order])[:, None]
        test = order[:, n:]
        if method == "aps" and not randomized:  # the label is in a plain set when the classes above stay below q
            held = _np(layer.ranked(logits).mass_above)[np.arange(n_pool), labels][test] < quantiles
        else:
            held = scores[test] <= quantiles
        per_split = held.mean(axis=1)
        mean, tolerance = per_split.mean(), 4 * per_split.std(ddof=1) / np.sqrt(num_splits)
        assert mean >= 1 - alpha - tolerance
        if exact:
            assert mean <= 1 - alpha + 1 / (n + 1) + tolerance
        else:
            assert mean > 1 - alpha + 1 / (n + 1)  # plain APS and top-k over-cover: the bound is one-sided

    def test_class_conditional_coverage_within_every_class(self):
        rng = np.random.default_rng(8)
        n_pool, n, alpha, num_splits, k = 1200, 600, 0.1, 500, 3
        logits, labels = _outputs(rng, n_pool, k=k)
        layer = fit_conformal("lac", logits, labels, class_conditional=True)
        scores = _np(layer.class_scores(logits))[np.arange(n_pool), labels].astype(np.float64)
        order = np.argsort(rng.random((num_splits, n_pool)), axis=1)
        coverages, bounds = np.zeros((num_splits, k)), np.zeros((num_splits, k))
        for s, o in enumerate(order):
            cal, test = o[:n], o[n:]
            for j in range(k):
                mine = labels[cal] == j
                q = conformal_quantile(scores[cal][mine], alpha)
                coverages[s, j] = np.mean(scores[test][labels[test] == j] <= q)
                bounds[s, j] = 1 / (mine.sum() + 1)
        tolerance = 4 * coverages.std(axis=0, ddof=1) / np.sqrt(num_splits)
        assert np.all(coverages.mean(axis=0) >= 1 - alpha - tolerance)
        assert np.all(coverages.mean(axis=0) <= 1 - alpha + bounds.mean(axis=0) + tolerance)


class TestErrors:
    def test_alpha_too_small_names_what_it_needs(self, rng):
        logits, labels = _outputs(rng, 50)
        with pytest.raises(ValueError, match=r"alpha=0.01 is too small for 50 calibration examples.*from n = 99"):
            fit_conformal("lac", logits, labels, alpha=0.01)

    def test_class_conditional_names_the_rare_class(self, rng):
        logits, labels = _outputs(rng, 200, k=3)
        labels[labels == 2] = 0
        labels[:3] = 2
        with pytest.raises(ValueError, match=r"too small for 3 calibration examples of class 2"):
            fit_conformal("lac", logits, labels, alpha=0.1, class_conditional=True)

    @pytest.mark.parametrize("alpha", [0.0, 1.0, 1.2, None])
    def test_bad_alpha(self, rng, alpha):
        logits, labels = _outputs(rng, 50)
        with pytest.raises(ValueError, match="Invalid value for argument `alpha`"):
            fit_conformal("lac", logits, labels, alpha=alpha)

    def test_empty_and_wrong_widths(self, rng):
        logits, labels = _outputs(rng, 50)
        with pytest.raises(ValueError, match=r"`outputs` must have shape \[n >= 1, K >= 2\]"):
            fit_conformal("aps", logits[:0], labels[:0])
        with pytest.raises(ValueError, match=r"`outputs` must have shape \[n >= 1, K >= 2\]"):
            fit_conformal("aps", logits[:, :1], labels * 0)
        with pytest.raises(ValueError, match="the same length"):
            fit_conformal("aps", logits, labels[:-1])
        with pytest.raises(ValueError, match="labels"):
            fit_conformal("aps", logits, labels + 5)
        layer = fit_conformal("aps", logits, labels)
        with pytest.raises(ValueError, match="incompatible with the layer"):
            layer(np.zeros((3, 4), "float32"))

    def test_methods_and_options(self, rng):
        logits, labels = _outputs(rng, 50)
        with pytest.raises(ValueError, match="Invalid value for argument `method`"):
            fit_conformal("thr", logits, labels)
        with pytest.raises(ValueError, match=r"`k_reg` is an option of method='raps', not of method='aps'"):
            fit_conformal("aps", logits, labels, k_reg=2)
        with pytest.raises(ValueError, match=r"`randomized` is an option of method='aps' or 'raps'"):
            fit_conformal("lac", logits, labels, randomized=True)
        with pytest.raises(ValueError, match="Invalid value for argument `lam`"):
            fit_conformal("raps", logits, labels, lam=-1.0)
        with pytest.raises(ValueError, match="Invalid value for argument `k_reg`"):
            fit_conformal("raps", logits, labels, k_reg=1.5)
        with pytest.raises(TypeError, match="Unknown option `include_last_label`"):
            fit_conformal("aps", logits, labels, include_last_label=False)
        with pytest.raises(ValueError, match=r"`randomized` is an option of method='aps' or 'raps'"):
            ConformalSets("top_k", randomized=True)
        with pytest.raises(ValueError, match="Invalid value for argument `class_conditional`"):
            fit_conformal("lac", logits, labels, class_conditional="yes")

    def test_declared_kind_contradicted(self, rng):
        logits, labels = _outputs(rng, 50)
        with pytest.raises(ValueError, match="declared as logits"):
            fit_conformal("lac", _probabilities(logits), labels)
        with pytest.raises(ValueError, match="declared as probabilities"):
            fit_conformal("lac", logits, labels, from_logits=False)

    @pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
    def test_values_that_are_not_finite_in_every_function(self, rng, value):
        """Every conformal function refuses NaN and inf where they arrive on the host, naming the argument: a NaN
        score sorted last and became the quantile (sets that covered 0 %)."""
        logits, labels = _outputs(rng, 60, k=3)
        scores = np.linspace(0.0, 1.0, 30)
        scores[7] = value
        with pytest.raises(ValueError, match=r"argument `scores`. Expected finite .* \(first at index 7\)"):
            conformal_quantile(scores, alpha=0.1)
        logits[4, 1] = value
        for method in METHODS:
            with pytest.raises(ValueError, match="`outputs` must be finite. Received 1 NaN or infinite"):
                fit_conformal(method, logits, labels)
        layer = fit_conformal("lac", logits[5:], labels[5:])
        with pytest.raises(ValueError, match="argument `inputs`. Expected finite logits"):
            layer(logits[:5])
        sets = np.ones((4, 3))
        sets[2, 0] = value
        for score in (coverage, size_stratified_coverage, class_conditional_coverage):
            counts = "1 NaN and 0 inf" if np.isnan(value) else "0 NaN and 1 inf"
            with pytest.raises(ValueError, match=f"argument `sets`. Expected 0/1 masks .* Received {counts} values"):
                score(sets, [0, 1, 2, 0])
        with pytest.raises(ValueError, match="argument `sets`"):
            mean_set_size(sets)

    def test_a_model_whose_outputs_are_not_finite(self, model_and_data):
        logit_model, _, x, y = model_and_data
        broken = keras.models.clone_model(logit_model)
        broken.set_weights([np.full((6, 3), np.nan, "float32"), np.zeros(3, "float32")])
        with pytest.raises(ValueError, match="argument `model`: its outputs on `calibration_data` must be finite"):
            conformalize(broken, (x[:50], y[:50]))

    @pytest.mark.parametrize("fitted_on", ["probabilities", "logits"])
    def test_sets_given_the_other_kind_are_refused(self, rng, fitted_on):
        """Sets fitted on probabilities then given logits covered 0.76 where 0.9 was stated (and the reverse,
        everything): host values of the other kind are refused, naming both kinds."""
        logits, labels = _outputs(rng, 2000, k=4)
        kinds = {"logits": logits, "probabilities": _probabilities(logits)}
        given = "logits" if fitted_on == "probabilities" else "probabilities"
        layer = fit_conformal("lac", kinds[fitted_on][:1000], labels[:1000], from_logits=fitted_on == "logits")
        with pytest.raises(ValueError, match=f"made for {fitted_on} .* look like {given}"):
            layer(kinds[given][1000:])
        assert coverage(_np(layer(kinds[fitted_on][1000:])), labels[1000:]) >= 0.88  # the right kind: ~0.9

    def test_conformalize_refuses_a_declaration_its_model_contradicts(self, model_and_data):
        logit_model, _, x, y = model_and_data
        with pytest.raises(ValueError, match=r"declared as probabilities \(`from_logits=False`\)"):
            conformalize(logit_model, (x[:100], y[:100]), from_logits=False)


@pytest.fixture
def model_and_data(rng):
    x = rng.normal(size=(400, 6)).astype("float32")
    y = (x[:, :3].argmax(axis=1) + (rng.random(400) < 0.2)) % 3
    logit_model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3, name="logits")])
    logit_model.layers[0].set_weights([rng.normal(size=(6, 3)).astype("float32"), np.zeros(3, "float32")])
    softmax_model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3, activation="softmax")])
    softmax_model.set_weights(logit_model.get_weights())
    return logit_model, softmax_model, x, y


class TestConformalize:
    def test_softmax_and_logit_models_give_the_same_sets(self, model_and_data):
        logit_model, softmax_model, x, y = model_and_data
        a, fit = conformalize(logit_model, (x[:200], y[:200]), alpha=0.2, method="aps", return_fit=True)
        b = conformalize(softmax_model, (x[:200], y[:200]), alpha=0.2, method="aps")
        assert a.layers[-1].from_logits and not b.layers[-1].from_logits
        np.testing.assert_array_equal(_np(a(x[200:])), _np(b(x[200:])))
        layer = fit_conformal("aps", _np(logit_model(x[:200])), y[:200], alpha=0.2)
        np.testing.assert_array_equal(_np(a(x[200:])), _np(layer(logit_model(x[200:]))))
        assert fit.num_examples == 200 and a.name.endswith("_conformal")

    def test_a_dataset_and_streaming_metrics(self, model_and_data):
        logit_model, _, x, y = model_and_data
        ds = tf.data.Dataset.from_tensor_slices((x[:200], y[:200])).batch(32)
        sets = conformalize(logit_model, ds, alpha=0.1, method="lac")
        metrics = [SetCoverage(), MeanSetSize(), SizeStratifiedCoverage(3), ClassConditionalCoverage(3)]
        for start in range(200, 400, 64):
            for metric in metrics:
                metric.update_state(y[start : start + 64], sets(x[start : start + 64]))
        masks = _np(sets(x[200:]))
        want = [coverage(masks, y[200:]), mean_set_size(masks)]
        want += [np.nanmin(f(masks, y[200:])) for f in (size_stratified_coverage, class_conditional_coverage)]
        np.testing.assert_allclose([float(m.result()) for m in metrics], want, rtol=1e-5)

    @pytest.mark.parametrize(
        "data, received",
        [((np.zeros((0, 6)), np.zeros(0)), "a tuple"), (tf.data.Dataset.range(0).map(lambda i: (i, i)), "yields no")],
    )
    def test_empty_calibration_data(self, model_and_data, data, received):
        with pytest.raises(ValueError, match=f"Invalid value for argument `calibration_data`.*{received}"):
            conformalize(model_and_data[0], data)

    def test_arguments_checked_before_predicting(self, model_and_data):
        logit_model, _, x, y = model_and_data
        with pytest.raises(ValueError, match="Invalid value for argument `alpha`"):
            conformalize(logit_model, (x, y), alpha=2.0)

    def test_exported_at_top_level(self):
        assert keras_ils.conformal.conformalize is conformalize


class TestLayer:
    def test_config_round_trip_and_registration(self):
        layer = ConformalSets("raps", randomized=True, k_reg=2, lam=0.2, from_logits=False, seed=5)
        config = layer.get_config()
        assert ConformalSets.from_config(config).get_config() == config
        rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert type(rebuilt) is ConformalSets and rebuilt.get_config() == config

    def test_keras_file_round_trip(self, model_and_data, tmp_path):
        logit_model, _, x, y = model_and_data
        for method, randomized in (("aps", False), ("raps", True)):
            sets = conformalize(logit_model, (x[:200], y[:200]), method=method, randomized=randomized, seed=1)
            path = str(tmp_path / f"{method}.keras")
            sets.save(path)
            loaded = keras.saving.load_model(path)
            assert loaded.layers[-1].get_config() == sets.layers[-1].get_config()
            np.testing.assert_array_equal(loaded.layers[-1].get_weights()[0], sets.layers[-1].get_weights()[0])
            if randomized:  # a fresh generator from the same seed replays the same draws
                sets = keras.saving.load_model(path)
            got = loaded(tf.constant(x[200:]))  # one plain tensor in, one out
            assert keras.ops.is_tensor(got) and keras.backend.standardize_dtype(got.dtype) == "float32"
            np.testing.assert_array_equal(_np(got), _np(sets(x[200:])))

    def test_float32_under_mixed_precision(self, rng):
        logits, labels = _outputs(rng, 300)
        want = _np(fit_conformal("aps", logits[:200], labels[:200])(logits[200:]))
        policy = keras.config.dtype_policy()
        keras.config.set_dtype_policy("mixed_bfloat16")
        try:
            layer = fit_conformal("aps", logits[:200], labels[:200])
            got = layer(keras.ops.convert_to_tensor(logits[200:]))
        finally:
            keras.config.set_dtype_policy(policy)
        assert layer.compute_dtype == "float32" and keras.backend.standardize_dtype(got.dtype) == "float32"
        np.testing.assert_array_equal(_np(got), want)

    @pytest.mark.tensorflow_only
    @pytest.mark.slow  # about 4 s on an idle core (the export traces the model); the .keras round trip runs by default
    def test_export_serves_a_plain_tensor(self, model_and_data, tmp_path):
        logit_model, _, x, y = model_and_data
        sets = conformalize(logit_model, (x[:200], y[:200]), method="raps")
        want = sets.predict(x[200:], verbose=0)
        sets.export(str(tmp_path / "served"), verbose=False)
        loaded = tf.saved_model.load(str(tmp_path / "served"))
        served = loaded.serve(tf.constant(x[200:]))
        assert isinstance(served, tf.Tensor) and served.dtype == tf.float32
        np.testing.assert_array_equal(served.numpy(), want)


class TestScores:
    def test_numpy_scores_by_their_formulas(self, rng):
        sets = (rng.random((300, 4)) < 0.4).astype(np.float32)
        labels = rng.integers(0, 4, 300)
        held = sets[np.arange(300), labels]
        sizes = sets.sum(axis=1)
        assert coverage(sets, labels) == pytest.approx(held.mean())
        assert mean_set_size(sets) == pytest.approx(sizes.mean())
        by_size = size_stratified_coverage(sets, labels)
        for s in range(5):
            expected = held[sizes == s].mean() if np.any(sizes == s) else np.nan
            np.testing.assert_allclose(by_size[s], expected)
        by_class = class_conditional_coverage(sets, np.eye(4)[labels])  # one-hot labels too
        np.testing.assert_allclose(by_class, [held[labels == j].mean() for j in range(4)])

    def test_metrics_stream_to_the_whole_sets_value(self, rng):
        sets = (rng.random((257, 4)) < 0.4).astype(np.float32)
        labels = rng.integers(0, 4, 257)
        weights = rng.random(257)
        metrics = [SetCoverage(), MeanSetSize(), SizeStratifiedCoverage(4), ClassConditionalCoverage(4)]
        for start in range(0, 257, 50):
            for metric in metrics:
                metric.update_state(labels[start : start + 50], sets[start : start + 50], weights[start : start + 50])
        held, sizes = sets[np.arange(257), labels], sets.sum(axis=1)
        assert float(metrics[0].result()) == pytest.approx(np.average(held, weights=weights), rel=1e-5)
        assert float(metrics[1].result()) == pytest.approx(np.average(sizes, weights=weights), rel=1e-5)
        strata = [np.average(held[sizes == s], weights=weights[sizes == s]) for s in range(5) if np.any(sizes == s)]
        assert float(metrics[2].result()) == pytest.approx(min(strata), rel=1e-5)
        classes = [np.average(held[labels == j], weights=weights[labels == j]) for j in range(4)]
        assert float(metrics[3].result()) == pytest.approx(min(classes), rel=1e-5)
        for metric in metrics:
            metric.reset_state()
            assert float(metric.result()) == 0.0

    @pytest.mark.parametrize(
        "metric", [SetCoverage(), MeanSetSize(), SizeStratifiedCoverage(3), ClassConditionalCoverage(4)]
    )
    def test_metric_config_round_trip(self, metric):
        config = metric.get_config()
        assert type(metric).from_config(config).get_config() == config
        rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
        assert type(rebuilt) is type(metric) and rebuilt.get_config() == config

    def test_smaller_sets_are_better(self):
        assert MeanSetSize()._direction == "down"

    def test_bad_sets(self):
        with pytest.raises(ValueError, match="Expected 0/1 masks"):
            coverage([[0.2, 0.8]], [1])
        with pytest.raises(ValueError, match=r"`sets` must have shape \[n >= 1, K >= 2\]"):
            mean_set_size(np.zeros((0, 3)))
        with pytest.raises(ValueError, match="the same length"):
            coverage(np.ones((3, 2)), [0, 1])
        with pytest.raises(ValueError, match="num_classes=3 but `y_pred` has 4"):
            SizeStratifiedCoverage(3).update_state([0], np.ones((1, 4)))
        with pytest.raises(ValueError, match="Invalid value for argument `num_classes`"):
            ClassConditionalCoverage(1)

    @pytest.mark.parametrize("metric", [SetCoverage, MeanSetSize, SizeStratifiedCoverage, ClassConditionalCoverage])
    def test_scores_given_to_a_set_metric_are_refused(self, metric):
        """Logits are not sets: refused at once when eager, at the end of the epoch in a compiled `fit`."""
        made = lambda: metric(3) if metric in (SizeStratifiedCoverage, ClassConditionalCoverage) else metric()  # noqa: E731
        with pytest.raises(ValueError, match=r"expects 0/1 masks.*Received: values in \[0, 5\]"):
            made().update_state([0, 1], [[0.3, 2.0, 5.0], [1, 0, 0]])
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile("sgd", "sparse_categorical_crossentropy", metrics=[made()])
        x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32") * 10
        with pytest.raises(ValueError, match="expects 0/1 masks"):
            model.fit(x, np.arange(16) % 3, epochs=1, verbose=0)


def test_quiet(rng):
    logits, labels = _outputs(rng, 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_conformal("raps", logits, labels)
