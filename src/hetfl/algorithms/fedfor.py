"""FedFOR (Tian, Smith, Kira 2022, seed 003): stateless first-order regularisation, Eq. (7).

    L*_k(w) = L_k(w) + (α/η) Σ_i U((w_i^{t−2} − w_i^{t−1})(w_i − w_i^{t−1})),  U(x) = max(x, 0),
so with d = w^{t−2} − w^{t−1} the local gradient gains (α/η)·d ⊙ 1[d ⊙ (w − w^{t−1}) > 0]: only local
moves against the previous global update are penalised. At the kink (x = 0, e.g. the first local step)
the zero subgradient is taken. η is the round's learning rate. Round 1 (no w^{t−2}) trains plain SGD.
The server keeps w^{t−1} and w^{t−2} and broadcasts both; it aggregates as FedAvg with the scheme's
weights (the paper's plain mean under Scheme B with equal data and every client active).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from hetfl.algorithms.base import Algorithm, Context, Params, RoundInfo, deltas, expand, weighted_update
from hetfl.algorithms.fedprox import prox_context
from hetfl.algorithms.hparams import FedForParams
from hetfl.engine import comm


class FedFor(Algorithm):
    name = "fedfor"
    Params = FedForParams

    def init_state(self, params: Params, num_devices: int) -> dict[str, Params | None]:
        return {"prev": None}  # w^{t−2}

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        if state["prev"] is None:
            return {}
        ctx = prox_context(params, info)  # w^{t−1} and η
        ctx["d"] = expand([a - b for a, b in zip(state["prev"], params, strict=True)], len(info.clients))
        return ctx

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        if "d" not in ctx:  # the first round: no w^{t-2} yet
            return g
        d = ctx["d"][i]
        scale = (self.hp.alpha / ctx["eta"][0]).view(-1, *([1] * (w.dim() - 1)))
        return g + scale * d * (d * (w - ctx["global"][i]) > 0)

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        down = params + (state["prev"] or [])
        metrics = comm.round_metrics(up=deltas(params, finals), down=down, clients=len(info.clients))
        new = self.with_buffers(weighted_update(params, finals, info.weights), finals, info)
        return new, {"prev": params}, metrics
