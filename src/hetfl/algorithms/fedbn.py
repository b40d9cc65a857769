"""FedBN (Li et al. 2021): batch-norm entries stay on the clients; everything else is FedAvg.

Which entries are local: the model's `local_mask` (one flag per parameter entry) when it has one; for a
LayerNet without it, every entry of its BatchNorm layers (weights, biases and running statistics),
those inside a composite layer's `parts` too (the batch-norm ResNets' residual blocks); otherwise none
(FedBN is then FedAvg). Local entries live in per-device state [N, ...], initialised to
the initial model's; each client trains from the shared entries of w and its own local entries and
sends Δ of the shared entries only. The global model the engine evaluates carries, in its local entries,
the data-weighted mean Σ_k p^k of all devices' local entries (a global BN for pooled evaluation); the
per-device accuracies behind mean_client_accuracy use each device's own BN entries (client_models).
"""

from __future__ import annotations

from typing import Any

import torch

from hetfl.algorithms.base import (
    Algorithm,
    Params,
    RoundInfo,
    expand,
    gather,
    normalized,
    scatter,
    weighted_sum,
)
from hetfl.engine import comm


def _leaves(layer: Any) -> list[Any]:
    """The layer, or the layers a composite layer (models.blocks.Residual) is made of, in entry order."""
    parts = getattr(layer, "parts", None)
    return [leaf for part in parts for leaf in _leaves(part)] if parts else [layer]


def local_mask(model: Any, n: int) -> tuple[bool, ...]:
    """Per-entry flags of the parameters that stay local (batch norm)."""
    flags = getattr(model, "local_mask", None)
    if flags is not None:
        return tuple(bool(f) for f in flags)
    layers = getattr(model, "layers", None)
    if layers is not None:
        # a residual block's batch norms are the block's entries: looked for in its parts, or the
        # batch-norm ResNet would keep only its stem's BN local
        out = [type(leaf).__name__.startswith("BatchNorm") for layer in layers for leaf in _leaves(layer)
               for _ in getattr(leaf, "shapes", ())]
        if len(out) == n:
            return tuple(out)
    return (False,) * n


class FedBN(Algorithm):
    name = "fedbn"

    def local(self, n: int) -> tuple[bool, ...]:
        return local_mask(self.task.model if self.task is not None else None, n)

    def init_state(self, params: Params, num_devices: int) -> dict[int, torch.Tensor]:
        return {i: p.unsqueeze(0).repeat(num_devices, *([1] * p.dim())).clone()
                for i, (p, loc) in enumerate(zip(params, self.local(len(params)), strict=True)) if loc}

    def client_start(self, state: Any, params: Params, info: RoundInfo) -> Params | None:
        if not state:
            return None
        k = len(info.clients)
        return [gather([state[i]], info.clients)[0] if i in state else e.contiguous()
                for i, e in enumerate(expand(params, k))]

    def client_models(self, state: Any, params: Params) -> Params | None:
        """FedBN's own evaluation (Li et al. 2021, §5): each device with its local BN entries."""
        if not state:
            return None
        n = next(iter(state.values())).shape[0]
        return [state[i] if i in state else e for i, e in enumerate(expand(params, n))]

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        shared = [i for i in range(len(params)) if i not in state]
        delta = {i: finals[i] - params[i].unsqueeze(0) for i in shared}
        step = dict(zip(shared, weighted_sum([delta[i] for i in shared], info.weights), strict=True))
        new_state = {i: scatter([s], info.clients, [finals[i]])[0] for i, s in state.items()}
        p = normalized(info.p)  # the objective's coefficients may not sum to 1 (events)
        new = [params[i] + step[i] if i in step else weighted_sum([new_state[i]], p)[0]
               for i in range(len(params))]
        new = self.with_buffers(new, finals, info, keep=tuple(i in state for i in range(len(params))))
        metrics = comm.round_metrics(up=[delta[i] for i in shared], down=[params[i] for i in shared],
                                     clients=len(info.clients))
        return new, new_state, metrics
