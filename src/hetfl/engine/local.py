"""Batched local SGD: all clients of a round train as one computation on parameters stacked on axis 0.

Clients are sorted by their number of local steps (descending), so at step j the clients still working
are a contiguous prefix of the stack: the step runs on that prefix only, no masked-out work is done.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from hetfl.models.base import BatchedModel


def local_sgd(model: BatchedModel, global_params: list[Tensor], x_train: Tensor, y_train: Tensor,
              batch_idx: np.ndarray, steps: np.ndarray, lr: float) -> list[Tensor]:
    """Ruan et al. Eq. (1): w_{i+1}^k = w_i^k − η_τ g_i^k for i < s_τ^k, for every client at once.

    batch_idx: [K, S, B] absolute indices (see minibatch.minibatch_indices); steps: [K].
    Returns the clients' final parameters, stacked [K, ...] in the input order.
    """
    K = len(steps)
    order = np.argsort(-np.asarray(steps), kind="stable")
    steps_sorted = np.asarray(steps)[order]
    idx = torch.from_numpy(batch_idx[order])
    params = [p.unsqueeze(0).repeat(K, *([1] * p.dim())) for p in global_params]
    # active[j] = number of clients with more than j steps: the working prefix at step j.
    active = np.searchsorted(-steps_sorted, -np.arange(int(steps_sorted[0]) if K else 0), side="left")
    batch = idx.shape[2] if idx.dim() == 3 else 0
    for j, m in enumerate(active.tolist()):
        flat = idx[:m, j].reshape(-1)
        xb = x_train.index_select(0, flat).view(m, batch, *x_train.shape[1:])
        yb = y_train.index_select(0, flat).view(m, batch)
        prefix = [p[:m] for p in params]
        for p, g in zip(prefix, model.grads(prefix, xb, yb), strict=True):
            p.sub_(g, alpha=lr)
    inverse = torch.from_numpy(np.argsort(order))
    return [p.index_select(0, inverse) for p in params]
