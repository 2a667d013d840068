"""The synthetic protocol's student targets: one `student_targets` call per replicate and config (before) against
one call per config over the group's stacked examples (`synthetic_protocol.stages.stage_targets`), side by side.

Each round builds the ILS configs' targets (198 per replicate: ILS1, ILS2, ILS over the appendix grids) for
`--replicates` replicates both ways, rotating which goes first; the two results are checked equal to float32 rounding.

    python benchmarks/synthetic_targets.py [--replicates 5] [--rounds 3]
"""

import argparse

import numpy as np
from _common import interleaved, machine

from keras_ils_experiments import synthetic_protocol
from keras_ils_experiments.synthetic_protocol import stages


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicates", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = stages.replicate_datasets(args.replicates, seed=0, n_test=1)
    _, taught = synthetic_protocol.model_configs(synthetic_protocol.grids())
    logits = np.random.default_rng(0).normal(size=(args.replicates, 150, 3)).astype(np.float32)
    reps = list(range(args.replicates))

    def per_replicate():
        return np.stack([stages.student_targets(data[r]["train"].y, logits[r], hp) for r in reps for _, hp in taught])

    def stacked():
        return stages.stage_targets(data, reps, taught, logits, None)

    np.testing.assert_allclose(per_replicate(), stacked(), rtol=1e-6, atol=1e-7)  # float32 rounding apart
    times = interleaved({"per replicate and config": per_replicate, "per config, stacked": stacked}, args.rounds)
    print("\n".join(machine()))
    calls = len(reps) * len(taught)
    for name, seconds in times.items():
        print(f"{name:26s} " + "  ".join(f"{s:6.2f} s" for s in seconds))
    ratios = times["per replicate and config"] / times["per config, stacked"]
    print(f"{calls} targets; ratio per round: " + ", ".join(f"{r:.1f}x" for r in ratios))
    print(f"median ratio {np.median(ratios):.1f}x")


if __name__ == "__main__":
    main()
