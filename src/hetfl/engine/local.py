"""Batched local SGD: all clients of a round train as one computation on parameters stacked on axis 0.

Clients are sorted by their number of local steps (descending), so at step j the clients still working
are a contiguous prefix of the stack: the step runs on that prefix only, no masked-out work is done.
A block's steps go in runs with the same prefix, each step reading its minibatch indices from one buffer
per run, which is what lets engine.graphs replay a run from one CUDA graph. See docs/engine.md.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from hetfl.engine import executor
from hetfl.engine.graphs import KEPT_MIN_STEPS, GraphCache, Kept, keeps, run_kept, run_steps
from hetfl.models.base import BatchedModel

# correction(params, grads, ctx) -> grads: an algorithm's change to the local gradient (prox, control
# variates, ...), on the working prefix; ctx holds per-client tensors, sliced to the same prefix.
Correction = Callable[[list[Tensor], list[Tensor], dict[str, list[Tensor]]], list[Tensor]]

#: below this many bytes of stacks, _permute_rows copies rather than walks cycles (a transient stack this
#: small costs no measurable page faults)
PERMUTE_COPY_BYTES = 8 << 20


def local_sgd(model: BatchedModel, global_params: list[Tensor], x_train: Tensor, y_train: Tensor,
              batch_idx: np.ndarray, steps: np.ndarray, lr: float, correction: Correction | None = None,
              ctx: dict[str, list[Tensor]] | None = None, start: list[Tensor] | None = None,
              graphs: bool | None = None, graph_cache: GraphCache | None = None) -> list[Tensor]:
    """Ruan et al. Eq. (1): w_{i+1}^k = w_i^k − η_τ g_i^k for i < s_τ^k, for every client at once.

    batch_idx: [K, S, B] absolute indices (see minibatch.minibatch_indices); steps: [K];
    ctx: per-client tensors stacked [K, ...] in the input order, handed to `correction` as views (an
    algorithm may update them in place, e.g. FedNova's momentum buffers).
    start: per-client starting parameters [K, ...] (FedBN's local batch norm); None = the broadcast.
    graphs: on CUDA, replay each run of steps with the same working prefix from a CUDA graph
    (engine.graphs; the fused path only); elsewhere the same steps eagerly. None: the executor's rule
    (executor.graphs_rule: the model's `cuda_graphs`).
    graph_cache: where graphs are on, keep them across calls (the rounds of a run) in this cache instead
    of capturing every run anew (engine.graphs.GraphCache); None: a run's graph is freed when it ends.
    Returns the clients' final parameters, stacked [K, ...] in the input order.
    """
    K = len(steps)
    steps = np.asarray(steps)
    order = np.argsort(-steps, kind="stable")
    steps_sorted = steps[order]
    device = x_train.device
    order_t = torch.from_numpy(order).to(device)
    idx = torch.from_numpy(batch_idx[order]).to(device)
    if start is None:
        # each block copies the broadcast into its own rows when it starts (train_block), on its worker,
        # and its first step finds them in cache; one copy of all K rows up front ran on one thread and
        # streamed them to DRAM and back (the 2NN's 100 clients: 63 MB, 11 ms; its round is 1-4 % faster)
        params = [torch.empty((K, *p.shape), dtype=p.dtype, device=p.device) for p in global_params]
    else:
        params = [s.index_select(0, order_t) for s in start]  # index_select copies: start is not touched
    ctx_sorted = {k: [t.index_select(0, order_t) for t in v] for k, v in (ctx or {}).items()}
    fused = correction is None and hasattr(model, "sgd_step")
    active = working_prefix(steps_sorted)
    batch = idx.shape[2] if idx.dim() == 3 else 0
    graphed = fused and executor.graphs_on(model, device, graphs)
    kept = graph_cache if graphed else None
    shapes = tuple((tuple(p.shape[1:]), p.dtype) for p in params)

    def make_plan() -> executor.Plan:
        return executor.make_plan(model, params, x_train[:batch].unsqueeze(0), K, graphed)

    # Blocks of clients (engine.executor: how many per block, and CPU workers): each block runs all its
    # steps before the next, so its weights stay in cache between steps. Clients are independent, so the
    # result does not depend on the blocks.
    plan = make_plan() if kept is None else kept.plan((id(model), K, batch, shapes, device), make_plan)
    blocks = executor.blocks(K, plan)
    if kept is not None and not keeps(device, len(blocks)):
        kept = None  # memory-bound blocks on CUDA: graphs per run (engine.graphs.keeps)

    def step_on(rows: list[Tensor], static: Tensor, rows_ctx: dict[str, list[Tensor]]) -> Callable[[], None]:
        """One SGD step of the clients whose working rows are `rows`, on the minibatch indices in
        `static` [m, B] (which a run's feed fills before each step)."""
        m = len(static)

        def step() -> None:
            flat = static.view(-1)
            xb = x_train.index_select(0, flat).view(m, batch, *x_train.shape[1:])
            yb = y_train.index_select(0, flat).view(m, batch)
            if fused:
                model.sgd_step(rows, xb, yb, lr)  # type: ignore[attr-defined]
                return
            grads = model.grads(rows, xb, yb)
            if correction is not None:
                grads = correction(rows, grads, rows_ctx)
            for p, g in zip(rows, grads, strict=True):
                p.sub_(g, alpha=lr)

        return step

    def train_run(lo: int, m: int, j0: int, j1: int) -> None:
        """Steps j0 <= j < j1 of the block's first m clients from row lo."""
        if kept is not None and train_kept(lo, m, j0, j1):
            return
        static = torch.empty((m, batch), dtype=idx.dtype, device=device)  # the indices a step reads
        rows_ctx = {k: [t[lo:lo + m] for t in v] for k, v in ctx_sorted.items()}

        def feed(i: int) -> None:
            static.copy_(idx[lo:lo + m, j0 + i])

        run_steps(step_on([p[lo:lo + m] for p in params], static, rows_ctx), feed, j1 - j0, device, graphed)

    def train_kept(lo: int, m: int, j0: int, j1: int) -> bool:
        """train_run on a kept graph's rows (engine.graphs.GraphCache): copied in, trained, copied out.
        False, having trained nothing, where no graph of the run's key is kept and the run is too short to
        capture one (it then trains eagerly, on no rows of its own)."""
        def make() -> Kept:
            rows = [torch.empty_like(p[lo:lo + m]) for p in params]
            static = torch.empty((m, batch), dtype=idx.dtype, device=device)
            return Kept(rows, static, step_on(rows, static, {}))

        # blocks in turn share a kept graph of their size (one stream); CPU workers' blocks run at once
        slot = lo if plan.workers > 1 else 0
        key = (id(model), slot, m, batch, lr, shapes, device, x_train.data_ptr(), y_train.data_ptr())
        entry = kept.kept(key, make if j1 - j0 >= KEPT_MIN_STEPS else None)  # type: ignore[union-attr]
        if entry is None:
            return False
        for r, p in zip(entry.rows, params, strict=True):
            r.copy_(p[lo:lo + m])

        def feed(i: int) -> None:
            entry.static.copy_(idx[lo:lo + m, j0 + i])

        run_kept(entry, feed, j1 - j0, device)
        for r, p in zip(entry.rows, params, strict=True):
            p[lo:lo + m].copy_(r)
        return True

    def train_block(lo: int, hi: int) -> None:
        if start is None:
            for p, g in zip(params, global_params, strict=True):
                p[lo:hi].copy_(g)
        # runs of steps with the same working prefix: the same clients and shapes, only the minibatches
        # change (engine.graphs replays such a run from one CUDA graph)
        for m, j0, j1 in prefix_runs(active, lo, hi):
            train_run(lo, m, j0, j1)

    executor.run(plan, blocks, [float(steps_sorted[lo:hi].sum()) for lo, hi in blocks], train_block)
    _permute_rows(params, np.argsort(order))
    return params


def working_prefix(steps_sorted: np.ndarray) -> np.ndarray:
    """active[j] = the number of clients with more than j steps (steps sorted descending): the working
    prefix of the stack at step j."""
    n = int(steps_sorted[0]) if len(steps_sorted) else 0
    return np.searchsorted(-steps_sorted, -np.arange(n), side="left")


def prefix_runs(active: np.ndarray, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(m, j0, j1): block [lo, hi)'s steps j0 <= j < j1 all train its first m clients (active[j]: the
    round's working prefix at step j, non-increasing), in order, m > 0."""
    m = np.minimum(active, hi) - lo
    m = m[m > 0]
    ends = np.flatnonzero(np.diff(m)) + 1
    starts = np.concatenate([[0], ends]).astype(int)
    stops = np.concatenate([ends, [len(m)]]).astype(int)
    return [(int(m[a]), int(a), int(b)) for a, b in zip(starts, stops, strict=True)] if len(m) else []


def _permute_rows(stacks: list[Tensor], source: np.ndarray) -> None:
    """In place: row i of every stack becomes its row source[i]. Walks the permutation's cycles with one
    row as scratch, instead of writing a permuted copy of the stacks: a second stack of K models would be
    memory, and fresh pages each round (their page faults cost a 2NN round ≈ 15%). Stacks of at most
    PERMUTE_COPY_BYTES in all are copied instead: there the row-by-row walk is the cost (a Table 3 cell's
    1,500 logreg rows: 22 ms walked, 1 ms copied, measured on 1 thread)."""
    if sum(t.numel() * t.element_size() for t in stacks) <= PERMUTE_COPY_BYTES:
        index = torch.from_numpy(np.ascontiguousarray(source)).to(stacks[0].device)
        for t in stacks:
            t.copy_(t.index_select(0, index))
        return
    done = source == np.arange(len(source))
    for start in np.flatnonzero(~done).tolist():
        if done[start]:
            continue
        scratch = [t[start].clone() for t in stacks]
        i = start
        while True:
            done[i] = True
            j = int(source[i])
            if j == start:
                for t, row in zip(stacks, scratch, strict=True):
                    t[i].copy_(row)
                break
            for t in stacks:
                t[i].copy_(t[j])
            i = j
