"""Temperature scaling: the fit against scipy and a grid, its edge cases, the vectorised form, the deprecated names,
the layer and `calibrate`."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

import keras_ils
from keras_ils import ILSLoss, TemperatureScaling, calibrate, teacher_targets
from keras_ils.calibration import CalibratorFit, CalibratorFitWarning, TemperatureFitWarning, fit_calibrator
from keras_ils.calibration import _temperature_solver as solver
from keras_ils.calibration.temperature import _fit_temperatures, _temperature_fits


def _nll(t, logits, labels):
    return -log_softmax(logits / t, axis=1)[np.arange(len(labels)), labels].mean()


def _overconfident(rng, n=3000, k=5, scale=3.0):
    labels = rng.integers(0, k, n)
    calibrated = 1.5 * (rng.normal(size=(n, k)) + 1.5 * np.eye(k)[labels])
    return labels, scale * calibrated


def _map_objective(t, logits, labels, prior_scale):
    """The MAP objective written from its definition: summed NLL plus the Gaussian prior on log T."""
    return len(labels) * _nll(t, logits, labels) + np.log(t) ** 2 / (2 * prior_scale**2)


def _scipy_optimum(objective, args, bounds=(0.01, 100)):
    """scipy's bounded minimiser, in log T (the objective is smooth there), to 1e-12."""
    result = minimize_scalar(lambda s: objective(np.exp(s), *args), bounds=np.log(bounds), method="bounded",
                             options={"xatol": 1e-12})  # fmt: skip
    return float(np.exp(result.x))


def _fit(logits, labels, **options):
    """The report of `fit_calibrator("temperature", ...)`, its warning silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibratorFitWarning)
        return fit_calibrator("temperature", logits, labels, return_fit=True, **options)[1]


# the fit computes on float32 logits: its optimum is that of the float32-rounded logits, within ~1e-7 of float64's
RTOL = 1e-6


class TestFit:
    @pytest.mark.parametrize(
        "seed, n, k, scale",
        [(0, 3000, 5, 0.3), (1, 3000, 5, 1.0), (2, 3000, 5, 3.0), (3, 3000, 5, 10.0), (4, 300, 2, 3.0),
         (5, 60, 3, 0.3), (6, 1000, 50, 2.0), (7, 20, 10, 5.0), (8, 5000, 3, 30.0)],
    )  # fmt: skip
    def test_mle_matches_scipy_optimum(self, seed, n, k, scale):
        labels, logits = _overconfident(np.random.default_rng(seed), n, k, scale)
        want = _scipy_optimum(_nll, (logits, labels))
        fit = _fit(logits, labels, estimator="mle")
        assert fit.temperature == pytest.approx(want, rel=RTOL) and fit.maximum_likelihood == fit.temperature
        assert fit.nll == pytest.approx(_nll(want, logits, labels), rel=1e-7) and fit.objective == fit.nll

    @pytest.mark.parametrize(
        "seed, n, k, scale, prior_scale",
        [(0, 20, 5, 3.0, 0.5), (1, 60, 5, 0.3, 0.5), (2, 200, 5, 10.0, 1.0), (3, 3000, 5, 3.0, 0.5),
         (4, 40, 2, 0.1, 0.5), (5, 500, 20, 0.5, 0.2), (6, 30, 3, 1.0, 2.0), (7, 5000, 10, 4.0, 0.5)],
    )  # fmt: skip
    def test_map_matches_scipy_optimum_of_nll_plus_prior(self, seed, n, k, scale, prior_scale):
        labels, logits = _overconfident(np.random.default_rng(seed), n, k, scale)
        want = _scipy_optimum(_map_objective, (logits, labels, prior_scale))
        fit = _fit(logits, labels, prior_scale=prior_scale)
        assert fit.temperature == pytest.approx(want, rel=RTOL)
        assert fit.maximum_likelihood == pytest.approx(_scipy_optimum(_nll, (logits, labels)), rel=RTOL)
        prior = np.log(want) ** 2 / (2 * n * prior_scale**2)
        assert fit.objective == pytest.approx(_nll(want, logits, labels) + prior, rel=1e-7)

    def test_newton_needs_few_passes(self, rng):
        labels, logits = _overconfident(rng, n=3000, scale=3.0)
        assert 2 <= _fit(logits, labels, estimator="mle").iterations <= 10  # bisection to 1e-13 needs ~47
        assert _fit(logits, labels).iterations <= 14  # the MAP fit after it starts next to its optimum

    def test_several_minima_of_the_map_objective_give_the_global_one(self):
        # separable, with margins of two sizes: n NLL + (log T)^2 / 2s^2 has two local minima in log T, and the
        # global one is the farther from the NLL's own optimum (T -> 0), where a search from there would stop first
        labels = np.arange(85) % 3
        margins = np.where(np.arange(85) < 5, 3.0, 0.05)[:, None]
        logits = np.where(np.eye(3)[labels] > 0, 0.0, -margins)
        grid = np.exp(np.linspace(np.log(0.01), np.log(100), 1001))
        values = np.array([_map_objective(t, logits, labels, 0.3) for t in grid])
        minima = grid[1:-1][(values[1:-1] < values[:-2]) & (values[1:-1] < values[2:])]
        assert len(minima) == 2 and grid[np.argmin(values)] == minima[1]  # the case is what it says
        best = np.argmin(values)
        want = _scipy_optimum(_map_objective, (logits, labels, 0.3), bounds=(grid[best - 1], grid[best + 1]))
        assert _fit(logits, labels, prior_scale=0.3).temperature == pytest.approx(want, rel=RTOL)

    def test_map_approaches_mle_with_many_examples_and_shrinks_towards_one_with_few(self, rng):
        labels, logits = _overconfident(rng, n=20000, scale=3.0)
        fit = _fit(logits, labels)
        assert fit.temperature == pytest.approx(fit.maximum_likelihood, rel=2e-3) and fit.status == "fitted"
        few = _fit(logits[:30], labels[:30])
        assert 1.0 < few.temperature < few.maximum_likelihood and few.status == "regularised"

    def test_authors_estimator_is_the_mle_clipped_to_their_range(self, rng):
        for scale, want in ((10.0, 3.0), (0.3, 0.8)):
            labels, logits = _overconfident(rng, scale=scale)
            with pytest.warns(TemperatureFitWarning, match=r"end of the searched range \[0.8, 3\]"):
                _, fit = fit_calibrator("temperature", logits, labels, estimator="authors", return_fit=True)
            assert (fit.temperature, fit.status, fit.estimator) == (want, "at_bound", "authors")
        labels, logits = _overconfident(rng, scale=1.5)
        t = _fit(logits, labels, estimator="authors").temperature
        assert 0.8 < t < 3.0 and t == pytest.approx(_scipy_optimum(_nll, (logits, labels)), rel=RTOL)

    def test_bounds_beyond_the_search_range(self, rng):
        labels, logits = _overconfident(rng, n=500, k=3, scale=300.0)  # T* ~ 200 > SEARCH_BOUNDS' 100
        wide = _fit(logits, labels, estimator="mle", bounds=(0.001, 1000.0))
        want = _scipy_optimum(_nll, (logits, labels), bounds=(0.001, 1000.0))
        assert wide.temperature == pytest.approx(want, rel=RTOL) and wide.maximum_likelihood == 100.0

    def test_map_at_an_end_of_the_range_is_that_end_exactly_and_said(self, rng):
        labels, logits = _overconfident(rng, n=20000, scale=3.0)
        with pytest.warns(TemperatureFitWarning, match="end of the searched range"):
            _, fit = fit_calibrator("temperature", logits, labels, bounds=(0.5, 2.0), return_fit=True)
        assert (fit.temperature, fit.status) == (2.0, "at_bound")

    def test_map_optimum_just_inside_an_end_of_the_range_is_found(self, rng):
        labels, logits = _overconfident(rng, n=20000, scale=3.0)
        inside = _fit(logits, labels).temperature
        high = inside * 1.0001
        got = _fit(logits, labels, bounds=(0.5, high)).temperature
        assert got < high and got == pytest.approx(inside, rel=1e-9)

    def test_label_forms_and_input_dtypes(self, rng):
        labels, logits = _overconfident(rng, n=500)
        t = _fit(logits, labels).temperature
        assert _fit(logits, np.eye(5)[labels]).temperature == t
        assert _fit(logits, teacher_targets(labels, logits)).temperature == t
        assert _fit(logits.astype("float32"), labels).temperature == t  # float64 is fitted in float32 too
        assert _fit(tf.constant(logits, tf.float32), labels).temperature == t

    @pytest.mark.parametrize("n", [4, 12, 60])
    def test_separable_set_is_regularised_and_said(self, rng, n):
        labels = rng.integers(0, 3, n)
        logits = 6.0 * np.eye(3)[labels] + rng.normal(scale=0.5, size=(n, 3))  # every example right by a margin
        with pytest.warns(TemperatureFitWarning, match=f"these {n} examples keeps falling up to T = 0.01") as caught:
            _, fit = fit_calibrator("temperature", logits, labels, return_fit=True)
        assert fit.status == "regularised" and fit.maximum_likelihood == 0.01 and fit.num_examples == n
        assert 0.05 < fit.temperature < 1.0 and str(caught[0].message) == fit.warning
        assert fit.temperature == pytest.approx(_scipy_optimum(_map_objective, (logits, labels, 0.5)), rel=RTOL)

    def test_separable_set_with_mle_stops_at_the_bound_and_says_so(self):
        with pytest.warns(TemperatureFitWarning, match="not an optimum"):
            _, fit = fit_calibrator("temperature", [[5.0, 0.0], [0.0, 5.0]], [0, 1], estimator="mle", return_fit=True)
        assert (fit.temperature, fit.status) == (0.01, "at_bound")

    def test_uninformative_logits(self, rng):
        labels, logits = rng.integers(0, 4, 400), rng.normal(size=(400, 4))  # labels independent of the logits
        fit = _fit(logits, labels, estimator="mle")
        assert (fit.temperature, fit.status) == (100.0, "at_bound")
        fit = _fit(logits, labels)
        want = _scipy_optimum(_map_objective, (logits, labels, 0.5))
        assert fit.status == "regularised" and "no information" in fit.warning
        assert fit.temperature == pytest.approx(want, rel=RTOL)
        constant = _fit(np.ones((50, 3)), labels[:50] % 3, estimator="mle")  # an NLL that T does not change
        assert (constant.temperature, constant.status) == (100.0, "at_bound")

    def test_huge_logits(self, rng):
        labels, logits = _overconfident(rng, n=2000, k=4, scale=2000.0)  # logits of order 1e4: exp overflows unshifted
        fit = _fit(logits, labels, estimator="mle")
        want = _scipy_optimum(_nll, (logits, labels))
        assert np.isfinite(fit.nll) and fit.temperature == pytest.approx(want, rel=RTOL)

    def test_well_determined_fit_is_quiet(self, rng):
        labels, logits = _overconfident(rng, n=3000, scale=2.0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CalibratorFitWarning)
            _, fit = fit_calibrator("temperature", logits, labels, return_fit=True)
        assert isinstance(fit, CalibratorFit) and fit.method == "temperature"
        assert fit.status == "fitted" and fit.warning is None and fit.num_examples == 3000 and fit.estimator == "map"

    def test_warning_class_is_a_calibrator_fit_warning(self):
        assert issubclass(TemperatureFitWarning, CalibratorFitWarning)
        with pytest.warns(CalibratorFitWarning) as caught:
            fit_calibrator("temperature", [[5.0, 0.0], [0.0, 5.0]], [0, 1])
        assert caught[0].category is TemperatureFitWarning

    @pytest.mark.parametrize(
        "logits, labels, match",
        [
            (np.zeros((4,)), [0, 1, 0, 1], "shape"),
            (np.zeros((4, 1)), [0, 0, 0, 0], "shape"),
            (np.array([[np.nan, 0.0], [np.inf, 1.0]]), [0, 1], "2 NaN or infinite"),
            (np.zeros((3, 2)), [0, 1], "same length"),
            (np.zeros((2, 2)), [0, 2], "labels"),
        ],
    )
    def test_bad_input(self, logits, labels, match):
        with pytest.raises(ValueError, match=match):
            fit_calibrator("temperature", logits, labels)

    @pytest.mark.parametrize(
        "kwargs, name",
        [
            (dict(estimator="lbfgs"), "estimator"),
            (dict(prior_scale=0.0), "prior_scale"),
            (dict(bounds=(3.0, 0.8)), "bounds"),
            (dict(bounds=(0.0, 1.0)), "bounds"),
            (dict(bounds=(1.0,)), "bounds"),
        ],
    )
    def test_bad_arguments(self, kwargs, name):
        with pytest.raises(ValueError, match=f"Invalid value for argument `{name}`"):
            fit_calibrator("temperature", np.zeros((2, 2)), [0, 1], **kwargs)


@pytest.fixture
def device_passes(monkeypatch):
    """The temperature passes forced onto the backend's device (compiled `keras.ops`), in blocks of a few rows and
    chunks of a few blocks: data of more than 64 entries leave the host's numpy pass."""
    monkeypatch.setattr(solver, "CPU_CACHE", 64)
    monkeypatch.setattr(solver, "_TRANSFER", 512)


class TestDevicePasses:
    def test_moments_are_the_nll_and_its_derivatives_in_beta(self, device_passes):
        # 7 models x 151 rows x 3 classes: blocks of 3 rows, chunks of 8 blocks; the last chunk's 7 rows are 3
        # blocks, 2 rows of padding
        rng = np.random.default_rng(3)
        labels = rng.integers(0, 3, (7, 151))
        logits = (rng.normal(size=(7, 151, 3)) + 2 * np.eye(3)[labels]).astype(np.float32)
        data = solver.Logits(logits, labels)
        assert data.chunks is not None and len(data.chunks) == 7 and tuple(data.chunks[-1][0].shape[1:3]) == (3, 3)
        u = np.log(np.linspace(0.3, 3.0, 7).astype(np.float32).astype(np.float64))
        got = data.moments(u)
        beta = np.exp(u)[:, None, None]
        z = logits.astype(np.float64)
        p = np.exp(log_softmax(beta * z, axis=-1))
        true = np.take_along_axis(z, labels[..., None], axis=-1)[..., 0]
        mean = (p * z).sum(-1)
        nll = -np.take_along_axis(log_softmax(beta * z, axis=-1), labels[..., None], axis=-1)[..., 0].mean(-1)
        np.testing.assert_allclose(got.nll, nll, rtol=1e-6)
        np.testing.assert_allclose(got.slope, (mean - true).mean(-1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.curvature, (p * z**2).sum(-1).mean(-1) - (mean**2).mean(-1), rtol=1e-5)
        assert not got.separated.any()

    @pytest.mark.parametrize("estimator", ["mle", "map"])
    def test_fits_match_scipy(self, device_passes, estimator):
        labels, logits = _overconfident(np.random.default_rng(5), n=301, k=4, scale=3.0)
        got = _fit_temperatures(logits[None], labels[None], estimator=estimator)[0]
        args = (logits, labels) if estimator == "mle" else (logits, labels, 0.5)
        assert got == pytest.approx(_scipy_optimum(_nll if estimator == "mle" else _map_objective, args), rel=RTOL)

    def test_separated_logits_are_found(self, device_passes):
        labels = np.arange(100) % 4
        logits = 5.0 * np.eye(4)[labels]
        assert _fit_temperatures(logits[None], labels[None], estimator="mle")[0] == 0.01


class TestVectorised:
    @pytest.mark.parametrize("estimator", ["mle", "map"])
    def test_each_model_matches_its_scipy_optimum(self, estimator):
        rng = np.random.default_rng(1)
        labels = rng.integers(0, 3, (7, 150))
        logits = rng.normal(size=(7, 150, 3)) + 2 * np.eye(3)[labels]
        logits *= np.array([0.2, 0.5, 1.0, 2.0, 5.0, 20.0, 1.0])[:, None, None]
        logits[-1] = 8.0 * np.eye(3)[labels[-1]]  # a separable model beside the others
        got = _fit_temperatures(logits, labels, estimator=estimator)
        for model, (z, y) in enumerate(zip(logits, labels, strict=True)):
            if estimator == "mle" and model == 6:
                assert got[model] == 0.01
                continue
            args = (z, y) if estimator == "mle" else (z, y, 0.5)
            want = _scipy_optimum(_nll if estimator == "mle" else _map_objective, args)
            assert got[model] == pytest.approx(want, rel=RTOL)

    def test_separated_and_reversed_models_stop_at_the_bounds_under_mle(self):
        separated = np.array([[[10.0, -10.0], [-10.0, 10.0]], [[-10.0, 10.0], [10.0, -10.0]]])
        labels = np.array([[0, 1], [0, 1]])
        np.testing.assert_array_equal(_fit_temperatures(separated, labels, estimator="mle"), [0.01, 100.0])
        regularised = _fit_temperatures(separated, labels, estimator="map")
        for model in range(2):
            want = _scipy_optimum(_map_objective, (separated[model], labels[model], 0.5))
            assert regularised[model] == pytest.approx(want, rel=RTOL)

    @pytest.mark.parametrize("estimator", ["mle", "map"])
    def test_each_models_report_is_its_own_fit_and_its_scipy_optimum(self, estimator):
        rng = np.random.default_rng(4)
        labels = rng.integers(0, 4, (5, 120))
        logits = (rng.normal(size=(5, 120, 4)) + 2 * np.eye(4)[labels]) * np.array([0.3, 1.0, 3.0, 9.0, 1.0])[
            :, None, None
        ]
        logits[-1] = 9.0 * np.eye(4)[labels[-1]]  # separable: "regularised" under map, at a bound under mle
        fits = _temperature_fits(logits, labels, estimator=estimator)
        for model, fit in enumerate(fits):
            alone = fit_calibrator("temperature", logits[model], labels[model], estimator=estimator, return_fit=True)
            assert (fit.status, fit.num_examples, fit.estimator) == (alone[1].status, 120, estimator)
            assert fit.temperature == pytest.approx(alone[1].temperature, rel=1e-9)
            assert (fit.warning is None) == (alone[1].warning is None)
            scaled = logits[model] / fit.temperature
            nll = -np.mean(log_softmax(scaled, axis=1)[np.arange(120), labels[model]])
            assert fit.nll == pytest.approx(nll, rel=1e-5, abs=1e-6)  # the scaled logits' own (to first order)
            if fit.status == "fitted":
                args = (logits[model], labels[model]) if estimator == "mle" else (logits[model], labels[model], 0.5)
                want = _scipy_optimum(_nll if estimator == "mle" else _map_objective, args)
                assert fit.temperature == pytest.approx(want, rel=RTOL)
        assert fits[-1].status == ("regularised" if estimator == "map" else "at_bound")


class TestDeprecatedNames:
    def test_each_warns_names_its_replacement_and_gives_the_new_fit(self, rng):
        labels, logits = _overconfident(rng, n=500)
        want = _fit(logits, labels)
        with pytest.warns(DeprecationWarning, match=r'fit_calibrator\("temperature"') as caught:
            assert keras_ils.calibration.fit_temperature(logits, labels) == want.temperature
        assert caught[0].filename == __file__
        with pytest.warns(DeprecationWarning, match=r"`keras_ils.estimate_temperature` is deprecated"):
            assert keras_ils.calibration.estimate_temperature(logits, labels) == want
        with pytest.warns(DeprecationWarning, match=r"fit_calibrator\(\"temperature\", logits\[m\]"):
            got = keras_ils.calibration.fit_temperatures(logits[None], labels[None])
        assert got[0] == pytest.approx(want.temperature, rel=1e-12)

    def test_the_old_report_name_is_the_new_report(self):
        with pytest.warns(DeprecationWarning, match="CalibratorFit"):
            from keras_ils.calibration import TemperatureFit
        assert TemperatureFit is CalibratorFit

    def test_old_warnings_still_warn_under_their_name(self):
        with pytest.warns(TemperatureFitWarning, match="not an optimum"):
            keras_ils.calibration.estimate_temperature(np.array([[5.0, 0.0], [0.0, 5.0]]), [0, 1], estimator="mle")

    @pytest.mark.parametrize("iterations", [0, -3, 2.5, True])
    def test_bad_iterations(self, iterations):
        with pytest.raises(ValueError, match="Invalid value for argument `iterations`"):
            keras_ils.calibration.fit_temperatures(np.zeros((1, 2, 2)), [[0, 1]], iterations=iterations)


class TestTemperatureScalingLayer:
    def test_divides_logits(self, rng):
        x = rng.normal(size=(4, 3)).astype("float32")
        np.testing.assert_allclose(ops.convert_to_numpy(TemperatureScaling(2.5)(x)), x / 2.5, rtol=1e-6)

    def test_probabilities_mode(self, rng):
        p = rng.dirichlet(np.ones(3), size=4).astype("float32")
        got = ops.convert_to_numpy(TemperatureScaling(2.0, from_logits=False)(p))
        want = np.exp(np.log(p) / 2.0)
        np.testing.assert_allclose(got, want / want.sum(1, keepdims=True), rtol=1e-5)

    @pytest.mark.slow  # 300 full-batch epochs (~20 s on 2 cores); the trains-under-policies test below is fast
    def test_trainable_temperature_learns_the_nll_optimum(self, rng):
        labels, logits = _overconfident(rng, n=2000, k=3)
        layer = TemperatureScaling(1.0)
        model = keras.Sequential([keras.Input((3,)), layer])
        model.compile(
            optimizer=keras.optimizers.Adam(0.05), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        model.fit(logits.astype("float32"), labels, epochs=300, batch_size=2000, verbose=0)
        assert float(layer.temperature.numpy()) == pytest.approx(_fit(logits, labels).temperature, rel=0.02)

    def test_fixed_temperature_is_not_trained(self):
        layer = TemperatureScaling(3.0, trainable=False)
        layer.build((None, 3))
        assert layer.trainable_weights == [] and float(layer.temperature.numpy()) == 3.0

    @pytest.mark.parametrize(
        "policy, jit_compile",
        # ~5 s each on 2 cores: the default run trains bfloat16 under XLA (issue 23's case), `-m slow` the rest
        [("mixed_bfloat16", True)]
        + [pytest.param(*case, marks=pytest.mark.slow) for case in (("float32", True), ("mixed_float16", False))]
        + [pytest.param("mixed_float16", True, marks=pytest.mark.slow)],
    )
    def test_trains_under_jit_compile_and_mixed_precision(self, rng, policy, jit_compile):
        # an ILS student's trainable temperature: same outputs, losses and learned T as in float32
        labels, logits = _overconfident(rng, n=512, k=3)
        x, y = logits.astype("float32"), teacher_targets(labels, logits / 3.0)

        def train(policy, jit_compile):
            keras.mixed_precision.set_global_policy(policy)
            try:
                layer = TemperatureScaling(1.0)
                model = keras.Sequential([keras.Input((3,)), layer])
                model.compile(
                    optimizer=keras.optimizers.Adam(0.05),
                    loss=ILSLoss(method="ils", p1=0.8, p2=2.0),
                    jit_compile=jit_compile,
                )
                history = model.fit(x, y, epochs=10, batch_size=128, shuffle=False, verbose=0)
                return model, float(layer.temperature.numpy()), history.history["loss"]
            finally:
                keras.mixed_precision.set_global_policy("float32")

        _, want_t, want_loss = train("float32", False)
        model, got_t, got_loss = train(policy, jit_compile)
        compute_dtype = "float32" if policy == "float32" else policy.split("_")[1]
        rtol = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}[compute_dtype]
        assert model.layers[-1].temperature.dtype == "float32"
        assert got_t == pytest.approx(want_t, rel=rtol) and abs(got_t - 1.0) > 0.1
        np.testing.assert_allclose(got_loss, want_loss, rtol=rtol)
        outputs = model.predict(x, verbose=0)
        assert outputs.dtype == "float32" and model.layers[-1].compute_dtype == "float32"  # a float32 island
        np.testing.assert_allclose(outputs, x / got_t, rtol=1e-5, atol=1e-6)  # not rounded to the policy's dtype

    def test_config_and_keras_file_round_trip(self, tmp_path, rng):
        layer = TemperatureScaling(1.7, from_logits=True, name="ts")
        config = layer.get_config()
        assert TemperatureScaling.from_config(config).get_config() == config
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert restored.get_config() == config
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3), layer])
        x = rng.normal(size=(5, 3)).astype("float32")
        model.save(tmp_path / "m.keras")
        np.testing.assert_allclose(
            keras.saving.load_model(tmp_path / "m.keras").predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6
        )

    @pytest.mark.parametrize("temperature", [0, -1.0, "2"])
    def test_bad_temperature(self, temperature):
        with pytest.raises(ValueError, match="Invalid value for argument `temperature`"):
            TemperatureScaling(temperature)


class TestCalibrate:
    def _model(self, rng, scale=10.0):
        keras.utils.set_random_seed(0)
        x = rng.normal(size=(400, 4)).astype("float32")
        y = (x[:, 0] + 0.5 * rng.normal(size=400) > 0).astype("int32") + (x[:, 1] > 0).astype("int32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.set_weights([scale * rng.normal(size=(4, 3)).astype("float32"), np.zeros(3, "float32")])
        return model, x, y

    def test_arrays(self, rng):
        model, x, y = self._model(rng)
        calibrated = calibrate(model, (x, y))
        logits = model.predict(x, verbose=0)
        t = _fit(logits, y).temperature
        assert float(calibrated.layers[-1].temperature.numpy()) == pytest.approx(t, rel=1e-6)
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), logits / t, rtol=1e-5)

    def test_shuffled_dataset_keeps_pairs(self, rng):
        model, x, y = self._model(rng)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(400, seed=1).batch(32)
        t = _fit(model.predict(x, verbose=0), y).temperature
        calibrated = calibrate(model, ds)
        assert float(calibrated.layers[-1].temperature.numpy()) == pytest.approx(t, rel=1e-5)

    def test_probability_model(self, rng):
        model, x, y = self._model(rng, scale=2.0)  # no probability below the log's clip
        prob_model = keras.Sequential([model, keras.layers.Softmax()])
        calibrated = calibrate(prob_model, (x, y), from_logits=False)
        t = _fit(model.predict(x, verbose=0), y).temperature
        want = ops.convert_to_numpy(ops.softmax(model.predict(x, verbose=0) / t))
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), want, rtol=1e-4, atol=1e-6)

    def test_subclassed_model(self, rng):
        class Net(keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(3)

            def call(self, x):
                return self.dense(x)

        _, x, y = self._model(rng)
        net = Net()
        net(x[:1])
        calibrated = calibrate(net, (x, y))
        t = float(calibrated.layers[-1].temperature.numpy())
        np.testing.assert_allclose(calibrated.predict(x, verbose=0), net.predict(x, verbose=0) / t, rtol=1e-5)

    def test_keras_file_round_trip(self, rng, tmp_path):
        model, x, y = self._model(rng)
        calibrated = calibrate(model, (x, y))
        calibrated.save(tmp_path / "c.keras")
        loaded = keras.saving.load_model(tmp_path / "c.keras")
        np.testing.assert_allclose(loaded.predict(x, verbose=0), calibrated.predict(x, verbose=0), rtol=1e-6)

    def test_dataset_without_labels(self, rng):
        model, x, _ = self._model(rng)
        with pytest.raises(ValueError, match="without labels"):
            calibrate(model, tf.data.Dataset.from_tensor_slices(x).batch(8))
