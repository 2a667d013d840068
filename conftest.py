"""Test set-up: quiet TensorFlow, and two logical CPU devices for tf.distribute tests; or no TensorFlow at all.

`KERAS_ILS_BLOCK_TENSORFLOW=1` (with `KERAS_BACKEND=jax` or `torch`) makes `import tensorflow` fail for the whole
run, as on a machine without it (issue 37 item 3): the meta-path finders stop seeing it before anything imports it. CI
runs the core's tests so (`.ci/run`); a test module that needs TensorFlow fails to import there, so the pass names
its files.
"""

import importlib.abc
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
BLOCK_TENSORFLOW = os.environ.get("KERAS_ILS_BLOCK_TENSORFLOW") == "1"


class _WithoutTensorFlow(importlib.abc.MetaPathFinder):
    """One of `sys.meta_path`'s finders, blind to `tensorflow`: Python then finds no such package, so `import
    tensorflow` raises its `ModuleNotFoundError` and `importlib.util.find_spec` returns `None`, as when it is not
    installed (torch's dynamo asks find_spec; a finder that raised would break it)."""

    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow" or not hasattr(self.finder, "find_spec"):
            return None
        return self.finder.find_spec(name, path, target)

    def invalidate_caches(self):
        if hasattr(self.finder, "invalidate_caches"):
            self.finder.invalidate_caches()


if BLOCK_TENSORFLOW:
    if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow" or "tensorflow" in sys.modules:
        raise RuntimeError("KERAS_ILS_BLOCK_TENSORFLOW=1 needs KERAS_BACKEND=jax or torch, before TensorFlow loads.")
    sys.meta_path[:] = [_WithoutTensorFlow(finder) for finder in sys.meta_path]

# pytest-xdist runs one worker per core: each worker's TensorFlow computes on one thread, so that the workers do not
# oversubscribe the cores (on 2 cores the default run took 4:34-4:59 with TensorFlow's own thread count, 3:59-4:21
# with one)
_WORKER = "PYTEST_XDIST_WORKER" in os.environ
if _WORKER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

if not BLOCK_TENSORFLOW:
    import tensorflow as tf

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
    import tensorflow as tf

    devices = [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
    assert len(devices) == 2
    return tf.distribute.MirroredStrategy(devices)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
