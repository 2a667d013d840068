"""KerasTuner searches over the hyperparameters of ILS (P1, P2, T), LS (epsilon) and the calibration losses.

The hyperparameters live in the loss, so a trial changes only `ILSLoss(...)`:
the teacher's cached logits travel inside the training targets
(`keras_ils.data.with_teacher_targets`) and every trial reads the same ones;
no trial runs the teacher. `ILSHyperModel` is an ordinary
`keras_tuner.HyperModel`, so `GridSearch` (the paper's exhaustive protocol),
`RandomSearch`, `BayesianOptimization` and `Hyperband` use it unchanged,
KerasTuner's directory makes a search resumable after a crash, and its
distributed mode (one chief oracle, `KERASTUNER_*` environment variables)
spreads the trials over processes or machines. Those four tuners are
`keras_ils.tuning.tuners`' subclasses of KerasTuner's, same arguments, whose
search survives a kill at any moment; this package re-exports them
(`keras_ils.tuning.GridSearch`, ...).

The objective is the student's validation cross-entropy against HARD labels
at its best epoch (`OBJECTIVE`, the `val_nll` that
`keras_ils.metrics.NegativeLogLikelihood` logs): `val_loss` would be the
smoothed loss for LS.

The searched methods and their grids (the paper's, §5 and appendix A; the calibration losses' authors') are
`keras_ils.methods`' registry: any tunable entry, yours included, can be searched. A method whose loss needs a
callback (OLS) gets it in every trial.
"""

from keras_ils.methods import make_search_space
from keras_ils.tuning.hypermodel import ALGORITHMS, OBJECTIVE, ILSHyperModel, best_student, tuner_for
from keras_ils.tuning.tuners import (
    BayesianOptimization,
    GridSearch,
    Hyperband,
    RandomSearch,
    ResumableGridSearchOracle,
)

__all__ = [
    "ALGORITHMS",
    "OBJECTIVE",
    "BayesianOptimization",
    "GridSearch",
    "Hyperband",
    "ILSHyperModel",
    "RandomSearch",
    "ResumableGridSearchOracle",
    "best_student",
    "make_search_space",
    "tuner_for",
]
