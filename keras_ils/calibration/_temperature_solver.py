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

The passes are TensorFlow (a core dependency of the package), so they run
where TensorFlow places them: on the GPU when it sees one, under any Keras
backend. The logits stay float32 and so do the per-row sums over classes; the
sums over rows are float64. On the CPU a pass walks blocks of rows that fit a
core's cache (a pass over 50,000 x 1,000 logits streams them once).

`find_root` is the solver: Newton's method on the root of an objective's
slope in `u`, vectorised over models, safeguarded by a bracket (bisection
whenever a step leaves it or fails to halve, as `rtsafe` in Numerical
Recipes). Its control is float64 numpy on a few numbers per model.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

TOLERANCE = 1e-6  # a Newton step in log T this small ends the search (the next would be ~1e-12: T to ~12 digits)
MAX_PASSES = 100
_TRANSFER = 1 << 21  # entries per tensor the logits are copied into (8 MiB: TensorFlow copies one large array slowly)
_CPU_CACHE = 1 << 18  # entries a CPU pass works on at a time (1 MiB of float32: a core's cache)
_SUBSAMPLE = 4096  # rows of the warm start's fit, on sets of at least 4 times as many


class Moments(NamedTuple):
    """One pass's per-model means at `beta = exp(u)`: the NLL's `slope` and `curvature` in `beta`, and the `nll`;
    and whether the logits are `separated` (every row's true logit its largest, some row's others smaller)."""

    slope: np.ndarray
    curvature: np.ndarray
    nll: np.ndarray
    separated: np.ndarray


@functools.cache
def _pass():
    """The `tf.function` of one pass over a block: `(logits [M, r, K], true logits [M, r], beta [M], rows)` ->
    per-model sums over the block's rows of the NLL's slope, curvature and value, of the rows whose true logit
    is below their largest, and of the rows not constant."""
    import tensorflow as tf

    def sums(logits, true_logits, beta, rows):
        scale = tf.cast(beta, tf.float32)[:, None, None]
        beta = tf.cast(scale[:, 0, 0], tf.float64)[:, None]  # the float32 beta the exponentials use
        zero = tf.zeros(tf.shape(logits)[:1], tf.float64)

        def step(start, slope, curvature, nll, missed, spread):
            z = logits[:, start : start + rows]
            top = tf.reduce_max(z, axis=-1, keepdims=True)
            d = z - top
            e = tf.exp(scale * d)
            weighted = e * d
            s0, s1 = tf.reduce_sum(e, -1), tf.reduce_sum(weighted, -1)
            mean = s1 / s0
            variance = tf.maximum(tf.reduce_sum(weighted * d, -1) / s0 - mean * mean, 0.0)
            true = tf.cast(true_logits[:, start : start + rows], tf.float64) - tf.cast(top[..., 0], tf.float64)
            slope += tf.reduce_sum(tf.cast(mean, tf.float64) - true, -1)
            curvature += tf.reduce_sum(tf.cast(variance, tf.float64), -1)
            nll += tf.reduce_sum(tf.cast(tf.math.log(s0), tf.float64) - beta * true, -1)
            missed += tf.reduce_sum(tf.cast(true < 0, tf.float64), -1)
            spread += tf.reduce_sum(tf.cast(tf.reduce_min(d, -1) < 0, tf.float64), -1)
            return start + rows, slope, curvature, nll, missed, spread

        count = tf.shape(logits)[1]
        return tuple(tf.while_loop(lambda start, *_: start < count, step, (0,) + (zero,) * 5)[1:])

    signature = (
        tf.TensorSpec([None, None, None], tf.float32),
        tf.TensorSpec([None, None], tf.float32),
        tf.TensorSpec([None], tf.float64),
        tf.TensorSpec([], tf.int32),
    )
    return tf.function(sums, input_signature=signature)


def transfer_rows(entries_per_row: int) -> int:
    """Rows per block of `on_device`: about `_TRANSFER` entries."""
    return max(1, _TRANSFER // entries_per_row)


def on_device(array, rows: int, axis: int = 0) -> list:
    """`array` as TensorFlow tensors of `rows` rows each along `axis`, where TensorFlow computes (the GPU when it
    sees one): copied there once."""
    import tensorflow as tf

    parts = np.split(array, range(rows, array.shape[axis], rows), axis=axis)
    return [tf.identity(tf.convert_to_tensor(part)) for part in parts]


def cache_rows(entries_per_row: int):
    """Rows a pass works on at a time: a core's cache of them on the CPU, a whole block on a GPU."""
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        return np.int32(_TRANSFER)
    return np.int32(max(1, _CPU_CACHE // entries_per_row))


class Logits:
    """Models' float32 logits `[M, n, K]` and their true-class logits `[M, n]`, on the device, ready for passes."""

    def __init__(self, logits, labels):
        """From numpy float32 `logits [M, n, K]` and checked integer `labels [M, n]`."""
        self.array, self.labels = logits, labels
        models, self.count, classes = logits.shape
        true_logits = np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
        rows = transfer_rows(models * classes)
        self.blocks = list(zip(on_device(logits, rows, axis=1), on_device(true_logits, rows, axis=1), strict=True))
        self.rows = cache_rows(models * classes)

    def moments(self, u) -> Moments:
        """The pass at `beta = exp(u)` (`u` float64 `[M]`, each `exp(u)` a float32 value: see `representable`)."""
        beta = np.exp(u)
        slope, curvature, nll, missed, spread = (
            np.sum([value.numpy() for value in values], axis=0)
            for values in zip(*(_pass()(logits, true, beta, self.rows) for logits, true in self.blocks), strict=True)
        )
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
