"""The paper's synthetic experiments at full scale: appendix table, dense/sparse LS rows, Fig. 4 curves, win rates.

Protocol (paper §3, §4.1 and appendix A), per replicate `r` (seed `seed + r`;
train/validation/test seeds as `keras_ils.comparison.data.datasets.load_synthetic`: `s`,
`s + 10000`, `s + 20000`; 50/50/5000 points per class):

1. Every model is `keras_ils_experiments.zoo.models.mlp` (5 x 64 ReLU) trained by the MLP
   recipe (Adam 1e-2, batch 32, at most 500 epochs, early stopping with
   patience 10 on the hard-label validation cross-entropy, best epoch kept),
   all of them at once by `keras_ils.comparison.engine.vectorised.train_mlps`. By default the
   models of one replicate share their initial weights and batch order
   (common random numbers): they differ only in their targets
   (`shared_seeds=False`: one seed per model).
2. No LS (one-hot), LS over the appendix grid of `epsilon`, and LS-0.2.
3. The No LS model is the teacher: `T*` fitted on validation, its calibrated
   logits on the training set give every ILS target through
   `keras_ils.targets.ils_targets` (the package's one implementation), once.
4. ILS1 (`P1 x P2`), ILS2 (`epsilon x T`) and ILS (`P1 x P2 x T`) over the
   appendix grids (`keras_ils.methods.get(...).grid("synthetic")`). The grid's `T` is
   the package's `temperature` on the calibrated teacher (see
   `keras_ils.targets`: the paper divides raw logits, so our `T = 1` is its
   `T = T*`).
5. Every model also gets its own temperature (temperature scaling's fit of
   `fit_calibrator("temperature")`, vectorised over models, on validation).
   Rows without TempS select by the raw validation cross-entropy, rows with
   TempS by the cross-entropy after scaling, both against hard labels; so the chosen hyperparameters may differ.
6. Table 1's extra rows: LS with `epsilon` selected on the dense-only or the
   sparse-only part of the validation set.
7. Table 2 (self-distillation): a student of the same MLP on the training-set
   probabilities (T = 1) of the Bayes-optimal model and of the chosen No LS,
   LS and ILS models; Fig. 2's histograms of predicted probabilities.

`run_replicates(ProtocolOptions(preset="authors"))` (`PRESETS`) swaps the package's
settings for the habits of the authors' public code, each also an option of
its own (`init`, `shared_seeds`, `temperature_estimator`, `teacher_grid`,
`batch_size`, `weight_decay`, `smoothing_mass`, `validation_loss`).

Test metrics are the package's (`keras_ils.evaluation.scores`, through `scoring.scores`): `cwece` is
Eq. 2 of the paper (Kull et al.'s classwise-ECE); `class_conditional_ece` is
the authors' code's quantity that the paper's cwECE column actually prints
(see `keras_ils.metrics.ClassConditionalECE`).

| module           | what it holds                                                                   |
|------------------|---------------------------------------------------------------------------------|
| `options`        | `ProtocolOptions`, the presets and their checks                                 |
| `run`            | the grids and `run_replicates`                                                  |
| `stages`         | every replicate's datasets, the students' targets, a training stage, the teachers |
| `extras`         | Table 2's teachers and students, Fig. 2's counts                                |
| `ablation`       | several runs side by side against the paper's No LS and LS rows                 |
| `printed_values` | the paper's numbers as data: `ROWS`, `PAPER`, `CLAIMS`                          |
| `scoring`        | one replicate: each row's model chosen on validation, test scores, Fig. 4 sums  |
| `statistics`     | `summarise`: means per row, win rates with `sign_test`, `best_smoothing_curves` |
| `report`         | `markdown` (appendix table, Tables 1 and 2) and `write_outputs`                 |
| `figures`        | Fig. 4 and Fig. 2 as PNGs                                                       |
"""

from keras_ils_experiments.synthetic_protocol.options import PRESETS, ProtocolOptions, resolve_options
from keras_ils_experiments.synthetic_protocol.printed_values import CLAIMS, PAPER, PAPER_DISTILLATION, ROWS, TABLE1_ROWS
from keras_ils_experiments.synthetic_protocol.report import OUTPUT_FILES, markdown, write_outputs
from keras_ils_experiments.synthetic_protocol.run import grids, model_configs, run_replicates
from keras_ils_experiments.synthetic_protocol.scoring import METRICS
from keras_ils_experiments.synthetic_protocol.statistics import best_smoothing_curves, sign_test, summarise

__all__ = [
    "OUTPUT_FILES",
    "CLAIMS",
    "METRICS",
    "PAPER",
    "PAPER_DISTILLATION",
    "PRESETS",
    "ProtocolOptions",
    "ROWS",
    "TABLE1_ROWS",
    "best_smoothing_curves",
    "grids",
    "markdown",
    "model_configs",
    "resolve_options",
    "run_replicates",
    "sign_test",
    "summarise",
    "write_outputs",
]
