"""Which epoch layout is fastest here: whether TensorFlow runs oneDNN on this CPU, by its public rule."""

from __future__ import annotations

import os
import sys

import tensorflow as tf

# The CPU features for which TensorFlow's Linux builds turn oneDNN on by default (`IsMklEnabled` in
# tensorflow/core/util/util.cc), as /proc/cpuinfo names them.
ONEDNN_CPU_FLAGS = frozenset({"avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"})
_CPUINFO = "/proc/cpuinfo"


def cpu_flags() -> frozenset:
    """The CPU's feature flags as Linux lists them in `/proc/cpuinfo` (x86's `flags` line); empty elsewhere.

    Example:

    >>> isinstance(cpu_flags(), frozenset)
    True
    """
    try:
        with open(_CPUINFO) as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def tensorflow_runs_onednn(flags, environ, platform: str) -> bool:
    """Whether TensorFlow runs oneDNN, by the rule its 2.9 release notes and `IsMklEnabled` state.

    Only TensorFlow's Linux and Windows builds include oneDNN. The
    `TF_ENABLE_ONEDNN_OPTS` environment variable decides where it is set
    (`"1"` or `"true"`: on, `"0"` or `"false"`: off, any case); otherwise it
    is on for Linux CPUs with one of `ONEDNN_CPU_FLAGS`, off on Windows.

    Args:
        flags: the CPU's feature flags (`cpu_flags()`).
        environ: the environment (`os.environ`).
        platform: `sys.platform`.

    Returns:
        `True` where TensorFlow runs oneDNN.

    Example:

    >>> tensorflow_runs_onednn({"avx2", "avx512_vnni"}, {}, "linux"), tensorflow_runs_onednn({"avx2"}, {}, "linux")
    (True, False)
    >>> tensorflow_runs_onednn({"avx2"}, {"TF_ENABLE_ONEDNN_OPTS": "1"}, "darwin")  # no oneDNN in macOS builds
    False
    """
    if not platform.startswith(("linux", "win")):
        return False
    setting = environ.get("TF_ENABLE_ONEDNN_OPTS", "").lower()
    if setting in ("1", "true"):
        return True
    if setting in ("0", "false"):
        return False
    return platform.startswith("linux") and bool(ONEDNN_CPU_FLAGS & frozenset(flags))


def whole_epoch_xla() -> bool:
    """What `MLPTraining(jit_compile="auto")` chooses: `True` unless TensorFlow runs oneDNN on a CPU-only machine.

    TensorFlow turns oneDNN on by default on Linux for CPUs with AVX512_VNNI,
    AVX512_BF16, AVX-VNNI or AMX (the flags `avx512_vnni`, `avx512_bf16`,
    `avx_vnni`, `amx_tile`, `amx_int8`, `amx_bf16` of `/proc/cpuinfo`), and
    `TF_ENABLE_ONEDNN_OPTS` overrides it (`"1"`/`"true"` on, `"0"`/`"false"`
    off); there its batched matrix products are faster than XLA's. Elsewhere
    (an AVX2-only CPU, macOS, a GPU) XLA compiling the whole epoch is faster.
    Decided from those public facts, not from TensorFlow's internals: an
    ARM Neoverse V1, where recent TensorFlow also turns oneDNN on, and
    Windows, where its default has changed between versions, get XLA unless
    `TF_ENABLE_ONEDNN_OPTS` says otherwise. Both layouts train the same
    models to float tolerance; only the speed differs.

    Example:

    >>> isinstance(whole_epoch_xla(), bool)
    True
    """
    if tf.config.list_logical_devices("GPU"):
        return True
    return not tensorflow_runs_onednn(cpu_flags(), os.environ, sys.platform)


__all__ = ["ONEDNN_CPU_FLAGS", "cpu_flags", "tensorflow_runs_onednn", "whole_epoch_xla"]
