"""What each `keras-ils` command does once its arguments are parsed (`keras_ils_cli` parses them, importing no
TensorFlow): `run`, `tune` and `methods`, each taking argparse's namespace and returning the text printed on stdout
(progress and messages go through `print`, which the command line points at stderr); `execute` runs one, or one the
command line adds (`benchmark`, from `keras_ils_experiments.commands`).
"""

from __future__ import annotations

import math
import os
import re
import sys
import warnings

__all__ = ["execute", "methods", "run", "tune"]


def _strategy(name):
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError) as error:
        raise ValueError(f"--strategy tpu: no TPU could be reached ({error}).") from error
    return tf.distribute.TPUStrategy(resolver)


def _load(args, seed: int):
    """The data of the common arguments, split by `seed`."""
    from keras_ils.comparison.data import datasets

    return datasets.load(  # a class scarce in validation warns: one line, `_WarningLines`
        args.dataset,
        data_dir=args.data_dir,
        validation_fraction=args.validation_fraction,
        seed=seed,
        num_classes=args.num_classes,
        validation_size=args.validation_size,
        train_splits=args.train_splits,
        target=args.target,
        categorical=args.categorical,
    )


def _config(args, **settings):
    """The one `RunConfig` of a `run` or `tune` command: the common flags, then the command's `settings`."""
    from keras_ils.comparison.main_job.config import RunConfig

    return RunConfig(
        model_name=args.model,
        output_dir=args.output_dir,
        methods=args.methods,
        search_space=args.search_space,
        epochs=args.epochs,
        batch_size=args.batch_size,
        strategy=_strategy(args.strategy),
        seed=args.seed,
        verbose=args.verbose,
        temperature_estimator=args.temperature_fit,
        **settings,
    )


def _output_dir(prefix: str, splits, config) -> str:
    """`runs/PREFIXDATASET-MODEL-seedN`, the dataset named by its stem (`bc.npz` -> `bc`).

    Example:

    >>> from types import SimpleNamespace
    >>> from keras_ils.comparison.main_job.config import RunConfig
    >>> _output_dir("", SimpleNamespace(name="bc.npz", is_image=False), RunConfig(seed=3))
    'runs/bc-mlp-seed3'
    """
    stem = splits.name.removesuffix(".npz").removesuffix(".csv").replace(os.sep, "_")
    return os.path.join("runs", f"{prefix}{stem}-{config.model_for(splits)}-seed{config.seed}")


_RESULT_FILES = "results.json, results.csv, test_nll.npz, comparison.png, reliability_*.png, model_*.keras"


def run(args) -> str:
    """`keras-ils run`: `keras_ils.compare`'s path (`comparison.run_seeds`) with the data and settings of the flags."""
    from keras_ils import comparison
    from keras_ils.comparison.main_job.conformal_split import calibration_split
    from keras_ils.comparison.reporting import results as reporting_results

    if args.seeds > 1 and args.teacher_cache is not None:
        raise ValueError("--teacher-cache holds one teacher's logits; it cannot serve --seeds 2 or more.")
    fixed = dict(epsilon=args.epsilon, p1=args.p1, p2=args.p2, temperature=args.temperature)
    config = _config(  # bad settings fail here, before any data is read
        args,
        hyperparameters=fixed,
        tune=not args.no_tune,
        search=args.search,
        teacher_cache=args.teacher_cache,
        teacher_folds=args.teacher_folds,
        calibrators=args.calibrators,
        conformal=args.conformal,
        log=print,
    )
    seeds = comparison.seed_list(args.seeds, args.seed, names=("--seeds", "--seed"))
    first = _load(args, seeds[0])
    config.check_examples(first, "--dataset")
    if args.conformal is not None:  # an alpha too small for the calibration split fails before anything trains
        first = calibration_split(first, args.conformal, seeds[0], argument="--conformal")
    output_dir = config.output_dir or _output_dir("", first, config)
    make_splits = lambda seed: first if seed == seeds[0] else _load(args, seed)  # noqa: E731
    inputs = [path for path in (args.dataset, args.teacher_cache) if path and os.path.exists(path)]
    found = comparison.run_seeds(make_splits, config, seeds, output_dir, inputs=inputs, argument="--output-dir")
    written = _RESULT_FILES + ", verdict.md, verdict.json"
    if len(seeds) > 1:
        written = f"summary.json, comparison.png, verdict.md, verdict.json; seed*/: {_RESULT_FILES}"
    print(f"Results written to {output_dir}/ ({written})")
    seed_tables = [reporting_results.format_table(r) for r in found.runs] if len(seeds) > 1 else []
    note = reporting_results.temperature_note(found.runs[0]) if len(seeds) == 1 else None
    if note and first.name == "synthetic":
        note += " " + _synthetic_draw(first, config.temperature_estimator)
    return "\n\n".join([*seed_tables, str(found), *filter(None, [note])])


def _synthetic_draw(splits, estimator) -> str:
    """The synthetic task's validation draw judged by the Bayes-optimal model, calibrated by construction."""
    import numpy as np

    from keras_ils.comparison.data import synthetic
    from keras_ils.comparison.data.arrays import dataset_arrays

    x, y = dataset_arrays(splits.validation)
    mean, scale = (np.array(splits.preprocessing[k]) for k in ("mean", "scale")) if splits.preprocessing else (0, 1)
    bayes = synthetic.bayes_temperature(x * scale + mean, y, estimator=estimator)
    spread = "; 90 % of 150-example draws give 0.83-1.22" if len(y) == 150 else ""  # measured at the default size
    return (
        f"On this validation draw even the Bayes-optimal model, calibrated by construction, fits T* = {bayes:.3f} "
        f"(T = 1 on the population{spread}): the draw is {'easier' if bayes < 1 else 'harder'} than the test set."
    )


def tune(args) -> str:
    import dataclasses

    from keras_ils.comparison.main_job import pipeline
    from keras_ils.comparison.reporting import results as reporting_results

    search_space = args.search_space or ("synthetic" if args.dataset == "synthetic" else "paper")
    config = _config(args, algorithm=args.algorithm, max_trials=args.max_trials, engine=args.engine)
    config = dataclasses.replace(config, search_space=search_space, directory=args.directory)
    pipeline.check_tune(config)  # a bad method or grid fails before any data is read or teacher trained
    splits = _load(args, args.seed)
    config = dataclasses.replace(config, output_dir=config.output_dir or _output_dir("tune-", splits, config))
    results = pipeline.tune(splits, config)
    if results.get("role") == "worker":
        print(f"Worker {os.environ.get('KERASTUNER_TUNER_ID')}: no {results['method']} trials left; the chief reports.")
        return ""
    lines = [reporting_results.format_table(results)]
    for row in results["rows"]:
        if "search_val_nll" in row and not row["temps"]:
            tried = row.get("trials", row.get("candidates"))
            lines.append(f"{row['model']}: {tried} trials, best validation NLL {row['search_val_nll']:.4f}")
    print(f"Results written to {config.output_dir}/ ({_RESULT_FILES})")
    return "\n".join(lines)


def _columns(rows) -> list:
    """Rows of cells as lines of left-aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _calibrators_table() -> list:
    """The calibrators `run --calibrators` takes (`config.CALIBRATORS`), with their alias, rows' suffix and layer."""
    from keras_ils.calibration import LAYERS
    from keras_ils.comparison.main_job.config import CALIBRATOR_ALIASES, CALIBRATORS

    alias = {method: short for short, method in CALIBRATOR_ALIASES.items()}
    rows = [("calibrator", "alias", "rows", "layer")]
    rows += [(m, alias.get(m, "-"), f"+ {suffix}", LAYERS[m].__name__) for m, suffix in CALIBRATORS.items()]
    note = (
        "run --calibrators takes these ids, the methods of keras_ils.calibrate, or their aliases ('all': all of "
        "them); 'temperature' is always on. Each is fitted on the validation split of every model."
    )
    return [*_columns(rows), "", note]


def methods(args) -> str:
    """The registry as a table: what `--methods` takes; then the calibrators `--calibrators` takes."""
    from keras_ils import methods

    rows = [("id", "name", "tuned hyperparameters", "reads a teacher", "trained by")]
    for method_id in methods.ids():
        entry = methods.get(method_id)
        borrowed = [f"{methods.get(methods.lender(name)).name}'s {name}" for name in entry.borrows]
        tuned = ", ".join([*entry.hyperparameters, *(f"takes {text}" for text in borrowed)]) or "-"
        teacher = {None: "no", "calibrated": "yes", "class_similarity": "class similarity"}[entry.teacher]
        trained = "engine or model.fit" if entry.engine else "model.fit"
        rows.append((method_id, entry.name, tuned, teacher, trained + (" (always run)" if entry.always_run else "")))
    note = (
        "run --methods takes every id but the always-run teacher ('all': all of them); tune --methods those with "
        "tuned hyperparameters. 'engine': the vectorised engine trains it on a plain MLP on vectors."
    )
    return "\n".join([*_columns(rows), "", note, "", *_calibrators_table()])


# Number flags checked after parsing (argparse's own errors print the usage too): (flag, expected, test).
_NUMBER_FLAGS = (
    ("epochs", "an integer >= 1", lambda v: v >= 1),
    ("batch_size", "an integer >= 1", lambda v: v >= 1),
    ("seed", "an integer in [0, 2**63)", lambda v: 0 <= v < 2**63),
    ("max_trials", "an integer >= 1", lambda v: v >= 1),
    ("replicates", "an integer >= 1", lambda v: v >= 1),
    ("seeds", "an integer >= 1", lambda v: v >= 1),
    ("num_classes", "an integer >= 2", lambda v: v >= 2),
    ("validation_size", "an integer >= 1", lambda v: v >= 1),
    ("teacher_folds", "an integer >= 1", lambda v: v >= 1),
    ("validation_fraction", "a number in (0, 1)", lambda v: math.isfinite(v) and 0 < v < 1),
    ("weight_decay", "a number >= 0", lambda v: math.isfinite(v) and v >= 0),
)


def _check_arguments(args) -> None:
    """A `ValueError` naming the first number flag out of range, in the Keras wording.

    Example:

    >>> from keras_ils_cli import build_parser
    >>> _check_arguments(build_parser().parse_args(["run", "--epochs", "0"]))
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `--epochs`. Expected an integer >= 1. Received: --epochs=0
    """
    for name, expected, valid in _NUMBER_FLAGS:
        value = getattr(args, name, None)
        if value is not None and not valid(value):
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"Invalid value for argument `{flag}`. Expected {expected}. Received: {flag}={value}")


class _WarningLines:
    """The package's warnings (a regularised temperature or calibrator fit, a class scarce in validation) as one line
    each, every kind once: a warning that repeats one already shown, or a row's fit warning that differs from one
    shown only in its row and its numbers (the same fit on another row or seed), is counted, and `close` prints the
    count. Other warnings as Python prints them.

    Example:

    >>> from keras_ils.calibration import CalibratorFitWarning
    >>> lines = _WarningLines(sys.stdout)
    >>> for row, t in (("LS + Dir", 1.2), ("ILS + Dir", 0.9)):
    ...     warning = CalibratorFitWarning(f"{row}: Calibrator fit (dirichlet): map of T = {t}")
    ...     warning.row = row
    ...     lines(warning, CalibratorFitWarning, "", 0)
    keras-ils: warning: LS + Dir: Calibrator fit (dirichlet): map of T = 1.2
    >>> lines.close()
    keras-ils: warning: 1 more warning of a kind shown above (another row or seed) was not repeated; ...
    """

    def __init__(self, stream):
        self.stream, self.kinds, self.repeated = stream, set(), 0

    def __call__(self, message, category, filename, lineno, file=None, line=None):
        if not category.__module__.startswith("keras_ils"):
            print(warnings.formatwarning(message, category, filename, lineno, line), end="", file=file or self.stream)
            return
        text = str(message)
        row = getattr(message, "row", None)
        kind = re.sub(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?", "#", text[len(row) + 2 :]) if row else text
        if kind in self.kinds:
            self.repeated += 1
            return
        self.kinds.add(kind)
        print(f"keras-ils: warning: {text}", file=self.stream)

    def close(self):
        if self.repeated:
            more = f"{self.repeated} more warning{'s' if self.repeated > 1 else ''} of a kind shown above"
            print(f"keras-ils: warning: {more} (another row or seed) {'were' if self.repeated > 1 else 'was'} not "
                  "repeated; each row's fit status is kept with its results (results.json's temperature_status).",
                  file=self.stream)  # fmt: skip


def execute(args, **more_commands) -> tuple[int, str]:
    """`(exit code, table)`: the command run (`run`, `tune`, `methods`, or one of `more_commands`, a function of
    the arguments each), its errors as one `keras-ils: error:` line each."""
    import absl.logging
    import tensorflow as tf

    if getattr(args, "verbose", 0) < 2:  # TensorFlow's Python logging too (e.g. retracing notices)
        absl.logging.set_verbosity(absl.logging.ERROR)
        tf.get_logger().setLevel("ERROR")
    commands = {"run": run, "tune": tune, "methods": methods, **more_commands}
    lines = _WarningLines(sys.stderr)
    try:
        _check_arguments(args)
        with warnings.catch_warnings():
            warnings.showwarning = lines
            return 0, commands[args.command](args)
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-ils: error: {error}", file=sys.stderr)
    except tf.errors.OpError as error:
        print(f"keras-ils: error: {error.message.splitlines()[0]}", file=sys.stderr)
    finally:
        lines.close()
    return 2, ""
