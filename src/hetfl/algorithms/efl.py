"""EFL, Elastic Federated Learning (Ma et al. 2022, seed 000), Eq. (2)-(6) and Algorithms 1-2.

Local objective (Eq. 2-3): f_k(w) + λ/2 Σ_{i=1..N} (w − w_i)ᵀ diag(I_i) (w − w_i), whose gradient gains
    λ (u ⊙ w − v),   u = Σ_i diag(I_i),  v = Σ_i diag(I_i) ⊙ w_i,
summed over ALL devices' latest reports (the client's own included, as Eq. 2 sums i = 1..N).
Client (Alg. 1): starts from ŵ_k ← ŵ_k + ST(Δ_G^{τ−1}); Δ̃_k = R_k + (w_k − ŵ_k); sends ST(Δ̃_k),
    u_k = diag(I_k), v_k = diag(I_k) ⊙ w_k; keeps R_k = Δ̃_k − ST(Δ̃_k) (Eq. 5).
Server (Eq. 6): Δ_G = R_G + Σ_k p_τ^k ST(Δ̃_k);  w_G ← w_G + Δ_G;  broadcasts ST(Δ_G) and keeps
    R_G = Δ_G − ST(Δ_G).
p_τ^k is the scheme's weight: EFL's adaptive coefficient E·p^k/s_τ^k is Scheme C, the only scheme EFL
accepts (hparams.CATALOG). Who receives the broadcast (`broadcast`): "participants" (Alg. 1: "broadcasts
... to participants"), each device keeping its own ŵ_k, which misses the broadcasts of the rounds it sat
out; or "all", one ŵ shared by every device. The engine evaluates the server's exact w_G (global_model).
Buffers (BN running statistics) are neither compressed nor scaled: the server averages the clients' with
normalised weights and sends the exact values (base.average_buffers).
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
        state = {"server": [p.clone() for p in params], "rg": [torch.zeros_like(p) for p in params],
                 "rk": zeros_state(params, num_devices), "u": zeros_state(params, num_devices),
                 "v": zeros_state(params, num_devices)}
        if self.hp.broadcast == "participants":
            # ŵ_k, the model each device last trained from, and ST(Δ_G) of the last round, which the next
            # round's participants add to it
            state["held"] = [p.unsqueeze(0).repeat(num_devices, *([1] * p.dim())) for p in params]
            state["pending"] = [torch.zeros_like(p) for p in params]
        return state

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        k = len(info.clients)
        return {"u": expand([u.sum(0) for u in state["u"]], k),
                "v": expand([v.sum(0) for v in state["v"]], k)}

    def client_start(self, state: Any, params: Params, info: RoundInfo) -> Params | None:
        return self._starts(state, info) if "held" in state else None

    def _starts(self, state: Any, info: RoundInfo) -> Params:
        """Alg. 1, ω^k_τE = ω^k_(τ−1)E + ST(Δω^G_(τ−1)E) for the round's participants; buffers are the
        server's exact values."""
        held = gather(state["held"], info.clients)
        return [h + b.unsqueeze(0) if t else s.unsqueeze(0).expand_as(h).clone()
                for h, b, s, t in zip(held, state["pending"], state["server"], self.mask(len(held)),
                                      strict=True)]

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return g + self.hp.lam * (ctx["u"][i] * w - ctx["v"][i])

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        k, mask = len(info.clients), self.mask(len(params))
        trained = [i for i, t in enumerate(mask) if t]
        buffers = [i for i, t in enumerate(mask) if not t]
        starts = self._starts(state, info) if "held" in state else expand(params, k)
        delta = [f - s for s, f in zip(starts, finals, strict=True)]
        dense = comm.dense_bits(delta)
        sent, rk = list(delta), None  # buffers travel exactly
        if self.hp.compress:
            rk, rk_old = [torch.zeros_like(d) for d in delta], gather(state["rk"], info.clients)
            st, res, bits = comm.ternary_with_feedback([delta[i] for i in trained],
                                                       [rk_old[i] for i in trained], self.hp.q)
            for i, s, r in zip(trained, st, res, strict=True):
                sent[i], rk[i] = s, r
            # ST(Δ̃) of the trained entries, buffers and u_k, v_k as float32
            up_bits = float(bits.mean()) + comm.dense_bits([delta[i] for i in buffers]) + 2 * dense
        else:
            up_bits = 3 * dense
        fisher = client_fisher(self, finals, info, self.hp.fisher_samples)
        fw = [f * w for f, w in zip(fisher, finals, strict=True)]
        server = self.with_buffers(state["server"], finals, info)  # buffers: Σ_k ŵ_k b_k, exact
        dg = [r + s if t else b - w for r, s, t, b, w in zip(state["rg"], weighted_sum(sent, info.weights),
                                                             mask, server, state["server"], strict=True)]
        bc, rg, down_bits = list(dg), [torch.zeros_like(d) for d in dg], None
        if self.hp.compress:
            st, res, bits_down = comm.ternary_with_feedback([dg[i].unsqueeze(0) for i in trained],
                                                            [torch.zeros_like(dg[i]).unsqueeze(0)
                                                             for i in trained], self.hp.q)
            for i, s, r in zip(trained, st, res, strict=True):
                bc[i], rg[i] = s[0], r[0]
            down_bits = (float(bits_down[0]) + comm.dense_bits([dg[i] for i in buffers], stacked=False)
                         + 2 * comm.dense_bits(params, stacked=False))
        server = [w + d if t else b for w, d, t, b in zip(state["server"], dg, mask, server, strict=True)]
        down = bc + [u.sum(0) for u in state["u"]] + [v.sum(0) for v in state["v"]]
        metrics = comm.round_metrics(up=sent + fisher + fw, down=down, clients=k, up_bits=up_bits,
                                     down_bits=down_bits)
        new_state = {
            "server": server,
            "rg": rg,
            "rk": scatter(state["rk"], info.clients, rk) if rk is not None else state["rk"],
            "u": scatter(state["u"], info.clients, fisher),
            "v": scatter(state["v"], info.clients, fw),
        }
        if "held" in state:
            new_state.update(held=scatter(state["held"], info.clients, starts), pending=bc)
        # the model of a device that received every broadcast (ŵ); its buffers are the server's
        new = [w + b if t else s for w, b, t, s in zip(params, bc, mask, server, strict=True)]
        return new, new_state, metrics

    def global_model(self, state: Any, params: Params) -> Params:
        return state["server"]
