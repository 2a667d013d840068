"""The verdict: its statistics against scipy and a two-way ANOVA written out here, Holm's levels against a hand-written
step-down, the unit (one test split counted once, the seeds' spread included), the sentences' consistency."""

import json
import re

import numpy as np
import pytest
from scipy import stats

from keras_ils.comparison.reporting import examples, verdict

REF = verdict.REFERENCE


def _seeds(rng, lengths, scale=0.3):
    return [rng.gamma(2.0, scale, n) for n in lengths]


def _t(mean, se, df, confidence=0.95):
    q = stats.t.ppf(0.5 + confidence / 2, df)
    return mean, se, (mean - q * se, mean + q * se), 2 * stats.t.sf(abs(mean / se), df)


def _crossed(row, ref, confidence=0.95):
    """One test split scored by every seed: the two-way ANOVA without replication (seeds x examples). The variance
    of the grand mean under crossed random effects is (MS_seed + MS_example - MS_residual) / (S n); the example
    term kept >= 0; Student t on S - 1 degrees of freedom."""
    d = np.stack([r - f for r, f in zip(row, ref, strict=True)])
    s, n = d.shape
    grand, by_seed, by_example = d.mean(), d.mean(axis=1), d.mean(axis=0)
    ms_seed = n * ((by_seed - grand) ** 2).sum() / (s - 1)
    ms_example = s * ((by_example - grand) ** 2).sum() / (n - 1)
    ms_residual = ((d - by_seed[:, None] - by_example[None, :] + grand) ** 2).sum() / ((s - 1) * (n - 1))
    return _t(grand, np.sqrt((ms_seed + max(ms_example - ms_residual, 0.0)) / (s * n)), s - 1, confidence)


def _seed_means_t(row, ref, confidence=0.95):
    """Each seed its own test examples: scipy's one-sample t-test on the seed means."""
    means = [(r - f).mean() for r, f in zip(row, ref, strict=True)]
    test = stats.ttest_1samp(means, 0.0)
    return np.mean(means), stats.sem(means), tuple(test.confidence_interval(confidence)), test.pvalue


def _pooled(row, ref):
    """The verdict before issue 38: differences pooled over seeds, SE blocked by seed on N - S df."""
    d = [r - f for r, f in zip(row, ref, strict=True)]
    big_n = sum(len(x) for x in d)
    se = np.sqrt(sum(len(x) * np.var(x, ddof=1) for x in d)) / big_n
    return _t(np.concatenate(d).mean(), se, big_n - len(d))


def _holm_by_hand(pvalues, alpha):
    """Holm's step-down: walk the sorted p-values, reject while p_(j) <= alpha / (m - j + 1), stop at the first
    that is not; the adjusted p-values with their running maximum; and the level each row was tested at (the rows
    after the stop share the level of the step that stopped)."""
    m, order = len(pvalues), sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    rejected, adjusted, levels, running = [False] * m, [0.0] * m, [0.0] * m, 0.0
    stop = None
    for j, i in enumerate(order, start=1):
        if stop is None and pvalues[i] <= alpha / (m - j + 1):
            rejected[i] = True
        elif stop is None:
            stop = j
        levels[i] = alpha / (m - (j if stop is None else stop) + 1)
        running = max(running, min(1.0, (m - j + 1) * pvalues[i]))
        adjusted[i] = running
    return rejected, adjusted, levels


def _assert_statistics(got, mean, se, interval, p):
    """A verdict row's difference, standard error, interval and p-value against a reference computation."""
    assert got["difference"] == pytest.approx(mean, rel=1e-12)
    assert got["standard_error"] == pytest.approx(se, rel=1e-10)
    assert got["interval"] == pytest.approx(interval, rel=1e-9)
    assert got["pvalue"] == pytest.approx(p, rel=1e-8)


class TestPairedStatistics:
    @pytest.mark.parametrize("seeds", [3, 10])
    def test_one_test_split_against_the_two_way_anova(self, seeds):
        rng = np.random.default_rng(seeds)
        n = 400
        ref = [rng.gamma(2.0, 0.3, n) for _ in range(seeds)]
        example_effect = rng.normal(0, 0.05, n)  # shared by every seed that scores the example
        row = [f - 0.01 + rng.normal(0, 0.01) + example_effect + rng.normal(0, 0.1, n) for f in ref]
        found = verdict.paired_verdict({REF: ref, "ILS": row}, REF, {"f": ["ILS"]}, shared_examples=True)
        got = found["families"]["f"]["rows"]["ILS"]
        _assert_statistics(got, *_crossed(row, ref))
        assert got["df"] == seeds - 1
        assert got["seed_differences"] == pytest.approx([(r - f).mean() for r, f in zip(row, ref, strict=True)])
        assert got["nll"] == pytest.approx(np.mean(row)) and found["reference_nll"] == pytest.approx(np.mean(ref))
        assert found["examples"] == [n] * seeds and found["seeds"] == seeds and found["shared_examples"] is True

    def test_each_seed_its_own_examples_is_the_t_test_on_the_seed_means(self):
        rng = np.random.default_rng(0)
        ref = _seeds(rng, (400, 350, 500))
        shifts = (0.2, -0.15, 0.05)  # a seed-level shift common to all its examples
        row = [f + s - 0.01 + rng.normal(0, 0.1, len(f)) for f, s in zip(ref, shifts, strict=True)]
        found = verdict.paired_verdict({REF: ref, "ILS": row}, REF, {"f": ["ILS"]}, shared_examples=False)
        got = found["families"]["f"]["rows"]["ILS"]
        _assert_statistics(got, *_seed_means_t(row, ref))
        assert got["nll"] == pytest.approx(np.mean([r.mean() for r in row]))  # each training run counts once
        # the shifts are training noise: the seeds' spread is in the interval, as the pooled SE of old left out
        assert got["interval"][1] - got["interval"][0] > 50 * np.diff(_pooled(row, ref)[2])[0]

    def test_unknown_sharing_matches_seeds_of_equal_length_by_position(self):
        rng = np.random.default_rng(6)
        ref = _seeds(rng, (300, 300, 300))
        row = [f - 0.02 + rng.normal(0, 0.1, 300) for f in ref]
        nll, groups = {REF: ref, "LS": row}, {"f": ["LS"]}
        unknown = verdict.paired_verdict(nll, REF, groups)["families"]["f"]["rows"]["LS"]
        assert unknown == verdict.paired_verdict(nll, REF, groups, shared_examples=True)["families"]["f"]["rows"]["LS"]
        nll = {REF: [ref[0], ref[1][:200]], "LS": [row[0], row[1][:200]]}
        unknown = verdict.paired_verdict(nll, REF, groups)["families"]["f"]["rows"]["LS"]
        own = verdict.paired_verdict(nll, REF, groups, shared_examples=False)["families"]["f"]["rows"]["LS"]
        assert unknown == own

    @pytest.mark.parametrize("confidence", [0.95, 0.9])
    def test_one_seed_is_scipys_paired_t_test(self, confidence):
        rng = np.random.default_rng(1)
        ref = _seeds(rng, (300,))
        row = [ref[0] - 0.01 + rng.normal(0, 0.1, 300)]
        found = verdict.paired_verdict({REF: ref, "LS": row}, REF, {"f": ["LS"]}, confidence=confidence)
        got = found["families"]["f"]["rows"]["LS"]
        want = stats.ttest_rel(row[0], ref[0])
        assert got["pvalue"] == pytest.approx(want.pvalue, rel=1e-8)
        assert got["interval"] == pytest.approx(tuple(want.confidence_interval(confidence)), rel=1e-8)
        assert got["adjusted_interval"] == pytest.approx(got["interval"], rel=1e-9)  # one row: Holm changes nothing
        assert got["holm_pvalue"] == got["pvalue"] and got["significant"] == (want.pvalue <= 1 - confidence)
        assert got["training_share"] is None and got["seeds_to_halve"] is None and got["df"] == 299

    def test_a_row_equal_to_the_reference_or_shifted_by_a_constant(self):
        ref = [np.linspace(0.1, 2.0, 50)]
        rounded = [(ref[0] * (1 + 5e-7)).astype(np.float32)]  # the same map, computed in another order
        nll = {REF: ref, "A": ref, "B": [ref[0] - 0.1], "C": rounded}
        found = verdict.paired_verdict(nll, REF, {"f": ["A", "B", "C"]})
        rows = found["families"]["f"]["rows"]
        assert stats.ttest_rel(rounded[0], ref[0]).pvalue < 0.05  # rounding alone would look significant
        for same in ("A", "C"):  # no difference at all
            assert rows[same]["pvalue"] == 1.0 and rows[same]["difference"] == 0.0 and not rows[same]["significant"]
        assert rows["B"]["pvalue"] == 0.0 and rows["B"]["interval"] == pytest.approx([-0.1, -0.1])


class TestUnit:
    """Issue 38: an example scored by every seed counts once, and the seeds' spread is in the interval."""

    def test_a_fixed_test_split_counts_each_example_once(self):
        rng = np.random.default_rng(7)
        n, seeds = 400, 10
        ref = [rng.gamma(2.0, 0.3, n)] * seeds  # one test split: the same examples in every seed
        hard = rng.normal(0, 0.2, n)  # each example's own difference, the same whichever seed scores it
        row = [ref[0] + hard + rng.normal(0, 0.02, n) for _ in range(seeds)]
        found = verdict.paired_verdict({REF: ref, "LS": row}, REF, {"f": ["LS"]}, shared_examples=True)
        got = found["families"]["f"]["rows"]["LS"]
        averaged = np.mean([r - f for r, f in zip(row, ref, strict=True)], axis=0)  # each example's mean over seeds
        assert got["standard_error"] == pytest.approx(stats.sem(averaged), rel=0.1)  # n examples, not n x seeds
        assert got["standard_error"] > 2.5 * _pooled(row, ref)[1]  # the pooled SE of old counted each one 10 times

    def test_false_positives_stay_at_the_level_when_nothing_differs(self):
        """An A/A test in miniature: crossed seed x example noise, no difference in expectation, 3 seeds."""
        rng = np.random.default_rng(8)
        n, seeds, replicates = 300, 3, 400
        called, called_before = 0, 0
        for _ in range(replicates):
            ref = [rng.gamma(2.0, 0.3, n)] * seeds
            example = rng.normal(0, 0.1, n)
            row = [ref[0] + rng.normal(0, 0.01) + example + rng.normal(0, 0.1, n) for _ in range(seeds)]
            found = verdict.paired_verdict({REF: ref, "A": row}, REF, {"f": ["A"]}, shared_examples=True)
            called += found["families"]["f"]["rows"]["A"]["pvalue"] <= 0.05
            called_before += _pooled(row, ref)[3] <= 0.05
        assert called / replicates <= 0.05
        assert called_before / replicates > 0.3  # the verdict before issue 38 on the same draws

    def test_every_seed_mean_lies_inside_the_interval_of_three_seeds(self):
        rng = np.random.default_rng(9)
        ref = [rng.gamma(2.0, 0.3, 576)] * 3
        row = [ref[0] + shift + rng.normal(0, 0.05, 576) for shift in (-0.055, -0.04, -0.014)]
        found = verdict.paired_verdict({REF: ref, "LS": row}, REF, {"f": ["LS"]}, shared_examples=True)
        got = found["families"]["f"]["rows"]["LS"]
        low, high = got["interval"]
        assert all(low < d < high for d in got["seed_differences"])
        low, high = _pooled(row, ref)[2]  # before: one seed's mean outside its interval, as issue 38 found
        assert not all(low < d < high for d in got["seed_differences"])
        assert got["pvalue"] >= stats.ttest_1samp(got["seed_differences"], 0.0).pvalue  # the example term adds

    @pytest.mark.parametrize("shared", [True, False])
    def test_the_training_share_and_the_seeds_that_would_halve_the_interval(self, shared):
        rng = np.random.default_rng(10)
        n, seeds = 500, 3
        base = rng.gamma(2.0, 0.3, n)
        ref = [base] * seeds if shared else _seeds(rng, (n,) * seeds)
        example = rng.normal(0, 0.1, n)
        row = [f + rng.normal(0, 0.02) + example + rng.normal(0, 0.1, n) for f in ref]
        got = verdict.paired_verdict({REF: ref, "A": row}, REF, {"f": ["A"]}, shared_examples=shared)
        got = got["families"]["f"]["rows"]["A"]
        d = np.stack([r - f for r, f in zip(row, ref, strict=True)])
        seed_part = d.mean(axis=1).var(ddof=1) / seeds  # by hand: the seed means' part scales as 1 / seeds
        within = np.mean(d.var(axis=1, ddof=1))
        example_part = max(0.0, (_crossed(row, ref)[1] ** 2 - seed_part)) if shared else 0.0
        noise = within - example_part * n  # the examples' noise in the seed means, not shared between seeds
        share = max(seed_part - noise / n / seeds, 0.0) / (seed_part + example_part)
        assert got["training_share"] == pytest.approx(share, rel=1e-6, abs=1e-12)
        half = stats.t.ppf(0.975, seeds - 1) * np.sqrt(seed_part + example_part)
        want = next(
            (k for k in range(seeds + 1, 1001)
             if stats.t.ppf(0.975, k - 1) * np.sqrt(seed_part * seeds / k + example_part) <= half / 2),
            None,
        )  # fmt: skip
        if stats.norm.ppf(0.975) * np.sqrt(example_part) > half / 2:
            want = None  # the shared test set's own noise: no number of seeds halves the interval
        assert got["seeds_to_halve"] == want


class TestHolm:
    @pytest.mark.parametrize(
        "pvalues",
        [
            [0.01, 0.04, 0.03, 0.005],  # 0.04 alone is below 0.05, but the step-down stopped at 0.03
            [0.2, 0.5, 0.6, 0.001, 0.001],  # ties, and scaled values capped at 1
            [0.04],
        ],
    )
    def test_against_a_hand_written_step_down(self, pvalues):
        rejected, adjusted, _ = _holm_by_hand(pvalues, 0.05)
        got = verdict.holm(pvalues)
        np.testing.assert_allclose(got, adjusted, rtol=1e-12)
        assert (got <= 0.05).tolist() == rejected

    def test_the_monotonicity_step(self):
        got = verdict.holm([0.01, 0.04, 0.03, 0.005])
        # sorted 0.005, 0.01, 0.03, 0.04 scaled by 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> the last becomes 0.06
        np.testing.assert_allclose(got, [0.03, 0.06, 0.06, 0.02])

    def test_the_families_rows_are_corrected_together_with_intervals_at_holms_levels(self):
        rng = np.random.default_rng(2)
        n, seeds = 200, 10
        ref = [rng.gamma(2.0, 0.3, n)] * seeds
        effects = {"A": -0.03, "B": -0.012, "C": -0.006, "D": 0.0, "E": 0.03}
        nll = {REF: ref, **{k: [f + e + rng.normal(0, 0.1, n) for f in ref] for k, e in effects.items()}}
        groups = {"one": ["A", "B", "C"], "two": ["D", "E"]}
        found = verdict.paired_verdict(nll, REF, groups, shared_examples=True)
        calls = set()
        for family, names in groups.items():
            rows = found["families"][family]["rows"]
            raw = {k: _crossed(nll[k], ref) for k in names}
            rejected, adjusted, levels = _holm_by_hand([raw[k][3] for k in names], 0.05)
            assert [rows[k]["holm_pvalue"] for k in names] == pytest.approx(adjusted, rel=1e-8)
            assert [rows[k]["significant"] for k in names] == rejected
            for k, level in zip(names, levels, strict=True):
                mean, se, _, _ = raw[k]
                half = stats.t.ppf(1 - level / 2, seeds - 1) * se
                assert rows[k]["adjusted_interval"] == pytest.approx([mean - half, mean + half], rel=1e-9)
                low, high = rows[k]["adjusted_interval"]
                assert (low > 0 or high < 0) == rows[k]["significant"]  # excludes 0 exactly when Holm rejects
                calls.add(rows[k]["significant"])
        assert calls == {True, False}

    def test_refuses_what_is_not_a_pvalue(self):
        with pytest.raises(ValueError, match="Invalid value for argument `pvalues`"):
            verdict.holm([0.2, 1.5])


def test_grouping_of_realistic_row_names():
    suffixes = ("TempS", "VS", "MS", "Dir", "Histogram", "Isotonic", "Ensemble TS", "Venn-Abers")
    rows = ["No LS", "No LS + TempS", "No LS + VS", "No LS + Dir", "No LS + Ensemble TS", "No LS + Venn-Abers"]
    rows += ["LS", "LS + TempS", "LS + VS", "LS + Dir", "LS + Ensemble TS", "LS + Venn-Abers"]
    rows += ["FLSD-53", "FLSD-53 + TempS", "FLSD-53 + VS", "ILS", "ILS + TempS"]
    assert verdict.verdict_groups(rows, suffixes) == {
        "training methods": ["No LS", "LS", "LS + TempS", "FLSD-53", "FLSD-53 + TempS", "ILS", "ILS + TempS"],
        "post-hoc calibrators": ["No LS + VS", "No LS + Dir", "No LS + Ensemble TS", "No LS + Venn-Abers"],
        "methods with other calibrators": [
            "LS + VS", "LS + Dir", "LS + Ensemble TS", "LS + Venn-Abers", "FLSD-53 + VS"
        ],
    }  # fmt: skip
    # without --calibrators: one family
    assert verdict.verdict_groups(["No LS", REF, "ILS", "ILS + TempS"], suffixes) == {
        "training methods": ["No LS", "ILS", "ILS + TempS"]
    }
    with pytest.raises(ValueError, match="Invalid value for argument `row_names`.*'No LS \\+ TempS'"):
        verdict.verdict_groups(["No LS", "ILS"], suffixes)
    with pytest.raises(ValueError, match="Invalid value for argument `reference`"):
        verdict.verdict_groups(["No LS", "No LS + T"], suffixes, reference="No LS + T")


class TestSentences:
    def _nll(self, effect, seeds=3):
        rng = np.random.default_rng(3)
        ref = _seeds(rng, (2000,) * seeds)
        noisy = {name: [f + e + rng.normal(0, 0.2, 2000) for f in ref] for name, e in effect.items()}
        return {"No LS": [f + 0.05 + rng.normal(0, 0.05, 2000) for f in ref], REF: ref, **noisy}

    def test_a_truly_better_row_is_significant_and_a_null_row_is_not(self):
        nll = self._nll({"ILS + TempS": -0.03, "LS + TempS": 0.0, "No LS + VS": 0.0})
        groups = verdict.verdict_groups(nll, ("TempS", "VS"))
        found = verdict.paired_verdict(nll, REF, groups, shared_examples=False)
        rows = found["families"]["training methods"]["rows"]
        assert rows["ILS + TempS"]["significant"] and rows["ILS + TempS"]["interval"][1] < 0
        assert not rows["LS + TempS"]["significant"] and rows["No LS"]["significant"]  # No LS: worse
        assert not found["families"]["post-hoc calibrators"]["rows"]["No LS + VS"]["significant"]
        assert found["choice"] == "ILS + TempS" and found["choice_family"] == "training methods"
        compared = ["No LS", "LS + TempS", "ILS + TempS"]
        raw = {k: _seed_means_t(nll[k], nll[REF]) for k in compared}
        _, adjusted, levels = _holm_by_hand([raw[k][3] for k in compared], 0.05)
        mean, se, _, _ = raw["ILS + TempS"]
        half = stats.t.ppf(1 - levels[2] / 2, 2) * se
        ils, ref = np.mean(nll["ILS + TempS"]), np.mean(nll[REF])
        assert found["sentence"] == (
            f"Use ILS + TempS: test NLL {ils:.3f} vs {ref:.3f} for No LS + TempS, {mean:+.3f} per example (95% CI "
            f"at Holm's level [{mean - half:+.3f}, {mean + half:+.3f}]), significant after Holm over the training "
            f"methods (3 compared, adjusted p = {adjusted[2]:.2g}); lower in all 3 seeds."
        )
        assert found["families"]["training methods"]["sentence"].endswith("; lower in all 3 seeds.")
        assert found["advice"].startswith("Training runs make ") and "ILS + TempS's difference" in found["advice"]

    def test_one_seed_says_the_verdict_holds_for_that_one_training_run(self):
        nll = self._nll({"ILS + TempS": -0.03, "LS": 0.0}, seeds=1)
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS",)))
        assert found["choice"] == "ILS + TempS" and found["advice"] == ""
        assert found["sentence"].endswith(
            "With one seed this holds for the networks trained here, conditional on that one training run: the "
            "spread between training runs is not in the interval (3 or more seeds measure it)."
        )
        assert "(1 seed, 2,000 test examples: conditional on this one training run;" in verdict.format_verdict(found)
        found = verdict.paired_verdict({REF: nll[REF], "LS": nll["LS"]}, REF, {"training methods": ["LS"]})
        assert found["choice"] == REF and "conditional on that one training run" in found["sentence"]

    def test_a_significant_row_whose_seeds_disagree_says_so(self):
        rng = np.random.default_rng(11)
        ref = [rng.gamma(2.0, 0.3, 500)] * 10
        shifts = [-0.05] * 9 + [0.004]
        nll = {REF: ref, "LS + TempS": [ref[0] + s + rng.normal(0, 0.01, 500) for s in shifts]}
        found = verdict.paired_verdict(nll, REF, {"training methods": ["LS + TempS"]}, shared_examples=True)
        result = found["families"]["training methods"]["rows"]["LS + TempS"]
        assert result["significant"] and sum(d > 0 for d in result["seed_differences"]) == 1
        values = ", ".join(f"{d:+.4f}" for d in result["seed_differences"])
        tail = f"; but its seeds disagree in sign: lower in 9 of 10 seeds ({values})."
        assert found["sentence"].endswith(tail)
        assert found["families"]["training methods"]["sentence"].endswith(tail)
        assert "better (seeds split)" in verdict.format_verdict(found)

    @pytest.mark.parametrize("seeds", [1, 2, 3, 10])
    def test_every_interval_in_a_sentence_agrees_with_its_call(self, seeds):
        rng = np.random.default_rng(seeds)
        calls = []
        for _ in range(4):
            effects = {f"M{i}": rng.normal(0, 0.005) for i in range(6)}
            nll = self._nll(effects, seeds=seeds)
            nll.update({k: [v + rng.normal(0, 0.01) for v in values] for k, values in nll.items() if k != REF})
            found = verdict.paired_verdict(nll, REF, {"f": ["No LS", *effects]}, shared_examples=False)
            sentences = [found["sentence"], found["families"]["f"]["sentence"]]
            for sentence in sentences:
                for low, high, call in re.findall(
                    r"CI at Holm's level \[([-+.\d]+), ([-+.\d]+)\]\), (?:adjusted p = [^:]+: a gain the data "
                    r"cannot tell from zero|(significant|not significant) after Holm)",
                    sentence,
                ):
                    excludes = float(low) > 0 or float(high) < 0
                    assert excludes == (call == "significant"), sentence
                    calls.append(call or "cannot tell")
                assert " CI [" not in sentence  # no unadjusted interval beside Holm's p
        assert len(calls) >= 4 and len(set(calls)) >= 2

    def test_a_lower_but_noisy_row_is_named_beside_the_choice(self):
        nll = self._nll({"A": -0.03})
        shifts = (0.03, -0.2, -0.01)  # lower on average, but the training runs disagree: not significant
        nll["B"] = [f + shift for f, shift in zip(nll[REF], shifts, strict=True)]
        found = verdict.paired_verdict(nll, REF, {"training methods": ["A", "B"]}, shared_examples=False)
        assert found["best"] == "B" and found["choice"] == "A"
        b_nll = np.mean(nll["B"])
        _, adjusted, _ = _holm_by_hand([_seed_means_t(nll[k], nll[REF])[3] for k in ("A", "B")], 0.05)
        assert adjusted[1] > 0.05 and found["sentence"].startswith("Use A: ")
        tail = f" B has a lower test NLL ({b_nll:.3f}) but does not beat {REF} significantly "
        tail += f"(adjusted p = {adjusted[1]:.2g})."
        assert found["sentence"].endswith(tail)

    def test_a_tie_up_to_rounding_goes_to_the_first_family(self):
        nll = self._nll({"LS + TempS": -0.03})
        nll["LS + VS"] = [f * (1 - 1e-6) for f in nll["LS + TempS"]]  # the same map (VS fell back), rounded lower
        assert np.concatenate(nll["LS + VS"]).mean() < np.concatenate(nll["LS + TempS"]).mean()
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS", "VS")))
        assert found["best"] == found["choice"] == "LS + TempS" and found["choice_family"] == "training methods"
        assert found["sentence"].startswith("Use LS + TempS: ") and "LS + VS" not in found["sentence"]

    def test_without_a_significant_gain_the_reference_is_the_choice(self):
        nll = self._nll({"LS": 0.002, "ILS": 0.1}, seeds=1)
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS",)))
        assert found["choice"] == found["best"] == REF and found["choice_family"] is None
        lowest = f"Keep {REF}: it has the lowest test NLL ({nll[REF][0].mean():.3f}) of the rows compared."
        assert found["sentence"].startswith(lowest)
        assert found["families"]["training methods"]["sentence"] == (  # No LS (+0.05) and ILS (+0.1) are worse
            f"Training methods: none beats {REF}, which has the lowest test NLL ({nll[REF][0].mean():.3f}); 2 of 3 "
            "rows are significantly worse after Holm."
        )
        nll = self._nll({"LS": -0.001}, seeds=1)
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS",)))
        assert found["choice"] == REF and found["sentence"].startswith(
            f"Keep {REF}: no row beats it significantly after Holm. The closest, LS, has test NLL"
        )
        assert "cannot tell from zero" in found["sentence"]

    def test_format_and_files(self, tmp_path):
        nll = self._nll({"ILS + TempS": -0.03, "LS": 0.0, "ILS": 0.01}, seeds=2)
        found = verdict.paired_verdict(nll, REF, verdict.verdict_groups(nll, ("TempS",)), shared_examples=False)
        lines = verdict.format_verdict(found).splitlines()
        assert lines[0] == (
            "Verdict: test NLL per example, each row minus No LS + TempS on the same examples (2 seeds, each on its "
            "own test examples (2,000 each); the intervals include the spread between training runs; 95% CIs at "
            "Holm's levels within each family)"
        )
        assert lines[2] == "Training methods (4 compared)"
        assert lines[3].split() == "row test NLL vs reference 95% CI (Holm) Holm p verdict per seed".split()
        compared = ["No LS", "ILS + TempS", "LS", "ILS"]
        raw = {k: _seed_means_t(nll[k], nll[REF]) for k in compared}
        rejected, adjusted, levels = _holm_by_hand([raw[k][3] for k in compared], 0.05)
        means = {k: np.mean(v) for k, v in nll.items()}
        want = []
        for k in sorted(means, key=means.get):
            if k == REF:
                want.append(f"{REF} (reference) {means[REF]:.4f}")
                continue
            mean, se, _, _ = raw[k]
            i = compared.index(k)
            half = stats.t.ppf(1 - levels[i] / 2, 1) * se
            holm_p = "< 0.0001" if adjusted[i] < 1e-4 else f"{adjusted[i]:.2g}"
            word = ("better" if mean < 0 else "worse") if rejected[i] else "n.s."
            seeds = " ".join(f"{(a - b).mean():+.4f}" for a, b in zip(nll[k], nll[REF], strict=True))
            want.append(
                f"{k} {means[k]:.4f} {mean:+.4f} [{mean - half:+.4f}, {mean + half:+.4f}] {holm_p} {word} {seeds}"
            )
        assert [line.split() for line in lines[5:10]] == [row.split() for row in want]
        assert lines[10] == found["families"]["training methods"]["sentence"]
        assert lines[-2:] == [found["advice"], found["sentence"]] and found["advice"].startswith("2 seeds measure")
        paths = verdict.write_verdict(found, str(tmp_path / "out"))
        assert paths == [str(tmp_path / "out" / name) for name in verdict.VERDICT_FILES]
        stored = json.loads((tmp_path / "out" / "verdict.json").read_text())
        assert stored == found
        for row in stored["families"]["training methods"]["rows"].values():  # what issue 38 asks verdict.json to keep
            keys = {"difference", "interval", "pvalue", "holm_pvalue", "significant", "seed_differences"}
            assert keys | {"adjusted_interval"} <= set(row)
        markdown = (tmp_path / "out" / "verdict.md").read_text()
        assert f"**{found['sentence']}**" in markdown and found["advice"] in markdown
        assert "| row | test NLL | vs reference | 95% CI (Holm) | Holm p | verdict | per seed |" in markdown
        assert "|---|---:|---:|---:|---:|---|---|" in markdown
        assert f"| {REF} (reference) | {means[REF]:.4f} |" in markdown


class TestBadInput:
    def _nll(self):
        rng = np.random.default_rng(4)
        ref = _seeds(rng, (20, 30))
        return {REF: ref, "LS": [f + 0.01 for f in ref]}

    @pytest.mark.parametrize(
        "change, argument, message",
        [
            (lambda n: n.update(LS=[n["LS"][0], n["LS"][1][:-1]]), "example_nll", "row 'LS', one per seed: 2 arrays"),
            (lambda n: n.update(LS=n["LS"][:1]), "example_nll", "one per seed: 2 arrays of lengths \\[20, 30]"),
            (lambda n: n["LS"][1].__setitem__(3, np.nan), "example_nll", "finite per-example NLL for row 'LS'"),
            (lambda n: n[REF][0].__setitem__(0, np.inf), "example_nll", "finite per-example NLL for row 'No LS"),
            (lambda n: n.update({REF: [n[REF][0][:1]], "LS": [n["LS"][0][:1]]}), "example_nll", "2 or more examples"),
            (lambda n: n.pop(REF), "reference", "a row of `example_nll`"),
            (lambda n: n.pop("LS"), "groups", "missing \\['LS'\\]"),
        ],
    )
    def test_clear_errors(self, change, argument, message):
        nll = self._nll()
        change(nll)
        with pytest.raises(ValueError, match=f"Invalid value for argument `{argument}`. Expected .*{message}"):
            verdict.paired_verdict(nll, REF, {"training methods": ["LS"]})

    def test_groups_and_confidence(self):
        nll = self._nll()
        with pytest.raises(ValueError, match="Invalid value for argument `groups`.*other than the reference in family"):
            verdict.paired_verdict(nll, REF, {"training methods": [REF]})
        with pytest.raises(ValueError, match="Invalid value for argument `groups`"):
            verdict.paired_verdict(nll, REF, {})
        for confidence in (0.0, 1.0, float("nan"), "0.95"):
            with pytest.raises(ValueError, match="Invalid value for argument `confidence`"):
                verdict.paired_verdict(nll, REF, {"f": ["LS"]}, confidence=confidence)

    def test_seeds_the_verdict_cannot_pool(self):
        nll = self._nll()  # seeds of 20 and 30 examples
        with pytest.raises(
            ValueError,
            match="Invalid value for argument `example_nll`. Expected one test split scored by every seed "
            "\\(shared_examples=True\\): as many test examples in every seed. Received: .*seeds of \\[20, 30\\] "
            "examples",
        ):
            verdict.paired_verdict(nll, REF, {"f": ["LS"]}, shared_examples=True)
        for value in ("yes", 1.0):
            with pytest.raises(ValueError, match="Invalid value for argument `shared_examples`. Expected True, False"):
                verdict.paired_verdict(nll, REF, {"f": ["LS"]}, shared_examples=value)


class TestTestExamples:
    def _standardised(self, x, rows):
        """A seed's view of one test split: standardised with its own training rows' statistics, as float32."""
        spread = x[rows].std(axis=0)
        return ((x - x[rows].mean(axis=0)) / np.where(spread > 0, spread, 1.0)).astype(np.float32)

    def test_one_test_split_seen_by_seeds_with_other_standardisations(self):
        rng = np.random.default_rng(12)
        x = rng.normal(3.0, 5.0, size=(400, 6)) * np.array([1, 10, 100, 1, 1, 1e4])
        x[:, 4] = 2.0  # a feature constant over the data
        y = rng.integers(0, 3, 400)
        test = slice(300, 400)
        seen = [self._standardised(x, rng.permutation(300)[:240])[test] for _ in range(3)]
        prints = [examples.fingerprint(lambda v=v: [(v[:60], y[test][:60]), (v[60:], y[test][60:])]) for v in seen]
        assert examples.shared_examples(prints) is True
        assert prints[0].shape == (100, 5) and prints[0][:, 0].tolist() == y[test].tolist()
        other = examples.fingerprint(lambda: [(self._standardised(x, np.arange(240))[200:300], y[200:300])])
        assert examples.shared_examples([prints[0], other]) is False
        with pytest.raises(ValueError, match="seeds 1 and 2 scored the same test examples, seeds \\[0\\] others"):
            examples.shared_examples([other, *prints[:2]])

    def test_mixed_and_unknown(self):
        rng = np.random.default_rng(13)
        draws = [(rng.normal(size=(30, 4)), np.arange(30) % 2) for _ in range(2)]
        one, other = (examples.fingerprint(lambda draw=draw: [draw]) for draw in draws)
        assert examples.shared_examples([one, None]) is None
        relabelled = one.copy()
        relabelled[0, 0] = 1 - relabelled[0, 0]  # one label differs: not the same examples
        assert examples.shared_examples([one, relabelled]) is False
        with pytest.raises(
            ValueError, match="Invalid value for argument `directories`.*seeds 7 and 9 scored the same test examples"
        ):
            examples.shared_examples([one, other, one], seeds=[7, 8, 9])

    def test_read_from_the_runs_files(self, tmp_path):
        rng = np.random.default_rng(14)
        x, y = rng.normal(size=(20, 3)), np.arange(20) % 2
        for seed in (0, 1):
            (tmp_path / "fixed" / f"seed{seed}").mkdir(parents=True)
            (tmp_path / "drawn" / f"seed{seed}").mkdir(parents=True)
            rows = {REF: rng.random(20), "LS": rng.random(20)}
            scaled, new = x * (seed + 1), rng.normal(size=(20, 3))  # the same examples rescaled; others
            fixed = {examples.FINGERPRINT_KEY: examples.fingerprint(lambda a=scaled: [(a, y)])}
            drawn = {examples.FINGERPRINT_KEY: examples.fingerprint(lambda a=new: [(a, y)])}
            np.savez(tmp_path / "fixed" / f"seed{seed}" / "test_nll.npz", **rows, **fixed)
            np.savez(tmp_path / "drawn" / f"seed{seed}" / "test_nll.npz", **rows, **drawn)
            (tmp_path / "old" / f"seed{seed}").mkdir(parents=True)
            np.savez(tmp_path / "old" / f"seed{seed}" / "test_nll.npz", **rows)
        assert verdict.read_shared_examples(str(tmp_path / "fixed")) is True
        assert verdict.read_shared_examples(str(tmp_path / "drawn")) is False
        assert verdict.read_shared_examples(str(tmp_path / "old")) is None
        assert list(verdict.read_example_nll(str(tmp_path / "fixed"))) == [REF, "LS"]  # the fingerprint is no row


class TestReadExampleNll:
    def test_the_seeds_files_in_seed_order(self, tmp_path):
        rng = np.random.default_rng(5)
        written = {}
        for seed in (2, 10, 99):
            rows = {REF: rng.random(5), "ILS": rng.random(5)}
            (tmp_path / f"seed{seed}").mkdir()
            np.savez(tmp_path / f"seed{seed}" / "test_nll.npz", **rows)
            written[seed] = rows
        read = verdict.read_example_nll([str(tmp_path / "seed10"), str(tmp_path / "seed2")])  # seed99/ not asked
        assert list(read) == [REF, "ILS"]
        for row in read:
            np.testing.assert_array_equal(np.stack(read[row]), np.stack([written[10][row], written[2][row]]))
        read = verdict.read_example_nll(str(tmp_path))  # every seed<k>/, 2 before 10
        np.testing.assert_array_equal(np.stack(read["ILS"]), np.stack([written[k]["ILS"] for k in (2, 10, 99)]))
        np.savez(tmp_path / "test_nll.npz", **written[99])  # one run's own file
        assert verdict.read_example_nll(tmp_path)["ILS"][0].tolist() == written[99]["ILS"].tolist()

    def test_mismatched_rows_and_missing_files(self, tmp_path):
        for seed, rows in ((1, (REF, "ILS")), (2, (REF,))):
            (tmp_path / f"seed{seed}").mkdir()
            np.savez(tmp_path / f"seed{seed}" / "test_nll.npz", **{row: np.ones(3) for row in rows})
        with pytest.raises(ValueError, match="seed2/test_nll.npz holds the rows \\['No LS \\+ TempS'\\]"):
            verdict.read_example_nll(str(tmp_path))
        with pytest.raises(FileNotFoundError):
            verdict.read_example_nll([str(tmp_path / "seed3")])
        with pytest.raises(FileNotFoundError, match="No test_nll.npz in"):
            verdict.read_example_nll(str(tmp_path / "nothing"))
        with pytest.raises(ValueError, match="Invalid value for argument `directories`"):
            verdict.read_example_nll([])
