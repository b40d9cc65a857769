"""The generic torch.func path (models/func.py) on the zoo's torch.nn modules: batched = the per-client loop.

The registered zoo models are hand-written (tests/test_models.py); FuncModel stays the way to run any other
torch.nn module on the batched engine, and these tests run it on the same modules."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from torch import nn

from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import minibatch_indices
from hetfl.engine.oracle import local_sgd_reference
from hetfl.models.func import FuncModel
from hetfl.models.zoo import LSTM, VGG, CifarResNet, TextLSTM

# name, input shape of one sample (a sequence length for text), classes, the module's factory (tiny
# sizes; text through the matmul LSTM, which vmap can batch), vocabulary (text).
FAMILIES = [
    # hidden is scaled by width: 256 / 16 = 16 units (hidden 16 gave one unit, a dead ReLU, no gradient below)
    ("vgg11", (3, 32, 32), 10, partial(VGG, (3, 32, 32), 10, width=1 / 16, hidden=256), 0),
    ("vgg11", (3, 32, 32), 10, partial(VGG, (3, 32, 32), 10, width=1 / 16, hidden=256, norm="group",
                                       groups=2), 0),
    ("resnet20", (3, 8, 8), 10, partial(CifarResNet, (3, 8, 8), 10, widths=(4, 8, 8), blocks=1), 0),
    ("resnet_emnist", (1, 12, 12), 7, partial(CifarResNet, (1, 12, 12), 7, widths=(4, 8), blocks=2), 0),
    ("char_lstm", (12,), 20, partial(TextLSTM, 20, 4, 8, 2, 20, recurrent="matmul"), 20),
    ("sent_lstm", (6,), 2, partial(TextLSTM, 50, 5, 6, 2, 2, recurrent="matmul"), 50),
]
IDS = ["vgg11", "vgg11-gn", "resnet20", "resnet_emnist", "char_lstm", "sent_lstm"]
STEPS = np.array([3, 0, 2, 4, 1, 4])


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    """One intra-op thread: tiny kernels gain nothing from more, and on a shared machine two made these
    tests several times slower (see tests/test_models.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)  # heterogeneous, with a client that does no work
BATCH, PER_CLIENT = 4, 12


def _problem(family, chunk: int = 16, seed: int = 0):
    name, shape, classes, factory, vocab = family
    gen = torch.Generator().manual_seed(seed)
    model = FuncModel(name, factory, chunk=chunk)
    params = model.init_params(gen)
    n = len(STEPS) * PER_CLIENT
    if vocab:  # token ids
        x = torch.randint(0, vocab, (n, *shape), generator=gen)
    else:
        x = torch.randn(n, *shape, generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    offsets = np.arange(len(STEPS) + 1) * PER_CLIENT
    idx = minibatch_indices(offsets, np.arange(len(STEPS)), STEPS, BATCH, seed, 3)
    return model, params, x, y, idx


def _close(a, b, rtol=1e-4, atol=2e-5) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b, strict=True):
        assert u.shape == v.shape
        torch.testing.assert_close(u, v, rtol=rtol, atol=atol)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_one_round_equals_per_client_loop(family):
    model, params, x, y, idx = _problem(family)
    assert isinstance(model, FuncModel) and all(model.trainable) and len(model.trainable) == len(params)
    ref = local_sgd_reference(model, params, x, y, idx, STEPS, 0.1)
    out = local_sgd(model, params, x, y, idx, STEPS, 0.1)
    _close(out, ref)
    for p0, p in zip(params, out, strict=True):  # the client with no steps keeps the global model
        torch.testing.assert_close(p[1], p0, rtol=0, atol=0)
    # every parameter of a client with 4 steps moved: no layer is cut off from the gradient
    assert all(not torch.equal(p[3], p0) for p0, p in zip(params, out, strict=True))


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_chunks_change_nothing(family):
    model, params, x, y, idx = _problem(family, seed=1)
    chunked, *_ = _problem(family, chunk=2, seed=1)
    _close(local_sgd(chunked, params, x, y, idx, STEPS, 0.1), local_sgd(model, params, x, y, idx, STEPS, 0.1),
           rtol=1e-5, atol=1e-6)


def test_prox_correction_through_local_sgd():
    """FedProx's proximal term on the gradient: the batched path = the per-client loop."""
    family = FAMILIES[2]
    model, params, x, y, idx = _problem(family, chunk=4, seed=2)
    mu = 0.5

    def prox(p, g, ctx):
        return [gi + mu * (pi - wi) for pi, gi, wi in zip(p, g, ctx["anchor"], strict=True)]

    ctx = {"anchor": [w.unsqueeze(0).repeat(len(STEPS), *([1] * w.dim())) for w in params]}
    ref = local_sgd_reference(model, params, x, y, idx, STEPS, 0.1, correction=prox, ctx=ctx)
    out = local_sgd(model, params, x, y, idx, STEPS, 0.1, correction=prox, ctx=ctx)
    _close(out, ref)
    plain = local_sgd(model, params, x, y, idx, STEPS, 0.1)
    assert not torch.allclose(plain[0][0], out[0][0])


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_logits_init_and_module_round_trip(family):
    model, params, x, _, _ = _problem(family, seed=3)
    name, _, classes, factory, _ = family
    again = FuncModel(name, factory)
    _close(again.init_params(torch.Generator().manual_seed(3)), params, rtol=0, atol=0)  # deterministic
    other = again.init_params(torch.Generator().manual_seed(4))
    assert not torch.equal(other[0], params[0])
    out = model.logits(params, x[:9])
    assert out.shape == (9, classes)
    module = model.make_module()
    model.to_module(params, module)
    with torch.no_grad():
        torch.testing.assert_close(out, module(x[:9]), rtol=1e-5, atol=1e-6)
    _close(model.from_module(module), params, rtol=0, atol=0)
    model.eval_chunk = 4  # evaluation in row chunks
    torch.testing.assert_close(model.logits(params, x[:9]), out, rtol=1e-5, atol=1e-6)


def test_training_with_flat_images_and_fedprox_equals_the_loop():
    """Through train(): flat image rows (as data sets store them), FedAvg and FedProx, batched = loop."""
    from hetfl.algorithms import make_algorithm
    from hetfl.data.federation import from_device_lists
    from hetfl.engine.runner import TrainSettings, train

    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 144)).astype(np.float32) for n in (6, 9, 12)]
    ys = [rng.integers(0, 3, len(x)) for x in xs]
    fed = from_device_lists(xs, ys, [x[:3] for x in xs], [y[:3] for y in ys], num_classes=3)
    model = FuncModel("resnet_emnist", partial(CifarResNet, (1, 12, 12), 3, widths=(2, 4), blocks=1), chunk=2)
    fractions = np.array([[1.0, 0.5, 1.0], [0.5, 1.0, 0.0], [1.0, 1.0, 1.0]])
    cfg = TrainSettings("B", 1, 3, 0.1, 3)
    for name, hp in (("fedavg", {}), ("fedprox", {"mu": 0.5})):
        a = train(model, fed, fractions, cfg, algorithm=make_algorithm(name, **hp))
        b = train(model, fed, fractions, cfg, algorithm=make_algorithm(name, **hp),
                  local_trainer=local_sgd_reference)
        _close(a.params, b.params)


def test_text_module_torch_and_matmul_lstm_agree():
    """TextLSTM with torch.nn.LSTM (the zoo's twin) and with the matmul LSTM (the torch.func path) draw
    the same initial parameters and compute the same logits."""
    torch.manual_seed(0)
    fused = TextLSTM(30, 4, 6, 2, 5, recurrent="torch")
    torch.manual_seed(0)
    matmul = TextLSTM(30, 4, 6, 2, 5, recurrent="matmul")
    assert [n for n, _ in fused.named_parameters()] == [n for n, _ in matmul.named_parameters()]
    for a, b in zip(fused.parameters(), matmul.parameters(), strict=True):
        assert torch.equal(a, b)
    x = torch.randint(0, 30, (3, 7))
    with torch.no_grad():
        torch.testing.assert_close(fused(x), matmul(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="recurrent"):
        TextLSTM(30, 4, 6, 2, 5, recurrent="gru")


def test_lstm_matches_torch_lstm():
    mine = LSTM(5, 7, 2)
    ref = nn.LSTM(5, 7, 2, batch_first=True)
    ref.load_state_dict(mine.state_dict())
    x = torch.randn(3, 4, 5)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), ref(x)[0][:, -1], rtol=1e-5, atol=1e-6)


def test_buffers_are_refused():
    with pytest.raises(ValueError, match="buffers"):
        FuncModel("bn", lambda: nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)))
