"""hetfl.graphprobe: a batched SGD step run eagerly and replayed from a CUDA graph (on the CPU: the same
step called eagerly, which checks the probe itself)."""

import json

import pytest
import torch

from hetfl import graphprobe

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (scripts/gpu-check runs this on a GPU machine)"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["mlp-mnist", "cnn-bn-mnist"])
def test_graph_replay_ends_where_the_eager_steps_end(name, device):
    """Both ways train the same block from the same parameters for the same steps: on the CPU bitwise
    (the same calls), on CUDA to float32 rounding (the same kernels, replayed). The rates are positive.
    (The LSTMs are left to the probe's own run, which records a capture that fails instead of stopping:
    a failed capture can leave the CUDA context unusable for the tests after it.)"""
    r = graphprobe.probe(name, torch.device(device), clients=3, steps=2, repeat=1)
    assert "error" not in r, r.get("error")
    assert r["clients"] == 3 and r["eager_client_steps_per_s"] > 0 and r["graph_client_steps_per_s"] > 0
    assert r["max_abs_diff"] == 0 if device == "cpu" else r["max_abs_diff"] < 1e-5


def test_graph_min_steps_by_hand():
    """Capture 10 ms with 2 warm-up steps, eager 2 ms, replay 0.5 ms a step: n steps graphed cost
    10 + (n - 2)·0.5 ms against 2n eager; equal at n = 6, faster from 7."""
    assert graphprobe.graph_min_steps(10.0, 2.0, 0.5, warmup=2) == 7
    assert graphprobe.graph_min_steps(0.0, 2.0, 1.0, warmup=2) == 3  # never fewer than the warm-up + 1
    assert graphprobe.graph_min_steps(1.0, 2.0, 2.0, warmup=2) is None  # a replay that gains nothing
    assert graphprobe.graph_min_steps(1.0, 2.0, 3.0, warmup=2) is None


def test_the_probe_times_the_engines_capture_per_run():
    """capture_s: the engine's capture of a run (GRAPH_WARMUP eager steps, then the capture) timed, and
    graph_min_steps derived from it and the two rates."""
    r = graphprobe.probe("logreg-synthetic", torch.device("cpu"), clients=2, steps=2, repeat=2)
    assert r["capture_s"] > 0
    e, g = (r["clients"] / r[f"{k}_client_steps_per_s"] for k in ("eager", "graph"))
    assert r["graph_min_steps"] == graphprobe.graph_min_steps(r["capture_s"], e, g)


def test_a_step_that_moves_the_parameters_is_compared(monkeypatch):
    """The comparison sees a difference: a 'graph' that runs one extra step ends elsewhere."""
    monkeypatch.setattr(graphprobe, "capture", lambda step, device, warmup: lambda: (step(), step()))
    r = graphprobe.probe("logreg-synthetic", torch.device("cpu"), clients=2, steps=1, repeat=1)
    assert r["max_abs_diff"] > 0


def test_main_writes_records_and_refuses_bad_input(tmp_path, capsys, monkeypatch):
    path = tmp_path / "g.json"
    assert graphprobe.main(["--device", "cpu", "--workloads", "logreg-synthetic", "--clients", "2",
                            "--steps", "1", "--repeat", "1", "--json", str(path)]) == 0
    [record] = json.loads(path.read_text())
    assert record["workload"] == "logreg-synthetic" and record["max_abs_diff"] == 0
    assert graphprobe.main(["--device", "cpu", "--workloads", "nope"]) == 2
    assert "unknown workload(s) nope" in capsys.readouterr().err
    assert graphprobe.main(["--device", "cpu", "--steps", "0"]) == 2
    # as hetfl bench: a --json PATH that cannot be written is refused before anything is measured
    monkeypatch.setattr(graphprobe, "probe", lambda *a, **k: pytest.fail("measured despite bad input"))
    missing = str(tmp_path / "missing" / "g.json")
    assert graphprobe.main(["--device", "cpu", "--workloads", "logreg-synthetic", "--json", missing]) == 2
    assert f"--json has value '{missing}'" in capsys.readouterr().err
