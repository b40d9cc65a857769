"""SCAFFOLD (Karimireddy et al. 2020), option II control variates.

Local step:  y ← y − η (g(y) − c_k + c)
Client:      c_k⁺ = c_k − c + (x − y_k)/(K_k·η),  K_k = the steps this client actually did (info.done)
Server:      x ← x + η_g·Σ_k p_τ^k Δy_k   (the scheme's weights; full participation, Scheme B and equal
             data give η_g·mean Δy, the paper's rule)
             c ← c + Σ_{k∈S} p^k Δc_k     (uniform p^k = 1/N gives the paper's (|S|/N)·mean Δc; with data
             weights c stays Σ_k p^k c_k, the gradient of the weighted objective F = Σ p^k F_k)
Control variates live on trained entries only (buffers are averaged as by FedAvg).
"""

from __future__ import annotations

from typing import Any

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
    scatter,
    weighted_sum,
    zeros_state,
)
from hetfl.algorithms.hparams import ScaffoldParams
from hetfl.engine import comm


class Scaffold(Algorithm):
    name = "scaffold"
    Params = ScaffoldParams

    def init_state(self, params: Params, num_devices: int) -> dict[str, Params]:
        return {"c": [torch.zeros_like(p) for p in params], "ck": zeros_state(params, num_devices)}

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        ck = gather(state["ck"], info.clients)
        return {"drift": [c.unsqueeze(0) - k for c, k in zip(state["c"], ck, strict=True)]}

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return g + ctx["drift"][i]

    def sent(self, delta: Params) -> Params:
        """What a client sends of its update (FedElasticNet thresholds it)."""
        return delta

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        delta = deltas(params, finals)
        ck = gather(state["ck"], info.clients)
        # (x − y_k)/(K_k η) with K_k the steps actually done
        scale = [coef(info.done * info.lr, d) for d in delta]
        ck_new = [k - c.unsqueeze(0) - d / s if t else torch.zeros_like(k)
                  for k, c, d, s, t in zip(ck, state["c"], delta, scale, self.mask(len(params)), strict=True)]
        dc = [a - b for a, b in zip(ck_new, ck, strict=True)]
        sent = self.sent(delta)
        step = weighted_sum(sent, info.weights)
        new = self.with_buffers([x + self.hp.global_lr * s for x, s in zip(params, step, strict=True)],
                                finals, info)
        c_new = [c + s for c, s in zip(state["c"], weighted_sum(dc, info.p[info.clients]), strict=True)]
        mask = self.mask(len(params))  # buffers carry no control variate: nothing to send for them
        up = sent + [d for d, t in zip(dc, mask, strict=True) if t]
        down = params + [c for c, t in zip(state["c"], mask, strict=True) if t]
        metrics = comm.round_metrics(up=up, down=down, clients=len(info.clients))
        return new, {"c": c_new, "ck": scatter(state["ck"], info.clients, ck_new)}, metrics
