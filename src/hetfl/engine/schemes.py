"""Aggregation coefficients p_τ^k of Ruan et al. §4 (Schemes A, B, C), pure functions of one round.

Work is counted in local SGD steps. A complete round is `full_k` steps: E local updates (Ruan et al.
footnote 1: "local epochs and local updates ... Both refer to the times (1) is conducted in a global
round"; the default reading `local_work: steps`) or E epochs of ⌈n_k/B⌉ minibatches (`epochs`). A device
that completes the fraction f of its round does `done_k` steps (`completion`: floor or nearest), and
Scheme C's E/s is full_k / done_k. docs/readings.md quotes the paper beside each reading.
"""

from __future__ import annotations

import numpy as np

from hetfl.engine.minibatch import full_steps

SCHEMES = ("A", "B", "C")
LOCAL_WORK = ("steps", "epochs")
COMPLETION = ("nearest", "floor")
BOOST = ("additive", "multiplicative")


def complete_round_steps(train_sizes: np.ndarray, local_epochs: int, batch_size: int,
                         local_work: str = "steps") -> np.ndarray:
    """full_k: E updates (steps), or E·⌈n_k/B⌉ (epochs, the lecture notes' z_i = E·n_i/B)."""
    sizes = np.asarray(train_sizes, dtype=np.int64)
    if local_work == "steps":
        return np.full(len(sizes), int(local_epochs), dtype=np.int64)
    if local_work == "epochs":
        return full_steps(sizes, local_epochs, batch_size)
    raise ValueError(f"local_work '{local_work}' is not allowed; allowed: {', '.join(LOCAL_WORK)}")


def local_steps(fractions: np.ndarray, full_steps: np.ndarray, completion: str = "nearest") -> np.ndarray:
    """Steps each device completes: ⌊f·full⌋ (floor) or round(f·full) (nearest, halves up), at least one
    step when f > 0 (only f = 0 is inactive) and at most full."""
    fractions = np.asarray(fractions, dtype=np.float64)
    work = fractions * full_steps
    if completion == "floor":
        done = np.floor(work + 1e-9)
    elif completion == "nearest":
        done = np.floor(work + 0.5)
    else:
        raise ValueError(f"completion '{completion}' is not allowed; allowed: {', '.join(COMPLETION)}")
    done = np.where(fractions > 0, np.maximum(done.astype(np.int64), 1), 0)
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


def boosted_weights(scheme: str, p: np.ndarray, boost: np.ndarray, done: np.ndarray, full: np.ndarray,
                    composition: str = "additive") -> tuple[np.ndarray, bool]:
    """The scheme's coefficients with fast reboot's boost (Ruan et al. §4.2, §5.3).

    boost[k] = 1 + δ^k/p^k (data.events: 3 at the arrival round, decaying to 1).
    additive: p_τ^k = scheme(p)^k + δ^k for a device the scheme aggregates (the paper's p_τ^l = p^l + δ^l:
      the extra update −δ^l ∇F_l is not scaled by Scheme C's E/s);
    multiplicative: p_τ^k = scheme(p ⊙ boost)^k (the boosted 3p^l goes through the scheme, E/s included).
    Without a boost (all ones) both equal aggregation_weights(scheme, p, ...).
    """
    boost = np.asarray(boost, dtype=np.float64)
    if composition == "multiplicative":
        return aggregation_weights(scheme, p * boost, done, full)
    if composition != "additive":
        raise ValueError(f"boost '{composition}' is not allowed; allowed: {', '.join(BOOST)}")
    weights, discarded = aggregation_weights(scheme, p, done, full)
    extra = np.where(weights > 0, np.asarray(p, dtype=np.float64) * (boost - 1.0), 0.0)
    return weights + extra, discarded
