"""Where the synthetic protocol's time goes, by wall clock: seconds in each stage of `run_replicates`.

Each stage's function is wrapped with a timer (no profiler: cProfile's per-call cost inflates the stages made of
many small Python and TensorFlow calls, such as the trainer's pool refills, and hides how long they really take).
Top-level stages add up to the run, apart from the loop's own bookkeeping (the "rest"); the nested ones are
inside them.

    python benchmarks/synthetic_stages.py [--replicates 25]

To compare with an earlier commit, run this same script from a worktree of it (`_common` puts the script's own
checkout first on the path): `git worktree add /tmp/before REV && cp benchmarks/synthetic_stages.py
/tmp/before/benchmarks/ && python /tmp/before/benchmarks/synthetic_stages.py`.
"""

import argparse
import collections
import time

from _common import machine

from keras_ils.calibration import temperature
from keras_ils.comparison.engine import vectorised
from keras_ils_experiments.synthetic_protocol import ProtocolOptions, extras, run, scoring, stages

# (label, module, function name): top-level stages of `run_replicates`, wrapped where their callers look them up
TOP_LEVEL = (
    ("training (`train_mlps`, all stages)", vectorised, "train_mlps"),
    ("students' targets (`stage_targets`)", stages, "stage_targets"),
    ("teachers' T* and logits", stages, "calibrated_teachers"),
    ("selection and test scores (`replicate_rows`)", scoring, "replicate_rows"),
    ("Fig. 2 counts (`add_histograms`)", extras, "add_histograms"),
    ("Table 2 teachers (`teacher_probabilities`)", extras, "teacher_probabilities"),
    ("Table 2 students' scores (`score_students`)", extras, "score_students"),
)
# (label, module, function name): inside the stages above
NESTED = (
    ("  temperature fits (`_fit_temperatures`)", temperature, "_fit_temperatures"),
    ("  forward passes outside training (`mlp_logits`)", vectorised, "mlp_logits"),
    ("  test metrics (`scoring.scores`)", scoring, "scores"),
)


def _timed(seconds, label, module, name):
    function = getattr(module, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[label] += time.perf_counter() - started

    setattr(module, name, wrapper)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicates", type=int, default=25)
    args = parser.parse_args()
    seconds = collections.Counter()
    for label, module, name in TOP_LEVEL + NESTED:
        _timed(seconds, label, module, name)
    started = time.perf_counter()
    result = run.run_replicates(ProtocolOptions(replicates=args.replicates, seed=0), log=None)
    total = time.perf_counter() - started
    print("\n".join(machine()))
    print(f"{args.replicates} replicates, {result['models_trained']:,} models, {result['model_epochs']:,} model-epochs")
    print("| stage | seconds | share |\n|---|---|---|")
    print(f"| `run_replicates`, total | {total:.1f} | 100 % |")
    rest = total - sum(seconds[label] for label, *_ in TOP_LEVEL)
    for label, *_ in TOP_LEVEL + (("rest (the loop's bookkeeping)",),) + NESTED:
        value = rest if label.startswith("rest") else seconds[label]
        print(f"| {label} | {value:.1f} | {100 * value / total:.1f} % |")


if __name__ == "__main__":
    main()
