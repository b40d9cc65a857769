"""Communication accounting and compression: pure functions over what clients and server send.

Per round every algorithm reports
  bytes_up     what the round's clients send, summed over them (float32 = 32 bits per entry, unless a
               compressed encoding applies: see `ternary_bits`),
  bytes_down   what the server sends to the round's clients, summed over them,
  nonzeros_up  non-zero entries of everything the clients send (FedElasticNet's first measure),
  entropy_up   Shannon entropy in bits per value of all values the clients send, each discretised to a
               bin of width 0.01, bin ⌊v/0.01⌋ (FedElasticNet's second measure, seed 004 §4: "the entropy of
               discretized values with the bin size of 0.01"; docs/algorithms.md gives the measured
               difference to a bin centred on 0).
Everything a client sends counts in all four measures (FedNova's a_i, FedCurv's and EFL's Fisher terms).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

FLOAT_BITS = 32
ENTROPY_BIN = 0.01
SMALL_VALUES = 1 << 16  # entropy_bits bins at most this many values in numpy (_entropy_small)


def dense_bits(tensors: list[Tensor], stacked: bool = True) -> float:
    """Bits of one client's copy of `tensors` as float32 (stacked: the first axis is the client axis)."""
    return float(FLOAT_BITS * sum(t[0].numel() if stacked else t.numel() for t in tensors))


def nonzeros(tensors: list[Tensor], chunk: int = 1 << 20) -> int:
    """Nonzero values of all tensors, counted about `chunk` values at a time (whole rows of a stack [K, ...],
    so the pieces are views). On CUDA count_nonzero materialises a bool and an int64 copy of its input,
    9 bytes a value: counting the 2NN's first-layer stack at once was 1.8 model copies per client of a
    FedAvg round's peak (an H200, tests/test_memory.py). Exact counts, as in one go."""
    counts = []
    for t in tensors:
        if t.dim() == 0 or t.numel() <= chunk:
            counts.append(torch.count_nonzero(t))
            continue
        rows = max(1, chunk // (t.numel() // len(t)))
        counts += [torch.count_nonzero(piece) for piece in t.split(rows)]
    return sum(int(c) for c in counts)


def entropy_bits(tensors: list[Tensor], bin_width: float = ENTROPY_BIN, centred: bool = False,
                 chunk: int = 1 << 20) -> float:
    """H = −Σ_b f_b log2 f_b over the bins ⌊v / bin_width⌋ of all values (pooled); centred: the bins
    ⌊v / bin_width + ½⌋, i.e. [−w/2, w/2) around 0 (only for the comparison in scripts/entropy_bins.py).

    The values are binned `chunk` at a time and the counts merged, so the working memory is a few chunks,
    not copies of everything the clients send (those are K models: a float and an int64 copy of them all
    was most of a round's peak memory). The counts, hence H, are exactly those of binning all at once.
    At most SMALL_VALUES finite values on the CPU are binned in one go in numpy instead (_entropy_small).
    """
    small = _entropy_small(tensors, bin_width, centred)
    if small is not None:
        return small
    parts = []  # per chunk: (lowest bin, dense counts from it) or (bins, counts)
    total = 0
    for t in tensors:
        flat = t.detach().reshape(-1)
        for lo in range(0, flat.numel(), chunk):
            # float32 division: the bins are 0.01 wide, far above float32's resolution at these
            # magnitudes, and converting millions of values to float64 first took most of this
            # function's time (a third of a 2NN round)
            q = flat[lo:lo + chunk].float().div(bin_width)  # never in place: a view
            q = (q.add_(0.5) if centred else q).floor_().to(torch.int64)
            qmin, qmax = int(q.min()), int(q.max())
            # bincount is linear time; fall back to sorting when the values span too many bins
            parts.append((qmin, torch.bincount(q - qmin)) if qmax - qmin < 1 << 24
                         else torch.unique(q, return_counts=True))
            total += q.numel()
    if not total:
        return 0.0
    dense = [p for p in parts if isinstance(p[0], int)]
    first = min((lo for lo, _ in dense), default=0)
    span = max((lo + len(c) for lo, c in dense), default=0) - first
    if len(dense) == len(parts) and span <= 1 << 24:
        counts = torch.zeros(span, dtype=torch.int64, device=dense[0][1].device)
        for lo, c in dense:
            counts[lo - first:lo - first + len(c)] += c
    else:  # merge (bin, count) pairs; unique sorts the bins, as bincount orders them
        pairs = [(torch.nonzero(p[1]).view(-1) + p[0], p[1][p[1] > 0]) if isinstance(p[0], int) else p
                 for p in parts]
        bins, inverse = torch.unique(torch.cat([b for b, _ in pairs]), return_inverse=True)
        counts = torch.zeros(len(bins), dtype=torch.int64, device=bins.device)
        counts.index_add_(0, inverse, torch.cat([c for _, c in pairs]))
    return _entropy_of_counts(counts, total)


def _entropy_of_counts(counts: Tensor, total: int) -> float:
    f = counts[counts > 0].double() / total
    return float(-(f * torch.log2(f)).sum()) + 0.0  # + 0.0: a single bin gives 0.0, not −0.0


def _entropy_small(tensors: list[Tensor], bin_width: float, centred: bool) -> float | None:
    """entropy_bits of at most SMALL_VALUES values on the CPU, binned in numpy: the same float32 division and
    floor, hence the same bins and counts, in a few calls instead of ~25 torch ops, which were most of
    its cost for a small model (a logistic regression's round: 290 → 155 µs at 30 clients; it is called
    every round of every run). Above SMALL_VALUES torch's kernels are the faster (180,000 values: 3.9 ms
    in numpy, 2.9 in torch). None where it does not apply (CUDA, more values, a huge span)."""
    if any(t.device.type != "cpu" for t in tensors) or sum(t.numel() for t in tensors) > SMALL_VALUES:
        return None
    flat = [t.detach().reshape(-1).float().numpy() for t in tensors]
    v = np.concatenate(flat) if len(flat) > 1 else flat[0]
    if not v.size:
        return None
    q = v / np.float32(bin_width)  # float32, as torch's div of a float32 tensor by the width
    if centred:
        q += np.float32(0.5)
    np.floor(q, out=q)
    # NaN or ±inf (a diverged model), bins beyond int64, or a span too wide for bincount: torch's path,
    # whose integer cast of such values this one would not repeat
    lo, hi = q.min(), q.max()
    if not (hi - lo < 1 << 24 and -2.0 ** 62 < lo and hi < 2.0 ** 62):
        return None
    return _entropy_of_counts(torch.from_numpy(np.bincount(q.astype(np.int64) - int(lo))), v.size)


def round_metrics(up: list[Tensor], down: list[Tensor], clients: int, up_bits: float | None = None,
                  down_bits: float | None = None) -> dict[str, float]:
    """The four per-round measures.

    up: every tensor the clients send, stacked [K, ...] (K = clients); down: what the server sends to
    each client (unstacked). up_bits / down_bits: bits per client when an encoding other than float32
    applies (default: dense float32).
    """
    per_up = dense_bits(up) if up_bits is None else up_bits
    per_down = dense_bits(down, stacked=False) if down_bits is None else down_bits
    return {
        "bytes_up": clients * per_up / 8,
        "bytes_down": clients * per_down / 8,
        "nonzeros_up": float(nonzeros(up)),
        "entropy_up": entropy_bits(up),
    }


# -- sparse ternary compression (EFL, seed 000, Algorithm 2) --------------------------------------------
def ternary_k(n: int, q: float) -> int:
    """k = max(nq, 1) entries kept of a tensor with n entries (⌊nq⌋ when nq is not an integer)."""
    return max(int(math.floor(n * q + 1e-9)), 1)


def ternary_compress(t: Tensor, q: float) -> tuple[Tensor, Tensor]:
    """ST(T) for every row of t [K, ...]: keep the k = max(nq, 1) largest-magnitude entries, send them as
    μ·sign with μ the mean magnitude of the kept entries; zeros elsewhere.

    Algorithm 2 as printed ranks by value (top_k(T), mask = T ≥ e); sparse ternary compression ranks by
    magnitude, which hetfl follows (ranking by value would never send a negative entry). Entries tied
    with the k-th magnitude are all kept, as the printed mask does; exact zeros are never kept.
    Returns (compressed [K, ...], kept entries per row [K]).
    """
    k_rows = t.shape[0]
    flat = t.reshape(k_rows, -1)
    n = flat.shape[1]
    if n == 0:
        return t.clone(), torch.zeros(k_rows, dtype=torch.int64, device=t.device)
    mag = flat.abs()
    threshold = torch.topk(mag, ternary_k(n, q), dim=1).values[:, -1:]
    mask = (mag >= threshold) & (mag > 0)
    kept = mask.sum(dim=1)
    mu = (mag * mask).sum(dim=1, keepdim=True) / kept.clamp(min=1).unsqueeze(1).to(mag.dtype)
    out = torch.sign(flat) * mask * mu
    return out.view_as(t), kept


def ternary_bits(n: int, kept: int) -> float:
    """Bits of one ST-compressed tensor of n entries with `kept` non-zeros: each non-zero's position
    (⌈log2 n⌉ bits) and sign (1 bit), plus μ as one float32."""
    return float(kept * (max(math.ceil(math.log2(n)), 1) + 1) + FLOAT_BITS) if n else 0.0


def ternary_with_feedback(update: list[Tensor], residual: list[Tensor], q: float
                          ) -> tuple[list[Tensor], list[Tensor], Tensor]:
    """Error feedback (EFL Eq. 5): Δ̃ = R + Δ is compressed, the part not sent becomes the new residual.

    update, residual: stacked [K, ...]. Returns (sent, new residual, bits per client [K]).
    """
    sent, new_res = [], []
    bits = torch.zeros(update[0].shape[0], dtype=torch.float64) if update else torch.zeros(0)
    for u, r in zip(update, residual, strict=True):
        full = r + u
        s, kept = ternary_compress(full, q)
        sent.append(s)
        new_res.append(full - s)
        n = full[0].numel()
        if n:  # ternary_bits for every row at once
            bits += kept.cpu().double() * (max(math.ceil(math.log2(n)), 1) + 1) + FLOAT_BITS
    return sent, new_res, bits


# -- stochastic quantisation (FedGATE / FedCOMGATE, Haddadpour et al. 2021, with QSGD's quantiser) ------
def qsgd_quantize(t: Tensor, levels: int, bucket: int, generator: torch.Generator) -> Tensor:
    """QSGD (Alistarh et al. 2017) of every row of t [K, ...], per bucket v of `bucket` consecutive entries:

        Q(v)_i = ‖v‖₂ · sign(v_i) · ξ_i / s,   ξ_i = l + 1 with probability s|v_i|/‖v‖₂ − l, else l,
        l = ⌊s|v_i|/‖v‖₂⌋,  s = levels,

    so E[Q(v)] = v (unbiased, as FedCOMGATE's analysis assumes) and each entry is one of 2s + 1 values.
    The uniform draws come from `generator` (CPU), so a run is reproducible.
    """
    k_rows = t.shape[0]
    flat = t.reshape(k_rows, -1)
    n = flat.shape[1]
    if n == 0:
        return t.clone()
    pad = (-n) % bucket
    x = torch.nn.functional.pad(flat, (0, pad)).reshape(k_rows, -1, bucket)
    norm = x.norm(dim=2, keepdim=True)
    scaled = x.abs() / norm.clamp(min=torch.finfo(x.dtype).tiny) * levels
    low = scaled.floor()
    draws = torch.rand(scaled.shape, generator=generator, dtype=scaled.dtype).to(scaled.device)
    xi = low + (draws < scaled - low).to(scaled.dtype)
    q = norm * torch.sign(x) * xi / levels
    return q.reshape(k_rows, -1)[:, :n].reshape_as(t)


def qsgd_bits(n: int, levels: int, bucket: int) -> float:
    """Bits of one QSGD-quantised tensor of n entries, fixed-length code: per entry its sign and level
    (1 + ⌈log2(s + 1)⌉ bits), per bucket its norm as one float32."""
    if n == 0:
        return 0.0
    return float(n * (1 + max(math.ceil(math.log2(levels + 1)), 1)) + math.ceil(n / bucket) * FLOAT_BITS)
