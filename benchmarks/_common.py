"""What every benchmark shares: the machine, interleaved timing, ratios, GPU utilisation, tables.

Timings on a shared machine drift; these helpers measure the variants being
compared side by side. `interleaved` runs one call of every variant per round,
rotating which goes first, so a slow spell hits every variant alike, and
ratios are taken per round (adjacent calls) and summarised by their median.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# the repository's package, not whatever `keras_ils` is installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def accelerators() -> list[str]:
    """The Keras backend's accelerators (GPUs, TPUs), as the backend names them; empty on a CPU. Imports only the
    backend's own framework (no TensorFlow under JAX or torch)."""
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return [str(device) for device in jax.devices() if device.platform != "cpu"]
    if backend == "torch":
        import torch

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if backend == "tensorflow":
        import tensorflow as tf

        return [device.name for device in tf.config.list_physical_devices("GPU")]
    return []


def machine() -> list[str]:
    """Lines describing this machine and software: CPU, cores, GPUs, the Keras backend and its version, date."""
    import importlib

    import keras

    cpu = platform.processor() or platform.machine()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    gpus = accelerators()
    gpu_names = _nvidia_smi(["--query-gpu=name", "--format=csv,noheader"]) if gpus else None
    backend = keras.backend.backend()
    version = getattr(importlib.import_module(backend), "__version__", "?")
    return [
        f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"command: python {' '.join(sys.argv)}",
        f"cpu: {cpu}, {os.cpu_count()} logical cores (nproc)",
        f"gpu: {', '.join(gpu_names) if gpu_names else (', '.join(gpus) if gpus else 'no GPU')}",
        f"python {platform.python_version()}, keras {keras.__version__} on {backend} {version}",
    ]


def print_header(title: str) -> None:
    print(f"# {title}")
    for line in machine():
        print(f"# {line}")
    print()


def _nvidia_smi(arguments):
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(["nvidia-smi", *arguments], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return lines if result.returncode == 0 and lines else None


class GpuUtilisation:
    """Samples `nvidia-smi --query-gpu=utilization.gpu` every 100 ms in a background thread.

    Use as a context manager; `mean` is the average utilisation (%) over the
    block, or `None` where no GPU (or no `nvidia-smi`) is present.
    """

    def __init__(self, interval_ms: int = 100):
        self.interval_ms = interval_ms
        self.samples: list[float] = []
        self._process = None
        self._thread = None

    @staticmethod
    def available() -> bool:
        return bool(accelerators()) and shutil.which("nvidia-smi") is not None

    def __enter__(self):
        if not self.available():
            return self
        command = [
            "nvidia-smi",
            "--query-gpu=utilization.gpu",
            "--format=csv,noheader,nounits",
            f"-lms={self.interval_ms}",
        ]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self):
        for line in self._process.stdout:
            values = [float(v) for v in line.split(",") if v.strip().replace(".", "", 1).isdigit()]
            if values:
                self.samples.append(float(np.mean(values)))  # several GPUs: their mean

    def __exit__(self, *exc):
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._thread.join(timeout=10)

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.samples)) if self.samples else None


def describe_utilisation(value: float | None) -> str:
    return "no GPU" if value is None else f"{value:.0f} %"


class Seconds(float):
    """A duration a function measured itself; `interleaved` takes it instead of timing the call."""


def interleaved(calls: dict, rounds: int, warmup: int = 1) -> dict[str, np.ndarray]:
    """Runs every function in `calls` once per round, in rotating order, `warmup + rounds` rounds.

    A function returns the `Seconds` it measured itself (e.g. the median step
    of a short `fit`); otherwise its call is timed from outside (it must then
    block until its work is done). The `warmup` rounds (tracing, compilation,
    caches) are dropped.

    Returns:
        `{name: seconds [rounds]}`, entry `r` of every array from the same round.
    """
    names = list(calls)
    times = {name: [] for name in names}
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            measured = calls[name]()
            elapsed = measured if isinstance(measured, Seconds) else time.perf_counter() - start
            if r >= warmup:
                times[name].append(elapsed)
    return {name: np.asarray(values) for name, values in times.items()}


def paired_ratio(times: dict[str, np.ndarray], name: str, baseline: str) -> tuple[float, float, float]:
    """Median and interquartile range of the per-round ratios `times[name] / times[baseline]`."""
    ratios = times[name] / times[baseline]
    low, median, high = np.percentile(ratios, [25, 50, 75])
    return float(median), float(low), float(high)


def table(headers: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured markdown table (it reads as plain text too)."""
    cells = [[str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def verdict(value: float, limit: float) -> str:
    """For a quantity whose target is an upper limit."""
    return f"met (<= {limit:.3f})" if value <= limit else f"MISSED (> {limit:.3f})"


def verdict_at_least(value: float, limit: float) -> str:
    """For a quantity whose target is a lower limit."""
    return f"met (>= {limit:g})" if value >= limit else f"MISSED (< {limit:g})"


def fit_step_seconds(model, dataset, steps: int) -> Seconds:
    """Median wall time of one training step over `steps` steps of `model.fit` (first step dropped).

    The logs are read every step (a callback that is not async-safe), so
    each step ends when its work is done, on any device.
    """
    import keras

    class _StepEnds(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.ends = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

    timer = _StepEnds()
    model.fit(dataset, steps_per_epoch=steps + 1, epochs=1, verbose=0, callbacks=[timer])
    return Seconds(np.median(np.diff(timer.ends)))


def in_graph_seconds(body, args, repetitions: int, jit_compile: bool = False):
    """A function timing `body(*args, i)` run `repetitions` times inside one `tf.function` loop.

    `body` returns a scalar and must use `i` (a float), so no iteration can be
    hoisted out of the loop; iterations run one at a time; the dispatch of the
    call is shared by all repetitions. The returned function returns seconds
    per repetition.
    """
    import tensorflow as tf

    @tf.function(jit_compile=jit_compile)
    def run(*tensors):
        def step(i, total):
            return i + 1, total + tf.cast(body(*tensors, tf.cast(i, tf.float32)), tf.float32)

        # parallel_iterations=1: one repetition after the other, so the time is latency, not throughput
        return tf.while_loop(
            lambda i, total: i < repetitions, step, (tf.constant(0), tf.constant(0.0)), parallel_iterations=1
        )[1]

    def measure():
        start = time.perf_counter()
        run(*args).numpy()
        return Seconds((time.perf_counter() - start) / repetitions)

    return measure
