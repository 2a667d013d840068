"""`OnlineTeacher`: a student whose teacher runs inside every training step, on the same batch.

The teacher's online path (its cached path, which reads the data through `tf.data`, is `keras_ils.teacher`, which
re-exports this class). Keras only: it runs on every backend, TensorFlow absent included.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_ils import _labels
from keras_ils._checks import positive
from keras_ils.metrics import InputCheck

__all__ = ["OnlineTeacher"]


@keras.saving.register_keras_serializable(package="keras_ils")
class OnlineTeacher(keras.Model):
    """A student whose teacher runs inside every training step, on the same batch.

    During training, sparse labels `y` are replaced by
    `keras_ils.teacher_targets(y, teacher(x) / teacher_temperature)` before the
    compiled loss (an `ILSLoss`) sees them; evaluation keeps the hard labels,
    so `val_loss` stays the cross-entropy against them (smoothed for
    `method="ls"`). Without augmentation
    the loss equals the cached path's. Augment in the input pipeline (or in a
    preprocessing model applied before both): the teacher then scores exactly
    the augmented image the student trains on.

    The training labels are checked inside the training step (whole numbers
    in `[0, K)`) by the model's own metric `label_check` (logged as
    `bad_labels`, always 0): a bad batch's loss is NaN, and the `ValueError`
    naming the labels is raised at the end of the epoch (`keras_ils._bad_input`).

    Args:
        student: the Keras model being trained (returns logits).
        teacher: the trained teacher (returns logits); it is frozen.
        teacher_temperature: `T*`; the teacher's logits are divided by it.
            Use `1.0` for a teacher from `keras_ils.calibrate`. Defaults to `1.0`.

    Example:

    >>> import keras_ils
    >>> student = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    >>> teacher = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    >>> model = OnlineTeacher(student, teacher, teacher_temperature=1.5)
    >>> model.compile(optimizer="sgd", loss=keras_ils.ILSLoss(method="ils"))
    >>> history = model.fit(np.ones((8, 2)), np.zeros(8, "int32"), epochs=1, verbose=0)
    """

    def __init__(self, student: keras.Model, teacher: keras.Model, teacher_temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        positive("teacher_temperature", teacher_temperature)
        student_k, teacher_k = student.output_shape[-1], teacher.output_shape[-1]
        if student_k != teacher_k:
            raise ValueError(
                f"The teacher and the student must have the same number of classes. Received: teacher {teacher_k}, "
                f"student {student_k}."
            )
        self.student = student
        self.teacher = teacher
        self.teacher.trainable = False
        self.teacher_temperature = float(teacher_temperature)
        self.label_check = InputCheck(name="bad_labels")  # the training labels' checks, raised at the epoch's end

    def call(self, inputs, training=None):
        return self.student(inputs, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if training and y is not None:
            y = ops.convert_to_tensor(y)
            num_classes = y_pred.shape[-1]
            if _labels.y_true_kind(y, num_classes, len(y_pred.shape)) == "sparse":
                teacher_logits = ops.stop_gradient(self.teacher(x, training=False))
                if self.teacher_temperature != 1.0:
                    teacher_logits = teacher_logits / self.teacher_temperature
                with self.label_check.counting() as found:  # range-checked here, once
                    labels = _labels.hard_labels(y, num_classes, len(y_pred.shape))
                y = found.poison(_labels.pack_teacher_targets(ops.one_hot(labels, num_classes), teacher_logits))
        return super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)

    def get_config(self):
        return {
            **super().get_config(),
            "student": keras.saving.serialize_keras_object(self.student),
            "teacher": keras.saving.serialize_keras_object(self.teacher),
            "teacher_temperature": self.teacher_temperature,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["student"] = keras.saving.deserialize_keras_object(config["student"])
        config["teacher"] = keras.saving.deserialize_keras_object(config["teacher"])
        return cls(**config)
