"""One worker of a MultiWorkerMirroredStrategy run, started as its own process by `test_distribution.py`.

    TF_CONFIG='{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": 0}}' \\
        python tests/multi_worker_job.py INPUTS.npz OUTPUT.npz

INPUTS.npz holds `x`, `y`, the calibrated teacher's `teacher_logits` and the
student's initial weights (`weight_0`, `weight_1`, ...). The worker trains an
ILS student on the teacher targets (`with_teacher_targets`) with `model.fit`
under the strategy `TF_CONFIG` describes and writes its final weights and
history to OUTPUT.npz.

Keras 3's `fit` does not run under a plain `MultiWorkerMirroredStrategy`
(keras-team/keras#20585, tensorflow/tensorflow#72388): it calls the strategy's
`reduce` on a nested batch, and with `axis=0` on scalar logs, which only
`MirroredStrategy` accepts. `KerasMultiWorkerMirroredStrategy` below accepts
both and changes nothing else; copy it when you train on several machines.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

GLOBAL_BATCH = 16
EPOCHS = 2


def keras_multi_worker_strategy():
    """A `MultiWorkerMirroredStrategy` whose `reduce` accepts what Keras 3's `fit` hands it."""
    import tensorflow as tf

    class KerasMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
        def reduce(self, reduce_op, value, axis=None):
            def one(v):
                local = self.experimental_local_results(v)[0] if isinstance(v, tf.distribute.DistributedValues) else v
                return super(KerasMultiWorkerMirroredStrategy, self).reduce(
                    reduce_op, v, None if local.shape.rank == 0 else axis
                )

            return tf.nest.map_structure(one, value)

    return KerasMultiWorkerMirroredStrategy()


def build_student(input_dim, num_classes):
    import keras

    import keras_ils

    return keras.Sequential(
        [
            keras.Input((input_dim,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(num_classes),
            keras_ils.TemperatureScaling(1.0),
        ]
    )


def compile_student(model):
    import keras

    import keras_ils

    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras_ils.ILSLoss(method="ils", p1=0.8, p2=2.0),
        metrics=[keras_ils.metrics.NegativeLogLikelihood(from_logits=True)],
    )


def training_data(x, y, teacher_logits):
    """Teacher targets attached before batching; every worker reads the same global batches."""
    import tensorflow as tf

    import keras_ils

    dataset = keras_ils.with_teacher_targets(tf.data.Dataset.from_tensor_slices((x, y)), teacher_logits)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.batch(GLOBAL_BATCH).with_options(options)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("inputs")
    parser.add_argument("output")
    args = parser.parse_args(argv)

    import numpy as np

    strategy = keras_multi_worker_strategy()
    with np.load(args.inputs) as stored:
        x, y, teacher_logits = stored["x"], stored["y"], stored["teacher_logits"]
        weights = [stored[f"weight_{i}"] for i in range(len(stored.files) - 3)]
    with strategy.scope():
        model = build_student(x.shape[1], teacher_logits.shape[1])
        model.set_weights(weights)
        compile_student(model)
    history = model.fit(training_data(x, y, teacher_logits), epochs=EPOCHS, shuffle=False, verbose=0)
    final = {f"weight_{i}": w for i, w in enumerate(model.get_weights())}
    logs = {name: np.array(values) for name, values in history.history.items()}
    np.savez(args.output, replicas=strategy.num_replicas_in_sync, **logs, **final)


if __name__ == "__main__":
    main()
