"""Table 3 (SYNTHETIC) cells under a variant of one unpublished choice, with both test metrics.

Trains Schemes A, B, C as `make reproduce` does (same split, traces and seed: a run here is bitwise the
workflow's run of the same spec) and prints, per |T|, the paired B − A and C − B in points, mean [95 %
Student-t CI] over seeds, on the pooled local holdouts (`test_accuracy`, the table's) and on the unweighted
mean of the devices' own accuracies (`mean_client_accuracy`). docs/readings.md, "Table 3's remaining gaps".

usage: python scripts/table3_variants.py [--setting IID|IID00|NIID] [--T 2,5,8] [--seeds 0,1,2,3,4]
       [--rounds 200] [--E 5] [--work steps|epochs] [--completion nearest|floor] [--sizes JSON]
  IID = FedProx's IID generator (the configs' IID), IID00 = the α, β generator at (0, 0), NIID = (1, 1).
"""

from __future__ import annotations

import argparse
import json

import torch

from hetfl.data import traces
from hetfl.data.build import build_synthetic
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model
from hetfl.reports.verdicts import t_interval

SIZES = '{"distribution": "pareto", "index": 0.5, "size": 20, "max_size": 1000, "min_size": 10, "sigma": 0.3}'
METRICS = {"pooled": "test_accuracy", "per-device": "mean_client_accuracy"}


def interval(values: list[float]) -> str:
    """mean [95 % Student-t CI] (the tables' interval, verdicts.t_interval; the mean alone for one seed)."""
    iv = t_interval(values)
    if len(values) < 2:
        return f"{iv.mean:.1f}"
    return f"{iv.mean:.1f} [{iv.low:.1f}, {iv.high:.1f}]"


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--setting", default="IID", choices=["IID", "IID00", "NIID"])
    ap.add_argument("--T", default="2,5,8")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--E", type=int, default=5)
    ap.add_argument("--work", default="steps")
    ap.add_argument("--completion", default="nearest")
    ap.add_argument("--sizes", default=SIZES)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    ab = 1.0 if a.setting == "NIID" else 0.0
    seeds, num_traces = [int(s) for s in a.seeds.split(",")], [int(k) for k in a.T.split(",")]
    final: dict[tuple[int, int, str, str], float] = {}
    for seed in seeds:
        fed = build_synthetic(ab, ab, a.setting == "IID", 50, json.loads(a.sizes), 0.2, seed)
        for k in num_traces:
            tr = traces.generate_traces(k, 50, a.rounds, seed)
            for scheme in "ABC":
                cfg = TrainSettings(scheme, a.E, 20, 1.0, a.rounds, eval_every=a.rounds, seed=seed,
                                    local_work=a.work, completion=a.completion)
                res = train(make_model("logreg", 60, 10), fed, tr.fractions, cfg)
                for name, metric in METRICS.items():
                    final[seed, k, scheme, name] = [v for _, m, v in res.records if m == metric][-1]
    for k in num_traces:
        cells = []
        for name in METRICS:
            for new, old in (("B", "A"), ("C", "B")):
                diff = [100 * (final[s, k, new, name] - final[s, k, old, name]) for s in seeds]
                cells.append(f"{name} {new} vs {old} {interval(diff)}")
        print(a.setting, f"|T|={k}", " | ".join(cells), flush=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
