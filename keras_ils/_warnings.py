"""Warnings in the name of the user's call: the first frame outside the package (and `contextlib`'s helpers).

A warning raised deep inside `compare` (a calibrator fit of one row, a class scarce in a split) would otherwise
point at a line of the package, `fitting.py:320`, which tells the user nothing; Python prints the file and line of
the frame a warning is attributed to. Python 3.12's `skip_file_prefixes` does the walk; on 3.10 and 3.11 the stack
level is counted by hand.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

__all__ = ["warn"]

_SKIPPED = (os.path.dirname(os.path.abspath(__file__)) + os.sep, contextlib.__file__)


def warn(message, category=UserWarning) -> None:
    """`warnings.warn(message, category)` attributed to the first caller outside `keras_ils`.

    `message` may be a `Warning` instance (its class is then the category).
    Frames of `contextlib` (a `with` block's exit) are skipped too.
    """
    if sys.version_info >= (3, 12):
        warnings.warn(message, category, skip_file_prefixes=_SKIPPED)
        return
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
