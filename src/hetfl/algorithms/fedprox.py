"""FedProx (Li et al. 2020): local objective F_k(w) + μ/2‖w − w_g‖², server as FedAvg (with the scheme).

prox_step = "gradient" adds μ(w − w_g) to every local gradient (FedProx's PerturbedGradientDescent).
prox_step = "proximal" takes the quadratic term implicitly: the step w⁺ = argmin ⟨g, v⟩ + ‖v − w‖²/(2η)
+ μ/2‖v − w_g‖² = (w − ηg + ημ w_g)/(1 + ημ), i.e. the gradient (g + μ(w − w_g))/(1 + ημ); it is stable
for every μ and keeps the client at w_g as μ → ∞.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from hetfl.algorithms.base import Algorithm, Context, Params, RoundInfo, expand
from hetfl.algorithms.hparams import FedProxParams


def prox_context(params: Params, info: RoundInfo) -> Context:
    """What a proximal correction needs: the broadcast model and the round's learning rate, per client."""
    k = len(info.clients)
    return {"global": expand(params, k), "eta": [torch.full((k,), info.lr, dtype=params[0].dtype,
                                                             device=params[0].device)]}


class FedProx(Algorithm):
    name = "fedprox"
    Params = FedProxParams

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        return prox_context(params, info)

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        mu = self.hp.mu
        d = g + mu * (w - ctx["global"][i])
        if self.hp.prox_step == "proximal":
            eta = ctx["eta"][0].view(-1, *([1] * (w.dim() - 1)))
            d = d / (1 + eta * mu)
        return d
