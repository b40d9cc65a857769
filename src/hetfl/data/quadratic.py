"""The `quadratic` dataset (seed 001): client i holds n_i copies (default one) of the sample (a_i, b_i),
F_i(x) = a_i (x − b_i)²."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetfl.data.federation import Federation, from_device_lists

DEFAULT_A = (1.0, 2.0)
DEFAULT_B = (1.0, 5.0)


def build_quadratic(a: Sequence[float] = DEFAULT_A, b: Sequence[float] = DEFAULT_B,
                    n: Sequence[int] | None = None) -> Federation:
    """Client i holds n_i copies of the sample (a_i, b_i) (default one) for training and the same samples
    as its test set, so its data weight is p_i = n_i / Σ_j n_j (the notes' p_i = n_i/n) and the pooled
    training loss of the model x is F(x) = Σ_i p_i a_i (x − b_i)²."""
    if len(a) != len(b) or not len(a):
        raise ValueError(f"quadratic: a and b must have the same non-zero length, got {len(a)} and {len(b)}")
    if any(v <= 0 for v in a):
        raise ValueError(f"quadratic: every a_i must be > 0 (a strongly convex F_i), got {list(a)}")
    n = [1] * len(a) if n is None else list(n)
    if len(n) != len(a) or any(int(k) != k or k < 1 for k in n):
        raise ValueError(f"quadratic: n must hold one integer >= 1 per client ({len(a)}), got {n}")
    xs = [np.tile(np.array([[ai, bi]], dtype=np.float32), (int(k), 1))
          for ai, bi, k in zip(a, b, n, strict=True)]
    ys = [np.zeros(len(x), dtype=np.int64) for x in xs]
    return from_device_lists(xs, ys, xs, ys, num_classes=1)


def optimum(a: Sequence[float], b: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """argmin Σ_i w_i a_i (x − b_i)² = Σ w a b / Σ w a (equal weights by default)."""
    w = np.ones(len(a)) if weights is None else np.asarray(weights, dtype=np.float64)
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.sum(w * a_ * b_) / np.sum(w * a_))
