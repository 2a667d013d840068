"""What lets a killed run resume: the search directory's settings and the single-fit students kept in it."""

from __future__ import annotations

import json
import os

from keras_ils._files import atomic_write
from keras_ils.comparison.main_job import fitting

__all__ = ["run_settings", "same_search_settings", "single_fit_student", "student_settings"]


def same_search_settings(directory, setup):
    """A search directory keeps the settings it was made with (`search_settings.json`): its teacher, cached targets
    and trials depend on the data, the model, the seed, the recipe and the temperature fit (`run_settings`), so
    resuming it with others is a `ValueError` naming the first that differs, never a silent mix."""
    settings = run_settings(setup)
    path = os.path.join(directory, "search_settings.json")
    if not os.path.exists(path):
        atomic_write(path, lambda file: file.write(json.dumps(settings, indent=2).encode()))
        return
    with open(path) as file:
        made_with = json.load(file)
    for name, value in settings.items():
        if made_with.get(name) != value:
            raise ValueError(
                f"The search in {directory} was made with {name} {made_with.get(name)!r}, not {value!r}: its "
                "teacher, targets and trials depend on it. Resume with the same settings, or use another directory."
            )


def run_settings(setup) -> dict:
    """What a search directory's teacher, targets and trials depend on, as JSON reads it back (tuples as lists): the
    temperature fit, the data, the model, the seed and the recipe."""
    splits, config = setup.splits, setup.config
    settings = {
        "temperature_fit": config.temperature_estimator,
        "dataset": splits.name,
        "num_classes": splits.num_classes,
        "input_shape": splits.input_shape,
        "model": config.model_name,
        "seed": config.seed,
        "recipe": vars(config.recipe),
    }
    return json.loads(json.dumps(settings))


def student_settings(setup, method, hyperparameters_used, teacher_logits) -> dict:
    """What a single-fit student depends on, as JSON reads it back: its search directory's settings
    (`run_settings`), its method and values, and the teacher and training data (the teacher-logits cache's
    fingerprint)."""
    settings = {"method": method, "hyperparameters": hyperparameters_used, "teacher_logits": teacher_logits.fingerprint}
    return {**run_settings(setup), **json.loads(json.dumps(settings))}


def single_fit_student(setup, loss, train_set, callbacks, saved_at, settings):
    """A student trained by one `model.fit`, or loaded from `saved_at` when it was saved there with `settings`.

    The settings are kept beside the model (`student_METHOD.json`); a student
    saved with other settings is trained again and replaced.
    """
    settings_path = saved_at.removesuffix(".keras") + ".json"
    if os.path.exists(saved_at) and os.path.exists(settings_path):
        with open(settings_path) as file:
            if json.load(file) == settings:
                return fitting.load_model(saved_at, setup.config.strategy)
    if os.path.exists(settings_path):  # a kill after the new model is saved must not pair it with these settings
        os.remove(settings_path)
    student = fitting.fit_network(setup, loss, train_set, callbacks)
    fitting.save_model(student, saved_at)
    atomic_write(settings_path, lambda file: file.write(json.dumps(settings, indent=2).encode()))
    return student
