"""FedGATE with compression, FedCOMGATE (Haddadpour, Kamani, Mokhtari, Mahdavi, AISTATS 2021, "Federated
learning with compression: unified analysis and sharp guarantees", Algorithm 2): local gradient tracking
with a quantised upload.

Every device keeps a tracking correction δ_k (0 at the start). Round r, device j, τ local steps:

    local step:  d = g̃_j(w_j) − δ_j,  w_j ← w_j − η d
    upload:      Δ_j = Q((w − w_j)/η)                 (Q unbiased: hetfl uses QSGD, engine.comm)
    server:      Δ = mean_j Δ_j;  w ← w − ηγ Δ;  broadcasts Δ
    device:      δ_j ← δ_j + (Δ_j − Δ)/τ

Q is scale-equivariant and odd (Q(−cx) = −cQ(x), c > 0, same draws), so ηQ((w − w_j)/η) = −Q(w_j − w):
hetfl quantises q_j = Q(w_j − w) and writes w ← w + γ Σ_j p_τ^k q_j (the scheme's weights; the paper's
mean under Scheme B with equal data) and δ_j ← δ_j + d_j − d̄ with d_j = −q_j/(τ_j η) and d̄ the data-
weighted mean over the round (vrlsgd.tracking_update), which is the paper's update when every device does
τ steps and stays exact when they do not. τ_j = the steps done (`period: done`) or a complete round's.
Released code (MLOPTPSU/FedTorch, fedgate.py): the same local step and δ update (with the unquantised
own update), an 8-bit deterministic min-max quantiser, and the average re-quantised for the broadcast.
Buffers (batch-norm statistics) are averaged unquantised and carry no δ.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hetfl.algorithms.base import Params, RoundInfo, deltas, gather, scatter, weighted_sum
from hetfl.algorithms.hparams import FedGateParams
from hetfl.algorithms.vrlsgd import VRLSGD, tracking_update
from hetfl.engine import comm


class FedGATE(VRLSGD):
    """VRL-SGD's per-device correction (state, context, local gradient g − δ_k) with a quantised upload,
    a server step size and the correction updated from what was sent."""

    name = "fedgate"
    Params = FedGateParams

    def generator(self, tau: int) -> torch.Generator:
        """The quantiser's draws for round τ, from the run's seed (reproducible, independent per round)."""
        seed = int(np.random.SeedSequence([self.task.seed if self.task else 0, tau, 0xFED6A7E])
                   .generate_state(1)[0])
        return torch.Generator().manual_seed(seed)

    def quantize(self, delta: Params, tau: int) -> tuple[Params, float]:
        """What the clients send of their updates [K, ...] and the bits per client."""
        trained = self.mask(len(delta))
        if self.hp.quantizer == "none":
            return delta, comm.dense_bits(delta)
        gen = self.generator(tau)
        sent = [comm.qsgd_quantize(d, self.hp.levels, self.hp.bucket, gen) if t else d
                for d, t in zip(delta, trained, strict=True)]
        bits = sum(comm.qsgd_bits(d[0].numel(), self.hp.levels, self.hp.bucket) if t
                   else comm.FLOAT_BITS * d[0].numel() for d, t in zip(delta, trained, strict=True))
        return sent, float(bits)

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        trained = self.mask(len(params))
        sent, bits = self.quantize(deltas(params, finals), info.tau)
        step = weighted_sum(sent, info.weights)
        new = [w + (self.hp.server_lr * s if t else s) for w, s, t in zip(params, step, trained, strict=True)]
        steps = info.done if self.hp.period == "done" else info.full
        new_delta = tracking_update(gather(state["delta"], info.clients), sent, steps, info.lr,
                                    info.p[info.clients], trained)
        # down: the model at the start of the round and the average Δ for the δ update, both float32
        metrics = comm.round_metrics(up=sent, down=[*params, *params], clients=len(info.clients),
                                     up_bits=bits)
        new = self.with_buffers(new, finals, info)  # buffers: the clients' normalised average
        return new, {"delta": scatter(state["delta"], info.clients, new_delta)}, metrics
