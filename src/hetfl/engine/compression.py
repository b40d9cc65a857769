"""Biased compressors with error feedback at a matched bit budget, for the comparison FedElasticNet's
reviewers asked for (seed 004, review 2: "FedAvg + C + EF vs FedAvg + ℓ1 + ℓ2" for top-k, sign and
quantisation compressors).

Every compressor maps one client's tensor v (n entries) to a dense tensor of what the server decodes,
and reports the bits it took:
  top-k   the k entries of largest magnitude, each sent as a float32 value and its position:
          k·(32 + ⌈log2 n⌉) bits;
  sign    scaled sign (‖v‖₁/n)·sign(v) (EF-SignSGD, Karimireddy et al. 2019): n bits + one float32;
  ST      sparse ternary (EFL, seed 000, Algorithm 2; engine.comm.ternary_compress): the k entries of
          largest magnitude as μ·sign, k·(⌈log2 n⌉ + 1) bits + one float32.
Matched bytes: a budget of b bits per entry gives each tensor b·n + 32 bits (b = 1 is exactly sign's
cost); top-k and ST keep the largest k that fits, at least one entry.
Error feedback (Stich et al. 2018; Karimireddy et al. 2019): a client compresses e + Δ and keeps
e ← e + Δ − C(e + Δ) for its next round.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from hetfl.engine import comm

COMPRESSORS = ("topk", "sign", "st")


def position_bits(n: int) -> int:
    """Bits of one position among n entries (at least one)."""
    return max(math.ceil(math.log2(n)), 1) if n > 1 else 1


def budget_k(compressor: str, n: int, bits_per_entry: float) -> int:
    """Entries top-k or ST may keep of an n-entry tensor within bits_per_entry·n + 32 bits (≥ 1)."""
    budget = bits_per_entry * n + comm.FLOAT_BITS
    if compressor == "topk":
        k = math.floor(budget / (comm.FLOAT_BITS + position_bits(n)))
    elif compressor == "st":
        k = math.floor((budget - comm.FLOAT_BITS) / (position_bits(n) + 1))
    else:
        raise ValueError(f"compressor '{compressor}' has no k; allowed: topk, st")
    return min(max(k, 1), n)


def compress(compressor: str, v: Tensor, bits_per_entry: float = 1.0) -> tuple[Tensor, Tensor]:
    """(decoded [K, ...], bits [K]) of every row of v [K, ...] (one row per client)."""
    rows = v.shape[0]
    flat = v.reshape(rows, -1)
    n = flat.shape[1]
    if n == 0:
        return v.clone(), torch.zeros(rows, dtype=torch.float64)
    if compressor == "sign":
        scale = flat.abs().mean(dim=1, keepdim=True)
        out = torch.sign(flat) * scale
        return out.view_as(v), torch.full((rows,), float(n + comm.FLOAT_BITS), dtype=torch.float64)
    if compressor == "topk":
        k = budget_k("topk", n, bits_per_entry)
        idx = torch.topk(flat.abs(), k, dim=1).indices
        out = torch.zeros_like(flat).scatter_(1, idx, flat.gather(1, idx))
        bits = float(k * (comm.FLOAT_BITS + position_bits(n)))
        return out.view_as(v), torch.full((rows,), bits, dtype=torch.float64)
    if compressor == "st":
        k = budget_k("st", n, bits_per_entry)
        out, kept = comm.ternary_compress(v, k / n)
        bits = kept.cpu().double() * (position_bits(n) + 1) + comm.FLOAT_BITS
        return out, bits
    raise ValueError(f"compressor '{compressor}' is unknown; allowed: {', '.join(COMPRESSORS)}")


def with_feedback(compressor: str, update: list[Tensor], residual: list[Tensor], bits_per_entry: float = 1.0
                  ) -> tuple[list[Tensor], list[Tensor], Tensor]:
    """C(e + Δ) per tensor for every client, the new residuals e + Δ − C(e + Δ), and bits per client [K]."""
    sent, new_res = [], []
    bits = torch.zeros(update[0].shape[0], dtype=torch.float64) if update else torch.zeros(0)
    for u, r in zip(update, residual, strict=True):
        full = r + u
        s, b = compress(compressor, full, bits_per_entry)
        sent.append(s)
        new_res.append(full - s)
        bits += b
    return sent, new_res, bits
