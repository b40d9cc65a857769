"""FedNova (Wang et al. 2020; lecture notes, seed 001): normalised averaging.

Server:  x ← x + τ_eff · Σ_i ŵ_i Δ_i / a_i,   τ_eff = Σ_i ŵ_i a_i,
with ŵ the scheme's weights normalised over the round's clients (the data fractions p_i under Scheme B
with every device active) and a_i the client's normaliser ‖a^{(i)}‖₁:
  plain SGD                a_i = τ_i, the steps the client actually did (info.done);
  momentum ρ               a_i = Σ_{t=1..τ_i} (1 − ρ^t)/(1 − ρ);
  proximal μ (step η)      a_i = [1 − (1 − ημ)^τ_i]/(ημ);
computed by the released code's per-step recursion, which also covers momentum and μ together.
tau_eff = "official_code" uses Σ ŵ_i τ_i when μ ≠ 0, as FedNova's released code does.
Local steps with momentum: buf ← ρ·buf + g, d = buf + μ(w − w_g), w ← w − η d (buffers reset every round).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from hetfl.algorithms.base import Algorithm, Context, Params, RoundInfo, coef, deltas, expand, normalized
from hetfl.algorithms.hparams import FedNovaParams
from hetfl.engine import comm


def normalizer(steps: np.ndarray, lr: float, mu: float = 0.0, momentum: float = 0.0) -> np.ndarray:
    """a_i for each client from its step count (FedNova's released recursion, one update per step)."""
    steps = np.asarray(steps, dtype=np.int64)
    if mu == 0 and momentum == 0:
        return steps.astype(np.float64)
    etamu = lr * mu
    a = np.zeros(len(steps))
    counter = np.zeros(len(steps))
    for t in range(int(steps.max()) if len(steps) else 0):
        live = steps > t  # clients still stepping: a loop over steps, vectorised over clients
        if momentum != 0:
            counter = np.where(live, counter * momentum + 1, counter)
            a = np.where(live, a + counter, a)
        if etamu != 0:
            a = np.where(live, a * (1 - etamu) + 1, a)
    return a


class FedNova(Algorithm):
    name = "fednova"
    Params = FedNovaParams

    def __init__(self, **hyperparameters: Any) -> None:
        super().__init__(**hyperparameters)
        if self.hp.mu == 0 and self.hp.momentum == 0:
            self.corrects = False  # plain SGD: the engine may use the model's fused step

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        k = len(info.clients)
        ctx: Context = {}
        if self.hp.mu:
            ctx["global"] = expand(params, k)
        if self.hp.momentum:
            ctx["buf"] = [torch.zeros((k, *p.shape), dtype=p.dtype, device=p.device) for p in params]
        return ctx

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        d = g
        if self.hp.momentum:
            buf = ctx["buf"][i]
            buf.mul_(self.hp.momentum).add_(g)  # in place: the buffer lives through the round
            d = buf.clone()
        if self.hp.mu:
            d = d + self.hp.mu * (w - ctx["global"][i])
        return d

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        a = normalizer(info.done, info.lr, self.hp.mu, self.hp.momentum)
        w = normalized(info.weights)
        steps = info.done if (self.hp.tau_eff == "official_code" and self.hp.mu) else a
        tau_eff = float(np.sum(w * steps))
        delta = deltas(params, finals)
        new = [x + tau_eff * torch.tensordot(coef(w / a, d).reshape(-1), d, dims=1)
               for x, d in zip(params, delta, strict=True)]
        new = self.with_buffers(new, finals, info)  # buffers: a plain normalised average
        # each client also sends its a_i (one float), counted in every measure, not only in bytes_up
        a_sent = torch.as_tensor(a, dtype=delta[0].dtype, device=delta[0].device).view(-1, 1)
        metrics = comm.round_metrics(up=[*delta, a_sent], down=params, clients=len(info.clients))
        return new, state, {**metrics, "tau_eff": tau_eff}
