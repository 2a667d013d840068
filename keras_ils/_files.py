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


@contextlib.contextmanager
def staged_directory(output_dir: str):
    """Yields a staging directory; on success its files land in `output_dir`, on failure nothing does."""
    parent = os.path.dirname(os.path.abspath(output_dir))
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"The output directory {output_dir} exists and is not a directory.")
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(dir=parent, prefix=".keras-ils-staging-")
        os.chmod(staging, 0o777 & ~_umask())
    except OSError as error:
        raise ValueError(f"Cannot write the output directory {output_dir}: {error.strerror or error}.") from error
    try:
        yield staging
        if not os.path.exists(output_dir):
            os.replace(staging, output_dir)
            return
        for name in os.listdir(staging):
            os.replace(os.path.join(staging, name), os.path.join(output_dir, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
