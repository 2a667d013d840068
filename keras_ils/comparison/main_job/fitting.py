"""One network of the main job: its setup, its loss and data from the registry, trained, calibrated, saved, loaded.

The calibrated rows are fitted here (`calibrated`, `record_student`, `record_calibrated`) and handed to a
`report.Report`, which scores and writes them and fits nothing.

`Setup` is a `RunConfig` completed for one dataset (recipe, strategy, search
space, fixed values). `student_setup` builds a method's loss and training
set from its `keras_ils.methods` entry: the entry's `teacher` says which
teacher rows its targets carry (`TRAINING_SETS`), its `loss` builds the loss
and its `reported` says what the results table shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import warnings

import keras
import tensorflow as tf

from keras_ils import _warnings, baselines, data, methods
from keras_ils import metrics as _metrics
from keras_ils.calibration import TemperatureScaling, calibrate
from keras_ils.comparison import networks
from keras_ils.comparison.engine import students, training
from keras_ils.comparison.main_job.config import CALIBRATORS, RunConfig, default_hyperparameters
from keras_ils.comparison.main_job.conformal_split import calibration_split

__all__ = [
    "TRAINING_SETS",
    "Setup",
    "calibrated",
    "compiled_model",
    "fit_network",
    "keras_tuner_role",
    "load_model",
    "network",
    "record_calibrated",
    "record_student",
    "save_model",
    "warnings_of",
    "scaled",
    "student_setup",
    "train_model",
    "uses_engine",
    "wait_for",
]


@dataclasses.dataclass(frozen=True)
class Setup:
    """What every model of one `run` or `tune` shares: the data, the completed config, the validation batches.

    Attributes:
        splits: a `keras_ils.comparison.data.datasets.Splits` (with `config.conformal`, its validation split
            without the examples carved into `splits.calibration`).
        config: the `RunConfig` with `recipe`, `strategy`, `search_space` and
            `directory` filled in for these data.
        validation: the batched validation split: the early-stopping monitor
            of searches, and where every calibration is fitted.
        fixed: `{hyperparameter: value}` that every method reading it uses
            (with `tune=False`, every hyperparameter of the chosen methods).
    """

    splits: object
    config: RunConfig
    validation: tf.data.Dataset
    fixed: dict

    @classmethod
    def make(cls, splits, config: RunConfig) -> Setup:
        """Fills in the defaults: the paper's recipe for the model and data, the current strategy, the grids; with
        `config.conformal`, carves the prediction sets' calibration split from validation (`conformal_split`)."""
        if config.conformal is not None:
            splits = calibration_split(splits, config.conformal, config.seed)
        search_space = config.search_space or ("synthetic" if splits.name == "synthetic" else "paper")
        directory = config.directory
        if directory is None and config.output_dir is not None:
            directory = os.path.join(config.output_dir, "search")
        model_name = config.model_for(splits)
        overrides = {"epochs": config.epochs, "batch_size": config.batch_size}
        if config.recipe is not None:
            recipe = config.recipe
        elif config.build_model is not None:
            recipe = networks.overridden(networks.CUSTOM_RECIPE, **overrides)
        else:
            recipe = networks.recipe_for(model_name, splits.name, **overrides)
        config = dataclasses.replace(
            config,
            model_name=model_name,
            recipe=recipe,
            strategy=config.strategy or tf.distribute.get_strategy(),
            search_space=search_space,
            directory=directory,
        )
        fixed = dict(config.hyperparameters)
        if not config.tune:
            fixed = default_hyperparameters(splits.name, **fixed)
            for method in config.methods:  # a registered method's own hyperparameters: its grid's first value
                space = students.method_space(method, search_space) if methods.get(method).tunable else {}
                fixed.update({name: values[0] for name, values in space.items() if name not in fixed})
        return cls(splits, config, training.evaluation_pipeline(splits.validation), fixed)

    def header(self, teacher_fit, **settings) -> dict:
        """The head of `results.json`: what ran, the teacher's `T*` and its fit, `settings`, then the recipe."""
        config = self.config
        recipe = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(config.recipe).items()}
        head = {"dataset": self.splits.name, "model": config.model_name, "seed": config.seed}
        if self.splits.class_names is not None:  # a table's target values: what output column k stands for
            head["class_names"] = list(self.splits.class_names)
        teacher = {
            "teacher_temperature": teacher_fit.temperature,
            "teacher_temperature_status": teacher_fit.status,
            "temperature_estimator": teacher_fit.estimator,
            "validation_examples": teacher_fit.num_examples,
        }
        if self.splits.calibration is not None:  # held out from validation for the prediction sets
            teacher["calibration_examples"] = int(self.splits.calibration.cardinality())
        return {**head, **teacher, **settings, "recipe": recipe}


def uses_engine(setup: Setup) -> bool:
    """Whether `run` trains `setup`'s students with the vectorised engine: a plain MLP (`mlp`, `mlp-D-W`) on
    vectors by an Adam MLP recipe (its coupled weight decay too), under the TensorFlow backend (the engine's
    epochs are `tf.function`s). The engine runs on one device (TensorFlow's default, a GPU when there is one),
    whatever the strategy is: its models are small and many, not large."""
    recipe = setup.config.recipe
    return (
        setup.config.build_model is None
        and keras.backend.backend() == "tensorflow"
        and networks.mlp_shape(setup.config.model_name) is not None
        and len(setup.splits.input_shape) == 1
        and recipe.optimizer == "adam"
        and not recipe.decay_at
        and recipe.patience is not None
    )


def _class_similarity_set(splits, teacher_logits):
    """cLS's rows (`keras_ils.baselines.class_similarity_logits`), one per example by its label."""
    rows = baselines.class_similarity_logits(splits.train, splits.num_classes)
    class_rows = teacher_logits._replace(logits=rows[teacher_logits.labels])  # keeps the label check
    return data.with_teacher_targets(splits.train, class_rows)


# The training set of each teacher source of the registry (`keras_ils.methods.Method.teacher`), from the splits and
# the calibrated teacher's `keras_ils.teacher.TeacherLogits` on the training split.
TRAINING_SETS = {
    None: lambda splits, teacher_logits: splits.train,
    "calibrated": lambda splits, teacher_logits: data.with_teacher_targets(splits.train, teacher_logits),
    "class_similarity": _class_similarity_set,
}


def student_setup(setup: Setup, method: str, teacher_logits, values: dict) -> tuple:
    """`(loss, unbatched training set, reported settings)` of one student of `method` with hyperparameter `values`
    (a superset of what it reads: its own hyperparameters and those it borrows)."""
    entry = methods.get(method)
    used = {name: values[name] for name in (*entry.hyperparameters, *entry.borrows)}
    num_classes = setup.splits.num_classes
    train_set = TRAINING_SETS[entry.teacher](setup.splits, teacher_logits)
    with setup.config.strategy.scope():  # a loss with variables (OLS's soft labels) is the strategy's, as the model
        loss = entry.loss(num_classes, **used)
    return loss, train_set, entry.reported(num_classes, **used)


def scaled(model, temperature):
    """`model` followed by a fixed `TemperatureScaling(temperature)`."""
    return keras.Sequential(
        [keras.Input(model.input_shape[1:]), model, TemperatureScaling(temperature, trainable=False)],
        name=f"{model.name}_temps",
    )


def keras_tuner_role():
    """`None` outside KerasTuner's distributed mode, else `"chief"` or `"worker"`."""
    if "KERASTUNER_ORACLE_IP" not in os.environ:
        return None
    return "chief" if os.environ.get("KERASTUNER_TUNER_ID") == "chief" else "worker"


def load_model(path, strategy):
    """`keras.saving.load_model(path)` in `strategy`'s scope."""
    with strategy.scope():
        return keras.saving.load_model(path)


def wait_for(teacher_path, strategy, timeout=3600.0):
    """A worker waits (like KerasTuner's own client, up to an hour) for the chief's saved teacher."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(teacher_path):
        if time.monotonic() > deadline:
            raise ValueError(f"No teacher appeared at {teacher_path} within {timeout:.0f} s; is the chief running?")
        time.sleep(1.0)
    return load_model(teacher_path, strategy)


def save_model(model, path):
    """`model.save(path)` through a temporary file, so a crash leaves no half-written model."""
    temporary = os.path.join(os.path.dirname(path), f".{os.getpid()}.{os.path.basename(path)}")
    try:
        model.save(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def compiled_model(setup: Setup, loss=None):
    """`setup`'s network with the recipe's weight decay on its kernels, compiled with the recipe's optimizer."""
    splits, config = setup.splits, setup.config
    with config.strategy.scope():
        model = network(config, splits)
        model.compile(
            optimizer=config.recipe.build_optimizer(),
            loss=loss,
            metrics=[_metrics.TopLabelAccuracy(from_logits=True), _metrics.NegativeLogLikelihood(from_logits=True)],
        )
    return model


def network(config: RunConfig, splits):
    """A new, uncompiled network of `config` for `splits`: the user's `build_model(K)`, else the named one with the
    recipe's weight decay on its kernels."""
    if config.build_model is not None:
        return config.build_model(splits.num_classes)
    return networks.build(config.model_name, splits.num_classes, splits.input_shape, config.recipe.weight_decay)


def train_model(
    splits, model_name: str, loss, train_set, *, recipe=None, seed: int = 0, strategy=None, verbose=0, callbacks=()
):
    """One network trained as `run` trains each student: `model_name`'s recipe, early stopping on validation NLL.

    Args:
        splits: a `keras_ils.comparison.data.datasets.Splits` (its validation split is monitored).
        model_name: a registered network name (`keras_ils.comparison.networks.build`).
        loss: the Keras loss, e.g. `keras_ils.ILSLoss(method="ls", epsilon=0.1)` or
            `keras_ils.distillation.DistillationCrossEntropy()`.
        train_set: unbatched `(x, y)` (or `(x, (y, teacher_logits))`) training dataset matching `loss`.
        recipe: training recipe; defaults to `networks.recipe_for(model_name, splits.name)`.
        seed: seeds the initial weights and the shuffling.
        strategy: a `tf.distribute` strategy; defaults to the current one.
        verbose: Keras `fit` verbosity.
        callbacks: further Keras callbacks, e.g. those the loss needs
            (`keras_ils.methods.get("ols").training_callbacks(loss)`).

    Returns:
        The compiled, trained Keras model (logits out), at its best validation epoch.
    """
    config = RunConfig(model_name, recipe=recipe, strategy=strategy, seed=seed, verbose=verbose)
    return fit_network(Setup.make(splits, config), loss, train_set, callbacks)


def fit_network(setup: Setup, loss, train_set, callbacks=()):
    """A new network of `setup` (initial weights from its seed) trained on `train_set` by `model.fit`.

    Every student and teacher of `run` and `tune` outside a KerasTuner search
    is trained here: the recipe's optimizer, batches and schedule, early
    stopping on the validation NLL with the best epoch restored. `callbacks`
    are added to those; a registered method's loss comes with the ones it
    needs (`keras_ils.methods.Method.training_callbacks`, e.g. OLS's
    `OnlineLabelSmoothingCallback`), which its caller passes here.

    Returns:
        The compiled, trained Keras model (logits out).
    """
    config = setup.config
    keras.utils.set_random_seed(config.seed)
    model = compiled_model(setup, loss)
    training.fit(
        model,
        train_set,
        setup.splits.validation,
        config.recipe,
        monitor="val_nll",
        seed=config.seed,
        verbose=config.verbose,
        callbacks=callbacks,
    )
    return model


@contextlib.contextmanager
def warnings_of(row: str):
    """Re-issues the package's warnings raised inside (a temperature or calibrator fit's) prefixed by `row`, and
    every warning raised inside in the name of the user's call (`keras_ils._warnings.warn`).

    Example:

    >>> from keras_ils.calibration import TemperatureFitWarning
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     with warnings_of("LS + TempS"):
    ...         warnings.warn("Temperature scaling: few examples", TemperatureFitWarning)
    >>> str(caught[0].message)
    'LS + TempS: Temperature scaling: few examples'
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        message = warning.message
        if warning.category.__module__.startswith("keras_ils"):
            message = warning.category(f"{row}: {message}")
            message.row = row  # so that the command line can tell a row's warning from another row's of its kind
        _warnings.warn(message, warning.category)  # in the name of the user's call, not of a line of the package


def calibrated(model, setup: Setup, row: str | None = None):
    """`(model followed by its fitted TemperatureScaling, the CalibratorFit)`; its warnings name `row`."""
    with warnings_of(row or f"{model.name} + TempS"), setup.config.strategy.scope():
        return calibrate(model, setup.validation, estimator=setup.config.temperature_estimator, return_fit=True)


def record_calibrated(setup, report, name, model, hyperparameters_used, **extra):
    """The rows of the config's calibrators beyond temperature scaling: `model` calibrated on validation by each
    map, then handed to `report` (a `report.Report`) to score."""
    for method in setup.config.calibrators:
        if method == "temperature":  # every model has its "+ TempS" row already
            continue
        suffix = CALIBRATORS[method]
        with warnings_of(f"{name} + {suffix}"), setup.config.strategy.scope():
            mapped, fit = calibrate(model, setup.validation, method=method, return_fit=True)
        report.record(f"{name} + {suffix}", fit, mapped, hyperparameters_used, **extra)


def record_student(setup, report, name, student, hyperparameters_used, **extra):
    """The student's rows: as trained, and temperature-scaled on the validation set ("+ TempS")."""
    report.record(name, None, student, hyperparameters_used, **extra)
    student_scaled, fit = calibrated(student, setup, f"{name} + TempS")
    report.record(f"{name} + TempS", fit, student_scaled, hyperparameters_used, **extra)
    record_calibrated(setup, report, name, student, hyperparameters_used, **extra)
