"""Algorithm registry: name -> class. Each class documents its paper and hyperparameters."""

from hetfl.algorithms.base import Algorithm, RoundInfo, weighted_update
from hetfl.algorithms.fedavg import FedAvg

ALGORITHMS: dict[str, type[Algorithm]] = {"fedavg": FedAvg}


def make_algorithm(name: str, **hyperparameters) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm '{name}' is unknown; allowed: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[name](**hyperparameters)


__all__ = ["ALGORITHMS", "Algorithm", "FedAvg", "RoundInfo", "make_algorithm", "weighted_update"]
