"""Calibration layers are float32 islands: built in float32 under any global dtype policy, inputs cast to it.

A calibration map is a handful of numbers applied to a model's outputs; in
bfloat16 (8 significant bits) dividing logits by a temperature can round two
close logits to one value and flip the predicted class. So every calibration
layer takes `dtype="float32"` unless its user passes a dtype, and casts its
input to its compute dtype: under `mixed_bfloat16` or `mixed_float16` a
calibrated model outputs float32 and never changes the model's argmax
through rounding. `known_classes` is the layers' other shared input check.
"""

from __future__ import annotations

from keras import ops

__all__ = ["float32_by_default", "known_classes", "to_compute_dtype"]


def float32_by_default(kwargs: dict) -> dict:
    """`kwargs` of a calibration layer with `dtype="float32"` where the user gave no dtype (or `None`)."""
    if kwargs.get("dtype") is None:
        kwargs["dtype"] = "float32"
    return kwargs


def to_compute_dtype(layer, inputs):
    """`inputs` cast to `layer`'s compute dtype (float32 unless the user chose another)."""
    return ops.cast(inputs, layer.compute_dtype)


def known_classes(layer, input_shape) -> int:
    """The class count `K` of a calibration layer's input shape; a `ValueError` unless it is known and >= 2."""
    num_classes = input_shape[-1]
    if num_classes is None or num_classes < 2:
        raise ValueError(
            f"{type(layer).__name__} needs inputs with a known number of classes K >= 2 in their last axis. "
            f"Received input shape: {tuple(input_shape)}"
        )
    return num_classes
