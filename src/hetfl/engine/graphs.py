"""CUDA graphs for a block's local steps: the steps of one working prefix replayed from one captured graph.

On CUDA, ResNet-20's and the LSTMs' batched steps are bound by kernel launches, not arithmetic
(docs/engine.md, "On a GPU"): thousands of small kernels per step. A CUDA graph replays a captured step's
kernels with one launch, the same kernels on the same addresses, so the arithmetic does not change. A
block of engine.local trains its clients in runs of steps with the same working prefix (the same clients,
the same shapes); within a run only the minibatch indices change, and `feed(i)` writes step i's into the
buffer the captured step reads. The first GRAPH_WARMUP steps of a run train eagerly on the side stream the
capture then uses (cuDNN's and cuBLAS's handles and workspaces for that stream, the allocator's blocks),
the next is captured and every later one replayed. A run shorter than GRAPH_MIN_STEPS trains eagerly: a
capture costs about an eager step plus the graph's instantiation.

Used where the executor's rule says (engine.executor.graphs_rule: a model whose class sets `cuda_graphs`:
the logistic regression, the MLP and the two LSTMs, which an H100 measured gaining from them) or where
asked (`local_sgd(..., graphs=True)`, `hetfl train` and `hetfl bench --graphs`; `--no-graphs` turns them
off either way). On any other device
"capture" returns the step itself, so the same sequence of feeds and steps runs eagerly there: that is how
the orchestration is tested without a GPU (tests/test_graphs.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
from torch import Tensor

#: eager steps of a run before its capture (on the capture's stream)
GRAPH_WARMUP = 2
#: a run of fewer steps trains eagerly: the largest `graph_min_steps` (the shortest run that gains) the
#: graph probe measured for the models that set `cuda_graphs` (H100: logreg 7, MLP 7, char-LSTM 8,
#: sent-LSTM 5)
GRAPH_MIN_STEPS = 8
#: a kept graph (GraphCache) is captured in the first run of at least this many steps (its warm-up; the
#: capture runs nothing): the capture is paid once for every later round, so the capturing run need not
#: replay any step itself
KEPT_MIN_STEPS = GRAPH_WARMUP

Step = Callable[[], None]
Feed = Callable[[int], None]


def capture(step: Step, device: torch.device, warmup: int = 0, feed: Feed | None = None) -> Step:
    """`step` replayed from a CUDA graph. Its first `warmup` calls (after `feed(i)`, i = 0 ..
    warmup - 1, when given) run eagerly on a side stream, then one call is captured on the same stream (a
    library handle first used on another stream would be created inside the capture); the capture does
    not run the step. On any other device: the warm-up calls, then `step` itself.

    Capture is in relaxed mode: a zoo model's step asks CUDA for its free memory to size its own blocks
    (models.net.LayerNet.client_block), a call the default mode may refuse during a capture; what it
    returns is fixed into the graph like every other host-side decision of the step."""
    def warm_up() -> None:
        for i in range(warmup):
            if feed is not None:
                feed(i)
            step()

    if device.type != "cuda":
        warm_up()
        return step
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        warm_up()
    # torch.cuda.graph synchronizes and empties the cache on entry: the warm-up's cached blocks go back to
    # the device, so the graph's private pool can take them (the block was sized for one step's
    # activations, not two)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side, capture_error_mode="relaxed"):
        step()
    current.wait_stream(side)
    return graph.replay


@dataclass
class Kept:
    """One kept graph's fixed addresses: the block's working rows (copied in before a run, out after), the
    minibatch indices a step reads, the step over them, and its replay once captured."""

    rows: list[Tensor]
    static: Tensor
    step: Step
    replay: Step | None = None


class GraphCache:
    """CUDA graphs kept across the rounds of a run (`local_sgd(..., graph_cache=...)`), instead of captured
    anew in every run of steps (`run_steps`).

    A graph replays its kernels on the addresses it was captured with. A round's parameter stacks are new
    tensors, so a kept graph trains copies of a block's working rows at fixed addresses (`Kept.rows`):
    the rows are copied in before a run and out after it, two copies of the block's parameters a run
    against a capture and GRAPH_WARMUP eager steps. The key says what the captured step fixed: the model,
    the block's first row and clients, the minibatch size, the learning rate (a Python float, fixed into
    the kernels' arguments), the parameters' shapes, dtypes and device, and the data tensors' addresses. A
    run whose key is new captures (from KEPT_MIN_STEPS steps); a run whose key is kept replays every step.
    So kept graphs pay where rounds repeat their blocks: every round's clients work the same number of
    steps at a constant learning rate (FedFOR), not under Ruan et al.'s η0/τ, where every round has a new
    key. At most `limit` graphs are kept, the least recently used dropped first (with its memory pool).

    The executor's plan is kept too (`plan`): on CUDA a block's size is set by the device's free memory,
    which the kept graphs' pools lower, and a smaller block would be a new key every round.
    """

    def __init__(self, limit: int = 8) -> None:
        if limit < 1:
            raise ValueError(f"GraphCache limit {limit} is not allowed; allowed: 1 or more graphs")
        self.limit = limit
        self._kept: OrderedDict[Hashable, Kept] = OrderedDict()
        self._plans: dict[Hashable, object] = {}
        self._lock = threading.Lock()  # CPU workers train blocks on threads (tests run them)

    def __len__(self) -> int:
        return len(self._kept)

    def kept(self, key: Hashable, make: Callable[[], Kept] | None = None) -> Kept | None:
        """The kept graph of `key`; when there is none, `make()`'s (uncaptured), or None without `make`."""
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
            if make is None:
                return None
            entry = self._kept[key] = make()
            while len(self._kept) > self.limit:
                self._kept.popitem(last=False)
            return entry

    def plan(self, key: Hashable, make: Callable[[], object]) -> object:
        """The executor's plan for `key`, made once."""
        with self._lock:
            if key not in self._plans:
                self._plans[key] = make()
            return self._plans[key]


def keeps(device: torch.device, blocks: int) -> bool:
    """Whether a round of `blocks` client blocks keeps its graphs (where a GraphCache is given): not on
    CUDA when the round needs more than one block. There the blocks were sized by the free memory (a
    quarter of it, engine.executor.CUDA_GRAPH_MEMORY_SHARE), and each kept graph holds its own memory
    pool, one block step's activations: the blocks' graphs (the full blocks' and the last, smaller
    one's) could not all be kept. Such rounds capture per run, as without a cache. On the CPU nothing is
    captured and the rule does not apply (the tests run kept graphs through every executor there)."""
    return device.type != "cuda" or blocks <= 1


def run_kept(kept: Kept, feed: Feed, n: int, device: torch.device) -> None:
    """Steps i = 0 .. n - 1 of a run on a kept graph's rows: `feed(i)`, then the step. Replayed from the
    kept graph; where it has none yet, captured after GRAPH_WARMUP eager steps if n >= KEPT_MIN_STEPS,
    else every step eagerly."""
    start = 0
    if kept.replay is None:
        if n < KEPT_MIN_STEPS:
            for i in range(n):
                feed(i)
                kept.step()
            return
        kept.replay = _capture_run(kept.step, feed, n, device)
        start = GRAPH_WARMUP
    for i in range(start, n):
        feed(i)
        kept.replay()


def _capture_run(step: Step, feed: Feed, n: int, device: torch.device) -> Step:
    try:
        return capture(step, device, GRAPH_WARMUP, feed)
    except Exception as err:  # a step that cannot be captured: say which option asked for it
        raise RuntimeError(f"a CUDA graph of a run of {n} local steps failed to capture "
                           f"({type(err).__name__}: {err}); run without CUDA graphs: hetfl train or hetfl "
                           f"bench --no-graphs (local_sgd graphs=False)") from err


def replayed_steps(runs: list[int]) -> int:
    """How many of a block's steps `run_steps` replays from graphs, given its runs' lengths (engine.local's
    runs of one working prefix): n - GRAPH_WARMUP of every run of n >= GRAPH_MIN_STEPS steps; the rest
    train eagerly. scripts/graph-share counts them over a paper grid's rounds."""
    return sum(n - GRAPH_WARMUP for n in runs if n >= GRAPH_MIN_STEPS)


def run_steps(step: Step, feed: Feed, n: int, device: torch.device, graphed: bool) -> None:
    """Steps i = 0 .. n - 1 of one run: `feed(i)`, then `step()`, which reads what feed wrote. Eagerly;
    or, when `graphed` and n >= GRAPH_MIN_STEPS, the first GRAPH_WARMUP eagerly, the rest replayed from
    one graph captured after them (`capture`)."""
    if not graphed or n < GRAPH_MIN_STEPS:
        for i in range(n):
            feed(i)
            step()
        return
    replay = _capture_run(step, feed, n, device)
    for i in range(GRAPH_WARMUP, n):
        feed(i)
        replay()
