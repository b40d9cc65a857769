"""FedElasticNet (seed 004): ℓ2 and ℓ1 penalties on the local update, ε-thresholding of what is sent.

Local objective (Eq. 4): L_k(θ) + λ2/2‖θ − θ^{t−1}‖² + λ1‖θ − θ^{t−1}‖₁; the ℓ1 term enters SGD as its
sign subgradient λ1·sign(θ − θ^{t−1}) (Eq. 7), zero at θ = θ^{t−1}. A client sends Δ_k with every entry
|Δ_k(i)| ≤ ε set to 0 (§3). Three integrations:
  fedelasticnet        Algorithm 1, FedAvg/FedProx: θ ← θ^{t−1} + Σ_k p_τ^k Δ̃_k (n_k/n under Scheme B).
  scaffold_elasticnet  Algorithm 2: SCAFFOLD's local step gains λ2(θ − θ^{t−1}) + λ1 sign(θ − θ^{t−1});
                       control variates use the client's actual model, the server the thresholded Δ̃.
  feddyn_elasticnet    Algorithm 3: FedDyn with α = λ2; g_k ← g_k − λ2 Δ̃_k − λ1 sign(Δ̃_k) and
                       h ← h − Σ p^k (λ2 Δ̃_k + λ1 sign(Δ̃_k)) (Alg. 3 lines 5 and 11, 1/m for uniform
                       p^k). Client and server both use the sent Δ̃ so that h = Σ_k p^k g_k stays exact.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from hetfl.algorithms.base import Algorithm, Context, Params, RoundInfo, deltas, expand, weighted_update
from hetfl.algorithms.feddyn import FedDyn
from hetfl.algorithms.fedprox import prox_context
from hetfl.algorithms.hparams import ElasticNetParams, FedDynElasticNetParams, ScaffoldElasticNetParams
from hetfl.algorithms.scaffold import Scaffold
from hetfl.engine import comm


def threshold(delta: Params, epsilon: float) -> Params:
    """Δ with every entry |Δ(i)| ≤ ε zeroed."""
    return [d * (d.abs() > epsilon) for d in delta]


def elastic_grad(w: Tensor, w0: Tensor, lambda1: float, lambda2: float) -> Tensor:
    """λ2 (w − w0) + λ1 sign(w − w0)."""
    diff = w - w0
    return lambda2 * diff + lambda1 * torch.sign(diff)


class FedElasticNet(Algorithm):
    name = "fedelasticnet"
    Params = ElasticNetParams

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        return prox_context(params, info)

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return g + elastic_grad(w, ctx["global"][i], self.hp.lambda1, self.hp.lambda2)

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        sent = threshold(deltas(params, finals), self.hp.epsilon)
        new = weighted_update(params, [p.unsqueeze(0) + s for p, s in zip(params, sent, strict=True)],
                              info.weights)
        new = self.with_buffers(new, finals, info)  # buffers: averaged exactly, not thresholded
        return new, state, comm.round_metrics(up=sent, down=params, clients=len(info.clients))


class ScaffoldElasticNet(Scaffold):
    name = "scaffold_elasticnet"
    Params = ScaffoldElasticNetParams

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        ctx = super().client_context(state, params, info)
        ctx["global"] = expand(params, len(info.clients))
        return ctx

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return super().correct_entry(i, w, g, ctx) + elastic_grad(w, ctx["global"][i], self.hp.lambda1,
                                                                  self.hp.lambda2)

    def sent(self, delta: Params) -> Params:
        return threshold(delta, self.hp.epsilon)


class FedDynElasticNet(FedDyn):
    name = "feddyn_elasticnet"
    Params = FedDynElasticNetParams

    @property
    def alpha(self) -> float:
        return self.hp.lambda2

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return super().correct_entry(i, w, g, ctx) + self.hp.lambda1 * torch.sign(w - ctx["global"][i])

    def sent(self, delta: Params) -> Params:
        return threshold(delta, self.hp.epsilon)

    def state_decrement(self, sent: Tensor) -> Tensor:
        return self.hp.lambda2 * sent + self.hp.lambda1 * torch.sign(sent)
