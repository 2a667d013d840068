"""One call to calibrate a trained model: fit a calibration map on validation data and append it."""

from __future__ import annotations

import warnings

import keras
import numpy as np

from keras_ils import _outputs
from keras_ils._predict import predict_with_labels
from keras_ils.calibration import registry

__all__ = ["calibrate"]


def calibrate(
    model: keras.Model,
    validation_data,
    *,
    method: registry.Method = "temperature",
    from_logits: bool | None = None,
    return_fit: bool = False,
    **options,
):
    """Fits a calibration map on validation data and returns `model` followed by it, fixed.

    The calibrated model takes `model`'s inputs (one plain tensor for a
    one-input model, so `calibrated.export(...)` serves a plain tensor), and
    its calibration layer computes in float32 under any dtype policy. The
    fit's warning (a `keras_ils.calibration.CalibratorFitWarning`; for
    temperature scaling its subclass `TemperatureFitWarning`) is issued in
    the caller's name.

    Args:
        model: a trained Keras classifier.
        validation_data: a `tf.data.Dataset` of batched `(x, y)`, a tuple
            `(x, y)`, a `keras.utils.PyDataset` or an iterable of `(x, y)`
            batches, with at least one example; `y` sparse, one-hot or
            teacher targets.
        method: one of `keras_ils.calibration.METHODS`: `"temperature"` (a
            `TemperatureScaling` holding `T*`), `"vector"`, `"matrix"`,
            `"dirichlet"`, `"histogram"`, `"isotonic"` or
            `"ensemble_temperature"` (the layers of `LAYERS`, fitted by
            `fit_calibrator`). Defaults to `"temperature"`.
        from_logits: whether `model` outputs logits (else probabilities), or
            `None` to read it from the model: one whose last layer ends in a
            softmax (`Dense(K, activation="softmax")`, `keras.layers.Softmax()`,
            also inside a nested model) outputs probabilities, and so does one
            whose every validation row is a distribution; otherwise logits.
            With probabilities the map is fitted on their logs (the logits up
            to a shift per row, so a softmax model and its logit twin get the
            same map) and the appended layer takes and returns probabilities.
            An explicit `True` or `False` that the validation outputs
            contradict is refused with a `ValueError` that states the fix.
            Defaults to `None`.
        return_fit: also return the fit's report, a
            `keras_ils.calibration.CalibratorFit` (status, example count,
            validation NLL). Defaults to `False`.
        **options: the method's options, as in `fit_calibrator`: for example
            `estimator`, `prior_scale` and `bounds` of the temperature fit
            (`"temperature"`, `"ensemble_temperature"`; the MAP fit by
            default), ODIR's `off_diagonal_l2` and `intercept_l2`
            (`"matrix"`, `"dirichlet"`), `prior_precision` (the affine
            maps' prior; see `fit_calibrator`),
            `num_bins` (`"histogram"`). On a small validation set every
            method stays sane and warns (`keras_ils.calibration.small_data`).

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

    A model ending in a softmax is read as one that outputs probabilities:

    >>> softmax_model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    >>> calibrate(softmax_model, (x, y)).layers[-1].from_logits
    False
    """
    registry.check_method_and_options(method, options)
    outputs, y = _predict(model, validation_data)
    from_logits = _outputs.model_from_logits(model, outputs, from_logits)
    layer, fit, category = registry.fit(method, outputs, y, from_logits=from_logits, **options)
    if fit.warning:
        warnings.warn(fit.warning, category, stacklevel=2)
    calibrated = _followed_by(model, layer)
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
