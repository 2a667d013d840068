"""The paper's synthetic experiments at full scale: its appendix table, Table 1's dense/sparse LS rows, Fig. 4.

100 replicate datasets (train/validation 50 per class, test 5000 per class);
per replicate every model of the paper's grids (No LS, 12 LS, LS-0.2, 30 ILS1,
48 ILS2, 120 ILS: 212 MLPs 5 x 64, Adam 1e-2, early stopping 10, best
validation epoch), each with and without temperature scaling, selected by the
validation cross-entropy against hard labels. All 21,200 models train
together with `keras_ils.comparison.engine.vectorised` (minutes on a CPU, where one `model.fit`
per model takes about a day). The table prints our averages with the paper's
in parentheses; win rates with sign tests follow.

Outputs in `--output-dir`: `synthetic_protocol.md` (the tables),
`synthetic_protocol.json` (everything, per replicate), and
`best_smoothing_bayes.png` / `best_smoothing_no_ls_temps.png` (Fig. 4: the
best LS smoothing factor per bin of the teacher's true-class probability, the
tuned ILS1 curve over it). The same as `keras-ils benchmark synthetic`.

The authors' code's habits are options (`--preset authors` takes them all; see
`keras_ils_experiments.synthetic_protocol.run_replicates`); the outputs also hold
Table 1, Table 2 (self-distillation) and Fig. 2 (`prediction_histograms.png`).

Run:  python examples/synthetic_protocol.py [--replicates 100] [--seed 0] [--output-dir DIR] [--quick]
                                            [--preset authors] [--batch-size 128] [--weight-decay 1e-4] ...
"""

import argparse
import os
import shlex
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_ils_experiments import synthetic_protocol  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="seed of the first replicate")
    parser.add_argument("--output-dir", default="runs/synthetic_protocol")
    parser.add_argument("--quick", action="store_true", help="small grids, 200 test points per class, 30 epochs")
    parser.add_argument(
        "--temperature-fit",
        choices=("map", "mle", "authors"),
        help="every model's temperature fit (fit_calibrator('temperature')'s estimator; default: the "
        "preset's, map for the package's)",
    )
    parser.add_argument("--preset", choices=tuple(synthetic_protocol.PRESETS), default="package")
    parser.add_argument("--init", choices=("keras", "pytorch"), help="initialisation (default: the preset's)")
    parser.add_argument(
        "--independent-seeds", action="store_const", const=False, dest="shared_seeds", help="one seed per model"
    )
    parser.add_argument("--teacher-grid", choices=("paper", "authors"), help="ILS teacher temperatures")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--weight-decay", type=float, help="coupled (L2) weight decay")
    parser.add_argument("--smoothing-mass", choices=("all_classes", "wrong_classes"), help="ILS1's mass")
    parser.add_argument("--validation-loss", choices=("example_mean", "batch_mean"), help="early stopping's loss")
    args = parser.parse_args(argv)
    settings = dict(quick=True, n_test=200, epochs=30) if args.quick else {}
    options = synthetic_protocol.ProtocolOptions(
        replicates=args.replicates,
        seed=args.seed,
        preset=args.preset,
        init=args.init,
        shared_seeds=args.shared_seeds,
        temperature_estimator=args.temperature_fit,
        teacher_grid=args.teacher_grid,
        batch_size=args.batch_size,
        weight_decay=args.weight_decay,
        smoothing_mass=args.smoothing_mass,
        validation_loss=args.validation_loss,
        **settings,
    )
    results = synthetic_protocol.run_replicates(options)
    command = "python examples/synthetic_protocol.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    summary = synthetic_protocol.write_outputs(results, args.output_dir, command)
    print(synthetic_protocol.markdown(results, summary, command))
    print(f"Written to {args.output_dir}/")
    return summary


if __name__ == "__main__":
    main()
