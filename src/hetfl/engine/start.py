"""Local training from per-client starting points (FedBN's local batch norm), for any local trainer.

A trainer that accepts `start` (the per-client oracle does) gets it directly. For one that does not,
e.g. engine.local.local_sgd, which starts every client from the broadcast params, the model is wrapped
so that its first call writes each client's start into the stacked parameters in place, before any
gradient is taken. That relies on two documented properties of local_sgd: clients are stacked sorted by
their step count (descending, stable), and the model is first called on the whole stack (every client of
a round has at least one step). tests/test_algorithms.py checks the result against the oracle; once
local_sgd takes `start` itself, this wrapper is no longer used.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor


class _StartAt:
    """A model whose first call (on the whole stack, in local_sgd's sorted order) sets the starts."""

    def __init__(self, model: Any, start_sorted: list[Tensor]) -> None:
        self._model = model
        self._start = start_sorted
        self._pending = True

    def _init(self, params: list[Tensor]) -> None:
        if self._pending:
            if params[0].shape[0] != self._start[0].shape[0]:
                raise RuntimeError("local trainer did not start with every client on the stack")
            for p, s in zip(params, self._start, strict=True):
                p.copy_(s)
            self._pending = False

    def grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        self._init(params)
        return self._model.grads(params, x, y)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._model, name)
        if name == "sgd_step":
            def sgd_step(params: list[Tensor], x: Tensor, y: Tensor, lr: float) -> None:
                self._init(params)
                attr(params, x, y, lr)
            return sgd_step
        return attr


def train_from(local_trainer: Callable[..., list[Tensor]], start: list[Tensor] | None, model: Any,
               params: list[Tensor], x_train: Tensor, y_train: Tensor, batch_idx: np.ndarray,
               steps: np.ndarray, lr: float, **kwargs: Any) -> list[Tensor]:
    """local_trainer(model, params, ...) with client k starting from start[i][k] (None: from params)."""
    if start is None:
        return local_trainer(model, params, x_train, y_train, batch_idx, steps, lr, **kwargs)
    if "start" in inspect.signature(local_trainer).parameters:
        return local_trainer(model, params, x_train, y_train, batch_idx, steps, lr, start=start, **kwargs)
    order = torch.from_numpy(np.argsort(-np.asarray(steps), kind="stable")).to(start[0].device)
    wrapped = _StartAt(model, [s.index_select(0, order) for s in start])
    return local_trainer(wrapped, params, x_train, y_train, batch_idx, steps, lr, **kwargs)
