"""FedAvg (McMahan et al. 2017) with Ruan et al.'s aggregation schemes applied by the engine."""

from hetfl.algorithms.base import Algorithm


class FedAvg(Algorithm):
    name = "fedavg"
    paper = "McMahan et al. 2017; Ruan et al. 2021 (Schemes A/B/C)"
