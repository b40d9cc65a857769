"""Final test accuracy of Schemes A/B/C on SYNTHETIC-IID vs FedProx's SYNTHETIC(0,0) (docs/aggregation.md).

usage: python scripts/compare_synthetic_iid.py {iid|ALPHA} ROUNDS     e.g. ... 0 200, ... iid 50
"""

import sys

import torch

from hetfl.data import traces
from hetfl.data.build import build_synthetic
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model

SIZES = {"distribution": "pareto", "index": 0.5, "size": 20, "max_size": 1000, "min_size": 10, "sigma": 0.3}


def main(argv: list[str]) -> None:
    """One line per (seed, |T|): each scheme's final test accuracy, B vs A and C vs B in per cent."""
    torch.set_num_threads(1)
    iid = argv[0] == "iid"
    a = 0.0 if iid else float(argv[0])
    rounds = int(argv[1])
    for seed in [0, 1]:
        fed = build_synthetic(a, a, iid, 50, SIZES, 0.2, seed)
        for k in [2, 5, 8]:
            tr = traces.generate_traces(k, 50, rounds, seed)
            acc = {}
            for sch in "ABC":
                cfg = TrainSettings(sch, 5, 20, 1.0, rounds, eval_every=rounds, seed=seed)
                res = train(make_model("logreg", 60, 10), fed, tr.fractions, cfg)
                acc[sch] = [v for _, m, v in res.records if m == "test_accuracy"][-1]
            b_a = 100 * (acc["B"] - acc["A"]) / acc["A"]
            c_b = 100 * (acc["C"] - acc["B"]) / acc["B"]
            print(argv[0], rounds, seed, k, {s: round(v, 3) for s, v in acc.items()},
                  f"B vs A {b_a:.1f}  C vs B {c_b:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
