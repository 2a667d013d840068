"""Test set-up: quiet TensorFlow, and two logical CPU devices for tf.distribute tests."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# pytest-xdist runs one worker per core: each worker's TensorFlow computes on one thread, so that the workers do not
# oversubscribe the cores (on 2 cores the default run took 4:34-4:59 with TensorFlow's own thread count, 3:59-4:21
# with one)
_WORKER = "PYTEST_XDIST_WORKER" in os.environ
if _WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

if _WORKER:
    tf.config.threading.set_intra_op_parallelism_threads(1)
_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)


def pytest_collection_modifyitems(config, items):
    """`tensorflow_only` tests (TensorFlow's GradientTape, graph-mode assertions) are skipped on other backends."""
    import keras

    if keras.backend.backend() == "tensorflow":
        return
    skip = pytest.mark.skip(reason=f"TensorFlow-specific; KERAS_BACKEND={keras.backend.backend()}")
    for item in items:
        if "tensorflow_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
    import keras

    doctest_namespace["np"] = np
    doctest_namespace["keras"] = keras


@pytest.fixture(scope="session")
def mirrored_strategy():
    """One MirroredStrategy over the 2 logical CPUs for the whole run.

    Several strategies in one process hand out clashing collective-op instance
    keys on CPU ("Shape mismatch in the collective instance"), so tests share one.
    """
    devices = [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
    assert len(devices) == 2
    return tf.distribute.MirroredStrategy(devices)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
