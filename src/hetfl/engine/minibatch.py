"""Minibatch index streams, one per (seed, round, client), so any subset of clients reproduces bitwise.

Client k's stream in round τ is drawn from `numpy.random.default_rng([seed, τ, k])`. Building one such
generator costs ≈ 15–50 µs (NumPy's SeedSequence hashing and PCG64 seeding, in Python-facing code), most of
a client's index cost. `minibatch_indices` therefore derives the PCG64 states of all the round's clients at
once (`pcg64_states`: SeedSequence's hash mix vectorised over the clients, then PCG64's two-step seeding)
and loads each into one reused generator; only the shuffles themselves (NumPy's Fisher–Yates, in C) run
per client. The streams are bitwise those of `default_rng([seed, τ, k])`
(tests/test_engine.py::test_vectorised_seeding_is_default_rng), so results did not change.
"""

from __future__ import annotations

import numpy as np

# NumPy's SeedSequence constants (numpy/random/bit_generator.pyx, after M. O'Neill's seed_seq_fe) and
# PCG64's 128-bit LCG multiplier (PCG_DEFAULT_MULTIPLIER_128). NumPy guarantees these streams are stable.
_INIT_A, _MULT_A = np.uint32(0x43B0D7E5), np.uint32(0x931E8875)
_INIT_B, _MULT_B = np.uint32(0x8B51F9DD), np.uint32(0x58F38DED)
_MIX_L, _MIX_R = np.uint32(0xCA01F9DD), np.uint32(0x4973F715)
_XSHIFT = np.uint32(16)
_POOL = 4
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_MASK128 = (1 << 128) - 1


def full_steps(train_sizes: np.ndarray, local_epochs: int, batch_size: int) -> np.ndarray:
    """Steps of a complete round: E epochs of ⌈n_k/B⌉ minibatches (the lecture notes' z_i = E·n_i/B)."""
    return local_epochs * -(-np.asarray(train_sizes, dtype=np.int64) // batch_size)


def _uint32_words(n: int) -> list[int]:
    """An entropy integer as SeedSequence reads it: little-endian 32-bit words ([0] for 0)."""
    if n < 0:
        raise ValueError(f"seed entropy must be non-negative, got {n}")
    words = [n & 0xFFFFFFFF] if n == 0 else []
    while n > 0:
        words.append(n & 0xFFFFFFFF)
        n >>= 32
    return words


def pcg64_states(prefix: tuple[int, ...], last: np.ndarray) -> list[tuple[int, int]]:
    """(state, inc) of `PCG64(SeedSequence([*prefix, k]))` for every k in `last` (each < 2**32).

    SeedSequence: the entropy words are hashed into a pool of 4 words (mix_entropy), and generate_state
    hashes the pool into 4 uint64 words; PCG64 seeds its LCG with the first two as the initial state and
    the last two as the stream (increment). The 32-bit hashing is done for all k at once (uint32
    arithmetic wraps as the C code does); the two 128-bit LCG steps are Python integers.
    """
    last = np.asarray(last, dtype=np.uint64)
    if len(last) and int(last.max()) >= 1 << 32:
        raise ValueError("client ids must be < 2**32")
    head = [w for n in prefix for w in _uint32_words(int(n))]
    K = len(last)
    entropy = [np.full(K, w, dtype=np.uint32) for w in head] + [last.astype(np.uint32)]
    with np.errstate(over="ignore"):
        hash_const = _INIT_A

        def hashmix(value: np.ndarray) -> np.ndarray:
            nonlocal hash_const
            value = value ^ hash_const
            hash_const = hash_const * _MULT_A
            value = value * hash_const
            return value ^ (value >> _XSHIFT)

        def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            r = _MIX_L * x - _MIX_R * y
            return r ^ (r >> _XSHIFT)

        zero = np.zeros(K, dtype=np.uint32)
        pool = [hashmix(entropy[i] if i < len(entropy) else zero) for i in range(_POOL)]
        for src in range(_POOL):
            for dst in range(_POOL):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        for src in range(_POOL, len(entropy)):
            for dst in range(_POOL):
                pool[dst] = mix(pool[dst], hashmix(entropy[src]))
        hash_b = _INIT_B
        words = []
        for i in range(2 * _POOL):  # generate_state(4, uint64): 8 uint32 words, cycling over the pool
            v = pool[i % _POOL] ^ hash_b
            hash_b = hash_b * _MULT_B
            v = v * hash_b
            words.append(v ^ (v >> _XSHIFT))
    w64 = [words[2 * i].astype(np.uint64) | (words[2 * i + 1].astype(np.uint64) << np.uint64(32))
           for i in range(4)]
    out = []
    for s_hi, s_lo, i_hi, i_lo in zip(*(w.tolist() for w in w64), strict=True):
        inc = (((i_hi << 64) | i_lo) << 1 | 1) & _MASK128
        state = inc  # step from 0: 0·mult + inc
        state = (state + ((s_hi << 64) | s_lo)) & _MASK128
        out.append(((state * _PCG_MULT + inc) & _MASK128, inc))
    return out


def client_streams(sizes: np.ndarray, client_ids: np.ndarray, needs: np.ndarray, seed: int,
                   round_: int) -> list[np.ndarray]:
    """Client k's first needs[k] positions (0 … n_k − 1) of its round-τ stream, for every k in client_ids.

    The stream is a concatenation of fresh permutations of the client's n_k samples (one per epoch) drawn
    in order from default_rng([seed, round_, k]); a shorter request is therefore a prefix of a longer one.
    """
    bit_gen = np.random.PCG64()
    gen = np.random.Generator(bit_gen)
    state = {"bit_generator": "PCG64", "state": {"state": 0, "inc": 0}, "has_uint32": 0, "uinteger": 0}
    out = []
    for size, need, (s, inc) in zip(np.asarray(sizes).tolist(), np.asarray(needs).tolist(),
                                    pcg64_states((seed, round_), client_ids), strict=True):
        state["state"] = {"state": s, "inc": inc}
        bit_gen.state = state
        epochs = -(-need // size)
        # Generator.permutation(n) is shuffle(arange(n)): shuffling each epoch's slice in place draws
        # exactly the same numbers, without a concatenation.
        stream = np.tile(np.arange(size, dtype=np.int64), epochs)
        for e in range(epochs):
            gen.shuffle(stream[e * size:(e + 1) * size])
        out.append(stream[:need])
    return out


def minibatch_indices(offsets: np.ndarray, client_ids: np.ndarray, steps: np.ndarray, batch_size: int,
                      seed: int, round_: int) -> np.ndarray:
    """Absolute sample indices [K, max(steps), B] into the flat training arrays.

    Client k's stream is a concatenation of fresh permutations of its n_k samples (one per epoch), drawn
    from default_rng([seed, round_, k]), cut into consecutive batches of B; a stream that wraps mid-batch
    continues into the next permutation, so every batch has exactly B samples. Rows past a client's own
    step count repeat its first sample and are never used.
    """
    return SharedStreams()(offsets, client_ids, steps, batch_size, seed, round_)


class SharedStreams:
    """`minibatch_indices` with a memo, for the runs of a cell, which share a split and a seed: each
    client's stream of a round is drawn once and cut for every run that trains it.

    Runs of a cell differ in who trains and how many steps (traces, schemes, readings), not in the streams:
    a client's stream of round τ depends only on (seed, τ, k), and a shorter request is a prefix of a longer
    one (client_streams). The memo keeps one round; a request longer than what it holds draws that client's
    stream again at the new length. Every run gets exactly what a fresh memo (minibatch_indices) gives
    (tests/test_engine.py::test_shared_streams_equal_minibatch_indices). In a Table 3 cell (30 runs) this
    was ≈ 27 % of the training time.
    """

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._offsets: np.ndarray | None = None  # held, so the id in the key cannot be reused
        self._streams: dict[int, np.ndarray] = {}

    def __call__(self, offsets: np.ndarray, client_ids: np.ndarray, steps: np.ndarray, batch_size: int,
                 seed: int, round_: int) -> np.ndarray:
        key = (id(offsets), int(seed), int(round_))
        if key != self._key:
            self._key, self._offsets, self._streams = key, offsets, {}
        client_ids = np.asarray(client_ids, dtype=np.int64)
        steps = np.asarray(steps, dtype=np.int64)
        flat = np.asarray(offsets, dtype=np.int64)
        lo = flat[client_ids]
        n = flat[client_ids + 1] - lo
        working = np.flatnonzero(steps > 0)
        if (n[working] <= 0).any():
            raise ValueError("a client with local steps has no training samples")
        max_steps = int(steps.max()) if len(steps) else 0
        out = np.empty((len(client_ids), max_steps, batch_size), dtype=np.int64)
        out[...] = lo[:, None, None]
        needs = steps * batch_size
        short = [r for r in working.tolist()
                 if len(self._streams.get(int(client_ids[r]), ())) < needs[r]]
        if short:
            drawn = client_streams(n[short], client_ids[short], needs[short], seed, round_)
            self._streams.update(zip(client_ids[short].tolist(), drawn, strict=True))
        for row in working.tolist():
            stream = self._streams[int(client_ids[row])][:needs[row]]
            np.add(stream.reshape(-1, batch_size), lo[row], out=out[row, :steps[row]])
        return out
