"""One call to calibrate a trained model: fit a calibration map on validation data and append it."""

from __future__ import annotations

import keras
import numpy as np

from keras_ils._checks import invalid, odir_refused
from keras_ils.calibration import maps, solvers
from keras_ils.calibration.temperature import DEFAULT_PRIOR_SCALE, TemperatureScaling, _estimate, _warn
from keras_ils.data import predict_with_labels

__all__ = ["LAYERS", "METHODS", "calibrate"]

METHODS = ("temperature", *solvers.METHODS)
LAYERS = {"temperature": TemperatureScaling, **maps.LAYERS}  # each method's layer class


def calibrate(
    model: keras.Model,
    validation_data,
    *,
    method: str = "temperature",
    from_logits: bool = True,
    estimator: str = "map",
    prior_scale: float = DEFAULT_PRIOR_SCALE,
    bounds: tuple | None = None,
    off_diagonal_l2: float | None = None,
    intercept_l2: float | None = None,
    return_fit: bool = False,
):
    """Fits a calibration map on validation data and returns `model` followed by it, fixed.

    Args:
        model: a trained Keras classifier.
        validation_data: a `tf.data.Dataset` of batched `(x, y)` or a tuple
            `(x, y)`; `y` sparse, one-hot or teacher targets.
        method: `"temperature"` (a `TemperatureScaling` holding `T*`),
            `"vector"`, `"matrix"` or `"dirichlet"` (the layers of
            `keras_ils.calibration`, fitted by `fit_calibrator`).
            Defaults to `"temperature"`.
        from_logits: whether `model` outputs logits (else probabilities).
            Defaults to `True`.
        estimator, prior_scale, bounds: the temperature fit, as in
            `fit_temperature` (`method="temperature"` only). Defaults to the
            MAP fit.
        off_diagonal_l2, intercept_l2: ODIR's weights, as in `fit_calibrator`
            (`"matrix"` and `"dirichlet"` only). Default to `0.01`.
        return_fit: also return the fit's report: a `TemperatureFit` (status,
            example count, unregularised optimum) or a
            `keras_ils.calibration.CalibratorFit`. Defaults to `False`.

    Returns:
        A new model sharing `model`'s layers; its last layer is the fitted
        map (`calibrated.layers[-1]`; `.temperature` holds `T*`), not trainable.
        With `return_fit=True`, `(calibrated model, fit report)`.

    Example:

    >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    >>> y = (x[:, 0] > 0).astype("int32")
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> calibrated = calibrate(model, (x, y))
    >>> calibrated.predict(x, verbose=0).shape
    (64, 2)
    >>> type(calibrate(model, (x, y), method="dirichlet").layers[-1]).__name__
    'DirichletCalibration'
    """
    if method not in METHODS:
        raise invalid("method", f"one of {METHODS}", method)
    odir = dict(off_diagonal_l2=off_diagonal_l2, intercept_l2=intercept_l2)
    if method == "temperature" and any(value is not None for value in odir.values()):
        raise odir_refused(method)
    outputs, y = _predict(model, validation_data)
    if method != "temperature":
        odir = {name: value for name, value in odir.items() if value is not None}  # refused for "vector"
        layer, fit = solvers.fit_calibrator(method, outputs, y, from_logits=from_logits, return_fit=True, **odir)
        calibrated = _followed_by(model, layer)
        return (calibrated, fit) if return_fit else calibrated
    logits = outputs if from_logits else np.log(np.clip(outputs, keras.config.epsilon(), 1.0))
    fit = _estimate(logits, y, estimator, prior_scale, bounds)
    _warn(fit)
    scaling = TemperatureScaling(fit.temperature, from_logits=from_logits, trainable=False, name="temperature_scaling")
    scaling.build(outputs.shape)
    calibrated = _followed_by(model, scaling)
    return (calibrated, fit) if return_fit else calibrated


def _predict(model, validation_data):
    """`(outputs, labels)` of `model` on `validation_data`, refusing empty data with one line naming the argument."""
    if isinstance(validation_data, (tuple, list)) and len(validation_data) == 2:
        lengths = {len(leaf) for leaf in keras.tree.flatten(validation_data) if np.ndim(leaf)}
        if 0 in lengths:
            raise _empty("a tuple (x, y) of 0 examples")
    try:
        return predict_with_labels(model, validation_data)
    except ValueError as error:
        if str(error) == "Argument `data` is empty.":  # a dataset or iterable that yields no batch
            raise _empty(f"a {type(validation_data).__name__} that yields no batch") from None
        raise


def _empty(received: str) -> ValueError:
    return ValueError(
        "Invalid value for argument `validation_data`. Expected at least one (x, y) example to fit the calibration "
        f"map on. Received: {received}"
    )


def _followed_by(model, layer):
    """A new model: `model`, then the calibration `layer`; its inputs have the structure of `model`'s.

    A model with one input gives a model whose input is one tensor (not a
    one-element list), whatever structure `model` itself was built with, so
    the calibrated model is called, exported and served with a plain tensor
    (`model.export`'s `serve(x)`, `keras.layers.TFSMLayer`) and never warns
    that the structure of its inputs does not match. Several inputs keep
    `model`'s list or dict (dict keys stay the input names).
    """
    name = f"{model.name}_calibrated"
    try:
        flat = model.inputs
    except (AttributeError, ValueError):  # a subclassed model has no symbolic inputs
        return keras.Sequential([model, layer], name=name)
    try:
        structure = model.input  # a functional model's own structure: a tensor, a list or a dict
    except (AttributeError, ValueError):  # a Sequential model that was never called: one input
        structure = flat[0] if len(flat) == 1 else flat
    keep_names = isinstance(structure, dict)
    inputs = keras.tree.map_structure(
        lambda t: keras.Input(shape=t.shape[1:], dtype=t.dtype, sparse=t.sparse, name=t.name if keep_names else None),
        structure,
    )
    outputs = layer(model(inputs))
    flat_inputs = keras.tree.flatten(inputs)
    return keras.Model(flat_inputs[0] if len(flat_inputs) == 1 else inputs, outputs, name=name)
