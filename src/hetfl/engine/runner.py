"""The round loop: broadcast, batched local training, Scheme A/B/C aggregation, evaluation."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from hetfl.algorithms.base import Algorithm, RoundInfo, Task
from hetfl.algorithms.fedavg import FedAvg
from hetfl.algorithms.hparams import check_scheme
from hetfl.data.events import Schedule, build_schedule
from hetfl.data.federation import GLOBAL_TEST_AVERAGES, Federation
from hetfl.engine.evaluate import (
    eval_subsample,
    loss_fairness,
    mean_client_accuracy,
    per_client_means,
    per_sample,
)
from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import SharedStreams, minibatch_indices
from hetfl.engine.sampling import sample_clients, sampled_coefficients
from hetfl.engine.schemes import boosted_weights, complete_round_steps, local_steps
from hetfl.models.base import BatchedModel

LocalTrainer = Callable[..., list[torch.Tensor]]
#: losses of an evaluated round; any of them non-finite marks the run diverged
EVAL_LOSSES = ("test_loss", "train_loss", "global_test_loss")


@dataclass
class TrainResult:
    records: list[tuple[int, str, float]] = field(default_factory=list)  # (round, metric, value)
    status: str = "ok"
    rounds_done: int = 0
    params: list[torch.Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class TrainSettings:
    scheme: str
    local_epochs: int
    batch_size: int
    eta0: float
    rounds: int
    eval_every: int = 1
    seed: int = 0
    lr_schedule: str = "staircase"  # or "constant": η_τ = η0 (the quadratic test bed)
    local_steps: tuple[int, ...] | None = None  # fixed steps of a complete round per device (replaces E)
    local_work: str = "steps"  # E counts updates (Ruan et al. footnote 1) or "epochs" (docs/readings.md)
    completion: str = "nearest"  # a completed fraction f -> round(f·full) or "floor" ⌊f·full⌋ steps
    boost: str = "additive"  # fast reboot's boost with the scheme (engine.schemes.boosted_weights)
    global_test_samples: int | None = None  # evaluate global_test_* on a seeded subsample (None: all)
    global_test_average: str = "pooled"  # global_test_*: over its samples, or the mean over "domains"
    clients_per_round: int | None = None  # K of N sampled per round (engine.sampling); None = every device
    sampling_weights: str = "sampled"  # the scheme over the sampled set: "sampled" | "population"
    label_maps: np.ndarray | None = field(default=None, compare=False)  # [R, C]: data.concept_shift


@dataclass
class Snapshot:
    """A run after `tau` rounds: enough to continue it and end bitwise where an uninterrupted run ends.

    Minibatches are seeded per (seed, round, client) and the initial model by the seed, so the parameters,
    the algorithm's state and the records so far are the whole state of the round loop.
    """

    tau: int
    params: list[torch.Tensor]
    state: object
    records: list[tuple[int, str, float]]
    status: str = "ok"


def _to(obj: object, device: torch.device) -> object:
    """Every tensor of a nested dict/list/tuple moved to `device` (an algorithm's state)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_to(v, device) for v in obj)
    return obj


@dataclass(frozen=True)
class Data:
    """A federation on the engine's device, shared by every run of a cell (converted once)."""

    fed: Federation
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    test_device: torch.Tensor  # the device of every test sample
    train_device: torch.Tensor
    global_test: tuple[torch.Tensor, torch.Tensor] | None
    global_device: torch.Tensor | None = None  # the device holding each global test sample's domain, or -1

    @classmethod
    def of(cls, fed: Federation, device: torch.device | str = "cpu") -> Data:
        def put(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a).to(device)

        n = np.arange(fed.num_devices)
        return cls(fed, put(fed.x_train), put(fed.y_train), put(fed.x_test), put(fed.y_test),
                   put(np.repeat(n, fed.test_sizes)), put(np.repeat(n, fed.train_sizes)),
                   None if not fed.has_global_test else (put(fed.x_global), put(fed.y_global)),
                   None if fed.d_global is None or not fed.has_global_test else put(fed.d_global))


def round_bytes(clients: int, steps: int, batch: int, params: list[torch.Tensor]) -> tuple[int, int]:
    """What a round of ``clients`` clients, the most of whom take ``steps`` steps of ``batch`` samples,
    certainly holds at once: minibatch_indices' [K, S, B] int64 array and local_sgd's stack of the K
    clients' parameters (one run's clients go in one local_sgd call), in bytes."""
    return 8 * clients * steps * batch, clients * sum(p.numel() * p.element_size() for p in params)


def check_round_memory(tau: int, clients: int, steps: int, batch: int, params: list[torch.Tensor],
                       state: int = 0) -> None:
    """Raise MemoryError where what CPU round τ certainly holds at once (round_bytes) and ``state``, the
    bytes of the algorithm's state (RunLoop.state_bytes), exceed this machine's memory
    (cluster.host_memory_bytes). RunLoop.check_memory asks it of the largest round before the
    first runs (clients 0: a run with no round to train, its state alone). Past it the allocations succeed
    and the kernel kills the job as their pages are touched, with nothing in its log: FedAvg with 5,000
    clients a round on a 1.4 M-parameter MLP (26.4 GiB of stack) ran 80 s and was killed. `hetfl train`
    words the error (cli.OUT_OF_MEMORY_HINTS). A lower bound: a round that passes can still run out."""
    from hetfl.cluster import gib, host_memory_bytes

    have = host_memory_bytes()
    indices, stack = round_bytes(clients, steps, batch, params)
    if have is None or indices + stack + state <= have:
        return
    beside = f"the algorithm's state of every device ({gib(state)})"
    if not clients:
        raise MemoryError(f"{beside} is more than this machine's {gib(have)}")
    size = sum(p.numel() for p in params)
    raise MemoryError(
        f"round {tau} trains {clients:,} clients at once: their parameter stack ({clients:,} x {size:,} "
        f"parameters, {gib(stack)}) and minibatch indices ({clients:,} x {steps:,} steps x {batch:,}, "
        f"{gib(indices)}){f', beside {beside},' if state else ''} need {gib(indices + stack + state)}, more "
        f"than this machine's {gib(have)}")


@dataclass(frozen=True)
class LocalWork:
    """What a round asks of local training (engine.local.local_sgd's arguments)."""

    info: RoundInfo
    batch_idx: np.ndarray  # [K, max steps, B]
    correction: object
    ctx: dict[str, list[torch.Tensor]]
    start: list[torch.Tensor] | None
    model: object = None  # the model local SGD trains (Algorithm.local_model); None = the run's model

    @property
    def plain(self) -> bool:
        """Plain SGD from the broadcast model: it can share one local_sgd call with other runs' clients."""
        return self.correction is None and not self.ctx and self.start is None and self.model is None

    def trained(self, model: BatchedModel) -> object:
        """What local SGD trains: the algorithm's own model (APFL's (w, v, α)) or the run's."""
        return model if self.model is None else self.model


class RunLoop:
    """One run's rounds (Ruan et al. §3.1): broadcast, local SGD, aggregation (Eq. 2), evaluation.

    `plan(tau)` does a round's bookkeeping up to local training and says what local training it needs;
    `finish(tau, finals)` aggregates, evaluates and records. `train` calls local_sgd in between for one
    run; `train_stacked` calls it once for the clients of several runs.
    """

    def __init__(self, model: BatchedModel, data: Data, fractions: np.ndarray, cfg: TrainSettings,
                 algorithm: Algorithm | None = None, schedule: Schedule | None = None,
                 resume: Snapshot | None = None,
                 progress: Callable[[int, dict[str, float]], None] | None = None,
                 checkpoint: Callable[[Snapshot], None] | None = None, checkpoint_every: int = 0) -> None:
        fed = data.fed
        if data.global_test is not None and cfg.global_test_samples is not None:
            x, y = data.global_test
            keep = torch.from_numpy(eval_subsample(len(y), cfg.global_test_samples, cfg.seed)).to(y.device)
            data = replace(data, global_test=(x.index_select(0, keep), y.index_select(0, keep)),
                           global_device=None if data.global_device is None
                           else data.global_device.index_select(0, keep))
        if cfg.global_test_average not in GLOBAL_TEST_AVERAGES:
            raise ValueError(f"global_test_average has value {cfg.global_test_average!r}, which is not "
                             f"allowed; allowed: {', '.join(GLOBAL_TEST_AVERAGES)}")
        if cfg.global_test_average == "domains" and data.global_device is None:
            raise ValueError("global_test_average 'domains' needs a split that records the domain of every "
                             "global test sample (made with global_test_average 'domains'); this one does "
                             "not: make the split again")
        self.model, self.data, self.fractions, self.cfg = model, data, fractions, cfg
        self.schedule = schedule or build_schedule([], fed.num_devices, cfg.rounds)
        self.progress, self.checkpoint, self.checkpoint_every = progress, checkpoint, checkpoint_every
        self.full = (complete_round_steps(fed.train_sizes, cfg.local_epochs, cfg.batch_size, cfg.local_work)
                     if cfg.local_steps is None else np.asarray(cfg.local_steps, dtype=np.int64))
        if len(self.full) != fed.num_devices:
            raise ValueError(f"local_steps has {len(self.full)} entries; the federation has "
                             f"{fed.num_devices} devices")
        device = data.x_train.device
        self._labels: list[tuple[torch.Tensor, torch.Tensor]] = []  # (this run's labels, the originals)
        if cfg.label_maps is not None:  # FedFOR's concept shift rewrites labels: this run's own copies
            g = None if data.global_test is None else (data.global_test[0], data.global_test[1].clone())
            data = replace(data, y_train=data.y_train.clone(), y_test=data.y_test.clone(), global_test=g)
            self.data = data
            ys = [data.y_train, data.y_test] + ([] if g is None else [g[1]])
            self._labels = [(y, y.clone()) for y in ys]
        gen = torch.Generator().manual_seed(cfg.seed)
        self.params = [t.to(device) for t in model.init_params(gen)]
        self.algorithm = algorithm or FedAvg()
        check_scheme(self.algorithm.name, cfg.scheme, key="scheme")  # e.g. FedNova under C divides twice
        self.algorithm.setup(Task(model, data.x_train, data.y_train, fed.train_offsets, seed=cfg.seed))
        # the first round still to run: a diverged run resumes with none
        first = 1 if resume is None else resume.tau + 1 if resume.status == "ok" else cfg.rounds + 1
        if device.type == "cpu":  # before the algorithm's state and any round
            self.check_memory(first)
        self.state = self.algorithm.init_state(self.params, fed.num_devices)
        self.result = TrainResult()
        self.next_round = first
        if resume is not None:
            self.params = [t.to(device) for t in resume.params]
            self.state = _to(resume.state, device)
            self.result = TrainResult(records=list(resume.records), status=resume.status,
                                      rounds_done=resume.tau)
        self._round: tuple[dict[str, float], RoundInfo | None, np.ndarray, bool] | None = None
        # how plan() draws minibatches; train_stacked gives the runs of a cell one SharedStreams
        self.minibatches: Callable[..., np.ndarray] = minibatch_indices

    @property
    def finished(self) -> bool:
        return self.next_round > self.cfg.rounds

    def participants(self, tau: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool, np.ndarray]:
        """Round τ's scheme coefficients p_τ^k, the steps every device completes, the aggregation weights
        over the round's sampled devices, whether the round is discarded (Scheme A without a complete
        device) and the devices that train (a weight and a step): a pure function of the run's inputs, so
        check_memory can read every round before the first."""
        cfg, schedule, fed = self.cfg, self.schedule, self.data.fed
        p = schedule.coefficients(fed.p, tau)
        in_round = sample_clients(fed.num_devices, cfg.clients_per_round, cfg.seed, tau)  # engine.sampling
        done = np.where(schedule.sending[tau - 1] & in_round,
                        local_steps(self.fractions[tau - 1], self.full, cfg.completion), 0)
        p_in = sampled_coefficients(p, in_round, cfg.sampling_weights)
        weights, discarded = boosted_weights(cfg.scheme, p_in, schedule.boost[tau - 1], done, self.full,
                                             cfg.boost)
        return p, done, weights, discarded, np.flatnonzero((weights != 0) & (done > 0))

    def state_bytes(self) -> int:
        """Bytes of the state the algorithm's init_state would allocate for every device, from a run of it on
        meta copies of the parameters (shapes only, nothing allocated); 0 where it does not run there (a
        plugin's init_state that reads values)."""
        meta = [p.to("meta") for p in self.params]
        try:
            with torch.device("meta"):
                state = self.algorithm.init_state(meta, self.data.fed.num_devices)
        except Exception:  # noqa: BLE001 - any failure on shapes alone only means no bound: the job goes on
            return 0
        return sum(t.numel() * t.element_size() for t in torch.utils._pytree.tree_leaves(state)
                   if isinstance(t, torch.Tensor))

    def check_memory(self, first: int) -> None:
        """check_round_memory for the round from ``first`` on that holds the most, beside the algorithm's
        state, before the state is allocated or any round runs."""
        worst: tuple[int, int, int, int] = (0, 0, 0, 0)  # bytes, round, clients, steps
        for tau in range(first, self.cfg.rounds + 1):
            _, done, _, discarded, clients = self.participants(tau)
            if discarded or not len(clients):
                continue
            k, s = len(clients), int(done[clients].max())
            need = sum(round_bytes(k, s, self.cfg.batch_size, self.params))
            worst = max(worst, (need, -tau, k, s))  # the first such round on a tie
        state = self.state_bytes()
        check_round_memory(-worst[1], worst[2], worst[3], self.cfg.batch_size, self.params, state)

    def plan(self, tau: int) -> LocalWork | None:
        """Round τ up to local training: η_τ, p_τ^k of the scheme, who trains how many steps."""
        cfg, schedule, fed = self.cfg, self.schedule, self.data.fed
        for y, y0 in self._labels:  # FedFOR's concept shift: the labels of round τ's map, in place
            y.copy_(torch.as_tensor(cfg.label_maps[tau - 1], device=y.device)[y0])
        # staircase η0/τ, restarted at objective shifts; or constant
        lr = schedule.lr(cfg.eta0, tau) if cfg.lr_schedule == "staircase" else cfg.eta0
        p, done, weights, discarded, clients = self.participants(tau)
        info = None
        if not discarded and len(clients):
            info = RoundInfo(tau=tau, lr=lr, clients=clients, done=done[clients], full=self.full[clients],
                             weights=weights[clients], p=p)
        self._round = ({"lr": lr}, info, done, discarded)
        if info is None:
            return None
        alg = self.algorithm
        idx = self.minibatches(fed.train_offsets, clients, info.done, cfg.batch_size, cfg.seed, tau)
        local = alg.local_model(self.model)
        return LocalWork(info, idx, alg.correct, alg.client_context(self.state, self.params, info),
                         alg.client_start(self.state, self.params, info),
                         None if local is self.model else local)

    def finish(self, tau: int, finals: list[torch.Tensor] | None) -> None:
        """Round τ after local training: aggregate, evaluate, record, checkpoint."""
        assert self._round is not None, "plan(tau) comes first"
        row, info, done, discarded = self._round
        self._round = None
        cfg, data, alg = self.cfg, self.data, self.algorithm
        if finals is not None:
            self.params, self.state, extra = checked_aggregate(
                alg, alg.aggregate(self.state, self.params, finals, info), self.params)
            row.update(extra)
        row.update({
            "active_devices": float((done > 0).sum()),
            "complete_devices": float((done == self.full).sum()),
            "discarded": float(discarded),
            "mean_fraction": float(np.mean(self.fractions[tau - 1])),
        })
        model_params = alg.global_model(self.state, self.params)  # what the server reports (EFL: exact w_G)
        # each tensor once: FedAvg's global model is its parameters (checking both: 6 % of finish())
        tensors = {id(t): t for t in [*self.params, *model_params]}.values()
        diverged = not all(bool(torch.isfinite(t).all()) for t in tensors)
        if tau % cfg.eval_every == 0 or tau == cfg.rounds or diverged:
            if diverged:
                row.update(test_accuracy=math.nan, test_loss=math.nan, train_loss=math.nan)
            else:
                own = alg.client_models(self.state, self.params)  # personalised methods: a model per device
                own_correct = None if own is None else _own_model_correct(
                    self.model, own, data.x_test, data.y_test, data.fed.test_offsets)
                row.update(_evaluate_round(self.model, model_params, self.schedule.test_devices[tau - 1],
                                           (data.x_test, data.y_test, data.test_device),
                                           (data.x_train, data.y_train, data.train_device),
                                           data.global_test, own_correct))
                if cfg.global_test_average == "domains" and data.global_test is not None:
                    row.update(global_test_pooled_accuracy=row["global_test_accuracy"],
                               global_test_pooled_loss=row["global_test_loss"])
                    row.update(_domain_mean(self.model, model_params if own is None else own,
                                            own is not None, *data.global_test, data.global_device))
        # finite parameters can still give NaN losses (a negative BN running variance): diverged too
        diverged = diverged or any(not math.isfinite(row[k]) for k in EVAL_LOSSES if k in row)
        self.result.records.extend((tau, k, float(v)) for k, v in row.items())
        self.result.rounds_done = tau
        self.next_round = tau + 1
        if self.progress is not None:
            self.progress(tau, row)
        if diverged:
            self.result.status = "diverged"
            self.next_round = cfg.rounds + 1
        if self.checkpoint is not None and (diverged or tau == cfg.rounds or (
                self.checkpoint_every and tau % self.checkpoint_every == 0)):
            self.checkpoint(Snapshot(tau, self.params, self.state, self.result.records, self.result.status))

    def close(self) -> TrainResult:
        self.result.params = [t.cpu() for t in self.algorithm.global_model(self.state, self.params)]
        return self.result


def checked_aggregate(alg: Algorithm, out: Any, params: list[torch.Tensor]) -> Any:
    """What `aggregate` returned, when it is (new params, state, metrics) with the global model's shapes.

    A plugin's aggregate that returned the clients' stacked models [K, ...] failed a round later inside the
    model's gradient, far from the cause (an audit), and a stray [1, ...] axis can broadcast on unseen."""
    who = f"algorithm '{alg.name}' ({type(alg).__module__}:{type(alg).__qualname__}).aggregate"
    if not isinstance(out, tuple | list) or len(out) != 3 or not isinstance(out[2], Mapping):
        got = f"a {type(out).__name__} of {len(out)}" if isinstance(out, tuple | list) else \
            f"a {type(out).__name__}"
        raise TypeError(f"{who} returned {got}; allowed: a tuple (new global parameters, new state, metrics "
                        "dict), e.g. comm.round_metrics(...) as the metrics")
    new = out[0]
    if not isinstance(new, list | tuple) or len(new) != len(params):
        count = len(new) if isinstance(new, list | tuple) else type(new).__name__
        raise ValueError(f"{who} returned {count} parameter entries; allowed: {len(params)}, one per entry "
                         "of the global model")
    for i, (n, p) in enumerate(zip(new, params, strict=True)):
        if not isinstance(n, torch.Tensor) or n.shape != p.shape:
            got = f"shape {tuple(n.shape)}" if isinstance(n, torch.Tensor) else f"a {type(n).__name__}"
            raise ValueError(f"{who} returned parameter entry {i} of {got}; allowed: the shape of the global "
                             f"parameter it replaces, {tuple(p.shape)} (the new global model, without the "
                             "client axis that `finals` and the updates Δ_k carry: reduce it, e.g. with "
                             "weighted_sum(deltas(params, finals), info.weights))")
    return out


def train(model: BatchedModel, fed: Federation, fractions: np.ndarray, cfg: TrainSettings,
          device: torch.device | str = "cpu", progress: Callable[[int, dict[str, float]], None] | None = None,
          local_trainer: LocalTrainer = local_sgd, algorithm: Algorithm | None = None,
          schedule: Schedule | None = None, resume: Snapshot | None = None,
          checkpoint: Callable[[Snapshot], None] | None = None, checkpoint_every: int = 0,
          data: Data | None = None) -> TrainResult:
    """Run cfg.rounds rounds of `algorithm` (default FedAvg) with Scheme cfg.scheme on the federation.

    fractions: [R, N] fraction of each device's complete round it completes (the participation traces).
    schedule: arrivals and departures (data.events); None means every device takes part throughout.
    resume: continue a run from a snapshot (pipeline's checkpoints); checkpoint(snapshot) is called every
    `checkpoint_every` rounds and at the last round (or divergence). data: fed already on the device.
    """
    data = data or Data.of(fed, torch.device(device))
    loop = RunLoop(model, data, fractions, cfg, algorithm, schedule, resume, progress, checkpoint,
                   checkpoint_every)
    while not loop.finished:
        tau = loop.next_round
        work = loop.plan(tau)
        finals = None if work is None else local_trainer(
            work.trained(model), loop.params, loop.data.x_train, loop.data.y_train, work.batch_idx,
            work.info.done, work.info.lr, correction=work.correction, ctx=work.ctx, start=work.start)
        loop.finish(tau, finals)
    return loop.close()


#: stacked starting points of one local_sgd call at most this large; more clients go in several calls
STACK_BYTES = 256 * 2**20


def train_stacked(loops: list[RunLoop], local_trainer: LocalTrainer = local_sgd) -> list[TrainResult]:
    """Run several runs' rounds side by side; in each round the plain local training of every run that
    shares the round's learning rate (and model) is ONE local_sgd call over all their clients.

    Each client's local SGD depends only on its own start, minibatches (seeded per (seed, round, client))
    and step count, so every run ends where `train` alone would (tests/test_engine.py checks it bitwise);
    aggregation, evaluation and records stay per run. Runs may start at different rounds (resumed) and
    have different lengths. The runs of a cell share `Data`, and their minibatch streams (SharedStreams).
    """
    streams = SharedStreams()
    for loop in loops:
        loop.minibatches = streams
    while not all(loop.finished for loop in loops):
        tau = min(loop.next_round for loop in loops if not loop.finished)
        due = [loop for loop in loops if not loop.finished and loop.next_round == tau]
        works = [(loop, loop.plan(tau)) for loop in due]
        finals: dict[int, list[torch.Tensor] | None] = {id(loop): None for loop in due}
        groups: dict[tuple, list[tuple[RunLoop, LocalWork]]] = {}
        for loop, work in works:
            if work is None:
                continue
            if work.plain:
                shapes = tuple((tuple(t.shape), t.dtype) for t in loop.params)  # one architecture per call
                # the same training tensors (a run with its own labels, FedFOR's concept shift, trains alone)
                data = (id(loop.data.x_train), id(loop.data.y_train))
                key = (work.info.lr, type(loop.model).__name__, shapes, data)
                groups.setdefault(key, []).append((loop, work))
            else:  # corrections, contexts, own starts or own local models: this run trains alone
                data = loop.data
                finals[id(loop)] = local_trainer(work.trained(loop.model), loop.params, data.x_train,
                                                 data.y_train, work.batch_idx, work.info.done, work.info.lr,
                                                 correction=work.correction, ctx=work.ctx, start=work.start)
        for group in groups.values():
            for chunk in _chunks(group):
                finals.update(_train_together(chunk, local_trainer))
        for loop in due:
            loop.finish(tau, finals[id(loop)])
    return [loop.close() for loop in loops]


def _chunks(group: list[tuple[RunLoop, LocalWork]]) -> list[list[tuple[RunLoop, LocalWork]]]:
    """Split a group so that the stacked starting points stay under STACK_BYTES."""
    out: list[list[tuple[RunLoop, LocalWork]]] = [[]]
    size = 0
    for loop, work in group:
        need = len(work.info.clients) * sum(p.numel() * p.element_size() for p in loop.params)
        if out[-1] and size + need > STACK_BYTES:
            out.append([])
            size = 0
        out[-1].append((loop, work))
        size += need
    return out


def _train_together(chunk: list[tuple[RunLoop, LocalWork]], local_trainer: LocalTrainer
                    ) -> dict[int, list[torch.Tensor]]:
    """One local_sgd call for the clients of several runs: each client starts from its own run's model."""
    first, lr = chunk[0][0], chunk[0][1].info.lr
    counts = [len(work.info.clients) for _, work in chunk]
    steps = np.concatenate([work.info.done for _, work in chunk])
    width = max(work.batch_idx.shape[1] for _, work in chunk)
    idx = np.zeros((len(steps), width, first.cfg.batch_size), dtype=np.int64)  # rows past a client's steps
    row = 0                                                                    # are never read
    for _, work in chunk:
        k, s = work.batch_idx.shape[:2]
        idx[row:row + k, :s] = work.batch_idx
        row += k
    start = [torch.cat([loop.params[i].unsqueeze(0).expand(n, *loop.params[i].shape)
                        for (loop, _), n in zip(chunk, counts, strict=True)])
             for i in range(len(first.params))]
    finals = local_trainer(first.model, first.params, first.data.x_train, first.data.y_train, idx, steps, lr,
                           correction=None, ctx=None, start=start)
    out, lo = {}, 0
    for (loop, _), n in zip(chunk, counts, strict=True):
        out[id(loop)] = [f[lo:lo + n] for f in finals]
        lo += n
    return out


Split = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # x, y, the device of every sample


def _evaluate_round(model: BatchedModel, params: list[torch.Tensor], test_devices: np.ndarray, test: Split,
                    train: Split, global_test: tuple[torch.Tensor, torch.Tensor] | None,
                    own_correct: torch.Tensor | None = None) -> dict[str, float]:
    """The round's metrics of the global model.

    test_accuracy / test_loss: pooled over the local holdouts of the devices in this round's test set
    (data.events); mean_client_accuracy: the unweighted mean of those devices' own accuracies (EFL's
    "mean testing accuracy"); train_loss: F(w) pooled over all local training data, with the fairness
    of the per-device training losses F_k(w) over the same devices as the test set; global_test_*: the
    source's own test split, when the split has one. own_correct: every test sample scored by its own
    device's model (personalised methods), which mean_client_accuracy then uses. With no local test sample
    among the round's test devices (test_fraction 0: no local holdout) test_accuracy, test_loss and
    mean_client_accuracy are not recorded (nothing to score: a NaN test_loss read as divergence), and
    test_samples is 0; the training loss, its fairness and global_test_* are as ever.
    A model with its own `evaluate` (the analytic quadratic task) reports test_loss, train_loss,
    `objective` = F(w) and its other values as they are (e.g. x).
    """
    (x_test, y_test, test_device), (x_train, y_train, train_device) = test, train
    n = len(test_devices)
    in_test = torch.from_numpy(test_devices).to(x_test.device)
    keep = in_test[test_device]
    custom = getattr(model, "evaluate", None)
    if custom is not None:
        values = dict(custom(params, x_train, y_train))
        train_loss = values.pop("loss")
        return {"test_loss": dict(custom(params, x_test[keep], y_test[keep]))["loss"],
                "test_samples": float(keep.sum()), "train_loss": train_loss, "objective": train_loss,
                **values}
    scored = float(keep.sum())
    if scored:
        correct, loss = per_sample(model, params, x_test, y_test)
        own = correct if own_correct is None else own_correct
        per_client = per_client_means(own, test_device, n)[in_test]
        row = {"test_accuracy": float(correct[keep].double().mean()),
               "test_loss": float(loss[keep].double().mean()),
               "test_samples": scored,
               "mean_client_accuracy": mean_client_accuracy(per_client)}
    else:  # no local holdout: the global test split is the run's only accuracy
        row = {"test_samples": 0.0}
    _, train_loss = per_sample(model, params, x_train, y_train)
    row["train_loss"] = float(train_loss.double().mean())
    row.update(loss_fairness(per_client_means(train_loss, train_device, n)[in_test]))
    if global_test is not None:
        g_correct, g_loss = per_sample(model, params, *global_test)
        row.update(global_test_accuracy=float(g_correct.double().mean()),
                   global_test_loss=float(g_loss.double().mean()))
    return row


def _domain_mean(model: BatchedModel, params: list[torch.Tensor], per_device: bool, x: torch.Tensor,
                 y: torch.Tensor, device_of: torch.Tensor) -> dict[str, float]:
    """global_test_* as FedBN reports them (federated/fed_digits.py, fed_domainnet.py: one test() per
    domain, then their mean): the accuracy and loss of every domain's test samples, scored by the model of
    the device holding that domain (per_device: params are [N, ...] per-device models, e.g. FedBN's local
    batch norm; else the global model), averaged with equal weight over the domains a device holds.
    The pooled values stay beside them as global_test_pooled_*."""
    held = [int(k) for k in torch.unique(device_of) if int(k) >= 0]
    if not held:
        raise ValueError("global_test_average 'domains': no global test sample belongs to a domain a device "
                         "holds")
    correct, loss = [], []
    for k in held:
        sel = device_of == k
        c, lo = per_sample(model, [p[k] for p in params] if per_device else params, x[sel], y[sel])
        correct.append(float(c.double().mean()))
        loss.append(float(lo.double().mean()))
    return {"global_test_accuracy": float(np.mean(correct)), "global_test_loss": float(np.mean(loss))}


def _own_model_correct(model: BatchedModel, own: list[torch.Tensor], x_test: torch.Tensor,
                       y_test: torch.Tensor, offsets: np.ndarray) -> torch.Tensor:
    """[n_test] correctness of every test sample under its own device's model own[k]."""
    parts = [per_sample(model, [p[k] for p in own], x_test[lo:hi], y_test[lo:hi])[0]
             for k, (lo, hi) in enumerate(zip(offsets[:-1], offsets[1:], strict=True))]
    return torch.cat(parts) if parts else y_test.new_zeros(0, dtype=torch.float32)


class ProgressLog:
    """Rounds done, current test accuracy and an ETA, printed at most every `every_s` seconds."""

    def __init__(self, total: int, label: str, every_s: float = 2.0, stream=None) -> None:
        import sys

        self.total, self.label, self.every_s = total, label, every_s
        self.stream = stream or sys.stderr
        self.start = self.last = time.perf_counter()
        self.acc = math.nan

    def __call__(self, tau: int, row: dict[str, float]) -> None:
        self.acc = row.get("test_accuracy", self.acc)
        now = time.perf_counter()
        if now - self.last < self.every_s and tau != self.total:
            return
        self.last = now
        elapsed = now - self.start
        eta = elapsed / tau * (self.total - tau)
        print(f"[{self.label}] round {tau}/{self.total}  test_acc={self.acc:.4f}  "
              f"elapsed={elapsed:.1f}s  eta={eta:.1f}s", file=self.stream, flush=True)
