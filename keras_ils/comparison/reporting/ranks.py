"""Average ranks, the Friedman test and critical differences of Demšar (2006), for any results table.

A results table has one row per data set (the paper's dataset-architecture
pairs) and one column per method; each cell is a score such as the test
cross-entropy. Pass it as a 2-D array (rows data sets, columns methods) or
as a mapping `{method: [score per data set]}`.

- `ranks`: each data set's ranks, 1 for the best, ties averaged.
- `average_ranks`: their mean over the data sets (the paper's "Average Rank").
- `friedman_test`: is any method different? Friedman's chi-square and the
  Iman-Davenport F, with p-values.
- `critical_difference`: how far apart two average ranks must be to differ
  at level `alpha`: all pairs (Nemenyi) or each method against one control
  (Bonferroni-Dunn).
- `critical_difference_diagram`: the diagram of Demšar's Figures 1 and 2.

Nothing here needs scipy: the studentized range quantile comes from its
integral, the normal quantile from `statistics.NormalDist`, the chi-square
and F tail probabilities from the regularised incomplete gamma and beta
functions (the tests check each against scipy).

References:
    Demšar (2006), "Statistical Comparisons of Classifiers over Multiple Data Sets", JMLR 7, §3.2.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils._files import atomic_write

TESTS = ("nemenyi", "bonferroni-dunn")


def _table(scores):
    """`(names or None, [data sets, methods] float array)` from an array or a `{method: scores}` mapping."""
    names = None
    if isinstance(scores, Mapping):
        names = list(scores)
        columns = [np.asarray(scores[name], dtype=object).ravel() for name in names]
        if len({len(column) for column in columns}) > 1:
            raise invalid("scores", "one score per data set for every method (columns of equal length)", scores)
        scores = np.stack(columns, axis=1) if columns else np.empty((0, 0))
    table = np.asarray(scores, dtype=object)
    real = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in table.ravel())
    if table.ndim != 2 or table.shape[0] < 1 or table.shape[1] < 2 or not real:
        raise invalid("scores", "a 2-D table of numbers, one row per data set and at least 2 method columns", scores)
    table = table.astype(np.float64)
    if not np.all(np.isfinite(table)):
        raise invalid("scores", "finite numbers (no NaN or inf)", scores)
    return names, table


def ranks(scores, lower_is_better: bool = True) -> np.ndarray:
    """Each data set's ranks of the methods: 1 for the best, tied methods share the average of their ranks.

    Args:
        scores: `[data sets, methods]` scores, or `{method: [score per data set]}`.
        lower_is_better: `True` for losses (cross-entropy, ECE), `False`
            for accuracy. Defaults to `True`.

    Returns:
        `[data sets, methods]` float array of ranks (columns in the order of `scores`).

    Example:

    >>> ranks([[0.2, 0.1, 0.2, 0.4]])
    array([[2.5, 1. , 2.5, 4. ]])
    """
    _, table = _table(scores)
    if not lower_is_better:
        table = -table
    better = (table[:, None, :] < table[:, :, None]).sum(axis=-1)  # [row, method]: methods strictly better
    tied = (table[:, None, :] == table[:, :, None]).sum(axis=-1)  # including itself
    return better + (tied + 1) / 2


def average_ranks(table, lower_is_better: bool = True):
    """The average rank of every method over the data sets (Demšar, 2006, §3.2.2), ties averaged.

    Args:
        table: `[data sets, methods]` scores (rows: data set-architecture pairs, columns: methods), or
            `{method: [score per data set]}`.
        lower_is_better: Defaults to `True` (losses); `False` for accuracy.

    Returns:
        `{method: average rank}` for a mapping, else a `[methods]` array.

    Example:

    >>> scores = {"No LS": [0.31, 1.38], "LS": [0.31, 1.28], "ILS": [0.27, 1.10]}
    >>> average_ranks(scores)
    {'No LS': 2.75, 'LS': 2.25, 'ILS': 1.0}
    >>> average_ranks([[91.2, 92.2], [67.3, 70.4]], lower_is_better=False)
    array([2., 1.])
    """
    names, _ = _table(table)
    mean = ranks(table, lower_is_better).mean(axis=0)
    return mean if names is None else {name: float(rank) for name, rank in zip(names, mean, strict=True)}


class FriedmanResult(NamedTuple):
    """Friedman's chi-square (`k - 1` degrees of freedom) and the Iman-Davenport F (`df1`, `df2`)."""

    statistic: float
    pvalue: float
    f_statistic: float
    f_pvalue: float
    df1: int
    df2: int


def friedman_test(scores, lower_is_better: bool = True) -> FriedmanResult:
    """The Friedman test of "all methods are equivalent", with the Iman-Davenport F (Demšar, 2006, §3.2.2).

    Formula:

    ```
    chi2_F = 12 N / (k (k + 1)) * [sum_j R_j^2 - k (k + 1)^2 / 4] / C
    F_F = (N - 1) chi2_F / (N (k - 1) - chi2_F),  F with (k - 1, (k - 1)(N - 1)) degrees of freedom
    ```

    `R_j` is method `j`'s average rank over `N` data sets. `C = 1 - sum(t^3 - t)
    / (N k (k^2 - 1))` over the groups of `t` tied methods corrects for ties
    (as scipy's `friedmanchisquare`); without ties `C = 1` and this is
    Demšar's Eq. The F variant is less conservative; Demšar recommends it.
    Identical rankings on every data set give `F_F = inf`, p-value 0.

    Args:
        scores: `[data sets, methods]` scores, or `{method: [score per data set]}`,
            at least 2 data sets.
        lower_is_better: Defaults to `True`.

    Returns:
        `FriedmanResult(statistic, pvalue, f_statistic, f_pvalue, df1, df2)`.

    Example:

    >>> result = friedman_test([[1, 2, 3], [1, 3, 2], [1, 2, 3], [2, 1, 3]])
    >>> round(result.statistic, 3), round(result.pvalue, 4), (result.df1, result.df2)
    (4.5, 0.1054, (2, 6))
    """
    rank_table = ranks(scores, lower_is_better)
    num_datasets, k = rank_table.shape
    if num_datasets < 2:
        raise invalid("scores", "at least 2 data sets (rows) for the Friedman test", scores)
    mean = rank_table.mean(axis=0)
    statistic = 12 * num_datasets / (k * (k + 1)) * (np.sum(mean**2) - k * (k + 1) ** 2 / 4)
    ties = sum(float(np.sum(t**3 - t)) for t in (np.unique(row, return_counts=True)[1] for row in rank_table))
    correction = 1 - ties / (num_datasets * k * (k * k - 1))
    statistic = float(statistic / correction) if correction > 0 else 0.0
    df1, df2 = k - 1, (k - 1) * (num_datasets - 1)
    denominator = num_datasets * (k - 1) - statistic
    f_statistic = (num_datasets - 1) * statistic / denominator if denominator > 1e-12 else math.inf
    return FriedmanResult(
        statistic=statistic,
        pvalue=_chi2_sf(statistic, df1),
        f_statistic=float(f_statistic),
        f_pvalue=0.0 if math.isinf(f_statistic) else f_sf(f_statistic, df1, df2),
        df1=df1,
        df2=df2,
    )


def _check_test(test):
    if test not in TESTS:
        raise invalid("test", f"one of {TESTS}", test)


def critical_value(num_methods: int, alpha: float = 0.05, test: str = "nemenyi") -> float:
    """`q_alpha` of Demšar's Table 5: the critical difference in units of `sqrt(k (k + 1) / (6 N))`.

    Nemenyi (all pairs): the studentized range's `1 - alpha` quantile for
    `k` means and infinite degrees of freedom, divided by `sqrt(2)`.
    Bonferroni-Dunn (`k - 1` comparisons with a control): the normal
    quantile at `1 - alpha / (2 (k - 1))`.

    Example:

    >>> round(critical_value(4), 3), round(critical_value(4, test="bonferroni-dunn"), 3)
    (2.569, 2.394)
    """
    k = integer_at_least("num_methods", num_methods, 2)
    alpha = number_in("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
    _check_test(test)
    if test == "bonferroni-dunn":
        return NormalDist().inv_cdf(1 - alpha / (2 * (k - 1)))
    low, high = 0.0, 20.0  # the range of k <= 10^6 normals is below 20 with probability 1 - 1e-80
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _range_cdf(middle, k) < 1 - alpha else (low, middle)
    return (low + high) / 2 / math.sqrt(2)


_STEP = 0.005
_GRID = np.arange(-9.0, 9.0 + _STEP / 2, _STEP)
_DENSITY = np.exp(-(_GRID**2) / 2) / math.sqrt(2 * math.pi)
_ERF = np.frompyfunc(math.erf, 1, 1)


def _normal_cdf(z):
    return 0.5 * (1 + _ERF(z / math.sqrt(2)).astype(np.float64))


_CDF = _normal_cdf(_GRID)


def _range_cdf(q, k):
    """P(range of k standard normals <= q) = k * integral phi(z) [Phi(z) - Phi(z - q)]^(k-1) dz (trapezoid rule)."""
    integrand = _DENSITY * np.clip(_CDF - _normal_cdf(_GRID - q), 0, 1) ** (k - 1)
    return float(k * _STEP * (integrand.sum() - (integrand[0] + integrand[-1]) / 2))


def critical_difference(num_methods: int, num_datasets: int, alpha: float = 0.05, test: str = "nemenyi") -> float:
    """The critical difference of average ranks (Demšar, 2006, §3.2.2): `CD = q_alpha sqrt(k (k + 1) / (6 N))`.

    Two methods whose average ranks over `num_datasets` differ by at least
    `CD` differ significantly at level `alpha`: every pair for
    `test="nemenyi"`, each method against one control for
    `test="bonferroni-dunn"`. Run them after the Friedman test rejects.

    Args:
        num_methods: `k`, the methods compared (>= 2).
        num_datasets: `N`, the data sets (>= 1).
        alpha: significance level in (0, 1). Defaults to `0.05`.
        test: `"nemenyi"` or `"bonferroni-dunn"`. Defaults to `"nemenyi"`.

    Example:

    >>> round(critical_difference(4, 14), 2)  # Demšar's worked example: CD = 1.25
    1.25
    >>> round(critical_difference(12, 11), 2)  # the paper's Table 3: 12 methods, 11 pairs
    5.02
    """
    q = critical_value(num_methods, alpha, test)
    num_datasets = integer_at_least("num_datasets", num_datasets, 1)
    return q * math.sqrt(num_methods * (num_methods + 1) / (6 * num_datasets))


def _chi2_sf(x, df):
    """P(chi-square with `df` degrees of freedom > x): the regularised upper incomplete gamma Q(df/2, x/2)."""
    a, x = df / 2, x / 2
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for the lower function P
        term = total = 1 / a
        n = a
        while abs(term) > abs(total) * 1e-16:
            n += 1
            term *= x / n
            total += term
        return max(0.0, 1 - total * math.exp(log_front))
    return math.exp(log_front) * _continued_fraction(lambda i: -i * (i - a), lambda i: x + 1 - a + 2 * i)


def f_sf(f: float, df1: float, df2: float) -> float:
    """P(F(df1, df2) > f) = I_{df2 / (df2 + df1 f)}(df2 / 2, df1 / 2), the regularised incomplete beta.

    The F distribution's survival function without scipy (the Friedman test's F form; with `df1 = 1`, a t test's
    two-sided p-value at `f = t^2`).

    Example:

    >>> round(f_sf(4.0, 1, 30), 4)  # scipy.stats.f.sf(4.0, 1, 30)
    0.0546
    """
    return _beta_regularised(df2 / (df2 + df1 * f), df2 / 2, df1 / 2)


def _beta_regularised(x, a, b):
    if x <= 0 or x >= 1:
        return float(x >= 1)
    if x > (a + 1) / (a + b + 2):  # the continued fraction converges fast below this point
        return 1 - _beta_regularised(1 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))

    def numerator(i):  # the even and odd terms of the incomplete beta's continued fraction
        m = i // 2
        if i % 2:
            return -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        return m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))

    return front / a * _continued_fraction(numerator, lambda i: 1.0, first=1.0)


def _continued_fraction(numerator, denominator, first=None, tiny=1e-300):
    """`1 / (b0 + a1 / (b1 + a2 / (b2 + ...)))` by the modified Lentz method; `b0 = first` or `denominator(0)`."""
    b0 = denominator(0) if first is None else first
    c, d = 1 / tiny, 1 / b0 if abs(b0) > tiny else 1 / tiny
    value = d
    for i in range(1, 10_000):
        a, b = numerator(i), denominator(i)
        d = b + a * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = b + a / c
        c = c if abs(c) > tiny else tiny
        value *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return value


def critical_difference_diagram(
    average_ranks: Mapping[str, float],
    num_datasets: int,
    *,
    alpha: float = 0.05,
    test: str = "nemenyi",
    control: str | None = None,
    title: str | None = None,
    path: str | None = None,
):
    """Demšar's critical-difference diagram of average ranks, on a `matplotlib.figure.Figure` (no pyplot).

    The axis runs from rank 1 (best, left) to `k`; every method hangs from
    its average rank, the better half labelled on the left. The `CD` bar
    above the axis is `critical_difference(k, num_datasets, alpha, test)`.
    Nemenyi: thick bars join each maximal group of methods whose ranks lie
    within `CD` of each other (not significantly different). Bonferroni-Dunn:
    a thick bar spans `CD` either side of the `control` (default: the best
    ranked, in bold); methods outside it differ from the control.

    Args:
        average_ranks: `{method: average rank}`, e.g. `average_ranks(scores)`
            of a mapping.
        num_datasets: the data sets the ranks average over.
        alpha: Defaults to `0.05`.
        test: `"nemenyi"` or `"bonferroni-dunn"`. Defaults to `"nemenyi"`.
        control: Bonferroni-Dunn's control method. Defaults to the best ranked.
        title: Defaults to none.
        path: a `.png` to write too (atomically). Defaults to none.

    Returns:
        The `Figure`.

    Example:

    >>> figure = critical_difference_diagram({"No LS": 3.4, "LS": 2.4, "ILS": 1.2, "ILS2": 3.0}, num_datasets=14)
    >>> type(figure).__name__, figure.axes[0].texts[0].get_text()
    ('Figure', 'CD = 1.25')
    """
    from matplotlib.figure import Figure

    if not isinstance(average_ranks, Mapping) or len(average_ranks) < 2:
        raise invalid("average_ranks", "a mapping {method: average rank} of at least 2 methods", average_ranks)
    for rank in average_ranks.values():
        number_in("average_ranks", rank, 1, len(average_ranks), expected=f"ranks in [1, {len(average_ranks)}]")
    order = sorted(average_ranks, key=average_ranks.get)
    values = [float(average_ranks[name]) for name in order]
    k = len(order)
    cd = critical_difference(k, num_datasets, alpha, test)
    if test == "bonferroni-dunn":
        control = order[0] if control is None else control
        if control not in average_ranks:
            raise invalid("control", f"one of the methods {order}", control)
        groups = [(max(1.0, average_ranks[control] - cd), min(k, average_ranks[control] + cd))]
    else:
        groups = _groups(values, cd)

    unit = 0.55  # inches per rank
    gap = 0.3  # from the axis' ends to the label lines' ends, in ranks
    margin = gap + 0.2 + (max(len(name) for name in order) + 7) * 0.09 / unit  # label room either side, in ranks
    step, group_step = 0.3, 0.12
    first_row = -0.35 - group_step * len(groups)
    left = (k + 1) // 2
    height = 0.9 - first_row + step * max(left, k - left)
    figure = Figure(figsize=((k - 1 + 2 * margin) * unit, height * 0.5 + (0.3 if title else 0)))
    axes = figure.add_axes((0, 0, 1, 0.88 if title else 1))
    axes.set_axis_off()
    axes.set_xlim(1 - margin, k + margin)
    axes.set_ylim(first_row - step * max(left, k - left), 0.9)
    axes.text(1, 0.75, f"CD = {cd:.2f}", ha="left", va="bottom", fontsize=9)
    axes.plot([1, 1 + cd], [0.6, 0.6], color="black", linewidth=1.5)
    axes.plot([1, k], [0, 0], color="black", linewidth=1)
    for tick in np.arange(1, k + 0.25, 0.5):
        axes.plot([tick, tick], [0, 0.1 if tick % 1 == 0 else 0.05], color="black", linewidth=1)
        if tick % 1 == 0:
            axes.text(tick, 0.15, f"{tick:g}", ha="center", va="bottom", fontsize=8)
    for i, (start, end) in enumerate(groups):
        y = -0.2 - group_step * i
        axes.plot([start - 0.05, end + 0.05], [y, y], color="black", linewidth=3, solid_capstyle="round")
    for i, (name, rank) in enumerate(zip(order, values, strict=True)):
        on_left = i < left
        y = first_row - step * (i if on_left else k - 1 - i)
        end = 1 - gap if on_left else k + gap
        axes.plot([rank, rank, end], [0, y, y], color="black", linewidth=0.8)
        bold = "bold" if test == "bonferroni-dunn" and name == control else "normal"
        label = f"{name} ({rank:.2f})" if on_left else f"({rank:.2f}) {name}"
        axes.text(end, y, label, ha="right" if on_left else "left", va="center", fontsize=9, fontweight=bold)
    if title:
        figure.suptitle(title, fontsize=10)
    if path is not None:
        atomic_write(path, lambda file: figure.savefig(file, format="png", dpi=120))
    return figure


def _groups(sorted_ranks, cd):
    """Maximal runs `(first rank, last rank)` of sorted ranks whose spread is below `cd` (Nemenyi cliques)."""
    groups, reach = [], -1
    for i, rank in enumerate(sorted_ranks):
        j = max(j for j in range(i, len(sorted_ranks)) if sorted_ranks[j] - rank < cd)
        if j > i and j > reach:
            groups.append((rank, sorted_ranks[j]))
            reach = j
    return groups


__all__ = [
    "FriedmanResult",
    "TESTS",
    "average_ranks",
    "critical_difference",
    "critical_difference_diagram",
    "critical_value",
    "f_sf",
    "friedman_test",
    "ranks",
]
