"""entropy_up with bins ⌊v/0.01⌋ (hetfl's) against bins centred on 0, ⌊v/0.01 + ½⌋ (docs/algorithms.md).

Trains a few algorithms on SYNTHETIC(1,1) (logreg, 30 devices, |T| = 8, Scheme C) and on mnist5k (2NN,
10 devices, IID, Scheme C) and records, every round, the entropy of everything the clients send under
both binnings. Prints per run the mean and the largest relative difference (centred − floor)/floor.

usage: python scripts/entropy_bins.py [ROUNDS]
"""

import sys

import numpy as np
import torch

from hetfl.algorithms import make_algorithm
from hetfl.data import traces
from hetfl.data.build import build_from_source, build_synthetic
from hetfl.engine import comm
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model

SIZES = {"distribution": "pareto", "index": 0.5, "size": 20, "max_size": 300, "min_size": 10, "sigma": 0.3}
ALGORITHMS = ("fedavg", "scaffold", "fedelasticnet", "feddyn_elasticnet", "efl")


def main(argv: list[str]) -> None:
    """One line per (task, algorithm): the mean entropy under both binnings and their relative difference."""
    torch.set_num_threads(1)
    rounds = int(argv[0]) if argv else 10
    pairs: list[tuple[float, float]] = []
    floor_entropy = comm.entropy_bits

    def both(tensors, bin_width=comm.ENTROPY_BIN):  # one call per round: record both binnings
        h = floor_entropy(tensors, bin_width)
        pairs.append((h, floor_entropy(tensors, bin_width, centred=True)))
        return h

    comm.entropy_bits = both
    try:
        tasks = {
            "synthetic(1,1) logreg": (build_synthetic(1.0, 1.0, False, 30, SIZES, 0.2, 0), "logreg", 60, 10,
                                      0.5),
            "mnist5k 2NN": (build_from_source("mnist5k", {"label_skew": "iid"}, 10, {"distribution": "equal"},
                                              0.2, 0), "mlp", 784, 10, 0.05),
        }
        for task, (fed, model_name, dim, batch, eta0) in tasks.items():
            fractions = traces.generate_traces(8, fed.num_devices, rounds, 0).fractions
            for name in ALGORITHMS:
                pairs.clear()
                kw = {"hidden": (200, 200)} if model_name == "mlp" else {}
                cfg = TrainSettings("C", 1, batch, eta0, rounds, eval_every=rounds, lr_schedule="constant")
                train(make_model(model_name, dim, 10, **kw), fed, fractions, cfg,
                      algorithm=make_algorithm(name))
                h = np.array(pairs)
                rel = (h[:, 1] - h[:, 0]) / h[:, 0]
                print(f"{task:22s} {name:18s} floor {h[:, 0].mean():6.3f}  centred {h[:, 1].mean():6.3f} "
                      f"bits/value; (centred − floor)/floor mean {100 * rel.mean():+6.1f} %, range "
                      f"[{100 * rel.min():+.1f}, {100 * rel.max():+.1f}] %", flush=True)
    finally:
        comm.entropy_bits = floor_entropy


if __name__ == "__main__":
    main(sys.argv[1:])
