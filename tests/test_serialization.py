"""Every registered Keras object of the package saves in a `.keras` model that loads after a bare `import keras_ils`."""

import inspect
import json
import subprocess
import sys

import keras
import numpy as np

import keras_ils

# Constructor arguments of the registered objects that have required ones.
ARGUMENTS = {
    "ClasswiseExpectedCalibrationError": {"num_classes": 3},
    "ClassConditionalECE": {"num_classes": 3},
    "OnlineLabelSmoothing": {"num_classes": 3},
    "SizeStratifiedCoverage": {"num_classes": 3},
    "ClassConditionalCoverage": {"num_classes": 3},
}
# Objects that no `.keras` model holds by themselves, and why.
NOT_IN_A_MODEL = {
    "SoftTargetDistillation": "a keras.distillation.DistillationLoss, held by a Distiller, whose .keras file Keras "
    "does not write: its own get_config round trip is tested in tests/test_distillation.py",
}


def _registered() -> dict:
    """`{class name: class}` of every library object registered under the package (aliases once).

    The experiments' own layers (`keras_ils_experiments.zoo`) register when that package is imported.
    """
    classes = {}
    for key, obj in keras.saving.get_custom_objects().items():
        library = not obj.__module__.startswith("keras_ils_experiments")
        if key.startswith("keras_ils>") and inspect.isclass(obj) and library:
            classes.setdefault(obj.__name__, obj)
    return classes


def _mlp(*layers) -> keras.Model:
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="logits"), *layers])


def _model_with(cls) -> keras.Model:
    if issubclass(cls, keras.Model):  # a model wrapper: the online teacher
        model = cls(student=_mlp(), teacher=_mlp())
        model.compile(optimizer="adam", loss=keras_ils.ILSLoss(method="ils"))
        model(np.zeros((1, 4), "float32"))
        return model
    instance = cls(**ARGUMENTS.get(cls.__name__, {}))
    if issubclass(cls, keras.layers.Layer):
        model = _mlp(instance)
        model.compile(optimizer="adam", loss=keras.losses.CategoricalCrossentropy(from_logits=True))
        return model
    model = _mlp()
    if issubclass(cls, keras.losses.Loss):
        model.compile(optimizer="adam", loss=instance)
    elif issubclass(cls, keras.metrics.Metric):
        model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=[instance])
    else:
        raise AssertionError(f"no way to put {cls.__name__} into a model: add one here")
    return model


_LOAD = """
import json, sys
import keras, numpy as np
import keras_ils  # the only import: the package registers its objects
x = np.load(sys.argv[1])
found = {}
for name, path in json.loads(sys.argv[2]).items():
    model = keras.saving.load_model(path)
    config = model.get_compile_config() or {}
    held = json.dumps(config, default=str)
    found[name] = {"prediction": model.predict(x, verbose=0).tolist(), "in_compile_config": name in held}
print(json.dumps(found))
"""


def test_saved_models_load_after_a_bare_import(tmp_path):
    registered = _registered()
    assert {"ILSLoss", "TemperatureScaling", "ExpectedCalibrationError", "OnlineTeacher"} <= set(registered)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    paths, predictions = {}, {}
    for name, cls in sorted(registered.items()):
        if name in NOT_IN_A_MODEL:
            continue
        model = _model_with(cls)
        paths[name] = str(tmp_path / f"{name}.keras")
        model.save(paths[name])
        predictions[name] = model.predict(x, verbose=0)
    command = [sys.executable, "-c", _LOAD, str(tmp_path / "x.npy"), json.dumps(paths)]
    loaded = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
    assert set(loaded) == set(paths)
    for name, found in loaded.items():
        np.testing.assert_allclose(found["prediction"], predictions[name], rtol=1e-6, err_msg=name)
        cls = registered[name]
        if issubclass(cls, (keras.losses.Loss, keras.metrics.Metric)):
            assert found["in_compile_config"], f"{name} is not in the loaded model's compile config"


def test_every_exclusion_names_a_registered_object():
    assert set(NOT_IN_A_MODEL) <= set(_registered())
