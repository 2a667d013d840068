"""Which test examples a run scored: a fingerprint stored beside its per-example NLL, and whether seeds share them.

A `.npz` or `tfds:` data set keeps one test split, so every seed scores the
same examples in the same order; arrays, tables and the synthetic task draw a
new test split per seed. The verdict counts every example once either way,
but its interval differs (`difference.row_difference`'s `shared`), so it must
know which case it has, from the data rather than from the data's name.

A run standardises its features with its own training split's statistics,
so one example's features differ between seeds by an affine map per feature.
The fingerprint undoes that: each feature z-scored over the test set itself
(a feature constant over it becomes 0), projected on 4 fixed random
directions, beside the label. Seeds share their test examples when their
fingerprints agree to `1e-5` (float32 rounding moves them by about `1e-7`;
another example moves them by about 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

__all__ = ["FINGERPRINT_KEY", "fingerprint", "shared_examples"]

FINGERPRINT_KEY = "test:fingerprint"  # its key in `test_nll.npz`, beside the rows' names
_DIRECTIONS = 4
_TOLERANCE = 1e-5


def fingerprint(batches: Callable[[], Iterable]) -> np.ndarray:
    """`[n, 5]` float64: each test example's label, then its z-scored features projected on 4 fixed directions.

    The test set is read twice, a batch at a time (the features' mean and
    spread, then the projection), so a test set larger than memory can be
    fingerprinted.

    Args:
        batches: a function returning an iterable of `(features [b, ...],
            labels [b])` batches of the test set, in its order, the same
            each call (e.g. `lambda: dataset.batch(4096).as_numpy_iterator()`).

    Example:

    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(50, 3)), rng.integers(0, 2, 50)
    >>> rescaled = ((x - 1.5) / 4.0).astype(np.float32)  # another seed's standardisation, in two batches
    >>> one = fingerprint(lambda: [(x, y)])
    >>> other = fingerprint(lambda: [(rescaled[:20], y[:20]), (rescaled[20:], y[20:])])
    >>> one.shape, float(np.abs(one - other).max()) < 1e-6
    ((50, 5), True)
    """
    count, mean, squares = 0, 0.0, 0.0  # Chan et al.'s pairwise update of the mean and the sum of squares
    for features, _ in batches():
        x = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
        n, batch_mean = len(x), x.mean(axis=0)
        delta, total = batch_mean - mean, count + n
        squares = squares + ((x - batch_mean) ** 2).sum(axis=0) + delta**2 * count * n / total
        mean, count = mean + delta * n / total, total
    spread = np.sqrt(squares / count)
    directions = np.random.default_rng(0).standard_normal((len(spread), _DIRECTIONS)) / np.sqrt(len(spread))
    directions = np.divide(directions, spread[:, None], out=np.zeros_like(directions), where=spread[:, None] > 0)
    rows = []
    for features, labels in batches():
        x = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
        rows.append(np.column_stack([np.asarray(labels, dtype=np.float64), (x - mean) @ directions]))
    return np.concatenate(rows)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= _TOLERANCE))


def shared_examples(fingerprints: Sequence, seeds: Sequence | None = None) -> bool | None:
    """Whether every seed scored the same test examples in the same order (`True`), each its own (`False`), or
    unknown (`None`: a run stored no fingerprint).

    Args:
        fingerprints: each seed's `fingerprint` (or `None`).
        seeds: the seeds' names in the error message. Defaults to their positions.

    Raises:
        ValueError: some seeds share a test split and others do not: a
            verdict pools runs of one kind.

    Example:

    >>> rng = np.random.default_rng(0)
    >>> x, labels = rng.normal(size=(40, 2)), np.arange(20) % 2
    >>> one, other = fingerprint(lambda: [(x[:20], labels)]), fingerprint(lambda: [(x[20:], labels)])
    >>> shared_examples([one, one.copy()]), shared_examples([one, other]), shared_examples([one, None])
    (True, False, None)
    """
    if any(f is None for f in fingerprints):
        return None
    seeds = list(range(len(fingerprints))) if seeds is None else list(seeds)
    if all(_same(fingerprints[0], f) for f in fingerprints[1:]):
        return True
    for i, first in enumerate(fingerprints):
        for j in range(i + 1, len(fingerprints)):
            if _same(first, fingerprints[j]):
                others = [seeds[k] for k in range(len(seeds)) if not _same(first, fingerprints[k])]
                raise ValueError(
                    "Invalid value for argument `directories`. Expected runs that all scored one test split (a "
                    ".npz, tfds:) or runs that each scored their own (arrays, a table, the synthetic task). Received: "
                    f"seeds {seeds[i]} and {seeds[j]} scored the same test examples, seeds {others} others"
                )
    return False
