"""Algorithm registry: name → class, paper and hyperparameters (see hparams.CATALOG).

Importing this package stays light (no torch): classes are imported when first asked for, so config
validation and `hetfl algorithms` do not pay for torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hetfl.algorithms.hparams import CATALOG, describe, parse_hyperparameters

if TYPE_CHECKING:
    from hetfl.algorithms.base import Algorithm

ALGORITHM_NAMES: tuple[str, ...] = tuple(CATALOG)


def algorithm_class(name: str) -> type[Algorithm]:
    if name not in CATALOG:
        raise ValueError(f"algorithm '{name}' is unknown; allowed: {', '.join(ALGORITHM_NAMES)}")
    module, cls = CATALOG[name].target.split(":")
    return getattr(importlib.import_module(module), cls)


def make_algorithm(name: str, params: dict[str, Any] | None = None, **hyperparameters: Any) -> Algorithm:
    """An algorithm instance; `params` (a config's algorithm_params entry) is validated first."""
    hp = parse_hyperparameters(name, {**(params or {}), **hyperparameters}, key=f"algorithm_params.{name}")
    return algorithm_class(name)(**{k: getattr(hp, k) for k in hp.__dataclass_fields__})


_LAZY = {"Algorithm": "hetfl.algorithms.base", "RoundInfo": "hetfl.algorithms.base",
         "Task": "hetfl.algorithms.base", "weighted_update": "hetfl.algorithms.base",
         "FedAvg": "hetfl.algorithms.fedavg"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hetfl.algorithms' has no attribute '{name}'")


__all__ = ["ALGORITHM_NAMES", "CATALOG", "algorithm_class", "describe", "make_algorithm",
           "parse_hyperparameters", *_LAZY]
