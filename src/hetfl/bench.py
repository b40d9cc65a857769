"""`hetfl bench`: the engine against the per-client reference loop, on a workload for every model.

Each workload trains `clients` clients for `steps` local SGD steps on random data of the right shapes,
once with engine.local.local_sgd (the engine, with the executor engine.executor picks for the model and
device) and once with engine.oracle.local_sgd_reference (torch.nn + autograd + torch.optim.SGD, one client
after another, how research code trains). Rates are client steps per second, the median of `repeat` timed
runs after a warm-up (the two engines' runs alternate, so a burst of other load hits both alike).

The machine's matmul GFLOP/s (its fastest float32 GEMM library: gemm_gflops) and copy bandwidth give a
roofline bound per workload: a client step needs `flops` FLOPs (the model's matmuls/convolutions, forward
+ backward) and must at least read and write every parameter once, 2·4·P bytes (an embedding: only the
rows a minibatch can touch), so no engine beats min(peak / flops, bandwidth / bytes) steps/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from hetfl.engine import executor
from hetfl.engine.allocator import retain_freed_memory
from hetfl.engine.graphs import GRAPH_MIN_STEPS, GraphCache
from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import minibatch_indices
from hetfl.engine.oracle import local_sgd_reference
from hetfl.engine.reproducible import CUDNN_HEURISTIC_MODE_B, check_tf32, reproducible_cuda
from hetfl.models import BatchedModel, LogReg, make_model


@dataclass(frozen=True)
class Workload:
    """A fixed training workload: model, data shape, clients, minibatch size and local steps.

    input_shape: one sample's shape (a sequence length for text, whose samples are token ids < vocab).
    clients and steps are small where a client step is slow, to keep the whole bench a few minutes; on
    the CPU a client's rate does not depend on how many clients share its round once a round has a few
    blocks. On CUDA it does, so there a round has at least CUDA_CLIENTS clients.
    """

    name: str
    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    clients: int
    batch: int
    steps: int = 20
    lr: float = 0.05
    vocab: int = 0
    kwargs: dict[str, Any] = field(default_factory=dict)


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    # The papers' models at the papers' sizes (batch sizes: Ruan et al. and LEAF 10; FedNova's VGG-11 and
    # the ResNets 32).
    Workload("logreg-synthetic", "logreg", (60,), 10, clients=50, batch=20),
    Workload("mlp-mnist", "mlp", (784,), 10, clients=100, batch=10, kwargs={"hidden": (200, 200)}),
    Workload("cnn-mnist", "cnn", (1, 28, 28), 10, clients=20, batch=10, steps=10),
    Workload("cnn-bn-mnist", "cnn_bn", (1, 28, 28), 10, clients=20, batch=10, steps=10),
    Workload("vgg11-cifar", "vgg11", (3, 32, 32), 10, clients=4, batch=32, steps=2),
    Workload("resnet20-cifar", "resnet20", (3, 32, 32), 10, clients=4, batch=32, steps=3),
    Workload("char-lstm-shakespeare", "char_lstm", (80,), 80, clients=4, batch=10, steps=3, vocab=80),
    Workload("sent-lstm-sent140", "sent_lstm", (25,), 2, clients=16, batch=10, steps=4, vocab=20_000),
    # Not run by default: FedDyn's variants and the EMNIST ResNet.
    Workload("mlp-feddyn", "mlp", (784,), 10, clients=100, batch=50, kwargs={"hidden": (200, 100)}),
    Workload("cnn-cifar", "cnn_cifar", (3, 32, 32), 10, clients=20, batch=50, steps=5),
    Workload("resnet-emnist", "resnet_emnist", (1, 28, 28), 62, clients=4, batch=32, steps=3),
]}
DEFAULT_WORKLOADS = ("logreg-synthetic", "mlp-mnist", "cnn-mnist", "cnn-bn-mnist", "vgg11-cifar",
                     "resnet20-cifar", "char-lstm-shakespeare", "sent-lstm-sent140")
ENGINES = ("batched", "reference")
#: clients per round on CUDA unless --clients says otherwise: on a GPU the batched rate grows with the
#: round's clients until the card fills (an H200: VGG-11 3.6x the loop at the 4-client default, the
#: char-LSTM 0.55x; at 64, 3.2x and 5.8x, docs/engine-measurements.md), where on the CPU it is flat past
#: a few blocks
CUDA_CLIENTS = 64


# -- the machine ------------------------------------------------------------------------------------
def resolve_device(device: str) -> torch.device:
    """auto → cuda when torch sees a CUDA device, else cpu; cuda without one is an error before any work."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device {device!r} is unknown; allowed: auto, cpu, cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device cuda was asked for, but torch {torch.__version__} sees no CUDA device "
                         f"(built for CUDA: {torch.version.cuda}); allowed: auto, cpu")
    return torch.device(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels (CUDA); a no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_time(fn: Callable[[], object], device: torch.device, repeat: int) -> float:
    """Best wall time of `repeat` calls (the least disturbed by other load), seconds."""
    return min(timed(fn, device)[0] for _ in range(repeat))


def timed(fn: Callable[[], object], device: torch.device) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process: user + system, all threads) of one call."""
    synchronize(device)
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    synchronize(device)
    return time.perf_counter() - t0, time.process_time() - c0


def gemm_products(device: torch.device) -> dict[str, Callable[[Tensor, Tensor], Tensor]]:
    """The float32 GEMMs torch reaches on `device`, by library, each a · bᵀ: torch.mm (cuBLAS on CUDA;
    MKL or OpenBLAS on the CPU) and, on a CPU whose torch has oneDNN, oneDNN's inner product
    (torch.ops.mkldnn._linear_pointwise, which every torch.nn.Linear would reach with a packed weight).
    A library is listed only where a small product of its matches torch.mm's, so no rate is of a wrong
    or missing kernel."""
    products: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"torch.mm": lambda a, b: torch.mm(a, b.t())}
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return products

    def onednn(a: Tensor, b: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 24, generator=gen), torch.randn(8, 24, generator=gen)
    try:
        if torch.allclose(onednn(a, b), torch.mm(a, b.t()), rtol=1e-4, atol=1e-4):
            products["oneDNN"] = onednn
    except (AttributeError, NotImplementedError, RuntimeError):  # a torch built without the op
        pass
    return products


def gemm_gflops(device: torch.device, n: int = 2048, repeat: int = 5) -> dict[str, float]:
    """Measured float32 GEMM rate of each of gemm_products' libraries, GFLOP/s (n×n by n×n: 2n³ FLOPs).

    More than one, because no one library is the machine's bound everywhere: on a Zen 5 core, whose
    AVX-512 units do 64 float32 FLOPs a cycle, torch.mm (MKL) reached 108 GFLOP/s and oneDNN's inner
    product (its avx512_core kernel, in float32) 233 (docs/engine.md, "The hardware bound on the CPU");
    the engine's and torch.nn's convolutions and RNNs run on oneDNN."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    rates = {}
    for name, product in gemm_products(device).items():
        product(a, b)  # warm-up: thread pool, kernel selection
        rates[name] = 2 * n ** 3 / best_time(lambda f=product: f(a, b), device, repeat) / 1e9
    return rates


def matmul_gflops(device: torch.device, n: int = 2048, repeat: int = 5) -> float:
    """The machine's float32 GEMM bound, GFLOP/s: the fastest of gemm_gflops' libraries."""
    return max(gemm_gflops(device, n=n, repeat=repeat).values())


def copy_gbps(device: torch.device, mbytes: int = 256, repeat: int = 5) -> float:
    """Measured memory bandwidth of a large tensor copy, GB/s (bytes read + bytes written)."""
    src = torch.ones(mbytes * 2 ** 20 // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: fault the pages in
    return 2 * src.numel() * 4 / best_time(lambda: dst.copy_(src), device, repeat) / 1e9


def _reset_peak_rss() -> bool:
    """Reset the kernel's resident-set high-water mark (Linux ≥ 4.0) so a peak is per phase."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak resident set size since the last reset (VmHWM), else since the process started."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2 ** 20 if sys.platform == "darwin" else rss / 1024


def peak_allocated_bytes(fn: Callable[[], Any], device: torch.device | str = "cpu") -> tuple[int, Any]:
    """(peak bytes of tensors allocated on `device` while fn() runs, above what was live before it; fn's
    result). From the torch profiler's allocator events, so it counts exactly what torch allocates (not
    the interpreter, not freed pages the process keeps), on the CPU and on CUDA alike."""
    from torch.profiler import profile

    kind = torch.device(device).type
    with profile(profile_memory=True) as prof:
        out = fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type().name.lower() == kind)
    return (int(np.max(np.cumsum([n for _, n in events]))) if events else 0), out


# -- the work ---------------------------------------------------------------------------------------
def train_flops(model: BatchedModel, batch: int) -> int:
    """FLOPs of one client step: forward + backward matmuls/convolutions, 2 per multiply-add."""
    if isinstance(model, LogReg):
        return 2 * 2 * batch * model.input_dim * model.num_classes  # logits and ∇W; no input gradient
    return model.train_flops(batch)  # type: ignore[attr-defined]


def step_bytes(model: BatchedModel, params: Sequence[Tensor], batch: int) -> int:
    """Bytes a client step must at least move: read and write every parameter it can change once."""
    if hasattr(model, "step_bytes"):
        return model.step_bytes(batch)  # type: ignore[attr-defined]
    return 2 * param_bytes(params)


def param_bytes(params: Sequence[Tensor]) -> int:
    return sum(p.numel() * p.element_size() for p in params)


@dataclass
class Problem:
    """One workload's model, global parameters and data, ready for either engine."""

    workload: Workload
    model: BatchedModel
    params: list[Tensor]
    x: Tensor
    y: Tensor
    batch_idx: np.ndarray
    steps: np.ndarray


def workload_clients(w: Workload, device: torch.device, clients: int | None = None) -> int:
    """Clients of the workload's round: `clients` if given, else its own count, at least CUDA_CLIENTS on
    CUDA."""
    if clients:
        return clients
    return max(w.clients, CUDA_CLIENTS) if device.type == "cuda" else w.clients


def with_model_params(w: Workload, model_params: dict[str, Any] | None) -> Workload:
    """The workload with model_params on top of its model's own keyword arguments."""
    return dataclasses.replace(w, kwargs={**w.kwargs, **(model_params or {})})


def workload_model(w: Workload) -> BatchedModel:
    """The workload's model with its keyword arguments (an image's shape as it is, a sequence's length)."""
    return make_model(w.model, w.input_shape if len(w.input_shape) > 1 else w.input_shape[0], w.num_classes,
                      **w.kwargs)


def random_inputs(w: Workload, n: int, gen: torch.Generator) -> Tensor:
    """n samples of the workload's shape: token ids below its vocabulary for text, else standard normal."""
    if w.vocab:
        return torch.randint(0, w.vocab, (n, *w.input_shape), generator=gen)
    return torch.randn(n, *w.input_shape, generator=gen)


def workload_problem(w: Workload, steps: int | None, device: torch.device, clients: int | None = None,
                     batch: int | None = None, model_params: dict[str, Any] | None = None) -> Problem:
    """The problem `hetfl bench` times for workload w, with the command's overrides (None: the workload's
    own steps, clients, minibatch and model)."""
    w = dataclasses.replace(with_model_params(w, model_params), batch=batch or w.batch)
    return make_problem(w, steps or w.steps, device, clients)


def batched_plan(prob: Problem, graphs: bool | None = None) -> executor.Plan:
    """The executor the batched engine picks for the problem's round (its blocks, its CPU workers), with
    the graphs option (None: the executor's rule)."""
    return executor.make_plan(prob.model, [p.unsqueeze(0) for p in prob.params],
                              prob.x[:prob.workload.batch].unsqueeze(0), len(prob.steps),
                              batched_graphs(prob, graphs))


def batched_graphs(prob: Problem, graphs: bool | None) -> bool:
    """Whether the batched engine replays the problem's local steps from CUDA graphs, given the option
    (None: the executor's rule): only its fused steps are captured."""
    return hasattr(prob.model, "sgd_step") and executor.graphs_on(prob.model, prob.x.device, graphs)


def make_problem(w: Workload, steps: int, device: torch.device, clients: int | None = None,
                 seed: int = 0) -> Problem:
    """Random data of the workload's shapes (no downloads): each client holds up to 20 minibatches."""
    K = workload_clients(w, device, clients)
    gen = torch.Generator().manual_seed(seed)
    model = workload_model(w)
    params = [p.to(device) for p in model.init_params(gen)]
    n = w.batch * max(1, min(steps, 20))
    x = random_inputs(w, K * n, gen).to(device)
    y = torch.randint(0, w.num_classes, (K * n,), generator=gen).to(device)
    offsets = np.arange(K + 1) * n
    steps_arr = np.full(K, steps, dtype=np.int64)
    idx = minibatch_indices(offsets, np.arange(K), steps_arr, w.batch, seed, 0)
    return Problem(w, model, params, x, y, idx, steps_arr)


class _ModuleOn:
    """The model with make_module() placed on `device`: the reference loop builds its module on the CPU."""

    def __init__(self, model: BatchedModel, device: torch.device) -> None:
        self._model, self._device = model, device

    def make_module(self) -> nn.Module:
        return self._model.make_module().to(self._device)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def engine_fn(engine: str, prob: Problem, clients: int | None = None, graphs: bool | None = None,
              keep_graphs: bool = False) -> Callable[[], list[Tensor]]:
    """A call that runs one round of local training of the first `clients` clients (all: None); graphs:
    the batched engine replays runs of steps from CUDA graphs (engine.graphs) or not; None: its rule.
    keep_graphs: the calls share one GraphCache, so where graphs are on, later rounds replay the graphs
    the first captured, as the rounds of a run with kept graphs do."""
    w, n = prob.workload, clients or len(prob.steps)
    idx, steps = prob.batch_idx[:n], prob.steps[:n]  # absolute indices: a prefix of rows is a subset
    if engine == "batched":
        cache = GraphCache() if keep_graphs else None
        return lambda: local_sgd(prob.model, prob.params, prob.x, prob.y, idx, steps, w.lr, graphs=graphs,
                                 graph_cache=cache)
    if engine == "reference":
        model = prob.model if prob.x.device.type == "cpu" else _ModuleOn(prob.model, prob.x.device)
        return lambda: local_sgd_reference(model, prob.params, prob.x, prob.y, idx, steps, w.lr)  # type: ignore
    raise ValueError(f"engine '{engine}' is unknown; allowed: {', '.join(ENGINES)}")


def _with_threads(fn: Callable[[], list[Tensor]], threads: int) -> Callable[[], list[Tensor]]:
    """fn, called with `threads` torch threads (the caller's count restored after)."""
    if threads == torch.get_num_threads():
        return fn

    def call() -> list[Tensor]:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return fn()
        finally:
            torch.set_num_threads(before)
    return call


def run_workload(w: Workload, steps: int | None, device: torch.device, repeat: int = 3,
                 clients: int | None = None, ref_clients: int | None = None, batch: int | None = None,
                 model_params: dict[str, Any] | None = None, graphs: bool | None = None,
                 ref_threads: int | None = None, keep_graphs: bool = False,
                 engines: Sequence[str] = ENGINES) -> list[dict[str, Any]]:
    """Time both engines on one workload; one record per engine (median rate, CPU time, peak RSS).
    graphs: the batched engine with CUDA graphs (engine.graphs; on the CPU the same steps eagerly) or
    without; None: the executor's rule (executor.graphs_rule). keep_graphs: kept across the timed rounds
    (engine.graphs.GraphCache: the first timed round captures, the median is of rounds that replay, as a
    run's rounds after its first do). engines: the engines timed, e.g. only the batched one where another
    run timed the loop. ref_threads: torch threads of the
    reference loop (None: the same as the engine's), e.g. 1, where the loop runs faster on one thread.

    The engines' runs alternate (batched, reference, batched, …) and each keeps the median of its runs,
    so a burst of other load hits both alike. The reference loop trains clients one after another, so its
    rate does not depend on how many it trains: `ref_clients` times only the first few (None: all).
    """
    if device.type == "cuda":  # the workloads before left their blocks cached: each peak is its own
        torch.cuda.empty_cache()
    prob = workload_problem(w, steps, device, clients, batch, model_params)
    w, steps, K = prob.workload, int(prob.steps[0]), len(prob.steps)
    counts = {"batched": K, "reference": min(K, ref_clients or K)}
    threads = {"batched": torch.get_num_threads(), "reference": ref_threads or torch.get_num_threads()}
    for engine in engines:  # warm-up: thread pools, allocator, oneDNN primitive caches
        _with_threads(engine_fn(engine, make_problem(w, 1, device, clients), min(counts[engine], 4), graphs),
                      threads[engine])()
    fns = {e: _with_threads(engine_fn(e, prob, counts[e], graphs, keep_graphs), threads[e]) for e in engines}
    walls: dict[str, list[float]] = {e: [] for e in engines}
    cpus: dict[str, list[float]] = {e: [] for e in engines}
    peak = dict.fromkeys(engines, 0.0)
    peak_dev = dict.fromkeys(engines, 0.0)
    peak_res = dict.fromkeys(engines, 0.0)  # the caching allocator's, CUDA graphs' private pools included
    for _ in range(repeat):
        for engine in engines:
            _reset_peak_rss()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            wall, cpu = timed(fns[engine], device)
            walls[engine].append(wall)
            cpus[engine].append(cpu)
            peak[engine] = max(peak[engine], peak_rss_mb())
            if device.type == "cuda":
                peak_dev[engine] = max(peak_dev[engine], torch.cuda.max_memory_allocated(device) / 2 ** 20)
                peak_res[engine] = max(peak_res[engine], torch.cuda.max_memory_reserved(device) / 2 ** 20)
    plan = batched_plan(prob, graphs)
    graphed = batched_graphs(prob, graphs)
    records = []
    for engine in engines:
        work = float(prob.steps[:counts[engine]].sum())
        rec: dict[str, Any] = {
            "workload": w.name, "model": w.model, "model_params": dict(model_params or {}), "engine": engine,
            "clients": counts[engine],
            "batch": w.batch, "steps": steps, "repeat": repeat,
            "client_steps_per_s": work / float(np.median(walls[engine])),
            "cpu_s_per_client_step": float(np.median(cpus[engine])) / work,
            "peak_rss_mb": peak[engine], "device": device.type, "threads": threads[engine],
            "executor": (f"block {plan.block}, {plan.workers} worker{'s' if plan.workers > 1 else ''}"
                         + (f", CUDA graphs{' kept across rounds' if keep_graphs else ''}"
                            if graphed and device.type == "cuda" else "")
                         if engine == "batched" else "per-client torch.nn + autograd + SGD"),
            "graphs": graphed and engine == "batched",
            "graphs_kept": graphed and keep_graphs and engine == "batched",
            "flops_per_client_step": train_flops(prob.model, w.batch),
            "bytes_per_client_step": step_bytes(prob.model, prob.params, w.batch),
        }
        if device.type == "cuda":
            rec["peak_device_mb"], rec["peak_device_reserved_mb"] = peak_dev[engine], peak_res[engine]
        records.append(rec)
    return records


def eval_fn(engine: str, model: BatchedModel, params: list[Tensor], x: Tensor) -> Callable[[], Tensor]:
    """A call that evaluates the global model on x: "batched" is the model's `logits` (K = 1, in its
    evaluation chunks), as `hetfl train` evaluates; "reference" the torch.nn twin's forward pass under
    no_grad, in eval mode, as research code evaluates."""
    if engine == "batched":
        return lambda: model.logits(params, x)
    if engine != "reference":
        raise ValueError(f"engine '{engine}' is unknown; allowed: {', '.join(ENGINES)}")
    module = model.make_module().to(x.device)
    model.to_module(params, module)
    module.eval()

    def forward() -> Tensor:
        with torch.no_grad():
            return module(x)
    return forward


def run_eval(w: Workload, samples: int, device: torch.device, repeat: int = 3,
             model_params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Time the evaluation of the global model on `samples` random samples, both ways (eval_fn); one record
    per engine, the median rate of `repeat` alternating runs after a warm-up. Training's records do not
    cover this path: a layer may compute differently when it does not train (`conv: auto`)."""
    w = with_model_params(w, model_params)
    model = workload_model(w)
    gen = torch.Generator().manual_seed(0)
    params = [p.to(device) for p in model.init_params(gen)]
    x = random_inputs(w, samples, gen).to(device)
    fns = {e: eval_fn(e, model, params, x) for e in ENGINES}
    for fn in fns.values():
        fn()
    walls: dict[str, list[float]] = {e: [] for e in ENGINES}
    for _ in range(repeat):
        for engine in ENGINES:
            walls[engine].append(timed(fns[engine], device)[0])
    rates = {e: samples / float(np.median(walls[e])) for e in ENGINES}
    chunk = getattr(model, "eval_chunk", None)
    executors = {"batched": "model.logits" + (f", chunks of {chunk}" if chunk else ""),
                 "reference": "torch.nn module, no_grad"}
    return [{"workload": w.name, "model": w.model, "model_params": dict(model_params or {}),
             "mode": "evaluate", "engine": e, "samples": samples, "repeat": repeat, "samples_per_s": rates[e],
             "speedup": rates[e] / rates["reference"], "device": device.type,
             "executor": executors[e]}
            for e in ENGINES]


def format_eval_table(records: list[dict[str, Any]]) -> str:
    from tabulate import tabulate

    rows = [[r["workload"], r["engine"], r["samples"], _rate(r["samples_per_s"]), f"{r['speedup']:.2f}×"]
            for r in records]
    return tabulate(rows, ["evaluation", "engine", "samples", "samples/s", "vs ref"],
                    colalign=("left", "left", "right", "right", "right"))


def add_bounds(records: list[dict[str, Any]], matmul: float, bandwidth: float) -> None:
    """Attach achieved GFLOP/s, the roofline bound and the fractions, and batched/reference ratios."""
    ref = {r["workload"]: r["client_steps_per_s"] for r in records if r["engine"] == "reference"}
    for r in records:
        rate = r["client_steps_per_s"]
        bound = min(matmul * 1e9 / r["flops_per_client_step"], bandwidth * 1e9 / r["bytes_per_client_step"])
        r["gflops"] = rate * r["flops_per_client_step"] / 1e9
        r["matmul_gflops"], r["copy_gbps"] = matmul, bandwidth
        r["bound_client_steps_per_s"] = bound
        r["fraction_of_bound"] = rate / bound
        r["fraction_of_matmul"] = r["gflops"] / matmul
        r["speedup"] = rate / ref[r["workload"]] if r["workload"] in ref else None


def format_table(records: list[dict[str, Any]]) -> str:
    from tabulate import tabulate

    rows = [[r["workload"], r["engine"], r["clients"], r["batch"], _rate(r["client_steps_per_s"]),
             f"{r['speedup']:.2f}×" if r.get("speedup") else "", f"{r['cpu_s_per_client_step'] * 1e3:,.2f}",
             f"{r['gflops']:.1f}", f"{r['fraction_of_matmul']:.0%}", f"{r['fraction_of_bound']:.1%}",
             f"{r['peak_rss_mb']:,.0f}"]
            for r in records]
    head = ["workload", "engine", "K", "B", "client steps/s", "vs ref", "CPU ms/step", "GFLOP/s", "of matmul",
            "of bound", "peak RSS MB"]
    return tabulate(rows, head, colalign=("left", "left") + ("right",) * 9)


def cudnn_heuristics(value: str | None) -> str:
    """Which heuristics chose the cuDNN convolutions a CUDA bench ran: "mode B" where
    TORCH_CUDNN_USE_HEURISTIC_MODE_B is "1" (engine.reproducible sets it unless told), else "instant",
    torch's default (torch reads only "1" and "0")."""
    return "mode B" if value == "1" else "instant"


def _gemm_summary(machine: dict[str, Any]) -> str:
    """"463 GFLOP/s (oneDNN; torch.mm 218)": the bound's library first, then the others' rates."""
    rest = "".join(f"; {name} {rate:.0f}" for name, rate in machine["gemm_gflops"].items()
                   if name != machine["matmul_library"])
    return f"{machine['matmul_gflops']:.0f} GFLOP/s ({machine['matmul_library']}{rest})"


def _rate(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def check_model_params(workloads: Sequence[str], model_params: dict[str, Any]) -> None:
    """Every workload's model takes every key of model_params with its value (ValueError naming the key,
    the value and the model otherwise): checked by building each model once, before any measurement."""
    for name in workloads:
        w = WORKLOADS[name]
        try:
            workload_model(with_model_params(w, model_params))
        except TypeError as err:
            raise ValueError(f"--model-params {json.dumps(model_params)}: model '{w.model}' (workload "
                             f"{name}) does not take them ({err}); choose --workloads whose models "
                             f"do") from None
        except ValueError as err:  # a key it takes with a value it does not (e.g. the ResNets' norm)
            raise ValueError(f"--model-params {json.dumps(model_params)}: model '{w.model}' (workload "
                             f"{name}) refuses them: {err}") from None


def check_workloads(workloads: Sequence[str], model_params: dict[str, Any] | None) -> None:
    """Known workloads whose models all take model_params (a ValueError saying what is allowed)."""
    unknown = [n for n in workloads if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; allowed: {', '.join(WORKLOADS)}")
    if model_params:
        check_model_params(workloads, model_params)


def run_bench(workloads: Sequence[str], steps: int | None = None, device: str = "auto",
              threads: int | None = None, repeat: int = 3, clients: int | None = None,
              ref_clients: int | None = None, batch: int | None = None,
              model_params: dict[str, Any] | None = None, eval_samples: int | None = None,
              graphs: bool | None = None, ref_threads: int | None = None, keep_graphs: bool = False,
              reference: bool = True, tf32: bool = False, cpu_workers: str = "auto"
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """All measurements: (records, machine facts). model_params: keyword arguments for every workload's
    model on top of its own (e.g. {"channels_last": False} for the convolutional models). eval_samples:
    also time evaluation on that many samples per workload (run_eval; records with mode "evaluate",
    after the training records, whose mode is "train"). graphs: the batched engine with CUDA graphs or
    without (None: the executor's rule). ref_threads: the reference loop's torch threads (None: `threads`;
    each record says its engine's). keep_graphs: see run_workload. reference: also time the per-client
    loop (False: the batched engine only, whose records then carry no speed-up). tf32: on CUDA, both
    engines and the matmul rate with TF32 products (engine.reproducible; `hetfl train --tf32`), each
    record saying so; refused on another device. cpu_workers: which models' blocks train on CPU workers
    while the bench runs (engine.executor.set_cpu_workers; the process's setting is restored after), each
    record saying so."""
    if ref_threads is not None and ref_threads < 1:
        raise ValueError(f"--ref-threads has value {ref_threads}, which is not allowed; allowed: 1 or more "
                         f"torch threads for the reference loop")
    check_workloads(workloads, model_params)
    before = executor.cpu_workers()
    executor.set_cpu_workers(cpu_workers)
    try:
        return _run_bench(workloads, steps, device, threads, repeat, clients, ref_clients, batch,
                          model_params, eval_samples, graphs, ref_threads, keep_graphs, reference, tf32)
    finally:
        executor.set_cpu_workers(before)


def _run_bench(workloads: Sequence[str], steps: int | None, device: str, threads: int | None, repeat: int,
               clients: int | None, ref_clients: int | None, batch: int | None,
               model_params: dict[str, Any] | None, eval_samples: int | None, graphs: bool | None,
               ref_threads: int | None, keep_graphs: bool, reference: bool, tf32: bool
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    dev = resolve_device(device)
    check_tf32(tf32, dev, "the bench runs")
    heuristics = None
    if dev.type == "cuda":
        # as `hetfl train` runs on CUDA: both engines IEEE float32 (TF32 if asked), deterministic
        heuristics = cudnn_heuristics(reproducible_cuda(tf32)[CUDNN_HEURISTIC_MODE_B])
    if threads:
        torch.set_num_threads(threads)
    machine = {"device": dev.type, "device_name": device_name(dev), "tf32": tf32, "cudnn": heuristics,
               "threads": torch.get_num_threads(), "cpu_workers": executor.cpu_workers(),
               "cpus": os.cpu_count(), "torch": torch.__version__}
    records = [r for name in workloads
               for r in run_workload(WORKLOADS[name], steps, dev, repeat, clients, ref_clients, batch,
                                     model_params, graphs, ref_threads, keep_graphs,
                                     ENGINES if reference else ("batched",))]
    # after the workloads: main() keeps freed memory resident (engine.allocator), so the copy's 2 × 256 MiB
    # measured first stayed in every workload's peak RSS (~300 MB of a 930 MB peak)
    machine["gemm_gflops"], machine["copy_gbps"] = gemm_gflops(dev), copy_gbps(dev)
    machine["matmul_library"] = max(machine["gemm_gflops"], key=machine["gemm_gflops"].get)
    machine["matmul_gflops"] = machine["gemm_gflops"][machine["matmul_library"]]
    add_bounds(records, machine["matmul_gflops"], machine["copy_gbps"])
    for r in records:
        r["mode"] = "train"
    if eval_samples:
        records += [r for name in workloads for r in run_eval(WORKLOADS[name], eval_samples, dev, repeat,
                                                               model_params)]
    for r in records:
        r["device_name"], r["tf32"], r["cpu_workers"] = machine["device_name"], tf32, machine["cpu_workers"]
        r["cudnn"] = heuristics
        r["matmul_library"], r["gemm_gflops"] = machine["matmul_library"], machine["gemm_gflops"]
        r.setdefault("threads", machine["threads"])  # evaluation records: the machine's
    return records, machine


#: operators that launch no kernel on a GPU (allocation, aliasing) though ATen does not mark them as views
NO_KERNEL_OPS = frozenset({"aten._unsafe_view", "aten.empty", "aten.empty_like", "aten.empty_strided",
                           "aten.new_empty", "aten.new_empty_strided", "aten.detach", "aten.lift_fresh"})


def count_ops(w: Workload, clients: int | None = None, batch: int | None = None,
              model_params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ATen operators one batched SGD step of K clients calls (K: `clients`, else CUDA_CLIENTS), run on
    the meta device: shapes only, no data and no arithmetic, so any machine can count them.

    Every operator that is not a view is at least one kernel launch on a GPU, where a step of a small
    model is bound by its launches rather than its arithmetic; a library call may launch several (cuDNN's
    grouped convolutions launch per group), so the count is a lower bound of a GPU's launches. The model's
    step only: not the engine's minibatch gather, nor the round's broadcast and reorder of the stacks.
    """
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    K, B = clients or CUDA_CLIENTS, batch or w.batch
    shape = w.input_shape if len(w.input_shape) > 1 else w.input_shape[0]
    model = make_model(w.model, shape, w.num_classes, **{**w.kwargs, **(model_params or {})})
    meta = torch.device("meta")
    params = [torch.empty((K, *p.shape), dtype=p.dtype, device=meta)
              for p in model.init_params(torch.Generator())]
    x = torch.empty((K, B, *w.input_shape), dtype=torch.int64 if w.vocab else torch.float32, device=meta)
    y = torch.empty((K, B), dtype=torch.int64, device=meta)
    if hasattr(model, "client_block"):  # its one-off measuring pass (meta too) is not part of a step
        model.client_block(params, x)
    ops: Counter[str] = Counter()

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket)
            if not func.is_view and name not in NO_KERNEL_OPS:
                ops[name] += 1
            return func(*args, **(kwargs or {}))

    with _Count():
        model.sgd_step(params, x, y, w.lr)  # type: ignore[attr-defined]
    return {"workload": w.name, "model": w.model, "model_params": dict(model_params or {}), "clients": K,
            "batch": B, "aten_ops_per_step": sum(ops.values()), "aten_ops": dict(ops.most_common())}


def format_ops_table(records: list[dict[str, Any]]) -> str:
    from tabulate import tabulate

    rows = [[r["workload"], json.dumps(r["model_params"]) if r["model_params"] else "", r["clients"],
             r["batch"], f"{r['aten_ops_per_step']:,}", ", ".join(f"{k.removeprefix('aten.')} {v}"
                                                      for k, v in list(r["aten_ops"].items())[:4])]
            for r in records]
    return tabulate(rows, ["workload", "model params", "K", "B", "ATen ops per step", "most called"],
                    colalign=("left", "left", "right", "right", "right", "left"))


def parse_model_params(text: str | None) -> dict[str, Any]:
    """--model-params: a JSON object (a ValueError naming the flag, the value and what is allowed)."""
    from hetfl.cli import json_object

    return {} if text is None else json_object("--model-params", text, '{"channels_last": false}')


def main(argv: list[str] | None = None) -> int:
    from hetfl.cli import int_at_least

    positive = int_at_least(1)  # a count of 0 would time nothing, or fall back to a default unsaid
    parser = argparse.ArgumentParser(prog="hetfl bench", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help=f"comma-separated, from: {', '.join(WORKLOADS)} (default: %(default)s)")
    parser.add_argument("--steps", type=positive, default=None,
                        help="local steps per client (default: each workload's own, 2 to 20)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--threads", type=positive, default=None,
                        help="torch intra-op threads (default: torch's)")
    parser.add_argument("--json", metavar="PATH", nargs="?", const="-", default=None,
                        help="write records as JSON to PATH, or to stdout without one (or with '-'); the "
                             "table then goes to stderr")
    parser.add_argument("--repeat", type=positive, default=3,
                        help="timed runs per engine; the median is reported")
    parser.add_argument("--clients", type=positive, default=None,
                        help=f"override the workloads' client counts (default: their own; on CUDA at least "
                             f"{CUDA_CLIENTS})")
    parser.add_argument("--batch", type=positive, default=None,
                        help="override the workloads' minibatch sizes")
    parser.add_argument("--ref-clients", type=int_at_least(0), default=0,
                        help="time the reference on only the first N clients, a quick look (default 0: all)")
    parser.add_argument("--ref-threads", type=positive, default=None,
                        help="torch threads of the reference loop (default: --threads), e.g. 1: on 2 cores "
                             "the loop of small models runs faster on one thread than on two")
    parser.add_argument("--model-params", metavar="JSON", default=None,
                        help='keyword arguments for every workload\'s model, a JSON object, e.g. '
                             '\'{"channels_last": false}\' (the convolutional models\' NCHW layout)')
    parser.add_argument("--eval", metavar="SAMPLES", type=int, default=None,
                        help="also time evaluating the global model on SAMPLES samples per workload: the "
                             "model's logits against the torch.nn module's forward pass under no_grad")
    parser.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=None,
                        help=f"the engine replays each run of steps with the same working clients from a "
                             f"CUDA graph (engine.graphs; a run of fewer than {GRAPH_MIN_STEPS} steps trains "
                             f"eagerly: give --steps {GRAPH_MIN_STEPS} or more), or not (--no-graphs); "
                             f"default: the engine's rule per model (logreg, the MLP, the two LSTMs)")
    parser.add_argument("--keep-graphs", action="store_true",
                        help="where graphs are on (--graphs, or the rule), keep them across the timed "
                             "rounds (engine.graphs.GraphCache): the first round captures, later rounds "
                             "replay every step, as a run's rounds with kept graphs")
    parser.add_argument("--tf32", action="store_true",
                        help="on CUDA, both engines (and the matmul rate) with TF32 products, as `hetfl "
                             "train --tf32` (default: IEEE float32); every record says tf32")
    parser.add_argument("--cpu-workers", default="auto", choices=["auto", "on", "off"],
                        help="the batched engine's blocks on separate CPU workers (on) or not (off), "
                             "whatever the model's rule (default auto: the rule, measured on a 2-core Zen 3; "
                             "engine.executor): time both on a new CPU")
    parser.add_argument("--no-reference", action="store_true",
                        help="time the batched engine only, where another run timed the loop on the same "
                             "workload (its records then carry no speed-up)")
    parser.add_argument("--count-ops", action="store_true",
                        help=f"instead of timing, count the ATen operators of one batched step of K clients "
                             f"(--clients, default {CUDA_CLIENTS}) on the meta device: a lower bound of its "
                             f"kernel launches on a GPU")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing, profile the batched engine's round (torch.profiler, "
                             "--repeat rounds after one untimed): the operators with the most self time and, "
                             "on CUDA, the kernels a round launches (hetfl.stepprofile)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    retain_freed_memory()  # as `hetfl train` runs (engine.allocator); both engines allocate through it
    try:
        model_params = parse_model_params(args.model_params)
        if args.eval is not None and (args.eval < 1 or args.count_ops or args.profile):
            raise ValueError(f"--eval has value {args.eval}; allowed: a positive number of samples, and not "
                             f"with --count-ops or --profile (which time no evaluation)")
        if args.no_reference and args.eval is not None:
            raise ValueError("--no-reference and --eval are both given; allowed: one of them (--eval times "
                             "the engine's evaluation against the torch.nn module's)")
        if args.tf32 and (args.count_ops or args.profile):
            raise ValueError("--tf32 is given with --count-ops or --profile; allowed: --tf32 with the timed "
                             "bench only")
        if args.cpu_workers != "auto" and (args.count_ops or args.profile):
            raise ValueError("--cpu-workers is given with --count-ops or --profile; allowed: --cpu-workers "
                             "with the timed bench only")
        if args.count_ops and args.profile:
            raise ValueError("--count-ops and --profile are both given; allowed: one of them (--count-ops "
                             "counts on the meta device, --profile runs on --device)")
        check_json_path(args.json)
        if args.count_ops:
            return _print_op_counts(names, args, model_params)
        if args.profile:
            return _print_profile(names, args, model_params)
        records, m = run_bench(names, args.steps, args.device, args.threads, args.repeat, args.clients,
                               args.ref_clients or None, args.batch, model_params, args.eval, args.graphs,
                               args.ref_threads, args.keep_graphs, not args.no_reference, args.tf32,
                               args.cpu_workers)
    except ValueError as err:  # bad arguments (unknown workload, no CUDA): said before any work
        print(f"hetfl bench: error: {err}", file=sys.stderr)
        return 2
    workers = "" if m["cpu_workers"] == "auto" else f", CPU workers {m['cpu_workers']}"
    cudnn = f", cuDNN {m['cudnn']} heuristics" if m["cudnn"] else ""
    print(f"{m['device_name']} ({m['device']}{', TF32' if m['tf32'] else ''}{cudnn}, {m['threads']} threads"
          f"{workers}, torch {m['torch']}): "
          f"matmul {_gemm_summary(m)}, copy {m['copy_gbps']:.1f} GB/s; "
          f"median of {args.repeat} runs per engine"
          + (f"; the reference loop on {args.ref_threads} thread(s)" if args.ref_threads else ""),
          file=sys.stderr if args.json == "-" else sys.stdout)
    out = sys.stderr if args.json == "-" else sys.stdout
    print(format_table([r for r in records if r["mode"] == "train"]), file=out)
    if args.eval:
        print("\n" + format_eval_table([r for r in records if r["mode"] == "evaluate"]), file=out)
    write_json(records, args.json)
    return 0


def _print_op_counts(names: list[str], args: argparse.Namespace, model_params: dict[str, Any]) -> int:
    check_workloads(names, model_params)
    records = [count_ops(WORKLOADS[n], args.clients, args.batch, model_params) for n in names]
    print(format_ops_table(records), file=sys.stderr if args.json == "-" else sys.stdout)
    write_json(records, args.json)
    return 0


def _print_profile(names: list[str], args: argparse.Namespace, model_params: dict[str, Any]) -> int:
    from hetfl.stepprofile import format_profile, run_profile

    records = run_profile(names, args.device, args.threads, args.steps, args.clients, args.batch,
                          model_params, args.graphs, args.repeat, args.keep_graphs)
    print(format_profile(records), file=sys.stderr if args.json == "-" else sys.stdout)
    write_json(records, args.json)
    return 0


def check_json_path(path: str | None) -> None:
    """--json PATH must be writable before the bench runs: a GPU session once lost a whole bench's records
    to a PATH whose directory did not exist, found only when they were written."""
    if path and path != "-":
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK) or os.path.isdir(path):
            raise ValueError(f"--json has value {path!r}; allowed: '-' (stdout), or a file path in an "
                             f"existing, writable directory")


def write_json(records: list[dict[str, Any]], path: str | None) -> None:
    """--json: the records to PATH, or to stdout for '-'; nothing without the flag."""
    if path == "-":
        json.dump(records, sys.stdout, indent=1)
        print()
    elif path:
        with open(path, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())
