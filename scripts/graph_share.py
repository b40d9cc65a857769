"""How much of a paper grid's local training CUDA graphs can replay (docs/engine.md, "CUDA graphs in the
engine").

usage: python scripts/graph_share.py CONFIG [--seed S]

engine.graphs replays a block's runs of local steps with one working prefix (the same clients) from one
captured graph, each run of n >= GRAPH_MIN_STEPS steps after GRAPH_WARMUP eager steps; shorter runs train
eagerly. Where a round's clients do different numbers of steps the working prefix shrinks often and the
runs are short. This walks every round of the grid's runs on one seed as `hetfl train` plans them (the
same splits, traces, schemes and client sampling; engine.runner.RunLoop.plan) without training or
evaluating, and counts
a round's block steps (on CUDA one block per round, or client by client below the model's
`cuda_batched_from`) and how many of them graphs replay. One line per (setting, scheme, traces); runs that
differ only in their algorithm plan the same steps, so the first algorithm's stands for them. Real image
sources get a random stand-in of their exact size (hetfl.projection.fake_source; step counts depend on
sizes only); text sources are not offline and are refused.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from hetfl.config import ConfigError, expand_runs, load_config, validate_config
from hetfl.data.build import make_split
from hetfl.data.traces import make_traces
from hetfl.engine.graphs import replayed_steps
from hetfl.engine.local import prefix_runs, working_prefix
from hetfl.pipeline import RunJob
from hetfl.projection import FAKEABLE, OFFLINE, fake_source


def block_runs(done: np.ndarray, batched_from: int) -> list[int]:
    """The lengths of a round's runs of block steps: one block of all clients (sorted by steps, the
    working prefix shrinking), or each client alone when the round has fewer than `batched_from`."""
    steps = np.sort(np.asarray(done))[::-1]
    if len(steps) < batched_from:
        return [int(s) for s in steps if s > 0]
    return [j1 - j0 for _, j0, j1 in prefix_runs(working_prefix(steps), 0, len(steps))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="graph_share.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--seed", type=int, default=None, help="the seed whose runs are walked (default: "
                                                              "each experiment's first)")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    root = Path(tempfile.mkdtemp(prefix="graph-share-"))
    for name, exp in config["experiments"].items():
        if exp["dataset"] not in OFFLINE + FAKEABLE:
            raise ConfigError(f"experiments.{name}.dataset has value '{exp['dataset']}', which has no "
                              f"offline stand-in; allowed: {', '.join(OFFLINE + FAKEABLE)}")
        if exp["dataset"] in FAKEABLE:
            if not (root / "data" / exp["dataset"]).exists():
                fake_source(exp["dataset"], root / "data")
            exp["data_dir"] = str(root / "data")
    config = validate_config(config)
    seen = set()
    total = replayed = 0
    for spec in expand_runs(config):
        first = min(config["experiments"][spec.experiment]["seeds"])
        key = (spec.experiment, spec.setting, spec.scheme, spec.traceset)
        if spec.seed != (first if args.seed is None else args.seed) or key in seen:
            continue
        seen.add(key)
        where = root / spec.experiment / spec.setting / spec.scheme / spec.traceset
        split, trace = where / "split.npz", where / "traces.npz"
        make_split(split, spec.split_spec(), spec.seed)
        make_traces(trace, traceset=spec.traceset, num_devices=spec.num_devices, rounds=spec.rounds,
                    seed=spec.seed, assignment=spec.trace_assignment, p_inactive=spec.p_inactive)
        loop = RunJob(spec, split, trace, where / "run", progress=False, checkpoint_every=0).loop
        batched_from = getattr(loop.model, "cuda_batched_from", 0)
        steps = replays = 0
        done: list[np.ndarray] = []
        for tau in range(1, spec.rounds + 1):
            # who trains how many steps in round tau depends on the traces, the scheme, the events and the
            # sampling, not on the model: plan every round, train and evaluate none
            work = loop.plan(tau)
            if work is not None:
                runs = block_runs(work.info.done, batched_from)
                steps += sum(runs)
                replays += replayed_steps(runs)
                done.append(work.info.done)
        every = np.concatenate(done) if done else np.zeros(1, dtype=int)
        print(f"{spec.experiment} {spec.setting} scheme {spec.scheme} {spec.traceset} ({spec.model}): "
              f"{len(done)} rounds trained, {np.mean([len(d) for d in done] or [0]):.1f} clients a round, "
              f"local steps median {np.median(every):.0f} max {every.max()}; block steps {steps:,}, "
              f"replayed {replays:,} ({replays / max(steps, 1):.0%})", flush=True)
        total, replayed = total + steps, replayed + replays
    print(f"all: block steps {total:,}, replayed {replayed:,} ({replayed / max(total, 1):.0%})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ConfigError as err:
        sys.exit(f"graph_share.py: error: {err}")
