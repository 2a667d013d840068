"""The paper's experiment machinery, built on the `keras_ils` library and never imported by it.

| module              | what it holds                                                              |
|---------------------|----------------------------------------------------------------------------|
| `synthetic`         | the paper's synthetic task (§3) and its Bayes-optimal model                 |
| `datasets`          | datasets by name for the command: synthetic, `tfds:NAME`, a user's `.npz`   |
| `models`            | the paper's networks by name (Table 3 and the distillation table)           |
| `training`          | the paper's training recipes and one `fit` that applies them                |
| `vectorised`        | many small MLPs trained at once (the many-students engine)                  |
| `ranks`             | average ranks, the Friedman test, critical differences and CD diagrams     |
| `pipeline`          | the whole method on one dataset: what `keras-ils run` and `tune` call        |
| `synthetic_protocol`| the paper's 100-replicate synthetic protocol, its tables and figures         |
"""
