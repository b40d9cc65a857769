"""The shape every algorithm fits: hooks over tensors stacked on the client axis.

The engine owns the loops. Per round it asks the algorithm for per-client tensors (`client_context`,
e.g. SCAFFOLD's c − c_k) and, optionally, per-client starting points (`client_start`, FedBN's local
batch norm); it hands `correct` to batched local SGD as a change of the local gradient, and lets
`aggregate` turn the clients' final parameters into the next global model, new state and per-round
metrics (communication). `global_model` is what the engine evaluates (EFL keeps an exact server model
beside the compressed one the clients hold). Algorithms never loop over clients.

Client state (SCAFFOLD's c_k, FedDyn's g_k, ...) is a list of tensors [N, ...] over ALL devices, read
with `gather` and written with `scatter` at the round's client ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from hetfl.algorithms.hparams import NoParams
from hetfl.engine import comm

Params = list[Tensor]
Context = dict[str, list[Tensor]]


@dataclass(frozen=True)
class RoundInfo:
    """What the engine knows about round τ when it calls the algorithm (arrays over the round's clients)."""

    tau: int
    lr: float
    clients: np.ndarray  # int64 [K]: ids of the clients that train this round
    done: np.ndarray  # int64 [K]: local steps each completed
    full: np.ndarray  # int64 [K]: steps of a complete round, E·⌈n_k/B⌉ (or the task's fixed steps)
    weights: np.ndarray  # float64 [K]: the scheme's p_τ^k (Ruan et al. Scheme A/B/C)
    p: np.ndarray  # float64 [N]: data weights p^k = n_k/n of ALL devices
    discarded: bool = False  # Scheme A with no complete device: the round changes nothing


@dataclass(frozen=True)
class Task:
    """What an algorithm may know besides the round: the model and every device's training data.

    x_train/y_train are the flat training arrays on the engine's device; device k owns rows
    offsets[k]:offsets[k+1]. FedCurv and EFL read them to compute Fisher diagonals after local training.
    """

    model: Any
    x_train: Tensor
    y_train: Tensor
    offsets: np.ndarray
    seed: int = 0  # the run's seed: an algorithm's own randomness (FedGATE's quantiser) derives from it

    @property
    def num_devices(self) -> int:
        return len(self.offsets) - 1


class Algorithm:
    """Base class with FedAvg's behaviour; subclasses override what their paper changes."""

    name: ClassVar[str] = "base"
    Params: ClassVar[type] = NoParams

    def __init__(self, **hyperparameters: Any) -> None:
        self.hp = self.Params(**hyperparameters)
        self.task: Task | None = None

    # -- set-up ---------------------------------------------------------------------------------------
    def setup(self, task: Task) -> None:
        """Called once by the engine before init_state."""
        self.task = task

    def mask(self, n: int) -> tuple[bool, ...]:
        """Which parameter entries are trained (False for buffers such as BN running statistics).

        Corrections and control variates apply to trained entries only: a prox term on a running mean
        would move it against what the forward pass maintains.
        """
        flags = getattr(self.task.model, "trainable", None) if self.task is not None else None
        return tuple(flags) if flags is not None else (True,) * n

    # -- the hooks ------------------------------------------------------------------------------------
    def init_state(self, params: Params, num_devices: int) -> Any:
        """Server and client state (client state as tensors over ALL devices)."""
        return None

    def client_context(self, state: Any, params: Params, info: RoundInfo) -> Context:
        """Per-client tensors stacked [K, ...] in the order of info.clients, passed to `correct`.

        `correct` may update them in place (e.g. momentum buffers): the engine hands it views.
        """
        return {}

    def client_start(self, state: Any, params: Params, info: RoundInfo) -> Params | None:
        """Per-client starting parameters [K, ...], or None when every client starts from `params`."""
        return None

    def local_model(self, model: Any) -> Any:
        """The model local SGD trains (default: the task's model). A method that trains more than the
        model's parameters returns a wrapper whose `grads` covers them all (APFL trains w, v and α
        together); `client_start` then gives the starting values of every entry, and `aggregate` receives
        them all as `finals`."""
        return model

    #: False turns an algorithm's correction off (e.g. FedNova without momentum or prox is plain SGD).
    corrects: bool = True

    def correct_entry(self, i: int, w: Tensor, g: Tensor, ctx: Context) -> Tensor:
        """The corrected local gradient of trained parameter entry i, stacked over the working clients
        (ctx sliced to the same clients). Algorithms that change the local objective override this."""
        raise NotImplementedError

    @property
    def correct(self):
        """correct(params, grads, ctx) -> grads for the engine, or None for plain SGD (then models may use
        a fused step). Applies `correct_entry` to trained entries only: a prox term on a BN running mean
        would move it against what the forward pass maintains."""
        if not self.corrects or type(self).correct_entry is Algorithm.correct_entry:
            return None
        return self._correct_trained

    def _correct_trained(self, params: Params, grads: Params, ctx: Context) -> Params:
        return [self.correct_entry(i, w, g, ctx) if t else g
                for i, (w, g, t) in enumerate(zip(params, grads, self.mask(len(params)), strict=True))]

    def aggregate(self, state: Any, params: Params, finals: Params, info: RoundInfo
                  ) -> tuple[Params, Any, dict[str, float]]:
        """New global params, new state and per-round metrics (communication etc.).

        Every override ends with `with_buffers`: buffers are averaged, never scaled by the scheme."""
        delta = deltas(params, finals)
        # Δ once: each stack of K models is memory
        new = self.with_buffers(apply_update(params, delta, info.weights), finals, info)
        return new, state, comm.round_metrics(up=delta, down=params, clients=len(info.clients))

    def with_buffers(self, new: Params, finals: Params, info: RoundInfo,
                     keep: tuple[bool, ...] | None = None) -> Params:
        """`new` with every buffer entry (trainable False: BN running statistics) replaced by the clients'
        average Σ_k ŵ_k b_k, ŵ the scheme's weights normalised to sum to 1 (`average_buffers`).
        keep: entries to leave as they are besides the trained ones (FedBN's local entries)."""
        trained = self.mask(len(new))
        if keep is not None:
            trained = tuple(t or k for t, k in zip(trained, keep, strict=True))
        return average_buffers(new, finals, info.weights, trained)

    def global_model(self, state: Any, params: Params) -> Params:
        """The model the engine evaluates and reports (default: the broadcast params)."""
        return params

    def client_models(self, state: Any, params: Params) -> Params | None:
        """Every device's own model stacked [N, ...] when the method keeps one (FedBN's local batch norm):
        the engine then scores each device's holdout with it (mean_client_accuracy). None: the global model
        serves every device."""
        return None


# -- helpers over stacked tensors -----------------------------------------------------------------------
def deltas(params: Params, finals: Params) -> Params:
    """Δ_k = w_k − w for every client, stacked [K, ...]."""
    return [f - g for g, f in zip(params, finals, strict=True)]


def coef(values: np.ndarray, like: Tensor) -> Tensor:
    """Per-client coefficients [K] as a tensor shaped to broadcast over like [K, ...]."""
    t = torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=like.dtype, device=like.device)
    return t.view(-1, *([1] * (like.dim() - 1)))


def weighted_sum(stacked: Params, weights: np.ndarray) -> Params:
    """Σ_k w_k t_k over the client axis."""
    return [torch.tensordot(torch.as_tensor(weights, dtype=t.dtype, device=t.device), t, dims=1)
            for t in stacked]


def weighted_update(params: Params, finals: Params, weights: np.ndarray) -> Params:
    """Ruan et al. Eq. (2): w ← w + Σ_k p_τ^k (w_k − w)."""
    return apply_update(params, deltas(params, finals), weights)


def apply_update(params: Params, delta: Params, weights: np.ndarray) -> Params:
    """Eq. (2) from the updates Δ_k = w_k − w already computed: w ← w + Σ_k p_τ^k Δ_k."""
    return [g + s for g, s in zip(params, weighted_sum(delta, weights), strict=True)]


def normalized(weights: np.ndarray) -> np.ndarray:
    """Weights rescaled to sum to 1 over the round's clients (for averages of models, not of updates)."""
    w = np.asarray(weights, dtype=np.float64)
    total = w.sum()
    return w / total if total > 0 else w


def average_buffers(new: Params, finals: Params, weights: np.ndarray, trained: tuple[bool, ...]) -> Params:
    """Buffers (trained False) become Σ_k ŵ_k b_k, the clients' final buffers averaged with the weights
    normalised to sum to 1; trained entries are `new`'s.

    A buffer is a statistic (BN's running mean and variance), not an update: Scheme A's N·p^k/K_τ and
    Scheme C's E·p^k/s_τ^k sum to more than 1 (up to 2 and 3.9 were measured), and Σ_k p_τ^k Δ_k with them
    drove a running variance to −0.17 and the losses to NaN. Nor is a buffer compressed (EFL's ST)."""
    w = normalized(weights)
    return [n if t else torch.tensordot(torch.as_tensor(w, dtype=f.dtype, device=f.device), f, dims=1)
            for n, f, t in zip(new, finals, trained, strict=True)]


def expand(params: Params, k: int) -> Params:
    """The global params repeated on a client axis [K, ...] (what every client of the round receives)."""
    return [p.unsqueeze(0).expand(k, *p.shape) for p in params]


def zeros_state(params: Params, num_devices: int) -> Params:
    """Per-device state [N, ...] initialised to zero."""
    return [torch.zeros((num_devices, *p.shape), dtype=p.dtype, device=p.device) for p in params]


def index(clients: np.ndarray, like: Tensor) -> Tensor:
    return torch.as_tensor(np.asarray(clients, dtype=np.int64), device=like.device)


def gather(state: Params, clients: np.ndarray) -> Params:
    """Rows of per-device state for the round's clients, [K, ...] in info.clients order."""
    return [s.index_select(0, index(clients, s)) for s in state]


def scatter(state: Params, clients: np.ndarray, values: Params) -> Params:
    """A copy of per-device state with the round's clients' rows replaced by values."""
    return [s.index_copy(0, index(clients, s), v.to(s.dtype)) for s, v in zip(state, values, strict=True)]
