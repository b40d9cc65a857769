"""Where a batched round's time goes: `hetfl bench --profile`, torch.profiler over the engine's round.

Issue 12's CUDA targets are missed by ResNet-20 (launch-bound: thousands of small kernels a step) and
VGG-11 (half the card's matmul rate). Which operators and kernels take a round's time, and how many
kernels it launches, say which lever is left: CUDA graphs (launches), another convolution (one operator's
kernels), or none (the matmul rate). This profiles what `hetfl bench` times for the batched engine, one
round of local SGD of K clients (`engine_fn`: the minibatch gathers, the blocks, the reorder of the
stacks), after one untimed round, and reports per round:

* the ATen operators with the most self time: on CUDA the device time of the kernels each launched
  itself, on the CPU its own CPU time (the time of operators it called is theirs);
* on CUDA, the kernels: how many a round launches, and those with the most device time;
* the wall time of a profiled round (the profiler's overhead included: compare rounds with each other,
  not with `hetfl bench`'s rates).

The profiler records the operators of the thread that runs it: on the CPU, the models that train blocks
on several worker threads (engine.executor) are profiled whole only with `--threads 1`. CUDA runs no
workers.

    hetfl bench --profile [--workloads W,...] [--clients K] [--steps S] [--model-params JSON] [--graphs]
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from hetfl.bench import (
    WORKLOADS,
    Workload,
    batched_graphs,
    batched_plan,
    check_workloads,
    device_name,
    engine_fn,
    resolve_device,
    synchronize,
    workload_problem,
)
from hetfl.engine.reproducible import reproducible_cuda

#: operators and kernels listed per workload
TOP = 12
#: kernel names are C++ template instantiations: cut to this many characters
KERNEL_NAME = 90


def summarize(events: Iterable[Any], device: torch.device, rounds: int, top: int = TOP) -> dict[str, Any]:
    """torch.profiler's key averages as per-round figures: the ATen operators by self time (device time on
    CUDA, CPU time elsewhere; microseconds in, milliseconds out) and, on CUDA, the kernels: launches and
    device time. Shares are of the sum over all operators (kernels)."""
    events = list(events)
    on_cuda = device.type == "cuda"

    def self_us(e: Any) -> float:
        return float(e.self_device_time_total if on_cuda else e.self_cpu_time_total)

    ops = [e for e in events if e.device_type == DeviceType.CPU and e.key.startswith("aten::")]
    total = sum(self_us(e) for e in ops) or 1.0
    out: dict[str, Any] = {
        "ops_ms": sum(self_us(e) for e in ops) / 1e3 / rounds,
        "ops": [{"op": e.key.removeprefix("aten::"), "calls": e.count / rounds,
                 "self_ms": self_us(e) / 1e3 / rounds, "share": self_us(e) / total}
                for e in sorted(ops, key=self_us, reverse=True)[:top] if self_us(e) > 0]}
    if on_cuda:
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        ktotal = sum(e.self_device_time_total for e in kernels) or 1.0
        out["kernels_per_round"] = sum(e.count for e in kernels) / rounds
        out["kernel_ms"] = sum(e.self_device_time_total for e in kernels) / 1e3 / rounds
        by_time = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)
        out["kernels"] = [{"kernel": e.key[:KERNEL_NAME], "launches": e.count / rounds,
                           "ms": e.self_device_time_total / 1e3 / rounds,
                           "share": e.self_device_time_total / ktotal} for e in by_time[:top]]
    return out


def profile_workload(w: Workload, device: torch.device, steps: int | None = None, clients: int | None = None,
                     batch: int | None = None, model_params: dict[str, Any] | None = None,
                     graphs: bool | None = None, rounds: int = 2, top: int = TOP,
                     keep_graphs: bool = False) -> dict[str, Any]:
    """The batched engine's round of workload `w` (K clients, `steps` local steps each; the bench's
    defaults), profiled over `rounds` rounds after one untimed round (which, with kept graphs, captures
    them: the profiled rounds replay)."""
    prob = workload_problem(w, steps, device, clients, batch, model_params)
    w, steps, K = prob.workload, int(prob.steps[0]), len(prob.steps)
    workers = batched_plan(prob, graphs).workers
    fn = engine_fn("batched", prob, graphs=graphs, keep_graphs=keep_graphs)
    fn()  # untimed: first calls (allocator, library handles, cuDNN's algorithm choice)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(rounds):
            fn()
        synchronize(device)
        wall = time.perf_counter() - t0
    graphed = batched_graphs(prob, graphs)
    return {"workload": w.name, "model": w.model, "model_params": dict(model_params or {}),
            "mode": "profile", "engine": "batched", "clients": K, "batch": w.batch, "steps": steps,
            "rounds": rounds, "device": device.type, "threads": torch.get_num_threads(), "workers": workers,
            "graphs": graphed, "graphs_kept": graphed and keep_graphs,
            "round_ms": wall * 1e3 / rounds, **summarize(prof.key_averages(), device, rounds, top)}


def run_profile(workloads: Sequence[str], device: str = "auto", threads: int | None = None,
                steps: int | None = None, clients: int | None = None, batch: int | None = None,
                model_params: dict[str, Any] | None = None, graphs: bool | None = None,
                rounds: int = 2, keep_graphs: bool = False) -> list[dict[str, Any]]:
    """profile_workload for every workload, on the device and in the mode `hetfl bench` times (on CUDA
    IEEE float32 and deterministic kernels, as `hetfl train` runs)."""
    check_workloads(workloads, model_params)
    if rounds < 1:
        raise ValueError(f"--repeat has value {rounds}; allowed: 1 or more profiled rounds")
    dev = resolve_device(device)
    if dev.type == "cuda":
        reproducible_cuda()
    if threads:
        torch.set_num_threads(threads)
    records = [profile_workload(WORKLOADS[n], dev, steps, clients, batch, model_params, graphs, rounds,
                                keep_graphs=keep_graphs) for n in workloads]
    for r in records:
        r["device_name"] = device_name(dev)
    return records


def format_profile(records: list[dict[str, Any]], top: int = 6) -> str:
    """One paragraph per workload: the round, its kernels (CUDA), its top operators (and kernels)."""
    out = []
    for r in records:
        head = (f"{r['workload']} (K {r['clients']}, B {r['batch']}, {r['steps']} steps"
                + (", graphs kept" if r.get("graphs_kept") else ", graphs" if r.get("graphs") else "")
                + f"): {r['round_ms']:,.1f} ms a round profiled")
        if "kernels_per_round" in r:
            per_step = r["kernels_per_round"] / r["steps"]
            head += (f", {r['kernels_per_round']:,.0f} kernels a round ({per_step:,.0f} a step), "
                     f"{r['kernel_ms']:,.1f} ms of kernel time")
        if r.get("workers", 1) > 1:
            head += (f"; blocks on {r['workers']} CPU worker threads, whose operators the profiler does not "
                     f"see: give --threads 1")
        out.append(head)
        out.append("  operators (self time): " + ", ".join(
            f"{o['op']} {100 * o['share']:.0f}% ({o['calls']:,.0f} calls)" for o in r["ops"][:top]))
        if r.get("kernels"):
            out.append("  kernels (device time): " + ", ".join(
                f"{k['kernel'][:40]} {100 * k['share']:.0f}% ({k['launches']:,.0f})"
                for k in r["kernels"][:top]))
    return "\n".join(out)
