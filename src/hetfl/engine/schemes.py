"""Aggregation coefficients p_τ^k of Ruan et al. §4 (Schemes A, B, C), pure functions of one round.

Work is counted in local SGD steps: a complete round is `full_k = E·⌈n_k/B⌉` steps and a device that
completes the fraction s of its E epochs does `done_k` steps. Scheme C's E/s is then full_k / done_k.
"""

from __future__ import annotations

import numpy as np

SCHEMES = ("A", "B", "C")


def local_steps(fractions: np.ndarray, full_steps: np.ndarray) -> np.ndarray:
    """Steps each device completes: ⌊s·full⌋, at least one step when s > 0 (only s = 0 is inactive)."""
    fractions = np.asarray(fractions, dtype=np.float64)
    done = np.floor(fractions * full_steps + 1e-9).astype(np.int64)
    done = np.where(fractions > 0, np.maximum(done, 1), 0)
    return np.minimum(done, full_steps)


def aggregation_weights(scheme: str, p: np.ndarray, done: np.ndarray, full: np.ndarray
                        ) -> tuple[np.ndarray, bool]:
    """Return (p_τ [N], discarded) for w ← w + Σ_k p_τ^k (w_k − w) (Ruan et al. Eq. 2).

    A: p_τ^k = N·p^k·q_τ^k / K_τ with q_τ^k = 1 iff device k is complete; the round is discarded if K_τ = 0.
    B: p_τ^k = p^k (an inactive device's update is zero).
    C: p_τ^k = (E/s_τ^k)·p^k, and 0 if s_τ^k = 0.
    """
    p = np.asarray(p, dtype=np.float64)
    done = np.asarray(done)
    full = np.asarray(full)
    if scheme == "A":
        q = (done == full) & (full > 0)
        k_tau = int(q.sum())
        if k_tau == 0:
            return np.zeros_like(p), True
        # N counts the devices in the objective (p^k > 0): arrivals not yet in it do not inflate N.
        return int((p > 0).sum()) * p * q / k_tau, False
    if scheme == "B":
        return p.copy(), False
    if scheme == "C":
        ratio = np.divide(full, done, out=np.zeros_like(p), where=done > 0)
        return p * ratio, False
    raise ValueError(f"scheme '{scheme}' is unknown; allowed: {', '.join(SCHEMES)}")
