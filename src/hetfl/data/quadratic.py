"""The `quadratic` dataset: one sample (a_i, b_i) per client, F_i(x) = a_i (x − b_i)² (seed 001)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetfl.data.federation import Federation, from_device_lists

DEFAULT_A = (1.0, 2.0)
DEFAULT_B = (1.0, 5.0)


def build_quadratic(a: Sequence[float] = DEFAULT_A, b: Sequence[float] = DEFAULT_B) -> Federation:
    """Client i holds the single sample (a_i, b_i) for training and the same sample as its test set, so
    the pooled training loss of the model x is F(x) = mean_i a_i (x − b_i)² (p_i = 1/N)."""
    if len(a) != len(b) or not len(a):
        raise ValueError(f"quadratic: a and b must have the same non-zero length, got {len(a)} and {len(b)}")
    if any(v <= 0 for v in a):
        raise ValueError(f"quadratic: every a_i must be > 0 (a strongly convex F_i), got {list(a)}")
    xs = [np.array([[ai, bi]], dtype=np.float32) for ai, bi in zip(a, b, strict=True)]
    ys = [np.zeros(1, dtype=np.int64) for _ in xs]
    return from_device_lists(xs, ys, xs, ys, num_classes=1)


def optimum(a: Sequence[float], b: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """argmin Σ_i w_i a_i (x − b_i)² = Σ w a b / Σ w a (equal weights by default)."""
    w = np.ones(len(a)) if weights is None else np.asarray(weights, dtype=np.float64)
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.sum(w * a_ * b_) / np.sum(w * a_))
