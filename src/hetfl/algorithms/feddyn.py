"""FedDyn (Acar et al. 2021), with the DESIGN table's server state h.

Local objective  f_k(θ) − ⟨g_k, θ⟩ + α/2‖θ − θ^{t−1}‖²  (g_k = ∇L_k(θ_k^{t−1}), the client's state),
so the local gradient gains  −g_k + α(θ − θ^{t−1}).
Client:   g_k ← g_k − α Δ_k                         (first-order condition of the local problem)
Server:   h ← h − α Σ_{k∈S} p^k Δ_k                 (uniform p^k = 1/m gives the paper's α/m·Σ Δ_k)
          θ ← γ − h/α,  γ = Σ_k ŵ_k θ_k             (ŵ: the scheme's weights normalised over the round;
                                                    the mean of the active clients' models under B)
Sign conventions: the released code keeps λ_k = −g_k/α and adds mean λ_k (= −h/α); the same update.
With data weights p^k the invariant h = Σ_k p^k g_k holds, so a fixed point solves Σ_k p^k ∇F_k = 0.
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
    deltas,
    expand,
    gather,
    normalized,
    scatter,
    weighted_sum,
    zeros_state,
)
from hetfl.algorithms.hparams import FedDynParams
from hetfl.engine import comm


class FedDyn(Algorithm):
    name = "feddyn"
    Params = FedDynParams

    @property
    def alpha(self) -> float:
        return self.hp.alpha

    def init_state(self, params: Params, num_devices: int) -> dict[str, Params]:
        return {"h": [torch.zeros_like(p) for p in params], "g": zeros_state(params, num_devices)}

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        return {"g": gather(state["g"], info.clients), "global": expand(params, len(info.clients))}

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return g - ctx["g"][i] + self.alpha * (w - ctx["global"][i])

    def sent(self, delta: Params) -> Params:
        return delta

    def state_decrement(self, sent: Tensor) -> Tensor:
        """How much a client's g_k drops for its sent update (Algorithm 3 adds λ1·sign)."""
        return self.alpha * sent

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        sent = self.sent(deltas(params, finals))
        mask = self.mask(len(params))
        dec = [self.state_decrement(s) if t else torch.zeros_like(s) for s, t in zip(sent, mask, strict=True)]
        g_new = [g - d for g, d in zip(gather(state["g"], info.clients), dec, strict=True)]
        h = [h - s for h, s in zip(state["h"], weighted_sum(dec, info.p[info.clients]), strict=True)]
        gamma = [x + s for x, s in zip(params, weighted_sum(sent, normalized(info.weights)), strict=True)]
        new = self.with_buffers([gm - hh / self.alpha for gm, hh in zip(gamma, h, strict=True)], finals, info)
        metrics = comm.round_metrics(up=sent, down=params, clients=len(info.clients))
        return new, {"h": h, "g": scatter(state["g"], info.clients, g_new)}, metrics
