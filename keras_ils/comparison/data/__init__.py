"""The comparison's data: arrays, tables and `.npz` files split and checked; datasets by name; the synthetic task.

| module        | what it holds                                                                    |
|---------------|----------------------------------------------------------------------------------|
| `datasets`    | `load(spec)`: `"synthetic"`, `.npz`, `.csv`, `"PREFIX:NAME"` (`register_source`)  |
| `inputs`      | `splits_maker`: `compare`'s `x` in every form it takes, to the loader below      |
| `arrays`      | `array_splits`, `dataset_arrays`: arrays and `tf.data` datasets                  |
| `npz`         | `load_npz`: a user's `.npz`, read and checked array by array                     |
| `tabular`     | `table_splits`: a CSV file or a DataFrame, its columns typed by a FeatureSpace   |
| `splits`      | `Splits`, the stratified split and its checks, the standardisation               |
| `synthetic`   | the synthetic task of the paper's §3: `make_dataset`, the Bayes-optimal model    |
"""

from keras_ils.comparison.data.datasets import load, load_synthetic
from keras_ils.comparison.data.npz import load_npz
from keras_ils.comparison.data.splits import SmallValidationWarning, Splits
from keras_ils.comparison.data.tabular import model_inputs, table_splits

__all__ = [
    "SmallValidationWarning",
    "Splits",
    "load",
    "load_npz",
    "load_synthetic",
    "model_inputs",
    "table_splits",
]
