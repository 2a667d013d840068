"""The library's comparison: `compare` runs every method and calibrator on your model and data, with a verdict.

| module       | what it holds                                                                               |
|--------------|---------------------------------------------------------------------------------------------|
| `runs`       | `compare`, the `Comparison` it returns, `run_seeds` (the seeds of one comparison, whole)     |
| `main_job`   | the run of one seed (`pipeline.run`, `tune`), its settings (`config`), the command's shell   |
| `engine`     | the vectorised engine (many MLPs side by side), the students search, `model.fit` by a recipe |
| `reporting`  | tables, figures, the seeds' summary and the paired verdict                                   |
| `data`       | the splits of arrays, `tf.data`, tables (`keras.utils.FeatureSpace`), `.npz`; the synthetic task |
| `networks`   | the networks a comparison trains by name and their recipes                                   |

Example:

>>> from keras_ils.comparison import compare, Comparison
>>> callable(compare), Comparison.__name__
(True, 'Comparison')
"""

from keras_ils.comparison.runs import COMPARISON_FILES, Comparison, compare, run_seeds, seed_list

__all__ = ["COMPARISON_FILES", "Comparison", "compare", "run_seeds", "seed_list"]
