"""What `keras-ils benchmark` does once its arguments are parsed: the synthetic protocol or a paper table."""

from __future__ import annotations

import os
import sys

__all__ = ["benchmark"]


def benchmark(args) -> str:
    """`keras-ils benchmark synthetic|paper`: the synthetic protocol or a paper table, written to `--output-dir`;
    returns the table printed on stdout."""
    import shlex

    from keras_ils._files import check_collisions, check_writable
    from keras_ils_experiments import synthetic_protocol

    output_dir = args.output_dir or os.path.join("runs", f"benchmark-{args.experiment}-seed{args.seed}")
    check_writable(output_dir)  # fail before hours of training
    check_collisions(output_dir, synthetic_protocol.OUTPUT_FILES, "--output-dir")
    if args.experiment == "paper":
        return _paper_command(args, output_dir)
    settings = dict(quick=True, n_test=200, epochs=30) if args.quick else {}
    options = synthetic_protocol.ProtocolOptions(
        replicates=args.replicates,
        seed=args.seed,
        preset=args.preset,
        init=args.init,
        shared_seeds=args.shared_seeds,
        temperature_estimator=args.temperature_fit,
        teacher_grid=args.teacher_grid,
        batch_size=args.batch_size,
        weight_decay=args.weight_decay,
        smoothing_mass=args.smoothing_mass,
        validation_loss=args.validation_loss,
        **settings,
    )
    results = synthetic_protocol.run_replicates(options)
    command = args.argv or "keras-ils " + shlex.join(sys.argv[1:])
    synthetic_protocol.write_outputs(results, output_dir, command)
    print(f"Results written to {output_dir}/ (synthetic_protocol.json, synthetic_protocol.md, best_smoothing_*.png)")
    with open(os.path.join(output_dir, "synthetic_protocol.md")) as file:
        return file.read()


def _paper_command(args, output_dir) -> str:
    import shlex

    from keras_ils_experiments import paper_tables, ranked_tables

    pairs = paper_tables.pairs_for(args.table, args.datasets, args.models)
    settings = paper_tables.TableSettings(
        search=args.search,
        epochs=args.epochs,
        batch_size=args.batch_size,
        data_dir=args.data_dir,
        validation_fraction=args.validation_fraction,
        temperature_estimator=args.temperature_fit or "map",
        verbose=args.verbose,
        log=print,
    )
    summary = paper_tables.run_table(
        args.table,
        pairs,
        settings,
        seeds=range(args.seed, args.seed + args.seeds),
        output_dir=output_dir,
        command=args.argv or "keras-ils " + shlex.join(sys.argv[1:]),
    )
    name = "table3" if args.table == "3" else "distillation"
    print(f"Results written to {output_dir}/ ({name}.md, {name}.json, cd_{name}_*.png, runs/)")
    return ranked_tables.format_markdown(summary)
