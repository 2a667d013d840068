"""`keras-ils`: the whole method on a dataset from the command line.

Bad input (unknown dataset, labels outside [0, K), a malformed .npz, NaN in the features, a class missing from the
validation split, a number flag out of range, an unknown method, an output directory that cannot be written, ...)
ends with one error line and exit code 2 before any training, and leaves no files behind. Ctrl-C ends with one
line and exit code 130.

The methods are those of the `keras_ils.methods` registry (`keras-ils methods` lists them): a method registered
in the process before `main()` runs (`keras_ils.methods.register`) is a choice of `run --methods` (and of `tune
--methods` when it has hyperparameters) with no other change.

This module sits beside the `keras_ils` package, not in it, so that `--help` and usage errors answer without
importing TensorFlow (importing `keras_ils` imports Keras, to register its objects for loading). What each command
does is `keras_ils.comparison.main_job.commands` (and `keras_ils_experiments.commands` for `benchmark`), imported
once the arguments are parsed, with the method registry and `keras_ils_experiments` (the paper's networks for
`--model`, tensorflow-datasets' for `--dataset tfds:NAME`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

EXAMPLES = """examples:
  keras-ils run                                  # the paper's synthetic task, MLP, tuned (under a minute on a CPU)
  keras-ils run --dataset tfds:cifar10 --model resnet110 --strategy mirrored
  keras-ils run --dataset my_data.npz --methods ls,ils --epochs 50
  keras-ils run --dataset my_data.npz --methods all --calibrators all --seeds 3   # every method and calibrator, verdict
  keras-ils methods                              # the methods run --methods and tune --methods take
  keras-ils tune                                 # LS and ILS tuned on the synthetic appendix grids
  keras-ils tune --dataset tfds:cifar10 --model resnet110 --algorithm random --max-trials 20
  keras-ils benchmark synthetic                  # the paper's 100-replicate synthetic protocol, appendix table
  keras-ils benchmark paper --table 3 --models resnet110 --datasets tfds:cifar10   # Table 3's columns, resumable"""

# Written out so that parsing imports no TensorFlow; the tests check them against keras_ils.comparison.main_job.config
# and keras_ils_experiments.synthetic_protocol. The methods are checked against the registry after parsing.
RUN_METHODS = ("ls", "ils1", "ils2", "ils")  # run's default, the ILS family (config.DEFAULT_METHODS)
TUNE_METHODS = ("ls", "ils")  # tune's default
# the calibration registry's ids (keras_ils.calibration.METHODS, config.CALIBRATORS), its aliases (CALIBRATOR_ALIASES)
CALIBRATOR_NAMES = (
    "temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "ensemble_temperature", "venn_abers"
)  # fmt: skip
CALIBRATOR_ALIASES = {"ts": "temperature", "vs": "vector", "ms": "matrix", "dir": "dirichlet"}
SYNTHETIC_PRESETS = ("package", "authors")
TEACHER_GRIDS = ("paper", "authors")
SMOOTHING_MASSES = ("all_classes", "wrong_classes")
VALIDATION_LOSSES = ("example_mean", "batch_mean")


def _calibrators(text):
    """A comma-separated subset of `CALIBRATOR_NAMES` (or their `CALIBRATOR_ALIASES`) as ids without duplicates, or
    `'all'` (every one of them)."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    if names == ["all"]:
        return CALIBRATOR_NAMES
    if not names or any(c not in CALIBRATOR_NAMES and c not in CALIBRATOR_ALIASES for c in names):
        aliases = ", ".join(f"{short}={method}" for short, method in CALIBRATOR_ALIASES.items())
        raise argparse.ArgumentTypeError(
            f"expected 'all' or a comma-separated subset of {','.join(CALIBRATOR_NAMES)} (aliases: {aliases}); "
            f"got {text!r}"
        )
    return tuple(dict.fromkeys(CALIBRATOR_ALIASES.get(c, c) for c in names))


_TEMPERATURE_FIT_HELP = (
    "how every temperature T* is fitted on the validation split: 'map' (default; a weak prior on log T keeps "
    "small or separable validation sets from collapsing T), 'mle' (plain NLL minimum, Guo et al.) or 'authors' "
    "(T in [0.8, 3], the paper's code)"
)


_CONFORMAL_HELP = (
    "give every row split conformal prediction sets (LAC and APS), calibrated on half of the validation split held "
    "out from every fit, and report their test coverage and mean size at coverage 1 - ALPHA, e.g. 0.1 (default: none)"
)


def _add_common_arguments(parser):
    parser.add_argument("--dataset", default="synthetic", help="'synthetic' (default), 'tfds:NAME', PATH.npz, PATH.csv")
    parser.add_argument("--target", metavar="COLUMN", help="PATH.csv only (and required): the column to predict")
    parser.add_argument("--categorical", type=_names, help="PATH.csv only: comma-separated columns read as categories")
    parser.add_argument("--data-dir", default=None, help="tensorflow-datasets data directory")
    parser.add_argument(
        "--model",
        default=None,
        help="mlp (5x64), mlp-D-W (D hidden layers of W units), cnn (a small image network); the paper's: lenet, "
        "resnet20/32/56/110 (resnet20b...: projection shortcuts), resnet110sd, resnet152sd, densenet40, wrn-D-W "
        "(e.g. wrn-34-10), resnet18, resnet50, inceptionv4, alexnet (default: mlp for vectors, cnn for images)",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        default=None,
        help="number of classes K, labels in [0, K) (default: from the labels of train and test)",
    )
    parser.add_argument("--epochs", type=int, help="maximum epochs (default: the paper's recipe)")
    parser.add_argument("--batch-size", type=int, help="mini-batch size (default: the paper's recipe)")
    parser.add_argument(
        "--validation-fraction",
        type=float,
        default=0.2,
        help="validation share of train, stratified for .npz, the last part of train for tfds (default: 0.2, "
        "as Guo et al. and the paper's section 5; 0.1 keeps the paper's 45K/5K split of CIFAR)",
    )
    parser.add_argument(
        "--validation-size",
        type=int,
        default=None,
        help="synthetic: its validation examples (a multiple of 3, default 150); tfds: a count instead of --validation-"
        "fraction, the last of the last --train-splits split (SVHN: --train-splits train+extra --validation-size 6000)",
    )
    parser.add_argument(
        "--train-splits",
        type=_splits,
        default=("train",),
        help="tfds only: the splits that make train and validation, joined by '+' (default: train)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed, in [0, 2**63) (default: 0)")
    parser.add_argument(
        "--temperature-fit", choices=("map", "mle", "authors"), default="map", help=_TEMPERATURE_FIT_HELP
    )
    parser.add_argument(
        "--strategy", choices=("default", "mirrored", "tpu"), default="default", help="tf.distribute strategy"
    )
    _add_verbose(parser)


def _add_verbose(parser):
    parser.add_argument(
        "--verbose",
        type=int,
        choices=(0, 1, 2),
        default=0,
        help="0 (default): one progress bar on stderr, naming the model in training, with an ETA; 1: Keras' bar for "
        "every epoch of every fit; 2: one line per epoch, and TensorFlow's own (C++) logging, hidden otherwise",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-ils",
        description="Instance-based Label Smoothing (Maher & Kull, 2021) with Keras.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="teacher -> T* -> cached teacher logits -> No LS, LS, ILS1, ILS2, ILS students (+TempS) -> table",
        description="Run the whole method on one dataset and write results.json, results.csv and "
        "reliability diagrams (PNG) into the output directory.",
    )
    run.set_defaults(command_parser=run)
    _add_common_arguments(run)
    run.add_argument(
        "--methods",
        type=_methods,
        default=RUN_METHODS,
        help="students to train, comma-separated ids from 'keras-ils methods', or 'all' (every method there: the "
        "paper's comparison and the calibration losses) (default: ls,ils1,ils2,ils)",
    )
    run.add_argument("--epsilon", type=float, help="fix the LS / ILS2 smoothing factor instead of searching it")
    run.add_argument("--p1", type=float, help="fix ILS1 / ILS P1 instead of searching it")
    run.add_argument("--p2", type=float, help="fix ILS1 / ILS P2 instead of searching it")
    run.add_argument(
        "--temperature",
        type=float,
        help="fix the ILS2 / ILS temperature on the calibrated teacher instead of searching it",
    )
    run.add_argument(
        "--no-tune",
        action="store_true",
        help="train one student per method with fixed hyperparameters (the flags above, else defaults) instead of "
        "selecting them on validation NLL over the paper's grids",
    )
    run.add_argument(
        "--search-space",
        choices=("paper", "synthetic"),
        default=None,
        help="the grids searched: the paper's for real data, or its synthetic appendix grids (default: synthetic "
        "for the synthetic dataset, paper otherwise)",
    )
    run.add_argument(
        "--search",
        choices=("budget", "full"),
        default="budget",
        help="for models other than the MLP on vectors (which trains the whole grid at once): 'budget' (default) "
        "is KerasTuner's Hyperband, its cost printed first; 'full' trains the paper's whole grid",
    )
    run.add_argument(
        "--calibrators",
        type=_calibrators,
        default=("temperature",),
        help=f"post-hoc calibrations of every model, fitted on the validation split: 'all', or comma-separated from "
        f"{', '.join(CALIBRATOR_NAMES)}, or the aliases ts, vs, ms, dir ('keras-ils methods' says what each is and "
        "names its rows); temperature (the '+ TempS' rows) is always on, each other adds its rows, e.g. "
        "'ILS + Dir', 'ILS + Isotonic' (default: temperature)",
    )
    run.add_argument(
        "--teacher-folds",
        type=int,
        default=1,
        help="k >= 2: ILS's targets from k cross-fitted teachers, each scoring the fold it did not train on "
        "(MLP on vectors; default: 1, the paper's teacher)",
    )
    run.add_argument("--teacher-cache", default=None, help="cache file (.npz) for the teacher's logits")
    run.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="N >= 2: the run for seeds --seed, --seed + 1, ... (each in OUTPUT_DIR/seedS/, its own split), then each "
        "row's mean ± std and a comparison.png of the spread. Every run ends with the verdict: each row's per-example "
        "test NLL against No LS + TempS, pooled over seeds, Holm-corrected; the row to use (verdict.md) (default: 1)",
    )
    run.add_argument("--conformal", type=float, default=None, metavar="ALPHA", help=_CONFORMAL_HELP)
    run.add_argument("--output-dir", default=None, help="where results go (default: runs/DATASET-MODEL-seedN)")

    tune = commands.add_parser(
        "tune",
        help="teacher -> KerasTuner search per method (paper's grids) -> best students (+TempS) -> table",
        description="Tune each method with KerasTuner (same budget and seeds for all), selecting by the "
        "validation cross-entropy against hard labels, and print the chosen hyperparameters and test metrics. "
        "Running it again with the same --directory resumes the search. For KerasTuner's distributed mode "
        "set KERASTUNER_TUNER_ID, KERASTUNER_ORACLE_IP and KERASTUNER_ORACLE_PORT (see docs/guide/tuning.md).",
    )
    tune.set_defaults(command_parser=tune)
    _add_common_arguments(tune)
    tune.add_argument(
        "--methods",
        type=_methods,
        default=TUNE_METHODS,
        help="methods to tune, comma-separated ids of 'keras-ils methods' that tune hyperparameters (ls, ils1, ils2, "
        "ils, ...) (default: ls,ils)",
    )
    tune.add_argument(
        "--search-space",
        choices=("paper", "synthetic"),
        default=None,
        help="the paper's grids for real data, or its synthetic appendix grids (default: synthetic for the "
        "synthetic dataset, paper otherwise)",
    )
    tune.add_argument(
        "--algorithm",
        choices=("grid", "random", "bayesian", "hyperband"),
        default="grid",
        help="KerasTuner algorithm (default: grid, the paper's exhaustive protocol)",
    )
    tune.add_argument("--max-trials", type=int, default=None, help="trials per method (default: the whole grid)")
    tune.add_argument(
        "--directory",
        default=None,
        help="KerasTuner directory: teacher, cached logits, trials (default: OUTPUT_DIR/search)",
    )
    tune.add_argument(
        "--engine",
        choices=("auto", "keras-tuner"),
        default="auto",
        help="'auto' (default): a whole-grid search of the MLP on vectors trains every candidate at once (as run "
        "does, in seconds); 'keras-tuner': always one KerasTuner trial per candidate (resumable in --directory)",
    )
    tune.add_argument("--output-dir", default=None, help="where results go (default: runs/tune-DATASET-MODEL-seedN)")

    commands.add_parser(
        "methods",
        help="list the methods run --methods and tune --methods take, and the calibrators of run --calibrators",
        description="List the registered comparison methods: id (what --methods takes), name (their rows), the "
        "hyperparameters a search tunes, whether their targets read the teacher, and whether the vectorised engine "
        "trains them (a plain MLP on vectors) or model.fit; then the post-hoc calibrators run --calibrators takes: "
        "id, the suffix of their rows, and the calibration method and layer that fit them.",
    )

    benchmark = commands.add_parser(
        "benchmark",
        help="reproduce the paper's experiments at full scale and print them beside the paper's values",
        description="Reproduce the paper's experiments: 'synthetic' is its 100-replicate synthetic protocol "
        "(appendix table, Table 1's dense/sparse LS rows, Fig. 4's best-smoothing-factor curves, win rates), "
        "all grids of all replicates trained together by the vectorised engine. Writes "
        "synthetic_protocol.json, synthetic_protocol.md and best_smoothing_*.png into the output directory.",
    )
    benchmark.add_argument(
        "experiment",
        choices=("synthetic", "paper"),
        help="which experiment: 'synthetic', or 'paper' (--table 3 or distillation: the paper's real-data tables)",
    )
    benchmark.add_argument("--replicates", type=int, default=100, help="replicate datasets (default: 100)")
    benchmark.add_argument("--seed", type=int, default=0, help="seed of the first replicate (default: 0)")
    benchmark.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: small grids, 200 test points per class, at most 30 epochs (not the paper's protocol)",
    )
    synthetic = benchmark.add_argument_group(
        "synthetic",
        "keras-ils benchmark synthetic: the training and tuning settings; --preset picks them all, and each flag "
        "given overrides the preset's",
    )
    synthetic.add_argument(
        "--preset",
        choices=SYNTHETIC_PRESETS,
        default="package",
        help="'package' (default): the package's settings; 'authors': the habits of the paper's public code (PyTorch "
        "initialisation, one seed per model, T in [0.8, 3], teacher grid {1, 2, 4, 8, 16} on raw logits, batch 128, "
        "weight decay 1e-4, eps / (K - 1) on each wrong class for ILS1, batch-mean validation loss)",
    )
    synthetic.add_argument(
        "--init",
        choices=("keras", "pytorch"),
        default=None,
        help="the MLPs' initialisation: Keras' defaults (the package preset's) or PyTorch's (the paper's authors')",
    )
    synthetic.add_argument(
        "--independent-seeds",
        action="store_const",
        const=False,
        default=None,
        dest="shared_seeds",
        help="one seed (initialisation, batch order) per model instead of one per replicate shared by its models",
    )
    synthetic.add_argument(
        "--teacher-grid",
        choices=TEACHER_GRIDS,
        default=None,
        help="ILS2's and ILS's teacher temperatures: 'paper' ({1, 2, 4, 6} on the calibrated teacher's logits, "
        "the package preset's) or 'authors' ({1, 2, 4, 8, 16} on its raw logits)",
    )
    synthetic.add_argument(
        "--weight-decay", type=float, default=None, help="coupled (L2) weight decay (package preset: 0)"
    )
    synthetic.add_argument(
        "--smoothing-mass",
        choices=SMOOTHING_MASSES,
        default=None,
        help="ILS1's smoothing mass: eps_x / K on every class (the paper's Eq. 3, the package preset's) or "
        "eps_x / (K - 1) on each wrong class (the authors' code)",
    )
    synthetic.add_argument(
        "--validation-loss",
        choices=VALIDATION_LOSSES,
        default=None,
        help="early stopping's loss: the mean over validation points (the package preset's) or a mean of "
        "per-batch means (the authors' code)",
    )
    benchmark.add_argument(
        "--temperature-fit",
        choices=("map", "mle", "authors"),
        default=None,
        help=_TEMPERATURE_FIT_HELP.replace("'map' (default;", "'map' (default, or the --preset's;")
        + "; docs/results/synthetic-protocol.md's tables were made with 'mle'",
    )
    benchmark.add_argument(
        "--batch-size",
        type=int,
        help="mini-batch size of every model (default: the --preset's for synthetic, 32 for the package's; the "
        "recipes' for paper)",
    )
    benchmark.add_argument(
        "--output-dir", default=None, help="where results go (default: runs/benchmark-EXPERIMENT-seedN)"
    )
    _add_verbose(benchmark)
    paper = benchmark.add_argument_group(
        "paper",
        "keras-ils benchmark paper: one resumable command per table",
    )
    paper.add_argument(
        "--table",
        choices=("3", "distillation"),
        default="3",
        help="Table 3 (12 methods, each tuned by the main job) or the distillation table (AlexNet student from "
        "teachers trained with No LS, LS, ILS); default: 3",
    )
    paper.add_argument("--datasets", type=_names, help="comma-separated datasets (default: the paper's pairs)")
    paper.add_argument("--models", type=_names, help="comma-separated models (both lists given: every pair)")
    paper.add_argument("--seeds", type=int, default=2, help="seeds per pair, from --seed (default: 2, the paper's)")
    paper.add_argument(
        "--search",
        choices=("budget", "full"),
        default="budget",
        help="the main job's search for image models: Hyperband (default) or the whole grid",
    )
    paper.add_argument("--epochs", type=int, help="maximum epochs of every model (default: the paper's recipes)")
    paper.add_argument("--data-dir", default=None, help="tensorflow-datasets data directory")
    paper.add_argument(
        "--validation-fraction",
        type=float,
        default=None,
        help="validation share for every dataset (default: the paper's CIFAR 45K/5K and SVHN 598K/6K, else 0.2)",
    )
    return parser


def _joined(separator: str, expected: str):
    """An argparse type: the non-empty names of a `separator`-joined list, as a tuple."""

    def names(text):
        found = tuple(name.strip() for name in text.split(separator) if name.strip())
        if not found:
            raise argparse.ArgumentTypeError(f"expected {expected}; got {text!r}")
        return found

    return names


_names = _joined(",", "a comma-separated list")
_methods = _joined(",", "a comma-separated list of method ids")  # checked against the registry after parsing
_splits = _joined("+", "tfds split names joined by '+', e.g. train+extra")


@contextlib.contextmanager
def _native_stderr_hidden(hidden: bool):
    """Sends what writes to file descriptor 2 directly (TensorFlow's C++ logging, which ignores `TF_CPP_MIN_LOG_LEVEL`
    before absl's logging starts) to `os.devnull`; Python's `sys.stderr` (our messages, warnings, tracebacks) keeps
    the original stream. Does nothing when `sys.stderr` is not descriptor 2 (e.g. captured by a test)."""
    try:
        native = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        native = False
    if not (hidden and native):
        yield
        return
    python_stderr = sys.stderr
    python_stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    sys.stderr = open(saved, "w", buffering=1, encoding=python_stderr.encoding, errors="backslashreplace")
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        sys.stderr.close()
        sys.stderr = python_stderr


def main(argv=None) -> int:
    """Runs `keras-ils ARGV` (`sys.argv[1:]` when `None`); returns the exit code.

    0 on success, 2 for bad input (one `keras-ils: error:` line, or
    argparse's usage and error line), 130 when interrupted (Ctrl-C: one line).
    Only the results table goes to stdout; progress, messages and warnings go
    to stderr.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    verbose = getattr(args, "verbose", 0)
    if verbose < 2:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args.argv = None if argv is None else "keras-ils " + " ".join(argv)  # the command recorded with results
    table = sys.stdout  # only the table goes here; progress, messages and warnings go to stderr
    try:
        with _native_stderr_hidden(verbose < 2), contextlib.redirect_stdout(sys.stderr):
            if hasattr(args, "methods"):
                args.methods = _checked_methods(args)
            import keras_ils_experiments  # noqa: F401  (registers the paper's networks and tfds:NAME datasets)
            from keras_ils.comparison.main_job import commands

            more = {}
            if args.command == "benchmark":
                from keras_ils_experiments.commands import benchmark

                more = {"benchmark": benchmark}
            code, text = commands.execute(args, **more)
    except KeyboardInterrupt:
        print(f"keras-ils: interrupted; {_INTERRUPTED.get(args.command, 'nothing written')}", file=sys.stderr)
        return 130
    if text:
        print(text, file=table)
    return code


# What an interrupted command leaves: results are written at the end, atomically; searches are kept to resume.
_INTERRUPTED = {
    "run": "no results written (a KerasTuner search directory, if one was made, is kept: the same command resumes it)",
    "tune": "no results written (the search directory is kept: the same command resumes it)",
    "benchmark": "no table written (finished runs, if any, are kept: the same command resumes them)",
}


def _checked_methods(args) -> tuple:
    """`args.methods` checked against the method registry (`keras_ils.methods`), `'all'` expanded; an unknown id
    is argparse's usage error (exit code 2). Done after parsing: the registry imports Keras, `--help` must not."""
    from keras_ils import methods

    known = methods.ids(selectable=True) if args.command == "run" else methods.ids(tunable=True)
    args.methods = tuple(dict.fromkeys(args.methods))
    chosen = known if args.command == "run" and args.methods == ("all",) else args.methods  # 'all' comes alone
    if any(m not in known for m in chosen):
        expected = ("'all' or " if args.command == "run" else "") + f"a comma-separated subset of {','.join(known)}"
        args.command_parser.error(f"argument --methods: expected {expected}; got {','.join(args.methods)!r}")
    return tuple(chosen)


if __name__ == "__main__":
    sys.exit(main())
