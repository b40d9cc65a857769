"""FedCurv (Shoham et al. 2019), as OpenFL implements it.

Client k's local objective: f_k(w) + λ Σ_{j≠k} (w − w_j)ᵀ diag(F_j) (w − w_j); with u = Σ_j F_j and
v = Σ_j F_j ⊙ w_j over all devices (each device's latest report), its gradient gains
    2λ[(u − u_k) ⊙ w − (v − v_k)],
the client's own terms u_k = F_k, v_k = F_k ⊙ w_k excluded. After local training each client computes the
diagonal empirical Fisher F_k at its final model (engine.fisher) and sends Δ_k, F_k and F_k ⊙ w_k; the
server SUMS u and v over devices (not averages) and updates w as FedAvg with the scheme's weights.
"""

from __future__ import annotations

from typing import Any

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
    weighted_update,
    zeros_state,
)
from hetfl.algorithms.hparams import FedCurvParams
from hetfl.engine import comm
from hetfl.engine.fisher import fisher_diagonal


def client_fisher(algorithm: Algorithm, finals: Params, info: RoundInfo, max_samples: int) -> Params:
    """Each round client's Fisher diagonal at its final model, [K, ...]."""
    task = algorithm.task
    if task is None:
        raise RuntimeError(f"{algorithm.name} needs the training data: call setup(Task(...)) first")
    return fisher_diagonal(task.model, finals, task.x_train, task.y_train, task.offsets, info.clients,
                           max_samples)


class FedCurv(Algorithm):
    name = "fedcurv"
    Params = FedCurvParams

    def init_state(self, params: Params, num_devices: int) -> dict[str, Params]:
        return {"u": zeros_state(params, num_devices), "v": zeros_state(params, num_devices)}

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        k = len(info.clients)
        u_all = expand([u.sum(0) for u in state["u"]], k)
        v_all = expand([v.sum(0) for v in state["v"]], k)
        uk, vk = gather(state["u"], info.clients), gather(state["v"], info.clients)
        return {"du": [a - b for a, b in zip(u_all, uk, strict=True)],
                "dv": [a - b for a, b in zip(v_all, vk, strict=True)]}

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return g + 2 * self.hp.lam * (ctx["du"][i] * w - ctx["dv"][i])

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        fisher = client_fisher(self, finals, info, self.hp.fisher_samples)
        fw = [f * w for f, w in zip(fisher, finals, strict=True)]
        new_state = {"u": scatter(state["u"], info.clients, fisher),
                     "v": scatter(state["v"], info.clients, fw)}
        delta = deltas(params, finals)
        down = params + [u.sum(0) for u in state["u"]] + [v.sum(0) for v in state["v"]]
        metrics = comm.round_metrics(up=delta + fisher + fw, down=down, clients=len(info.clients))
        new = self.with_buffers(weighted_update(params, finals, info.weights), finals, info)
        return new, new_state, metrics
