"""Every model family: the batched engine equals the per-client torch.nn + autograd + SGD loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import minibatch_indices
from hetfl.engine.oracle import local_sgd_reference
from hetfl.models import MODELS, make_model
from hetfl.models.cnn import image_shape

# name, model, input shape of one sample, kwargs: small widths, the papers' kernels/padding/pooling.
FAMILIES = [
    ("logreg", "logreg", (60,), {}),
    ("mlp-2nn", "mlp", (784,), {"hidden": (24, 16)}),
    ("mlp-feddyn", "mlp", (1, 28, 28), {"hidden": (20, 10)}),
    ("cnn", "cnn", (1, 28, 28), {"channels": (4, 6), "hidden": (16,)}),
    ("cnn-flat-input", "cnn", (784,), {"channels": (3, 4), "hidden": (8,)}),
    ("cnn_cifar", "cnn_cifar", (3, 32, 32), {"channels": (4, 5), "hidden": (12, 8)}),
    ("cnn_bn", "cnn_bn", (1, 28, 28), {"channels": (4, 6), "hidden": (16,)}),
]
IDS = [f[0] for f in FAMILIES]
STEPS = np.array([3, 0, 2, 5, 1, 5])  # heterogeneous, with a client that does no work
BATCH, PER_CLIENT, CLASSES = 4, 16, 10


def _problem(name: str, shape: tuple[int, ...], kwargs: dict, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    model = make_model(name, shape if len(shape) > 1 else shape[0], CLASSES, **kwargs)
    params = model.init_params(gen)
    K = len(STEPS)
    x = torch.randn(K * PER_CLIENT, *shape, generator=gen)
    y = torch.randint(0, CLASSES, (K * PER_CLIENT,), generator=gen)
    offsets = np.arange(K + 1) * PER_CLIENT
    idx = minibatch_indices(offsets, np.arange(K), STEPS, BATCH, seed, 3)
    return model, params, x, y, idx


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b, strict=True):
        assert u.shape == v.shape
        torch.testing.assert_close(u, v, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
@pytest.mark.parametrize("path", ["fused", "grads"])
def test_one_round_equals_per_client_loop(family, path):
    """Same seeds, same minibatches: batched local SGD = torch.nn + autograd + SGD, client by client."""
    _, name, shape, kwargs = family
    model, params, x, y, idx = _problem(name, shape, kwargs)
    ref = local_sgd_reference(model, params, x, y, idx, STEPS, 0.1)
    # An identity correction forces the grads() path (the one algorithms that correct gradients use).
    correction = (lambda p, g, c: g) if path == "grads" else None
    out = local_sgd(model, params, x, y, idx, STEPS, 0.1, correction=correction)
    _close(out, ref)
    for p0, p in zip(params, out, strict=True):  # the client with no steps keeps the global model
        torch.testing.assert_close(p[1], p0, rtol=0, atol=0)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f[1] != "logreg"], ids=IDS[1:])
def test_client_blocks_change_nothing(family):
    """The CPU splits a step into blocks of clients that fit in cache: results are the same."""
    _, name, shape, kwargs = family
    model, params, x, y, idx = _problem(name, shape, kwargs, seed=1)
    whole = local_sgd(model, params, x, y, idx, STEPS, 0.1)
    model.cache_bytes = 1  # blocks of 2 clients (the minimum)
    model._block.clear()
    assert model.client_block([p.unsqueeze(0) for p in params], x[:BATCH].unsqueeze(0)) == 2
    _close(local_sgd(model, params, x, y, idx, STEPS, 0.1), whole)
    _close(local_sgd(model, params, x, y, idx, STEPS, 0.1, correction=lambda p, g, c: g), whole)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_grads_match_autograd(family):
    """grads() of each client = autograd of the torch module on that client's minibatch."""
    _, name, shape, kwargs = family
    model, params, x, y, _ = _problem(name, shape, kwargs, seed=2)
    K = 3
    gen = torch.Generator().manual_seed(5)
    stacked = [p.unsqueeze(0) + 0.01 * torch.randn(K, *p.shape, generator=gen) for p in params]
    trainable = getattr(model, "trainable", (True,) * len(params))
    for p, t in zip(stacked, trainable, strict=True):
        if not t:  # running variances must stay positive
            p.abs_()
    xb = x[:K * BATCH].view(K, BATCH, *x.shape[1:])
    yb = y[:K * BATCH].view(K, BATCH)
    before = [p.clone() for p in stacked]
    grads = model.grads(stacked, xb, yb)
    assert [g.shape for g in grads] == [p.shape for p in stacked]
    module = model.make_module()
    for k in range(K):
        model.to_module([b[k] for b in before], module)
        module.zero_grad()
        F.cross_entropy(module(xb[k]), yb[k]).backward()
        after_forward = model.from_module(module)  # running statistics as the module's forward left them
        with torch.no_grad():
            for t in module.parameters():
                t.copy_(t.grad)
        autograd = model.from_module(module)  # the gradients, in the model's parameter layout
        for g, p, a, e, t in zip(grads, stacked, autograd, after_forward, trainable, strict=True):
            if t:
                torch.testing.assert_close(g[k], a, rtol=1e-4, atol=1e-6)
            else:  # buffers: zero gradient, updated in place by the forward pass like the module's
                assert torch.count_nonzero(g[k]) == 0
                torch.testing.assert_close(p[k], e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_logits_agree_with_module(family):
    _, name, shape, kwargs = family
    model, params, x, _, _ = _problem(name, shape, kwargs, seed=3)
    trainable = getattr(model, "trainable", (True,) * len(params))
    gen = torch.Generator().manual_seed(7)
    # Move the parameters (and BN running statistics) away from their initial values.
    params = [p + 0.1 * torch.rand(p.shape, generator=gen) * (1 if t else 2) for p, t in
              zip(params, trainable, strict=True)]
    module = model.make_module()
    model.to_module(params, module)
    module.eval()  # BN: running statistics
    with torch.no_grad():
        expect = module(x[:9])
    torch.testing.assert_close(model.logits(params, x[:9]), expect, rtol=1e-4, atol=1e-5)
    _close(model.from_module(module), params)  # to_module / from_module round-trip, buffers included


def test_trainable_flags_mark_bn_buffers():
    model = make_model("cnn_bn", (1, 28, 28), 10, channels=(4, 6), hidden=(16,))
    params = model.init_params(torch.Generator().manual_seed(0))
    assert len(model.trainable) == len(params)
    # conv W, b, BN weight, bias, running mean, running var, (twice), then two linear layers
    assert model.trainable == (True, True, True, True, False, False) * 2 + (True,) * 4
    for name in ("logreg", "mlp", "cnn", "cnn_cifar"):
        m = make_model(name, 784 if name != "cnn_cifar" else 3072, 10)
        assert all(m.trainable) and len(m.trainable) == len(m.init_params(torch.Generator()))


def test_paper_architectures():
    """Parameter counts of the papers' models (McMahan et al. 2017: the CNN has 1,663,370)."""
    def count(name: str, shape, **kw) -> int:
        return sum(p.numel() for p in make_model(name, shape, 10, **kw).init_params(torch.Generator()))

    assert count("cnn", (1, 28, 28)) == 1_663_370
    assert count("cnn", 784) == 1_663_370
    assert count("mlp", 784) == 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10  # 2NN: 199,210
    assert count("mlp", 784, hidden=(200, 100)) == 784 * 200 + 200 + 200 * 100 + 100 + 100 * 10 + 10
    # FedDyn CIFAR CNN: conv 3→64, 64→64 (5×5, no padding), FC 1600→384→192→10
    assert count("cnn_cifar", (3, 32, 32)) == (3 * 25 * 64 + 64) + (64 * 25 * 64 + 64) + (1600 * 384 + 384) \
        + (384 * 192 + 192) + (192 * 10 + 10)
    assert count("cnn_bn", (1, 28, 28)) == 1_663_370 + 4 * (32 + 64)
    # FLOPs of one client step, counted by hand for the McMahan CNN (per sample):
    # conv1 fwd + ∇W (no input gradient), conv2/fc1/fc2 fwd + ∇W + ∇x.
    per_sample = (2 * 2 * 32 * 25 * 28 * 28 + 3 * 2 * 64 * 32 * 25 * 14 * 14 + 3 * 2 * 3136 * 512
                  + 3 * 2 * 512 * 10)
    assert make_model("cnn", 784, 10).train_flops(10) == 10 * per_sample


def test_make_model_and_registry():
    assert set(MODELS) == {"logreg", "mlp", "cnn", "cnn_cifar", "cnn_bn", "vgg11", "resnet20",
                           "resnet_emnist", "char_lstm", "sent_lstm"}
    assert make_model("logreg", (1, 28, 28), 10).input_dim == 784
    with pytest.raises(ValueError, match="unknown"):
        make_model("resnet", 784, 10)
    assert image_shape(3072, (1, 28, 28)) == (3, 32, 32)
    with pytest.raises(ValueError, match="image shape"):
        make_model("cnn", 10, 10)
