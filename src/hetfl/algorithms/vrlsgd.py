"""VRL-SGD, variance-reduced local SGD (Liang et al. 2019, arXiv 1912.12844, Algorithm 1).

Every device keeps a correction Δ_k (0 before its first synchronisation, when VRL-SGD is local SGD):

    local step:  x_k ← x_k − γ (∇f_k(x_k; ξ) − Δ_k)
    sync:        x̂ = the average of the x_k;  Δ_k ← Δ_k + (x̂ − x_k)/(kγ);  x_k ← x̂

With equal periods k and the plain mean, (x̂ − x_k)/(kγ) = d_k − mean_j d_j, where
d_k = (x̂_old − x_k)/(kγ) = mean(∇f_k − Δ_k) is the device's mean step direction; so Δ_k becomes the mean
of ∇f_k − ∇f and the corrected steps all follow ∇f. hetfl writes the update in that per-step form, which
stays exact when devices do different numbers of steps:

    Δ_k ← Δ_k + d_k − d̄,   d_k = (x̂_old − x_k)/(τ_k γ),   d̄ = Σ_j p̂_j d_j over the round's devices,
                                                            p̂ their data weights normalised over the round

τ_k = the steps device k did (`period: done`) or a complete round's (`period: full`); γ = the round's
learning rate. Server: x̂ = x̂_old + Σ_k p_τ^k (x_k − x̂_old), the scheme's weights (the paper's mean under
Scheme B with equal data). Devices outside the round keep their Δ_k. The released code
(zerolxf/VRL-SGD, DistributedSgd.py) does the same: vrl_buff += (x̂ − x_k)/(lr·period).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from hetfl.algorithms.base import (
    Algorithm,
    Context,
    Params,
    RoundInfo,
    coef,
    deltas,
    gather,
    normalized,
    scatter,
    weighted_sum,
    weighted_update,
    zeros_state,
)
from hetfl.algorithms.hparams import VrlSgdParams
from hetfl.engine import comm


def tracking_update(correction: Params, sent: Params, steps: np.ndarray, lr: float, p: np.ndarray,
                    trained: tuple[bool, ...]) -> Params:
    """c_k + d_k − d̄ for the round's clients [K, ...]: the gradient-tracking correction that VRL-SGD (Δ_k)
    and FedGATE (δ_k) subtract from every local gradient. d_k = −sent_k/(τ_k η) is client k's mean step
    direction (sent_k = its update x_k − x̂_old, or what it sent of it) and d̄ = Σ_j p̂_j d_j with p̂ the data
    weights normalised over the round. Buffers (untrained entries) carry no correction."""
    out = []
    weights = normalized(p)
    for c, s, t in zip(correction, sent, trained, strict=True):
        if not t:
            out.append(torch.zeros_like(c))
            continue
        d = -s / coef(steps * lr, s)
        out.append(c + d - weighted_sum([d], weights)[0].unsqueeze(0))
    return out


class VRLSGD(Algorithm):
    name = "vrlsgd"
    Params = VrlSgdParams

    def init_state(self, params: Params, num_devices: int) -> dict[str, Params]:
        return {"delta": zeros_state(params, num_devices)}

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        return {"delta": gather(state["delta"], info.clients)}

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return g - ctx["delta"][i]

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        delta = deltas(params, finals)
        steps = info.done if self.hp.period == "done" else info.full
        new_delta = tracking_update(gather(state["delta"], info.clients), delta, steps, info.lr,
                                    info.p[info.clients], self.mask(len(params)))
        new = weighted_update(params, finals, info.weights)
        metrics = comm.round_metrics(up=delta, down=params, clients=len(info.clients))
        new = self.with_buffers(new, finals, info)  # buffers: the clients' normalised average
        return new, {"delta": scatter(state["delta"], info.clients, new_delta)}, metrics
