"""Calibration maps beyond temperature scaling: vector scaling, matrix scaling and Dirichlet calibration.

Each map is a Keras layer: an affine map of the classifier's logits (or of its
log-probabilities) whose softmax is the calibrated prediction. `fit_calibrator`
fits one on validation outputs; `keras_ils.calibrate(model, data, method=...)`
fits one and appends it to a model, as it does `TemperatureScaling`.

| `method`      | layer                  | calibrated logits                      | parameters   |
|---------------|------------------------|----------------------------------------|--------------|
| `"vector"`    | `VectorScaling`        | `z * scale + bias`                     | `2K`         |
| `"matrix"`    | `MatrixScaling`        | `z @ kernel + bias`, ODIR              | `K^2 + K`    |
| `"dirichlet"` | `DirichletCalibration` | `log_softmax(z) @ kernel + bias`, ODIR | `K^2 + K`    |

for logits `z [n, K]`. Matrix scaling and Dirichlet calibration are
regularised with ODIR (off-diagonal and intercept regularisation, Kull et al.
2019, §4): the fit minimises

```
mean_i -log softmax(calibrated logits_i)[y_i]
    + off_diagonal_l2 / (K (K - 1)) * sum_{i != j} kernel_ij^2
    + intercept_l2 / K * sum_j bias_j^2
```

(the diagonal is free, so the identity map costs nothing). Vector scaling is
unregularised, as in Guo et al. (2017). The objectives are convex; the fit is
L-BFGS from the identity map, to a gradient of `tolerance`, its passes over the
data in `keras.ops` beyond small sizes (on the Keras backend's device, the GPU
when it has one; `keras_ils.calibration.solvers`). Kull et al. choose
`off_diagonal_l2` and `intercept_l2` by cross-validation on the calibration
set; given as they are (the defaults, `0.01` each, are a weak regularisation),
they give this plain fit.

By default `fit_calibrator` does not fit these objectives as they stand: a
trained network's validation logits are often nearly separable, and the plain
fit then overfits them at any size. Unless ODIR's weights (or
`prior_precision=0`) are given, the map is the maximum a posteriori one under
a Gaussian prior centred on temperature scaling's map, its precisions chosen
on validation folds (for matrix scaling and Dirichlet calibration in two
stages, as ODIR's two weights: the diagonal and bias, then the off-diagonal
entries, whose prior is centred on 0), and temperature scaling's map where
the chosen one separates the validation set; a class absent from the
validation set keeps temperature scaling's map
(`keras_ils.calibration.small_data`). Every size is fitted so: 1,000 classes
and 50,000 examples too, within the folds' stated time budget. A map fitted
so is an ordinary layer of its class.

With `from_logits=False` a layer takes and returns probabilities: it reads
`log(p)` (0 floored at float32's smallest normal number, never clipped at 1e-7) as its input, so matrix scaling
of probabilities is Dirichlet calibration. Every layer computes in float32
under any global dtype policy (its `dtype` defaults to `"float32"` and its
input is cast to it), so mixed precision never rounds a calibrated output.

A fit that did not converge, whose map separates the validation set, or whose
map is extreme (a parameter beyond `EXTREME_PARAMETER` in size) issues a
`CalibratorFitWarning` (see `CalibratorFit.status`): none returns a map that
overfits in silence.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_ils._checks import number_in
from keras_ils._outputs import log_probabilities_tensor
from keras_ils.calibration._float32 import float32_by_default, known_classes, to_compute_dtype

__all__ = ["DEFAULT_ODIR", "AFFINE_LAYERS", "DirichletCalibration", "MatrixScaling", "VectorScaling"]

DEFAULT_ODIR = 0.01


class _OffDiagonalL2:
    """ODIR's kernel term, `strength / (K (K - 1)) * sum_{i != j} kernel_ij^2`, as a weight regulariser."""

    def __init__(self, strength, num_classes):
        self.factor = strength / (num_classes * (num_classes - 1))
        self.off_diagonal = 1.0 - np.eye(num_classes, dtype="float32")

    def __call__(self, kernel):
        return self.factor * ops.sum(ops.square(kernel * ops.cast(self.off_diagonal, kernel.dtype)))


class _CalibrationMap(keras.layers.Layer):
    """Shared reading of the inputs and output of the affine calibration maps."""

    _log_probabilities = False  # True: the map reads log_softmax(logits)

    def __init__(self, from_logits: bool = True, **kwargs):
        super().__init__(**float32_by_default(kwargs))
        self.from_logits = bool(from_logits)

    def call(self, inputs):
        inputs = to_compute_dtype(self, inputs)
        if not self.from_logits:
            features = log_probabilities_tensor(inputs)
        elif self._log_probabilities:
            features = ops.log_softmax(inputs, axis=-1)
        else:
            features = inputs
        outputs = self._map(features)
        return outputs if self.from_logits else ops.softmax(outputs, axis=-1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}


@keras.saving.register_keras_serializable(package="keras_ils")
class VectorScaling(_CalibrationMap):
    """Per-class scale and bias on logits (Guo et al., 2017): `logits * scale + bias`.

    Initialised to the identity map (`scale = 1`, `bias = 0`); fitted by
    `fit_calibrator("vector", ...)` (by the cross-validated rule of the module
    docstring) or trained in a model. With
    `from_logits=False` the layer takes and returns probabilities:
    `softmax(log(p) * scale + bias)`.

    Args:
        from_logits: whether the inputs are logits (else probabilities).
            Defaults to `True`.
        **kwargs: base layer arguments; `trainable=False` fixes the map;
            `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = VectorScaling()
    >>> layer.build((None, 2))
    >>> layer.set_weights([np.array([2.0, 0.5]), np.array([0.0, 1.0])])
    >>> keras.ops.convert_to_numpy(layer(np.array([[1.0, 4.0]])))
    array([[2., 3.]], dtype=float32)

    References:
        Guo et al. (2017), "On Calibration of Modern Neural Networks", §4.2.
    """

    def build(self, input_shape):
        num_classes = known_classes(self, input_shape)
        self.scale = self.add_weight(name="scale", shape=(num_classes,), initializer="ones")
        self.bias = self.add_weight(name="bias", shape=(num_classes,), initializer="zeros")

    def _map(self, features):
        return features * ops.cast(self.scale, features.dtype) + ops.cast(self.bias, features.dtype)


class _ODIRMap(_CalibrationMap):
    """`features @ kernel + bias` with ODIR on the kernel's off-diagonal and on the bias."""

    def __init__(
        self,
        off_diagonal_l2: float = DEFAULT_ODIR,
        intercept_l2: float = DEFAULT_ODIR,
        from_logits: bool = True,
        **kwargs,
    ):
        super().__init__(from_logits=from_logits, **kwargs)
        self.off_diagonal_l2 = number_in("off_diagonal_l2", off_diagonal_l2, 0.0, expected="a float >= 0")
        self.intercept_l2 = number_in("intercept_l2", intercept_l2, 0.0, expected="a float >= 0")

    def build(self, input_shape):
        num_classes = known_classes(self, input_shape)
        self.kernel = self.add_weight(
            name="kernel",
            shape=(num_classes, num_classes),
            initializer="identity",
            regularizer=_OffDiagonalL2(self.off_diagonal_l2, num_classes) if self.off_diagonal_l2 else None,
        )
        intercept = self.intercept_l2 / num_classes
        self.bias = self.add_weight(
            name="bias",
            shape=(num_classes,),
            initializer="zeros",
            regularizer=(lambda bias: intercept * ops.sum(ops.square(bias))) if intercept else None,
        )

    def _map(self, features):
        return ops.matmul(features, ops.cast(self.kernel, features.dtype)) + ops.cast(self.bias, features.dtype)

    def get_config(self):
        return {**super().get_config(), "off_diagonal_l2": self.off_diagonal_l2, "intercept_l2": self.intercept_l2}


@keras.saving.register_keras_serializable(package="keras_ils")
class MatrixScaling(_ODIRMap):
    """A full affine map of the logits, `logits @ kernel + bias`, regularised with ODIR.

    Initialised to the identity map; fitted by `fit_calibrator("matrix", ...)`
    (by the cross-validated rule of the module docstring) or trained in a model, where the layer's losses are the
    ODIR terms (see the module docstring). With `from_logits=False` the layer takes and
    returns probabilities and maps `log(p)`, which is Dirichlet calibration.

    Args:
        off_diagonal_l2: ODIR's weight on the off-diagonal of `kernel`, `>= 0`.
            Defaults to `0.01`.
        intercept_l2: ODIR's weight on `bias`, `>= 0`. Defaults to `0.01`.
        from_logits: whether the inputs are logits (else probabilities).
            Defaults to `True`.
        **kwargs: base layer arguments; `trainable=False` fixes the map;
            `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = MatrixScaling()
    >>> layer.build((None, 2))
    >>> layer.set_weights([np.array([[1.0, 1.0], [0.0, 2.0]]), np.array([0.0, -1.0])])
    >>> keras.ops.convert_to_numpy(layer(np.array([[1.0, 3.0]])))
    array([[1., 6.]], dtype=float32)

    References:
        Guo et al. (2017), §4.2; Kull et al. (2019), "Beyond temperature
        scaling: Obtaining well-calibrated multi-class probabilities with
        Dirichlet calibration", §4 (ODIR).
    """


@keras.saving.register_keras_serializable(package="keras_ils")
class DirichletCalibration(_ODIRMap):
    """Dirichlet calibration: an affine map of the log-probabilities, regularised with ODIR.

    Calibrated logits `log_softmax(logits) @ kernel + bias` (Kull et al. 2019,
    the classwise-calibration method of the paper's group); with
    `from_logits=False` the layer takes probabilities `p` and returns
    `softmax(log(p) @ kernel + bias)`. Initialised to the identity map; fitted
    by `fit_calibrator("dirichlet", ...)` (by the cross-validated rule of the
    module docstring) or trained in a model, where the layer's losses are the ODIR terms.

    Args:
        off_diagonal_l2: ODIR's weight on the off-diagonal of `kernel`, `>= 0`.
            Defaults to `0.01`.
        intercept_l2: ODIR's weight on `bias`, `>= 0`. Defaults to `0.01`.
        from_logits: whether the inputs are logits (else probabilities).
            Defaults to `True`.
        **kwargs: base layer arguments; `trainable=False` fixes the map;
            `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).

    Example:

    >>> layer = DirichletCalibration(from_logits=False)
    >>> layer.build((None, 2))
    >>> layer.set_weights([np.array([[2.0, 0.0], [0.0, 2.0]]), np.zeros(2)])   # p_j^2, renormalised
    >>> np.round(keras.ops.convert_to_numpy(layer(np.array([[0.75, 0.25]]))), 4)
    array([[0.9, 0.1]], dtype=float32)

    References:
        Kull et al. (2019), "Beyond temperature scaling: Obtaining
        well-calibrated multi-class probabilities with Dirichlet calibration".
    """

    _log_probabilities = True


# `fit_calibrator(method)`'s layer for each method name
AFFINE_LAYERS = {"vector": VectorScaling, "matrix": MatrixScaling, "dirichlet": DirichletCalibration}
