"""The paper's experiment machinery, built on the `keras_ils` library and never imported by it.

Installed beside the library (one distribution, two packages: `keras_ils` never imports this one); the
`experiments` extra (`pip install "keras-ils[experiments]"`) brings what it needs beyond the library,
tensorflow-datasets, for `tfds:NAME` datasets. Importing it registers the paper's networks (`--model lenet`,
`resnet20`, ...) and tensorflow-datasets' catalogue (`--dataset tfds:NAME`) with the library's comparison;
the `keras-ils` command imports it.

| module               | what it holds                                                                     |
|----------------------|-----------------------------------------------------------------------------------|
| `zoo`                | the paper's networks by name (Table 3 and the distillation table), their recipes |
| `tfds_loader`        | `load_tfds`: a tensorflow-datasets dataset with a validation split               |
| `paper_tables`       | Table 3 and the distillation table, one resumable command each                   |
| `ranked_tables`      | those tables' average ranks, Friedman tests and CD diagrams                      |
| `printed_tables`     | the paper's printed Table 3 and distillation values                              |
| `synthetic_protocol` | the paper's 100-replicate synthetic protocol, its ablations, tables and figures  |
| `commands`           | `keras-ils benchmark` once its arguments are parsed                              |

Example:

>>> import keras_ils_experiments
>>> from keras_ils.comparison import networks
>>> networks.build("resnet20", 10, (32, 32, 3)).name
'resnet20'
"""

from keras_ils.comparison.data import datasets
from keras_ils_experiments import zoo
from keras_ils_experiments.tfds_loader import load_tfds


def _tfds_source(name, *, seed, **settings):
    """`load_tfds` as a dataset source: tfds' splits are fixed by their split strings, so `seed` changes nothing."""
    del seed
    return load_tfds(name, **settings)


datasets.register_source("tfds", _tfds_source)

__all__ = ["load_tfds", "zoo"]
