"""Argument checks, worded the Keras way: "Invalid value for argument `x`. Expected ... Received: x=...".

Non-numbers and booleans are rejected with the same `ValueError` as values out of range.
"""

from __future__ import annotations

import math
import numbers


def invalid(name: str, expected: str, value) -> ValueError:
    return ValueError(f"Invalid value for argument `{name}`. Expected {expected}. Received: {name}={value!r}")


def odir_refused(method) -> ValueError:
    """ODIR's weights given to a calibration `method` that has none (`calibrate`'s and `fit_calibrator`'s check)."""
    return ValueError(
        "Arguments `off_diagonal_l2` and `intercept_l2` are ODIR's, for method='matrix' or 'dirichlet'. "
        f"Received: method={method!r}"
    )


def number_in(name, value, low=None, high=None, *, low_open=False, high_open=False, expected=None) -> float:
    """`value` as a float when it is a finite real number inside the interval, else `invalid(...)`."""
    if expected is None:
        left = "-inf" if low is None else f"{'(' if low_open else '['}{low:g}"
        right = "inf" if high is None else f"{high:g}{')' if high_open else ']'}"
        expected = f"a float in {left}, {right}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise invalid(name, expected, value)
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        raise invalid(name, expected, value)
    return float(value)


def positive(name: str, value) -> float:
    return number_in(name, value, 0.0, low_open=True, expected="a float > 0")


def integer_at_least(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise invalid(name, f"an int >= {minimum}", value)
    return int(value)
