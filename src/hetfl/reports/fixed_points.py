"""Closed-form fixed points on the quadratic test bed of the lecture notes (seed 001).

Client i minimises F_i(x) = a_i (x − b_i)² with data weight p_i = n_i/n and runs τ_i full-gradient steps
of size η per round. One step maps x − b_i to (1 − 2a_iη)(x − b_i), so after τ_i steps
    x_i − b_i = ρ_i (x − b_i),   ρ_i = (1 − 2a_iη)^τ_i                     (the notes' boxed equations).
The objective the federation should solve is F = Σ_i p_i F_i, minimised at x* = Σ p_i a_i b_i / Σ p_i a_i
(the notes: F = ½F_1 + ½F_2, x* = 11/3).

FedAvg:   x ← Σ p_i x_i.  Fixed point x̃ = Σ p_i (1 − ρ_i) b_i / Σ p_i (1 − ρ_i)   (the notes' x̃, there with
          p = ½ and x_*^(i) = b_i); as η → 0, (1 − ρ_i) ~ 2a_iτ_iη and
          x̃ → Σ p_i τ_i a_i b_i / Σ p_i τ_i a_i, the minimum of the mismatched F̃ ∝ Σ p_i τ_i F_i
          (the notes' (τ1 x_*^(1) + 2τ2 x_*^(2))/(τ1 + 2τ2)).
FedNova:  x ← x + τ_eff Σ p_i Δ_i/τ_i with Δ_i = (ρ_i − 1)(x − b_i): the fixed point solves
          Σ p_i (1 − ρ_i)/τ_i (x − b_i) = 0, x̃ = Σ p_i c_i b_i / Σ p_i c_i, c_i = (1 − ρ_i)/τ_i; τ_eff only
          sets the speed. As η → 0, c_i → 2a_iη and x̃ → x*: normalising by τ_i removes the inconsistency.
SCAFFOLD: at a fixed point every Δ_i = −τ_iη c = 0 (c = Σ p_i c_i) and c_i = ∇F_i(x), so Σ p_i ∇F_i(x) = 0:
          x̃ = x* exactly, for every η and τ.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ALGORITHMS = ("fedavg", "fednova", "scaffold")


def _arrays(a: Sequence[float], b: Sequence[float], p: Sequence[float] | None,
            tau: Sequence[int] | None = None) -> tuple[np.ndarray, ...]:
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    p_ = np.full(len(a_), 1.0 / len(a_)) if p is None else np.asarray(p, dtype=np.float64)
    if not (len(a_) == len(b_) == len(p_)) or (tau is not None and len(tau) != len(a_)):
        raise ValueError(f"a, b, p and tau must have one entry per client; got {len(a_)}, {len(b_)}, "
                         f"{len(p_)} and {'-' if tau is None else len(tau)}")
    p_ = p_ / p_.sum()
    return (a_, b_, p_) if tau is None else (a_, b_, p_, np.asarray(tau, dtype=np.float64))


def optimum(a: Sequence[float], b: Sequence[float], p: Sequence[float] | None = None) -> float:
    """x* = argmin Σ p_i a_i (x − b_i)² (SCAFFOLD's fixed point)."""
    a_, b_, p_ = _arrays(a, b, p)
    return float(np.sum(p_ * a_ * b_) / np.sum(p_ * a_))


def contraction(a: Sequence[float], tau: Sequence[int], eta: float) -> np.ndarray:
    """ρ_i = (1 − 2a_iη)^τ_i: client i's distance to b_i shrinks by ρ_i over a round."""
    return (1.0 - 2.0 * np.asarray(a, dtype=np.float64) * eta) ** np.asarray(tau, dtype=np.float64)


def fedavg(a: Sequence[float], b: Sequence[float], p: Sequence[float] | None, tau: Sequence[int],
           eta: float) -> float:
    """FedAvg's fixed point at step size η: Σ p_i (1 − ρ_i) b_i / Σ p_i (1 − ρ_i)."""
    a_, b_, p_, t_ = _arrays(a, b, p, tau)
    w = p_ * (1.0 - contraction(a_, t_, eta))
    return float(np.sum(w * b_) / np.sum(w))


def fedavg_limit(a: Sequence[float], b: Sequence[float], p: Sequence[float] | None, tau: Sequence[int]
                 ) -> float:
    """FedAvg's fixed point as η → 0: Σ p_i τ_i a_i b_i / Σ p_i τ_i a_i (the minimum of Σ p_i τ_i F_i)."""
    a_, b_, p_, t_ = _arrays(a, b, p, tau)
    w = p_ * t_ * a_
    return float(np.sum(w * b_) / np.sum(w))


def fednova(a: Sequence[float], b: Sequence[float], p: Sequence[float] | None, tau: Sequence[int],
            eta: float) -> float:
    """FedNova's fixed point at step size η: Σ p_i c_i b_i / Σ p_i c_i, c_i = (1 − ρ_i)/τ_i."""
    a_, b_, p_, t_ = _arrays(a, b, p, tau)
    w = p_ * (1.0 - contraction(a_, t_, eta)) / t_
    return float(np.sum(w * b_) / np.sum(w))


def fixed_point(algorithm: str, a: Sequence[float], b: Sequence[float], p: Sequence[float] | None,
                tau: Sequence[int], eta: float) -> float:
    """The closed-form fixed point of `algorithm` (one of ALGORITHMS) at step size η."""
    if algorithm == "fedavg":
        return fedavg(a, b, p, tau, eta)
    if algorithm == "fednova":
        return fednova(a, b, p, tau, eta)
    if algorithm == "scaffold":
        return optimum(a, b, p)
    raise ValueError(f"no closed form for algorithm '{algorithm}'; allowed: {', '.join(ALGORITHMS)}")


def limit(algorithm: str, a: Sequence[float], b: Sequence[float], p: Sequence[float] | None,
          tau: Sequence[int]) -> float:
    """The fixed point as η → 0: FedAvg's mismatched optimum, x* for FedNova and SCAFFOLD."""
    if algorithm == "fedavg":
        return fedavg_limit(a, b, p, tau)
    if algorithm in ALGORITHMS:
        return optimum(a, b, p)
    raise ValueError(f"no closed form for algorithm '{algorithm}'; allowed: {', '.join(ALGORITHMS)}")
