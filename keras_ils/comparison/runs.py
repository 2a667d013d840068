"""`compare`: every method and calibrator on your model and your data, with a verdict; the `Comparison` it returns.

The main job as one call, as scikit-learn's `cross_validate` is one call and
KerasTuner's `Tuner.search` leaves an object to query: per seed, the data are
split (train, validation, test), the teacher (No LS) is trained and
temperature-scaled, every method is tuned over its registry grid (by the
vectorised engine where it can stack the network, the package's MLP on
vectors; by KerasTuner searches otherwise), every model is calibrated on the
validation split by each calibrator and scored on the test split; then the
paired verdict compares every row with the reference, No LS + TempS
(`keras_ils.comparison.reporting.verdict`). `keras-ils run` is this call
behind flags.

Where the machinery lives: `keras_ils.comparison.main_job` (the run of one
seed), `.engine` (the vectorised engine), `.reporting` (tables, figures,
verdict) and `.data` (loaders); docs/development.md holds the layout.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from keras_ils import _checks

__all__ = ["COMPARISON_FILES", "MAX_SEEDS", "Comparison", "compare", "run_seeds", "seed_list"]

# what a comparison of several seeds writes beside its `seed<k>/` folders (each a single run's result set)
COMPARISON_FILES = ("summary.json", "comparison.png", "verdict.json", "verdict.md")
MAX_SEEDS = 10_000  # a comparison's most seeds: each trains every model anew
_SCORES = ("accuracy", "nll", "ece", "smooth_ece", "cwece", "aurc")


@dataclasses.dataclass(frozen=True)
class Comparison:
    """What `compare` found: the table, the verdict, the best row, the models and figures, all in `directory`.

    Attributes:
        runs: each seed's results (what its `results.json` holds), in seed order.
        summary: the seeds' summary (`summary.json`: each row's mean, spread
            and values over the seeds); `None` for one seed.
        verdict: the paired verdict (`verdict.json`): every row against the
            reference, No LS + TempS, per family, each test example and each
            training run counted once, with Holm's correction (`{"error":
            why}` when none could be drawn, e.g. a NaN loss).
        directory: where the results are (`output_dir`, or a new directory
            under the system's temporary folder, which is not removed: `save`
            copies it elsewhere).
    """

    runs: tuple
    summary: dict | None
    verdict: dict
    directory: str

    @property
    def rows(self) -> list:
        """The row names, in the table's order (the teacher first, then each method's rows)."""
        return [row["model"] for row in self.runs[0]["rows"]]

    @property
    def class_names(self) -> tuple | None:
        """What each output column stands for, where the data named the classes (a table's target values, sorted):
        column `k` of every model's output is `class_names[k]`; `None` for labels given as class indices."""
        names = self.runs[0].get("class_names")
        return None if names is None else tuple(names)

    @property
    def table(self):
        """Every row's test scores, averaged over the seeds: a pandas DataFrame (index: row) where pandas is
        installed, else a list of dicts."""
        records = []
        for i, name in enumerate(self.rows):
            values = {m: np.array([run["rows"][i]["all"][m] for run in self.runs]) for m in _SCORES}
            record = {"model": name, **{m: float(v.mean()) for m, v in values.items()}}
            if len(self.runs) > 1:
                record.update({f"{m}_std": float(v.std(ddof=1)) for m, v in values.items()})
            if "conformal" in self.runs[0]["rows"][i]:  # compare(conformal=alpha): LAC and APS sets
                for method, score in itertools.product(("lac", "aps"), ("coverage", "mean_set_size")):
                    sets = [run["rows"][i]["conformal"][method][score] for run in self.runs]
                    record[f"{method}_{score}"] = float(np.mean(sets))
            records.append(record)
        try:
            import pandas
        except ImportError:
            return records
        return pandas.DataFrame.from_records(records, index="model")

    @property
    def best(self) -> str:
        """The row to use: the lowest test NLL among the rows significantly better than the reference (No LS +
        TempS) after Holm's correction, the seed-to-seed spread of training in the test when there are several
        seeds, else the reference itself (`verdict["choice"]`); `None` when no verdict could be drawn
        (`verdict["error"]` says why)."""
        return self.verdict["choice"]

    def model(self, name: str, seed: int | None = None):
        """The saved model of row `name` (of the first seed, or `seed`), loaded: it takes the data as given."""
        import keras

        from keras_ils.comparison.main_job.report import model_file

        if name not in self.rows:
            raise _checks.invalid("name", f"a row of the comparison, one of {self.rows}", name)
        return keras.saving.load_model(os.path.join(self._run_directory(seed), model_file(name)))

    @property
    def models(self) -> Mapping:
        """`{row name: model}` of the first seed, each loaded when first read."""
        return _LazyModels(self)

    @property
    def figures(self) -> dict:
        """`{name: path}` of the figures: the comparison figure, and each row's reliability diagram (first seed)."""
        from keras_ils.comparison.main_job.report import slug

        found = {"comparison": os.path.join(self.directory, "comparison.png")}
        run = self._run_directory(None)
        found.update({name: os.path.join(run, f"reliability_{slug(name)}.png") for name in self.rows})
        return {name: path for name, path in found.items() if os.path.exists(path)}

    def set_size_verdict(self, method: str = "lac") -> dict:
        """The rows ranked by their prediction sets' size at the guaranteed coverage (needs `conformal=`).

        `reporting.verdict.paired_verdict` on each test example's set size
        (`test_set_sizes.npz`) instead of its NLL: every row against No LS +
        TempS per family, each example and each training run counted once,
        Holm-corrected; in the result, `"nll"` and `"difference"` are mean set
        sizes and their differences.

        Args:
            method: `"lac"` (the smallest sets on average) or `"aps"`.
        """
        from keras_ils.comparison.main_job.config import CALIBRATORS
        from keras_ils.comparison.main_job.report import CONFORMAL_METHODS, TEST_SET_SIZES_FILE
        from keras_ils.comparison.reporting import verdict

        if method not in CONFORMAL_METHODS:
            raise _checks.invalid("method", f"one of {CONFORMAL_METHODS}", method)
        sizes = {}
        for seed in [run["seed"] for run in self.runs]:
            path = os.path.join(self._run_directory(seed), TEST_SET_SIZES_FILE)
            if not os.path.exists(path):
                raise ValueError("No prediction sets: compare with `conformal=alpha` to rank rows by set size.")
            with np.load(path) as stored:
                for row in self.rows:
                    sizes.setdefault(row, []).append(stored[f"{method}:{row}"])
        groups = verdict.verdict_groups(self.rows, tuple(CALIBRATORS.values()))
        shared = verdict.read_shared_examples([self._run_directory(run["seed"]) for run in self.runs])
        return verdict.paired_verdict(sizes, verdict.REFERENCE, groups, shared_examples=shared)

    def save(self, directory: str) -> str:
        """Copies the result set (tables, figures, models, verdict) into `directory`; returns `directory`.

        The rule of `compare`'s `output_dir` holds: the result set that
        keras_ils wrote there before is replaced, nothing else in `directory`
        is touched, and entries of the user's that the copy would overwrite are
        refused with a `ValueError` before anything is copied.
        """
        from keras_ils._files import result_entries, staged_directory

        entries = result_entries(self.directory)
        if os.path.realpath(directory) == os.path.realpath(self.directory):
            return directory
        with staged_directory(directory, entries, inputs=(self.directory,), argument="directory") as staging:
            for name in entries:
                source = os.path.join(self.directory, name)
                if os.path.isdir(source):
                    shutil.copytree(source, os.path.join(staging, name))
                else:
                    shutil.copy2(source, os.path.join(staging, name))
        return directory

    def __str__(self) -> str:
        from keras_ils.comparison.reporting import results, seeds, verdict

        table = results.format_table(self.runs[0]) if self.summary is None else seeds.format_summary(self.summary)
        if "error" in self.verdict:
            return f"{table}\n\nNo verdict: {self.verdict['error']}"
        return f"{table}\n\n{verdict.format_verdict(self.verdict)}"

    def _run_directory(self, seed):
        seeds = [run["seed"] for run in self.runs]
        if seed is not None and seed not in seeds:
            raise _checks.invalid("seed", f"one of the comparison's seeds, {seeds}", seed)
        if len(self.runs) == 1:
            return self.directory
        return os.path.join(self.directory, f"seed{seeds[0] if seed is None else seed}")


class _LazyModels(Mapping):
    def __init__(self, comparison):
        self._comparison, self._loaded = comparison, {}

    def __getitem__(self, name):
        if name not in self._loaded:
            self._loaded[name] = self._comparison.model(name)
        return self._loaded[name]

    def __iter__(self):
        return iter(self._comparison.rows)

    def __len__(self):
        return len(self._comparison.rows)


def seed_list(seeds, seed: int = 0, *, names: tuple = ("seeds", "seed")) -> list:
    """The seeds of a comparison: `seeds` seeds from `seed`, or the list `seeds`; each an int in `[0, 2**63)`.

    At most `MAX_SEEDS` seeds (each trains every model anew). `names` are
    the two arguments' names in the errors (the command's `--seeds`,
    `--seed`).

    Example:

    >>> seed_list(3, seed=5), seed_list([7, 2])
    ([5, 6, 7], [7, 2])
    >>> seed_list(2, seed=2**63 - 1)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for arguments `seed` and `seeds`: the seeds run from seed to seed + seeds - 1 = \
9223372036854775808, which overflows [0, 2**63). Received: seed=9223372036854775807, seeds=2
    """
    count, first = names
    if _is_integer(seeds):
        if not 1 <= seeds <= MAX_SEEDS:
            raise _checks.invalid(count, f"a number of seeds in [1, {MAX_SEEDS}] or a list of seeds", seeds)
        if not (_is_integer(seed) and 0 <= seed < 2**63):
            raise _checks.invalid(first, "an integer in [0, 2**63)", seed)
        if int(seed) + int(seeds) - 1 >= 2**63:  # as Python ints: numpy's int64 would wrap around
            raise ValueError(
                f"Invalid value for arguments `{first}` and `{count}`: the seeds run from {first} to {first} + {count} "
                f"- 1 = {int(seed) + int(seeds) - 1}, which overflows [0, 2**63). Received: {first}={seed}, "
                f"{count}={seeds}"
            )
        chosen = list(range(int(seed), int(seed) + int(seeds)))
    elif isinstance(seeds, Sequence) and not isinstance(seeds, str) and len(seeds) > MAX_SEEDS:
        raise ValueError(
            f"Invalid value for argument `{count}`. Expected at most {MAX_SEEDS} seeds. Received: {len(seeds)}"
        )
    elif isinstance(seeds, Sequence) and not isinstance(seeds, str) and len(seeds):
        chosen = list(seeds)
    else:
        raise _checks.invalid(count, f"a number of seeds in [1, {MAX_SEEDS}] or a non-empty list of seeds", seeds)
    if any(not _is_integer(value) or not 0 <= value < 2**63 for value in chosen):
        raise _checks.invalid(count, "seeds that are integers in [0, 2**63)", seeds)
    if len(set(chosen)) != len(chosen):
        raise _checks.invalid(count, "distinct seeds", seeds)
    return [int(value) for value in chosen]


def _is_integer(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def compare(
    x,
    y=None,
    *,
    target: str | None = None,
    categorical: Sequence[str] | str | None = None,
    steps: int | None = None,
    build_model: Callable | None = None,
    methods: Sequence[str] | str = ("ls", "ils1", "ils2", "ils"),
    calibrators: Sequence[str] | str = ("temperature",),
    seeds: int | Sequence[int] = 1,
    seed: int = 0,
    validation_split: float = 0.2,
    test_split: float = 0.2,
    tune: bool = True,
    epochs: int | None = None,
    batch_size: int | None = None,
    num_classes: int | None = None,
    conformal: float | None = None,
    output_dir: str | None = None,
    verbose: int = 0,
    log: Callable[[str], object] | None = print,
) -> Comparison:
    """Compares label smoothing methods and post-hoc calibrators on your data, with your model, and says which to use.

    Per seed, the data are split (stratified, seeded) into train, validation
    and test; the teacher (No LS) is trained and temperature-scaled; every
    method of `methods` is tuned over its registry grid on the validation
    NLL; every model is calibrated on the validation split by each of
    `calibrators`; every row is scored on the test split. The verdict
    compares each row with No LS + TempS by the paired per-example test-NLL
    difference, each test example and each training run counted once, the
    seeds' spread in its interval, with Holm's correction per family
    (training methods; post-hoc calibrators).

    Args:
        x: the data: a numpy array of features `[n, ...]` (with `y`); a
            `tf.data.Dataset` of `(features, label)` pairs, batched or not; a
            pandas DataFrame or a `.csv` path (with `target`); or a dataset
            name of `keras-ils run --dataset` (`"synthetic"`, `"tfds:NAME"`,
            a `.npz` path), which comes with its own test split.
        y: `[n]` integer labels in `[0, K)`, with array `x` only.
        target: the label column of a table.
        categorical: columns of a table to read as categories whatever their
            cells hold (one-hot over the training rows' values, as text),
            e.g. codes that look like numbers. A column of numbers with a few
            cells that are not (`3.1O`) is refused, naming the column and the
            cells, unless it is named here.
        steps: with a `tf.data.Dataset` `x`, read only its first `steps`
            elements (batches, when it is batched), as `x.take(steps)`. A
            dataset of infinite (`repeat()`) or unknown (`filter`, a
            generator) cardinality is refused without it.
        build_model: a function `build_model(num_classes) -> keras.Model`
            that returns a new uncompiled network on every call (not a model
            itself: every row trains its own), outputting logits; defaults
            to the package's MLP on vectors, which the vectorised engine
            trains whole grids of at once, and its small CNN on images
            (`networks.cnn`); examples of other shapes need yours. Yours
            trains by `model.fit` in KerasTuner searches (`CUSTOM_RECIPE`:
            Adam 1e-3, early stopping).
        methods: ids of `keras_ils.methods`, or one id (`"all"`: every
            selectable one). Defaults to the ILS family: LS, ILS1, ILS2, ILS.
        calibrators: ids of `keras_ils.calibration.METHODS`, or one id
            (`"all"`: every one); temperature scaling is always there.
        seeds: how many seeds (from `seed`), or the list of seeds, at most
            `MAX_SEEDS` (10,000): each seed splits the data and initialises
            the networks anew.
        seed: the first seed when `seeds` is a number.
        validation_split: the validation share of the training data, in
            `(0, 1)`.
        test_split: the test share of all data, in `(0, 1)` (a named dataset
            keeps its own test split).
        tune: `False` trains one student per method at fixed values instead
            of searching its grid.
        epochs: replaces the training recipe's (a ceiling under early stopping).
        batch_size: replaces the training recipe's.
        num_classes: `K`; defaults to one more than the largest label.
        conformal: `alpha` in `(0, 1)`: every row also gets split conformal
            prediction sets (LAC and APS), and the table their test coverage
            and mean set size at `1 - alpha` (`keras_ils.conformal`); AURC is
            always in it. The sets are calibrated on half of the validation
            split (stratified, seeded), held out before anything trains: the
            searches, early stopping and calibrators get the other half, so
            a larger `validation_split` keeps their share. An `alpha` below
            `1 / (n + 1)` for those `n` examples is refused before training.
        output_dir: where the results go; defaults to a temporary directory.
            A new comparison replaces the result set that keras_ils wrote
            there, and nothing else: your own files in it are never touched,
            and one named like a result (`results.csv`, `model_*.keras`, ...)
            is refused before any training.
        verbose: Keras `fit` verbosity.
        log: takes each progress line, beside which Keras' progress bars
            are drawn on stdout (`None`: silent, no bars either).

    Returns:
        A `Comparison`.

    Example:

    >>> from sklearn.datasets import load_iris
    >>> x, y = load_iris(return_X_y=True)
    >>> found = compare(x, y, methods=["ls"], tune=False, epochs=2, log=None)  # doctest: +SKIP
    >>> found.table.loc["LS + TempS", "nll"], found.best                      # doctest: +SKIP
    """
    from keras_ils import calibration
    from keras_ils import methods as registry
    from keras_ils.comparison.data import inputs
    from keras_ils.comparison.main_job.config import RunConfig
    from keras_ils.comparison.main_job.progress import silent

    chosen_methods = _ids("methods", methods, registry.ids(selectable=True))
    chosen_calibrators = _ids("calibrators", calibrators, calibration.METHODS)
    chosen_seeds = seed_list(seeds, seed)
    for name, share in (("validation_split", validation_split), ("test_split", test_split)):
        _checks.number_in(name, share, 0, 1, low_open=True, high_open=True)
    if "temperature" not in chosen_calibrators:
        chosen_calibrators = ("temperature", *chosen_calibrators)
    config = RunConfig(  # bad settings fail here, before any data is read
        build_model=build_model,
        methods=chosen_methods,
        calibrators=chosen_calibrators,
        hyperparameters={},
        tune=tune,
        conformal=conformal,
        epochs=epochs,
        batch_size=batch_size,
        verbose=verbose,
        log=log or silent,
    )
    make_splits = inputs.splits_maker(
        x, y, target=target, categorical=categorical, steps=steps, validation_split=validation_split,
        test_split=test_split, num_classes=num_classes,
    )  # fmt: skip
    first = make_splits(chosen_seeds[0])  # bad data fail here, before anything is written or trained
    config.check_examples(first, "x")
    directory = output_dir or tempfile.mkdtemp(prefix="keras_ils_compare_")
    inputs = [x] if isinstance(x, (str, os.PathLike)) and os.path.exists(x) else []
    splits_of = lambda s: first if s == chosen_seeds[0] else make_splits(s)  # noqa: E731
    return run_seeds(splits_of, config, chosen_seeds, directory, inputs=inputs)


def _ids(name: str, given, every) -> tuple:
    """`methods` or `calibrators` as a tuple of the ids `every` holds: `"all"` is `every`, one id a list of one.

    Example:

    >>> _ids("methods", "ls", ("ls", "ils")), _ids("methods", ["ils", "ls"], ("ls", "ils"))
    (('ls',), ('ils', 'ls'))
    >>> _ids("calibrators", "platt", ("temperature",))
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `calibrators`. Expected an id of ('temperature',), a list of them, or \
'all'. Received: calibrators='platt'
    """
    if isinstance(given, str):
        chosen = tuple(every) if given == "all" else (given,)
    elif isinstance(given, Iterable) and not isinstance(given, Mapping):
        chosen = tuple(given)
    else:
        chosen = (None,)
    if any(not isinstance(i, str) or i not in every for i in chosen):
        raise _checks.invalid(name, f"an id of {tuple(every)}, a list of them, or 'all'", given)
    return chosen


def run_seeds(
    make_splits, config, seeds: list, directory: str, *, inputs=(), argument: str = "output_dir"
) -> Comparison:
    """`compare` once its arguments are read (and `keras-ils run` with its flags): the main job once per seed.

    One seed runs into `directory`, several into `directory/seed<k>`; the
    whole result set is staged and replaces the one keras_ils wrote there
    before at the end, seeds included (the KerasTuner searches, in
    `directory/search[/seed<k>]`, are kept across re-runs, so a killed run
    resumes); then the paired verdict on the rows' per-example test NLLs.
    The user's own files in `directory` are never touched
    (`keras_ils._files.staged_directory`).

    Args:
        make_splits: `seed -> Splits`.
        config: the `RunConfig` every seed runs (its `seed` and `output_dir` replaced).
        seeds: the seeds (`seed_list`).
        directory: where the results go.
        inputs: the paths the run reads (a data file, a teacher cache), which
            must not lie inside the result set it replaces.
        argument: `directory`'s argument as the user wrote it, for the errors.
    """
    from keras_ils._files import staged_directory
    from keras_ils.comparison.main_job import pipeline
    from keras_ils.comparison.main_job.config import RESULT_FILES
    from keras_ils.comparison.reporting import seeds as seeds_summary

    several, runs, directory = len(seeds) > 1, [], os.path.abspath(directory)
    searches = config.directory or os.path.join(directory, "search")  # outside the result set: kept, resumable
    planned = COMPARISON_FILES + RESULT_FILES + tuple(f"seed{seed}" for seed in seeds if several)
    kept = () if config.directory else ("search",)
    with staged_directory(directory, planned, kept=kept, inputs=inputs, argument=argument) as staging:
        places = [os.path.join(staging, f"seed{seed}") if several else staging for seed in seeds]
        for seed, place in zip(seeds, places, strict=True):
            if several:
                config.log(f"Seed {seed} ({len(runs) + 1}/{len(seeds)})")
            search = os.path.join(searches, f"seed{seed}") if several else searches
            seeded = dataclasses.replace(config, seed=seed, output_dir=place, directory=search)
            runs.append(pipeline.run(make_splits(seed), seeded))
        summary = seeds_summary.summarise_seeds(runs, staging) if several else None
        found = _verdict(places, runs, staging)
    return Comparison(tuple(runs), summary, found, directory)


def _verdict(run_directories, runs, write_to) -> dict:
    """The paired verdict of the runs' rows (`reporting.verdict`), written as `verdict.json` and `verdict.md`."""
    from keras_ils.comparison.main_job.config import CALIBRATORS
    from keras_ils.comparison.reporting import verdict

    try:
        example_nll = verdict.read_example_nll(run_directories)
        groups = verdict.verdict_groups([row["model"] for row in runs[0]["rows"]], tuple(CALIBRATORS.values()))
        shared = verdict.read_shared_examples(run_directories)
        found = verdict.paired_verdict(example_nll, verdict.REFERENCE, groups, shared_examples=shared)
    except (OSError, ValueError) as error:  # e.g. a diverged model's NaN: the results stand without a verdict
        return {"error": str(error), "choice": None}
    verdict.write_verdict(found, write_to)
    return found
