"""FedAMP, federated attentive message passing (Huang et al., AAAI 2021, "Personalized cross-silo federated
learning on non-IID data"), Eq. (7)-(8) with the attention function A(x) = 1 − exp(−x/σ).

Every device keeps its own model w_k. Each round the server builds one personalised cloud model per
device of the round from the latest models of the devices:

    u_i = ξ_ii w_i + Σ_{j≠i} ξ_ij w_j,   ξ_ij = α_k A'(‖w_i − w_j‖²) = (α_k/σ) exp(−‖w_i − w_j‖²/σ),
    ξ_ii = 1 − Σ_{j≠i} ξ_ij                                                          (Eq. 7)

and the device solves, by local SGD, w_i = argmin_w F_i(w) + λ/(2α_k) ‖w − u_i‖² (Eq. 8), i.e. its local
gradient gains (λ/α_k)(w − u_i). It is scored with its own model w_i (client_models).

Readings (docs/algorithms.md): the sums run over the devices that have reported a model at least once
(before the first report a device's model is the untrained initial one); the start of local training is
u_i (`start: cloud`, the prox centre) or the device's own w_i (`start: own`, PFLlib's client); if
α_k Σ_{j≠i} A' exceeds 1, which would make ξ_ii negative (the paper's analysis takes α_k small enough),
the off-diagonal weights are scaled to sum to 1 (ξ_ii = 0) and the round's metric `fedamp_clipped`
counts the devices concerned. The pooled metrics (test_accuracy, fairness) score the data-weighted mean
of all devices' models, which FedAMP itself never uses. Distances are over trained entries; batch-norm
statistics are mixed with the same ξ.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from hetfl.algorithms.base import (
    Algorithm,
    Context,
    Params,
    RoundInfo,
    gather,
    normalized,
    scatter,
    weighted_sum,
)
from hetfl.algorithms.hparams import FedAmpParams
from hetfl.engine import comm


def attention_weights(models: Params, clients: np.ndarray, seen: Tensor, alpha_k: float, sigma: float,
                      trained: tuple[bool, ...]) -> tuple[Tensor, Tensor]:
    """ξ [K, N] of Eq. (7) for the round's clients over all N devices, and which rows were clipped [K]."""
    flat = torch.cat([m.reshape(len(m), -1).double() for m, t in zip(models, trained, strict=True) if t], 1)
    idx = torch.as_tensor(clients, dtype=torch.int64, device=flat.device)
    dist2 = torch.cdist(flat.index_select(0, idx), flat).pow(2)  # ‖w_i − w_j‖², float64
    xi = alpha_k / sigma * torch.exp(-dist2 / sigma)
    others = seen.to(flat.device).unsqueeze(0).expand_as(xi).clone()
    others[torch.arange(len(idx), device=flat.device), idx] = False  # j ≠ i
    xi = torch.where(others, xi, torch.zeros_like(xi))
    total = xi.sum(1)
    clipped = total > 1
    xi = torch.where(clipped.unsqueeze(1), xi / total.clamp(min=1e-300).unsqueeze(1), xi)
    xi[torch.arange(len(idx), device=flat.device), idx] = 1 - xi.sum(1)
    return xi, clipped


class FedAMP(Algorithm):
    name = "fedamp"
    Params = FedAmpParams

    def __init__(self, **hyperparameters: Any) -> None:
        super().__init__(**hyperparameters)
        self._cloud: tuple[int, Params, Tensor, Tensor] | None = None  # (round, u, ξ, clipped), per round

    def init_state(self, params: Params, num_devices: int) -> dict[str, Any]:
        return {"w": [p.unsqueeze(0).repeat(num_devices, *([1] * p.dim())).clone() for p in params],
                "seen": torch.zeros(num_devices, dtype=torch.bool)}

    def cloud(self, state: Any, info: RoundInfo) -> tuple[Params, Tensor, Tensor]:
        """u_i of the round's clients [K, ...] (Eq. 7), computed once per round for both hooks."""
        if self._cloud is None or self._cloud[0] != info.tau:
            xi, clipped = attention_weights(state["w"], info.clients, state["seen"], self.hp.alpha_k,
                                            self.hp.sigma, self.mask(len(state["w"])))
            u = [torch.tensordot(xi.to(w.dtype), w, dims=1) for w in state["w"]]
            self._cloud = (info.tau, u, xi, clipped)
        return self._cloud[1:]

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        return {"u": self.cloud(state, info)[0]}

    def client_start(self, state: Any, params: Params, info: RoundInfo) -> Params:
        if self.hp.start == "own":
            return gather(state["w"], info.clients)
        return [u.clone() for u in self.cloud(state, info)[0]]

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        return g + (self.hp.lam / self.hp.alpha_k) * (w - ctx["u"][i])

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        _, xi, clipped = self.cloud(state, info)
        w = scatter(state["w"], info.clients, finals)
        seen = state["seen"].clone()
        seen[torch.as_tensor(info.clients, dtype=torch.int64)] = True
        # what the pooled metrics score: the data-weighted mean of every device's model
        new = weighted_sum(w, normalized(info.p))
        # each client uploads its model and receives its cloud model u_i (the size of w)
        metrics = comm.round_metrics(up=finals, down=params, clients=len(info.clients))
        diag = xi[torch.arange(len(info.clients)), torch.as_tensor(info.clients, dtype=torch.int64)]
        metrics.update(fedamp_self_weight=float(diag.mean()), fedamp_clipped=float(clipped.sum()))
        self._cloud = None
        new = self.with_buffers(new, finals, info)  # buffers: the clients' normalised average
        return new, {"w": w, "seen": seen}, metrics

    def client_models(self, state: Any, params: Params) -> Params:
        """FedAMP scores each device with its own model w_i."""
        return state["w"]
