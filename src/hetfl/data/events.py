"""Arrivals and departures (Ruan et al. §3.3, §4.2, §5.3–5.4) as a pure per-round schedule.

Reading (see docs/events.md): an event "at τ0" takes effect in round τ0 — an arriving device trains in
round τ0 and a departing one sends nothing from round τ0 on — so round τ0 − 1 is the last round of the
old objective, the level Table 4 measures recovery against. After an objective shift the learning rate
restarts: η_τ = η0/(τ − τ0 + 1) for τ ≥ τ0, the paper's η0/(τ − τ0) with rounds counted from 1 after
the shift.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ARRIVAL_POLICIES = ("fast_reboot", "vanilla")
DEPARTURE_POLICIES = ("include", "exclude")
TEST_SETS = ("paper", "remaining", "all")


@dataclass(frozen=True)
class Event:
    kind: str  # "arrival" | "departure"
    round: int  # τ0 (1-based)
    devices: tuple[int, ...]
    policy: str  # arrival: fast_reboot | vanilla; departure: include | exclude

    def __post_init__(self) -> None:
        allowed = {"arrival": ARRIVAL_POLICIES, "departure": DEPARTURE_POLICIES}
        if self.kind not in allowed:
            raise ValueError(f"event kind '{self.kind}' is not allowed; allowed: arrival, departure")
        if self.policy not in allowed[self.kind]:
            raise ValueError(f"{self.kind} policy '{self.policy}' is not allowed; "
                             f"allowed: {', '.join(allowed[self.kind])}")
        if self.round < 1:
            raise ValueError(f"event round {self.round} is not allowed; allowed: >= 1")


@dataclass
class Schedule:
    """Per-round arrays [R, N] (rounds τ = 1..R are rows 0..R-1)."""

    in_objective: np.ndarray  # bool: device k is in the global objective F = Σ p^k F_k this round
    sending: np.ndarray  # bool: device k takes part this round (trains and uploads)
    boost: np.ndarray  # float: 1 + δ^k/p^k (fast reboot), 1 otherwise; engine.schemes.boosted_weights
    test_devices: np.ndarray  # bool: device k's holdout is in this round's test set
    shift_round: np.ndarray  # int [R]: last objective shift (1 if none); η_τ = η0/(τ − shift + 1)

    def coefficients(self, p: np.ndarray, tau: int) -> np.ndarray:
        """p^k renormalised over the objective's devices this round (the boost is applied with the scheme)."""
        row = self.in_objective[tau - 1]
        base = np.where(row, p, 0.0)
        return base / base.sum()

    def lr(self, eta0: float, tau: int) -> float:
        """Ruan et al. §5.1 staircase η_τ = η0/τ, restarted at the last objective shift (Cor. 3.2.1)."""
        return eta0 / (tau - int(self.shift_round[tau - 1]) + 1)


#: how the fast-reboot boost decays (event.boost_decay, docs/events.md): §5.3 "decays to p^l by O(τ^−2)"
#: fixes neither the constant nor the origin; both readings give 3p^l at τ0 and an O(τ^−2) excess
BOOST_DECAYS: tuple[str, ...] = ("shifted", "relative")


def fast_reboot_boost(tau: int, tau0: int, factor: float = 3.0, decay: str = "shifted") -> float:
    """Ruan et al. §5.3: p_τ^l = 3p^l at τ0, decaying to p^l as O(τ^−2). The factor on p^l is
    1 + (factor − 1)/(τ − τ0 + 1)² (``shifted``: rounds counted from the arrival, as the learning-rate
    restart counts them) or 1 + (factor − 1)·(τ0/τ)² (``relative``: the global round τ itself)."""
    if decay not in BOOST_DECAYS:
        raise ValueError(f"boost decay '{decay}' is not allowed; allowed: {', '.join(BOOST_DECAYS)}")
    if tau < tau0:
        return 1.0
    if decay == "relative":
        return 1.0 + (factor - 1.0) * (tau0 / tau) ** 2
    return 1.0 + (factor - 1.0) / (tau - tau0 + 1) ** 2


def build_schedule(events: Sequence[Event], num_devices: int, rounds: int,
                   departure_test_set: str = "paper", boost_decay: str = "shifted") -> Schedule:
    """The schedule of a run with the given events (none: everyone in, no shift).

    departure_test_set (docs/readings.md): "paper" scores 'include' on every device's holdout (the original
    objective's data, f0 of Corollary 4.0.3) and 'exclude' on the remaining devices' (f1), as Figure 4's
    caption says ("except for the include option, models are tested with new datasets that ... exclude
    holdout data from the departing device"); "remaining" and "all" score both options on the same data.
    """
    if departure_test_set not in TEST_SETS:
        raise ValueError(f"departure_test_set '{departure_test_set}' is not allowed; "
                         f"allowed: {', '.join(TEST_SETS)}")
    R, N = rounds, num_devices
    in_obj = np.ones((R, N), dtype=bool)
    sending = np.ones((R, N), dtype=bool)
    boost = np.ones((R, N))
    test = np.ones((R, N), dtype=bool)
    shift = np.ones(R, dtype=np.int64)
    taus = np.arange(1, R + 1)
    for ev in sorted(events, key=lambda e: e.round):
        devs = list(ev.devices)
        if any(d < 0 or d >= N for d in devs):
            raise ValueError(f"event devices {devs} are not allowed; allowed: 0..{N - 1}")
        before, after = taus < ev.round, taus >= ev.round
        if ev.kind == "arrival":
            for d in devs:
                in_obj[before, d] = sending[before, d] = test[before, d] = False
            if ev.policy == "fast_reboot":
                b = np.array([fast_reboot_boost(t, ev.round, decay=boost_decay) for t in taus])
                boost[:, devs] = b[:, None]
            shift[after] = ev.round
        else:
            for d in devs:
                sending[after, d] = False
                if ev.policy == "exclude":
                    in_obj[after, d] = False
                if departure_test_set == "remaining" or (departure_test_set == "paper"
                                                         and ev.policy == "exclude"):
                    test[after, d] = False
            if ev.policy == "exclude":
                shift[after] = ev.round
    if not in_obj.any(axis=1).all():
        raise ValueError("the events leave a round with no device in the objective")
    return Schedule(in_obj, sending, boost, test, shift)
