"""Per-device sample counts drawn from a size distribution.

Ruan et al. (2021) §5.1: "the number of samples at each device follows the Type-I Pareto distribution
with the Pareto index of 0.5". With index 0.5 the Pareto law has an infinite mean (and variance), so a
cap ``max_size`` is part of every spec; a floor ``min_size`` guarantees each device can hold at least one
training and one test sample. The lognormal option follows FedDyn's unbalanced split (sizes proportional
to lognormal(0, σ) draws, rescaled to a target mean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["DISTRIBUTIONS", "SizeSpec", "sample_sizes"]

DISTRIBUTIONS: tuple[str, ...] = ("equal", "pareto", "lognormal")
_EXACT_FLOAT_INT = 2**53  # largest count an uncapped float draw can represent exactly


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass(frozen=True)
class SizeSpec:
    """How many samples each device holds.

    ``distribution``: ``"equal"`` | ``"pareto"`` | ``"lognormal"``.
    ``size``: equal: every device's count; pareto: the scale x_m (minimum count before the floor);
    lognormal: the mean count. ``index``: Type-I Pareto index b (Ruan et al. §5.1 use 0.5).
    ``sigma``: σ of the log-sizes (FedDyn). ``max_size`` / ``min_size``: cap / floor applied to every
    distribution (``max_size=None`` disables the cap).
    """

    distribution: str
    size: int = 100
    index: float = 0.5
    sigma: float = 0.3
    max_size: int | None = 1000
    min_size: int = 2

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(
                f"SizeSpec.distribution={self.distribution!r} is unknown; allowed: {DISTRIBUTIONS}"
            )
        if not _is_int(self.size) or self.size < 1:
            raise ValueError(f"SizeSpec.size={self.size!r} must be an integer >= 1")
        if not _is_int(self.min_size) or self.min_size < 1:
            raise ValueError(f"SizeSpec.min_size={self.min_size!r} must be an integer >= 1")
        if self.max_size is not None and (not _is_int(self.max_size) or self.max_size < self.min_size):
            raise ValueError(
                f"SizeSpec.max_size={self.max_size!r} must be None or an integer >= min_size={self.min_size}"
            )
        if not _is_real(self.index) or not math.isfinite(self.index) or self.index <= 0:
            raise ValueError(f"SizeSpec.index={self.index!r} must be a finite number > 0 (Pareto shape b)")
        if not _is_real(self.sigma) or not math.isfinite(self.sigma) or self.sigma <= 0:
            raise ValueError(f"SizeSpec.sigma={self.sigma!r} must be a finite number > 0 (lognormal σ)")


def _is_real(value: object) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def _clip_to_counts(raw: np.ndarray, spec: SizeSpec) -> np.ndarray:
    """Floor/cap float counts ``raw`` to ``[min_size, max_size]`` and return them as int64."""
    upper = float(spec.max_size) if spec.max_size is not None else np.inf
    clipped = np.clip(raw, spec.min_size, upper)
    if spec.max_size is None and np.any(clipped > _EXACT_FLOAT_INT):
        raise ValueError(
            f"SizeSpec.max_size=None: an uncapped {spec.distribution} draw exceeded 2**53 samples; "
            "set max_size (heavy tails such as Pareto(0.5) have an infinite mean)"
        )
    return clipped.astype(np.int64)


def least_count(spec: SizeSpec) -> int:
    """The fewest samples `sample_sizes` can give a device under `spec`: clip(size) under equal and pareto
    sizes (a Pareto draw X is at least 1, so floor(size · X) is at least size), min_size under lognormal
    ones (a log-normal draw can be near 0)."""
    if spec.distribution == "lognormal":
        return spec.min_size
    least = max(spec.size, spec.min_size)
    return least if spec.max_size is None else min(least, spec.max_size)


# scipy.stats.pareto(b).rvs and scipy.stats.lognorm(s).rvs (in _lognormal_counts), computed as scipy computes
# them (the inverse CDF of one uniform draw; exp of s times one standard normal draw), so the same generator
# gives bitwise the same sizes (tests/test_sizes.py compares them with scipy.stats for many seeds). Importing
# scipy.stats took 2.3 of a split job's 2.5 s, and make reproduce runs 68 split jobs.
def pareto_rvs(b: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Type-I Pareto(b, x_m = 1) draws: (1 − U)^(−1/b), U ~ uniform[0, 1) (scipy's pareto._ppf)."""
    return pow(1 - rng.uniform(size=size), -1.0 / b)


def sample_sizes(num_devices: int, spec: SizeSpec, rng: np.random.Generator) -> np.ndarray:
    """Draw int64 sample counts ``n_k`` for ``num_devices`` devices.

    * equal: ``n_k = clip(size)``.
    * pareto (Ruan et al. §5.1: Type-I Pareto, index 0.5): ``X_k ~ Pareto(b=index, x_m=1)`` and
      ``n_k = clip(floor(size · X_k), min_size, max_size)``.
    * lognormal (FedDyn): ``l_k ~ LogNormal(0, sigma)`` and
      ``n_k = clip(round(size · N · l_k / Σ_j l_j), min_size, max_size)``.
    """
    if not _is_int(num_devices) or num_devices < 1:
        raise ValueError(f"num_devices={num_devices!r} must be an integer >= 1")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if spec.distribution == "equal":
        raw = np.full(num_devices, float(spec.size))
    elif spec.distribution == "pareto":
        raw = np.floor(spec.size * pareto_rvs(spec.index, num_devices, rng))
    else:  # lognormal
        raw = np.rint(
            _lognormal_counts(spec.size * num_devices, spec.sigma, rng.standard_normal(num_devices))
        )
    return _clip_to_counts(raw, spec)


def _lognormal_counts(total: float, sigma: float, z: np.ndarray) -> np.ndarray:
    """``total · l_k / Σ_j l_j`` for the LogNormal(0, σ) draws ``l_k = exp(σ · z_k)``, ``z ~ N(0, 1)``.

    Computed as written while the sum stays finite and positive, so every σ that worked before gives the same
    bits. A σ that overflows ``exp`` (σ = 1e300 does at any ``z_k`` above 7.1e-298) or underflows it for
    every device would give inf / inf or 0 / 0, and NaN sizes. There the draws are taken relative to the
    largest, ``exp(σ · (z_k − max z))``: the same ratios, always finite. The paper gives no bound on σ; at
    such σ the largest device takes nearly all ``total`` and the others get ``min_size``.
    """
    with np.errstate(over="ignore", under="ignore"):
        lk = np.exp(sigma * z)
        norm = lk.sum()
        if np.isfinite(norm) and norm > 0:
            return total * lk / norm
        lk = np.exp(sigma * (z - z.max()))
    return total * lk / lk.sum()
