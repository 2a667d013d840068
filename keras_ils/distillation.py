"""Knowledge distillation in Keras pipelines, built on `keras.distillation`.

The student minimises (paper §5 and appendix, after Hinton et al. 2015):

```
weight * CE(softmax(teacher / T_teacher), softmax(student / T_student)) + (1 - weight) * CE(hard label, student)
```

with the paper's defaults `weight = 0.9`, `T_teacher = 20`, `T_student = 1`.

- Online (teacher forward in every step): `distiller(teacher, student)` returns a
  `keras.distillation.Distiller` whose distillation term is
  `SoftTargetDistillation`: a cross-entropy that softmaxes the TEACHER's logits
  (Keras' `LogitsDistillation(loss="categorical_crossentropy")` hands the raw
  logits over as targets) and takes separate teacher and student temperatures.
- Cached (no teacher forward at all): `DistillationCrossEntropy`, a
  `keras.losses.Loss` that reads the package's teacher targets
  (`keras_ils.teacher_targets` / `keras_ils.with_teacher_targets`), so every
  student shares one pass of the teacher, like ILS.
- `FitTemperatureOnTrainEnd`: a callback that fits `T*` on validation data
  when training ends, so a pipeline gets the calibrated teacher without extra code.

Teacher temperatures divide the logits they are given: the package's teacher
targets hold calibrated logits (raw / T*), the paper's T = 20 was applied to raw logits.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import keras
import numpy as np
from keras import ops
from numpy.typing import ArrayLike

from keras_ils import _bad_input, _labels
from keras_ils._checks import number_in, positive
from keras_ils.calibration import calibrate

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    "DistillationCrossEntropy",
    "FitTemperatureOnTrainEnd",
    "SoftTargetDistillation",
    "distiller",
    "soft_cross_entropy",
]

_register = keras.saving.register_keras_serializable(package="keras_ils")


def _check_weight(weight):
    return number_in("weight", weight, 0.0, 1.0)


def soft_cross_entropy(
    teacher_logits: ArrayLike,
    student_logits: ArrayLike,
    teacher_temperature: float = 1.0,
    student_temperature: float = 1.0,
):
    """Per-example `-sum_j softmax(teacher / T_t)_j * log_softmax(student / T_s)_j` (teacher not back-propagated).

    Example:

    >>> import numpy as np
    >>> value = soft_cross_entropy(np.log([[0.5, 0.5]]), np.log([[0.25, 0.75]]))
    >>> round(float(value[0]), 4)   # -(0.5 log 0.25 + 0.5 log 0.75)
    0.8370
    """
    teacher_logits = ops.stop_gradient(ops.convert_to_tensor(teacher_logits))
    student_logits = ops.convert_to_tensor(student_logits)
    soft_targets = ops.softmax(ops.cast(teacher_logits, student_logits.dtype) / teacher_temperature, axis=-1)
    return -ops.sum(soft_targets * ops.log_softmax(student_logits / student_temperature, axis=-1), axis=-1)


@_register
class SoftTargetDistillation(keras.distillation.DistillationLoss):
    """The distillation term of `keras.distillation.Distiller`: cross-entropy against softened teacher outputs.

    Formula:

    ```
    mean_i -sum_j softmax(v_i / teacher_temperature)_j * log softmax(z_i / student_temperature)_j
    ```

    Args:
        teacher_temperature: divides the teacher's logits, `> 0`. Defaults to `20.0`.
        student_temperature: divides the student's logits, `> 0`. Defaults to `1.0`.

    Example:

    >>> import numpy as np
    >>> term = SoftTargetDistillation(teacher_temperature=1.0)
    >>> round(float(term.compute_loss(np.log([[0.5, 0.5]]), np.log([[0.25, 0.75]]))), 4)
    0.837
    """

    def __init__(self, teacher_temperature: float = 20.0, student_temperature: float = 1.0):
        self.teacher_temperature = positive("teacher_temperature", teacher_temperature)
        self.student_temperature = positive("student_temperature", student_temperature)

    def compute_loss(self, teacher_outputs, student_outputs, **kwargs):
        return ops.mean(
            soft_cross_entropy(teacher_outputs, student_outputs, self.teacher_temperature, self.student_temperature)
        )

    def get_config(self):
        return {"teacher_temperature": self.teacher_temperature, "student_temperature": self.student_temperature}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def distiller(
    teacher: keras.Model,
    student: keras.Model,
    *,
    weight: float = 0.9,
    teacher_temperature: float = 20.0,
    student_temperature: float = 1.0,
) -> keras.distillation.Distiller:
    """A `keras.distillation.Distiller` with the paper's distillation loss (teacher online).

    Compile it with the hard-label loss, e.g.
    `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`; the
    Distiller weighs it by `1 - weight`.

    Args:
        teacher: trained teacher returning logits (frozen by the Distiller).
        student: student returning logits, same class count.
        weight: weight of the distillation term, in `[0, 1]`. Defaults to `0.9`.
        teacher_temperature: Defaults to `20.0`.
        student_temperature: Defaults to `1.0`.

    Example:

    >>> teacher = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    >>> student = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    >>> model = distiller(teacher, student)
    >>> model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> model.student_loss_weight
    0.1...
    """
    weight = _check_weight(weight)
    if teacher.output_shape[-1] != student.output_shape[-1]:
        raise ValueError(
            "The teacher and the student must have the same number of classes. Received: teacher "
            f"{teacher.output_shape[-1]}, student {student.output_shape[-1]}."
        )
    return keras.distillation.Distiller(
        teacher=teacher,
        student=student,
        distillation_losses=SoftTargetDistillation(teacher_temperature, student_temperature),
        student_loss_weight=1.0 - weight,
    )


@_register
class DistillationCrossEntropy(keras.losses.Loss):
    """Distillation from CACHED teacher logits: no teacher forward pass per step.

    With teacher targets as `y_true` (`keras_ils.teacher_targets`), the loss
    is `weight * soft_cross_entropy(...) + (1 - weight) * CE(label, student)`;
    with sparse labels or one-hot targets (validation) it is the plain
    cross-entropy, so `val_loss` is the hard-label criterion.

    Args:
        weight: weight of the distillation term, in `[0, 1]`. Defaults to `0.9`.
        teacher_temperature: Defaults to `20.0`.
        student_temperature: Defaults to `1.0`.
        reduction: Defaults to `"sum_over_batch_size"`.
        name: Defaults to `"distillation_cross_entropy"`.
        dtype: Defaults to `None`.

    Example:

    >>> import numpy as np
    >>> import keras_ils
    >>> y = keras_ils.teacher_targets([0], np.log([[0.5, 0.5]]))
    >>> loss = DistillationCrossEntropy(weight=0.5, teacher_temperature=1.0)
    >>> round(float(loss(y, np.log([[0.25, 0.75]]))), 4)   # 0.5 * 0.8370 + 0.5 * -log 0.25
    1.1116

    Usage with `compile()`:

    ```python
    student.compile(optimizer="adam", loss=keras_ils.distillation.DistillationCrossEntropy())
    student.fit(keras_ils.with_teacher_targets(train_ds, rows).batch(256), validation_data=val_ds.batch(256))
    ```
    """

    def __init__(
        self,
        weight: float = 0.9,
        teacher_temperature: float = 20.0,
        student_temperature: float = 1.0,
        reduction: str | None = "sum_over_batch_size",
        name: str = "distillation_cross_entropy",
        dtype: str | None = None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.weight = _check_weight(weight)
        self.teacher_temperature = positive("teacher_temperature", teacher_temperature)
        self.student_temperature = positive("student_temperature", student_temperature)

    @_bad_input.poisons_bad_input
    def call(self, y_true, y_pred):
        y_true = ops.convert_to_tensor(y_true, dtype=self.dtype)
        num_classes = y_pred.shape[-1]
        kind = _labels.y_true_kind(y_true, num_classes, len(y_pred.shape))
        if kind == "sparse":
            one_hot = ops.one_hot(_labels.hard_labels(y_true, num_classes, len(y_pred.shape)), num_classes)
        elif kind == "dense":
            one_hot = y_true
        else:
            one_hot, teacher_logits = _labels.split_teacher_targets(y_true, num_classes)
        hard = ops.categorical_crossentropy(ops.cast(one_hot, y_pred.dtype), y_pred, from_logits=True)
        if kind != "teacher":
            return hard
        soft = soft_cross_entropy(teacher_logits, y_pred, self.teacher_temperature, self.student_temperature)
        return self.weight * soft + (1.0 - self.weight) * hard

    def functional_form(self):
        """With teacher targets and `student_temperature=1` the loss is a cross-entropy against fixed targets,
        `weight * softmax(teacher / teacher_temperature) + (1 - weight) * one_hot`: `ils_crossentropy` (method
        `"none"`) against them, made once in float64 (`keras_ils.losses.functional_form`). With another student
        temperature it has no functional form (`TypeError`)."""
        from keras_ils.losses import FunctionalForm, ils_crossentropy

        if self.student_temperature != 1.0:
            raise TypeError(
                "A DistillationCrossEntropy with student_temperature != 1 is not a cross-entropy against fixed "
                f"targets and has no functional form. Received: student_temperature={self.student_temperature}"
            )
        targets = functools.partial(_soft_targets, weight=self.weight, teacher_temperature=self.teacher_temperature)
        return FunctionalForm(ils_crossentropy, {"method": "none", "from_logits": True}, targets=targets)

    def get_config(self):
        return {
            **super().get_config(),
            "weight": self.weight,
            "teacher_temperature": self.teacher_temperature,
            "student_temperature": self.student_temperature,
            "dtype": self.dtype,
        }


def _soft_targets(y_true, num_classes, weight, teacher_temperature):
    """`DistillationCrossEntropy`'s targets for teacher targets `y_true` (eagerly: a numpy array in its dtype,
    computed in float64); one-hot or soft rows as they are."""
    y_true = ops.convert_to_tensor(y_true)
    if _labels.y_true_kind(y_true, num_classes, len(y_true.shape)) != "teacher":
        return ops.convert_to_numpy(y_true)
    one_hot, teacher_logits = _labels.split_teacher_targets(y_true, num_classes)
    z = np.asarray(ops.convert_to_numpy(teacher_logits), np.float64) / teacher_temperature
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    soft = weight * (e / e.sum(axis=-1, keepdims=True)) + (1.0 - weight) * ops.convert_to_numpy(one_hot)
    return soft.astype(ops.convert_to_numpy(y_true).dtype)


class FitTemperatureOnTrainEnd(keras.callbacks.Callback):
    """Fits `T*` on validation data when training ends (`keras_ils.calibrate`).

    After `fit`, `callback.temperature` holds `T*` and
    `callback.calibrated_model` the model followed by a fixed
    `TemperatureScaling(T*)`, ready to serve as the calibrated teacher.

    Args:
        validation_data: `(x, y)` arrays or a dataset of `(x, y)` batches.
        **calibrate_options: the temperature fit (`estimator`,
            `prior_scale`, `bounds`), as in `keras_ils.calibrate`.

    Example:

    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(32, 2)).astype("float32")
    >>> y = (x[:, 0] > 0).astype("int32")
    >>> teacher = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    >>> teacher.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> callback = FitTemperatureOnTrainEnd((x, y))
    >>> _ = teacher.fit(x, y, epochs=1, verbose=0, callbacks=[callback])
    >>> callback.temperature > 0
    True
    """

    def __init__(self, validation_data: tf.data.Dataset | tuple, **calibrate_options):
        super().__init__()
        self.validation_data = validation_data
        self.calibrate_options = calibrate_options
        self.temperature = None
        self.calibrated_model = None

    def on_train_end(self, logs=None):
        self.calibrated_model = calibrate(self.model, self.validation_data, **self.calibrate_options)
        self.temperature = float(ops.convert_to_numpy(self.calibrated_model.layers[-1].temperature))
