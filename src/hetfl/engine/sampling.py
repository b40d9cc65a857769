"""Per-round client sampling: K of the N devices, uniformly without replacement (McMahan et al. 2017).

McMahan et al.'s FedAvg "selects a random fraction C of the clients" each round; FedFOR (seed 003,
Alg. 1: "K clients indexed by k are selected") and FedElasticNet (seed 004, Alg. 1-3: "Sample devices
P_t ⊆ [m]", 10 % participation) do the same. A sampled device then follows its participation trace
(it may complete only part of its work, or none) and the event schedule; a device not sampled sends
nothing, exactly like an inactive one (s = 0).

Two readings of the aggregation weights over the sampled set S (docs/sampling.md):

``sampled`` (default)
    McMahan et al.: w ← Σ_{k∈S} n_k / Σ_{j∈S} n_j · w_k. The data weights are renormalised over S,
    p̃^k = p^k / Σ_{j∈S} p^j, and Ruan et al.'s scheme is applied to p̃ as if S were the whole
    federation (Scheme B: McMahan's weights; Scheme A: the mean over S's complete devices with N → |S|;
    Scheme C: (E/s)·p̃^k). FedAvg's, SCAFFOLD's (η_g/|S|·Σ) and FedDyn's (1/|P_t|·Σ θ_k) server rules.
``population``
    Ruan et al.'s schemes are defined over all N devices: a device not sampled is an inactive device,
    p^k is left as it is and the round's weights sum to Σ_{k∈S} p^k ≈ K/N under Scheme B (the server
    step shrinks by K/N). FedElasticNet's Algorithm 1 line 7 as printed, θ^t = θ^{t−1} + Σ_{k∈P_t} n_k/n Δ_k.

Either way the algorithms' population estimates (SCAFFOLD's c, FedDyn's h) keep the unrenormalised p^k
(RoundInfo.p), which gives the papers' |S|/N factors.
"""

from __future__ import annotations

import numpy as np

SAMPLING_WEIGHTS = ("sampled", "population")
_STREAM = 0x5A4D  # separates the sampling stream from the other draws seeded by the run's seed


def sample_clients(num_devices: int, clients_per_round: int | None, seed: int, tau: int) -> np.ndarray:
    """bool [N]: the devices sampled in round τ, K = clients_per_round uniformly without replacement.

    Every K-subset is equally likely; the draw depends only on (seed, τ), so a run is reproducible and
    the set of round τ does not depend on earlier rounds. None or K ≥ N samples every device.
    """
    if clients_per_round is None or clients_per_round >= num_devices:
        return np.ones(num_devices, dtype=bool)
    if clients_per_round < 1:
        raise ValueError(f"clients_per_round={clients_per_round} is not allowed; allowed: 1..{num_devices}")
    rng = np.random.default_rng([int(seed), _STREAM, int(tau)])
    chosen = np.zeros(num_devices, dtype=bool)
    chosen[rng.choice(num_devices, size=clients_per_round, replace=False)] = True
    return chosen


def sampled_coefficients(p: np.ndarray, in_round: np.ndarray, reading: str = "sampled") -> np.ndarray:
    """The coefficients the round's scheme is applied to.

    ``sampled``: p^k / Σ_{j∈S} p^j on S and 0 elsewhere, so the scheme sees S as the whole federation
    (its N is |S|). ``population``: p unchanged; the engine gives unsampled devices no work, so every
    scheme treats them as inactive devices over all N. With every device sampled both return p.
    """
    if reading not in SAMPLING_WEIGHTS:
        raise ValueError(f"sampling_weights '{reading}' is unknown; allowed: {', '.join(SAMPLING_WEIGHTS)}")
    p = np.asarray(p, dtype=np.float64)
    in_round = np.asarray(in_round, dtype=bool)
    if reading == "population" or in_round.all():
        return p.copy()  # a device not sampled does no work (done = 0): the scheme treats it as inactive
    kept = np.where(in_round, p, 0.0)
    total = kept.sum()
    # p^k / Σ_S p^j, times Σ_k p^k (= 1 unless a fast-reboot boost is on, which then keeps its scale)
    return kept * (p.sum() / total) if total > 0 else kept
