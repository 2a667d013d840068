"""`ILSHyperModel`: a KerasTuner hypermodel whose trials differ only in the loss's hyperparameters; `tuner_for`.

The objective is the student's validation cross-entropy against HARD labels
at its best epoch (`OBJECTIVE`, the `val_nll` that
`keras_ils.metrics.NegativeLogLikelihood` logs): `val_loss` would be the
smoothed loss for LS.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Literal, get_args

import keras
import keras_tuner
import tensorflow as tf

from keras_ils import calibration, methods
from keras_ils._checks import integer_at_least, invalid
from keras_ils.metrics import NegativeLogLikelihood
from keras_ils.tuning.tuners import BayesianOptimization, GridSearch, Hyperband, RandomSearch

__all__ = ["ALGORITHMS", "OBJECTIVE", "ILSHyperModel", "best_student", "tuner_for"]

OBJECTIVE = keras_tuner.Objective("val_nll", direction="min")


def _logged_names(model) -> set:
    names = {"loss"}
    for metric in keras.saving.deserialize_keras_object(model.get_compile_config()).get("metrics") or []:
        names.add(metric if isinstance(metric, str) else getattr(metric, "name", getattr(metric, "__name__", "")))
    return names | {"val_" + name for name in names}


class ILSHyperModel(keras_tuner.HyperModel):
    """A `keras_tuner.HyperModel` whose trials differ only in the loss's hyperparameters (ILS, LS or yours).

    `build_model(hp)` returns your student, compiled with the optimizer and
    metrics you want (it may tune more of `hp`, such as the learning rate).
    `build` then compiles it again with the same optimizer and metrics, the
    hard-label `keras_ils.metrics.NegativeLogLikelihood` (`"nll"`) added, and
    the loss replaced by the method's loss with the trial's values
    (`keras_ils.methods.get(method).loss(num_classes, **values)`). Train on
    data from `keras_ils.data.with_teacher_targets` (the cached, calibrated
    teacher) and validate on hard labels. `fit` adds early stopping on the
    objective (best epoch restored) unless you pass an `EarlyStopping`,
    and the callbacks the method's loss needs (`Method.training_callbacks`,
    e.g. OLS's `OnlineLabelSmoothingCallback`).

    Reproducible trials: pass the training data to `tuner.search` as a
    zero-argument function that makes the dataset (`lambda:
    make_training_dataset()`); `fit` calls it in every trial, after
    `keras.utils.set_random_seed(seed)`, so a trial's batch order and
    augmentation depend on `seed` alone. A dataset object shared by all
    trials reshuffles on from where the previous trial left it, so the same
    trial re-run after an interrupted search would see other batches and
    score differently.

    Everything that can be checked is checked when the tuner is created (it
    builds the hypermodel once to learn the space), before any trial: the
    search space, that `build_model` returns a compiled model with
    `num_classes` outputs, and that the model logs `objective`.

    Args:
        build_model: `hp -> compiled keras.Model` with `num_classes` logits.
        num_classes: the class count `K` of the data.
        method: a tunable id of the `keras_ils.methods` registry
            (`methods.ids(tunable=True)`, any you register included).
            Defaults to `"ils"`.
        search_space: `"paper"`, `"synthetic"` or a dict, see
            `keras_ils.methods.make_search_space`.
            Defaults to `"paper"`.
        objective: the metric trials are compared on, a `keras_tuner.Objective`
            or the name of a metric to minimise; give the tuner
            `hypermodel.objective`. Defaults to `OBJECTIVE` (`val_nll`, min).
        patience: early-stopping patience in epochs (paper: 10); `None`
            adds no early stopping. Defaults to `10`.
        seed: when given, `keras.utils.set_random_seed(seed)` runs before
            every build and every fit, so all trials start from the same
            initial weights (and, with a dataset function, see the same
            batches) and differ only in their hyperparameters. Defaults to
            `None`.
        loss_options: further loss arguments shared by all trials (for
            `ILSLoss`: `max_epsilon`, `family`). Defaults to `None`.

    Example:

    >>> import keras_tuner
    >>> def build_model(hp):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(64, "relu"), keras.layers.Dense(3)])
    ...     model.compile(optimizer=keras.optimizers.Adam(1e-2))
    ...     return model
    >>> hypermodel = ILSHyperModel(build_model, num_classes=3, method="ils1")
    >>> tuner = keras_tuner.GridSearch(
    ...     hypermodel, objective=hypermodel.objective, directory="/tmp/ils_doctest", overwrite=True)
    >>> sorted(tuner.oracle.get_space().values)
    ['p1', 'p2']

    Then `tuner.search(train_with_teacher.batch(32), validation_data=val.batch(512), epochs=500)`
    and `best_student(tuner, calibrate_on=val.batch(512))`.

    References:
        Maher & Kull (2021), §5 (grids, selection by validation loss) and appendix A.
    """

    def __init__(
        self,
        build_model: Callable[[keras_tuner.HyperParameters], keras.Model],
        num_classes: int,
        method: str = "ils",
        search_space: str | Mapping = "paper",
        objective: str | keras_tuner.Objective = OBJECTIVE,
        patience: int | None = 10,
        seed: int | None = None,
        loss_options: dict | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not callable(build_model):
            raise TypeError(f"Argument `build_model` must be a callable `hp -> keras.Model`. Received: {build_model!r}")
        self.build_model = build_model
        self.num_classes = integer_at_least("num_classes", num_classes, 2)
        self.method = method
        self.space = methods.make_search_space(method, search_space)
        self.objective = keras_tuner.Objective(objective, "min") if isinstance(objective, str) else objective
        if not isinstance(self.objective, keras_tuner.Objective):
            raise TypeError(f"Argument `objective` must be a str or a keras_tuner.Objective. Received: {objective!r}")
        self.patience = None if patience is None else integer_at_least("patience", patience, 1)
        self.seed = seed
        self.loss_options = dict(loss_options or {})
        self._loss({name: values[0] for name, values in self.space.items()})  # bad options fail here, not in a trial

    def _loss(self, values):
        return methods.get(self.method).loss(self.num_classes, **values, **self.loss_options)

    def build(self, hp):
        values = {name: hp.Choice(name, values, ordered=True) for name, values in self.space.items()}
        if self.seed is not None:
            keras.utils.set_random_seed(self.seed)
        model = self.build_model(hp)
        self._check_model(model)
        config = keras.saving.deserialize_keras_object(model.get_compile_config())
        metrics = list(config.get("metrics") or [])
        if not any(isinstance(metric, NegativeLogLikelihood) for metric in metrics):
            metrics.append(NegativeLogLikelihood(from_logits=True))
        config.update(loss=self._loss(values), metrics=metrics)
        model.compile(**config)
        if model.built and not model.optimizer.built:
            # built here, Keras traces the train step once per trial; built inside it, tf.function traces twice
            model.optimizer.build(model.trainable_variables)
        if self.objective.name not in _logged_names(model):
            raise ValueError(
                f"Invalid value for argument `objective`. The model logs {sorted(_logged_names(model))}. "
                f"Received: objective={self.objective.name!r}"
            )
        return model

    def _check_model(self, model):
        if not isinstance(model, keras.Model):
            raise TypeError(f"`build_model` must return a keras.Model. Received: {type(model).__name__}")
        if not model.compiled:
            raise ValueError(
                "`build_model` must return a compiled model (its optimizer and metrics are kept, the loss is "
                f"replaced by the method's). Received an uncompiled model {model.name!r}; call `model.compile(...)`."
            )
        try:
            outputs = model.output_shape[-1]
        except (AttributeError, ValueError):  # a subclassed model that is not built yet: checked at fit
            return
        if outputs != self.num_classes:
            raise ValueError(
                f"`build_model` returned a model with {outputs} outputs; the data has num_classes={self.num_classes}."
            )

    def fit(self, hp, model, *args, callbacks=None, **kwargs):
        callbacks = [*(callbacks or []), *methods.get(self.method).training_callbacks(model.loss)]  # OLS's update
        if self.patience is not None and not any(isinstance(c, keras.callbacks.EarlyStopping) for c in callbacks):
            callbacks.append(
                keras.callbacks.EarlyStopping(
                    monitor=self.objective.name,
                    mode=self.objective.direction,
                    patience=self.patience,
                    restore_best_weights=True,
                )
            )
        if self.seed is not None:
            keras.utils.set_random_seed(self.seed)  # before the dataset is made: its random ops take this seed
        if args and callable(args[0]):
            args = (args[0](),) + tuple(args[1:])
        elif callable(kwargs.get("x")):
            kwargs["x"] = kwargs["x"]()
        if isinstance(kwargs.get("x", args[0] if args else None), tf.data.Dataset):
            kwargs.setdefault("shuffle", False)  # a dataset shuffles itself; Keras warns about `shuffle=True`
        return model.fit(*args, callbacks=callbacks, **kwargs)


def best_student(
    tuner: keras_tuner.Tuner, *, calibrate_on: tf.data.Dataset | tuple | None = None, **calibrate_options
) -> keras.Model:
    """The best trial's model at its best epoch; temperature-scaled on `calibrate_on` when given.

    Args:
        tuner: a `keras_tuner.Tuner` whose search has run.
        calibrate_on: validation data (hard labels) to fit the student's
            temperature on (the paper's "+TempS"); `None` returns the model as
            trained. Defaults to `None`.
        **calibrate_options: the temperature fit (`estimator`,
            `prior_scale`, `bounds`), as in `keras_ils.calibrate`.

    Returns:
        A `keras.Model`; with `calibrate_on`, it ends in a fitted
        `keras_ils.TemperatureScaling` layer.
    """
    with warnings.catch_warnings():  # the checkpoint holds the optimizer's state, which inference does not need
        warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
        model = tuner.get_best_models(num_models=1)[0]
    return model if calibrate_on is None else calibration.calibrate(model, calibrate_on, **calibrate_options)


Algorithm = Literal["grid", "random", "bayesian", "hyperband"]
ALGORITHMS = get_args(Algorithm)


def tuner_for(
    algorithm: Algorithm,
    hypermodel: ILSHyperModel,
    *,
    directory: str,
    project_name: str,
    max_trials: int | None = None,
    max_epochs: int = 500,
    seed: int | None = None,
    **kwargs,
):
    """A KerasTuner tuner of `algorithm` for `hypermodel`, resuming from `directory` when it holds one.

    Args:
        algorithm: `"grid"` (`GridSearch`, every point when `max_trials` is
            `None`: the paper's protocol), `"random"` (`RandomSearch`),
            `"bayesian"` (`BayesianOptimization`) or `"hyperband"`
            (`Hyperband`, budgeted by `max_epochs`, not `max_trials`): the
            subclasses of the KerasTuner tuners of those names whose state
            survives a kill at any moment (`keras_ils.tuning.tuners`, re-exported here).
        hypermodel: an `ILSHyperModel`; its objective is the tuner's.
        directory: where KerasTuner keeps its state; a search started again
            on the same directory and project skips the trials it completed.
        project_name: the search's folder inside `directory`.
        max_trials: trials to run. Defaults to `None`: the whole grid for
            `"grid"`, the grid's size for `"random"` and `"bayesian"`.
        max_epochs: Hyperband's largest epoch budget. Defaults to `500`.
        seed: the oracle's random seed. Defaults to `None`.
            `"bayesian"` needs scikit-learn: `pip install keras-ils[bayesian]`.
        **kwargs: further tuner arguments (`distribution_strategy`, ...).

    Example:

    >>> def build_model(hp):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    ...     model.compile(optimizer="adam")
    ...     return model
    >>> hypermodel = ILSHyperModel(build_model, num_classes=3, method="ls")
    >>> tuner = tuner_for("random", hypermodel, directory="/tmp/ils_doctest", project_name="ls", overwrite=True)
    >>> type(tuner).__name__, tuner.oracle.max_trials
    ('RandomSearch', 5)
    """
    if algorithm not in ALGORITHMS:
        raise invalid("algorithm", f"one of {ALGORITHMS}", algorithm)
    if max_trials is not None:
        max_trials = integer_at_least("max_trials", max_trials, 1)
    grid_size = 1
    for values in hypermodel.space.values():
        grid_size *= len(values)
    common = dict(objective=hypermodel.objective, directory=directory, project_name=project_name, seed=seed, **kwargs)
    if algorithm == "grid":
        return GridSearch(hypermodel, max_trials=max_trials, **common)
    if algorithm == "hyperband":
        return Hyperband(hypermodel, max_epochs=integer_at_least("max_epochs", max_epochs, 2), **common)
    tuner = RandomSearch if algorithm == "random" else BayesianOptimization
    return tuner(hypermodel, max_trials=max_trials or grid_size, **common)
