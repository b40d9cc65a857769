"""`hetfl bench`: well-formed records from a tiny run (correctness only, no timing assertions)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from hetfl import bench
from hetfl.models import make_model

KEYS = {"workload", "engine", "clients", "batch", "client_steps_per_s", "peak_rss_mb", "device"}


def test_tiny_bench_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["--workloads", "logreg-synthetic,mlp-mnist,cnn-mnist", "--steps", "2", "--repeat", "1",
            "--clients", "3", "--threads", "1", "--device", "cpu", "--json", str(out)]
    assert bench.main(argv) == 0
    records = json.loads(out.read_text())
    assert [(r["workload"], r["engine"]) for r in records] == [
        (w, e) for w in ("logreg-synthetic", "mlp-mnist", "cnn-mnist") for e in ("batched", "reference")]
    for r in records:
        assert KEYS <= set(r)
        assert r["device"] == "cpu" and r["clients"] == 3 and r["steps"] == 2
        assert r["batch"] == bench.WORKLOADS[r["workload"]].batch
        for key in ("client_steps_per_s", "peak_rss_mb", "gflops", "bound_client_steps_per_s",
                    "fraction_of_bound", "fraction_of_matmul", "matmul_gflops", "copy_gbps", "speedup"):
            assert math.isfinite(r[key]) and r[key] > 0, key
        rate = r["client_steps_per_s"]
        assert r["fraction_of_bound"] == pytest.approx(rate / r["bound_client_steps_per_s"])
    ref = {r["workload"]: r["client_steps_per_s"] for r in records if r["engine"] == "reference"}
    for r in records:
        assert r["speedup"] == pytest.approx(r["client_steps_per_s"] / ref[r["workload"]])
    table = capsys.readouterr().out
    assert "cnn-mnist" in table and "GFLOP/s" in table and "matmul" in table


def test_json_to_stdout(capsys):
    assert bench.main(["--workloads", "logreg-synthetic", "--steps", "2", "--repeat", "1", "--clients", "2",
                       "--device", "cpu", "--json", "-"]) == 0
    captured = capsys.readouterr()
    records = json.loads(captured.out)
    assert len(records) == 2 and "logreg-synthetic" in captured.err  # the table goes to stderr then


def test_unknown_workload():
    with pytest.raises(ValueError, match="unknown workload"):
        bench.run_bench(["nope"], steps=1)


def test_workloads_are_the_issues():
    def spec(name: str) -> tuple:
        w = bench.WORKLOADS[name]
        return w.model, w.input_shape, w.num_classes, w.batch, w.clients, w.kwargs

    assert spec("logreg-synthetic") == ("logreg", (60,), 10, 20, 50, {})
    assert spec("mlp-mnist") == ("mlp", (784,), 10, 10, 100, {"hidden": (200, 200)})
    assert spec("cnn-mnist") == ("cnn", (1, 28, 28), 10, 10, 100, {})
    assert bench.DEFAULT_WORKLOADS == ("logreg-synthetic", "mlp-mnist", "cnn-mnist")


def test_flops_and_bounds():
    logreg = make_model("logreg", 60, 10)
    assert bench.train_flops(logreg, 20) == 2 * 2 * 20 * 60 * 10
    records = [{"workload": "w", "engine": e, "client_steps_per_s": rate, "flops_per_client_step": 1e9,
                "bytes_per_client_step": 1e9} for e, rate in (("batched", 20.0), ("reference", 5.0))]
    bench.add_bounds(records, matmul=100.0, bandwidth=50.0)  # bound: min(100, 50) steps/s
    assert records[0]["bound_client_steps_per_s"] == pytest.approx(50.0)
    assert records[0]["fraction_of_bound"] == pytest.approx(0.4)
    assert records[0]["gflops"] == pytest.approx(20.0)
    assert records[0]["fraction_of_matmul"] == pytest.approx(0.2)
    assert records[0]["speedup"] == pytest.approx(4.0) and records[1]["speedup"] == pytest.approx(1.0)


def test_machine_measurements_are_positive():
    cpu = torch.device("cpu")
    assert bench.matmul_gflops(cpu, n=128, repeat=2) > 0
    assert bench.copy_gbps(cpu, mbytes=4, repeat=2) > 0
    assert bench.peak_rss_mb() > 0
    assert bench.resolve_device("cpu") == cpu
