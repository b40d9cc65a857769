"""APFL, Adaptive Personalized Federated Learning (Deng, Kamani, Mahdavi 2020, arXiv 2003.13461):
Algorithm 1 (local descent APFL) with the adaptive mixing weight α (§ "Adaptive α").

Every device keeps a personal model v_k and a mixing weight α_k besides its copy w_k of the global model;
its personalised model is v̄_k = α_k v_k + (1 − α_k) w_k. Each local step, on one minibatch ξ and from the
values before the step:

    w_k ← w_k − η ∇f_k(w_k; ξ)
    v_k ← v_k − η ∇_v f_k(v̄_k; ξ) = v_k − η α_k ∇f_k(v̄_k; ξ)
    α_k ← Π_[0,1](α_k − η_α ∇_α f_k(v̄_k; ξ)),   ∇_α f_k(v̄_k) = ⟨v_k − w_k, ∇f_k(v̄_k; ξ)⟩,  η_α = s·η

Server: w ← w + Σ_k p_τ^k (w_k − w), the paper's mean of the selected devices' w_k under Scheme B with
equal data; only w_k travels, v_k and α_k never leave the device. A device is scored with its
personalised model α_k v_k + (1 − α_k) w (the paper's output v̄_k with the latest global w; client_models),
the pooled metrics with the global w.

Engine: the three are trained as one stack [w (n entries), v (n entries), α] by a model wrapper
(`local_model`) whose gradient covers all of them; the projection onto [0, 1] of an α step is applied
before the next step's gradient and at aggregation (projected SGD). Batch-norm running statistics of v
follow the forward pass of the mixture.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from hetfl.algorithms.base import (
    Algorithm,
    Params,
    RoundInfo,
    deltas,
    expand,
    gather,
    scatter,
    weighted_update,
)
from hetfl.algorithms.hparams import ApflParams
from hetfl.engine import comm


def _per_client(a: Tensor, like: Tensor) -> Tensor:
    """α [K, 1] shaped to broadcast over like [K, ...]."""
    return a.reshape(-1, *([1] * (like.dim() - 1)))


def mixture(alpha: Tensor, v: Params, w: Params) -> Params:
    """α v + (1 − α) w per client (alpha [K, 1]; v, w stacked [K, ...] or w broadcastable)."""
    return [_per_client(alpha, vi) * vi + (1 - _per_client(alpha, vi)) * wi
            for vi, wi in zip(v, w, strict=True)]


class MixtureModel:
    """The model local SGD trains for APFL: parameters [w_1..w_n, v_1..v_n, α] stacked on the client axis."""

    def __init__(self, model: Any, adaptive: bool, alpha_lr_scale: float) -> None:
        self.model, self.adaptive, self.alpha_lr_scale = model, adaptive, alpha_lr_scale
        self.name = f"apfl({getattr(model, 'name', 'model')})"

    def grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        n = (len(params) - 1) // 2
        w, v, alpha = params[:n], params[n:2 * n], params[2 * n]
        alpha.clamp_(0.0, 1.0)  # the projection of the previous α step (these rows are the engine's own)
        trained = getattr(self.model, "trainable", None) or (True,) * n
        vbar = mixture(alpha, v, w)  # before w's forward pass moves its running statistics
        gw = self.model.grads(w, x, y)
        gbar = self.model.grads(vbar, x, y)
        gv = []
        for vi, vb, g, t in zip(v, vbar, gbar, trained, strict=True):
            if not t:
                vi.copy_(vb)  # a buffer: v's running statistics are those of the mixture's forward pass
            gv.append(_per_client(alpha, g) * g if t else torch.zeros_like(g))
        galpha = torch.zeros_like(alpha)
        if self.adaptive:
            dots = [((vi - wi) * g).reshape(len(g), -1).sum(1)
                    for vi, wi, g, t in zip(v, w, gbar, trained, strict=True) if t]
            galpha = self.alpha_lr_scale * torch.stack(dots).sum(0).reshape(alpha.shape).to(alpha.dtype)
        return [*gw, *gv, galpha]


class APFL(Algorithm):
    name = "apfl"
    Params = ApflParams

    def init_state(self, params: Params, num_devices: int) -> dict[str, Any]:
        # v_k starts at the initial global model (FedTorch's copy of the model), α_k at alpha0
        v = [p.unsqueeze(0).repeat(num_devices, *([1] * p.dim())).clone() for p in params]
        alpha = torch.full((num_devices, 1), self.hp.alpha0, dtype=params[0].dtype, device=params[0].device)
        return {"v": v, "alpha": alpha}

    def local_model(self, model: Any) -> MixtureModel:
        return MixtureModel(model, self.hp.adaptive, self.hp.alpha_lr_scale)

    def client_start(self, state: Any, params: Params, info: RoundInfo) -> Params:
        k = len(info.clients)
        return [*(e.contiguous() for e in expand(params, k)), *gather(state["v"], info.clients),
                gather([state["alpha"]], info.clients)[0]]

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        n = len(params)
        wk, vk, ak = finals[:n], finals[n:2 * n], finals[2 * n].clamp(0.0, 1.0)
        new = weighted_update(params, wk, info.weights)
        alpha = scatter([state["alpha"]], info.clients, [ak])[0]
        metrics = comm.round_metrics(up=deltas(params, wk), down=params, clients=len(info.clients))
        metrics["alpha_mean"] = float(alpha.mean())  # over all devices
        new = self.with_buffers(new, wk, info)  # buffers: the clients' normalised average
        return new, {"v": scatter(state["v"], info.clients, vk), "alpha": alpha}, metrics

    def client_models(self, state: Any, params: Params) -> Params:
        """Every device's personalised model α_k v_k + (1 − α_k) w, with the latest global w."""
        return mixture(state["alpha"], state["v"], [p.unsqueeze(0) for p in params])
