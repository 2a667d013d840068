"""The main job's progress on stderr: a line per stage, then Keras' `Progbar` over its models."""

from __future__ import annotations

import sys
import time

import keras

__all__ = ["Progress", "silent"]


def silent(line: str) -> None:
    """A `RunConfig.log` that drops every line, and with which `Progress` draws no bars: `compare(log=None)`."""


class Progress:
    """`run`'s and `tune`'s progress on stderr, in Keras' `fit` style: a line naming each stage ("ILS: 10 trials,
    about 2:10 left in all"), then Keras' `Progbar` over that stage's fits, with its own ETA.

    A stage counts fits (`fits`: a search's trials, one `model.fit` each; a
    search that stops early or resumes finished trials jumps to its end) or
    the table's rows scored (`rows`, after the vectorised engine has trained
    everything at once). The overall estimate is the mean time per fit so far.
    """

    def __init__(self, planned_fits: int, verbose: int, say=print):
        self.planned, self.shown, self.done, self.started = planned_fits, verbose == 0, 0, time.monotonic()
        self.say = say  # takes each stage line
        self.bars = self.shown and say is not silent  # Keras' bars, on stdout
        self.bar, self.count, self.position, self.counts_rows = None, 0, 0, False

    def fits(self, name: str, count: int, unit: str = "model") -> keras.callbacks.Callback:
        """Opens the stage of the next `count` fits of `name`, each one `unit` (`"trial"` for a KerasTuner search,
        where Hyperband fits a promoted model again); returns the callback that advances it as each ends
        (KerasTuner deep-copies callbacks into every trial: the state lives in a closure, which deep copies share)."""
        self._open(name, count, unit, counts_rows=False)

        def end():
            if self.position < count:
                self.position += 1
                self.bar.update(self.position)

        return _FitEnd(end)

    def rows(self, count: int):
        """Opens the stage of scoring the table's `count` rows (`scored` advances it)."""
        self._open("scoring the table's rows", count, "row", counts_rows=True)

    def scored(self):
        if self.counts_rows and self.position < self.count:
            self.position += 1
            self.bar.update(self.position)

    def stage_done(self):
        if self.position < self.count:
            self.position = self.count
            self.bar.update(self.count)

    def _open(self, name, count, unit, counts_rows):
        if self.bar is not None and not self.counts_rows:
            self.done += self.count
        left = ""
        elapsed = time.monotonic() - self.started
        if self.done and self.planned > self.done:
            seconds = round(elapsed / self.done * (self.planned - self.done))
            left = f", about {seconds // 60}:{seconds % 60:02d} left in all"
        if self.shown:
            self.say(f"{name}: {count} {unit}{'s' if count != 1 else ''}{left}")
        self.bar = keras.utils.Progbar(count, unit_name=unit, verbose=_bar_verbosity(self.bars))
        self.count, self.position, self.counts_rows = count, 0, counts_rows


def _bar_verbosity(shown: bool) -> int:
    """Keras' `Progbar` verbosity: 1 (the live bar) on a terminal, 2 (one line as each stage ends) when the
    progress goes to a file or a pipe, where the bar's carriage returns and colours would garble the log.
    `Progbar` writes to `sys.stdout`, which `keras-ils` points at stderr."""
    if not shown:
        return 0
    return 1 if getattr(sys.stdout, "isatty", lambda: False)() else 2


class _FitEnd(keras.callbacks.Callback):
    def __init__(self, on_end):
        super().__init__()
        self.on_end = on_end

    def on_train_end(self, logs=None):
        self.on_end()
