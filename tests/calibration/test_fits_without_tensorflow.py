"""Every calibration fit under JAX with TensorFlow's import refused: `fit_calibrator` and `calibrate`, every method.

The fits run in a subprocess whose first act is a meta-path finder that
raises `ImportError` for `tensorflow` (as on a machine where TensorFlow
cannot be imported), twice: as they come (small data: the host's numpy
passes) and with the passes forced onto the backend's device (compiled
`keras.ops` under `jax.jit`). The subprocess saves what it fitted; the test
checks it here against scipy (the temperature) and against the calibrated
model's own outputs (each report's NLL).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

from keras_ils.calibration import METHODS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import sys


class RefuseTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError(f"TensorFlow is refused in this test: import {name}")


sys.meta_path.insert(0, RefuseTensorFlow())

import warnings

import keras
import numpy as np

import keras_ils
from keras_ils.calibration import METHODS, _affine_passes, _temperature_solver

assert keras.backend.backend() == "jax", keras.backend.backend()
where, output = sys.argv[1], sys.argv[2]
if where == "device":
    _temperature_solver.CPU_CACHE = 64
    _affine_passes.NUMPY_MAX_WORK = 0
rng = np.random.default_rng(0)
x = rng.normal(size=(240, 6)).astype("float32")
labels = (x[:, :4] + rng.normal(size=(240, 4))).argmax(axis=1)
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
model.layers[0].set_weights([3.0 * np.eye(6, 4, dtype="float32"), np.zeros(4, "float32")])
logits = keras.ops.convert_to_numpy(model(x))
saved = {"x": x, "labels": labels, "logits": logits}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for method in METHODS:
        layer, fit = keras_ils.fit_calibrator(method, logits, labels, return_fit=True)
        saved[f"{method}/fit"] = np.array([fit.nll, fit.temperature or np.nan])
        saved[f"{method}/fit_outputs"] = keras.ops.convert_to_numpy(layer(logits))
        calibrated, report = keras_ils.calibrate(model, (x, labels), method=method, return_fit=True)
        saved[f"{method}/calibrate"] = np.array([report.nll, report.temperature or np.nan])
        saved[f"{method}/calibrate_outputs"] = calibrated.predict(x, verbose=0)
assert "tensorflow" not in sys.modules
np.savez(output, **saved)
"""


def _map_temperature(logits, labels, prior_scale=0.5):
    """The MAP temperature by scipy: summed NLL plus `(log T)^2 / (2 prior_scale^2)`, bounded in log T."""

    def objective(s):
        nll = -log_softmax(logits / np.exp(s), axis=1)[np.arange(len(labels)), labels].sum()
        return nll + s**2 / (2 * prior_scale**2)

    return float(np.exp(minimize_scalar(objective, bounds=np.log([0.01, 100]), method="bounded",
                                        options={"xatol": 1e-12}).x))  # fmt: skip


# the host's numpy passes run in most other calibration tests: under -m slow here (18 s of a subprocess by default)
@pytest.fixture(scope="module", params=[pytest.param("host", marks=pytest.mark.slow), "device"])
def fitted(request, tmp_path_factory):
    output = tmp_path_factory.mktemp("without_tensorflow") / f"{request.param}.npz"
    environment = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": ROOT}
    result = subprocess.run([sys.executable, "-c", SCRIPT, request.param, str(output)], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(np.load(output))


@pytest.mark.parametrize("method", METHODS)
def test_every_fit_runs_and_serves_what_it_reports(fitted, method):
    labels = fitted["labels"]
    for entry in ("fit", "calibrate"):
        nll, _ = fitted[f"{method}/{entry}"]
        outputs = fitted[f"{method}/{entry}_outputs"]
        assert outputs.shape == fitted["logits"].shape and np.isfinite(outputs).all()
        served = -log_softmax(outputs.astype(np.float64), axis=1)[np.arange(len(labels)), labels].mean()
        assert nll == pytest.approx(served, rel=1e-5)


def test_the_temperature_is_scipys(fitted):
    want = _map_temperature(fitted["logits"].astype(np.float64), fitted["labels"])
    for entry in ("temperature/fit", "temperature/calibrate", "ensemble_temperature/fit"):
        assert fitted[entry][1] == pytest.approx(want, rel=1e-6)
