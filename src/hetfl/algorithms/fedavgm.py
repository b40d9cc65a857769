"""FedAvgM, FedAvg with server momentum (Hsu, Qi, Brown 2019, "Measuring the effects of non-identical
data distribution for federated visual classification", Algorithm 1 with server momentum β):

    u ← Σ_k p_τ^k Δ_k           (the round's averaged update; the scheme's weights)
    m ← β m + u
    w ← w + η_s m

Hsu et al. write it with the pseudo-gradient Δw = −u: v ← βv + Δw, w ← w − v (η_s = 1). β = 0 and η_s = 1
give FedAvg. Momentum acts on trained entries only; buffers (batch-norm statistics) take the clients'
normalised average (base.Algorithm.with_buffers). A round in which no client's update is used (Scheme A
with no complete device) leaves m unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from hetfl.algorithms.base import Algorithm, Params, RoundInfo, deltas, weighted_sum
from hetfl.algorithms.hparams import FedAvgMParams
from hetfl.engine import comm


class FedAvgM(Algorithm):
    name = "fedavgm"
    Params = FedAvgMParams

    def init_state(self, params: Params, num_devices: int) -> dict[str, Params]:
        return {"m": [torch.zeros_like(p) for p in params]}

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        delta = deltas(params, finals)
        u = weighted_sum(delta, info.weights)
        trained = self.mask(len(params))
        m = [self.hp.beta * m + s if t else m for m, s, t in zip(state["m"], u, trained, strict=True)]
        new = self.with_buffers([w + self.hp.server_lr * v if t else w
                                 for w, v, t in zip(params, m, trained, strict=True)], finals, info)
        return new, {"m": m}, comm.round_metrics(up=delta, down=params, clients=len(info.clients))
