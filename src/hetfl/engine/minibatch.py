"""Minibatch index streams, one per (seed, round, client), so any subset of clients reproduces bitwise."""

from __future__ import annotations

import numpy as np


def full_steps(train_sizes: np.ndarray, local_epochs: int, batch_size: int) -> np.ndarray:
    """Steps of a complete round: E epochs of ⌈n_k/B⌉ minibatches (the lecture notes' z_i = E·n_i/B)."""
    return local_epochs * -(-np.asarray(train_sizes, dtype=np.int64) // batch_size)


def minibatch_indices(offsets: np.ndarray, client_ids: np.ndarray, steps: np.ndarray, batch_size: int,
                      seed: int, round_: int) -> np.ndarray:
    """Absolute sample indices [K, max(steps), B] into the flat training arrays.

    Client k's stream is a concatenation of fresh permutations of its n_k samples (one per epoch), cut
    into consecutive batches of B; a stream that wraps mid-batch continues into the next permutation, so
    every batch has exactly B samples. Rows past a client's own step count repeat its first sample and are
    never used.
    """
    max_steps = int(steps.max()) if len(steps) else 0
    out = np.empty((len(client_ids), max_steps, batch_size), dtype=np.int64)
    for row, (k, s) in enumerate(zip(client_ids, steps, strict=True)):
        lo, n = int(offsets[k]), int(offsets[k + 1] - offsets[k])
        out[row] = lo
        if s == 0:
            continue
        need = int(s) * batch_size
        rng = np.random.default_rng([seed, round_, int(k)])
        stream = np.concatenate([rng.permutation(n) for _ in range(-(-need // n))])[:need]
        out[row, :s] = (stream + lo).reshape(int(s), batch_size)
    return out
