"""How much a CUDA graph of one batched SGD step gains: a probe for issue 12's 10× on CUDA, the upper
bound of what the engine's own graphs (engine.graphs) can gain.

On an H200 ResNet-20's batched round runs at 13 % of the card's float32 matmul rate and the LSTMs' at 2-15 %:
their steps are bound by kernel launches (docs/engine-measurements.md, "On a GPU"). A CUDA graph replays a
captured step's kernels without Python or launch overhead, the same kernels on the same addresses, so the
arithmetic, and with deterministic kernels the result, does not change. This measures the gain on one block's
step of each workload of `hetfl bench`, without the engine's minibatch gathers, its warm-up steps or its
captures (`hetfl bench --graphs` times the whole engine with them): K clients' `sgd_step` (forward, backward
and update of the whole block, in place) run eagerly and replayed from a graph, each `--steps` times from the
same parameters, with the parameters they end at compared. It also times what the engine pays per run of steps
before its first replay (`capture` with GRAPH_WARMUP eager warm-up steps on a new side stream, then the
capture and the graph's instantiation) and says from how many steps a run gains (`graph_min_steps`): the
measured GRAPH_MIN_STEPS.

    python -m hetfl.graphprobe [--workloads W1,...] [--clients K] [--steps S] [--repeat R] [--json PATH]

On the CPU there is nothing to capture: the "graph" is the same step called eagerly, which checks the
probe itself (tests/test_graphprobe.py). `scripts/gpu-check` runs it after its comparisons.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from hetfl.bench import (
    CUDA_CLIENTS,
    DEFAULT_WORKLOADS,
    WORKLOADS,
    check_json_path,
    check_workloads,
    random_inputs,
    resolve_device,
    synchronize,
    workload_clients,
    workload_model,
    write_json,
)
from hetfl.engine.graphs import GRAPH_WARMUP, capture
from hetfl.engine.reproducible import reproducible_cuda


def graph_min_steps(capture_s: float, eager_s: float, replay_s: float, warmup: int = GRAPH_WARMUP
                    ) -> int | None:
    """The shortest run of n steps that is faster graphed than eager: capture_s (the warm-up steps, the
    capture and the instantiation) + (n - warmup)·replay_s < n·eager_s, n > warmup; None when a replay is
    no faster than an eager step (per-step seconds)."""
    if replay_s >= eager_s:
        return None
    return max(warmup + 1, math.floor((capture_s - warmup * replay_s) / (eager_s - replay_s)) + 1)


def probe(name: str, device: torch.device, clients: int | None = None, steps: int = 10, repeat: int = 3,
          seed: int = 0) -> dict[str, Any]:
    """One workload's block of K clients: client steps/s eagerly and from a graph (medians of `repeat`
    runs of `steps` steps), and the largest difference of the parameters after `steps` steps of each."""
    w = WORKLOADS[name]
    K = workload_clients(w, device, clients)
    gen = torch.Generator().manual_seed(seed)
    model = workload_model(w)
    start = [p.unsqueeze(0).repeat(K, *([1] * p.dim())).to(device) for p in model.init_params(gen)]
    xb = random_inputs(w, K * w.batch, gen).view(K, w.batch, *w.input_shape).to(device)
    yb = torch.randint(0, w.num_classes, (K, w.batch), generator=gen).to(device)
    # the whole round as one block, and no device query inside a capture (client_block asks CUDA for its
    # free memory)
    model.client_block = lambda params, x: x.shape[0]  # type: ignore[method-assign]
    eager_params, graph_params = [p.clone() for p in start], [p.clone() for p in start]

    def step_of(params: list[Tensor]) -> Callable[[], None]:
        return lambda: model.sgd_step(params, xb, yb, w.lr)

    eager = step_of(eager_params)
    record: dict[str, Any] = {"workload": name, "model": w.model, "clients": K, "batch": w.batch,
                              "steps": steps, "repeat": repeat, "device": device.type}
    try:
        replay = capture(step_of(graph_params), device, warmup=3)  # on the CPU: 3 steps, then the step
    except Exception as err:  # noqa: BLE001 -- what failed to capture is the finding
        return {**record, "error": f"{type(err).__name__}: {err}"[:300]}

    def run(fn: Callable[[], None], params: list[Tensor]) -> float:
        for p, p0 in zip(params, start, strict=True):
            p.copy_(p0)
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        synchronize(device)
        return time.perf_counter() - t0

    run(eager, eager_params)  # untimed: the eager path's first calls (the graph's were its warm-up)
    times: dict[str, list[float]] = {"eager": [], "graph": []}
    for _ in range(repeat):  # alternating, as hetfl bench times its engines
        times["eager"].append(run(eager, eager_params))
        times["graph"].append(run(replay, graph_params))
    rates = {k: K * steps / statistics.median(v) for k, v in times.items()}
    diff = max(float((a - b).abs().max()) for a, b in zip(eager_params, graph_params, strict=True))
    captures = []
    for _ in range(repeat):  # what the engine pays per run before its first replay (engine.graphs.run_steps)
        synchronize(device)
        t0 = time.perf_counter()
        again = capture(step_of(graph_params), device, warmup=GRAPH_WARMUP)
        synchronize(device)
        captures.append(time.perf_counter() - t0)
        del again  # the graph and its memory pool
    capture_s = statistics.median(captures)
    return {**record, "eager_client_steps_per_s": rates["eager"], "graph_client_steps_per_s": rates["graph"],
            "speedup": rates["graph"] / rates["eager"], "max_abs_diff": diff, "capture_s": capture_s,
            "graph_min_steps": graph_min_steps(capture_s, K / rates["eager"], K / rates["graph"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hetfl.graphprobe", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--clients", type=int, default=None,
                        help=f"clients of the block (default: the workload's own, at least {CUDA_CLIENTS} on "
                             f"CUDA)")
    parser.add_argument("--steps", type=int, default=10, help="SGD steps per timed run")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs each way; the median is reported")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the records to PATH ('-': stdout), checked before anything runs")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    try:
        check_workloads(names, None)
        check_json_path(args.json)
        if min(args.steps, args.repeat, args.clients or 1) < 1:
            raise ValueError("--steps, --repeat and --clients take positive numbers")
        device = resolve_device(args.device)
    except ValueError as err:
        print(f"graphprobe: error: {err}", file=sys.stderr)
        return 2
    if device.type == "cuda":
        reproducible_cuda()  # as hetfl train runs there: IEEE float32, deterministic kernels
    records = []
    for name in names:
        r = probe(name, device, args.clients, args.steps, args.repeat)
        records.append(r)
        print(f"{name:22s} K={r['clients']:<4d} " + (f"capture failed: {r['error']}" if "error" in r else
              f"eager {r['eager_client_steps_per_s']:10.1f}  graph {r['graph_client_steps_per_s']:10.1f} "
              f"client steps/s  {r['speedup']:5.2f}x  max |diff| {r['max_abs_diff']:.2e}  capture "
              f"{1e3 * r['capture_s']:.1f} ms, a run gains from {r['graph_min_steps'] or '-'} steps"),
              flush=True)
    write_json(records, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
