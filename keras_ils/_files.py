"""Writing results so that nothing of the user's is ever deleted and a crash never leaves a half-written set behind.

Files are written to a temporary name beside their destination and renamed
into place (`os.replace` is atomic on one filesystem). A result set goes into
an output directory through `staged_directory`, under one rule:

**The package deletes only what it wrote.** Each output directory records the
entries (top-level files and folders) that the package wrote there in
`.keras-ils-manifest.json`: its `"results"` (replaced whole by the next result
set) and its `"kept"` entries (a KerasTuner search directory: the package's,
never deleted, so a killed run resumes). Everything else in the directory is
the user's: input data, notes, other results. It is never moved, replaced or
deleted; the results are written beside it. A run whose results would take
the name of an entry the manifest does not list (`results.csv`, say, or a
`model_final.keras` where `model_*.keras` are written) is refused before any
work, with the names; so is a run whose input lies inside what it would
replace.

A commit is staged in a hidden folder inside the output directory and
journalled: a run killed before its journal is written leaves the old result
set; one killed after it has its commit completed by the next run into the
same directory (`finish_interrupted_commits`), which also removes every hidden
folder a killed run left.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import json
import os
import re
import shutil
import tempfile

__all__ = [
    "MANIFEST",
    "atomic_write",
    "check_collisions",
    "check_writable",
    "claim",
    "finish_interrupted_commits",
    "owned_entries",
    "remove_interrupted_writes",
    "result_entries",
    "staged_directory",
]

MANIFEST = ".keras-ils-manifest.json"  # in an output directory: {"results": [names], "kept": [names]}
_STAGING_PREFIX = ".keras-ils-staging-"  # inside an output directory: `.keras-ils-staging-<pid>-<random>`
_JOURNAL = ".keras-ils-journal.json"  # in a staging folder: the commit is decided, {"results": new, "old": old}
_OLD = ".keras-ils-old"  # in a staging folder: the old result set, moved aside during a commit


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temporary_name_parts(path: str) -> tuple[str, str]:
    return f".{os.path.basename(path)}.", ".tmp"


def atomic_write(path: str, write) -> str:
    """Calls `write(binary_file)` on a temporary file, then renames it to `path`; returns `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    prefix, suffix = _temporary_name_parts(path)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(handle, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return path


def remove_interrupted_writes(path_pattern: str) -> None:
    """Removes the temporary files that `atomic_write` calls to paths matching `path_pattern` left when killed."""
    prefix, suffix = _temporary_name_parts(path_pattern)
    for leftover in glob.glob(os.path.join(os.path.dirname(path_pattern), f"{prefix}*{suffix}")):
        with contextlib.suppress(FileNotFoundError):
            os.remove(leftover)


def _write_json(path: str, value: dict) -> None:
    atomic_write(path, lambda file: file.write(json.dumps(value, indent=1).encode()))


def owned_entries(output_dir: str) -> dict:
    """`{"results": [...], "kept": [...]}`: what the package recorded writing into `output_dir` (empty if nothing).

    Example:

    >>> import tempfile
    >>> owned_entries(tempfile.mkdtemp())
    {'results': [], 'kept': []}
    """
    path = os.path.join(output_dir, MANIFEST)
    if not os.path.exists(path):
        return {"results": [], "kept": []}
    try:
        with open(path) as file:
            manifest = json.load(file)
        return {key: [str(name) for name in manifest.get(key, [])] for key in ("results", "kept")}
    except (ValueError, AttributeError, TypeError) as error:
        raise ValueError(
            f"{path} is not a keras_ils manifest ({error}): remove it, or choose another folder."
        ) from None


def result_entries(directory: str) -> list:
    """The result set in `directory`: the entries its manifest lists as results, that exist."""
    return [name for name in owned_entries(directory)["results"] if os.path.lexists(os.path.join(directory, name))]


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would send CTRL_C_EVENT there: never treat a run as gone
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@contextlib.contextmanager
def _locked(directory: str):
    """Holds an exclusive lock on `directory` (POSIX `flock`), so that two runs into it commit one at a time."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; concurrent commits into one folder are the user's to avoid
        yield
        return
    handle = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _roll_forward(output_dir: str, staging: str) -> None:
    """Completes the journalled commit of `staging`: the old results aside, the new ones in, the new manifest.

    Idempotent, so a commit killed at any point is completed by running this
    again: an old entry that shares a name with a new one is still the old
    one while the new one is still in `staging`.
    """
    with open(os.path.join(staging, _JOURNAL)) as file:
        journal = json.load(file)
    aside = os.path.join(staging, _OLD)
    os.makedirs(aside, exist_ok=True)
    for name in journal["old"]:
        if os.path.lexists(os.path.join(output_dir, name)) and (
            name not in journal["results"] or os.path.lexists(os.path.join(staging, name))
        ):
            os.replace(os.path.join(output_dir, name), os.path.join(aside, name))
    for name in journal["results"]:
        if os.path.lexists(os.path.join(staging, name)):
            os.replace(os.path.join(staging, name), os.path.join(output_dir, name))
    if os.path.exists(os.path.join(staging, MANIFEST)):
        os.replace(os.path.join(staging, MANIFEST), os.path.join(output_dir, MANIFEST))
    shutil.rmtree(staging, ignore_errors=True)


def finish_interrupted_commits(output_dir: str) -> None:
    """Clears what killed runs left in `output_dir`: a journalled commit is completed, other staging removed.

    Only the hidden folders of runs whose process is gone are touched, so a
    run writing into the same place at the same time keeps its own.
    """
    if not os.path.isdir(output_dir):
        return
    own = re.compile(re.escape(_STAGING_PREFIX) + r"(\d+)-[^-]+")
    for name in sorted(os.listdir(output_dir)):
        match = own.fullmatch(name)
        if match and not _alive(int(match.group(1))):
            staging = os.path.join(output_dir, name)
            if os.path.exists(os.path.join(staging, _JOURNAL)):
                _roll_forward(output_dir, staging)
            shutil.rmtree(staging, ignore_errors=True)


def _probe(directory: str) -> None:
    """Creates and removes a file in `directory`: an `OSError` if it cannot be written."""
    if not os.path.isdir(directory):
        raise NotADirectoryError(20, f"{directory} is a file")
    handle, probe = tempfile.mkstemp(dir=directory, prefix=".keras-ils-write-check-")
    os.close(handle)
    os.remove(probe)


def check_writable(output_dir: str) -> None:
    """Fails now, before any training, when `output_dir` could not be written; names the culprit.

    Results are staged inside `output_dir`, so it must be writable, or, when
    it does not exist yet, the nearest existing folder above it.
    """
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"The output directory {output_dir} exists and is not a directory.")
    existing = os.path.abspath(output_dir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        _probe(existing)
    except OSError as error:
        culprit = "it" if existing == os.path.abspath(output_dir) else f"{existing}, where it would be created,"
        raise ValueError(
            f"Cannot write the output directory {output_dir}: {culprit} is not writable ({error.strerror or error})."
        ) from error


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _refuse_collisions(output_dir: str, names, argument: str) -> None:
    """Refuses `names`, entries of `output_dir` that the package would write over but did not write."""
    if names:
        listed = ", ".join(sorted(names))
        raise ValueError(
            f"Invalid value for argument `{argument}`. The output directory {output_dir} holds {listed}, which "
            f"keras_ils did not write (its {MANIFEST} does not list them), and a new result set there would "
            "overwrite them. Move them away, or choose another output directory; nothing was written or deleted."
        )


def _check_inputs(output_dir: str, inputs, argument: str) -> None:
    """Refuses an input (a data file, a cache) that lies inside what a new result set in `output_dir` replaces."""
    replaced = owned_entries(output_dir)["results"]
    for path in inputs:
        real = os.path.realpath(path)
        for name in replaced:
            entry = os.path.realpath(os.path.join(output_dir, name))
            if real == entry or real.startswith(entry + os.sep):
                raise ValueError(
                    f"Invalid value for argument `{argument}`. The input {path} is inside the result set that a new "
                    f"run in {output_dir} would replace ({name}). Choose another output directory, or move the input."
                )


def _foreign(output_dir: str, patterns) -> list:
    """The entries of `output_dir` matching `patterns` that the package did not write (not in its manifest)."""
    owned = owned_entries(output_dir)
    for journal in glob.glob(os.path.join(glob.escape(output_dir), f"{_STAGING_PREFIX}*", _JOURNAL)):
        with open(journal) as file:  # a killed commit's new entries, already moved in: the package's too
            owned["results"] += json.load(file)["results"]
    return [
        name
        for name in os.listdir(output_dir)
        if _matches(name, patterns)
        and name not in owned["results"]
        and not _matches(name, owned["kept"])
        and not name.startswith(".keras-ils")
    ]


def check_collisions(output_dir: str, patterns, argument: str = "output_dir") -> None:
    """Refuses, before any work, an `output_dir` holding entries of the user's named like `patterns`.

    Example:

    >>> import os, tempfile
    >>> out = tempfile.mkdtemp()
    >>> open(os.path.join(out, "results.csv"), "w").close()  # the user's own file
    >>> check_collisions(out, ("results.*",), "--output-dir")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `--output-dir`. The output directory ... holds results.csv, which ...
    """
    if os.path.isdir(output_dir):
        _refuse_collisions(output_dir, _foreign(output_dir, patterns), argument)


def claim(output_dir: str, patterns, argument: str = "output_dir") -> None:
    """Records `patterns` as the package's in `output_dir` (kept, written in place), after `check_collisions`.

    For writers that update their files in place across runs (a resumable
    table run): what matches `patterns` is theirs from now on; nothing else in
    `output_dir` is ever touched.
    """
    output_dir = os.path.abspath(output_dir)
    check_writable(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    with _locked(output_dir):
        finish_interrupted_commits(output_dir)
        _refuse_collisions(output_dir, _foreign(output_dir, patterns), argument)
        owned = owned_entries(output_dir)
        if set(patterns) - set(owned["kept"]):  # recorded before the work makes them (a search directory)
            owned["kept"] = sorted(set(owned["kept"]) | set(patterns))
            _write_json(os.path.join(output_dir, MANIFEST), {"written_by": "keras_ils", **owned})


def _commit(output_dir: str, staging: str, argument: str) -> None:
    """Moves `staging`'s entries into `output_dir` in place of its old result set (journalled: `_roll_forward`)."""
    new = sorted(name for name in os.listdir(staging) if not name.startswith(".keras-ils-"))
    with _locked(output_dir):
        _refuse_collisions(output_dir, _foreign(output_dir, [glob.escape(n) for n in new]), argument)  # made meanwhile
        owned = owned_entries(output_dir)
        manifest = {"written_by": "keras_ils", "results": new, "kept": owned["kept"]}
        _write_json(os.path.join(staging, MANIFEST), manifest)
        _write_json(os.path.join(staging, _JOURNAL), {"results": new, "old": owned["results"]})
        _roll_forward(output_dir, staging)


def _remove_if_unused(output_dir: str) -> None:
    """Removes a directory this run created when nothing but the package's manifest is in it (a failed run)."""
    if os.path.isdir(output_dir) and set(os.listdir(output_dir)) <= {MANIFEST}:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(output_dir, MANIFEST))
        with contextlib.suppress(OSError):
            os.rmdir(output_dir)


@contextlib.contextmanager
def staged_directory(output_dir: str, planned=(), *, kept=(), inputs=(), argument: str = "output_dir"):
    """Yields a staging folder; on success its entries replace the result set in `output_dir`, on failure nothing.

    Before the body runs: `output_dir` is resolved (a relative path, `.`),
    checked writable, what killed runs left in it is cleared
    (`finish_interrupted_commits`), and the run is refused, with a
    `ValueError` naming `argument`, when an entry that the package did not
    write matches `planned` (glob patterns of the names the run will write)
    or `kept`, or when one of `inputs` lies inside what would be replaced.
    On success the staged entries replace exactly the entries the manifest
    lists as results; the user's entries are not touched. A run killed at any
    moment leaves the old result set or, once the next run into the folder
    has started, the new one, never a mix.

    Args:
        output_dir: where the results go.
        planned: glob patterns of the entries the run writes.
        kept: glob patterns of entries the run writes directly into
            `output_dir` and keeps across runs (`"search"`), recorded as the
            package's before the work starts (`claim`).
        inputs: paths the run reads (its data, a cache).
        argument: the output directory's argument as the user wrote it, for
            the errors (`"output_dir"`, `"--output-dir"`).

    Example:

    >>> import os, tempfile
    >>> out = tempfile.mkdtemp()
    >>> open(os.path.join(out, "notes.txt"), "w").close()  # the user's own file
    >>> with staged_directory(out, ("results.json",)) as staging:
    ...     open(os.path.join(staging, "results.json"), "w").close()
    >>> sorted(os.listdir(out))
    ['.keras-ils-manifest.json', 'notes.txt', 'results.json']
    """
    output_dir = os.path.abspath(output_dir)
    check_collisions(output_dir, (*planned, *kept), argument)  # first: a refused folder is not even probed
    check_writable(output_dir)
    created = not os.path.exists(output_dir)
    try:
        os.makedirs(output_dir, exist_ok=True)
        with _locked(output_dir):
            finish_interrupted_commits(output_dir)
            _refuse_collisions(output_dir, _foreign(output_dir, (*planned, *kept)), argument)
        if kept:
            claim(output_dir, kept, argument)
        _check_inputs(output_dir, inputs, argument)
        staging = tempfile.mkdtemp(dir=output_dir, prefix=f"{_STAGING_PREFIX}{os.getpid()}-")
        os.chmod(staging, 0o777 & ~_umask())
    except (OSError, ValueError) as error:
        if created:
            _remove_if_unused(output_dir)
        if isinstance(error, ValueError):
            raise
        raise ValueError(f"Cannot write the output directory {output_dir}: {error.strerror or error}.") from error
    try:
        yield staging
        _commit(output_dir, staging, argument)
    finally:
        if not os.path.exists(os.path.join(staging, _JOURNAL)):  # a journalled commit is the next run's to finish
            shutil.rmtree(staging, ignore_errors=True)
        if created:
            _remove_if_unused(output_dir)
