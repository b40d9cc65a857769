"""Evaluation of the global model: pooled over samples, per client, and the fairness of per-client losses."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from hetfl.models.base import BatchedModel

# Stream tag of the evaluation subsample, apart from the seeds' other uses ([seed, 0]: data; minibatches
# are [seed, round, device] with three words).
EVAL_SUBSAMPLE_STREAM = 0x6576616C  # "eval"


@torch.no_grad()
def per_sample(model: BatchedModel, params: list[Tensor], x: Tensor, y: Tensor, chunk: int = 65536
               ) -> tuple[Tensor, Tensor]:
    """(correct [n] float, cross-entropy [n]) of the model on every sample, in chunks of samples."""
    correct, loss = [], []
    for lo in range(0, len(y), chunk):
        logits = model.logits(params, x[lo:lo + chunk])
        yy = y[lo:lo + chunk]
        loss.append(F.cross_entropy(logits.float(), yy, reduction="none"))
        correct.append((logits.argmax(dim=1) == yy).float())
    if not correct:
        return torch.zeros(0, device=y.device), torch.zeros(0, device=y.device)
    return torch.cat(correct), torch.cat(loss)


def eval_subsample(n: int, samples: int, seed: int) -> np.ndarray:
    """Sorted indices of a fixed subsample of `samples` of n test samples (all n when samples >= n), drawn
    from the run's seed alone: every round, and every run of the seed (schemes, algorithms), is scored on
    the same samples, so paired comparisons stay paired."""
    if samples >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, EVAL_SUBSAMPLE_STREAM]).choice(n, samples, replace=False))


def per_client_means(values: Tensor, device_of: Tensor, num_devices: int) -> Tensor:
    """[N] mean of `values` over each device's samples (NaN for a device with none)."""
    sums = torch.zeros(num_devices, dtype=torch.float64, device=values.device)
    sums.index_add_(0, device_of, values.double())
    counts = torch.bincount(device_of, minlength=num_devices).double()
    return sums / counts


def mean_client_accuracy(accuracies: Tensor) -> float:
    """EFL (Ma et al. 2022, §5.2): "the mean testing accuracy is the average of the testing accuracy on all
    participants": an unweighted mean over devices (a small device counts as much as a large one), unlike
    the pooled test accuracy, which weights devices by their test-set sizes. BMTA is its best over rounds."""
    acc = accuracies[~torch.isnan(accuracies)]
    return float(acc.mean()) if len(acc) else math.nan


def loss_fairness(losses: Tensor) -> dict[str, float]:
    """Fairness of the per-client losses F_1(x) … F_K(x) (lecture notes, seed 001, "Measures of fairness"):

    variance  (1/K) Σ_i (F_i − F̄)²;
    entropy   −Σ_i q_i log q_i with q_i = F_i / Σ_j F_j  (log K when all losses are equal);
    Jain      (Σ_i F_i)² / (K Σ_i F_i²)  (1 when all are equal, 1/K when one client holds all the loss).
    """
    f = losses[~torch.isnan(losses)].double()
    if not len(f):
        return dict.fromkeys(("client_loss_variance", "client_loss_entropy", "client_loss_jain"), math.nan)
    q = f / f.sum()
    entropy = -(q * torch.log(q)).nan_to_num(0.0).sum()  # 0 · log 0 = 0
    return {
        "client_loss_variance": float(f.var(unbiased=False)),
        "client_loss_entropy": float(entropy),
        "client_loss_jain": float(f.sum() ** 2 / (len(f) * (f ** 2).sum())),
    }
