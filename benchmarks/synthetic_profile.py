"""Where the synthetic protocol's time goes: `run_replicates` under cProfile, cumulative seconds per stage.

Stages (cumulative time of the function, so nested calls are inside their caller):
`train_mlps` (the vectorised trainer, XLA compiles included), of it the compiled epoch calls
(`TFE_Py_Execute`: the epoch's compute), `student_targets` (the students' soft targets),
`_fit_temperatures` (temperature scaling of teachers and students), `replicate_rows` (selection and test
metrics on 15,000 points per replicate). Extrapolate linearly in `--replicates` with care: the
first call of each shape pays XLA's compile.

    python benchmarks/synthetic_profile.py [--replicates 5] [--pool-size 256] [--group 25]

`TF_ENABLE_ONEDNN_OPTS=0` in the environment makes `jit_compile="auto"` pick whole-epoch XLA
(`vectorised.whole_epoch_xla()`); `XLA_FLAGS=--xla_cpu_use_thunk_runtime=false` selects XLA's older CPU runtime.

cProfile charges every Python call, so stages made of many small calls (the trainer's pool refills, eager
TensorFlow ops) look larger here than they are: `benchmarks/synthetic_stages.py` gives each stage's wall clock
without a profiler.
"""

import argparse
import cProfile
import os
import pstats
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_ils.comparison.engine import vectorised  # noqa: E402
from keras_ils_experiments.synthetic_protocol import run  # noqa: E402

STAGES = {
    "train_mlps": ("vectorised.py", "train_mlps"),
    "  compiled epoch calls": ("~", "<built-in method tensorflow.python._pywrap_tfe.TFE_Py_Execute>"),
    "student_targets": ("stages.py", "student_targets"),
    "_fit_temperatures": ("calibration/temperature.py", "_fit_temperatures"),
    "replicate_rows (scoring)": ("scoring.py", "replicate_rows"),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicates", type=int, default=5)
    parser.add_argument("--pool-size", type=int, default=256)
    parser.add_argument("--group", type=int, default=25)
    args = parser.parse_args()
    print(f"whole_epoch_xla: {vectorised.whole_epoch_xla()}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    options = run.ProtocolOptions(replicates=args.replicates, seed=0, group=args.group, pool_size=args.pool_size)
    run.run_replicates(options, log=lambda *_: None)
    profile.disable()
    total = time.perf_counter() - started
    stats = pstats.Stats(profile).stats
    print(f"run_replicates: {total:.1f} s")
    for label, (file_end, name) in STAGES.items():
        seconds = sum(
            cumulative
            for (file, _, function), (_, _, _, cumulative, _) in stats.items()
            if file.endswith(file_end) and function == name
        )
        print(f"{label:28s} {seconds:7.1f} s  {100 * seconds / total:5.1f} %")


if __name__ == "__main__":
    main()
