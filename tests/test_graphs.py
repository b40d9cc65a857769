"""engine.graphs: runs of steps with one working prefix, replayed from a CUDA graph after a warm-up. On the
CPU "capture" returns the step itself, so these check the orchestration (which steps are fed, run eagerly,
captured and replayed) and who decides (the executor's rule, or the option of local_sgd, `hetfl train` and
`hetfl bench`); tests/test_models.py checks whole rounds against the per-client loop on every device, CUDA
included, and tests/test_resume.py a `hetfl train` run with graphs on CUDA."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hetfl.engine import executor, graphs, local
from hetfl.engine.local import _prefix_runs, local_sgd
from hetfl.models import make_model


def test_prefix_runs_by_hand():
    # steps sorted [5, 5, 3, 2, 1, 0]: clients with more than j steps at j = 0..4
    active = np.array([5, 4, 3, 2, 2])
    assert _prefix_runs(active, 0, 6) == [(5, 0, 1), (4, 1, 2), (3, 2, 3), (2, 3, 5)]
    # the block of rows 2 and 3: both work at steps 0 and 1, row 2 alone at step 2
    assert _prefix_runs(active, 2, 4) == [(2, 0, 2), (1, 2, 3)]
    assert _prefix_runs(active, 5, 6) == []  # a client with no steps
    assert _prefix_runs(np.array([], dtype=np.int64), 0, 3) == []


def _spy(monkeypatch) -> list[str]:
    """Events in order: the real capture's calls are wrapped, its replays logged."""
    events: list[str] = []
    real = graphs.capture

    def capture(step, device, warmup=0, feed=None):
        events.append(f"capture after {warmup} warm-up steps")
        replay = real(step, device, warmup, feed)
        return lambda: (events.append("replay"), replay())

    monkeypatch.setattr(graphs, "capture", capture)
    return events


def test_a_long_run_warms_up_then_replays_every_later_step(monkeypatch):
    events = _spy(monkeypatch)
    n = graphs.GRAPH_MIN_STEPS + 2
    fed: list[int] = []
    buffer = [None]
    seen: list[int] = []
    graphs.run_steps(lambda: seen.append(buffer[0]), lambda i: (fed.append(i), buffer.__setitem__(0, i)), n,
                     torch.device("cpu"), graphed=True)
    w = graphs.GRAPH_WARMUP
    assert fed == list(range(n)) and seen == list(range(n))  # every step saw its own inputs, in order
    assert events == [f"capture after {w} warm-up steps"] + ["replay"] * (n - w)


@pytest.mark.parametrize("graphed", [False, True])
def test_short_runs_and_unrequested_graphs_train_eagerly(graphed, monkeypatch):
    events = _spy(monkeypatch)
    n = graphs.GRAPH_MIN_STEPS - 1 if graphed else graphs.GRAPH_MIN_STEPS + 3
    seen: list[int] = []
    buffer = [None]
    graphs.run_steps(lambda: seen.append(buffer[0]), lambda i: buffer.__setitem__(0, i), n,
                     torch.device("cpu"), graphed=graphed)
    assert seen == list(range(n)) and events == []


def test_capture_elsewhere_runs_the_warm_up_and_returns_the_step():
    calls: list[str] = []
    replay = graphs.capture(lambda: calls.append("step"), torch.device("cpu"), 2,
                            lambda i: calls.append(f"feed {i}"))
    assert calls == ["feed 0", "step", "feed 1", "step"]
    replay()
    assert calls[-1] == "step"


def test_a_failed_capture_names_the_option(monkeypatch):
    def refuse(*args):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "capture", refuse)
    with pytest.raises(RuntimeError, match=r"run of 7 local steps failed to capture .*operation not permitted"
                                           r".*run without CUDA graphs: hetfl train or hetfl bench "
                                           r"--no-graphs"):
        graphs.run_steps(lambda: None, lambda i: None, 7, torch.device("cpu"), graphed=True)


def test_the_rule_is_the_models_and_on_cuda_only(monkeypatch):
    """executor.graphs_rule: graphs on CUDA for a model whose class sets `cuda_graphs`, never elsewhere;
    no zoo model sets it yet (docs/engine.md: the rule waits for a GPU's measurement). make_plan carries
    it, also for the LSTMs' client-by-client rounds."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert executor.graphs_rule(SimpleNamespace(cuda_graphs=True), cuda)
    assert not executor.graphs_rule(SimpleNamespace(cuda_graphs=True), cpu)
    assert not executor.graphs_rule(SimpleNamespace(), cuda)
    zoo = {"logreg": 60, "mlp": 784, "cnn": (1, 28, 28), "cnn_bn": (1, 28, 28), "vgg11": (3, 32, 32),
           "resnet20": (3, 32, 32), "char_lstm": 80, "sent_lstm": 25}
    for name, shape in zoo.items():
        assert not executor.graphs_rule(make_model(name, shape, 10), cuda), name
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 40, 1 << 41))
    m = make_model("char_lstm", 80, 10)
    monkeypatch.setattr(type(m), "cuda_graphs", True, raising=False)
    on_cuda = SimpleNamespace(device=cuda, shape=(1, 10, 80), dtype=torch.int64)
    assert executor.make_plan(m, [], on_cuda, 2) == executor.Plan(1, 1, graphs=True)
    assert executor.make_plan(m, [], torch.zeros(1, 10, 80, dtype=torch.int64), 2).graphs is False


def _mlp_round():
    m = make_model("mlp", 784, 10, hidden=(8,))
    g = torch.Generator().manual_seed(0)
    params = m.init_params(g)
    x, y = torch.randn(40, 784, generator=g), torch.randint(0, 10, (40,), generator=g)
    idx = torch.randint(0, 40, (3, 8, 5), generator=g).numpy()
    return m, params, x, y, idx, np.array([8, 7, 2])


@pytest.mark.parametrize("rule,option,correction,expect", [
    (True, None, False, True),    # the rule, not told otherwise
    (False, None, False, False),
    (True, False, False, False),  # --no-graphs overrides the rule
    (False, True, False, True),   # --graphs too
    (True, True, True, False),    # a gradient correction is never captured
])
def test_local_sgd_follows_the_rule_unless_told(rule, option, correction, expect, monkeypatch):
    m, params, x, y, idx, steps = _mlp_round()
    monkeypatch.setattr(executor, "graphs_rule", lambda model, device: rule)
    seen: list[bool] = []
    real = local.run_steps

    def spy(step, feed, n, device, graphed):
        seen.append(graphed)
        real(step, feed, n, device, graphed)

    monkeypatch.setattr(local, "run_steps", spy)
    fix = (lambda p, g, ctx: g) if correction else None
    out = local_sgd(m, params, x, y, idx, steps, 0.1, correction=fix, graphs=option)
    assert seen and set(seen) == {expect}
    eager = local_sgd(m, params, x, y, idx, steps, 0.1, correction=fix, graphs=False)
    for a, b in zip(out, eager, strict=True):  # on the CPU the same steps, eagerly: bitwise
        assert torch.equal(a, b)

