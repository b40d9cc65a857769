"""Algorithm registry: name → class, paper, hyperparameters and table label (see hparams.CATALOG).

The catalog holds hetfl's own algorithms and those other packages register through the entry point group
"hetfl.algorithms" (registry.py; docs/adding-an-algorithm.md). Importing this package stays light (no
torch): classes are imported when first asked for, so config validation and `hetfl algorithms` do not
pay for torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hetfl.algorithms.hparams import CATALOG, describe, parse_hyperparameters
from hetfl.algorithms.registry import ENTRY_POINT_GROUP, AlgorithmEntry

if TYPE_CHECKING:
    from hetfl.algorithms.base import Algorithm

ALGORITHM_NAMES: tuple[str, ...] = tuple(CATALOG)


def method_label(name: str) -> str:
    """The method's name in the papers' tables ("VRL-SGD" for vrlsgd); the name itself when unknown."""
    entry = CATALOG.get(name)
    return entry.display if entry is not None else name


def algorithm_class(name: str) -> type[Algorithm]:
    if name not in CATALOG:
        raise ValueError(f"algorithm '{name}' is unknown; allowed: {', '.join(ALGORITHM_NAMES)}")
    entry = CATALOG[name]
    module, attr = entry.target.split(":")
    cls = getattr(importlib.import_module(module), attr)
    problem = _class_problem(cls)  # before any run trains: a TypeError in round 1, or FedAvg without a word
    if problem:
        raise TypeError(f"algorithm '{name}' ({entry.target}): {problem}")
    if getattr(cls, "Params", entry.params) is not entry.params:
        raise TypeError(f"algorithm '{name}': class {entry.target} has Params = {cls.Params.__name__} but is "
                        f"registered with {entry.params.__name__}; set `Params = {entry.params.__name__}` on "
                        "the class")
    return cls


def _class_problem(cls: Any) -> str | None:
    """registry.class_problem on the imported class, its inherited methods included."""
    import inspect

    from hetfl.algorithms.base import Algorithm
    from hetfl.algorithms.registry import method_problem, name_problem

    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        what = f"class {cls.__qualname__}" if isinstance(cls, type) else f"a {type(cls).__name__}"
        return (f"{what} is not a subclass of hetfl.algorithms.base.Algorithm; allowed: a subclass (its "
                "hooks default to FedAvg's)")
    if not isinstance(inspect.getattr_static(cls, "name"), str):
        owner = next(k for k in cls.__mro__ if "name" in vars(k))
        return name_problem(owner.__qualname__)
    for klass in cls.__mro__[:cls.__mro__.index(Algorithm)]:
        for attr, value in vars(klass).items():
            if not inspect.isfunction(value) or getattr(cls, attr) is not getattr(klass, attr, None):
                continue  # not a plain method, or overridden further down
            params = [p for p in inspect.signature(value).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            required = sum(p.default is p.empty for p in params)
            varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(value).parameters.values())
            problem = method_problem(klass.__qualname__, (attr, tuple(p.name for p in params), required,
                                                          varargs))
            if problem:
                return problem
    return None


def make_algorithm(name: str, params: dict[str, Any] | None = None, **hyperparameters: Any) -> Algorithm:
    """An algorithm instance named as registered; `params` (a config's algorithm_params entry) is validated
    first."""
    hp = parse_hyperparameters(name, {**(params or {}), **hyperparameters}, key=f"algorithm_params.{name}")
    algorithm = algorithm_class(name)(**{k: getattr(hp, k) for k in hp.__dataclass_fields__})
    # the run's algorithm is the registered name: the engine checks the scheme under `name`, which a
    # plugin's subclass inherits from its base unless it sets its own (a FedNova subclass registered as an
    # AlgorithmEntry under a name of its own, allowing Scheme C, was refused C by its training job as FedNova)
    algorithm.name = name
    return algorithm


_LAZY = {"Algorithm": "hetfl.algorithms.base", "RoundInfo": "hetfl.algorithms.base",
         "Task": "hetfl.algorithms.base", "weighted_update": "hetfl.algorithms.base",
         "FedAvg": "hetfl.algorithms.fedavg"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hetfl.algorithms' has no attribute '{name}'")


__all__ = ["ALGORITHM_NAMES", "CATALOG", "ENTRY_POINT_GROUP", "AlgorithmEntry", "algorithm_class", "describe",
           "make_algorithm", "method_label", "parse_hyperparameters", *_LAZY]
