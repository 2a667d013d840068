"""One network of the main job: its setup, built, trained by `model.fit`, calibrated, saved and loaded."""

from __future__ import annotations

import dataclasses
import os
import time

import keras
import tensorflow as tf

from keras_ils import baselines, data, distillation
from keras_ils import metrics as _metrics
from keras_ils._checks import invalid
from keras_ils.calibration import ESTIMATORS, TemperatureScaling, calibrate
from keras_ils.experiments.engine import training
from keras_ils.experiments.main_job.config import (
    BASELINE_SETTINGS,
    CALIBRATORS,
    STUDENT_METHODS,
    _method_hyperparameters,
)
from keras_ils.experiments.zoo import models
from keras_ils.losses import ILSLoss


def _student_setup(method, splits, teacher_logits, train_with_teacher, hyperparameters):
    """`(loss, training dataset, reported settings)` of one student method."""
    if method in STUDENT_METHODS:
        used = _method_hyperparameters(method, hyperparameters)
        return ILSLoss(method=method, **used), train_with_teacher, used
    if method == "dis":
        settings = BASELINE_SETTINGS["dis"]
        return distillation.DistillationCrossEntropy(**settings), train_with_teacher, settings
    if method == "cls":
        rows = baselines.class_similarity_logits(splits.train, splits.num_classes)
        class_rows = teacher_logits._replace(logits=rows[teacher_logits.labels])  # keeps the label check
        train_set = data.with_teacher_targets(splits.train, class_rows)
        used = {"epsilon": hyperparameters["epsilon"]}
        return ILSLoss(method="ils2", **used), train_set, used
    if method == "bs_soft":
        settings = BASELINE_SETTINGS["bs_soft"]
        return baselines.BootstrapSoftLoss(**settings), splits.train, settings
    alpha = BASELINE_SETTINGS["beta"]["alpha"]
    a = baselines.beta_shape_for_epsilon(hyperparameters["epsilon"], splits.num_classes, alpha)
    settings = {"alpha": alpha, "a": round(a, 4), "epsilon": hyperparameters["epsilon"]}
    return baselines.BetaSmoothingLoss(alpha=alpha, a=a), splits.train, settings


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What every model of one `run` or `tune` shares."""

    splits: object  # a keras_ils.experiments.data.datasets.Splits
    model_name: str
    recipe: training.Recipe
    strategy: tf.distribute.Strategy
    validation: tf.data.Dataset  # batched: the early-stopping monitor of searches, and where TempS is fitted
    seed: int
    verbose: int
    temperature_estimator: str  # keras_ils.calibration.fit_temperature's `estimator`, for every "+ TempS" row
    calibrators: tuple = ("ts",)  # keys of CALIBRATORS: the calibrated rows each model gets

    @classmethod
    def make(
        cls, splits, model_name, recipe, strategy, seed, verbose, temperature_estimator="map", calibrators=("ts",)
    ):
        """Fills in the defaults: the paper's recipe for the model and data, the current strategy."""
        if temperature_estimator not in ESTIMATORS:
            raise invalid("temperature_estimator", f"one of {ESTIMATORS}", temperature_estimator)
        if not calibrators or any(c not in CALIBRATORS for c in calibrators):
            raise invalid("calibrators", f"a non-empty subset of {tuple(CALIBRATORS)}", calibrators)
        return cls(
            splits,
            model_name,
            recipe or training.recipe_for(model_name, splits.name),
            strategy or tf.distribute.get_strategy(),
            training.evaluation_pipeline(splits.validation),
            seed,
            verbose,
            temperature_estimator,
            tuple(dict.fromkeys(calibrators)),
        )

    def header(self, teacher_fit, **settings) -> dict:
        """The head of `results.json`: what ran, the teacher's `T*` and its fit, `settings`, then the recipe."""
        recipe = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self.recipe).items()}
        head = {"dataset": self.splits.name, "model": self.model_name, "seed": self.seed}
        teacher = {
            "teacher_temperature": teacher_fit.temperature,
            "teacher_temperature_status": teacher_fit.status,
            "temperature_estimator": teacher_fit.estimator,
            "validation_examples": teacher_fit.num_examples,
        }
        return {**head, **teacher, **settings, "recipe": recipe}


def uses_engine(setup) -> bool:
    """Whether `run` trains `setup`'s students with the vectorised engine: a plain MLP (`mlp`, `mlp-D-W`) on
    vectors by the Adam MLP recipe. The engine runs on one device (TensorFlow's default, a GPU when there is
    one), whatever `setup.strategy` is: its models are small and many, not large."""
    recipe = setup.recipe
    return (
        models.mlp_shape(setup.model_name) is not None
        and len(setup.splits.input_shape) == 1
        and recipe.optimizer == "adam"
        and not recipe.weight_decay
        and not recipe.decay_at
        and recipe.patience is not None
    )


def _scaled(model, temperature):
    """`model` followed by a fixed `TemperatureScaling(temperature)`."""
    return keras.Sequential(
        [keras.Input(model.input_shape[1:]), model, TemperatureScaling(temperature, trainable=False)],
        name=f"{model.name}_temps",
    )


def _keras_tuner_role():
    """`None` outside KerasTuner's distributed mode, else `"chief"` or `"worker"`."""
    if "KERASTUNER_ORACLE_IP" not in os.environ:
        return None
    return "chief" if os.environ.get("KERASTUNER_TUNER_ID") == "chief" else "worker"


def _load_model(path, strategy):
    with strategy.scope():
        return keras.saving.load_model(path)


def _wait_for(teacher_path, strategy, timeout=3600.0):
    """A worker waits (like KerasTuner's own client, up to an hour) for the chief's saved teacher."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(teacher_path):
        if time.monotonic() > deadline:
            raise ValueError(f"No teacher appeared at {teacher_path} within {timeout:.0f} s; is the chief running?")
        time.sleep(1.0)
    return _load_model(teacher_path, strategy)


def _save_model(model, path):
    """`model.save(path)` through a temporary file, so a crash leaves no half-written model."""
    temporary = os.path.join(os.path.dirname(path), f".{os.getpid()}.{os.path.basename(path)}")
    try:
        model.save(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _compiled_model(setup, loss=None):
    """`setup`'s network with the recipe's weight decay on its kernels, compiled with the recipe's optimizer."""
    splits, recipe = setup.splits, setup.recipe
    with setup.strategy.scope():
        model = models.build(setup.model_name, splits.num_classes, splits.input_shape, recipe.weight_decay)
        model.compile(
            optimizer=recipe.build_optimizer(),
            loss=loss,
            metrics=[_metrics.TopLabelAccuracy(from_logits=True), _metrics.NegativeLogLikelihood(from_logits=True)],
        )
    return model


def train_model(splits, model_name: str, loss, train_set, *, recipe=None, seed: int = 0, strategy=None, verbose=0):
    """One network trained as `run` trains each student: `model_name`'s recipe, early stopping on validation NLL.

    Args:
        splits: a `keras_ils.experiments.data.datasets.Splits` (its validation split is monitored).
        model_name: a name for `keras_ils.experiments.zoo.models.build`.
        loss: the Keras loss, e.g. `keras_ils.ILSLoss(method="ls", epsilon=0.1)` or
            `keras_ils.distillation.DistillationCrossEntropy()`.
        train_set: unbatched `(x, y)` (or `(x, (y, teacher_logits))`) training dataset matching `loss`.
        recipe: training recipe; defaults to `training.recipe_for(model_name, splits.name)`.
        seed: seeds the initial weights and the shuffling.
        strategy: a `tf.distribute` strategy; defaults to the current one.
        verbose: Keras `fit` verbosity.

    Returns:
        The compiled, trained Keras model (logits out), at its best validation epoch.
    """
    setup = _Setup.make(splits, model_name, recipe, strategy, seed, verbose)
    return _train_model(setup, loss, train_set, seed)


def _train_model(setup, loss, train_set, model_seed, callbacks=()):
    keras.utils.set_random_seed(model_seed)
    model = _compiled_model(setup, loss)
    validation, verbose = setup.splits.validation, setup.verbose
    training.fit(
        model,
        train_set,
        validation,
        setup.recipe,
        monitor="val_nll",
        seed=model_seed,
        verbose=verbose,
        callbacks=callbacks,
    )
    return model


def _calibrated(model, setup):
    """`(model followed by its fitted TemperatureScaling, the TemperatureFit)`."""
    with setup.strategy.scope():
        return calibrate(model, setup.validation, estimator=setup.temperature_estimator, return_fit=True)
