"""The method names the tables print, importable without pandas: config validation groups runs by them
(config.TABLE_CELLS), as the tables do."""

from __future__ import annotations

from hetfl.algorithms import method_label

#: FedElasticNet's communication-cost table (reports.communication_cost): the paper's integrations and the
#: compressed baselines by these names, any other algorithm by its registry label
COMMUNICATION_LABELS = {
    "fedavg": "FedAvg", "fedprox": "FedProx", "fedelasticnet": "FedProx + elastic net (Alg. 1)",
    "scaffold": "SCAFFOLD", "scaffold_elasticnet": "SCAFFOLD + elastic net (Alg. 2)", "feddyn": "FedDyn",
    "feddyn_elasticnet": "FedDyn + elastic net (Alg. 3)", "topk_ef": "FedAvg + top-k + EF",
    "sign_ef": "FedAvg + sign + EF", "st_ef": "FedAvg + ST + EF"}


def communication_label(algorithm: str) -> str:
    """A communication_cost row's name: COMMUNICATION_LABELS, else the registry's label (a new algorithm's
    row read 'fedclip', not 'FedClip'; an audit)."""
    return COMMUNICATION_LABELS.get(algorithm) or method_label(algorithm)
