"""The shape every algorithm fits: four hooks over tensors stacked on the client axis.

The engine owns the loops. Per round it asks the algorithm for per-client tensors (`client_context`,
e.g. SCAFFOLD's c − c_k), hands `correct` to batched local SGD as a change of the local gradient, and
lets `aggregate` turn the clients' final parameters into the next global model (and new state).
Algorithms never loop over clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from torch import Tensor


@dataclass(frozen=True)
class RoundInfo:
    """What the engine knows about round τ when it calls the algorithm (arrays over the round's clients)."""

    tau: int
    lr: float
    clients: np.ndarray  # int64 [K]: ids of the clients that train this round
    done: np.ndarray  # int64 [K]: local steps each completed
    full: np.ndarray  # int64 [K]: steps of a complete round, E·⌈n_k/B⌉
    weights: np.ndarray  # float64 [K]: the scheme's p_τ^k (Ruan et al. Scheme A/B/C)
    p: np.ndarray  # float64 [N]: data weights p^k = n_k/n of ALL devices
    discarded: bool = False  # Scheme A with no complete device: the round changes nothing


class Algorithm:
    """Base class: FedAvg behaviour; subclasses override what their paper changes."""

    name: ClassVar[str] = "base"
    paper: ClassVar[str] = ""

    def init_state(self, params: list[Tensor], num_devices: int) -> Any:
        """Server and client state (client state as tensors over ALL devices)."""
        return None

    def client_context(self, state: Any, params: list[Tensor], info: RoundInfo) -> dict[str, list[Tensor]]:
        """Per-client tensors stacked [K, ...] in the order of info.clients, passed to `correct`."""
        return {}

    # correct(params, grads, ctx) -> grads, or None for plain SGD (lets models use a fused step)
    correct = None

    def aggregate(self, state: Any, params: list[Tensor], finals: list[Tensor], info: RoundInfo
                  ) -> tuple[list[Tensor], Any, dict[str, float]]:
        """New global params, new state and per-round metrics (communication etc.)."""
        return weighted_update(params, finals, info.weights), state, {}


def weighted_update(params: list[Tensor], finals: list[Tensor], weights: np.ndarray) -> list[Tensor]:
    """Ruan et al. Eq. (2): w ← w + Σ_k p_τ^k (w_k − w)."""
    import torch

    out = []
    for g, f in zip(params, finals, strict=True):
        w = torch.as_tensor(weights, dtype=g.dtype, device=g.device)
        out.append(g + torch.tensordot(w, f - g, dims=1))
    return out
