"""The paper's experiment machinery, built on the `keras_ils` library and never imported by it.

| package             | what it holds                                                                  |
|---------------------|--------------------------------------------------------------------------------|
| `data`              | datasets by name (synthetic, `tfds:NAME`, a user's `.npz`); the synthetic task  |
| `zoo`               | the paper's networks by name (Table 3 and the distillation table)              |
| `engine`            | the training recipes and loop, the vectorised many-MLP trainer, the students search |
| `main_job`          | the whole method on one dataset (`keras-ils run` / `tune`); the paper tables     |
| `reporting`         | ranks, the Friedman test, critical differences, CD diagrams; the printed tables |
| `synthetic_protocol`| the paper's 100-replicate synthetic protocol, its tables and figures            |
"""
