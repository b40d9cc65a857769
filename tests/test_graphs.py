"""engine.graphs: runs of steps with one working prefix, replayed from a CUDA graph after a warm-up. On the
CPU "capture" returns the step itself, so these check the orchestration (which steps are fed, run eagerly,
captured and replayed) and who decides (the executor's rule, or the option of local_sgd, `hetfl train` and
`hetfl bench`); tests/test_models.py checks whole rounds against the per-client loop on every device, CUDA
included, and tests/test_resume.py a `hetfl train` run with graphs on CUDA."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from hetfl.engine import executor, graphs, local
from hetfl.engine.local import local_sgd, prefix_runs
from hetfl.models import make_model


def test_prefix_runs_by_hand():
    # steps sorted [5, 5, 3, 2, 1, 0]: clients with more than j steps at j = 0..4
    active = np.array([5, 4, 3, 2, 2])
    assert prefix_runs(active, 0, 6) == [(5, 0, 1), (4, 1, 2), (3, 2, 3), (2, 3, 5)]
    # the block of rows 2 and 3: both work at steps 0 and 1, row 2 alone at step 2
    assert prefix_runs(active, 2, 4) == [(2, 0, 2), (1, 2, 3)]
    assert prefix_runs(active, 5, 6) == []  # a client with no steps
    assert prefix_runs(np.array([], dtype=np.int64), 0, 3) == []


def test_replayed_steps_by_hand_and_as_run_steps_replays(monkeypatch):
    # runs of 10, 5, 8, 7 and 1 steps: 10 - 2 and 8 - 2 replayed; 5, 7 and 1 eager (shorter than 8)
    assert (graphs.GRAPH_MIN_STEPS, graphs.GRAPH_WARMUP) == (8, 2)
    assert graphs.replayed_steps([10, 5, 8, 7, 1]) == 14
    assert graphs.replayed_steps([]) == 0
    events = _spy(monkeypatch)
    for n in range(1, 13):
        graphs.run_steps(lambda: None, lambda i: None, n, torch.device("cpu"), graphed=True)
    assert events.count("replay") == graphs.replayed_steps(list(range(1, 13)))


def test_graph_share_counts_a_paper_grids_block_steps(capsys, tmp_path):
    """scripts/graph_share.py: a round's runs (one block, or client by client below cuda_batched_from),
    by hand; and over a small grid of offline data, one line per (setting, scheme, traces) whose counts
    add up."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "graph_share.py"
    spec = importlib.util.spec_from_file_location("graph_share", path)
    share = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(share)
    # steps [9, 9, 3, 0]: both long clients for 3 steps, then 2 of them for 6 more (the third is done)
    assert share.block_runs(np.array([3, 9, 0, 9]), 0) == [3, 6]
    assert share.block_runs(np.array([3, 9]), 3) == [9, 3]  # fewer than 3 clients: client by client
    paper = path.parents[1] / "workflow" / "config" / "paper"
    grid = yaml.safe_load((paper / "ruan2021_table3_synthetic.yaml").read_text())
    grid["experiments"]["ruan2021_table3_synthetic"].update(rounds=6, num_traces=[1, 8], seeds=[3, 4],
                                                            local_epochs=8)
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    assert share.main([str(tmp_path / "grid.yaml")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 * 3 * 2 + 1  # IID and NIID, Schemes A, B, C, two trace sets; then "all"
    # E = 8 local updates. Where every client trains all 8 (Scheme A, which keeps only complete devices,
    # and one trace, T_0, in which every device completes): one run of 8 steps a round, 6 of them replayed
    for line in lines[:-1]:
        if " scheme A " in line or " T1 " in line:
            assert line.split(" (logreg)")[0].split()[1] in ("IID", "NIID") and "6 rounds trained" in line
            assert "block steps 48, replayed 36 (75%)" in line, line
    counts = [[int(v.replace(",", "")) for v in line.split("block steps ")[1].split(" (")[0].split(
        ", replayed ")] for line in lines]
    assert counts[-1] == [sum(c[0] for c in counts[:-1]), sum(c[1] for c in counts[:-1])]
    assert all(0 <= r <= s for s, r in counts)


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
    with pytest.raises(RuntimeError, match=rf"run of {RUN} local steps failed to capture .*operation not "
                                           r"permitted.*run without CUDA graphs: hetfl train or hetfl bench "
                                           r"--no-graphs"):
        graphs.run_steps(lambda: None, lambda i: None, RUN, torch.device("cpu"), graphed=True)


def test_the_rule_is_the_models_and_on_cuda_only(monkeypatch):
    """executor.graphs_rule: graphs on CUDA for a model whose class sets `cuda_graphs`, never elsewhere;
    of the zoo, the logistic regression, the MLP and the two LSTMs set it (measured on an H100,
    docs/engine.md), the others not. graphs_on: an option given overrides it either way."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert executor.graphs_rule(SimpleNamespace(cuda_graphs=True), cuda)
    assert not executor.graphs_rule(SimpleNamespace(cuda_graphs=True), cpu)
    assert not executor.graphs_rule(SimpleNamespace(), cuda)
    zoo = {"logreg": 60, "mlp": 784, "cnn": (1, 28, 28), "cnn_bn": (1, 28, 28), "vgg11": (3, 32, 32),
           "resnet20": (3, 32, 32), "char_lstm": 80, "sent_lstm": 25}
    for name, shape in zoo.items():
        graphed = name.endswith("lstm") or name in ("logreg", "mlp")
        assert executor.graphs_rule(make_model(name, shape, 10), cuda) == graphed, name
        assert not executor.graphs_rule(make_model(name, shape, 10), cpu), name
    m = make_model("cnn", (1, 28, 28), 10)
    monkeypatch.setattr(type(m), "cuda_graphs", True, raising=False)
    assert executor.graphs_on(m, cuda, None) and not executor.graphs_on(m, cuda, False)
    assert not executor.graphs_on(m, cpu, None) and executor.graphs_on(m, cpu, True)


def test_a_graphed_block_on_cuda_takes_half_the_eager_share_of_free_memory():
    """A captured step keeps its activations in the graph's own pool beside the eager warm-up's cached
    blocks (an H100 reserved 1.6-2.8x the eager block), so on CUDA a block replayed from graphs is sized
    at CUDA_GRAPH_MEMORY_SHARE, half the eager share: the clients the model says fit, halved. Eager
    blocks, and every block on the CPU, are as the model says."""
    model = SimpleNamespace(client_block=lambda params, x: 40)
    on_cuda = SimpleNamespace(device=torch.device("cuda"))  # only the minibatch's device is read
    on_cpu = SimpleNamespace(device=torch.device("cpu"))
    assert executor.make_plan(model, [], on_cuda, 100).block == 40
    assert executor.make_plan(model, [], on_cuda, 100, graphs=True).block == 20
    assert executor.make_plan(model, [], on_cuda, 15, graphs=True).block == 15  # all fit: one block
    assert executor.make_plan(model, [], on_cpu, 100, graphs=True).block == 40
    tiny = SimpleNamespace(client_block=lambda params, x: 1)
    assert executor.make_plan(tiny, [], on_cuda, 100, graphs=True).block == 1  # at least one client


@pytest.mark.parametrize("option,kept", [(True, False), (True, True), (False, False), (None, False)])
def test_every_plan_of_graphed_steps_is_made_as_graphed(option, kept, monkeypatch):
    """The executor halves a block only where told that its steps are replayed from graphs: local_sgd
    tells it its own decision, for a run's plan and for a plan kept in a GraphCache, and the bench's
    batched_plan the option's (None: the rule; on the CPU, eagerly)."""
    from hetfl import bench

    asked: list[bool] = []
    real = executor.make_plan

    def spy(model, params, x, clients, graphs=False):
        asked.append(graphs)
        return real(model, params, x, clients, graphs)

    monkeypatch.setattr(executor, "make_plan", spy)
    m, params, x, y, idx, steps = _mlp_round()
    cache = graphs.GraphCache() if kept else None
    local_sgd(m, params, x, y, idx, steps, 0.1, graphs=option, graph_cache=cache)
    prob = bench.make_problem(bench.WORKLOADS["logreg-synthetic"], 2, torch.device("cpu"), clients=2)
    bench.batched_plan(prob, option)
    assert asked == [bool(option)] * 2


#: a run one step longer than the shortest that is captured
RUN = graphs.GRAPH_MIN_STEPS + 1


def _mlp_round():
    m = make_model("mlp", 784, 10, hidden=(8,))
    g = torch.Generator().manual_seed(0)
    params = m.init_params(g)
    x, y = torch.randn(40, 784, generator=g), torch.randint(0, 10, (40,), generator=g)
    idx = torch.randint(0, 40, (3, RUN + 2, 5), generator=g).numpy()
    # a run of RUN steps (two clients), long enough to graph, between runs of 1 step of three and one
    return m, params, x, y, idx, np.array([RUN + 2, RUN + 1, 1])


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
    events = _spy(monkeypatch)
    fix = (lambda p, g, ctx: g) if correction else None
    out = local_sgd(m, params, x, y, idx, steps, 0.1, correction=fix, graphs=option)
    assert seen and set(seen) == {expect}
    assert events.count("replay") == (RUN - 2 if expect else 0)  # the run's 2 warm-up steps, then replays
    eager = local_sgd(m, params, x, y, idx, steps, 0.1, correction=fix, graphs=False)
    for a, b in zip(out, eager, strict=True):  # on the CPU the same steps, eagerly: bitwise
        assert torch.equal(a, b)



def test_a_kept_graph_is_captured_once_then_replays_every_step_of_later_runs(monkeypatch):
    """engine.graphs.run_kept: a kept graph's first run of at least KEPT_MIN_STEPS steps warms up and
    captures; every later run replays all its steps, each after its own feed. Shorter runs before the
    capture train eagerly."""
    events = _spy(monkeypatch)
    buffer = [None]
    seen: list[int] = []
    kept = graphs.Kept([], torch.empty(0), lambda: seen.append(buffer[0]))

    def run(n: int) -> None:
        graphs.run_kept(kept, lambda i: buffer.__setitem__(0, i), n, torch.device("cpu"))

    assert graphs.KEPT_MIN_STEPS == graphs.GRAPH_WARMUP == 2
    run(1)  # too short to capture: eager
    assert events == [] and seen == [0] and kept.replay is None
    run(2)  # its 2 steps are the warm-up; then the capture, which runs nothing
    assert events == ["capture after 2 warm-up steps"] and seen[1:] == [0, 1]
    run(5)  # kept: every step replayed, none eager, no capture
    assert events[1:] == ["replay"] * 5 and seen[3:] == [0, 1, 2, 3, 4]
    run(1)
    assert events[6:] == ["replay"] and seen[8:] == [0]


def test_graph_cache_keeps_the_most_recent_graphs_and_the_plan():
    cache = graphs.GraphCache(limit=2)
    made: list[str] = []

    def make(name):
        return lambda: made.append(name) or graphs.Kept([], torch.empty(0), lambda: None)

    a = cache.kept("a", make("a"))
    assert cache.kept("a", make("a")) is a and made == ["a"]
    cache.kept("b", make("b"))
    cache.kept("a", make("a"))  # a is now the most recent
    cache.kept("c", make("c"))  # b, the least recent, goes
    assert len(cache) == 2 and made == ["a", "b", "c"]
    assert cache.kept("a", make("a")) is a
    cache.kept("b", make("b"))
    assert made == ["a", "b", "c", "b"]
    plans: list[int] = []
    assert cache.plan("k", lambda: plans.append(1) or "plan") == "plan"
    assert cache.plan("k", lambda: plans.append(2) or "other") == "plan" and plans == [1]
    with pytest.raises(ValueError, match="GraphCache limit 0 is not allowed; allowed: 1 or more"):
        graphs.GraphCache(limit=0)


def test_kept_graphs_only_for_one_block_on_cuda():
    """engine.graphs.keeps: on CUDA a round of several blocks was sized by the free memory, and each kept
    graph holds a block step's activations: such rounds capture per run. On the CPU, any executor."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert graphs.keeps(cuda, 1) and graphs.keeps(cuda, 0)
    assert not graphs.keeps(cuda, 2)
    assert graphs.keeps(cpu, 1) and graphs.keeps(cpu, 7)


def test_local_sgd_captures_per_run_where_its_round_may_not_keep_graphs(monkeypatch):
    """local_sgd asks engine.graphs.keeps: where a round may not keep its graphs (on CUDA, several
    memory-sized blocks), the cache it was given stays empty and each run captures its own graph."""
    m, params, x, y, idx, steps = _mlp_round()
    asked: list[tuple[str, int]] = []
    monkeypatch.setattr(local, "keeps", lambda device, blocks: asked.append((device.type, blocks)) or False)
    events = _spy(monkeypatch)
    cache = graphs.GraphCache()
    for _ in range(2):
        local_sgd(m, params, x, y, idx, steps, 0.1, graphs=True, graph_cache=cache)
    assert asked == [("cpu", 1)] * 2 and len(cache) == 0
    assert events == (["capture after 2 warm-up steps"] + ["replay"] * (RUN - 2)) * 2


def test_local_sgd_keeps_graphs_across_rounds_and_ends_where_eager_rounds_end(monkeypatch):
    """local_sgd(graph_cache=...): the first round captures its run of RUN steps (the runs of 1 step stay
    eager), the second round, from other parameters and minibatches, replays all RUN without a capture; a
    new learning rate is a new graph. On the CPU every round is bitwise the eager round."""
    m, params, x, y, idx, steps = _mlp_round()
    events = _spy(monkeypatch)
    cache = graphs.GraphCache()
    g = torch.Generator().manual_seed(1)
    rounds = [(params, idx, 0.1), ([p + 0.01 * torch.randn(p.shape, generator=g) for p in params],
                                   torch.randint(0, 40, idx.shape, generator=g).numpy(), 0.1),
              (params, idx, 0.05)]
    expected_events = [["capture after 2 warm-up steps"] + ["replay"] * (RUN - 2), ["replay"] * RUN,
                       ["capture after 2 warm-up steps"] + ["replay"] * (RUN - 2)]
    for (start, batch_idx, lr), expect in zip(rounds, expected_events, strict=True):
        del events[:]
        out = local_sgd(m, start, x, y, batch_idx, steps, lr, graphs=True, graph_cache=cache)
        assert events == expect
        eager = local_sgd(m, start, x, y, batch_idx, steps, lr, graphs=False, graph_cache=cache)
        assert all(torch.equal(a, b) for a, b in zip(out, eager, strict=True))
    assert len(cache) == 2  # lr 0.1 and 0.05: one block, one run of RUN steps each
    # without graphs the cache is not used: nothing captured, nothing kept
    fresh = graphs.GraphCache()
    del events[:]
    local_sgd(m, params, x, y, idx, steps, 0.1, graphs=False, graph_cache=fresh)
    assert events == [] and len(fresh) == 0
