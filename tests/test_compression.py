"""Top-k, scaled sign and sparse ternary compression with error feedback at a matched bit budget."""

import numpy as np
import pytest
import torch

from hetfl.algorithms import make_algorithm
from hetfl.algorithms.base import RoundInfo, Task
from hetfl.engine.compression import budget_k, compress, with_feedback
from hetfl.models import make_model

V = torch.tensor([[0.5, -2.0, 0.1, 3.0]])  # one client, n = 4: a position takes 2 bits


def test_topk_by_hand():
    out, bits = compress("topk", V, bits_per_entry=1.0)  # 4 + 32 bits fit ⌊36/34⌋ = 1 entry
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 0.0, 3.0]]))
    assert bits.tolist() == [34.0]  # value (32) + position (2)
    out, bits = compress("topk", V, bits_per_entry=9.0)  # ⌊68/34⌋ = 2 entries
    torch.testing.assert_close(out, torch.tensor([[0.0, -2.0, 0.0, 3.0]]))
    assert bits.tolist() == [68.0]


def test_scaled_sign_by_hand():
    out, bits = compress("sign", torch.tensor([[1.0, -3.0, 0.0, 2.0]]))
    torch.testing.assert_close(out, torch.tensor([[1.5, -1.5, 0.0, 1.5]]))  # ‖v‖₁/n = 6/4
    assert bits.tolist() == [36.0]  # one bit per entry + the scale


def test_sparse_ternary_by_hand():
    out, bits = compress("st", V, bits_per_entry=1.0)  # ⌊(36 − 32)/(2 + 1)⌋ = 1 entry
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 0.0, 3.0]]))
    assert bits.tolist() == [35.0]
    out, bits = compress("st", V, bits_per_entry=2.0)  # ⌊8/3⌋ = 2 entries, μ = (2 + 3)/2
    torch.testing.assert_close(out, torch.tensor([[0.0, -2.5, 0.0, 2.5]]))
    assert bits.tolist() == [38.0]


def test_error_feedback_by_hand():
    sent, res, _ = with_feedback("topk", [V], [torch.zeros_like(V)])
    torch.testing.assert_close(sent[0], torch.tensor([[0.0, 0.0, 0.0, 3.0]]))
    torch.testing.assert_close(res[0], torch.tensor([[0.5, -2.0, 0.1, 0.0]]))
    # next round Δ = (0.5, 0.5, 0, 0): e + Δ = (1, −1.5, 0.1, 0) → sends −1.5, keeps (1, 0, 0.1, 0)
    sent, res, _ = with_feedback("topk", [torch.tensor([[0.5, 0.5, 0.0, 0.0]])], res)
    torch.testing.assert_close(sent[0], torch.tensor([[0.0, -1.5, 0.0, 0.0]]))
    torch.testing.assert_close(res[0], torch.tensor([[1.0, 0.0, 0.1, 0.0]]))


@pytest.mark.parametrize("compressor", ["topk", "st"])
def test_bytes_are_matched_to_sign(compressor):
    v = torch.randn(3, 7840, generator=torch.Generator().manual_seed(0))
    sign_bits = float(compress("sign", v)[1][0])
    _, bits = compress(compressor, v, bits_per_entry=1.0)
    per_entry = 32 + 13 if compressor == "topk" else 13 + 1  # ⌈log2 7840⌉ = 13
    assert (bits <= sign_bits).all() and (bits > sign_bits - per_entry).all()
    assert budget_k(compressor, 7840, 1.0) == (7872 // 45 if compressor == "topk" else 7840 // 14)


def test_compressed_fedavg_round_by_hand():
    """Two clients of a 3→2 logistic regression: w ← w + Σ p_τ^k C(e_k + Δ_k), residuals kept per device."""
    model = make_model("logreg", 3, 2)
    algo = make_algorithm("topk_ef", {"bits_per_entry": 1.0})
    x = torch.zeros(4, 3)
    algo.setup(Task(model, x, torch.zeros(4, dtype=torch.int64), np.array([0, 2, 4])))
    params = [torch.zeros(3, 2), torch.zeros(2)]
    state = algo.init_state(params, 2)
    w_delta = torch.tensor([[[0.1, 0.0], [0.0, 0.0], [0.0, -0.4]], [[0.2, 0.3], [0.0, 0.0], [0.0, 0.0]]])
    b_delta = torch.tensor([[0.05, 0.0], [0.0, -0.5]])
    info = RoundInfo(tau=1, lr=0.1, clients=np.array([0, 1]), done=np.array([1, 1]), full=np.array([1, 1]),
                     weights=np.array([0.25, 0.75]), p=np.array([0.25, 0.75]))
    new, state, metrics = algo.aggregate(state, params, [w_delta, b_delta], info)
    # W (n = 6, 3-bit positions): ⌊38/35⌋ = 1 entry each: client 0 keeps −0.4, client 1 keeps 0.3;
    # b (n = 2, 1-bit positions): ⌊34/33⌋ = 1 entry: client 0 keeps 0.05, client 1 keeps −0.5
    torch.testing.assert_close(new[0], torch.tensor([[0.0, 0.75 * 0.3], [0.0, 0.0], [0.0, 0.25 * -0.4]]))
    torch.testing.assert_close(new[1], torch.tensor([0.25 * 0.05, 0.75 * -0.5]))
    torch.testing.assert_close(state["e"][0][1], torch.tensor([[0.2, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    assert metrics["bytes_up"] == 2 * (35 + 33) / 8 and metrics["nonzeros_up"] == 4
