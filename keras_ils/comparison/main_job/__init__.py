"""The main job: the whole method on one dataset (`keras-ils run` / `tune`).

`run(splits, config)` and `tune(splits, config)` take the data
(`keras_ils.comparison.data.datasets.load`) and one frozen `RunConfig`; the
methods are the `keras_ils.methods` registry's. The modules, one concern each:

- `config`: `RunConfig`, the defaults, the calibrators;
- `pipeline`: `run` and `tune`, the orchestration;
- `engine_path`: a plain MLP on vectors, every candidate at once (vectorised engine);
- `keras_path`: everything else by `model.fit` and KerasTuner searches;
- `budget`: grids and what a search costs (Hyperband's models and epochs);
- `resume`: the search directory's settings and the kept single-fit students;
- `fitting`: one network built, trained, calibrated, saved; a method's loss and data;
- `conformal_split`: the prediction sets' calibration examples, carved from validation before anything trains;
- `report` and `progress`: the rows scored and written, the progress lines;
- `commands`: what `keras-ils run`, `tune` and `methods` do once their arguments are parsed.

The results' tables and files are in `keras_ils.comparison.reporting`.
"""

from keras_ils.comparison.main_job.config import DEFAULT_METHODS, RunConfig
from keras_ils.comparison.main_job.fitting import train_model
from keras_ils.comparison.main_job.pipeline import run, tune

__all__ = ["DEFAULT_METHODS", "RunConfig", "run", "train_model", "tune"]
