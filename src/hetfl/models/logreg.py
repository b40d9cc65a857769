"""Multinomial logistic regression, the SYNTHETIC model of FedProx and Ruan et al."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hetfl.models.net import softmax_classes, xent_delta


def _twice(tensors: list[Tensor]) -> list[Tensor]:
    """A lone client's stacks [1, ...] as two copies [2, ...] (LogReg: a lone client)."""
    return [t.repeat(2, *([1] * (t.dim() - 1))) for t in tensors]


class LogReg:
    """logits = x·Wᵀ + b with W [C, d] (nn.Linear's layout), b [C]; zero initialisation as in FedProx.

    The gradient of the mean cross-entropy is closed-form, so local training needs no autograd:
    ∇_W = (softmax(xWᵀ + b) − onehot(y))ᵀ x / B,  ∇_b = Σ_i (softmax − onehot)_i / B.

    Why [C, d] and not [d, C]: with C = 10 columns MKL's small GEMMs are slow when the output or the
    right operand is 10 wide. Stored [C, d], a step's two batched GEMMs (1,500 clients of a Table 3 cell,
    B = 20, d = 60) take 6.8 ms instead of 15.9, and scoring 10,000 samples 1.3 ms instead of 3.1
    (docs/engine.md, "The logistic regression's layout").

    A lone client (a stack of one) runs as a stack of two copies: MKL threads a batch of one gradient
    GEMM gᵀx within the GEMM, and with 2 threads its sums then differ in the last bits from the same
    client's in a batch (measured; a batch of any size ≥ 2 agrees with any other). A run must end bitwise
    where it ends stacked with others (engine.runner.train_stacked), whatever its clients' step counts.
    """

    name = "logreg"
    trainable = (True, True)  # no buffers
    # CUDA graphs (engine.graphs) on CUDA: an H100 (docs/engine.md, "On a GPU: one H100, the fourth
    # lease") ran 20 steps per client at K = 64 1.79x faster with graphs captured per run than eagerly,
    # each replay bitwise the eager step (the probe: 5.28x a step; a run gains from 7 steps)
    cuda_graphs = True

    def __init__(self, input_dim: int, num_classes: int) -> None:
        self.input_dim = input_dim
        self.num_classes = num_classes

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        return [torch.zeros(self.num_classes, self.input_dim), torch.zeros(self.num_classes)]

    def grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        if x.shape[0] == 1:
            return [g[:1] for g in self.grads(_twice(params), *_twice([x, y]))]
        W, b = params
        logits = torch.baddbmm(b.unsqueeze(1), x, W.transpose(1, 2))  # [K, B, C]
        g = softmax_classes(logits)
        g.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(y, -1, dtype=g.dtype).unsqueeze(-1))
        g.div_(x.shape[1])
        return [torch.bmm(g.transpose(1, 2), x), g.sum(dim=1)]

    def squared_grad_sums(self, params: list[Tensor], x: Tensor, y: Tensor, mask: Tensor) -> list[Tensor]:
        """Σ_b g_b ⊙ g_b over the samples with mask 1, g_b the gradient of sample b's own loss:
        g_b(W) = δ_b ⊗ x_b with δ_b = softmax − onehot, so the sum is (δ²)ᵀ(x²) (engine.fisher)."""
        if x.shape[0] == 1:
            return [s[:1] for s in self.squared_grad_sums(_twice(params), *_twice([x, y, mask]))]
        W, b = params
        delta = xent_delta(torch.baddbmm(b.unsqueeze(1), x, W.transpose(1, 2)), y)  # (softmax − onehot) / B
        d2 = delta.mul_((x.shape[1] * mask).unsqueeze(-1)).square_()
        return [torch.bmm(d2.transpose(1, 2), x.square()), d2.sum(dim=1)]

    def sgd_step(self, params: list[Tensor], x: Tensor, y: Tensor, lr: float) -> None:
        """One SGD step of every client, in place and fused: the update W ← W − (lr/B)·(softmax − onehot)ᵀx
        is a single baddbmm_ into W (no gradient tensor); at this size each kernel launch is the cost, so
        the step is kept to seven kernels (`hetfl bench --count-ops`)."""
        if x.shape[0] == 1:
            pair = _twice(params)
            self.sgd_step(pair, *_twice([x, y]), lr)
            for p, q in zip(params, pair, strict=True):
                p.copy_(q[:1])
            return
        W, b = params
        g = softmax_classes(torch.baddbmm(b.unsqueeze(1), x, W.transpose(1, 2)))
        g.scatter_add_(-1, y.unsqueeze(-1), torch.full(y.shape + (1,), -1.0, dtype=g.dtype, device=g.device))
        alpha = lr / x.shape[1]
        W.baddbmm_(g.transpose(1, 2), x, alpha=-alpha)
        b.sub_(g.sum(dim=1), alpha=alpha)

    def logits(self, params: list[Tensor], x: Tensor) -> Tensor:
        W, b = params
        return torch.addmm(b, x, W.t())

    def make_module(self) -> nn.Module:
        return nn.Linear(self.input_dim, self.num_classes)

    def to_module(self, params: list[Tensor], module: nn.Module) -> None:
        with torch.no_grad():
            module.weight.copy_(params[0])
            module.bias.copy_(params[1])

    def from_module(self, module: nn.Module) -> list[Tensor]:
        return [module.weight.detach().clone(), module.bias.detach().clone()]
