"""How the clients of a round are laid onto the hardware: blocks of clients, and CPU workers.

Local SGD (engine.local) trains clients that are independent of each other, so how they are grouped
changes nothing but speed (and float rounding: tests/test_models.py checks every executor against the
per-client oracle). Two knobs, both chosen by a fixed rule from the model and the device (never by a
timing taken during a run, so a run is reproduced by the same executor), docs/engine.md:

* `block`: clients trained together as one batched computation (parameters stacked, one kernel per layer
  for the block); each block runs all its local steps before the next. 1 is per-client training through
  the same hand-written layers (no autograd). The model decides (`client_block`): on the CPU the small
  fused models take as many clients as fit in cache, the zoo's convolutional and recurrent models one
  (their per-client oneDNN kernels beat a grouped convolution or a batched recurrence); on CUDA every
  client fits in one block, or as many as half the free device memory holds (a quarter for a block
  replayed from CUDA graphs: CUDA_GRAPH_MEMORY_SHARE), except that a round of
  fewer than `cuda_batched_from` clients (the LSTMs: 3) trains client by client on the model's fused
  per-client kernels (cuDNN's LSTM), which a small batched recurrence does not beat.
* `workers`: on the CPU, models whose per-client kernels scale poorly over cores (`client_parallel`)
  train different blocks on different cores at once, each worker with one intra-op thread, instead of
  splitting every small kernel over the cores: the zoo's models and the CNNs of models.cnn (their
  convolutions at FL minibatch sizes), not the MLP or the logistic regression (their small GEMMs gain
  from intra-op threads). Blocks go to workers longest first, to the least loaded worker (a fixed order:
  the assignment depends only on the step counts); a last wave of fewer blocks than workers trains
  after the rest, on the threads spread over its blocks (`split_tail`). That choice was measured on one
  2-core Zen 3 only:
  `set_cpu_workers` (`hetfl train` and `hetfl bench --cpu-workers`) overrides it for the process, "on"
  putting every model's blocks on workers, "off" none, "auto" the rule.

Beside the plan, on CUDA only: whether a block's runs of local steps are replayed from CUDA graphs
(engine.graphs; `graphs_rule`), for the models whose `cuda_graphs` says so: those an H100 measured gaining
from them (the logistic regression, the MLP and the two LSTMs; docs/engine.md, "On a GPU"); local_sgd's
and the CLI's `graphs` option overrides it either way (`graphs_on`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
from torch import Tensor

# Share of the free device memory one block of clients may take on CUDA (the rest: the stacked parameters
# of the round, the data, evaluation).
CUDA_MEMORY_SHARE = 0.5
# The same where the block's steps are replayed from a CUDA graph: a captured step keeps its activations in
# the graph's own memory pool beside what its eager warm-up steps left in the allocator's cache, so a block
# reserves more than eagerly (an H100, 20 steps at 64-100 clients: 1.6x VGG-11 to 2.8x the sent-LSTM;
# docs/engine.md, "On a GPU: one H100, the fourth lease"). At half the eager share the block stays within
# the free memory.
CUDA_GRAPH_MEMORY_SHARE = CUDA_MEMORY_SHARE / 2

_threads_lock = threading.Lock()

#: whether blocks train on CPU workers: "auto" the models that set `client_parallel`, "on" every model,
#: "off" none (blocks in turn, every kernel over the intra-op threads)
CPU_WORKER_MODES = ("auto", "on", "off")
_cpu_workers = "auto"


def set_cpu_workers(mode: str) -> None:
    """For this process, as torch.set_num_threads is (`hetfl train --cpu-workers`, `hetfl bench
    --cpu-workers`): which models' blocks train on CPU workers (CPU_WORKER_MODES)."""
    global _cpu_workers
    if mode not in CPU_WORKER_MODES:
        raise ValueError(f"--cpu-workers has value {mode!r}, which is not allowed; allowed: "
                         f"{', '.join(CPU_WORKER_MODES)}")
    _cpu_workers = mode


def cpu_workers() -> str:
    """This process's setting (set_cpu_workers; "auto" unless told)."""
    return _cpu_workers


@dataclass(frozen=True)
class Plan:
    block: int  # clients per batched computation
    workers: int  # CPU threads training blocks concurrently (1: blocks in turn, intra-op parallel kernels)


def graphs_rule(model, device: torch.device) -> bool:
    """Whether the engine replays `model`'s local steps from CUDA graphs on `device` when not told: on
    CUDA, for a model whose class sets `cuda_graphs = True`."""
    return device.type == "cuda" and bool(getattr(model, "cuda_graphs", False))


def graphs_on(model, device: torch.device, option: bool | None) -> bool:
    """CUDA graphs for `model`'s local steps on `device`: `option` where given (local_sgd's `graphs`, the
    CLI's --graphs / --no-graphs), else graphs_rule."""
    return graphs_rule(model, device) if option is None else option


def make_plan(model, params: list[Tensor], x: Tensor, clients: int, graphs: bool = False) -> Plan:
    """The executor for `clients` clients of `model` on x's device; params: the stacked parameters, x a
    minibatch [m, B, ...] (shapes past the client axis, dtype and device matter). graphs: the block's steps
    are replayed from CUDA graphs (graphs_on), whose blocks on CUDA are sized by CUDA_GRAPH_MEMORY_SHARE."""
    if clients == 0 or (x.device.type == "cuda" and clients < getattr(model, "cuda_batched_from", 0)):
        return Plan(1, 1)
    block = clients
    if hasattr(model, "client_block"):
        fits = int(model.client_block(params, x))
        if graphs and x.device.type == "cuda":
            fits = int(fits * CUDA_GRAPH_MEMORY_SHARE / CUDA_MEMORY_SHARE)
        block = max(1, min(clients, fits))
    workers = 1
    parallel = {"auto": getattr(model, "client_parallel", False), "on": True, "off": False}[_cpu_workers]
    if x.device.type == "cpu" and parallel:
        workers = max(1, min(torch.get_num_threads(), -(-clients // block)))
    return Plan(block, workers)


def blocks(clients: int, plan: Plan) -> list[tuple[int, int]]:
    """Client ranges [lo, hi) of at most plan.block clients each, in order: full blocks and the rest.
    With several workers the number of blocks is rounded up to a multiple of plan.workers and the sizes
    made as even as possible (larger first), so that equal clients leave no worker idle: 10 clients in
    blocks of 2 on 2 workers are 2, 2, 2, 2, 1, 1 (5 clients a worker), not 2, 2, 2, 2, 2 (6 and 4).
    Measured on 2 cores, McMahan CNN rounds of 6 and 10 clients: 1.13x and 1.10x (docs/engine.md)."""
    if plan.workers <= 1:
        return [(lo, min(clients, lo + plan.block)) for lo in range(0, clients, plan.block)]
    if clients == 0:
        return []
    n = -(-clients // plan.block)  # blocks of at most plan.block
    n = min(clients, -(-n // plan.workers) * plan.workers)
    size, extra = divmod(clients, n)
    out, lo = [], 0
    for i in range(n):
        hi = lo + size + (i < extra)
        out.append((lo, hi))
        lo = hi
    return out


def cuda_block(per_client_bytes: int, device: torch.device) -> int:
    """Clients per block on a CUDA device: as many as CUDA_MEMORY_SHARE of its free memory holds."""
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, int(free * CUDA_MEMORY_SHARE) // max(per_client_bytes, 1))


def assign(work: Sequence[float], workers: int) -> list[list[int]]:
    """Blocks (by index) per worker: longest first, each to the least loaded worker (ties: lowest id)."""
    load = [0.0] * workers
    out: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(len(work)), key=lambda i: (-work[i], i)):
        w = min(range(workers), key=lambda j: (load[j], j))
        out[w].append(i)
        load[w] += work[i]
    return [sorted(blocks) for blocks in out]


def makespan(work: Sequence[float], workers: int) -> float:
    """The most work any worker gets under `assign`."""
    return max((sum(work[i] for i in g) for g in assign(work, workers)), default=0.0)


def split_tail(work: Sequence[float], workers: int) -> tuple[list[int], list[int]]:
    """(rest, tail): blocks (by index) trained one per worker on one thread each, then the tail's, each on
    workers // len(tail) threads. A last wave of fewer blocks than workers leaves cores idle: 3 equal
    blocks on 2 workers took two blocks' time on one thread, where the loop's two threads take 3 / 1.4
    (VGG-11, ResNet-20 and the char-LSTM ran 0.98-0.99x the per-client loop at 3 clients; docs/engine.md).
    The tail is the len(work) % workers blocks of least work (ties: the last), taken only where it finishes
    no later even at one thread: makespan(rest) + the tail's longest block <= makespan(all), so a long
    block never waits behind it. No tail where the blocks fill every wave."""
    r = len(work) % workers
    order = sorted(range(len(work)), key=lambda i: (work[i], -i))
    tail = sorted(order[:r])
    rest = [i for i in range(len(work)) if i not in tail]
    if not tail or makespan([work[i] for i in rest], workers) + max(work[i] for i in tail) > makespan(
            work, workers):
        return list(range(len(work))), []
    return rest, tail


def run(plan: Plan, blocks: Sequence[tuple[int, int]], work: Sequence[float],
        train_block: Callable[[int, int], None]) -> None:
    """train_block(lo, hi) for every block, in turn or on plan.workers CPU threads (one intra-op thread
    each), a last wave of fewer blocks than workers on the threads spread over them (`split_tail`)."""
    if plan.workers <= 1 or len(blocks) <= 1:
        for lo, hi in blocks:
            train_block(lo, hi)
        return
    rest, tail = split_tail(work, plan.workers)
    with _threads_lock:  # torch's thread count is process-wide: one parallel section at a time
        threads = torch.get_num_threads()
        try:
            _on_workers([blocks[i] for i in rest], [work[i] for i in rest], plan.workers, 1, train_block)
            _on_workers([blocks[i] for i in tail], [work[i] for i in tail], len(tail),
                        max(1, threads // max(len(tail), 1)), train_block)
        finally:
            torch.set_num_threads(threads)


def _on_workers(blocks: Sequence[tuple[int, int]], work: Sequence[float], workers: int, threads: int,
                train_block: Callable[[int, int], None]) -> None:
    """The blocks on `workers` threads (`assign`), each with `threads` intra-op threads; one worker is the
    calling thread itself."""
    groups = [g for g in assign(work, workers) if g]

    def worker(group: list[int]) -> None:
        torch.set_num_threads(threads)  # this thread's kernels run on its own cores only
        for i in group:
            train_block(*blocks[i])

    if len(groups) <= 1:
        for group in groups:
            worker(group)
        return
    with ThreadPoolExecutor(len(groups)) as pool:
        for f in [pool.submit(worker, g) for g in groups]:
            f.result()  # re-raises a worker's exception here
