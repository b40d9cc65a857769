"""Evaluation of the global model on pooled data (batched over samples)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from hetfl.models.base import BatchedModel


@torch.no_grad()
def evaluate(model: BatchedModel, params: list[Tensor], x: Tensor, y: Tensor, chunk: int = 65536
             ) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) over all samples; pooled over devices, so the loss on the pooled
    training set is F(w) = Σ_k p^k F_k(w) (Ruan et al. §3.1)."""
    correct, loss, n = 0, 0.0, len(y)
    for lo in range(0, n, chunk):
        logits = model.logits(params, x[lo:lo + chunk])
        yy = y[lo:lo + chunk]
        loss += float(F.cross_entropy(logits, yy, reduction="sum"))
        correct += int((logits.argmax(dim=1) == yy).sum())
    return correct / n, loss / n
