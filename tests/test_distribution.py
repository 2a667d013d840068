"""Every trainable piece runs under MirroredStrategy over 2 logical CPU devices (set in conftest.py), and an
ILS student under MultiWorkerMirroredStrategy over two worker processes."""

import json
import os
import socket
import subprocess
import sys

import keras
import multi_worker_job
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import log_softmax

import keras_ils
from keras_ils.baselines import BetaSmoothingLoss, BootstrapSoftLoss
from keras_ils.distillation import DistillationCrossEntropy, distiller

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTI_WORKER_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi_worker_job.py")


def _net():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])


def _setups(teacher):
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return {
        "ils": lambda: (_net(), keras_ils.ILSLoss(method="ils"), True),
        "dis_cached": lambda: (_net(), DistillationCrossEntropy(), True),
        "beta": lambda: (_net(), BetaSmoothingLoss(a=3.0, seed=1), False),
        "bs_soft": lambda: (_net(), BootstrapSoftLoss(), False),
        "online_teacher": lambda: (keras_ils.OnlineTeacher(_net(), teacher), keras_ils.ILSLoss(), False),
        "distiller": lambda: (distiller(teacher, _net()), sparse, False),
    }


# ~10 s each on 2 cores: the default run trains ILS (targets attached to the data) and the OnlineTeacher wrapper (a
# teacher inside the training step); `-m slow` the other losses and the distiller too
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "name",
    ["ils", "online_teacher"] + [pytest.param(n, marks=_SLOW) for n in ("dis_cached", "beta", "bs_soft", "distiller")],
)
def test_fit_under_mirrored_strategy(name, mirrored_strategy):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 3)).astype("float32"), rng.integers(0, 3, 64).astype("int32")
    strategy = mirrored_strategy
    with strategy.scope():
        teacher = _net()
        model, loss, needs_teacher_targets = _setups(teacher)[name]()
        model.compile(optimizer="sgd", loss=loss, metrics=[keras_ils.metrics.NegativeLogLikelihood(from_logits=True)])
    labels = keras_ils.teacher_targets(y, teacher.predict(x, verbose=0)) if needs_teacher_targets else y
    history = model.fit(tf.data.Dataset.from_tensor_slices((x, labels)).batch(16), epochs=2, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all() and history.history["loss"][1] != history.history["loss"][0]
    # the hard-label NLL metric equals numpy on the trained model's outputs, across replicas
    evaluated = model.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), verbose=0, return_dict=True)
    log_p = log_softmax(model.predict(x, verbose=0), axis=1)
    np.testing.assert_allclose(evaluated["nll"], -log_p[np.arange(64), y].mean(), rtol=1e-5)


def test_mirrored_strategy_gives_the_values_of_one_device(mirrored_strategy):
    """ILS loss, calibration metrics and a trainable TemperatureScaling: 2 replicas train like 1 device."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(96, 3)).astype("float32"), rng.integers(0, 4, 96).astype("int32")
    teacher_logits = 2.0 * rng.normal(size=(96, 4)).astype("float32")
    train = keras_ils.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y)), teacher_logits).batch(32)
    validation = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)

    def build():
        dense = [keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)]
        model = keras.Sequential([keras.Input((3,)), *dense, keras_ils.TemperatureScaling(1.0)])
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras_ils.ILSLoss(method="ils", p1=0.8, p2=2.0),
            metrics=keras_ils.metrics.calibration_metrics(4, from_logits=True),
        )
        return model

    keras.utils.set_random_seed(0)
    one = build()
    initial = one.get_weights()
    with mirrored_strategy.scope():
        two = build()
        two.set_weights(initial)
    want = one.fit(train, validation_data=validation, epochs=3, shuffle=False, verbose=0).history
    got = two.fit(train, validation_data=validation, epochs=3, shuffle=False, verbose=0).history
    assert sorted(got) == sorted(want) and {"loss", "ece", "cwece", "nll", "brier", "val_ece"} <= set(got)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    for got_weight, want_weight, start in zip(two.get_weights(), one.get_weights(), initial, strict=True):
        np.testing.assert_allclose(got_weight, want_weight, rtol=1e-5, atol=1e-6)
        assert not np.array_equal(want_weight, start)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow  # over 40 s on 2 cores; run with -m slow (issue 22: default run <= 5 min)
def test_multi_worker_mirrored_strategy_two_processes(tmp_path):
    """Two worker processes on 127.0.0.1 train an ILS student; both end with the same weights."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 3)).astype("float32"), rng.integers(0, 3, 64).astype("int32")
    teacher_logits = 2.0 * rng.normal(size=(64, 3)).astype("float32")
    keras.utils.set_random_seed(0)
    student = multi_worker_job.build_student(3, 3)
    initial = student.get_weights()
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=x, y=y, teacher_logits=teacher_logits, **{f"weight_{i}": w for i, w in enumerate(initial)})

    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(2)]}
    workers = []
    for index in range(2):
        env = {
            **os.environ,
            "PYTHONPATH": REPOSITORY,
            "CUDA_VISIBLE_DEVICES": "",
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
        }
        command = [sys.executable, MULTI_WORKER_JOB, str(inputs), str(tmp_path / f"worker{index}.npz")]
        workers.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outputs = [worker.communicate(timeout=240) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    for worker, (_, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr[-3000:]

    results = [np.load(tmp_path / f"worker{index}.npz") for index in range(2)]
    assert [int(r["replicas"]) for r in results] == [2, 2]
    final = [[r[f"weight_{i}"] for i in range(len(initial))] for r in results]
    for a, b in zip(*final, strict=True):
        np.testing.assert_array_equal(a, b)
    for name in ("loss", "nll"):
        np.testing.assert_array_equal(results[0][name], results[1][name])
    assert all(not np.allclose(a, b) for a, b in zip(final[0][:2], initial[:2], strict=True))
    assert np.isfinite(results[0]["loss"]).all()

    # the same global batches on one device give the same training (gradients summed in another order)
    multi_worker_job.compile_student(student)
    history = student.fit(
        multi_worker_job.training_data(x, y, teacher_logits), epochs=multi_worker_job.EPOCHS, shuffle=False, verbose=0
    )
    for name in ("loss", "nll"):
        np.testing.assert_allclose(results[0][name], history.history[name], rtol=1e-5, err_msg=name)
    for got, want in zip(final[0], student.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
