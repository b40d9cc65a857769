"""The contract between a model and the batched engine."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn


class BatchedModel(Protocol):
    """A model whose parameters are a list of tensors; "stacked" means an extra leading client axis."""

    name: str

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        """Global (unstacked) initial parameters."""
        ...

    def grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        """Gradients of the mean cross-entropy of each client's minibatch.

        params: stacked [K, ...]; x: [K, B, ...]; y: [K, B]. Returns stacked gradients like params.
        """
        ...

    def logits(self, params: list[Tensor], x: Tensor) -> Tensor:
        """Logits of the global (unstacked) model on x [n, ...]."""
        ...

    def make_module(self) -> nn.Module:
        """A plain torch.nn module of the same model (the per-client reference loop trains it)."""
        ...

    def to_module(self, params: list[Tensor], module: nn.Module) -> None:
        """Copy unstacked params into the module."""
        ...

    def from_module(self, module: nn.Module) -> list[Tensor]:
        """Unstacked params from the module."""
        ...
