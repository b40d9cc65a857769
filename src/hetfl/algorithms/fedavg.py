"""FedAvg (McMahan et al. 2017) with Ruan et al.'s Schemes A/B/C: w ← w + Σ_k p_τ^k Δ_k (seed 002 Eq. 2).

The base class is exactly this algorithm; the scheme's weights arrive as info.weights.
"""

from hetfl.algorithms.base import Algorithm


class FedAvg(Algorithm):
    name = "fedavg"
