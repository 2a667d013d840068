"""Writing results so that a crash never leaves a half-written file or directory behind.

Files are written to a temporary name beside their destination and renamed
into place (`os.replace` is atomic on one filesystem); directories are staged
the same way. Both get the permissions an ordinary `open`/`mkdir` would give
(the temporary-file functions create them private to the owner).
"""

from __future__ import annotations

import contextlib
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


def remove_abandoned_staging(output_dir: str) -> None:
    """Removes the staging directories that killed runs into `output_dir` left beside it.

    A staging directory is named `.keras-ils-staging-<output name>-<pid>-<random>`
    (the random part has no `-`); only those of `output_dir` whose process is
    gone are removed, so a run writing into the same place at the same time
    keeps its own, and so does a run into `<output name>-2024`.
    """
    parent, prefix = os.path.dirname(os.path.abspath(output_dir)), _staging_prefix(output_dir)
    own = re.compile(re.escape(prefix) + r"(\d+)-[^-]+")
    for path in glob.glob(os.path.join(glob.escape(parent), glob.escape(prefix) + "*")):
        match = own.fullmatch(os.path.basename(path))
        if match and not _alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)


def check_writable(output_dir: str) -> None:
    """Fails now, before any training, when `output_dir` (or the nearest existing folder above it) cannot be written."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"The output directory {output_dir} exists and is not a directory.")
    existing = os.path.abspath(output_dir)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        if not os.path.isdir(existing):
            raise NotADirectoryError(f"{existing} is a file")
        handle, probe = tempfile.mkstemp(dir=existing, prefix=".keras-ils-write-check-")
        os.close(handle)
        os.remove(probe)
    except OSError as error:
        raise ValueError(f"Cannot write the output directory {output_dir}: {error.strerror or error}.") from error


@contextlib.contextmanager
def staged_directory(output_dir: str, result_files: tuple = ()):
    """Yields a staging directory; on success its files replace the result set in `output_dir`, on failure nothing.

    Checked before the body runs: `output_dir` can be written (a directory
    that cannot fails now, not after hours of training), and staging
    directories that killed runs into `output_dir` left behind are removed
    (`remove_abandoned_staging`). On success the staged files are moved in,
    then the files of `output_dir` matching the glob patterns `result_files`
    that the new set does not hold are removed, so no result of an earlier
    run (a stale PNG) sits beside the new ones; other files (a tuner's
    search directory, a teacher cache) are left alone.
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
        if not os.path.exists(output_dir):
            os.replace(staging, output_dir)
            return
        new = set(os.listdir(staging))
        for name in new:
            os.replace(os.path.join(staging, name), os.path.join(output_dir, name))
        for pattern in result_files:
            for path in glob.glob(os.path.join(glob.escape(output_dir), pattern)):
                if os.path.basename(path) not in new and os.path.isfile(path):
                    os.remove(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
