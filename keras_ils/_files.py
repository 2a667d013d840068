"""Writing results so that a crash never leaves a half-written file or directory behind.

Files are written to a temporary name beside their destination and renamed
into place (`os.replace` is atomic on one filesystem); directories are staged
the same way. Both get the permissions an ordinary `open`/`mkdir` would give
(the temporary-file functions create them private to the owner).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import shutil
import tempfile


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


_STAGING_PREFIX = ".keras-ils-staging-"


def _staging_prefix(output_dir: str) -> str:
    return f"{_STAGING_PREFIX}{os.path.basename(os.path.abspath(output_dir))}-"


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


_CARRIED = ".keras-ils-carried"  # in a staging directory: the old entries moved in to outlive the replacement


def _carry_over(output_dir: str, staging: str, result_files: tuple) -> None:
    """Moves the entries of `output_dir` that are not results (a search directory, a cache) into `staging`.

    Their names are written to `staging/.keras-ils-carried` first, so that a run
    killed from here on has them moved back by the next start
    (`remove_abandoned_staging`), never deleted.
    """
    results = {os.path.basename(p) for pattern in result_files for p in glob.glob(os.path.join(output_dir, pattern))}
    staged = set(os.listdir(staging))
    carried = sorted(set(os.listdir(output_dir)) - results - staged)
    atomic_write(os.path.join(staging, _CARRIED), lambda file: file.write("\n".join(carried).encode()))
    for name in carried:
        os.replace(os.path.join(output_dir, name), os.path.join(staging, name))


def _move_back(staging: str, output_dir: str) -> None:
    """Puts the entries that `_carry_over` moved into an abandoned `staging` back into `output_dir`."""
    listed = os.path.join(staging, _CARRIED)
    if not os.path.exists(listed):
        return
    with open(listed) as file:
        carried = [name for name in file.read().split("\n") if name]
    os.makedirs(output_dir, exist_ok=True)
    for name in carried:
        source, destination = os.path.join(staging, name), os.path.join(output_dir, name)
        if os.path.lexists(source) and not os.path.lexists(destination):
            os.replace(source, destination)


def remove_abandoned_staging(output_dir: str) -> None:
    """Clears what killed runs into `output_dir` left beside it, giving back what they had carried over.

    A staging directory is named `.keras-ils-staging-<output name>-<pid>-<random>`
    (the random part has no `-`), and so is the old result set a replacement
    renames aside; only those of `output_dir` whose process is gone are touched,
    so a run writing into the same place at the same time keeps its own, and so
    does a run into `<output name>-2024`. The entries a killed replacement had
    carried over from `output_dir` (a search directory, a cache) are moved back
    into it first.
    """
    parent, prefix = os.path.dirname(os.path.abspath(output_dir)), _staging_prefix(output_dir)
    own = re.compile(re.escape(prefix) + r"(\d+)-[^-]+")
    for path in sorted(glob.glob(os.path.join(glob.escape(parent), glob.escape(prefix) + "*"))):
        match = own.fullmatch(os.path.basename(path))
        if match and not _alive(int(match.group(1))):
            _move_back(path, output_dir)
            shutil.rmtree(path, ignore_errors=True)


def _probe(directory: str) -> None:
    """Creates and removes a file in `directory`: an `OSError` if it cannot be written."""
    if not os.path.isdir(directory):
        raise NotADirectoryError(errno.ENOTDIR, f"{directory} is a file")
    handle, probe = tempfile.mkstemp(dir=directory, prefix=".keras-ils-write-check-")
    os.close(handle)
    os.remove(probe)


def check_writable(output_dir: str) -> None:
    """Fails now, before any training, when `output_dir`'s results could not be written; names the culprit.

    Results are staged in `output_dir`'s parent and renamed into place, so the
    parent (or the nearest existing folder above it) must be writable, and so
    must `output_dir` itself when it exists (its other entries are kept).
    """
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"The output directory {output_dir} exists and is not a directory.")
    existing = os.path.dirname(os.path.abspath(output_dir))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    checks = [(existing, "where the results are staged before they are moved in")]
    if os.path.isdir(output_dir):
        checks.append((os.path.abspath(output_dir), "itself"))
    for directory, role in checks:
        try:
            _probe(directory)
        except OSError as error:
            culprit = "it" if role == "itself" else f"{directory}, {role},"
            raise ValueError(
                f"Cannot write the output directory {output_dir}: {culprit} is not writable "
                f"({error.strerror or error})."
            ) from error


def _replace(output_dir: str, staging: str, result_files: tuple) -> None:
    """Replaces `output_dir`'s result set by `staging`'s as a whole: two renames, the old set put aside."""
    if not os.path.exists(output_dir):
        os.replace(staging, output_dir)
        return
    _carry_over(output_dir, staging, result_files)
    aside = f"{staging}old"  # same pid and prefix: a killed run's is cleared by the next start
    os.replace(output_dir, aside)
    os.replace(staging, output_dir)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(output_dir, _CARRIED))
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def staged_directory(output_dir: str, result_files: tuple = ()):
    """Yields a staging directory; on success its files replace the result set in `output_dir`, on failure nothing.

    Checked before the body runs: `output_dir` can be written (a directory
    that cannot fails now, not after hours of training), and what killed runs
    into `output_dir` left behind is cleared (`remove_abandoned_staging`). On
    success the new set replaces the old one as a whole: the entries of
    `output_dir` that are not results (glob patterns `result_files`: a tuner's
    search directory, a teacher cache) are carried into the staging directory,
    the old directory is renamed aside and the staging directory renamed into
    its place. A run killed at any moment leaves either the old result set or
    the new one, never a mix, and the next start gives back what was carried.
    """
    parent = os.path.dirname(os.path.abspath(output_dir))
    check_writable(output_dir)
    try:
        os.makedirs(parent, exist_ok=True)
        remove_abandoned_staging(output_dir)
        staging = tempfile.mkdtemp(dir=parent, prefix=f"{_staging_prefix(output_dir)}{os.getpid()}-")
        os.chmod(staging, 0o777 & ~_umask())
    except OSError as error:
        raise ValueError(f"Cannot write the output directory {output_dir}: {error.strerror or error}.") from error
    try:
        yield staging
        _replace(output_dir, staging, result_files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
