"""Buffers (batch-norm running statistics, `trainable` False) are averaged with weights that sum to 1 and
never compressed, by every algorithm and under every scheme; a run whose losses are not finite is
`diverged` (issue 11, item 2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hetfl.algorithms import ALGORITHM_NAMES, make_algorithm
from hetfl.algorithms.base import RoundInfo, Task
from hetfl.algorithms.fedavg import FedAvg
from hetfl.data.federation import from_device_lists
from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import minibatch_indices
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model


def _bn_federation(sizes=(12, 18, 24, 30), scale=0.1):
    """Four devices of 1×12×12 'images' with a small spread: BN's running variance falls from its initial
    1 towards ~0.01 during local training, so an update scaled by weights summing to more than 1 overshoots
    below zero."""
    rng = np.random.default_rng(0)
    xs = [rng.normal(scale=scale, size=(n, 144)).astype(np.float32) for n in sizes]
    ys = [rng.integers(0, 3, len(x)) for x in xs]
    return from_device_lists(xs, ys, [x[:4] for x in xs], [y[:4] for y in ys], num_classes=3)


FED = _bn_federation()
MODEL = make_model("cnn_bn", (1, 12, 12), 3, channels=(2, 3), hidden=(8,))
BUFFERS = [i for i, t in enumerate(MODEL.trainable) if not t]


def _one_round(alg, weights, model=MODEL):
    """One round through the hooks (what runner.train does) with the given scheme weights."""
    x, y = torch.from_numpy(FED.x_train), torch.from_numpy(FED.y_train)
    alg.setup(Task(model, x, y, FED.train_offsets))
    params = model.init_params(torch.Generator().manual_seed(0))
    state = alg.init_state(params, FED.num_devices)
    clients = np.arange(FED.num_devices)
    done, full = np.array([1, 4, 6, 2]), np.array([4, 4, 6, 6])
    info = RoundInfo(tau=1, lr=0.1, clients=clients, done=done, full=full, weights=np.asarray(weights),
                     p=FED.p)
    idx = minibatch_indices(FED.train_offsets, clients, done, 3, 0, 1)
    ctx, start = alg.client_context(state, params, info), alg.client_start(state, params, info)
    finals = local_sgd(model, params, x, y, idx, done, 0.1, correction=alg.correct, ctx=ctx, start=start)
    new, state, _ = alg.aggregate(state, params, finals, info)
    return params, finals, new, alg.global_model(state, new)


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_every_algorithm_averages_buffers_with_weights_summing_to_one(name):
    # Scheme C-like weights p^k·full/done: they sum to 2.5, which is how the running variance went negative
    weights = FED.p * np.array([4.0, 1.0, 1.0, 3.0])
    assert weights.sum() > 1.5
    alg = make_algorithm(name, **({"q": 0.05} if name == "efl" else {}))  # EFL: compress hard
    params, finals, new, evaluated = _one_round(alg, weights)
    # FedBN keeps BN local; its global BN is the data-weighted mean over devices (here: every device)
    w = FED.p / FED.p.sum() if name == "fedbn" else weights / weights.sum()
    for i in BUFFERS:
        expect = sum(float(w[k]) * finals[i][k] for k in range(FED.num_devices))
        for got in (new[i], evaluated[i]):  # the broadcast model and the one the engine evaluates
            torch.testing.assert_close(got, expect, rtol=1e-5, atol=1e-6)
    running_var = [evaluated[i] for i in BUFFERS[1::2]]
    assert all(bool((v > 0).all()) for v in running_var)
    assert not all(torch.equal(params[i], new[i]) for i in BUFFERS)  # the statistics did move


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedcurv", "fedfor"])
def test_table2_methods_average_the_batch_norm_resnets_buffers(name):
    """FedFOR Table 2's methods on the batch-norm ResNet-20 (norm="batch", its residual blocks' running
    statistics included) do what they do on cnn_bn: buffers are the clients' average with the scheme's
    weights normalised to 1, untouched by FedProx's and FedFOR's corrections and FedCurv's penalty."""
    model = make_model("resnet20", (1, 12, 12), 3, widths=(2, 4, 4), blocks=1, norm="batch")
    buffers = [i for i, t in enumerate(model.trainable) if not t]
    assert len(buffers) == 2 * 7  # the stem's norm and 3 blocks' 2 each
    weights = FED.p * np.array([4.0, 1.0, 1.0, 3.0])
    params, finals, new, evaluated = _one_round(make_algorithm(name), weights, model)
    w = weights / weights.sum()
    for i in buffers:
        expect = sum(float(w[k]) * finals[i][k] for k in range(FED.num_devices))
        for got in (new[i], evaluated[i]):
            torch.testing.assert_close(got, expect, rtol=1e-5, atol=1e-6)
    assert all(bool((evaluated[i] > 0).all()) for i in buffers[1::2])  # running variances
    assert not all(torch.equal(params[i], new[i]) for i in buffers)


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_every_algorithm_on_cpu_workers_equals_one_thread(name, monkeypatch):
    """The CNNs train their blocks on separate CPU cores (engine.executor, client_parallel): with 2 threads
    and blocks of 2 (a 1-byte cache budget: this tiny model's 4 clients would fit one block) the round's
    clients go to 2 workers, whose algorithm corrections and per-client state (FedNova's momentum,
    SCAFFOLD's control variates, BN's running statistics) are updated from worker threads. The round
    equals the same round on one thread (no workers) to float rounding."""
    from hetfl.engine import executor

    monkeypatch.setattr(MODEL, "cache_bytes", 1)
    weights = FED.p * np.array([4.0, 1.0, 1.0, 3.0])
    before = torch.get_num_threads()
    x = torch.zeros(1, 3, 1, 12, 12)
    try:
        torch.set_num_threads(2)
        assert executor.make_plan(MODEL, [t.unsqueeze(0) for t in MODEL.init_params(torch.Generator())], x,
                                  4).workers == 2
        on_workers = _one_round(make_algorithm(name), weights)
        torch.set_num_threads(1)
        on_one = _one_round(make_algorithm(name), weights)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(on_workers, on_one, strict=True):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            torch.testing.assert_close(u, v, rtol=1e-4, atol=1e-5)


def _fractions(rounds):
    # devices 0 and 3 incomplete every round (Scheme C scales them by up to 10), 1 and 2 complete
    return np.tile([[0.1, 1.0, 1.0, 0.2]], (rounds, 1))


@pytest.mark.parametrize(("name", "scheme"), [("fedavg", "A"), ("fedavg", "C"), ("efl", "C"),
                                              ("scaffold", "C"), ("feddyn", "A")])
def test_cnn_bn_runs_keep_positive_running_variance_and_finite_losses(name, scheme):
    rounds = 8
    cfg = TrainSettings(scheme, 2, 6, 0.05, rounds, lr_schedule="constant")
    res = train(MODEL, FED, _fractions(rounds), cfg, algorithm=make_algorithm(name))
    assert res.status == "ok" and res.rounds_done == rounds
    losses = [v for _, m, v in res.records if m in ("test_loss", "train_loss")]
    assert len(losses) == 2 * rounds and all(math.isfinite(v) for v in losses)
    assert all(bool((res.params[i] > 0).all()) for i in BUFFERS[1::2])


class _NegativeVariance(FedAvg):
    """FedAvg that writes a negative running variance from round 2 on: parameters stay finite, the
    evaluation's losses do not (the state EFL's compressed buffers reached before the fix)."""

    name = "negative_variance"

    def aggregate(self, state, params, finals, info):
        new, state, metrics = super().aggregate(state, params, finals, info)
        if info.tau >= 2:
            new = [torch.full_like(p, -0.5) if j in BUFFERS[1::2] else p for j, p in enumerate(new)]
        return new, state, metrics


def test_non_finite_losses_mark_the_run_diverged_and_stop_it():
    cfg = TrainSettings("B", 1, 6, 0.05, 6, lr_schedule="constant")
    res = train(MODEL, FED, np.ones((6, FED.num_devices)), cfg, algorithm=_NegativeVariance())
    assert res.status == "diverged" and res.rounds_done == 2
    assert all(bool(torch.isfinite(p).all()) for p in res.params)  # not caught by the parameter check
    last = {m: v for r, m, v in res.records if r == 2}
    assert math.isnan(last["test_loss"])
