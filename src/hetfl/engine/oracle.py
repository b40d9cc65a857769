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
                        batch_idx: np.ndarray, steps: np.ndarray, lr: float, correction=None, ctx=None,
                        start: list[Tensor] | None = None) -> list[Tensor]:
    """Same contract as engine.local.local_sgd, computed client by client.

    correction: applied to each client's gradient with ctx sliced to that client (a view, so in-place
    buffers such as momentum persist through the client's steps). Gradients move between the module and
    the model's parameter list through the model's own to_module/from_module (both linear), on a twin
    module whose buffers are zero. start: per-client starting parameters [K, ...] (FedBN).
    """
    # the module in the parameters' dtype (float64 in the exactness tests) on the data's device
    like = {"device": x_train.device, "dtype": global_params[0].dtype}
    module = model.make_module().to(**like)
    twin = model.make_module().to(**like) if correction is not None else None
    loss_fn = getattr(model, "loss", None) or nn.CrossEntropyLoss()
    finals: list[list[Tensor]] = []
    for row, s in enumerate(np.asarray(steps).tolist()):
        model.to_module(global_params if start is None else [t[row] for t in start], module)
        opt = torch.optim.SGD(module.parameters(), lr=lr)
        own = {k: [t[row:row + 1] for t in v] for k, v in (ctx or {}).items()}
        for j in range(s):
            idx = torch.from_numpy(batch_idx[row, j])
            opt.zero_grad()
            loss_fn(module(x_train[idx]), y_train[idx]).backward()
            if correction is not None:
                _correct(model, module, twin, correction, own)
            opt.step()
        finals.append(model.from_module(module))
    return [torch.stack([f[i] for f in finals]) for i in range(len(global_params))]


@torch.no_grad()
def _correct(model: BatchedModel, module: nn.Module, twin: nn.Module, correction, ctx) -> None:
    """Replace the module's gradients by correction(params, grads, ctx), in the model's list layout."""
    for tp, p in zip(twin.parameters(), module.parameters(), strict=True):
        tp.copy_(p.grad)
    for b in twin.buffers():
        b.zero_()
    grads = [g.unsqueeze(0) for g in model.from_module(twin)]
    params = [w.unsqueeze(0) for w in model.from_module(module)]
    corrected = correction(params, grads, ctx)
    model.to_module([g[0] for g in corrected], twin)
    for tp, p in zip(twin.parameters(), module.parameters(), strict=True):
        p.grad.copy_(tp)
