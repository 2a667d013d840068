"""The paper's synthetic experiments at full scale: its appendix table, Table 1's dense/sparse LS rows, Fig. 4.

100 replicate datasets (train/validation 50 per class, test 5000 per class);
per replicate every model of the paper's grids (No LS, 12 LS, LS-0.2, 30 ILS1,
48 ILS2, 120 ILS: 212 MLPs 5 x 64, Adam 1e-2, early stopping 10, best
validation epoch), each with and without temperature scaling, selected by the
validation cross-entropy against hard labels. All 21,200 models train
together with `keras_ils.experiments.vectorised` (minutes on a CPU, where one `model.fit`
per model takes about a day). The table prints our averages with the paper's
in parentheses; win rates with sign tests follow.

Outputs in `--output-dir`: `synthetic_protocol.md` (the tables),
`synthetic_protocol.json` (everything, per replicate), and
`best_smoothing_bayes.png` / `best_smoothing_no_ls_temps.png` (Fig. 4: the
best LS smoothing factor per bin of the teacher's true-class probability, the
tuned ILS1 curve over it). The same as `keras-ils benchmark synthetic`.

Run:  python examples/synthetic_protocol.py [--replicates 100] [--seed 0] [--output-dir DIR] [--quick]
"""

import argparse
import os
import shlex
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_ils.experiments import synthetic_protocol  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="seed of the first replicate")
    parser.add_argument("--output-dir", default="runs/synthetic_protocol")
    parser.add_argument("--quick", action="store_true", help="small grids, 200 test points per class, 30 epochs")
    parser.add_argument(
        "--temperature-fit",
        choices=("map", "mle", "authors"),
        default="map",
        help="every model's temperature fit (keras_ils.calibration.fit_temperature's estimator; default: map)",
    )
    args = parser.parse_args(argv)
    settings = dict(quick=True, n_test=200, epochs=30) if args.quick else {}
    results = synthetic_protocol.run_replicates(
        args.replicates, args.seed, temperature_estimator=args.temperature_fit, **settings
    )
    command = "python examples/synthetic_protocol.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    summary = synthetic_protocol.write_outputs(results, args.output_dir, command)
    print(synthetic_protocol.markdown(results, summary, command))
    print(f"Written to {args.output_dir}/")
    return summary


if __name__ == "__main__":
    main()
