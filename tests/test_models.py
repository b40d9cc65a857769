"""Every model of the zoo: every executor of the engine equals the per-client torch.nn + autograd + SGD
loop (engine.oracle) on one round, on the CPU and, when present, on CUDA (scripts/gpu-check)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hetfl.engine import executor, graphs
from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import minibatch_indices
from hetfl.engine.oracle import local_sgd_reference
from hetfl.models import MODELS, make_model
from hetfl.models.cnn import image_shape

# name, model, input shape of one sample (a sequence length for text), kwargs (small widths, the papers'
# kernels/padding/pooling/strides), vocabulary (text: token ids).
FAMILIES = [
    ("logreg", "logreg", (60,), {}, 0),
    ("mlp-2nn", "mlp", (784,), {"hidden": (24, 16)}, 0),
    ("mlp-feddyn", "mlp", (1, 28, 28), {"hidden": (20, 10)}, 0),
    ("cnn", "cnn", (1, 28, 28), {"channels": (4, 6), "hidden": (16,)}, 0),
    ("cnn-flat-input", "cnn", (784,), {"channels": (3, 4), "hidden": (8,)}, 0),
    ("cnn_cifar", "cnn_cifar", (3, 32, 32), {"channels": (4, 5), "hidden": (12, 8)}, 0),
    ("cnn_bn", "cnn_bn", (1, 28, 28), {"channels": (4, 6), "hidden": (16,)}, 0),
    # hidden is scaled by width too: 256 / 16 = 16 units (with hidden 16 the classifier had one unit, whose
    # dead ReLU left every layer below it without a gradient, so these families tested nothing there)
    ("vgg11", "vgg11", (3, 32, 32), {"width": 1 / 16, "hidden": 256}, 0),
    ("vgg11-gn", "vgg11", (3, 32, 32), {"width": 1 / 16, "hidden": 256, "norm": "group", "groups": 2}, 0),
    ("resnet20", "resnet20", (3, 8, 8), {"widths": (4, 8, 8), "blocks": 1}, 0),
    # He et al.'s batch norm (FedFOR Table 2): running statistics are buffers, as cnn_bn's
    ("resnet20-bn", "resnet20", (3, 8, 8), {"widths": (4, 8, 8), "blocks": 1, "norm": "batch"}, 0),
    ("resnet_emnist", "resnet_emnist", (1, 12, 12), {"widths": (4, 8)}, 0),
    ("resnet-flat-input", "resnet_emnist", (144,), {"widths": (2, 4), "blocks": 1}, 0),
    ("char_lstm", "char_lstm", (12,), {"vocab": 20, "embed": 4, "hidden": 8}, 20),
    ("sent_lstm", "sent_lstm", (6,), {"vocab": 50, "embed": 5, "hidden": 6, "layers": 3}, 50),
]
IDS = [f[0] for f in FAMILIES]
STEPS = np.array([3, 0, 2, 5, 1, 5])  # heterogeneous, with a client that does no work
BATCH, PER_CLIENT, CLASSES = 4, 16, 10
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (scripts/gpu-check runs these on a GPU machine)"))]


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    """One intra-op thread: these tiny kernels gain nothing from more, and on a shared, loaded machine two
    made a test 20-50× slower (every small kernel waits for a descheduled OpenMP thread). The executors
    that train on several CPU workers are tested with their workers given explicitly."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _problem(name: str, shape: tuple[int, ...], kwargs: dict, vocab: int = 0, seed: int = 0,
             device: str = "cpu", steps: np.ndarray = STEPS):
    gen = torch.Generator().manual_seed(seed)
    model = make_model(name, shape if len(shape) > 1 else shape[0], CLASSES, **kwargs)
    params = model.init_params(gen)
    K = len(steps)
    x = (torch.randint(0, vocab, (K * PER_CLIENT, *shape), generator=gen) if vocab
         else torch.randn(K * PER_CLIENT, *shape, generator=gen))
    y = torch.randint(0, CLASSES, (K * PER_CLIENT,), generator=gen)
    offsets = np.arange(K + 1) * PER_CLIENT
    idx = minibatch_indices(offsets, np.arange(K), steps, BATCH, seed, 3)
    return model, [p.to(device) for p in params], x.to(device), y.to(device), idx


def _close(a: list[torch.Tensor], b: list[torch.Tensor], rtol: float = 1e-4, atol: float = 2e-5) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b, strict=True):
        assert u.shape == v.shape
        torch.testing.assert_close(u, v, rtol=rtol, atol=atol)


# Every executor engine.executor can pick: (clients per block, CPU workers). None: the model's own rule.
EXECUTORS = {"default": None, "per-client": (1, 1), "per-client-2-workers": (1, 2), "blocks-of-2": (2, 1),
             "blocks-of-2-2-workers": (2, 2), "one-block": (len(STEPS), 1)}


def _with_executor(model, plan: tuple[int, int] | None, monkeypatch) -> None:
    if plan is None:
        return
    block, workers = plan
    monkeypatch.setattr(executor, "make_plan",
                        lambda m, p, x, k, graphs=False: executor.Plan(max(1, min(block, k)), workers),
                        raising=True)
    if hasattr(model, "client_block"):  # the model's own blocks inside a step: the same
        monkeypatch.setattr(model, "client_block", lambda p, x: block, raising=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("executor_name", list(EXECUTORS))
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
@pytest.mark.parametrize("path", ["fused", "grads"])
def test_one_round_equals_per_client_loop(family, path, executor_name, device, monkeypatch):
    """Same seeds, same minibatches: every executor (per client, blocks of clients, one block, on CPU
    worker threads) = torch.nn + autograd + SGD, client by client. In float64, so that the comparison
    is tight: in float32 a ReLU whose input rounds across zero differently can move a tiny network's
    weights by 1e-4 in a few steps (resnet_emnist, blocks of 2), which a loose tolerance would hide a
    real error behind."""
    _, name, shape, kwargs, vocab = family
    model, params, x, y, idx = _problem(name, shape, kwargs, vocab, device=device)
    params = [p.double() for p in params]
    x = x if vocab else x.double()
    ref = local_sgd_reference(model, params, x, y, idx, STEPS, 0.1)
    _with_executor(model, EXECUTORS[executor_name], monkeypatch)
    # An identity correction forces the grads() path (the one algorithms that correct gradients use).
    correction = (lambda p, g, c: g) if path == "grads" else None
    out = local_sgd(model, params, x, y, idx, STEPS, 0.1, correction=correction)
    _close(out, ref, rtol=1e-9, atol=1e-12)
    for p0, p in zip(params, out, strict=True):  # the client with no steps keeps the global model
        torch.testing.assert_close(p[1], p0, rtol=0, atol=0)
    # every trainable parameter of a client with 5 steps that the torch.nn loop moves by more than
    # rounding moved: no layer is cut off from the gradient. Exempt: a bias just before batch norm, whose
    # gradient is zero up to rounding (the normalisation subtracts it again), ±1e-17 on the CPU and exactly
    # 0 in a CUDA block (the H200, 2026-11-26): the CNN-BN's two conv biases, nothing else in the zoo
    trainable = model.trainable
    moves = [t and bool((r[3] - p0).abs().max() > 1e-12)
             for p0, r, t in zip(params, ref, trainable, strict=True)]
    assert sum(t and not m for t, m in zip(trainable, moves, strict=True)) == (2 if name == "cnn_bn" else 0)
    assert all(not torch.equal(p[3], p0) for p0, p, m in zip(params, out, moves, strict=True) if m)


# a run of n = GRAPH_MIN_STEPS steps with one working prefix (3 clients, steps 2 .. n + 1), long enough to
# be captured, between shorter runs of 5, 4 and 2 clients
_n = graphs.GRAPH_MIN_STEPS
GRAPH_STEPS = np.array([_n + 3, 0, 2, _n + 2, _n + 3, 1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_cuda_graph_runs_equal_per_client_loop(family, device, monkeypatch):
    """`graphs=True` (engine.graphs): each long enough run of steps is replayed from a graph captured after
    a warm-up; on CUDA a real capture, on the CPU the same steps eagerly. Either way the clients end where
    the per-client loop ends (float64, as above), and on the CPU bitwise where graphs=False ends. A replay
    that read a stale minibatch, or a run cut short, would end elsewhere."""
    _, name, shape, kwargs, vocab = family
    model, params, x, y, idx = _problem(name, shape, kwargs, vocab, device=device, steps=GRAPH_STEPS)
    params = [p.double() for p in params]
    x = x if vocab else x.double()
    ref = local_sgd_reference(model, params, x, y, idx, GRAPH_STEPS, 0.1)
    captures = []
    real = graphs.capture
    monkeypatch.setattr(graphs, "capture", lambda *a: captures.append(a[2]) or real(*a))
    out = local_sgd(model, params, x, y, idx, GRAPH_STEPS, 0.1, graphs=True)
    assert captures, "no run was long enough to be captured: the test checks nothing"
    _close(out, ref, rtol=1e-9, atol=1e-12)
    if device == "cpu":
        eager = local_sgd(model, params, x, y, idx, GRAPH_STEPS, 0.1)
        assert all(torch.equal(a, b) for a, b in zip(out, eager, strict=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_kept_cuda_graphs_over_two_rounds_equal_per_client_loop(family, device, monkeypatch):
    """`graph_cache` (engine.graphs.GraphCache): graphs kept across rounds. The first round captures its
    long runs, the second round, from other parameters, replays them without a capture; both rounds end
    where the per-client loop ends (float64), and on the CPU bitwise where eager rounds end. A kept graph
    that trained stale rows (the first round's), or wrote its rows back to the wrong clients, would end
    elsewhere."""
    _, name, shape, kwargs, vocab = family
    model, params, x, y, idx = _problem(name, shape, kwargs, vocab, device=device, steps=GRAPH_STEPS)
    params = [p.double() for p in params]
    x = x if vocab else x.double()
    captures = []
    real = graphs.capture
    monkeypatch.setattr(graphs, "capture", lambda *a: captures.append(a[2]) or real(*a))
    cache = graphs.GraphCache()
    second = [p + 0.01 * torch.linspace(-1, 1, p.numel(), dtype=p.dtype, device=p.device).view_as(p)
              for p in params]
    for start in (params, second):
        before = len(captures)
        out = local_sgd(model, start, x, y, idx, GRAPH_STEPS, 0.1, graphs=True, graph_cache=cache)
        if start is params:
            assert len(captures) > before, "no run was long enough to be captured: the test checks nothing"
        else:
            assert len(captures) == before, "the second round captured again: nothing was kept"
        _close(out, local_sgd_reference(model, start, x, y, idx, GRAPH_STEPS, 0.1), rtol=1e-9, atol=1e-12)
        if device == "cpu":
            eager = local_sgd(model, start, x, y, idx, GRAPH_STEPS, 0.1)
            assert all(torch.equal(a, b) for a, b in zip(out, eager, strict=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_float32_round_equals_per_client_loop(family, device):
    """float32, the executor each model gets by default (on the CPU the LSTMs' per-client path is
    oneDNN's fused kernel, float32 only: the float64 test above never takes it). The tolerance allows
    for a ReLU flipped by rounding (1.4e-4 on resnet_emnist's client 5; exact in float64)."""
    _, name, shape, kwargs, vocab = family
    model, params, x, y, idx = _problem(name, shape, kwargs, vocab, device=device)
    ref = local_sgd_reference(model, params, x, y, idx, STEPS, 0.1)
    for correction in (None, lambda p, g, c: g):
        _close(local_sgd(model, params, x, y, idx, STEPS, 0.1, correction=correction), ref, 1e-3, 5e-4)


_CONV = [f for f in FAMILIES if f[0] in ("cnn", "cnn_cifar", "cnn_bn", "vgg11", "resnet20", "resnet20-bn")]


CONV_VARIANTS = {"auto": {}, "nchw": {"channels_last": False}, "nhwc": {"channels_last": True},
                 "unfold": {"conv": "unfold"}, "unfold-nchw": {"conv": "unfold", "channels_last": False},
                 "grouped": {"conv": "grouped"}}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("executor_name", ["default", "one-block"])
@pytest.mark.parametrize("variant", list(CONV_VARIANTS))
@pytest.mark.parametrize("family", _CONV, ids=[f[0] for f in _CONV])
def test_conv_variants_equal_per_client_loop(family, variant, executor_name, device, monkeypatch):
    """The convolutional models' options (model_params): channels_last=False (contiguous NCHW grouped
    activations) and conv="unfold" (im2col + batched GEMM, models.layers.Conv2d). One round equals the
    torch.nn loop in float64, fused and grads paths, per client (the zoo's CPU default) and with every
    client in one block."""
    from hetfl.models.layers import ToGrouped

    _, name, shape, kwargs, vocab = family
    options = CONV_VARIANTS[variant]
    model, params, x, y, idx = _problem(name, shape, {**kwargs, **options}, vocab, device=device)
    grouped = next(layer for layer in model.layers if isinstance(layer, ToGrouped))
    xs = torch.randn(2, 3, *grouped.shape, device=device)
    layout = options.get("channels_last", "auto")  # auto: channels-last on the CPU only
    nchw = layout is False or (layout == "auto" and device != "cpu")
    assert grouped.forward([], xs, True)[0].is_contiguous() == nchw
    params = [p.double() for p in params]
    ref = local_sgd_reference(model, params, x.double(), y, idx, STEPS, 0.1)
    _with_executor(model, EXECUTORS[executor_name], monkeypatch)
    for correction in (None, lambda p, g, c: g):
        _close(local_sgd(model, params, x.double(), y, idx, STEPS, 0.1, correction=correction), ref,
               rtol=1e-9, atol=1e-12)
    module = model.make_module().double().to(device).eval()  # BN: running statistics, as logits uses
    model.to_module(params, module)
    with torch.no_grad():
        torch.testing.assert_close(model.logits(params, x[:9].double()), module(x[:9].double()),
                                   rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("clients", [1, 3])
@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("c_out,per_client", [(4, False), (16, True)])
def test_unfold_conv_equals_grouped_conv_in_the_input_layout(c_out, per_client, clients, channels_last):
    """conv="unfold", its GEMMs batched over (sample, client) or per client (chosen by the layer's shape),
    gives the grouped convolution's output, input and weight gradients, and its output and input gradient
    keep the input's memory order (with K = 1 a reshape of the per-client product is in neither)."""
    from hetfl.models.layers import Conv2d

    gen = torch.Generator().manual_seed(1)
    grouped, unfold = (Conv2d(3, c_out, 3, 1, (6, 5), stride=2, impl=impl) for impl in ("grouped", "unfold"))
    assert unfold.per_client is per_client
    p = [torch.randn(clients, *shape, generator=gen, dtype=torch.float64) for shape in grouped.shapes]
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(2, clients * 3, 6, 5, generator=gen, dtype=torch.float64).contiguous(memory_format=layout)
    (y0, s0), (y1, s1) = grouped.forward(p, x, True), unfold.forward(p, x, True)
    torch.testing.assert_close(y1, y0, rtol=1e-12, atol=1e-12)
    dy = torch.randn(y0.shape, generator=gen, dtype=torch.float64).contiguous(memory_format=layout)
    (dx0, g0), (dx1, g1) = grouped.backward(p, s0, dy, True), unfold.backward(p, s1, dy, True)
    _close([dx1, *g1], [dx0, *g0], rtol=1e-12, atol=1e-12)
    for t in (y1, dx1):
        assert t.is_contiguous(memory_format=layout)


def test_auto_layout_is_channels_last_on_the_cpu_only():
    """channels_last="auto" (the default): NHWC on the CPU, NCHW on CUDA and on the meta device (which
    measures a CUDA block); True and False are kept on every device; anything else is refused."""
    from hetfl.models.layers import ToGrouped, channels_last_on

    devices = [torch.device(d) for d in ("cpu", "cuda", "meta")]
    assert [channels_last_on("auto", d) for d in devices] == [True, False, False]
    assert all(channels_last_on(True, d) and not channels_last_on(False, d) for d in devices)
    for name in ("cnn", "cnn_bn", "vgg11", "resnet20"):
        to_grouped = make_model(name, (3, 32, 32), 10).layers[0]
        assert isinstance(to_grouped, ToGrouped) and to_grouped.channels_last == "auto"
        for device, nchw in (("cpu", False), ("meta", True)):
            y, _ = to_grouped.forward([], torch.zeros(2, 4, 3 * 32 * 32, device=device), True)
            assert y.is_contiguous() == nchw and y.is_contiguous(memory_format=torch.channels_last) != nchw
    with pytest.raises(ValueError, match="channels_last 'no' is unknown; allowed: true, false, auto"):
        make_model("cnn", (1, 28, 28), 10, channels_last="no")


def test_auto_layout_runs_the_small_maps_nchw_on_the_cpu():
    """channels_last="auto" on the CPU: a grouped convolution whose output has at most 16 positions (VGG-11's
    4×4 and 2×2 layers) computes on its input made NCHW, gives NCHW output, and hands the input gradient
    back channels-last, as its input came; no layer does so on the meta device (a CUDA block), with
    channels_last true, on NCHW input, or in ResNet-20 (8×8 at the smallest)."""
    from hetfl.models.layers import AUTO_NCHW_POSITIONS, Conv2d

    assert AUTO_NCHW_POSITIONS == 16

    def convs(**kwargs):
        return [layer for layer in make_model("vgg11", (3, 32, 32), 10, **kwargs).layers
                if isinstance(layer, Conv2d)]

    nhwc = torch.empty(1, 1, 1, 1).expand(1, 2, 1, 2).contiguous(memory_format=torch.channels_last)
    assert [c.takes_nchw(nhwc) for c in convs()] == [False] * 4 + [True] * 4
    assert not any(c.takes_nchw(nhwc.to("meta")) for c in convs())
    assert not any(c.takes_nchw(nhwc) for c in convs(channels_last=True))
    assert not any(c.takes_nchw(nhwc.contiguous()) for c in convs())
    assert not any(c.takes_nchw(nhwc) for c in _convs(make_model("resnet20", (3, 32, 32), 10)))
    conv = Conv2d(8, 4, 3, 1, (4, 4), channels_last="auto")
    p = [torch.randn(2, *shape, dtype=torch.float64) for shape in conv.shapes]
    x = torch.randn(3, 16, 4, 4, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    y, saved = conv.forward(p, x, True)
    assert y.is_contiguous() and not y.is_contiguous(memory_format=torch.channels_last)
    dx, grads = conv.backward(p, saved, torch.randn_like(y), True)
    assert dx.is_contiguous(memory_format=torch.channels_last) and not dx.is_contiguous()
    kept = Conv2d(8, 4, 3, 1, (4, 4), channels_last=True)  # the same layer left NHWC: the same numbers
    y1, saved1 = kept.forward(p, x, True)
    assert y1.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y1, y, rtol=1e-12, atol=1e-12)
    dy = torch.randn_like(y)
    (dx1, g1), (dx0, g0) = kept.backward(p, saved1, dy, True), conv.backward(p, saved, dy, True)
    _close([dx1, *g1], [dx0, *g0], rtol=1e-12, atol=1e-12)


def test_unfold_conv_never_copies_the_weights_per_sample():
    """conv="unfold" at a late layer's shape (many channels, few positions): no tensor of the forward or
    backward pass is near B × the weights' size (a GEMM batched over (sample, client) broadcasts the
    weights over the samples: 19 GB for a 512-channel VGG-11 layer at 64 clients of 32 samples)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from hetfl.models.layers import Conv2d

    largest = []

    class Sizes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            largest.extend(t.numel() for t in (out if isinstance(out, tuple | list) else [out])
                           if isinstance(t, torch.Tensor))
            return out

    K, B, C = 4, 32, 64
    conv = Conv2d(C, C, 3, 1, (2, 2), impl="unfold")
    p = [torch.empty(K, *shape, device="meta") for shape in conv.shapes]
    x = torch.empty(B, K * C, 2, 2, device="meta")
    with Sizes():
        y, saved = conv.forward(p, x, True)
        conv.backward(p, saved, torch.empty_like(y), True)
    assert max(largest) < B * p[0].numel() // 4


def test_auto_conv_unfolds_the_small_layers_on_cuda_only():
    """conv="auto" (the default): unfold in training on at most 64 samples per client for layers of at most
    16 output positions on CUDA and the meta device (which measures a CUDA block: VGG-11's 4×4 and 2×2
    layers); never on the CPU, where those layers run oneDNN's convolution on NCHW input (faster than
    unfold); the grouped convolution for the others and in evaluation."""
    from hetfl.models.layers import AUTO_UNFOLD_POSITIONS, AUTO_UNFOLD_SAMPLES, Conv2d

    model = make_model("vgg11", (3, 32, 32), 10)
    convs = [layer for layer in model.layers if isinstance(layer, Conv2d)]
    cpu, meta = torch.empty(1), torch.empty(1, device="meta")
    assert not any(c.unfolds(cpu) for c in convs)
    assert [c.unfolds(torch.empty(64, device="meta")) for c in convs] == [False] * 4 + [True] * 4
    assert not any(c.unfolds(torch.empty(65, device="meta")) for c in convs)
    assert not any(c.unfolds(torch.empty(10, device="meta"), training=False) for c in convs)  # slower
    assert [c.unfolds(meta) for c in convs] == [False] * 4 + [True] * 4
    assert not any(c.unfolds(meta, training=False) for c in convs)
    assert (AUTO_UNFOLD_POSITIONS, AUTO_UNFOLD_SAMPLES) == ({"cpu": 0, "cuda": 16}, 64)
    unfold = [c for c in make_model("vgg11", (3, 32, 32), 10, conv="unfold").layers if isinstance(c, Conv2d)]
    assert all(c.unfolds(meta) for c in unfold)
    assert not any(c.unfolds(cpu, training=False) or c.unfolds(meta, training=False) for c in unfold)
    resnet = list(_convs(make_model("resnet20", (3, 32, 32), 10)))  # 8×8 at the smallest: never
    assert len(resnet) == 19 and not any(c.unfolds(cpu) for c in resnet)


def _convs(model):
    from hetfl.models.blocks import Residual
    from hetfl.models.layers import Conv2d

    for layer in model.layers:
        if isinstance(layer, Conv2d):
            yield layer
        elif isinstance(layer, Residual):
            yield from (part for part in layer.parts if isinstance(part, Conv2d))


def test_unknown_conv_is_refused():
    with pytest.raises(ValueError, match="conv 'fft' is unknown; allowed: auto, grouped, unfold"):
        make_model("resnet20", (3, 32, 32), 10, conv="fft")


@pytest.mark.parametrize("name", ["resnet20", "resnet_emnist"])
def test_unknown_norm_is_refused(name):
    with pytest.raises(ValueError, match="norm 'layer' is unknown; allowed: group, batch"):
        make_model(name, (3, 32, 32), 10, norm="layer")


@pytest.mark.parametrize("family", [f for f in FAMILIES if f[1] in ("mlp", "cnn", "cnn_bn")],
                         ids=[f[0] for f in FAMILIES if f[1] in ("mlp", "cnn", "cnn_bn")])
def test_cache_blocks_change_nothing(family):
    """The CPU rule for the small fused models: blocks of clients that fit in cache; a 1-byte budget gives
    the minimum of 2, and results are the same."""
    _, name, shape, kwargs, vocab = family
    model, params, x, y, idx = _problem(name, shape, kwargs, vocab, seed=1)
    whole = local_sgd(model, params, x, y, idx, STEPS, 0.1)
    model.cache_bytes = 1
    assert model.client_block([p.unsqueeze(0) for p in params], x[:BATCH].unsqueeze(0)) == 2
    _close(local_sgd(model, params, x, y, idx, STEPS, 0.1), whole)
    _close(local_sgd(model, params, x, y, idx, STEPS, 0.1, correction=lambda p, g, c: g), whole)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_logreg_client_alone_equals_its_row_of_a_stack(threads):
    """A client's step, gradient and squared-gradient sums are bitwise the same whether it is alone or one
    of a stack, on 1, 2 and 4 threads: with W stored [C, d], MKL threads a lone gᵀx GEMM across 2 threads
    with other sums than a batch's (LogReg runs a lone client as a stack of two)."""
    model = make_model("logreg", 60, 10)
    gen = torch.Generator().manual_seed(3)
    K = 5
    params = [torch.randn(K, 10, 60, generator=gen) * 0.1, torch.randn(K, 10, generator=gen) * 0.1]
    x, y = torch.randn(K, 20, 60, generator=gen), torch.randint(0, 10, (K, 20), generator=gen)
    mask = (torch.rand(K, 20, generator=gen) > 0.3).float()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        grads, sums = model.grads(params, x, y), model.squared_grad_sums(params, x, y, mask)
        stepped = [p.clone() for p in params]
        model.sgd_step(stepped, x, y, 0.5)
        for k in range(K):
            one = [p[k:k + 1] for p in params]
            assert all(torch.equal(a, b[k:k + 1]) for a, b in zip(model.grads(one, x[k:k + 1], y[k:k + 1]),
                                                                 grads, strict=True))
            alone = model.squared_grad_sums(one, x[k:k + 1], y[k:k + 1], mask[k:k + 1])
            assert all(torch.equal(a, b[k:k + 1]) for a, b in zip(alone, sums, strict=True))
            one = [p.clone() for p in one]
            model.sgd_step(one, x[k:k + 1], y[k:k + 1], 0.5)
            assert all(torch.equal(a, b[k:k + 1]) for a, b in zip(one, stepped, strict=True))
    finally:
        torch.set_num_threads(before)


_CPU_PROBED = [f for f in FAMILIES if f[1] in ("mlp", "cnn", "cnn_cifar", "cnn_bn")]


@pytest.mark.parametrize("family", _CPU_PROBED, ids=[f[0] for f in _CPU_PROBED])
def test_client_bytes_on_the_cpu_equal_the_meta_devices(family):
    """The CPU measures a client's working set with a forward pass on zeros: the same bytes as the meta
    device's shapes-only pass, which CUDA runs use (and the CPU used before)."""
    from hetfl.models.net import _nbytes

    _, name, shape, kwargs, vocab = family
    model, params, x, *_ = _problem(name, shape, kwargs, vocab)
    stacked, xb = [p.unsqueeze(0) for p in params], x[:BATCH].unsqueeze(0)
    meta = [torch.empty(p.shape, dtype=p.dtype, device="meta") for p in stacked]
    xm = torch.empty(xb.shape, dtype=xb.dtype, device="meta")
    expected = _nbytes(meta) + _nbytes(model._forward(model._split(meta), xm, True)[1])
    assert model.client_bytes(stacked, xb) == expected > 0


def test_cpu_training_imports_no_sympy():
    """A CPU training step of a fused model measures its client block without the meta device, whose
    baddbmm imports torch's symbolic shapes and sympy (0.6 s of each training process)."""
    import subprocess
    import sys

    def imports_sympy(device: str) -> str:
        code = ("import sys, torch\n"
                "from hetfl.models import make_model\n"
                "m = make_model('mlp', 784, 10)\n"
                "p = [t.unsqueeze(0) for t in m.init_params(torch.Generator().manual_seed(0))]\n"
                f"m.client_block(p, torch.zeros(1, 20, 784, device={device!r}))\n"
                "print('sympy' in sys.modules)\n")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert imports_sympy("cpu") == "False"
    assert imports_sympy("meta") == "True"  # the probe can see what it rules out


def test_executor_rule():
    """The documented rule (engine.executor): small fused models in cache-sized blocks, intra-op threads;
    the zoo's convolutional and recurrent models one client per block, blocks on separate CPU workers;
    the CNNs cache-sized blocks on separate workers; CUDA: one block (or what half the free memory holds)."""
    x = torch.zeros(1, 10, 784)
    mlp = make_model("mlp", 784, 10)
    p = [t.unsqueeze(0) for t in mlp.init_params(torch.Generator())]
    plan = executor.make_plan(mlp, p, x, 100)
    assert plan.workers == 1 and 2 <= plan.block <= 100
    for name, shape in (("resnet20", (3, 32, 32)), ("vgg11", (3, 32, 32)), ("char_lstm", 80),
                        ("sent_lstm", 25)):
        m = make_model(name, shape, 10)
        xs = torch.zeros(1, 10, *(shape if isinstance(shape, tuple) else (shape,)))
        plan = executor.make_plan(m, [t.unsqueeze(0) for t in m.init_params(torch.Generator())], xs, 8)
        assert plan == executor.Plan(1, min(torch.get_num_threads(), 8)), name
    # the CNNs: cache-sized blocks (at least 2 clients), on separate cores once there are 2 threads
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        for name in ("cnn", "cnn_bn", "cnn_cifar"):
            m = make_model(name, (1, 28, 28) if name != "cnn_cifar" else (3, 32, 32), 10)
            xs = torch.zeros(1, 10, *m.input_shape)
            plan = executor.make_plan(m, [t.unsqueeze(0) for t in m.init_params(torch.Generator())], xs, 20)
            assert plan.block >= 2 and plan.workers == 2, name
        assert executor.make_plan(mlp, p, x, 100).workers == 1
    finally:
        torch.set_num_threads(threads)
    assert executor.make_plan(make_model("logreg", 60, 10), [], torch.zeros(1, 20, 60), 50) == \
        executor.Plan(50, 1)
    # longest first, to the least loaded worker
    assert executor.assign([5, 1, 4, 4, 2], 2) == [[0, 1, 4], [2, 3]]  # loads 5+2+1, 4+4
    assert executor.assign([3.0], 4) == [[0], [], [], []]


def test_cpu_workers_override_the_rule():
    """The rule's choice of models whose blocks go to CPU workers (client_parallel) was measured on one
    2-core Zen 3 (docs/engine.md); another CPU may decide otherwise. `--cpu-workers` (hetfl train, hetfl
    bench) sets it per process: "auto" the rule, "on" every model's blocks on workers, "off" none."""
    cnn = make_model("cnn", (1, 28, 28), 10)
    pc, xc = [t.unsqueeze(0) for t in cnn.init_params(torch.Generator())], torch.zeros(1, 10, 1, 28, 28)
    mlp = make_model("mlp", 784, 10)
    pm, xm = [t.unsqueeze(0) for t in mlp.init_params(torch.Generator())], torch.zeros(1, 10, 784)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert executor.cpu_workers() == "auto"
        assert executor.make_plan(cnn, pc, xc, 20).workers == 2
        assert executor.make_plan(mlp, pm, xm, 10_000).workers == 1
        executor.set_cpu_workers("off")
        assert executor.make_plan(cnn, pc, xc, 20).workers == 1
        executor.set_cpu_workers("on")
        assert executor.make_plan(mlp, pm, xm, 10_000).workers == 2
        assert executor.make_plan(cnn, pc, xc, 20).workers == 2
        with pytest.raises(ValueError, match=r"--cpu-workers has value '2'.*allowed: auto, on, off"):
            executor.set_cpu_workers("2")
    finally:
        torch.set_num_threads(threads)
        executor.set_cpu_workers("auto")


@pytest.mark.parametrize("clients,block,workers", [(10, 2, 2), (6, 2, 2), (20, 2, 2), (15, 2, 2), (7, 3, 2),
                                                    (100, 14, 1), (3, 1, 2), (1, 2, 1), (0, 2, 2)])
def test_blocks_cover_the_clients_and_balance_the_workers(clients, block, workers):
    """engine.executor.blocks: contiguous ranges of at most `block` clients covering all of them; on one
    worker full blocks then the rest (the order the MLP's runs were trained in), on several a multiple of
    the workers with sizes at most one apart (10 clients, blocks of 2, 2 workers: 2, 2, 2, 2, 1, 1)."""
    out = executor.blocks(clients, executor.Plan(block, workers))
    sizes = [hi - lo for lo, hi in out]
    assert [lo for lo, _ in out] == np.cumsum([0, *sizes])[:-1].tolist() and sum(sizes) == clients
    assert all(1 <= s <= block for s in sizes)
    if workers == 1:
        assert sizes == [block] * (clients // block) + ([clients % block] if clients % block else [])
    elif clients:
        assert len(out) % workers == 0 or len(out) == clients
        assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    if (clients, block, workers) == (10, 2, 2):
        assert sizes == [2, 2, 2, 2, 1, 1]


def test_cuda_blocks_are_bounded_by_free_memory(monkeypatch):
    """On CUDA a block holds as many clients as half the free device memory (torch.cuda.mem_get_info)."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000, 4000))
    assert executor.cuda_block(100, torch.device("cuda")) == 5
    assert executor.cuda_block(10_000, torch.device("cuda")) == 1  # never less than one client


def test_small_lstm_rounds_on_cuda_train_client_by_client(monkeypatch):
    """On CUDA a round of fewer than `cuda_batched_from` LSTM clients trains client by client (cuDNN's
    fused LSTM); from that many on, one block as before. Models without the attribute are not affected."""
    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 40, 1 << 41))
    on_cuda = SimpleNamespace(device=torch.device("cuda"), shape=(1, 10, 80), dtype=torch.int64)
    for name in ("char_lstm", "sent_lstm"):
        m = make_model(name, 80, 10)
        assert m.cuda_batched_from == 3
        assert executor.make_plan(m, [], on_cuda, 2) == executor.Plan(1, 1), name
    m = make_model("char_lstm", 80, 10, hidden=8)
    p = [t.unsqueeze(0) for t in m.init_params(torch.Generator())]
    monkeypatch.setattr(m, "client_bytes", lambda params, x: 1000)
    assert executor.make_plan(m, p, on_cuda, 3) == executor.Plan(3, 1)
    assert not hasattr(make_model("vgg11", (3, 32, 32), 10), "cuda_batched_from")


@pytest.mark.parametrize("executor_name", ["per-client", "per-client-2-workers"])
@pytest.mark.parametrize("path", ["fused", "grads"])
@pytest.mark.parametrize("family", [f for f in FAMILIES if f[1] in ("char_lstm", "sent_lstm")],
                         ids=[f[0] for f in FAMILIES if f[1] in ("char_lstm", "sent_lstm")])
def test_lstm_per_client_autograd_path_equals_per_client_loop(family, path, executor_name, monkeypatch):
    """The per-client path CUDA takes (models.recurrent._cudnn: torch's fused LSTM under autograd), forced
    on the CPU in float64: one round per client equals the torch.nn loop, and the global model's logits
    equal the module's. On a GPU the same code runs cuDNN's kernels (scripts/gpu-check). With two workers
    one client's update must not void another's graph: each client's weights are rows of one stack, and a
    view that shared the stack's version counter made autograd refuse the other worker's backward pass
    (the H200, 2026-11-26: "modified by an inplace operation")."""
    from hetfl.models import recurrent

    calls = []
    monkeypatch.setattr(recurrent, "_onednn", lambda x: False)
    monkeypatch.setattr(recurrent, "_cudnn", lambda x: calls.append(x.shape[0]) or x.shape[0] == 1)
    _, name, shape, kwargs, vocab = family
    model, params, x, y, idx = _problem(name, shape, kwargs, vocab)
    params = [p.double() for p in params]
    ref = local_sgd_reference(model, params, x, y, idx, STEPS, 0.1)
    _with_executor(model, EXECUTORS[executor_name], monkeypatch)
    out = local_sgd(model, params, x, y, idx, STEPS, 0.1,
                    correction=(lambda p, g, c: g) if path == "grads" else None)
    assert calls and set(calls) == {1}  # every LSTM layer call took the per-client path
    _close(out, ref, rtol=1e-9, atol=1e-12)
    module = model.make_module().double()
    model.to_module(params, module)
    with torch.no_grad():
        torch.testing.assert_close(model.logits(params, x[:9]), module(x[:9]), rtol=1e-9, atol=1e-12)


def _emulated_cell_forward(gates_x, gates_h, c, bias):
    """aten._thnn_fused_lstm_cell's arithmetic (RNN.cu's lstm_cell_forward), for the CPU, which lacks it."""
    H = c.shape[1]
    z = gates_x + gates_h + bias + bias
    i, f, g, o = z[:, :H].sigmoid(), z[:, H:2 * H].sigmoid(), z[:, 2 * H:3 * H].tanh(), z[:, 3 * H:].sigmoid()
    c_next = f * c + i * g
    return o * c_next.tanh(), c_next, torch.cat([i, f, g, o], dim=1)


def _emulated_cell_backward(dh, dc, c_prev, c, acts):
    """aten._thnn_fused_lstm_cell_backward_impl's arithmetic (RNN.cu's lstm_cell_backward)."""
    i, f, g, o = acts.split(c.shape[1], dim=1)
    tc = c.tanh()
    d = dh * o * (1 - tc * tc) + (0 if dc is None else dc)
    dz = torch.cat([d * g * i * (1 - i), d * c_prev * f * (1 - f), d * i * (1 - g * g),
                    dh * tc * o * (1 - o)], dim=1)
    return dz, d * f


_TEXT = [f for f in FAMILIES if f[1] in ("char_lstm", "sent_lstm")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("executor_name", ["one-block", "blocks-of-2"])
@pytest.mark.parametrize("family", _TEXT, ids=[f[0] for f in _TEXT])
def test_lstm_fused_cells_equal_per_client_loop(family, executor_name, device, monkeypatch):
    """cell="fused" (torch's fused LSTM-cell kernels, CUDA only): one round in float64 equals the torch.nn
    loop, fused and grads paths, and the global model's logits equal the module's. On the CPU the two
    kernels are replaced by their arithmetic written out (above), so the recurrence around them is tested
    here; on a GPU the real kernels run (scripts/gpu-check)."""
    from hetfl.models import recurrent

    calls = []
    if device == "cpu":
        monkeypatch.setattr(recurrent, "_fused_cells", lambda x: True)
        monkeypatch.setattr(recurrent, "_cell_forward", lambda *a: calls.append(a[0].shape) or
                            _emulated_cell_forward(*a))
        monkeypatch.setattr(recurrent, "_cell_backward", _emulated_cell_backward)
    _, name, shape, kwargs, vocab = family
    model, params, x, y, idx = _problem(name, shape, {**kwargs, "cell": "fused"}, vocab, device=device)
    params = [p.double() for p in params]
    ref = local_sgd_reference(model, params, x, y, idx, STEPS, 0.1)
    _with_executor(model, EXECUTORS[executor_name], monkeypatch)
    for correction in (None, lambda p, g, c: g):
        _close(local_sgd(model, params, x, y, idx, STEPS, 0.1, correction=correction), ref,
               rtol=1e-9, atol=1e-12)
    if device == "cpu":  # every step of every LSTM layer took the fused cell, on every client of its block
        layers = sum(isinstance(layer, recurrent.LSTMLayer) for layer in model.layers)
        assert calls and len(calls) % (layers * shape[0]) == 0
        # rows K·B: the working prefixes of STEPS (5, 4, 3, 2 clients), or blocks of 2 clients and of 1
        assert {c[0] // BATCH for c in calls} == ({5, 4, 3, 2} if executor_name == "one-block" else {2, 1})
    module = model.make_module().double().to(device)
    model.to_module(params, module)
    with torch.no_grad():
        torch.testing.assert_close(model.logits(params, x[:9]), module(x[:9]), rtol=1e-9, atol=1e-12)


def test_lstm_fused_cells_measure_their_memory_on_meta():
    """On CUDA a block's size comes from a forward pass on the meta device (LayerNet.client_bytes): the
    fused cells run there through torch's meta functions, and save less than the ops (no tanh c_t)."""
    x = torch.zeros(3, 2, 12, dtype=torch.int64, device="meta")
    fused, ops = (make_model("char_lstm", 12, 10, vocab=20, embed=4, hidden=8, cell=cell)
                  for cell in ("fused", "ops"))
    params = [p.unsqueeze(0).repeat(3, *([1] * p.dim())) for p in fused.init_params(torch.Generator())]
    assert 0 < fused.client_bytes(params, x) < ops.client_bytes(params, x)
    first, second = fused.layers[1:3]  # [K, T, B, in] → every h_t, then only h_T
    for layer, p, d_in, shape in ((first, params[1:5], 4, (3, 12, 2, 8)),
                                  (second, params[5:9], 8, (3, 2, 8))):
        xm = torch.zeros(3, 12, 2, d_in, device="meta")
        out, saved = layer.forward([t.to("meta") for t in p], xm, True)
        assert out.shape == shape and len(saved.acts) == 12 and len(saved.cs) == 13
        assert saved.hs.shape == (3, 13, 2, 8)


def test_unknown_lstm_cell_is_refused():
    with pytest.raises(ValueError, match="cell 'cudnn' is unknown; allowed: fused, ops"):
        make_model("char_lstm", 80, 80, cell="cudnn")


def test_worker_errors_surface_and_threads_are_restored():
    threads = torch.get_num_threads()

    def train_block(lo: int, hi: int) -> None:
        assert torch.get_num_threads() == 1  # each worker: one intra-op thread
        if lo == 2:
            raise RuntimeError("block 2 failed")

    with pytest.raises(RuntimeError, match="block 2 failed"):
        executor.run(executor.Plan(1, 2), [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0] * 4, train_block)
    assert torch.get_num_threads() == threads


def test_a_last_wave_short_of_the_workers_trains_on_their_threads(monkeypatch):
    """3 equal blocks on 2 workers: two on one thread each, then the third on both threads (it took a
    second wave on one thread while the other core idled: VGG-11, ResNet-20 and the char-LSTM ran 0.84-0.98x
    the per-client loop at 3 clients). A tail that would finish later than one more wave is not split off:
    [10, 1, 1] keeps the two short blocks beside the long one."""
    assert executor.split_tail([1.0, 1.0, 1.0], 2) == ([0, 1], [2])
    assert executor.split_tail([2.0] * 5, 2) == ([0, 1, 2, 3], [4])
    assert executor.split_tail([1.0] * 4, 2) == ([0, 1, 2, 3], [])  # every wave full
    assert executor.split_tail([10.0, 1.0, 1.0], 2) == ([0, 1, 2], [])
    assert executor.split_tail([3.0, 1.0, 2.0], 2) == ([0, 1, 2], [])  # 3 | 1 + 2 already balanced
    assert executor.split_tail([3.0, 3.0, 3.0], 4) == ([], [0, 1, 2])  # fewer blocks than workers
    threads = torch.get_num_threads()
    set_threads = torch.set_num_threads
    seen = {}

    def record(n: int) -> None:
        seen[threading.get_ident()] = n
        set_threads(n)

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # the caller's threads, whatever the host's
    monkeypatch.setattr(torch, "set_num_threads", record)
    ran = {}

    def train_block(lo: int, hi: int) -> None:
        ran[lo] = seen.get(threading.get_ident())

    try:
        executor.run(executor.Plan(1, 2), [(0, 1), (1, 2), (2, 3)], [1.0] * 3, train_block)
    finally:
        set_threads(threads)
    assert ran == {0: 1, 1: 1, 2: 2}


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
@pytest.mark.parametrize("device", DEVICES)
def test_grads_match_autograd(family, device):
    """grads() of each client = autograd of the torch module on that client's minibatch."""
    _, name, shape, kwargs, vocab = family
    model, params, x, y, _ = _problem(name, shape, kwargs, vocab, seed=2, device=device)
    K = 3
    gen = torch.Generator().manual_seed(5)
    stacked = [p.unsqueeze(0) + 0.01 * torch.randn(K, *p.shape, generator=gen).to(device) for p in params]
    trainable = getattr(model, "trainable", (True,) * len(params))
    for p, t in zip(stacked, trainable, strict=True):
        if not t:  # running variances must stay positive
            p.abs_()
    xb = x[:K * BATCH].view(K, BATCH, *x.shape[1:])
    yb = y[:K * BATCH].view(K, BATCH)
    before = [p.clone() for p in stacked]
    grads = model.grads(stacked, xb, yb)
    assert [g.shape for g in grads] == [p.shape for p in stacked]
    module = model.make_module().to(device)
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
@pytest.mark.parametrize("device", DEVICES)
def test_logits_agree_with_module(family, device):
    _, name, shape, kwargs, vocab = family
    model, params, x, _, _ = _problem(name, shape, kwargs, vocab, seed=3, device=device)
    trainable = getattr(model, "trainable", (True,) * len(params))
    gen = torch.Generator().manual_seed(7)
    # Move the parameters (and BN running statistics) away from their initial values.
    params = [p + 0.1 * torch.rand(p.shape, generator=gen).to(device) * (1 if t else 2) for p, t in
              zip(params, trainable, strict=True)]
    module = model.make_module().to(device)
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
    for name in ("logreg", "mlp", "cnn", "cnn_cifar", "resnet20"):
        m = make_model(name, 3072 if name in ("cnn_cifar", "resnet20") else 784, 10)
        assert all(m.trainable) and len(m.trainable) == len(m.init_params(torch.Generator()))
    # the batch-norm ResNet: stem conv W, BN (w, b, mean, var); per block conv W, BN, conv W, BN; linear
    bn = (True, True, False, False)
    resnet = make_model("resnet20", (3, 32, 32), 10, norm="batch")
    assert resnet.trainable == (True, *bn) + ((True, *bn) * 2) * 9 + (True, True)
    params = resnet.init_params(torch.Generator())
    assert len(params) == len(resnet.trainable)
    assert all(torch.equal(p, torch.zeros_like(p) if i % 2 == 0 else torch.ones_like(p))  # mean 0, var 1
               for i, p in enumerate(p for p, t in zip(params, resnet.trainable, strict=True) if not t))


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


# FuncModel takes no buffers (a vmapped functional_call would not keep running statistics): not the BN twins
_ZOO = [f for f in FAMILIES if f[1] in ("vgg11", "resnet20", "resnet_emnist", "char_lstm", "sent_lstm")
        and f[3].get("norm") != "batch"]


@pytest.mark.parametrize("family", _ZOO, ids=[f[0] for f in _ZOO])
def test_zoo_starts_where_its_torch_twin_and_the_generic_path_start(family):
    """A zoo model's initial parameters are its torch.nn twin's own initialisation, seeded from the
    generator exactly as the generic torch.func path (FuncModel) seeds it, so switching the zoo from
    FuncModel to hand-written layers changed no starting point; deterministic in the generator."""
    from hetfl.models.func import FuncModel

    _, name, shape, kwargs, _ = family
    model = make_model(name, shape if len(shape) > 1 else shape[0], CLASSES, **kwargs)
    params = model.init_params(torch.Generator().manual_seed(11))
    generic = FuncModel(name, model.factory).init_params(torch.Generator().manual_seed(11))
    module = model.make_module()
    model.to_module(params, module)
    _close([p.detach() for p in module.parameters()], generic)
    again = model.init_params(torch.Generator().manual_seed(11))
    assert all(torch.equal(a, b) for a, b in zip(params, again, strict=True))
    other = model.init_params(torch.Generator().manual_seed(12))
    assert not torch.equal(other[0], params[0])


def test_batch_norm_resnet_starts_from_the_group_norm_ones_weights():
    """Neither norm draws random numbers at initialisation (weight 1, bias 0; BN's running mean 0 and
    variance 1), so under one generator the batch-norm ResNet starts from the GroupNorm one's convolution
    and linear weights: the two differ by their normalisation alone."""
    group, batch = (make_model("resnet20", (3, 32, 32), 10, norm=n) for n in ("group", "batch"))
    pg, pb = (m.init_params(torch.Generator().manual_seed(11)) for m in (group, batch))
    # the batch-norm model's entries without its running statistics, in the GroupNorm model's order
    trained = [p for p, t in zip(pb, batch.trainable, strict=True) if t]
    assert len(trained) == len(pg) and all(torch.equal(a, b) for a, b in zip(pg, trained, strict=True))
    module = batch.make_module()
    batch.to_module(pb, module)
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in module.modules()) == 19
    assert not any(isinstance(m, torch.nn.GroupNorm) for m in module.modules())


def test_zoo_parameter_counts():
    def count(name, shape, classes, **kw) -> int:
        return make_model(name, shape, classes, **kw).num_params()

    assert count("resnet20", (3, 32, 32), 10) == 269_722  # He et al.: 0.27M
    # batch norm: the same trained parameters, and a running mean and variance for each of the 19 norms'
    # 16 + 6·(16 + 32 + 64) = 688 channels
    assert count("resnet20", (3, 32, 32), 10, norm="batch") == 269_722 + 2 * 688
    assert count("vgg11", 3072, 10) == 9_750_922  # FedMA's VGG-11 for CIFAR-10: 9.75M
    # LEAF Shakespeare: embedding 80 × 8, LSTM 8 → 256 → 256, dense 256 → 80.
    lstm = 4 * 256 * (8 + 256 + 2) + 4 * 256 * (256 + 256 + 2)
    assert count("char_lstm", 80, 80) == 80 * 8 + lstm + 256 * 80 + 80
    assert count("sent_lstm", 25, 2) == 20_000 * 50 + 4 * 100 * (50 + 100 + 2) + 4 * 100 * (100 + 100 + 2) \
        + 100 * 2 + 2


@pytest.mark.parametrize("classes", [2, 10, 16, 62])
def test_softmax_classes_pads_small_class_counts_and_keeps_the_probabilities(classes):
    """Below 16 classes the softmax runs on rows padded with −inf (torch's CPU row kernel is off its vector
    path there: 3.6x slower for 10 classes on AVX-512): the same probabilities up to the sum's rounding,
    the same bits for a row wherever it sits, and no padding from 16 on."""
    from hetfl.models.net import SOFTMAX_PAD, softmax_classes

    x = torch.randn(7, 20, classes, generator=torch.Generator().manual_seed(0)) * 4
    g = softmax_classes(x)
    assert g.shape == x.shape
    torch.testing.assert_close(g, torch.softmax(x, -1), rtol=0, atol=2e-7)
    assert torch.equal(softmax_classes(x[3:5])[1], g[4])  # a row's bits do not depend on its neighbours
    if classes >= SOFTMAX_PAD:
        assert torch.equal(g, torch.softmax(x, -1)) and g.is_contiguous()
    else:
        assert g.stride(-2) == SOFTMAX_PAD  # a view of the padded rows
