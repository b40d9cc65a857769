"""FedAvg + C + EF: the compressed baselines FedElasticNet's reviewers asked for (seed 004, review 2:
"for different compression rate (using Top-k, Sign, Quantization etc compressor + Error Feedback
compression operation C) a clean experiment is to compare: FedAvg + C + EF vs FedAvg + ℓ1 + ℓ2").

Client k sends C(e_k + Δ_k) and keeps e_k ← e_k + Δ_k − C(e_k + Δ_k) (its error-feedback residual, kept
on the device between its rounds); the server takes w ← w + Σ_k p_τ^k C(e_k + Δ_k), FedAvg with the
scheme's weights. C is top-k, scaled sign or sparse ternary (engine.compression) at a matched budget of
`bits_per_entry` bits per entry (1 = sign's cost). Buffers (batch-norm statistics) are sent dense. The
downlink is the dense model, as for FedAvg.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from hetfl.algorithms.base import (
    Algorithm,
    Params,
    RoundInfo,
    deltas,
    gather,
    scatter,
    weighted_update,
    zeros_state,
)
from hetfl.algorithms.hparams import CompressionParams, NoParams
from hetfl.engine import comm
from hetfl.engine.compression import with_feedback


class CompressedFedAvg(Algorithm):
    name = "topk_ef"
    compressor: ClassVar[str] = "topk"
    Params = CompressionParams

    @property
    def bits_per_entry(self) -> float:
        return getattr(self.hp, "bits_per_entry", 1.0)

    def init_state(self, params: Params, num_devices: int) -> dict[str, Params]:
        return {"e": zeros_state(params, num_devices)}

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        delta = deltas(params, finals)
        mask = self.mask(len(params))
        trained = [i for i, t in enumerate(mask) if t]
        residual = gather(state["e"], info.clients)
        sent_t, res_t, bits = with_feedback(self.compressor, [delta[i] for i in trained],
                                            [residual[i] for i in trained], self.bits_per_entry)
        sent, res = list(delta), [torch.zeros_like(r) for r in residual]
        for j, i in enumerate(trained):
            sent[i], res[i] = sent_t[j], res_t[j]
        dense = comm.dense_bits([delta[i] for i, t in enumerate(mask) if not t]) if not all(mask) else 0.0
        new = weighted_update(params, [p.unsqueeze(0) + s for p, s in zip(params, sent, strict=True)],
                              info.weights)
        metrics = comm.round_metrics(up=sent, down=params, clients=len(info.clients),
                                     up_bits=float(bits.mean()) + dense)
        new = self.with_buffers(new, finals, info)  # buffers: the clients' normalised average
        return new, {"e": scatter(state["e"], info.clients, res)}, metrics


class SignFedAvg(CompressedFedAvg):
    name = "sign_ef"
    compressor = "sign"
    Params = NoParams


class TernaryFedAvg(CompressedFedAvg):
    name = "st_ef"
    compressor = "st"
