"""The round loop: broadcast, batched local training, Scheme A/B/C aggregation, evaluation."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from hetfl.algorithms.base import Algorithm, RoundInfo, Task
from hetfl.algorithms.fedavg import FedAvg
from hetfl.data.events import Schedule, build_schedule
from hetfl.data.federation import Federation
from hetfl.engine.evaluate import loss_fairness, mean_client_accuracy, per_client_means, per_sample
from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import minibatch_indices
from hetfl.engine.sampling import sample_clients, sampled_coefficients
from hetfl.engine.schemes import boosted_weights, complete_round_steps, local_steps
from hetfl.models.base import BatchedModel

LocalTrainer = Callable[..., list[torch.Tensor]]


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
    completion: str = "floor"  # a completed fraction f -> ⌊f·full⌋ or "nearest" round(f·full) steps
    boost: str = "additive"  # fast reboot's boost with the scheme (engine.schemes.boosted_weights)
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


def train(model: BatchedModel, fed: Federation, fractions: np.ndarray, cfg: TrainSettings,
          device: torch.device | str = "cpu", progress: Callable[[int, dict[str, float]], None] | None = None,
          local_trainer: LocalTrainer = local_sgd, algorithm: Algorithm | None = None,
          schedule: Schedule | None = None, resume: Snapshot | None = None,
          checkpoint: Callable[[Snapshot], None] | None = None, checkpoint_every: int = 0) -> TrainResult:
    """Run cfg.rounds rounds of `algorithm` (default FedAvg) with Scheme cfg.scheme on the federation.

    fractions: [R, N] fraction of each device's complete round it completes (the participation traces).
    schedule: arrivals and departures (data.events); None means every device takes part throughout.
    resume: continue a run from a snapshot (pipeline's checkpoints); checkpoint(snapshot) is called every
    `checkpoint_every` rounds and at the last round (or divergence).
    """
    device = torch.device(device)
    x_train = torch.from_numpy(fed.x_train).to(device)
    y_train = torch.tensor(fed.y_train, device=device)  # labels are copies: a concept shift rewrites them
    x_test = torch.from_numpy(fed.x_test).to(device)
    y_test = torch.tensor(fed.y_test, device=device)
    schedule = schedule or build_schedule([], fed.num_devices, cfg.rounds)
    test_device = torch.from_numpy(np.repeat(np.arange(fed.num_devices), fed.test_sizes)).to(device)
    train_device = torch.from_numpy(np.repeat(np.arange(fed.num_devices), fed.train_sizes)).to(device)
    global_test = None if not fed.has_global_test else (
        torch.from_numpy(fed.x_global).to(device), torch.tensor(fed.y_global, device=device))
    full = (complete_round_steps(fed.train_sizes, cfg.local_epochs, cfg.batch_size, cfg.local_work)
            if cfg.local_steps is None else np.asarray(cfg.local_steps, dtype=np.int64))
    if len(full) != fed.num_devices:
        raise ValueError(f"local_steps has {len(full)} entries; the federation has {fed.num_devices} devices")
    gen = torch.Generator().manual_seed(cfg.seed)
    params = [t.to(device) for t in model.init_params(gen)]
    algorithm = algorithm or FedAvg()
    algorithm.setup(Task(model, x_train, y_train, fed.train_offsets))
    state = algorithm.init_state(params, fed.num_devices)
    result = TrainResult()
    first = 1
    if resume is not None:
        params = [t.to(device) for t in resume.params]
        state = _to(resume.state, device)
        result = TrainResult(records=list(resume.records), status=resume.status, rounds_done=resume.tau)
        first = resume.tau + 1 if resume.status == "ok" else cfg.rounds + 1
    relabel = [] if cfg.label_maps is None else [
        (y, y.clone()) for y in (y_train, y_test, *([] if global_test is None else [global_test[1]]))]
    for tau in range(first, cfg.rounds + 1):
        for y, y0 in relabel:  # FedFOR's concept shift: the labels of this round's map, in place
            y.copy_(torch.as_tensor(cfg.label_maps[tau - 1], device=y.device)[y0])
        # staircase η0/τ, restarted at objective shifts; or constant
        lr = schedule.lr(cfg.eta0, tau) if cfg.lr_schedule == "staircase" else cfg.eta0
        p = schedule.coefficients(fed.p, tau)
        in_round = sample_clients(fed.num_devices, cfg.clients_per_round, cfg.seed, tau)  # engine.sampling
        p_in = sampled_coefficients(p, in_round, cfg.sampling_weights)
        done = np.where(schedule.sending[tau - 1] & in_round,
                        local_steps(fractions[tau - 1], full, cfg.completion), 0)
        weights, discarded = boosted_weights(cfg.scheme, p_in, schedule.boost[tau - 1], done, full, cfg.boost)
        clients = np.flatnonzero((weights != 0) & (done > 0))
        row: dict[str, float] = {}
        if not discarded and len(clients):
            info = RoundInfo(tau=tau, lr=lr, clients=clients, done=done[clients], full=full[clients],
                             weights=weights[clients], p=p)
            ctx = algorithm.client_context(state, params, info)
            idx = minibatch_indices(fed.train_offsets, clients, info.done, cfg.batch_size, cfg.seed, tau)
            start = algorithm.client_start(state, params, info)
            finals = local_trainer(model, params, x_train, y_train, idx, info.done, lr,
                                   correction=algorithm.correct, ctx=ctx, start=start)
            params, state, extra = algorithm.aggregate(state, params, finals, info)
            row.update(extra)
        row.update({
            "lr": lr,
            "active_devices": float((done > 0).sum()),
            "complete_devices": float((done == full).sum()),
            "discarded": float(discarded),
            "mean_fraction": float(np.mean(fractions[tau - 1])),
        })
        model_params = algorithm.global_model(state, params)  # what the server reports (EFL: exact w_G)
        diverged = not all(bool(torch.isfinite(t).all()) for t in [*params, *model_params])
        if tau % cfg.eval_every == 0 or tau == cfg.rounds or diverged:
            if diverged:
                row.update(test_accuracy=math.nan, test_loss=math.nan, train_loss=math.nan)
            else:
                own = algorithm.client_models(state, params)  # personalised methods: a model per device
                own_correct = None if own is None else _own_model_correct(model, own, x_test, y_test,
                                                                           fed.test_offsets)
                row.update(_evaluate_round(model, model_params, schedule.test_devices[tau - 1],
                                           (x_test, y_test, test_device), (x_train, y_train, train_device),
                                           global_test, own_correct))
        result.records.extend((tau, k, float(v)) for k, v in row.items())
        result.rounds_done = tau
        if progress is not None:
            progress(tau, row)
        if diverged:
            result.status = "diverged"
        if checkpoint is not None and (diverged or tau == cfg.rounds
                                       or (checkpoint_every and tau % checkpoint_every == 0)):
            checkpoint(Snapshot(tau, params, state, result.records, result.status))
        if diverged:
            break
    result.params = [t.cpu() for t in algorithm.global_model(state, params)]
    return result


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
    device's model (personalised methods), which mean_client_accuracy then uses.
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
    correct, loss = per_sample(model, params, x_test, y_test)
    per_client = per_client_means(correct if own_correct is None else own_correct, test_device, n)[in_test]
    row = {"test_accuracy": float(correct[keep].double().mean()),
           "test_loss": float(loss[keep].double().mean()),
           "test_samples": float(keep.sum()),
           "mean_client_accuracy": mean_client_accuracy(per_client)}
    _, train_loss = per_sample(model, params, x_train, y_train)
    row["train_loss"] = float(train_loss.double().mean())
    row.update(loss_fairness(per_client_means(train_loss, train_device, n)[in_test]))
    if global_test is not None:
        g_correct, g_loss = per_sample(model, params, *global_test)
        row.update(global_test_accuracy=float(g_correct.double().mean()),
                   global_test_loss=float(g_loss.double().mean()))
    return row


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
