"""Final test accuracy of Schemes A/B/C on SYNTHETIC-IID vs FedProx's SYNTHETIC(0,0) (docs/aggregation.md).

usage: python scripts/compare_synthetic_iid.py {iid|0} ROUNDS
"""

import sys

import torch

from hetfl.data import traces
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model
from hetfl.pipeline import build_synthetic

torch.set_num_threads(1)
iid = sys.argv[1] == "iid"
a = 0.0 if iid else float(sys.argv[1])
R = int(sys.argv[2])
sizes = {"distribution": "pareto", "index": 0.5, "size": 20, "max_size": 1000, "min_size": 10, "sigma": 0.3}
for seed in [0, 1]:
    fed = build_synthetic(a, a, iid, 50, sizes, 0.2, seed)
    for k in [2, 5, 8]:
        tr = traces.generate_traces(k, 50, R, seed)
        acc = {}
        for sch in "ABC":
            cfg = TrainSettings(sch, 5, 20, 1.0, R, eval_every=R, seed=seed)
            res = train(make_model("logreg", 60, 10), fed, tr.fractions, cfg)
            acc[sch] = [v for _, m, v in res.records if m == "test_accuracy"][-1]
        b_a = 100 * (acc["B"] - acc["A"]) / acc["A"]
        c_b = 100 * (acc["C"] - acc["B"]) / acc["B"]
        print(sys.argv[1], R, seed, k, {s: round(v, 3) for s, v in acc.items()},
              f"B vs A {b_a:.1f}  C vs B {c_b:.1f}", flush=True)
