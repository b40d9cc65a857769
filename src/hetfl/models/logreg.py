"""Multinomial logistic regression, the SYNTHETIC model of FedProx and Ruan et al."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hetfl.models.net import xent_delta


class LogReg:
    """logits = x·W + b with W [d, C], b [C]; zero initialisation as in FedProx.

    The gradient of the mean cross-entropy is closed-form, so local training needs no autograd:
    ∇_W = xᵀ(softmax(xW + b) − onehot(y)) / B,  ∇_b = Σ_i (softmax − onehot)_i / B.
    """

    name = "logreg"
    trainable = (True, True)  # no buffers

    def __init__(self, input_dim: int, num_classes: int) -> None:
        self.input_dim = input_dim
        self.num_classes = num_classes

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        return [torch.zeros(self.input_dim, self.num_classes), torch.zeros(self.num_classes)]

    def grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        W, b = params
        logits = torch.baddbmm(b.unsqueeze(1), x, W)  # [K, B, C]
        g = torch.softmax(logits, dim=-1)
        g.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(y, -1, dtype=g.dtype).unsqueeze(-1))
        g.div_(x.shape[1])
        return [torch.bmm(x.transpose(1, 2), g), g.sum(dim=1)]

    def squared_grad_sums(self, params: list[Tensor], x: Tensor, y: Tensor, mask: Tensor) -> list[Tensor]:
        """Σ_b g_b ⊙ g_b over the samples with mask 1, g_b the gradient of sample b's own loss:
        g_b(W) = x_b ⊗ δ_b with δ_b = softmax − onehot, so the sum is (x²)ᵀ(δ²) (engine.fisher)."""
        W, b = params
        delta = xent_delta(torch.baddbmm(b.unsqueeze(1), x, W), y)  # (softmax − onehot) / B
        d2 = delta.mul_((x.shape[1] * mask).unsqueeze(-1)).square_()
        return [torch.bmm(x.square().transpose(1, 2), d2), d2.sum(dim=1)]

    def sgd_step(self, params: list[Tensor], x: Tensor, y: Tensor, lr: float) -> None:
        """One SGD step of every client, in place and fused: the update W ← W − (lr/B)·xᵀ(softmax − onehot)
        is a single baddbmm_ into W (no gradient tensor); at this size each kernel launch is the cost, so
        the step is kept to six kernels."""
        W, b = params
        g = torch.softmax(torch.baddbmm(b.unsqueeze(1), x, W), dim=-1)
        g.scatter_add_(-1, y.unsqueeze(-1), torch.full(y.shape + (1,), -1.0, dtype=g.dtype, device=g.device))
        alpha = lr / x.shape[1]
        W.baddbmm_(x.transpose(1, 2), g, alpha=-alpha)
        b.sub_(g.sum(dim=1), alpha=alpha)

    def logits(self, params: list[Tensor], x: Tensor) -> Tensor:
        W, b = params
        return torch.addmm(b, x, W)

    def make_module(self) -> nn.Module:
        return nn.Linear(self.input_dim, self.num_classes)

    def to_module(self, params: list[Tensor], module: nn.Module) -> None:
        with torch.no_grad():
            module.weight.copy_(params[0].T)
            module.bias.copy_(params[1])

    def from_module(self, module: nn.Module) -> list[Tensor]:
        return [module.weight.detach().T.clone(), module.bias.detach().clone()]
