"""SYNTHETIC(α, β) federated data, generated exactly as FedProx does (Li et al., 2018), but seeded.

FedProx ``data/synthetic_*/generate_synthetic.py`` (non-IID), per device k:

    u_k ~ N(0, α²),  B_k ~ N(0, β²)                (α, β are standard deviations: numpy ``scale``)
    v_k ~ N(B_k, 1) per feature                      (feature centre, shape [dim])
    W_k ~ N(u_k, 1) of shape [dim, C],  b_k ~ N(u_k, 1) of shape [C]
    x ~ N(v_k, Σ),  Σ = diag(j^(-1.2)), j = 1..dim
    y = argmax softmax(x · W_k + b_k)

FedProx ``data/synthetic_iid/generate_iid.py`` (IID): one shared W ~ N(0, 1), b ~ N(0, 1) for every
device, and every v_k = 0. Ruan et al. §5.2 use SYNTHETIC(0, 0) as their "IID case", but with the
non-IID generator SYNTHETIC(0, 0) is NOT IID: u_k = B_k = 0, yet every device still draws its own
W_k, b_k with variance 1 and its own v_k ~ N(0, 1), so devices have different labelling functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticFederation", "feature_covariance_diagonal", "generate_synthetic", "holdout_split"]


@dataclass
class SyntheticFederation:
    """Per-device data and the latent parameters that generated it (N devices)."""

    xs: list[np.ndarray]  # per device, float32 [n_k, dim]
    ys: list[np.ndarray]  # per device, int64 [n_k]
    u: np.ndarray  # [N] model means u_k (zeros for the IID variant)
    B: np.ndarray  # [N] feature-centre means B_k (zeros for the IID variant)
    v: np.ndarray  # [N, dim] feature centres v_k
    W: np.ndarray  # [N, dim, C]
    b: np.ndarray  # [N, C]

    @property
    def num_devices(self) -> int:
        return len(self.xs)


def feature_covariance_diagonal(dim: int) -> np.ndarray:
    """Σ_jj = j^(-1.2), j = 1..dim (FedProx ``cov_x``)."""
    return np.power(np.arange(1, dim + 1, dtype=np.float64), -1.2)


def _check_nonneg(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name}={value!r} must be a real number >= 0 (a standard deviation)")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}={value!r} must be a finite number >= 0 (a standard deviation)")
    return float(value)


def generate_synthetic(
    alpha: float,
    beta: float,
    sizes: np.ndarray,
    rng: np.random.Generator,
    *,
    iid: bool = False,
    dim: int = 60,
    num_classes: int = 10,
) -> SyntheticFederation:
    """Generate SYNTHETIC(α, β) for ``len(sizes)`` devices with ``sizes[k]`` samples each.

    Draw order follows FedProx (u, B, all v, then per device W_k, b_k, x). ``iid=True`` is FedProx's
    synthetic_iid (shared W, b; v_k = 0); it has no α, β, so both must be 0. Note SYNTHETIC(0, 0) with
    ``iid=False`` is not IID (every W_k ~ N(0, 1) independently).
    """
    alpha = _check_nonneg("alpha", alpha)
    beta = _check_nonneg("beta", beta)
    if iid and (alpha != 0 or beta != 0):
        raise ValueError(
            f"iid=True with alpha={alpha}, beta={beta}: FedProx's synthetic_iid has no α, β; pass 0, 0"
        )
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise ValueError(f"dim={dim!r} must be an integer >= 1")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer) or num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r} must be an integer >= 2")
    counts = np.asarray(sizes)
    if counts.ndim != 1 or counts.size == 0 or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError(
            f"sizes must be a non-empty 1-D integer array, got shape {counts.shape} {counts.dtype}"
        )
    if np.any(counts < 1):
        raise ValueError(f"sizes must all be >= 1, got min {int(counts.min())}")
    n_dev = int(counts.size)
    std_x = np.sqrt(feature_covariance_diagonal(dim))

    if iid:
        u = np.zeros(n_dev)
        big_b = np.zeros(n_dev)
        v = np.zeros((n_dev, dim))
        w_shared = rng.normal(0.0, 1.0, (dim, num_classes))
        b_shared = rng.normal(0.0, 1.0, num_classes)
        W = np.repeat(w_shared[None], n_dev, axis=0)
        b = np.repeat(b_shared[None], n_dev, axis=0)
    else:
        u = rng.normal(0.0, alpha, n_dev)
        big_b = rng.normal(0.0, beta, n_dev)
        v = rng.normal(big_b[:, None], 1.0, (n_dev, dim))
        W = np.empty((n_dev, dim, num_classes))
        b = np.empty((n_dev, num_classes))

    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for k in range(n_dev):
        if not iid:
            W[k] = rng.normal(u[k], 1.0, (dim, num_classes))
            b[k] = rng.normal(u[k], 1.0, num_classes)
        x = v[k] + rng.standard_normal((int(counts[k]), dim)) * std_x  # x ~ N(v_k, Σ), Σ diagonal
        y = np.argmax(x @ W[k] + b[k], axis=1)  # softmax is monotone: argmax of the logits
        xs.append(x.astype(np.float32))
        ys.append(y.astype(np.int64))
    return SyntheticFederation(xs=xs, ys=ys, u=u, B=big_b, v=v, W=W, b=b)


def holdout_split(n: int, test_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle ``range(n)`` and split it into (train, test) index arrays (int64).

    ``n_test = max(1, round(test_fraction · n))`` (Python ``round``) and ``n_train = n - n_test >= 1``;
    FedProx keeps 90 % / 10 % of each device's shuffled samples.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise ValueError(f"n={n!r} must be an integer >= 2")
    if not isinstance(test_fraction, int | float | np.floating) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction={test_fraction!r} must be a number in (0, 1)")
    n_test = max(1, round(test_fraction * int(n)))
    if int(n) - n_test < 1:
        raise ValueError(
            f"n={n} with test_fraction={test_fraction} leaves n_train={int(n) - n_test}; need n_train >= 1"
        )
    perm = rng.permutation(int(n)).astype(np.int64)
    return perm[n_test:], perm[:n_test]
