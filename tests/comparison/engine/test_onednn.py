import os
import sys

import pytest
import tensorflow as tf

from keras_ils.comparison.engine import onednn

_AVX2_ONLY = "fpu sse sse2 avx avx2 fma bmi2"  # e.g. an AMD EPYC (Zen 2/3)
_SAPPHIRE_RAPIDS = _AVX2_ONLY + " avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8"


class TestWholeEpochXla:
    """`jit_compile="auto"`: TensorFlow ops where TensorFlow runs oneDNN on a CPU-only machine, else whole-epoch XLA."""

    @pytest.mark.parametrize(
        "flags, setting, platform, expected",
        [
            (_AVX2_ONLY, None, "linux", False),
            (_SAPPHIRE_RAPIDS, None, "linux", True),
            (_AVX2_ONLY + " avx512_vnni", None, "linux", True),  # Cascade Lake
            (_AVX2_ONLY + " avx_vnni", None, "linux", True),  # Alder Lake
            (_AVX2_ONLY + " avx512f", None, "linux", False),  # Skylake: AVX-512 without VNNI
            (_SAPPHIRE_RAPIDS, "0", "linux", False),
            (_SAPPHIRE_RAPIDS, "False", "linux", False),
            (_AVX2_ONLY, "1", "linux", True),
            (_AVX2_ONLY, "TRUE", "linux", True),
            (_SAPPHIRE_RAPIDS, "yes", "linux", True),  # not a value TensorFlow reads: its default stands
            (_AVX2_ONLY, "yes", "linux", False),
            ("", None, "linux", False),  # no flags line (an ARM CPU)
            ("", None, "win32", False),
            ("", "1", "win32", True),
            (_SAPPHIRE_RAPIDS, "1", "darwin", False),  # no oneDNN in TensorFlow's macOS builds
        ],
    )
    def test_onednn_rule(self, flags, setting, platform, expected):
        environ = {} if setting is None else {"TF_ENABLE_ONEDNN_OPTS": setting}
        assert onednn.tensorflow_runs_onednn(flags.split(), environ, platform) is expected

    @pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
    @pytest.mark.parametrize(
        "flags, setting, expected",
        [
            (_AVX2_ONLY, None, True),
            (_SAPPHIRE_RAPIDS, None, False),
            (_SAPPHIRE_RAPIDS, "0", True),
            (_AVX2_ONLY, "1", False),
        ],
    )
    def test_reads_cpuinfo_and_the_environment(self, monkeypatch, tmp_path, flags, setting, expected):
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nmodel name\t: some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        monkeypatch.setattr(onednn, "_CPUINFO", str(cpuinfo))
        if setting is None:
            monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
        else:
            monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", setting)
        assert onednn.cpu_flags() == frozenset(flags.split())
        monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: [])
        assert onednn.whole_epoch_xla() is expected
        monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: ["GPU:0"] if kind == "GPU" else [])
        assert onednn.whole_epoch_xla() is True  # a GPU: XLA whatever the CPU

    def test_no_cpuinfo_means_no_cpu_flags(self, monkeypatch, tmp_path):
        monkeypatch.setattr(onednn, "_CPUINFO", str(tmp_path / "missing"))
        assert onednn.cpu_flags() == frozenset()

    def test_agrees_with_tensorflows_own_flag_on_this_machine(self):
        """TensorFlow's internal flag read as an oracle for the rule: in this test only, never in the package."""
        util_port = pytest.importorskip("tensorflow.python.util._pywrap_util_port")
        ours = onednn.tensorflow_runs_onednn(onednn.cpu_flags(), os.environ, sys.platform)
        assert ours == util_port.IsMklEnabled()
