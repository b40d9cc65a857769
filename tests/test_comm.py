"""Communication accounting, EFL's sparse ternary compression with error feedback, and the Fisher diagonal."""

import math

import numpy as np
import pytest
import torch

from hetfl.engine import comm
from hetfl.engine.fisher import fisher_diagonal
from hetfl.models import make_model


def test_ternary_keeps_max_nq_1_entries_as_plus_minus_mean_magnitude():
    g = torch.Generator().manual_seed(0)
    t = torch.randn(3, 200, generator=g)  # continuous values: no ties
    for q in (0.05, 0.013, 1e-6):
        sent, kept = comm.ternary_compress(t, q)
        k = max(int(200 * q), 1)
        assert kept.tolist() == [k] * 3
        for row, s in zip(t, sent, strict=True):
            nz = s != 0
            assert int(nz.sum()) == k
            # the kept entries are the k largest magnitudes, sent as sign·μ with μ their mean magnitude
            top = row.abs().topk(k).indices
            assert set(torch.nonzero(nz).flatten().tolist()) == set(top.tolist())
            mu = row.abs()[top].mean()
            torch.testing.assert_close(s[nz].abs(), mu.expand(k))
            assert torch.equal(torch.sign(s[nz]), torch.sign(row[nz]))
            assert len(torch.unique(s)) <= 3  # ternary {−μ, 0, μ}


def test_ternary_ranks_by_magnitude_and_keeps_ties():
    t = torch.tensor([[0.1, -3.0, 2.0, 0.5]])
    sent, _ = comm.ternary_compress(t, 0.25)  # k = 1: the largest magnitude is the negative entry
    assert sent.tolist() == [[0.0, -3.0, 0.0, 0.0]]
    tie = torch.tensor([[1.0, -1.0, 0.2, 0.0]])
    sent, kept = comm.ternary_compress(tie, 0.25)
    assert kept.item() == 2 and sent.tolist() == [[1.0, -1.0, 0.0, 0.0]]
    zero, kept = comm.ternary_compress(torch.zeros(1, 5), 0.5)
    assert kept.item() == 0 and not zero.any()


def test_error_feedback_makes_the_sent_sum_track_the_true_sum():
    g = torch.Generator().manual_seed(1)
    residual = [torch.zeros(1, 100)]
    true_sum, sent_ef, sent_plain = torch.zeros(100), torch.zeros(100), torch.zeros(100)
    gaps_ef, gaps_plain = [], []
    for _ in range(300):
        u = torch.randn(1, 100, generator=g) * 0.1 + 0.05  # a drift the compressor alone keeps dropping
        s, residual, _ = comm.ternary_with_feedback([u], residual, 0.05)
        true_sum += u[0]
        sent_ef += s[0][0]
        sent_plain += comm.ternary_compress(u, 0.05)[0][0]
        # Σ sent = Σ updates − R_T exactly (telescoping residuals)
        torch.testing.assert_close(sent_ef + residual[0][0], true_sum, rtol=1e-4, atol=1e-3)
        gaps_ef.append(float((sent_ef - true_sum).norm()))
        gaps_plain.append(float((sent_plain - true_sum).norm()))
    assert max(gaps_ef[150:]) < 2 * max(gaps_ef[:150]) + 1.0  # bounded
    assert gaps_plain[-1] > 2 * gaps_plain[149] * 0.9 and gaps_plain[-1] > 10 * gaps_ef[-1]  # grows


def test_ternary_bits_are_positions_signs_and_one_float():
    assert comm.ternary_bits(1024, 10) == 10 * (10 + 1) + 32
    _, _, bits = comm.ternary_with_feedback([torch.tensor([[3.0, 0.0, 0.0, 1.0]])],
                                            [torch.zeros(1, 4)], 0.25)
    assert bits.tolist() == [1 * (2 + 1) + 32]


def test_entropy_of_binned_values():
    # bins of width 0.01: {0.001, 0.002} share bin 0, 0.5 and −0.5 have their own: H(½, ¼, ¼) = 1.5 bits
    t = [torch.tensor([[0.001, 0.002, 0.5, -0.5]])]
    assert comm.entropy_bits(t) == pytest.approx(1.5)
    assert comm.entropy_bits([torch.zeros(2, 7)]) == 0.0
    assert comm.entropy_bits([torch.tensor([[0.0, 1e9]])]) == pytest.approx(1.0)  # wide range: sorted path
    uniform = torch.arange(256, dtype=torch.float64).view(1, -1) * 0.01 + 0.005
    assert comm.entropy_bits([uniform]) == pytest.approx(8.0)


def test_entropy_in_chunks_is_exact_and_leaves_the_input_alone(monkeypatch):
    """Binning a few values at a time (bounded memory) gives exactly the counts of binning all at once,
    across tensors and chunks, in the dense and the sorted (wide-range) merge; the input is not modified."""
    monkeypatch.setattr(comm, "SMALL_VALUES", 0)  # torch's chunked binning even for these few values
    g = torch.Generator().manual_seed(0)
    # bins 0, 0, 50, −50, 100 | 3, 3 → counts {−50: 1, 0: 2, 3: 2, 50: 1, 100: 1}
    small = [torch.tensor([[0.001, 0.002, 0.5, -0.5, 1.0]]), torch.tensor([[0.035, 0.031]])]
    f = np.array([1, 2, 2, 1, 1]) / 7
    expect = float(-(f * np.log2(f)).sum())
    for chunk in (1, 2, 3, 1 << 20):
        assert comm.entropy_bits(small, chunk=chunk) == pytest.approx(expect, abs=1e-12)
    big = [torch.randn(3, 400, generator=g) * 0.3, torch.randn(3, 7, generator=g),
           torch.tensor([[0.0, 1e9, -2.0]])]  # the last spans > 2**24 bins: the sorted merge
    before = [t.clone() for t in big]
    whole = comm.entropy_bits(big, chunk=1 << 20)
    for chunk in (1, 5, 64, 1000):
        assert comm.entropy_bits(big, chunk=chunk) == whole
    assert all(torch.equal(a, b) for a, b in zip(big, before, strict=True))


@pytest.mark.parametrize("centred", [False, True])
def test_entropy_of_few_values_in_numpy_is_bitwise_the_chunked_torch_one(monkeypatch, centred):
    """entropy_bits bins a small model's values in numpy (_entropy_small): the same float32 division and
    floor give the same bins, so H is bitwise that of torch's chunked path, at bin edges (k·0.01 in
    float32, ±), for float64 input, one value, several tensors; a span of > 2**24 bins falls back."""
    g = torch.Generator().manual_seed(1)
    edges = (torch.arange(-300, 300, dtype=torch.float32) * 0.01).reshape(2, -1)
    cases = [[torch.randn(30, 60, 10, generator=g) * 0.05, torch.randn(30, 10, generator=g) * 0.05],
             [edges, edges.nextafter(torch.tensor(math.inf)), edges.nextafter(torch.tensor(-math.inf))],
             [torch.randn(4, 9, generator=g, dtype=torch.float64) * 3],
             [torch.tensor([[0.25]])],
             [torch.randn(50, 600, generator=g) * 10, torch.zeros(50, 10)]]
    fast = [comm.entropy_bits(ts, centred=centred) for ts in cases]
    assert all(comm._entropy_small(ts, comm.ENTROPY_BIN, centred) is not None for ts in cases)
    monkeypatch.setattr(comm, "SMALL_VALUES", 0)
    assert fast == [comm.entropy_bits(ts, centred=centred) for ts in cases]
    monkeypatch.undo()
    for odd in ([[0.0, 1e9]], [[0.5, math.nan]], [[math.inf, 0.1]], [[-math.inf, math.inf]],  # diverged too
                [[1e20, 1e20]]):  # one bin, but beyond int64
        ts = [torch.tensor(odd)]
        assert comm._entropy_small(ts, comm.ENTROPY_BIN, centred) is None
        assert math.isfinite(comm.entropy_bits(ts, centred=centred))
    assert comm._entropy_small([torch.zeros(2, comm.SMALL_VALUES)], comm.ENTROPY_BIN, centred) is None


def test_round_metrics_count_float32_per_client():
    up = [torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 3.0]]), torch.zeros(3, 1)]
    m = comm.round_metrics(up=up, down=[torch.zeros(2), torch.zeros(1)], clients=3)
    assert m["bytes_up"] == 3 * 3 * 4 and m["bytes_down"] == 3 * 3 * 4
    assert m["nonzeros_up"] == 3
    m = comm.round_metrics(up=up, down=[torch.zeros(2)], clients=3, up_bits=10.0, down_bits=20.0)
    assert m["bytes_up"] == 3 * 10 / 8 and m["bytes_down"] == 3 * 20 / 8


def test_fisher_diagonal_is_the_mean_squared_per_sample_gradient():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(9, 5)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 3, 9))
    offsets = np.array([0, 4, 9])
    model = make_model("logreg", 5, 3)
    params = [torch.from_numpy(rng.normal(size=(2, 3, 5)).astype(np.float32)),
              torch.from_numpy(rng.normal(size=(2, 3)).astype(np.float32))]
    clients = np.array([1, 0])  # client order of the round need not be sorted
    got = fisher_diagonal(model, params, x, y, offsets, clients)
    for row, k in enumerate(clients):
        module = model.make_module()
        model.to_module([p[row] for p in params], module)
        acc = [torch.zeros(3, 5), torch.zeros(3)]
        for i in range(offsets[k], offsets[k + 1]):  # autograd, one sample at a time
            module.zero_grad()
            torch.nn.functional.cross_entropy(module(x[i:i + 1]), y[i:i + 1]).backward()
            g = model.from_module(type("G", (), {"weight": module.weight.grad, "bias": module.bias.grad})())
            acc = [a + gi ** 2 for a, gi in zip(acc, g, strict=True)]
        n = offsets[k + 1] - offsets[k]
        for a, f in zip(acc, got, strict=True):
            torch.testing.assert_close(f[row], a / n, rtol=1e-4, atol=1e-6)
    capped = fisher_diagonal(model, params, x, y, offsets, clients, max_samples=2)
    assert not torch.allclose(capped[0], got[0])
    assert math.isfinite(float(capped[0].sum()))


class _PerSampleOnly:
    """The model with its closed-form squared-gradient sums hidden: fisher_diagonal's generic path."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        if name == "squared_grad_sums":
            raise AttributeError(name)
        return getattr(self._model, name)


@pytest.mark.parametrize("name, shape, kwargs", [("mlp", (1, 6, 6), {"hidden": (7, 5)}),
                                                 ("cnn", (1, 28, 28), {})])
def test_fisher_closed_form_equals_per_sample_gradients(name, shape, kwargs):
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.random(size=(11, *shape)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, 11))
    offsets = np.array([0, 2, 8, 11])  # sizes 2, 6, 3: padded and masked in the closed form
    model = make_model(name, shape, 10, **kwargs)
    gen = torch.Generator().manual_seed(0)
    params = [torch.stack([p + 0.01 * k for k in range(3)]) for p in model.init_params(gen)]
    clients = np.array([2, 0, 1])
    got = fisher_diagonal(model, [p.clone() for p in params], x, y, offsets, clients)
    want = fisher_diagonal(_PerSampleOnly(model), [p.clone() for p in params], x, y, offsets, clients)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)


def test_entropy_centred_bins_put_small_values_of_both_signs_together():
    t = [torch.tensor([[-0.004, 0.004, 0.003, 0.5]])]
    # ⌊v/0.01⌋: {−1}, {0, 0}, {50} → H(¼, ½, ¼) = 1.5 bits; centred ⌊v/0.01 + ½⌋: {0, 0, 0}, {50} → 0.811
    assert comm.entropy_bits(t) == pytest.approx(1.5)
    h = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert comm.entropy_bits(t, centred=True) == pytest.approx(h)


def test_fednova_counts_its_a_i_in_nonzeros_and_entropy_too():
    """Issue 11 item 3: a_i was in bytes_up but not in nonzeros_up / entropy_up."""
    from hetfl.algorithms import make_algorithm
    from hetfl.data.quadratic import build_quadratic
    from hetfl.engine.runner import TrainSettings, train
    from hetfl.models.quadratic import Quadratic

    cfg = TrainSettings("B", 1, 1, 0.1, 1, lr_schedule="constant", local_steps=(2, 3))
    res = train(Quadratic(), build_quadratic((1.0, 2.0), (1.0, 5.0)), np.ones((1, 2)), cfg,
                algorithm=make_algorithm("fednova"))
    m = {k: v for _, k, v in res.records}
    # sent: Δ_1 = 1 − 0.8²·1 = 0.36, Δ_2 = 5 − 0.6³·5 = 3.92 and a = (2, 3): four non-zeros in four bins
    assert m["nonzeros_up"] == 4
    assert m["entropy_up"] == pytest.approx(2.0)
    assert m["bytes_up"] == 2 * (1 + 1) * 4


@pytest.mark.parametrize("chunk", [1, 7, 40, 1 << 20])
def test_nonzeros_in_chunks_of_rows_count_exactly(chunk):
    """comm.nonzeros counts a stack a few rows at a time (bounded memory on CUDA): the same count for any
    chunk, for stacks, scalars and empty tensors alike."""
    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randn(9, 4, 5, generator=gen).relu(), torch.zeros(0, 3), torch.tensor(1.5),
               torch.tensor(0.0), torch.randn(6, generator=gen).relu()]
    assert comm.nonzeros(tensors, chunk=chunk) == sum(int((t != 0).sum()) for t in tensors)
