"""EFL, Elastic Federated Learning (Ma et al. 2022, seed 000), Eq. (2)-(6) and Algorithms 1-2.

Local objective (Eq. 2-3): f_k(w) + λ/2 Σ_{i=1..N} (w − w_i)ᵀ diag(I_i) (w − w_i), whose gradient gains
    λ (u ⊙ w − v),   u = Σ_i diag(I_i),  v = Σ_i diag(I_i) ⊙ w_i,
summed over ALL devices' latest reports (the client's own included, as Eq. 2 sums i = 1..N).
Client (Alg. 1): Δ̃_k = R_k + (w_k − ŵ); sends ST(Δ̃_k), u_k = diag(I_k), v_k = diag(I_k) ⊙ w_k;
    keeps R_k = Δ̃_k − ST(Δ̃_k) (Eq. 5).
Server (Eq. 6): Δ_G = R_G + Σ_k p_τ^k ST(Δ̃_k);  w_G ← w_G + Δ_G;  broadcasts ST(Δ_G) and keeps
    R_G = Δ_G − ST(Δ_G). Every client holds ŵ ← ŵ + ST(Δ_G) and trains from it.
p_τ^k is the scheme's weight: EFL's adaptive coefficient E·p^k/s_τ^k is Scheme C.
The engine evaluates the server's exact model w_G (global_model); ŵ is what the clients hold.
ST ranks by magnitude (engine.comm.ternary_compress says why).
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
    scatter,
    weighted_sum,
    zeros_state,
)
from hetfl.algorithms.fedcurv import client_fisher
from hetfl.algorithms.hparams import EflParams
from hetfl.engine import comm


class EFL(Algorithm):
    name = "efl"
    Params = EflParams

    def init_state(self, params: Params, num_devices: int) -> dict[str, Any]:
        return {"server": [p.clone() for p in params], "rg": [torch.zeros_like(p) for p in params],
                "rk": zeros_state(params, num_devices), "u": zeros_state(params, num_devices),
                "v": zeros_state(params, num_devices)}

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        k = len(info.clients)
        return {"u": expand([u.sum(0) for u in state["u"]], k),
                "v": expand([v.sum(0) for v in state["v"]], k)}

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return g + self.hp.lam * (ctx["u"][i] * w - ctx["v"][i])

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        k = len(info.clients)
        delta = deltas(params, finals)
        dense = comm.dense_bits(delta)
        if self.hp.compress:
            sent, rk, bits = comm.ternary_with_feedback(delta, gather(state["rk"], info.clients), self.hp.q)
            up_bits = float(bits.mean()) + 2 * dense  # ST(Δ̃) plus u_k, v_k as float32
        else:
            sent, rk, up_bits = delta, None, 3 * dense
        fisher = client_fisher(self, finals, info, self.hp.fisher_samples)
        fw = [f * w for f, w in zip(fisher, finals, strict=True)]
        dg = [r + s for r, s in zip(state["rg"], weighted_sum(sent, info.weights), strict=True)]
        if self.hp.compress:
            bc, rg, bits_down = comm.ternary_with_feedback([d.unsqueeze(0) for d in dg],
                                                           [torch.zeros_like(d).unsqueeze(0) for d in dg],
                                                           self.hp.q)
            bc, rg = [b[0] for b in bc], [r[0] for r in rg]
            down_bits = float(bits_down[0]) + 2 * comm.dense_bits(params, stacked=False)
        else:
            bc, rg, down_bits = dg, [torch.zeros_like(d) for d in dg], None
        down = bc + [u.sum(0) for u in state["u"]] + [v.sum(0) for v in state["v"]]
        metrics = comm.round_metrics(up=sent + fisher + fw, down=down, clients=k, up_bits=up_bits,
                                     down_bits=down_bits)
        new_state = {
            "server": [w + d for w, d in zip(state["server"], dg, strict=True)],
            "rg": rg,
            "rk": scatter(state["rk"], info.clients, rk) if rk is not None else state["rk"],
            "u": scatter(state["u"], info.clients, fisher),
            "v": scatter(state["v"], info.clients, fw),
        }
        return [w + b for w, b in zip(params, bc, strict=True)], new_state, metrics

    def global_model(self, state: Any, params: Params) -> Params:
        return state["server"]
