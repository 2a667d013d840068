"""A small LS/ILS grid search on the synthetic task, run as its own process by `test_tuners.py`.

    python tests/tuning_job.py DIRECTORY LOG --method ls --values 0.01,0.05,0.1

It appends the hyperparameters of every trial it trains to LOG (one JSON line
per trial, written when the trial starts), so a test can tell which trials a
(re)started or distributed search ran. KerasTuner's `KERASTUNER_*`
environment variables make it a chief or a worker.
"""

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def search_space(method, values):
    names = {"ls": ("epsilon",), "ils1": ("p1", "p2"), "ils2": ("epsilon", "temperature"), "ils": ("p1",)}[method]
    space = {names[0]: values}
    if method == "ils1":
        space["p2"] = [1.0]
    if method in ("ils2", "ils"):
        space["temperature"] = [1.0]
    if method == "ils":
        space["p2"] = [1.0]
    return space


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("log")
    parser.add_argument("--method", default="ls")
    parser.add_argument("--values", default="0.01,0.05,0.1,0.15")
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    from keras_ils import compute_teacher_logits, tuning, with_teacher_targets
    from keras_ils.comparison import networks
    from keras_ils.comparison.data import datasets
    from keras_ils.comparison.engine import training

    tf.config.experimental.enable_op_determinism()
    splits = datasets.load_synthetic(seed=0, n_test=10)
    keras.utils.set_random_seed(1)
    teacher = networks.mlp(3, (2,), hidden_layers=1, units=8)
    teacher_logits = compute_teacher_logits(teacher, splits.train)
    train = training.training_pipeline(with_teacher_targets(splits.train, teacher_logits), networks.Recipe(), seed=0)

    class LoggedHyperModel(tuning.ILSHyperModel):
        def fit(self, hp, model, *fit_args, **fit_kwargs):
            with open(args.log, "a") as file:
                file.write(json.dumps(hp.values) + "\n")
            return super().fit(hp, model, *fit_args, **fit_kwargs)

    def build_model(hp):
        model = networks.mlp(3, (2,), hidden_layers=2, units=16)
        model.compile(optimizer=keras.optimizers.Adam(1e-2))
        return model

    values = [float(v) for v in args.values.split(",")]
    hypermodel = LoggedHyperModel(
        build_model, 3, method=args.method, search_space=search_space(args.method, values), patience=3, seed=0
    )
    tuner = tuning.tuner_for("grid", hypermodel, directory=args.directory, project_name="job")
    tuner.search(train, validation_data=training.evaluation_pipeline(splits.validation), epochs=args.epochs, verbose=0)
    if os.environ.get("KERASTUNER_TUNER_ID", "chief") == "chief":
        best = tuner.oracle.get_best_trials(1)[0]
        print(json.dumps({"best": best.hyperparameters.values, "score": best.score}))


if __name__ == "__main__":
    main()
