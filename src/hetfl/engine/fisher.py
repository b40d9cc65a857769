"""Diagonal empirical Fisher of every client of a round, batched over (client, sample) pairs.

F_k = mean over client k's local training samples of g_i ⊙ g_i, with g_i the gradient of the sample's
negative log-likelihood (the model's loss on that one sample) at the client's final parameters. This is
what FedCurv (OpenFL: squared log-likelihood gradients after local training, averaged over batches, the
fixed version that accumulates every batch) and EFL's diag(I) need.

Models made of dense layers (logreg, the MLPs) give Σ_b g_b ⊙ g_b in closed form, (x²)ᵀ(δ²) per layer
(`squared_grad_sums`), on each client's samples padded to a common length and masked: no per-sample
gradient is formed. Other models (convolutions, torch.func models) make each (client, sample) pair one row
of a stacked "client" with batch size 1, so the model's own batched `grads` gives per-sample gradients;
rows are processed in chunks to bound memory.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

CHUNK_ENTRIES = 1 << 24  # parameter entries per chunk of per-sample gradients (64 MiB of float32)


def fisher_diagonal(model, params: list[Tensor], x_train: Tensor, y_train: Tensor, offsets: np.ndarray,
                    clients: np.ndarray, max_samples: int = 0) -> list[Tensor]:
    """Per-client Fisher diagonals stacked [K, ...] like params (params stacked [K, ...] in clients order).

    max_samples > 0 uses each client's first max_samples training samples (0 = all). Entries the model
    does not train (buffers) get the zero gradient the model returns for them.
    """
    clients = np.asarray(clients, dtype=np.int64)
    lo, hi = offsets[clients], offsets[clients + 1]
    sizes = hi - lo
    if max_samples > 0:
        sizes = np.minimum(sizes, max_samples)
    owner = np.repeat(np.arange(len(clients)), sizes)
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)  # each client's first pair
    rows = lo[owner] + np.arange(len(owner)) - first[owner]  # sample index of every (client, sample) pair
    device = params[0].device
    counts = torch.as_tensor(np.maximum(sizes, 1), dtype=params[0].dtype, device=device)
    fast = _closed_form(model, params, x_train, y_train, lo, sizes) if hasattr(model, "squared_grad_sums") \
        else None
    if fast is not None:
        return [a / counts.view(-1, *([1] * (a.dim() - 1))) for a in fast]
    per_client = sum(int(p[0].numel()) for p in params)
    chunk = max(1, CHUNK_ENTRIES // max(per_client, 1))
    acc = [torch.zeros_like(p) for p in params]
    with torch.no_grad():
        for start in range(0, len(owner), chunk):
            own = torch.from_numpy(owner[start:start + chunk]).to(device)
            idx = torch.from_numpy(rows[start:start + chunk]).to(device)
            # a copy per sample: a model's forward may update buffers (BN statistics) in place
            rep = [p.index_select(0, own) for p in params]
            grads = model.grads(rep, x_train.index_select(0, idx).unsqueeze(1),
                                y_train.index_select(0, idx).unsqueeze(1))
            for a, g in zip(acc, grads, strict=True):
                a.index_add_(0, own, g.square())
    return [a / counts.view(-1, *([1] * (a.dim() - 1))) for a in acc]


def _closed_form(model, params: list[Tensor], x_train: Tensor, y_train: Tensor, lo: np.ndarray,
                 sizes: np.ndarray) -> list[Tensor] | None:
    """Σ_b g_b ⊙ g_b per client through model.squared_grad_sums, clients in chunks of padded batches."""
    device = params[0].device
    width = max(int(np.prod(x_train.shape[1:])), 1)
    n_max = max(int(sizes.max()), 1) if len(sizes) else 1
    chunk = max(1, CHUNK_ENTRIES // (n_max * width))
    out: list[list[Tensor]] = []
    for a in range(0, len(sizes), chunk):
        lo_c, n_c = lo[a:a + chunk], sizes[a:a + chunk]
        pos = np.arange(n_max)
        valid = pos[None, :] < n_c[:, None]
        rows = lo_c[:, None] + np.where(valid, pos[None, :], 0)  # padding repeats a real row, masked out
        idx = torch.from_numpy(rows.reshape(-1)).to(device)
        xb = x_train.index_select(0, idx).reshape(len(n_c), n_max, *x_train.shape[1:])
        yb = y_train.index_select(0, idx).reshape(len(n_c), n_max)
        mask = torch.from_numpy(valid).to(device=device, dtype=x_train.dtype)
        sums = model.squared_grad_sums([p[a:a + chunk] for p in params], xb, yb, mask)
        if sums is None:
            return None
        out.append(sums)
    return [torch.cat(parts) for parts in zip(*out, strict=True)]
