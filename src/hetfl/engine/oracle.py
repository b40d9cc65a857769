"""The per-client reference loop: how FL research code usually trains, one client after another.

A torch.nn module, autograd and torch.optim.SGD, on the same minibatch indices as the batched engine.
It is the test oracle of the engine (and the baseline of `hetfl bench`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from hetfl.models.base import BatchedModel


def local_sgd_reference(model: BatchedModel, global_params: list[Tensor], x_train: Tensor, y_train: Tensor,
                        batch_idx: np.ndarray, steps: np.ndarray, lr: float, correction=None, ctx=None
                        ) -> list[Tensor]:
    """Same contract as engine.local.local_sgd, computed client by client (plain SGD only)."""
    if correction is not None:
        raise NotImplementedError("the reference loop trains plain SGD; corrected algorithms are tested "
                                  "against their equations instead")
    module = model.make_module()
    loss_fn = nn.CrossEntropyLoss()
    finals: list[list[Tensor]] = []
    for row, s in enumerate(np.asarray(steps).tolist()):
        model.to_module(global_params, module)
        opt = torch.optim.SGD(module.parameters(), lr=lr)
        for j in range(s):
            idx = torch.from_numpy(batch_idx[row, j])
            opt.zero_grad()
            loss_fn(module(x_train[idx]), y_train[idx]).backward()
            opt.step()
        finals.append(model.from_module(module))
    return [torch.stack([f[i] for f in finals]) for i in range(len(global_params))]
