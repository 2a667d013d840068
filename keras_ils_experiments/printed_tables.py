"""The paper's printed results, as data: Table 3 (`tab:results`) and the distillation table (`tab:distil`).

Transcribed from the paper's LaTeX source (Maher & Kull 2021, §6); the values
only, not the printed rank subscripts, which `keras_ils.comparison.reporting.ranks`
recomputes (several printed subscripts and averages disagree with the printed
values, e.g. Table 3's cross-entropy average rank of ILS + TempS is printed
1.36 and recomputes to 1.41). The printed average ranks are kept in comments.

- `TABLE3[metric]`: rows in `TABLE3_PAIRS` order (the paper's order), columns
  in `TABLE3_COLUMNS` order. Metrics: `"nll"` (cross-entropy), `"accuracy"`
  (a fraction here; printed in %), `"ece"` and `"cwece"`. The paper's cwECE
  is the authors' code's variant (the package's `class_conditional_ece`
  score, see `keras_ils.evaluation`), not Eq. 2; `PAPER_CWECE_SCORE` names it.
- `DISTILLATION[metric]`: the student AlexNet's test cross-entropy and
  accuracy after distillation from a teacher trained with No LS, LS or ILS
  (`DISTILLATION_COLUMNS`), rows in `DISTILLATION_PAIRS` order.

Pairs are `(dataset, model)` in the names `keras-ils` takes (`tfds:NAME`,
`keras_ils_experiments.zoo.models.build` names); "ResNet32W" is `wrn-34-10`
(the authors' code, see docs/cli/networks.md).
"""

TABLE3_COLUMNS = (
    "No LS",
    "No LS + TempS",
    "Dis",
    "cLS",
    "BS_Soft",
    "Beta",
    "LS",
    "LS + TempS",
    "ILS1",
    "ILS2",
    "ILS",
    "ILS + TempS",
)
TABLE3_PAIRS = (
    ("tfds:cifar10", "lenet"),
    ("tfds:cifar10", "resnet110"),
    ("tfds:cifar10", "resnet110sd"),
    ("tfds:cifar10", "densenet40"),
    ("tfds:cifar10", "wrn-34-10"),
    ("tfds:cifar100", "lenet"),
    ("tfds:cifar100", "resnet110"),
    ("tfds:cifar100", "resnet110sd"),
    ("tfds:cifar100", "densenet40"),
    ("tfds:cifar100", "wrn-34-10"),
    ("tfds:svhn_cropped", "resnet152sd"),
)
PAPER_CWECE_SCORE = "class_conditional_ece"  # the score of keras_ils.evaluation that the paper's "cwECE" printed

# fmt: off
_TABLE3_PRINTED = {
    "nll": (
        (0.858, 0.858, 0.854, 0.811, 0.833, 0.787, 0.808, 0.800, 0.723, 0.784, 0.720, 0.706),  # LeNet, CIFAR-10
        (0.312, 0.265, 0.311, 0.284, 0.309, 0.362, 0.308, 0.293, 0.293, 0.272, 0.270, 0.264),  # ResNet-110, CIFAR-10
        (0.310, 0.274, 0.314, 0.289, 0.318, 0.420, 0.303, 0.293, 0.289, 0.269, 0.266, 0.226),  # ResNet-110-SD, CIFAR-10
        (0.331, 0.294, 0.301, 0.323, 0.311, 0.334, 0.306, 0.299, 0.311, 0.301, 0.307, 0.306),  # DenseNet-40, CIFAR-10
        (0.206, 0.154, 0.168, 0.170, 0.163, 0.240, 0.172, 0.159, 0.164, 0.162, 0.153, 0.149),  # ResNet32W, CIFAR-10
        (2.361, 2.350, 2.704, 2.221, 2.540, 2.452, 2.292, 2.288, 2.183, 2.274, 2.173, 2.132),  # LeNet, CIFAR-100
        (1.382, 1.183, 1.163, 1.218, 1.292, 1.298, 1.283, 1.248, 1.222, 1.186, 1.103, 1.055),  # ResNet-110, CIFAR-100
        (1.070, 0.992, 1.065, 0.954, 1.059, 1.165, 0.993, 0.987, 0.946, 0.937, 0.909, 0.873),  # ResNet-110SD, CIFAR-100
        (1.295, 1.197, 1.205, 1.273, 1.286, 1.285, 1.273, 1.208, 1.212, 1.202, 1.147, 1.126),  # DenseNet-40, CIFAR-100
        (1.047, 0.954, 0.890, 0.935, 0.944, 0.966, 0.947, 0.878, 0.902, 0.925, 0.879, 0.795),  # ResNet32W, CIFAR-100
        (0.104, 0.100, 0.122, 0.089, 0.104, 0.230, 0.108, 0.109, 0.103, 0.099, 0.089, 0.087),  # ResNet-152-SD, SVHN
    ),
    # nll: 10.73, 5.27, 7.82, 6.55, 9.09, 10.82, 8.09, 5.73, 5.64, 4.27, 2.64, 1.36
    "accuracy": (
        (70.00, 70.00, 70.00, 73.67, 69.92, 75.50, 73.39, 73.01, 73.99, 73.93, 76.83, 76.83),  # LeNet, CIFAR-10
        (91.16, 91.16, 91.57, 91.82, 91.54, 91.94, 91.08, 91.13, 91.98, 92.05, 92.20, 92.20),  # ResNet-110, CIFAR-10
        (90.79, 90.79, 90.61, 91.24, 90.14, 88.36, 90.61, 91.02, 91.61, 91.45, 91.61, 91.61),  # ResNet-110-SD, CIFAR-10
        (90.16, 90.16, 90.59, 90.32, 90.66, 91.81, 90.59, 91.27, 90.91, 90.57, 91.41, 91.41),  # DenseNet-40, CIFAR-10
        (95.13, 95.13, 95.63, 95.19, 95.57, 95.17, 95.63, 95.55, 95.69, 95.67, 96.16, 96.16),  # ResNet32W, CIFAR-10
        (39.01, 39.01, 41.71, 41.72, 41.76, 38.45, 41.03, 41.35, 41.21, 40.96, 41.80, 41.80),  # LeNet, CIFAR-100
        (67.33, 67.33, 70.28, 69.02, 70.36, 68.03, 67.68, 67.92, 68.81, 69.52, 70.42, 70.42),  # ResNet-110, CIFAR-100
        (71.23, 71.23, 69.63, 73.82, 69.53, 68.92, 73.47, 73.48, 74.03, 73.75, 74.35, 74.35),  # ResNet-110SD, CIFAR-100
        (66.51, 66.51, 66.78, 66.51, 66.74, 66.25, 65.79, 65.41, 65.99, 66.89, 67.23, 67.23),  # DenseNet-40, CIFAR-100
        (78.61, 78.61, 77.31, 77.79, 77.35, 78.55, 77.50, 78.35, 78.19, 77.68, 78.53, 78.53),  # ResNet32W, CIFAR-100
        (97.60, 97.60, 97.74, 97.39, 97.71, 97.38, 97.32, 97.45, 97.67, 97.66, 97.99, 97.99),  # ResNet-152-SD, SVHN
    ),
    # accuracy: 8.27, 8.27, 6.91, 6.73, 7.09, 7.82, 8.91, 7.73, 5.27, 5.64, 1.36, 1.36
    "ece": (
        (0.014, 0.012, 0.015, 0.020, 0.035, 0.068, 0.045, 0.017, 0.063, 0.052, 0.059, 0.021),  # LeNet, CIFAR-10
        (0.041, 0.015, 0.016, 0.031, 0.031, 0.071, 0.033, 0.017, 0.039, 0.030, 0.035, 0.026),  # ResNet-110, CIFAR-10
        (0.039, 0.014, 0.033, 0.023, 0.032, 0.042, 0.024, 0.027, 0.029, 0.027, 0.032, 0.028),  # ResNet-110-SD, CIFAR-10
        (0.043, 0.020, 0.021, 0.026, 0.022, 0.050, 0.024, 0.020, 0.018, 0.025, 0.016, 0.016),  # DenseNet-40, CIFAR-10
        (0.027, 0.016, 0.024, 0.022, 0.023, 0.057, 0.016, 0.013, 0.019, 0.014, 0.022, 0.016),  # ResNet32W, CIFAR-10
        (0.032, 0.015, 0.025, 0.035, 0.039, 0.018, 0.035, 0.015, 0.042, 0.036, 0.074, 0.015),  # LeNet, CIFAR-100
        (0.133, 0.030, 0.056, 0.037, 0.064, 0.022, 0.036, 0.047, 0.043, 0.019, 0.057, 0.046),  # ResNet-110, CIFAR-100
        (0.087, 0.015, 0.048, 0.016, 0.053, 0.024, 0.016, 0.035, 0.020, 0.023, 0.054, 0.024),  # ResNet-110SD, CIFAR-100
        (0.105, 0.031, 0.045, 0.022, 0.050, 0.040, 0.024, 0.027, 0.028, 0.034, 0.068, 0.035),  # DenseNet-40, CIFAR-100
        (0.119, 0.097, 0.066, 0.042, 0.076, 0.022, 0.048, 0.064, 0.058, 0.045, 0.049, 0.041),  # ResNet32W, CIFAR-100
        (0.009, 0.007, 0.031, 0.006, 0.033, 0.061, 0.005, 0.010, 0.006, 0.005, 0.015, 0.008),  # ResNet-152-SD, SVHN
    ),
    # ece: 9.73, 3.64, 7.45, 4.82, 9.18, 8.55, 4.91, 5.00, 6.73, 5.18, 8.64, 4.09
    # cwece: 8.82, 4.91, 6.00, 5.73, 6.82, 4.18, 8.18, 4.91, 7.82, 6.82, 6.00, 3.09 (printed below the table)
    "cwece": (
        (0.049, 0.050, 0.052, 0.060, 0.056, 0.073, 0.072, 0.047, 0.072, 0.073, 0.088, 0.051),  # LeNet, CIFAR-10
        (0.153, 0.119, 0.023, 0.110, 0.018, 0.085, 0.148, 0.031, 0.153, 0.144, 0.084, 0.037),  # ResNet-110, CIFAR-10
        (0.042, 0.084, 0.038, 0.032, 0.041, 0.050, 0.034, 0.033, 0.038, 0.033, 0.031, 0.029),  # ResNet-110-SD, CIFAR-10
        (0.047, 0.027, 0.033, 0.041, 0.029, 0.054, 0.033, 0.030, 0.027, 0.033, 0.030, 0.027),  # DenseNet-40, CIFAR-10
        (0.030, 0.019, 0.027, 0.022, 0.020, 0.063, 0.023, 0.020, 0.019, 0.021, 0.015, 0.015),  # ResNet32W, CIFAR-10
        (0.130, 0.127, 0.132, 0.132, 0.131, 0.128, 0.135, 0.132, 0.137, 0.125, 0.140, 0.142),  # LeNet, CIFAR-100
        (0.145, 0.105, 0.104, 0.109, 0.114, 0.105, 0.130, 0.109, 0.129, 0.132, 0.141, 0.109),  # ResNet-110, CIFAR-100
        (0.107, 0.094, 0.104, 0.099, 0.104, 0.111, 0.117, 0.102, 0.104, 0.112, 0.112, 0.093),  # ResNet-110SD, CIFAR-100
        (0.125, 0.113, 0.118, 0.114, 0.128, 0.137, 0.117, 0.124, 0.129, 0.127, 0.116, 0.112),  # DenseNet-40, CIFAR-100
        (0.126, 0.116, 0.103, 0.109, 0.111, 0.108, 0.110, 0.094, 0.111, 0.108, 0.104, 0.093),  # ResNet32W, CIFAR-100
        (0.012, 0.011, 0.032, 0.010, 0.039, 0.138, 0.011, 0.012, 0.016, 0.009, 0.008, 0.010),  # ResNet-152-SD, SVHN
    ),
}
# fmt: on
TABLE3 = {
    metric: tuple(tuple(round(v / 100, 4) if metric == "accuracy" else v for v in row) for row in rows)
    for metric, rows in _TABLE3_PRINTED.items()
}

DISTILLATION_COLUMNS = ("No LS", "LS", "ILS")  # how the teacher was trained
DISTILLATION_PAIRS = (
    ("tfds:cifar10", "resnet18"),
    ("tfds:cifar10", "inceptionv4"),
    ("tfds:cifar100", "resnet50"),
    ("tfds:fashion_mnist", "densenet40"),
)
DISTILLATION = {
    "nll": (
        (0.972, 0.951, 0.937),  # ResNet18, CIFAR-10
        (0.999, 0.964, 0.912),  # InceptionV4, CIFAR-10
        (1.486, 1.483, 1.477),  # ResNet50, CIFAR-100
        (0.725, 0.722, 0.716),  # DenseNet40, Fashion-MNIST
    ),
    "accuracy": (
        (0.8511, 0.8476, 0.8559),
        (0.8581, 0.8461, 0.8581),
        (0.6058, 0.6042, 0.6059),
        (0.9350, 0.9350, 0.9353),
    ),
}


__all__ = [
    "DISTILLATION",
    "DISTILLATION_COLUMNS",
    "DISTILLATION_PAIRS",
    "PAPER_CWECE_SCORE",
    "TABLE3",
    "TABLE3_COLUMNS",
    "TABLE3_PAIRS",
]
