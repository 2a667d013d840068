"""The ablation of issue 15: the synthetic protocol under each of the authors' code habits, one run per variant.

Each variant is `keras_ils_experiments.synthetic_protocol.run_replicates` with
the keywords below (everything else the package's defaults) and writes
`results/synthetic_ablation/<variant>/` with `write_outputs` (the table, every
replicate's rows, Fig. 4, Table 2 and Fig. 2), plus `run.json`: the git commit
the run used, whether the tree was clean, and when it ran.

Run:  python scripts/synthetic_ablation.py VARIANT [--replicates 100]
      python scripts/synthetic_ablation.py --table      # results/synthetic_ablation/ablation.md from the runs there
      python scripts/synthetic_ablation.py --rewrite VARIANT   # its outputs again from its JSON (report code changed)
      python scripts/synthetic_ablation.py --list
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_ils_experiments import synthetic_protocol  # noqa: E402

VARIANTS = {
    "package": {},
    "batch_128": dict(batch_size=128),
    "batch_512": dict(batch_size=512),
    "pytorch_init": dict(init="pytorch"),
    "independent_seeds": dict(shared_seeds=False),
    "pytorch_init_independent_seeds": dict(init="pytorch", shared_seeds=False),
    "authors_temperature_fit": dict(temperature_estimator="authors"),
    "authors_teacher_grid": dict(teacher_grid="authors"),
    "weight_decay": dict(weight_decay=1e-4),
    "wrong_class_mass": dict(smoothing_mass="wrong_classes"),
    "batch_mean_validation": dict(validation_loss="batch_mean"),
    "authors": dict(preset="authors"),
    "authors_without_engine_options": dict(preset="authors", weight_decay=0.0, validation_loss="example_mean"),
    # the closest No LS of the single suspects (PyTorch init, one seed per model, batch 32) with the authors' target
    # and temperature habits
    "best_combination": dict(preset="authors", batch_size=32, weight_decay=0.0, validation_loss="example_mean"),
}
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(os.path.dirname(HERE), "results")  # the generated results, beside scripts/
# Earlier full runs (docs/results/synthetic-protocol.md "Runs", committed in 1128aa6; the maximum-likelihood
# temperature fit, which moves only the TempS rows and, through the teacher's T*, the ILS rows) shown beside the new
# ones.
EARLIER = {
    "pytorch_init (earlier run, mle fit)": ("synthetic_protocol_pytorch_init", "1128aa6"),
    "independent_seeds (earlier run, mle fit)": ("synthetic_protocol_independent_seeds", "1128aa6"),
}


def _git(*args):
    return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True).stdout.strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant", nargs="?", choices=tuple(VARIANTS))
    parser.add_argument("--replicates", type=int, default=100)
    parser.add_argument("--list", action="store_true", help="print the variants and exit")
    parser.add_argument("--table", action="store_true", help="write ablation.md from the runs present")
    parser.add_argument("--rewrite", action="store_true", help="rewrite VARIANT's outputs from its JSON")
    args = parser.parse_args(argv)
    if args.table:
        return write_table()
    if args.rewrite:
        directory = os.path.join(RESULTS, "synthetic_ablation", args.variant)
        with open(os.path.join(directory, "synthetic_protocol.json")) as file:
            document = json.load(file)
        with open(os.path.join(directory, "run.json")) as file:
            meta = file.read()
        synthetic_protocol.write_outputs(document["results"], directory, document["command"])
        with open(os.path.join(directory, "run.json"), "w") as file:
            file.write(meta)
        return None
    if args.list or args.variant is None:
        for name, keywords in VARIANTS.items():
            print(f"{name}: {keywords}")
        return
    commit, dirty = _git("rev-parse", "HEAD"), bool(_git("status", "--porcelain", "--", ":/keras_ils"))
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    options = synthetic_protocol.ProtocolOptions(replicates=args.replicates, seed=0, **VARIANTS[args.variant])
    results = synthetic_protocol.run_replicates(options)
    output_dir = os.path.join(RESULTS, "synthetic_ablation", args.variant)
    command = "python scripts/synthetic_ablation.py " + " ".join(sys.argv[1:] if argv is None else argv)
    synthetic_protocol.write_outputs(results, output_dir, command)
    meta = dict(
        variant=args.variant,
        keywords=VARIANTS[args.variant],
        replicates=args.replicates,
        commit=commit,
        keras_ils_modified=dirty,
        started=started,
        seconds=results["seconds"],
    )
    with open(os.path.join(output_dir, "run.json"), "w") as file:
        json.dump(meta, file, indent=1)
    print(f"{args.variant}: {results['seconds']:.0f} s, written to {output_dir}/")


def write_table():
    """`results/synthetic_ablation/ablation.md`: every variant present, in `VARIANTS`' order."""
    from keras_ils_experiments.synthetic_protocol import ablation

    runs = {}
    for name in VARIANTS:
        directory = os.path.join(RESULTS, "synthetic_ablation", name)
        if not os.path.exists(os.path.join(directory, "run.json")):
            continue
        with open(os.path.join(directory, "synthetic_protocol.json")) as file:
            results = json.load(file)["results"]
        with open(os.path.join(directory, "run.json")) as file:
            runs[name] = dict(results=results, meta=json.load(file))
    for name, (directory, commit) in EARLIER.items():
        with open(os.path.join(RESULTS, directory, "synthetic_protocol.json")) as file:
            runs[name] = dict(results=json.load(file)["results"], meta=dict(commit=commit))
    text = ablation.table(runs)
    with open(os.path.join(RESULTS, "synthetic_ablation", "ablation.md"), "w") as file:
        file.write(text)
    print(text)


if __name__ == "__main__":
    main()
