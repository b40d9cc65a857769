"""engine.graphs: runs of steps with one working prefix, replayed from a CUDA graph after a warm-up. On the
CPU "capture" returns the step itself, so these check the orchestration (which steps are fed, run eagerly,
captured and replayed); tests/test_models.py checks whole rounds against the per-client loop on every
device, CUDA included."""

import numpy as np
import pytest
import torch

from hetfl.engine import graphs
from hetfl.engine.local import _prefix_runs


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
                                           r".*hetfl bench --graphs\) are opt-in"):
        graphs.run_steps(lambda: None, lambda i: None, 7, torch.device("cpu"), graphed=True)
