"""The analytic test bed of the lecture notes (seed 001): client i minimises F_i(x) = a_i (x − b_i)².

Each client holds samples with features (a, b) (the `quadratic` dataset gives it exactly one); the model
is the scalar x, its "loss" on a batch the mean of a (x − b)² and its gradient the exact 2·a·(x − b)
averaged over the batch. With the defaults a = (1, 2), b = (1, 5) and equal weights the global objective
is F(x) = ½(x − 1)² + (x − 5)², minimised at x* = 11/3.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class QuadraticModule(nn.Module):
    """The torch twin: forward returns each sample's a (x − b)²."""

    def __init__(self, x0: float = 0.0) -> None:
        super().__init__()
        self.x = nn.Parameter(torch.tensor([x0]))

    def forward(self, features: Tensor) -> Tensor:
        return features[:, 0] * (self.x - features[:, 1]) ** 2


class Quadratic:
    name = "quadratic"
    trainable = (True,)

    def __init__(self, input_dim: int = 2, num_classes: int = 1, x0: float = 0.0) -> None:
        if input_dim != 2:
            raise ValueError(f"the quadratic model needs features (a, b), got {input_dim} features")
        self.x0 = x0

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        return [torch.tensor([self.x0], dtype=torch.float32)]

    def grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        """params [K, 1], x [K, B, 2]: the batch mean of 2·a·(x − b) for each client."""
        a, b = x[..., 0], x[..., 1]
        return [(2 * a * (params[0] - b)).mean(dim=1, keepdim=True).reshape(params[0].shape)]

    def logits(self, params: list[Tensor], x: Tensor) -> Tensor:
        """One "logit" per sample, −a (x − b)² (there are no classes; see `evaluate`)."""
        return -(x[:, 0] * (params[0] - x[:, 1]) ** 2).unsqueeze(1)

    @torch.no_grad()
    def evaluate(self, params: list[Tensor], x: Tensor, y: Tensor) -> dict[str, float]:
        """The global model's x and the mean objective over the given samples (F(x) over the clients)."""
        return {"loss": float((x[:, 0] * (params[0] - x[:, 1]) ** 2).mean()), "x": float(params[0][0])}

    def make_module(self) -> nn.Module:
        return QuadraticModule(self.x0)

    def to_module(self, params: list[Tensor], module: nn.Module) -> None:
        with torch.no_grad():
            module.x.copy_(params[0])

    def from_module(self, module: nn.Module) -> list[Tensor]:
        return [module.x.detach().clone()]

    @staticmethod
    def loss(output: Tensor, y: Tensor) -> Tensor:
        """The per-client oracle's loss on the module's output: the mean objective."""
        return output.mean()
