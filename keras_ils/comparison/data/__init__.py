"""The paper's data: datasets by name for the command and the synthetic task.

| module        | what it holds                                                                    |
|---------------|----------------------------------------------------------------------------------|
| `datasets`    | `load(spec)`: `"synthetic"`, `"tfds:NAME"`, `.npz`, `.csv`; `load_synthetic`     |
| `npz`         | `load_npz`: a user's `.npz`, read and checked array by array                     |
| `tabular`     | `table_splits`: a CSV file or a DataFrame, its columns typed by a FeatureSpace   |
| `tfds_loader` | `load_tfds`: a tensorflow-datasets dataset with a validation split               |
| `splits`      | `Splits`, the stratified split and its checks, the standardisation               |
| `synthetic`   | the synthetic task of the paper's §3: `make_dataset`, the Bayes-optimal model    |
"""

from keras_ils.comparison.data.datasets import load, load_synthetic
from keras_ils.comparison.data.npz import load_npz
from keras_ils.comparison.data.splits import SmallValidationWarning, Splits
from keras_ils.comparison.data.tabular import model_inputs, table_splits
from keras_ils.comparison.data.tfds_loader import load_tfds

__all__ = [
    "SmallValidationWarning",
    "Splits",
    "load",
    "load_npz",
    "load_synthetic",
    "load_tfds",
    "model_inputs",
    "table_splits",
]
