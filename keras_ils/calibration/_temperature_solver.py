"""The temperature fit's arithmetic: safeguarded Newton steps on `u = log(1 / T)`, each one pass over the logits.

With `beta = 1 / T` and `d = z - max_j z_j` per row (`max_j beta z_j = beta
max_j z_j` for `beta > 0`, so the shift is the same at every `beta`), one
pass at `beta` gives per row `S0 = sum_j exp(beta d_j)`, `S1 = sum_j
exp(beta d_j) d_j` and `S2 = sum_j exp(beta d_j) d_j^2`, hence all three of

```
mean NLL = mean(log S0 - beta d_t)
slope    = mean(S1 / S0 - d_t)                  (d/d beta, increasing: the NLL is convex in beta)
curvature = mean(S2 / S0 - (S1 / S0)^2)         (d^2/d beta^2, a variance)
```

The passes are `keras.ops`, compiled by the Keras backend and run where it
computes (`_device`): on the GPU when it has one, under any backend, with no
TensorFlow needed under JAX or torch. The logits stay float32 and so do the
per-row sums over classes; the sums over rows are float64. On the CPU a pass
walks blocks of rows that fit a core's cache (a pass over 50,000 x 1,000
logits streams them once); logits that fit one such block are passed on the
host in NumPy, by the same arithmetic (`_block_sums`), since a compiled call
would cost more than the pass (under JAX, a compilation per shape).

`find_root` is the solver: Newton's method on the root of an objective's
slope in `u`, vectorised over models, safeguarded by a bracket (bisection
whenever a step leaves it or fails to halve, as `rtsafe` in Numerical
Recipes). Its control is float64 numpy on a few numbers per model.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

from keras_ils.calibration import _device

TOLERANCE = 1e-6  # a Newton step in log T this small ends the search (the next would be ~1e-12: T to ~12 digits)
MAX_PASSES = 100
_TRANSFER = 1 << 21  # entries per tensor the logits are copied into (8 MiB: TensorFlow copies one large array slowly)
CPU_CACHE = 1 << 18  # entries a CPU pass works on at a time (1 MiB of float32: a core's cache)
_SUBSAMPLE = 4096  # rows of the warm start's fit, on sets of at least 4 times as many


class Moments(NamedTuple):
    """One pass's per-model means at `beta = exp(u)`: the NLL's `slope` and `curvature` in `beta`, and the `nll`;
    and whether the logits are `separated` (every row's true logit its largest, some row's others smaller)."""

    slope: np.ndarray
    curvature: np.ndarray
    nll: np.ndarray
    separated: np.ndarray


def _block_sums(xp, z, true_logits, weights, scale, beta):
    """`[5, M]` float64 sums over a block's rows (`z [M, r, K]`, `true_logits [M, r]`, row `weights [r]`, at the
    float32 `scale [M, 1, 1]` and its float64 `beta [M, 1]`) of the NLL's slope, curvature and value, of the rows
    whose true logit is below their largest, and of the rows not constant; `xp` is `keras.ops` or `_device.HOST`."""
    top = xp.max(z, axis=-1, keepdims=True)
    d = z - top
    e = xp.exp(scale * d)
    weighted = e * d
    s0, s1 = xp.sum(e, axis=-1), xp.sum(weighted, axis=-1)
    mean = s1 / s0
    variance = xp.maximum(xp.sum(weighted * d, axis=-1) / s0 - mean * mean, 0.0)
    true = xp.cast(true_logits, "float64") - xp.cast(top[..., 0], "float64")
    terms = [
        xp.cast(mean, "float64") - true,
        xp.cast(variance, "float64"),
        xp.cast(xp.log(s0), "float64") - beta * true,
        xp.cast(true < 0, "float64"),
        xp.cast(xp.min(d, axis=-1) < 0, "float64"),
    ]
    return xp.sum(xp.stack(terms) * xp.cast(weights, "float64"), axis=-1)


def _pass_sums(logits, true_logits, weights, beta):
    """One pass over a chunk, a block at a time: `(logits [M, b, r, K], true logits [M, b, r], row weights [b, r],
    beta [M])` -> `_block_sums` over all its rows."""
    scale = ops.cast(beta, "float32")[:, None, None]
    beta = ops.cast(scale[:, 0, 0], "float64")[:, None]  # the float32 beta the exponentials use

    def step(index, sums):
        return sums + _block_sums(ops, logits[:, index], true_logits[:, index], weights[index], scale, beta)

    zeros = ops.zeros((5, ops.shape(logits)[0]), "float64")
    return ops.fori_loop(0, ops.shape(logits)[1], step, zeros)


@functools.cache
def _compiled_pass(backend: str):
    """`_pass_sums` compiled by `backend`."""
    return _device.compiled(_pass_sums)


def transfer_rows(entries_per_row: int) -> int:
    """Rows per chunk: about `_TRANSFER` entries."""
    return max(1, _TRANSFER // entries_per_row)


def rows_layout(count: int, entries_per_row: int) -> _device.Layout:
    """How a pass cuts `count` rows: blocks of a core's cache on the CPU, a whole chunk on an accelerator; chunks
    of about `_TRANSFER` entries (copied to the device once each: TensorFlow copies one large array slowly)."""
    chunk = transfer_rows(entries_per_row)
    rows = chunk if _device.accelerated() else max(1, CPU_CACHE // entries_per_row)
    return _device.layout(count, rows, max(1, chunk // rows))


class Logits:
    """Models' float32 logits `[M, n, K]` and their true-class logits `[M, n]`, on the device, ready for passes."""

    def __init__(self, logits, labels):
        """From numpy float32 `logits [M, n, K]` and checked integer `labels [M, n]`."""
        self.array, self.labels = logits, labels
        models, self.count, classes = logits.shape
        self.true_logits = np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
        self.chunks = None  # data that fit one block of a CPU pass are passed on the host, in NumPy
        if logits.size > CPU_CACHE:
            cut = rows_layout(self.count, models * classes)
            blocks = (_device.blocked(logits, 1, cut), _device.blocked(self.true_logits, 1, cut))
            blocks += (_device.row_weights(cut),)
            with _device.float64():
                self.chunks = [tuple(map(_device.tensor, chunk)) for chunk in zip(*blocks, strict=True)]

    def moments(self, u) -> Moments:
        """The pass at `beta = exp(u)` (`u` float64 `[M]`, each `exp(u)` a float32 value: see `representable`)."""
        if self.chunks is None:
            scale = np.exp(u).astype(np.float32)[:, None, None]
            total = _block_sums(_device.HOST, self.array, self.true_logits, 1.0, scale, scale[:, 0].astype(np.float64))
        else:
            function = _compiled_pass(keras.backend.backend())
            with _device.float64():
                beta = _device.tensor(np.exp(u))
                sums = [function(*chunk, beta) for chunk in self.chunks]
                total = _device.numpy(sums[0] if len(sums) == 1 else ops.sum(ops.stack(sums), axis=0))
        slope, curvature, nll, missed, spread = total
        return Moments(slope / self.count, curvature / self.count, nll / self.count, (missed == 0) & (spread > 0))

    def subsample(self):
        """Every `n // _SUBSAMPLE`-th row when there are at least `4 * _SUBSAMPLE`, for a warm start; else `None`."""
        if self.count < 4 * _SUBSAMPLE:
            return None
        step = self.count // _SUBSAMPLE
        return Logits(np.ascontiguousarray(self.array[:, ::step]), np.ascontiguousarray(self.labels[:, ::step]))


def representable(u):
    """`u` moved to the nearest `log beta` with `beta` a float32 value, the `beta` a pass computes with."""
    return np.log(np.exp(u).astype(np.float32).astype(np.float64))


class Root(NamedTuple):
    """`find_root`'s answer per model: `u` (an end of the bracket, exactly, where the root lies beyond it), the
    last pass's point `at` and its `moments`, and the passes made."""

    u: np.ndarray
    at: np.ndarray
    moments: Moments
    passes: int


def find_root(data, objective, lower, upper, known, start, tolerance=TOLERANCE, max_passes=MAX_PASSES) -> Root:
    """The root in `u` of `objective`, per model, by Newton's method inside a bracket `[lower, upper]`.

    `objective(u, moments) -> (value, derivative)` is negative below its root
    and positive above it within the bracket; a 0 where its derivative is
    positive is the root, and elsewhere counts as above (a constant NLL's
    minimum is the largest `T` searched: no information). `known = (lower_known,
    upper_known)` says where its sign at an end is known (negative at
    `lower`, positive at `upper`); an end not known is a bound, and where the
    objective has the sign that puts the root beyond it, that end is the
    answer. Each step is one pass (`data.moments`) for all models.
    """
    lower, upper = np.array(lower, np.float64), np.array(upper, np.float64)
    lower_known, upper_known = (np.array(k, bool) for k in known)
    u = np.clip(start, lower, upper)
    result, done = np.full(u.shape, np.nan), np.zeros(u.shape, bool)
    at, moments, previous, passes = u, None, np.full(u.shape, np.inf), 0
    while passes < max_passes and not done.all():
        point = representable(u)
        fresh = data.moments(point)
        passes += 1
        kept = fresh if moments is None else moments  # a model already done keeps its last pass
        moments = Moments(*(np.where(done, a, b) for a, b in zip(kept, fresh, strict=True)))
        at = np.where(done, at, point)
        value, derivative = objective(point, fresh)
        beyond_lower = (u == lower) & ~lower_known & (value >= 0)
        beyond_upper = (u == upper) & ~upper_known & (value <= 0)
        root = (value == 0) & (derivative > 0)  # (a zero where the objective is flat is no root: see above)
        settled = ~done & (beyond_lower | beyond_upper | root | (lower == upper))
        inside = np.where(root, point, u)
        result = np.where(settled, np.where(beyond_lower, lower, np.where(beyond_upper, upper, inside)), result)
        done |= settled
        lower, lower_known = np.where(value < 0, point, lower), lower_known | (value < 0)
        upper, upper_known = np.where(value >= 0, point, upper), upper_known | (value >= 0)
        bracketed = lower_known & upper_known
        u, previous, converged = _next(point, value, derivative, (lower, upper), bracketed, previous, tolerance)
        converged &= ~done
        result, done = np.where(converged, u, result), done | converged
    return Root(np.where(done, result, u), at, moments, passes)


def _next(point, value, derivative, bracket, bracketed, previous, tolerance):
    """`(next u, its step, whether it ends the search)`: Newton's step where it stays inside the bracket and at
    least halves the step before (else bisection, or the end not yet known, where the root lies beyond the point);
    a Newton step that leaves the bracket by less than `tolerance` ends the search at the end it leaves by."""
    lower, upper = bracket
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        newton = point - value / np.where(derivative > 0, derivative, np.nan)
    inside = (newton > lower) & (newton < upper)
    useful = np.isfinite(newton) & inside & (~bracketed | (np.abs(newton - point) <= 0.5 * np.abs(previous)))
    end = np.clip(newton, lower, upper)
    near = bracketed & np.isfinite(newton) & ~inside & (np.abs(newton - end) <= tolerance)
    unknown_end = np.where(value < 0, upper, lower)
    fallback = np.where(bracketed, 0.5 * (lower + upper), np.where(np.isfinite(newton), newton, unknown_end))
    target = np.where(useful, newton, np.where(near, end, np.clip(fallback, lower, upper)))
    step = target - point
    converged = np.where(useful, np.abs(step) <= tolerance, near | (bracketed & (upper - lower <= 2 * tolerance)))
    return target, step, converged


def likelihood_slope(u, moments):
    """The maximum-likelihood objective: the NLL's slope in `beta` (increasing), and its derivative in `u`.

    On separated logits the slope is `-inf`: the NLL falls towards `T = 0`
    for ever. (At a small `T` every term but a row's largest underflows in
    float32, and its exact, negative slope would read 0.)
    """
    return np.where(moments.separated, -np.inf, moments.slope), np.exp(u) * moments.curvature


def posterior_slope(weight):
    """The MAP objective's slope in `u`, per example: `d/du [mean NLL + weight u^2 / 2]`, and its derivative."""

    def objective(u, moments):
        beta = np.exp(u)
        return beta * moments.slope + weight * u, beta * moments.slope + beta**2 * moments.curvature + weight

    return objective


def maximum_likelihood(data, lower, upper, max_passes=MAX_PASSES) -> Root:
    """The NLL's minimiser in `u` within `[lower, upper]` per model: its slope's root, or an end where it has none.

    On a large set the search starts from the fit on a subsample (a few
    passes over a fraction of the rows), so that the full passes are the few
    of Newton's quadratic convergence from nearby.
    """
    start, sample, no = np.zeros_like(lower), data.subsample(), np.zeros(lower.shape, bool)
    if sample is not None:
        start = find_root(sample, likelihood_slope, lower, upper, (no, no), start, tolerance=1e-3).u
    return find_root(data, likelihood_slope, lower, upper, (no, no), start, max_passes=max_passes)


def maximum_a_posteriori(data, likelihood, searched, bounds, weight, max_passes=MAX_PASSES) -> Root:
    """The minimiser in `u` within `bounds` of `mean NLL + weight u^2 / 2` (`weight = 1 / (n prior_scale^2)`).

    `likelihood` is `maximum_likelihood`'s root `u*` within `searched`, which
    holds `bounds`. The objective's slope in `u` is `beta NLL'(beta) + weight
    u`: negative below `min(0, u*)` and positive above `max(0, u*)`, so every
    minimum lies between 0 and `u*`, and the search starts with a Newton step
    from the last pass of the maximum-likelihood fit (free: no pass). Up to
    `u = 1` (`T >= 1 / e`) the objective is convex in `beta` there (the
    prior's `(log beta)^2` is convex for `beta <= e`), so its minimum is
    unique; where the bracket reaches beyond, the objective may have several
    minima, and a grid of `_GRID_POINTS` values of `u` over `bounds` picks the
    best one's cell first (one pass per point inside the bracket).
    """
    optimum, objective = likelihood.u, posterior_slope(weight)
    inside = (optimum > searched[0]) & (optimum < searched[1])  # at an end of `searched`, the slope there is unknown
    low_end, high_end = np.minimum(0.0, optimum), np.maximum(0.0, optimum)
    lower, upper = np.clip(low_end, *bounds), np.clip(high_end, *bounds)
    # the sign at an end: weight * u* at an interior u*, that of NLL'(beta = 1) (opposite to u*'s) at 0; an end
    # moved by `bounds` inwards is unknown, outwards (the bracket wholly beyond a bound) known
    known_low = np.where(lower == low_end, np.where(optimum < 0, inside, optimum > 0), lower < low_end)
    known_high = np.where(upper == high_end, np.where(optimum > 0, inside, optimum < 0), upper > high_end)
    value, derivative = objective(likelihood.at, likelihood.moments)
    with np.errstate(divide="ignore", invalid="ignore"):
        start = likelihood.at - value / np.where(derivative > 0, derivative, np.nan)
    bracket = (lower, upper, known_low, known_high, np.where(np.isfinite(start), start, 0.5 * (lower + upper)))
    several = (upper > 1.0) & (lower < upper)
    grid_passes = 0
    if several.any():
        bracket, grid_passes = _best_cell(data, objective, weight, bounds, bracket, several)
    lower, upper, known_low, known_high, start = bracket
    root = find_root(data, objective, lower, upper, (known_low, known_high), start, max_passes=max_passes)
    return root._replace(passes=root.passes + grid_passes)


_GRID_POINTS = 64


def _best_cell(data, objective, weight, bounds, bracket, several):
    """`(bracket, passes)`: for the models in `several`, the cell around the best point of a grid over `bounds`."""
    lower, upper, known_low, known_high, start = bracket
    grid = np.linspace(*np.broadcast_arrays(*bounds), _GRID_POINTS, axis=-1)  # [M, points]
    inside = several[:, None] & (grid >= lower[:, None]) & (grid <= upper[:, None])
    values, signs = np.full(grid.shape, np.inf), np.zeros(grid.shape)
    columns = np.flatnonzero(inside.any(axis=0))
    for column in columns:
        point = representable(grid[:, column])
        moments = data.moments(point)
        values[:, column] = moments.nll + weight * point**2 / 2
        signs[:, column] = objective(point, moments)[0]
    best = np.where(inside, values, np.inf).argmin(axis=1)
    rows, used = np.arange(len(best)), inside.any(axis=1)
    left, right = np.maximum(best - 1, 0), np.minimum(best + 1, _GRID_POINTS - 1)
    cell_low, cell_high = np.maximum(lower, grid[rows, left]), np.minimum(upper, grid[rows, right])
    known_low = np.where(cell_low > lower, signs[rows, left] < 0, known_low)
    known_high = np.where(cell_high < upper, signs[rows, right] > 0, known_high)
    cell = (cell_low, cell_high, known_low, known_high, grid[rows, best])
    return tuple(np.where(used, new, old) for new, old in zip(cell, bracket, strict=True)), len(columns)


def nll_at(data, root: Root, u):
    """The mean NLL at `u`: to first order from the last pass when `u` is within 1e-3 of it, else from one more."""
    at, moments = root.at, root.moments
    if np.any(np.abs(u - at) > 1e-3):
        at = representable(u)
        moments = data.moments(at)
    return moments.nll + moments.slope * (np.exp(u) - np.exp(at))
