"""hetfl bench --profile (hetfl.stepprofile): where the batched engine's round spends its time."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from hetfl import bench, stepprofile
from hetfl.stepprofile import format_profile, summarize


def event(key: str, count: int, cpu_us: float, device_us: float, kind: DeviceType = DeviceType.CPU):
    return SimpleNamespace(key=key, count=count, self_cpu_time_total=cpu_us, self_device_time_total=device_us,
                           device_type=kind)


EVENTS = [
    event("aten::convolution_backward", 40, 900.0, 6000.0),
    event("aten::cudnn_convolution", 20, 400.0, 3000.0),
    event("aten::add_", 60, 1200.0, 1000.0),
    event("aten::view", 80, 100.0, 0.0),  # no kernel, no device time
    event("ProfilerStep#1", 1, 5000.0, 0.0),  # not an ATen operator
    event("sm90_xmma_wgrad_implicit_gemm_" + "x" * 200, 600, 0.0, 5000.0, DeviceType.CUDA),
    event("cudnn::engines::fprop_kernel", 200, 0.0, 3000.0, DeviceType.CUDA),
    event("vectorized_elementwise_kernel", 300, 0.0, 2000.0, DeviceType.CUDA),
]


def test_summarize_on_cuda_by_device_time_per_round() -> None:
    s = summarize(EVENTS, torch.device("cuda"), rounds=2, top=2)
    # ATen operators by self device time, per round (2 rounds), shares of all operators' device time
    assert [o["op"] for o in s["ops"]] == ["convolution_backward", "cudnn_convolution"]
    assert s["ops"][0] == {"op": "convolution_backward", "calls": 20, "self_ms": 3.0, "share": 0.6}
    assert s["ops_ms"] == pytest.approx(5.0)
    # kernels: launches and device time per round, the names cut
    assert s["kernels_per_round"] == 550
    assert s["kernel_ms"] == pytest.approx(5.0)
    assert s["kernels"][0]["launches"] == 300 and s["kernels"][0]["ms"] == 2.5
    assert s["kernels"][0]["share"] == 0.5 and len(s["kernels"][0]["kernel"]) == 90
    assert len(s["kernels"]) == 2


def test_summarize_on_the_cpu_by_self_cpu_time() -> None:
    s = summarize(EVENTS, torch.device("cpu"), rounds=1)
    assert [o["op"] for o in s["ops"]] == ["add_", "convolution_backward", "cudnn_convolution", "view"]
    assert s["ops"][0]["share"] == pytest.approx(1200 / 2600)
    assert "kernels" not in s and "kernels_per_round" not in s


def test_bench_profile_on_the_cpu(tmp_path) -> None:
    out = tmp_path / "p.json"
    assert bench.main(["--profile", "--workloads", "mlp-mnist,logreg-synthetic", "--steps", "2",
                       "--repeat", "1", "--threads", "1", "--json", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [r["workload"] for r in records] == ["mlp-mnist", "logreg-synthetic"]
    mlp = records[0]
    assert mlp["mode"] == "profile" and mlp["clients"] == 100 and mlp["steps"] == 2 and mlp["rounds"] == 1
    assert mlp["workers"] == 1 and mlp["graphs"] is False and mlp["round_ms"] > 0
    # the 2NN's round is its batched GEMMs first
    assert {"bmm", "baddbmm", "baddbmm_"} & {o["op"] for o in mlp["ops"][:3]}
    assert all(0 < o["share"] <= 1 for o in mlp["ops"]) and sum(o["share"] for o in mlp["ops"]) <= 1 + 1e-9
    assert mlp["ops_ms"] <= mlp["round_ms"]
    assert "kernels" not in mlp  # the CPU launches none


def test_format_says_what_the_profile_does_not_see() -> None:
    r = {"workload": "resnet20-cifar", "clients": 4, "batch": 32, "steps": 3, "round_ms": 900.0, "workers": 2,
         "ops": [{"op": "copy_", "calls": 118, "share": 0.33}]}
    assert "blocks on 2 CPU worker threads, whose operators the profiler does not see: give --threads 1" \
        in format_profile([r])
    cuda = {**r, "workers": 1, "kernels_per_round": 9000.0, "kernel_ms": 40.0,
            "kernels": [{"kernel": "fprop", "launches": 600.0, "share": 0.5}]}
    text = format_profile([cuda])
    assert "9,000 kernels a round (3,000 a step)" in text and "fprop 50% (600)" in text
    assert "worker threads" not in text


@pytest.mark.parametrize("argv, message", [
    (["--profile", "--count-ops"], "--count-ops and --profile are both given"),
    (["--profile", "--eval", "64"], "--eval has value 64"),
    (["--profile", "--workloads", "nope"], "nope"),
])
def test_bench_profile_refuses_bad_arguments(argv, message, capsys) -> None:
    assert bench.main(argv) == 2
    assert message in capsys.readouterr().err


def test_profile_of_no_rounds_is_refused(capsys) -> None:
    """`--profile --repeat 0`: the bench's parser refuses it (test_bench.py), and run_profile itself."""
    with pytest.raises(SystemExit):
        bench.main(["--profile", "--repeat", "0"])
    assert "argument --repeat: has value '0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--repeat has value 0; allowed: 1 or more profiled rounds"):
        stepprofile.run_profile(["logreg-synthetic"], "cpu", rounds=0)
