"""KerasTuner's four tuners, same arguments, whose search survives a kill at any moment.

`GridSearch`, `RandomSearch`, `BayesianOptimization` and `Hyperband` are
subclasses of their KerasTuner namesakes: each runs its namesake's own
`__init__` whole (the arguments, the attributes it sets, the oracle it
builds) and changes only what is written to disk and how it is read back:

- every state file (`oracle.json`, `trial.json`, `tuner0.json`) is written
  beside its place and renamed into it, so a kill never leaves a truncated one;
- a reloaded oracle forgets a trial it never recorded as started and ends one
  whose own file says it ended (`_KillSafeState`);
- the grid search rebuilds its bookkeeping from the trials on disk, so it
  resumes at all (`ResumableGridSearchOracle`, keras-team/keras-tuner#1055);
- the temporary files of writes that a kill cut short are removed when the
  search is opened.

They rely on some of KerasTuner's private members (`tests/tuning/test_tuners.py`
lists them and checks them against the installed KerasTuner), hence the
`keras-tuner<1.5` requirement. `keras_ils.tuning` re-exports the public names
and `keras_ils.tuning.tuner_for` picks one by name.
"""

from __future__ import annotations

import functools
import json
import os

import keras_tuner
import tensorflow as tf

from keras_ils._files import atomic_write, remove_interrupted_writes

__all__ = ["BayesianOptimization", "GridSearch", "Hyperband", "RandomSearch", "ResumableGridSearchOracle"]


def _remote(path) -> bool:
    """A `scheme://` path (an object store: no atomic rename, nothing left behind to clean up)."""
    return "://" in str(path)


def _write_state(path, state: dict):
    """Writes a KerasTuner state file whole or not at all (remote paths: in place, as KerasTuner does)."""
    text = json.dumps(state)
    if _remote(path):
        with tf.io.gfile.GFile(path, "w") as file:
            file.write(text)
    else:
        atomic_write(path, lambda file: file.write(text.encode("utf-8")))


class _KillSafeState:
    """Oracle mixin: state files replaced whole, and a trial that ended on disk stays ended on reload.

    KerasTuner 1.4.8 rewrites `oracle.json` and `trial.json` in place, so a
    search killed while it was writing one left an empty or truncated file, and
    the search started again on that directory died reloading it
    (`JSONDecodeError`). Here each file is written beside its place and renamed
    into it.

    Starting and ending a trial write its `trial.json` first and `oracle.json`
    after (which, after an end, still lists the trial as running until the
    tuner's next save). A kill in between left a started trial that the
    reloaded oracle never knew of, yet counted against `max_trials`, or made
    it run a completed trial again. On reload, a trial the oracle's file never
    started is forgotten (it is made again), and one whose own file says
    `COMPLETED` or `FAILED` is ended, not retried.
    """

    def set_state(self, state):
        super().set_state(state)
        for trial_id in set(self.trials) - set(self.start_order):
            del self.trials[trial_id]
        ended = (keras_tuner.engine.trial.TrialStatus.COMPLETED, keras_tuner.engine.trial.TrialStatus.FAILED)
        for tuner_id, trial in list(self.ongoing_trials.items()):
            if trial.status in ended:
                del self.ongoing_trials[tuner_id]
                if trial.trial_id not in self.end_order:
                    self.end_order.append(trial.trial_id)

    def save(self):
        _write_state(self._get_oracle_fname(), self.get_state())

    def _save_trial(self, trial):
        _write_state(os.path.join(self._get_trial_dir(trial.trial_id), "trial.json"), trial.get_state())


class ResumableGridSearchOracle(_KillSafeState, keras_tuner.oracles.GridSearchOracle):
    """KerasTuner's `GridSearchOracle` that resumes after a crash.

    KerasTuner 1.4.8 does not save the grid's bookkeeping (the trials in grid
    order and the queue of trials whose successor is due), so a grid search
    reloaded from its directory dies with `KeyError: '<trial id>'` after its
    first trial (keras-team/keras-tuner#1055). This oracle rebuilds both from
    the trials on disk when it reloads, which is what an uninterrupted search
    would hold: completed trials are kept, the trial that was running is run
    again, and the grid goes on where it stopped. Its state files are written
    whole or not at all, so a kill at any moment leaves a directory it can
    reload.
    """

    def set_state(self, state):
        super().set_state(state)
        started = [trial_id for trial_id in self.start_order if trial_id in self.trials]
        values = lambda trial_id: self.trials[trial_id].hyperparameters.values  # noqa: E731
        in_grid_order = sorted(started, key=functools.cmp_to_key(lambda a, b: self._compare(values(a), values(b))))
        self._ordered_ids = type(self._ordered_ids)()
        for trial_id in in_grid_order:
            self._ordered_ids.insert(trial_id)
        # a trial whose successor was already made is skipped by populate_space, so queueing all is safe
        self._populate_next = [trial_id for trial_id in self.end_order if trial_id in self.trials]


class _RandomSearchOracle(_KillSafeState, keras_tuner.oracles.RandomSearchOracle):
    pass


class _BayesianOptimizationOracle(_KillSafeState, keras_tuner.oracles.BayesianOptimizationOracle):
    pass


class _HyperbandOracle(_KillSafeState, keras_tuner.oracles.HyperbandOracle):
    pass


class _KillSafeTuner(keras_tuner.Tuner):
    """The `keras_tuner.Tuner` beneath a KerasTuner tuner: its oracle kill-safe, its state file written whole.

    A tuner lists it after its KerasTuner namesake (`class RandomSearch(keras_tuner.RandomSearch,
    _KillSafeTuner)`), so it sits between that tuner and `keras_tuner.Tuner` in the method
    resolution order: the namesake's own `__init__` runs whole (its arguments, the attributes it
    sets, the stock oracle it builds from them) and hands its oracle to `super().__init__`, which is
    this `__init__`. Here the oracle becomes its kill-safe subclass, `_oracle_class` (which adds
    methods, no state), before `keras_tuner.Tuner` reloads it from the directory; then the
    temporary files of writes that a kill cut short are removed (by the chief alone in distributed
    mode: it writes the oracle's files).
    """

    _oracle_class = None  # the kill-safe subclass of the namesake's stock oracle class

    def __init__(self, oracle, hypermodel=None, **kwargs):
        stock = self._oracle_class.__bases__[-1]
        if type(oracle) is not stock:  # a KerasTuner whose tuner builds another oracle: see tests/tuning/test_tuners.py
            raise TypeError(
                f"`{type(self).__name__}` expects its KerasTuner namesake to build a `{stock.__name__}`. "
                f"Received: {type(oracle).__name__}"
            )
        oracle.__class__ = self._oracle_class
        super().__init__(oracle, hypermodel, **kwargs)
        if not _remote(self.project_dir):
            own_files = [self._get_tuner_fname()]
            if not self._is_worker():
                own_files += [self.oracle._get_oracle_fname(), os.path.join(self.project_dir, "trial_*", "trial.json")]
            for path_pattern in own_files:
                remove_interrupted_writes(path_pattern)

    def save(self):
        if not self._is_worker():
            self.oracle.save()
        _write_state(self._get_tuner_fname(), self.get_state())


class GridSearch(keras_tuner.GridSearch, _KillSafeTuner):
    """`keras_tuner.GridSearch`, same arguments, that resumes after a crash (`ResumableGridSearchOracle`).

    Example:

    >>> import keras
    >>> from keras_ils.tuning import ILSHyperModel
    >>> def build_model(hp):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    ...     model.compile(optimizer="adam")
    ...     return model
    >>> hypermodel = ILSHyperModel(build_model, num_classes=3, method="ils1")
    >>> tuner = GridSearch(hypermodel, objective=hypermodel.objective, directory="/tmp/ils_doctest", overwrite=True)
    >>> type(tuner.oracle).__name__
    'ResumableGridSearchOracle'
    """

    _oracle_class = ResumableGridSearchOracle


class RandomSearch(keras_tuner.RandomSearch, _KillSafeTuner):
    """`keras_tuner.RandomSearch`, same arguments, whose state files survive a kill at any moment.

    `BayesianOptimization` and `Hyperband` are the same for their KerasTuner
    namesakes.

    Example:

    >>> import keras
    >>> from keras_ils.tuning import ILSHyperModel
    >>> def build_model(hp):
    ...     model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    ...     model.compile(optimizer="adam")
    ...     return model
    >>> hypermodel = ILSHyperModel(build_model, num_classes=3, method="ls")
    >>> tuners = [
    ...     RandomSearch(hypermodel, objective=hypermodel.objective, max_trials=3, directory="/tmp/ils_doctest",
    ...                  project_name="random", overwrite=True),
    ...     Hyperband(hypermodel, objective=hypermodel.objective, max_epochs=9, directory="/tmp/ils_doctest",
    ...               project_name="hyperband", overwrite=True),
    ... ]
    >>> [(isinstance(t, keras_tuner.Tuner), type(t.oracle).__name__) for t in tuners]
    [(True, '_RandomSearchOracle'), (True, '_HyperbandOracle')]
    >>> tuners[0].oracle.max_trials, tuners[1].oracle.max_epochs
    (3, 9)
    """

    _oracle_class = _RandomSearchOracle


class BayesianOptimization(keras_tuner.BayesianOptimization, _KillSafeTuner):
    """`keras_tuner.BayesianOptimization`, same arguments, whose state files survive a kill (see `RandomSearch`)."""

    _oracle_class = _BayesianOptimizationOracle


class Hyperband(keras_tuner.Hyperband, _KillSafeTuner):
    """`keras_tuner.Hyperband`, same arguments, whose state files survive a kill at any moment (see `RandomSearch`)."""

    _oracle_class = _HyperbandOracle
