"""`keras-ils`: the whole method on a dataset from the command line.

    keras-ils run                                  # the paper's synthetic task, MLP (a minute or two on a CPU)
    keras-ils run --dataset tfds:cifar10 --model resnet110 --strategy mirrored
    keras-ils run --dataset my_data.npz --methods ls,ils --epochs 50

Bad input (unknown dataset, labels outside [0, K), a malformed .npz, an
output directory that cannot be written, ...) ends with one error line and
exit code 2, and leaves no files behind.
"""

from __future__ import annotations

import argparse
import os
import sys


def _strategy(name):
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError) as error:
        raise ValueError(f"--strategy tpu: no TPU could be reached ({error}).") from error
    return tf.distribute.TPUStrategy(resolver)


def _methods(text):
    from keras_ils.pipeline import ALL_METHODS

    if text == "all":
        return ALL_METHODS
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    if not methods or any(m not in ALL_METHODS for m in methods):
        raise argparse.ArgumentTypeError(
            f"expected 'all' or a comma-separated subset of {','.join(ALL_METHODS)}; got {text!r}"
        )
    return methods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-ils",
        description="Instance-based Label Smoothing (Maher & Kull, 2021) with Keras.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n")[1],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="teacher -> T* -> cached teacher logits -> No LS, LS, ILS1, ILS2, ILS students (+TempS) -> table",
        description="Run the whole method on one dataset and write results.json, results.csv and "
        "reliability diagrams (PNG) into the output directory.",
    )
    run.add_argument("--dataset", default="synthetic", help="'synthetic' (default), 'tfds:NAME' or PATH.npz")
    run.add_argument("--data-dir", default=None, help="tensorflow-datasets data directory")
    run.add_argument(
        "--model",
        default=None,
        help="mlp, lenet, resnet20/32/56/110, wrn-D-W (default: mlp for vectors, resnet20 for images)",
    )
    run.add_argument(
        "--methods",
        type=_methods,
        default=("ls", "ils1", "ils2", "ils"),
        help="students to train: 'all' (the paper's full comparison: dis,cls,bs_soft,beta,ls,ils1,ils2,ils) "
        "or a comma-separated subset (default: ls,ils1,ils2,ils)",
    )
    run.add_argument("--epsilon", type=float, help="LS / ILS2 smoothing factor")
    run.add_argument("--p1", type=float, help="ILS1 / ILS P1")
    run.add_argument("--p2", type=float, help="ILS1 / ILS P2")
    run.add_argument("--temperature", type=float, help="ILS2 / ILS temperature on the calibrated teacher")
    run.add_argument("--epochs", type=int, help="maximum epochs (default: the paper's recipe)")
    run.add_argument("--batch-size", type=int, help="mini-batch size (default: the paper's recipe)")
    run.add_argument("--validation-fraction", type=float, default=0.1, help="validation share of train (default: 0.1)")
    run.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    run.add_argument(
        "--strategy", choices=("default", "mirrored", "tpu"), default="default", help="tf.distribute strategy"
    )
    run.add_argument("--teacher-cache", default=None, help="cache file (.npz) for the teacher's logits")
    run.add_argument("--output-dir", default=None, help="where results go (default: runs/DATASET-MODEL-seedN)")
    run.add_argument(
        "--verbose", type=int, choices=(0, 1, 2), default=0, help="Keras fit verbosity (default: 0, one progress bar)"
    )
    return parser


def run_command(args) -> int:
    from keras_ils import datasets, pipeline, training

    splits = datasets.load(
        args.dataset, data_dir=args.data_dir, validation_fraction=args.validation_fraction, seed=args.seed
    )
    model_name = args.model or ("resnet20" if splits.is_image else "mlp")
    hyperparameters = pipeline.default_hyperparameters(
        splits.name, epsilon=args.epsilon, p1=args.p1, p2=args.p2, temperature=args.temperature
    )
    recipe = training.recipe_for(model_name, splits.name, epochs=args.epochs, batch_size=args.batch_size)
    output_dir = args.output_dir or os.path.join(
        "runs", f"{splits.name.replace(os.sep, '_')}-{model_name}-seed{args.seed}"
    )
    results = pipeline.run(
        splits,
        model_name=model_name,
        methods=args.methods,
        hyperparameters=hyperparameters,
        recipe=recipe,
        output_dir=output_dir,
        strategy=_strategy(args.strategy),
        seed=args.seed,
        teacher_cache=args.teacher_cache,
        verbose=args.verbose,
    )
    print(pipeline.format_table(results))
    print(f"Results written to {output_dir}/ (results.json, results.csv, reliability_*.png)")
    return 0


def main(argv=None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    import absl.logging
    import tensorflow as tf

    absl.logging.set_verbosity(absl.logging.ERROR)
    try:
        return run_command(args)
    except (ValueError, OSError) as error:
        print(f"keras-ils: error: {error}", file=sys.stderr)
    except tf.errors.OpError as error:
        print(f"keras-ils: error: {error.message.splitlines()[0]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
