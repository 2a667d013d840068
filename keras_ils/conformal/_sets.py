"""The conformity scores of split conformal classification, in `keras.ops`, and `ConformalSets`, the layer of sets.

One implementation of each score serves the fit (the calibration examples'
scores at their true label) and the layer (every class's score at predict
time), both in float32, so a calibration example fed to the fitted layer gets
exactly the score its quantile was computed from.

Classes are ranked by probability, and tied probabilities share a rank: a
class's *mass above* is the total probability of the classes strictly more
probable, its *mass through* adds its whole tie group, and its *rank* is the
number of classes at least as probable. So the scores, and the sets, never
depend on the order of the classes: tied classes enter a set together.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import keras
import numpy as np
from keras import ops

from keras_ils import _outputs
from keras_ils._checks import integer_at_least, invalid, number_in
from keras_ils.calibration._float32 import float32_by_default, known_classes, to_compute_dtype

__all__ = [
    "METHODS",
    "ConformalSets",
    "Method",
    "Ranked",
    "SetOptions",
    "check_inputs",
    "check_options",
    "members",
    "ranked",
    "scores",
]

Method = Literal["lac", "aps", "raps", "top_k"]

# method -> the options it takes beyond `alpha` and `class_conditional` (the one table the fits check)
_OPTIONS = {"lac": (), "aps": ("randomized", "seed"), "raps": ("randomized", "seed", "k_reg", "lam"), "top_k": ()}
METHODS = tuple(_OPTIONS)
DEFAULT_K_REG = 1
DEFAULT_LAM = 0.01


class Ranked(NamedTuple):
    """Each class's place in its row's ranking, `[..., K]` each, in class order (ties share a place)."""

    probabilities: object
    mass_above: object  # sum of the probabilities strictly greater than the class's
    mass_through: object  # mass_above plus the class's whole tie group
    count_above: object  # classes strictly more probable (float)
    rank: object  # classes at least as probable, the class itself included (float, 1-based)


def _flagged_first(flags, positions, num_classes):
    """The positions where `flags` holds, in increasing order, ahead of the others."""
    return ops.argsort(ops.where(flags, positions, positions + num_classes), axis=-1)


def ranked(probabilities) -> Ranked:
    """`Ranked` of `probabilities [..., K]`: sorted once, tie groups found by their first and last places.

    Example:

    >>> r = ranked(np.array([[0.2, 0.5, 0.1, 0.2]], "float32"))
    >>> keras.ops.convert_to_numpy(r.mass_above).round(2).tolist(), keras.ops.convert_to_numpy(r.rank).tolist()
    ([[0.5, 0.0, 0.9, 0.5]], [[3.0, 1.0, 4.0, 3.0]])
    """
    probabilities = ops.convert_to_tensor(probabilities)
    num_classes = probabilities.shape[-1]
    order = ops.argsort(-probabilities, axis=-1)
    ordered = ops.take_along_axis(probabilities, order, axis=-1)
    positions = ops.zeros_like(order) + ops.arange(num_classes, dtype=order.dtype)
    changes = ops.not_equal(ordered[..., 1:], ordered[..., :-1])
    edge = ops.ones_like(ordered[..., :1], dtype="bool")
    starts, ends = ops.concatenate([edge, changes], axis=-1), ops.concatenate([changes, edge], axis=-1)
    group = ops.cumsum(ops.cast(starts, order.dtype), axis=-1) - 1
    first = ops.take_along_axis(_flagged_first(starts, positions, num_classes), group, axis=-1)
    last = ops.take_along_axis(_flagged_first(ends, positions, num_classes), group, axis=-1)
    through = ops.cumsum(ordered, axis=-1)
    before = ops.concatenate([ops.zeros_like(through[..., :1]), through[..., :-1]], axis=-1)
    back = ops.argsort(order, axis=-1)
    in_class_order = [
        ops.take_along_axis(values, back, axis=-1)
        for values in (
            ops.take_along_axis(before, first, axis=-1),
            ops.take_along_axis(through, last, axis=-1),
            ops.cast(first, probabilities.dtype),
            ops.cast(last + 1, probabilities.dtype),
        )
    ]
    return Ranked(probabilities, *in_class_order)


def _cumulative(method, mass, rank, k_reg, lam):
    """APS's score (the mass) and RAPS's (the mass plus `lam (rank - k_reg)^+`), of a mass and a rank."""
    if method == "aps":
        return mass
    return mass + lam * ops.relu(rank - k_reg)


def scores(method, r: Ranked, uniform=None, k_reg=DEFAULT_K_REG, lam=DEFAULT_LAM):
    """Every class's conformity score (lower conforms better), `[..., K]`: what a calibration label is scored by.

    `uniform [..., 1]` (in `[0, 1)`) randomises APS and RAPS: the tie group's
    mass enters in the fraction `uniform`; `None` counts it whole.

    Formula:

    ```
    lac:   1 - p_j
    aps:   mass_above_j + u * (mass_through_j - mass_above_j)         (u = 1 unless randomised)
    raps:  aps_j + lam * max(rank_j - k_reg, 0)
    top_k: rank_j
    ```
    """
    if method == "lac":
        return 1.0 - r.probabilities
    if method == "top_k":
        return r.rank
    mass = r.mass_through if uniform is None else r.mass_above + uniform * (r.mass_through - r.mass_above)
    return _cumulative(method, mass, r.rank, k_reg, lam)


def members(method, r: Ranked, quantiles, uniform=None, k_reg=DEFAULT_K_REG, lam=DEFAULT_LAM):
    """The sets `[..., K]` (boolean) of the scores below `quantiles [K]`.

    A class is in the set when its score is at most its quantile, except for
    plain (not randomised) APS and RAPS, which follow Angelopoulos & Bates
    (2021) and MAPIE's `include_last_label=True`: classes enter in order of
    probability until the cumulative score reaches the quantile, the class
    that reaches it included, so a class is in the set when the score of the
    classes strictly more probable (`mass_above`, `count_above`) is below the
    quantile. These sets hold the scored sets and are never empty.
    """
    if method in ("aps", "raps") and uniform is None:
        return _cumulative(method, r.mass_above, r.count_above, k_reg, lam) < quantiles
    return scores(method, r, uniform, k_reg, lam) <= quantiles


def check_inputs(inputs, from_logits: bool) -> None:
    """Refuses host `inputs` of `ConformalSets` that are not finite, or not the kind (`from_logits`) it was made for.

    Example:

    >>> check_inputs(np.array([[2.0, -1.0, 0.5]]), from_logits=False)
    Traceback (most recent call last):
    ...
    ValueError: Invalid value for argument `inputs`: these sets were made for probabilities (from_logits=False), ...
    """
    values = np.asarray(inputs, dtype=np.float64)
    nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
    if nan or inf:
        raise ValueError(
            f"Invalid value for argument `inputs`. Expected finite {'logits' if from_logits else 'probabilities'}. "
            f"Received: {nan} NaN and {inf} inf among its {values.size} values"
        )
    if values.size and from_logits == _outputs.is_distribution(values):
        made, given = ("logits", "probabilities") if from_logits else ("probabilities", "logits")
        sums = values.sum(axis=-1)
        raise ValueError(
            f"Invalid value for argument `inputs`: these sets were made for {made} (from_logits={from_logits}), but "
            f"the values look like {given} (in [{values.min():.4g}, {values.max():.4g}], rows summing to "
            f"[{sums.min():.4g}, {sums.max():.4g}]); their sets would not hold the stated coverage. Give them "
            f"{made}, as the quantiles were fitted on, or fit the sets on {given} (from_logits={not from_logits})."
        )


class SetOptions(NamedTuple):
    """A method's options, checked: what travels from `fit_conformal` or `conformalize` to the layer."""

    randomized: bool = False
    k_reg: int = DEFAULT_K_REG
    lam: float = DEFAULT_LAM
    seed: int | None = None


def check_options(method, options: dict) -> SetOptions:
    """`options` checked for `method` (the others refused, naming the methods that take them), with defaults."""
    if method not in _OPTIONS:
        raise invalid("method", f"one of {METHODS}", method)
    for name in options:
        if name in _OPTIONS[method]:
            continue
        takers = [m for m, allowed in _OPTIONS.items() if name in allowed]
        if not takers:
            raise TypeError(f"Unknown option `{name}` of method={method!r}, whose options are {_OPTIONS[method]}.")
        raise ValueError(
            f"Argument `{name}` is an option of method={' or '.join(map(repr, takers))}, not of method={method!r}. "
            f"Received: {name}={options[name]!r}"
        )
    checked = SetOptions(**options)
    if not isinstance(checked.randomized, bool):
        raise invalid("randomized", "True or False", checked.randomized)
    if checked.seed is not None:
        integer_at_least("seed", checked.seed, 0)
    integer_at_least("k_reg", checked.k_reg, 0)
    return checked._replace(lam=number_in("lam", checked.lam, 0.0, expected="a float >= 0"))


@keras.saving.register_keras_serializable(package="keras_ils")
class ConformalSets(keras.layers.Layer):
    """Split conformal prediction sets: a classifier's outputs in, the `[..., K]` 0/1 mask of each set out.

    Holds one quantile per class (`quantiles`, all equal unless fitted
    class-conditionally) and puts class `j` in the set when its conformity
    score is at most `quantiles[j]` (see `scores` and `members` for each
    method's rule). Fitted by `fit_conformal` or `conformalize`; a layer built
    directly holds quantiles of 1 until `set_weights`. Computes in float32
    under any dtype policy and outputs float32 0/1.

    Randomised APS and RAPS draw one uniform number per example at every
    call, from a `keras.random.SeedGenerator(seed)` that the layer owns: the
    sets of a seeded layer are reproducible from its construction (or
    loading), and two calls on the same inputs draw different numbers, as a
    randomised set should.

    Args:
        method: `"lac"`, `"aps"`, `"raps"` or `"top_k"`. Defaults to `"aps"`.
        randomized: randomised APS or RAPS (Romano et al. 2020): exact
            coverage, sets that may be empty. Defaults to `False`.
        k_reg: RAPS' rank from which the penalty counts, `>= 0`.
            Defaults to `1`.
        lam: RAPS' penalty per rank beyond `k_reg`, `>= 0`. Defaults to `0.01`.
        from_logits: whether the inputs are logits (else probabilities).
            Defaults to `True`.
        seed: the seed of the randomised sets' generator, or `None`.
            Defaults to `None`.
        **kwargs: base layer arguments; `dtype` defaults to `"float32"`.

    Call arguments:
        inputs: `[..., K]` logits (or probabilities with `from_logits=False`).
            Given as numpy arrays (or lists), they are checked first
            (`check_inputs`): values that are not finite, or of the other
            kind (logits to sets fitted on probabilities, or the reverse,
            whose sets would miss the stated coverage), are a `ValueError`.
            Tensors are not checked (no check runs inside a compiled step).

    Example:

    >>> layer = ConformalSets(method="lac", from_logits=False)
    >>> layer.build((None, 3))
    >>> layer.set_weights([np.full(3, 0.7)])    # classes of probability >= 0.3
    >>> keras.ops.convert_to_numpy(layer(np.array([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])))
    array([[1., 1., 0.],
           [0., 0., 1.]], dtype=float32)
    """

    def __init__(
        self,
        method: Method = "aps",
        randomized: bool = False,
        k_reg: int = DEFAULT_K_REG,
        lam: float = DEFAULT_LAM,
        from_logits: bool = True,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**float32_by_default(kwargs))
        given = {"randomized": randomized, "seed": seed, "k_reg": k_reg, "lam": lam}
        allowed = _OPTIONS.get(method, ())
        defaults = SetOptions._field_defaults
        checked = check_options(method, {n: v for n, v in given.items() if n in allowed or v != defaults[n]})
        self.randomized, self.seed, self.k_reg, self.lam = checked.randomized, checked.seed, k_reg, lam
        if method == "raps":
            self.k_reg, self.lam = checked.k_reg, checked.lam
        self.method, self.from_logits = method, bool(from_logits)
        self.seed_generator = keras.random.SeedGenerator(seed) if self.randomized else None

    def build(self, input_shape):
        num_classes = known_classes(self, input_shape)
        self.input_spec = keras.layers.InputSpec(axes={-1: num_classes})
        self.quantiles = self.add_weight(name="quantiles", shape=(num_classes,), initializer="ones", trainable=False)

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, (np.ndarray, list, tuple)):  # host values: checked here, never in a compiled step
            check_inputs(inputs, self.from_logits)
        return super().__call__(inputs, *args, **kwargs)

    def ranked(self, inputs) -> Ranked:
        """`Ranked` of the probabilities of `inputs`, computed as `call` computes them (float32)."""
        inputs = to_compute_dtype(self, inputs)
        return ranked(ops.softmax(inputs, axis=-1) if self.from_logits else ops.clip(inputs, 0.0, 1.0))

    def class_scores(self, inputs, uniform=None):
        """Every class's conformity score of `inputs`, `[..., K]`, with `uniform [..., 1]` for randomised sets."""
        return scores(self.method, self.ranked(inputs), uniform, self.k_reg, self.lam)

    def call(self, inputs):
        r = self.ranked(inputs)
        uniform = None
        if self.randomized:
            shape = tuple(ops.shape(r.probabilities)[:-1]) + (1,)
            uniform = keras.random.uniform(shape, dtype=r.probabilities.dtype, seed=self.seed_generator)
        quantiles = ops.cast(self.quantiles, r.probabilities.dtype)
        inside = members(self.method, r, quantiles, uniform, self.k_reg, self.lam)
        return ops.cast(inside, r.probabilities.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = {"method": self.method, "randomized": self.randomized, "k_reg": self.k_reg, "lam": self.lam}
        return {**super().get_config(), **config, "from_logits": self.from_logits, "seed": self.seed}
