"""FedFOR's concept-shift benchmark (Tian, Smith, Kira 2022, seed 003, §4.4) as a pure per-round label map.

The paper: "at the start of each global iteration when a server selects clients to participate in this
round of communication, the label of a selected class of data, for all clients, will change to a different
one in the set of available labels with a probability of 5 %. Once changed, the label for this class will
not be reverted until being changed again in the future to a different label." Table 5: "200 training
iterations with 10 randomly constructed concept shifts in the label space" (200 × 5 % = 10 expected).

Reading (docs/fedfor.md): at the start of every round τ ≥ 2 a shift happens with probability p; it picks a
class c uniformly and gives it a label drawn uniformly from the C − 1 labels other than its current one.
Row τ − 1 of `label_maps` is the map in force during round τ: a sample of class c is trained on and
evaluated against label map[c], on every client and in the validation set ("for all clients": a global
shift). Two classes may come to share a label; the old one is then no longer used.
"""

from __future__ import annotations

import numpy as np

_STREAM = 0xC5  # separates this stream from the other draws seeded by the run's seed


def label_maps(num_classes: int, rounds: int, probability: float, seed: int) -> np.ndarray:
    """int64 [rounds, C]: row τ − 1 maps each class to its label in round τ (row 0 is the identity)."""
    if num_classes < 2:
        raise ValueError(f"a concept shift needs at least 2 labels, got num_classes={num_classes}")
    if not 0 <= probability <= 1:
        raise ValueError(f"concept_shift probability={probability} is not allowed; allowed: 0..1")
    rng = np.random.default_rng([int(seed), _STREAM])
    maps = np.empty((rounds, num_classes), dtype=np.int64)
    current = np.arange(num_classes, dtype=np.int64)
    for tau in range(1, rounds + 1):
        if tau > 1 and rng.random() < probability:
            c = int(rng.integers(num_classes))
            others = np.delete(np.arange(num_classes), current[c])
            current = current.copy()
            current[c] = int(rng.choice(others))
        maps[tau - 1] = current
    return maps


def shift_rounds(maps: np.ndarray) -> list[int]:
    """The rounds τ at whose start the map changed."""
    changed = np.any(maps[1:] != maps[:-1], axis=1)
    return [int(t) + 2 for t in np.flatnonzero(changed)]
