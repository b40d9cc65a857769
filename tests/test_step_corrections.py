"""Algorithms with their own step correction and Ruan et al.'s Schemes A/B/C (issue 11, items 1 and 4).

FedNova's τ_eff/a_i and Scheme C's E/s_τ^k each remove the bias towards devices that did more local steps;
composed they divide by the steps twice, so FedNova refuses C. EFL's adaptive coefficient E·p^k/s_τ^k IS
Scheme C, so EFL refuses A and B. EFL sends the compressed global update to the round's participants only
(Algorithm 1), unless `broadcast: all`.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from hetfl.algorithms import make_algorithm
from hetfl.config import ConfigError, validate_config
from hetfl.data.quadratic import build_quadratic
from hetfl.engine.runner import TrainSettings, train
from hetfl.models.quadratic import Quadratic

A, B = np.array([1.0, 2.0]), np.array([1.0, 5.0])  # F1 = (x − 1)², F2 = 2(x − 5)², x* = 11/3
FED = build_quadratic(tuple(A), tuple(B))
FULL, DONE, ETA, ROUNDS = 10, np.array([3, 10]), 0.002, 3000


def settle(name: str, scheme: str) -> float:
    """x after 3000 rounds, devices completing 3 and 10 of their 10 steps every round, η = 0.002."""
    fractions = np.tile(DONE / FULL, (ROUNDS, 1))
    cfg = TrainSettings(scheme, 1, 1, ETA, ROUNDS, eval_every=ROUNDS, lr_schedule="constant",
                        local_steps=(FULL, FULL))
    res = train(Quadratic(), FED, fractions, cfg, algorithm=make_algorithm(name))
    return [v for _, m, v in res.records if m == "x"][-1]


def fixed_point(weights: np.ndarray) -> float:
    """x with Σ_i w_i (y_i − x) = 0, y_i − x = c_i (b_i − x), c_i = 1 − (1 − 2a_iη)^τ_i (lecture notes)."""
    c = weights * (1 - (1 - 2 * A * ETA) ** DONE)
    return float(c @ B / c.sum())


def test_each_step_correction_alone_removes_the_bias():
    # Scheme C (E/s = 10/3 and 1) and FedNova (τ_eff/τ_i) both weight device i by 1/τ_i: the same point,
    # 3.638 (11/3 up to O(ητ)); FedAvg under B weights by nothing and lands at 4.46
    x_nova_b, x_avg_c, x_avg_b = settle("fednova", "B"), settle("fedavg", "C"), settle("fedavg", "B")
    one_over_tau = fixed_point(1 / DONE)
    assert one_over_tau == pytest.approx(3.6382, abs=1e-4)
    assert x_nova_b == pytest.approx(one_over_tau, abs=1e-4)
    assert x_avg_c == pytest.approx(one_over_tau, abs=1e-4)
    assert abs(x_nova_b - 11 / 3) < 0.03
    assert x_avg_b == pytest.approx(fixed_point(np.ones(2)), abs=1e-4) and x_avg_b > 4.4
    # composed, the steps would divide twice: the 1/τ_i² point 2.47 that main reached (issue 11, item 1)
    assert fixed_point(1 / DONE ** 2) == pytest.approx(2.4702, abs=1e-3)


@pytest.mark.parametrize(("name", "scheme"), [("fednova", "C"), ("efl", "A"), ("efl", "B")])
def test_the_engine_refuses_a_double_or_missing_step_correction(name, scheme):
    with pytest.raises(ValueError, match=rf"'scheme' has value \"{scheme}\".*{name}"):
        settle(name, scheme)


def _config(algorithms, schemes):
    exp = {"table": "none", "dataset": "quadratic", "settings": {"Q": {}}, "model": "quadratic",
           "algorithms": algorithms, "schemes": schemes, "local_steps": [2, 10], "lr_schedule": "constant",
           "num_traces": [1], "seeds": [0]}
    return {"experiments": {"q": copy.deepcopy(exp)}}


@pytest.mark.parametrize(("algorithms", "schemes", "value", "algorithm", "allowed"), [
    (["fedavg", "fednova"], ["B", "C"], "C", "fednova", "allowed: A, B"),
    (["efl"], ["A"], "A", "efl", "allowed: C"),
    (["fedavg", "efl"], ["B", "C"], "B", "efl", "allowed: C"),
])
def test_validation_refuses_the_combination_naming_key_value_and_allowed(algorithms, schemes, value,
                                                                         algorithm, allowed):
    with pytest.raises(ConfigError) as err:
        validate_config(_config(algorithms, schemes))
    msg = str(err.value)
    assert f"config key 'experiments.q.schemes' has value \"{value}\"" in msg
    assert f"with algorithm {algorithm} (" in msg and msg.endswith(allowed)


def test_validation_accepts_what_composes():
    validate_config(_config(["fedavg", "fednova"], ["A", "B"]))
    validate_config(_config(["efl"], ["C"]))


# -- EFL's broadcast (item 4) ---------------------------------------------------------------------------
def _efl_trajectory(broadcast: str) -> list[float]:
    """EFL without elastic term or compression (λ = 0, ST = identity), 2 steps per round, device 1
    inactive in round 2; x of the server's model w_G after each round."""
    fractions = np.array([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    cfg = TrainSettings("C", 1, 1, 0.1, 3, lr_schedule="constant", local_steps=(2, 2))
    alg = make_algorithm("efl", lam=0.0, compress=False, broadcast=broadcast)
    res = train(Quadratic(), FED, fractions, cfg, algorithm=alg)
    return [v for _, m, v in res.records if m == "x"]


def _sgd(i: int, x: float, steps: int = 2, lr: float = 0.1) -> float:
    for _ in range(steps):
        x -= lr * 2 * A[i] * (x - B[i])
    return x


def test_efl_sends_the_global_update_to_participants_only():
    # round 1: both start at 0;  Δ_G1 = ½Δ_0 + ½Δ_1
    w1 = 0.5 * _sgd(0, 0.0) + 0.5 * _sgd(1, 0.0)
    # round 2: only device 0 (Scheme C weight p^0·E/s = ½); it receives Δ_G1 and starts at w1
    w2 = w1 + 0.5 * (_sgd(0, w1) - w1)
    # round 3: device 0 receives Δ_G2 and starts at w2; device 1 last held 0 and missed Δ_G1: it starts at
    # 0 + Δ_G2 (Algorithm 1: ω^k_τE = ω^k_(τ−1)E + Δω^G_(τ−1)E)
    s1 = 0.0 + (w2 - w1)
    w3 = w2 + 0.5 * (_sgd(0, w2) - w2) + 0.5 * (_sgd(1, s1) - s1)
    np.testing.assert_allclose(_efl_trajectory("participants"), [w1, w2, w3], rtol=1e-5)
    # broadcast to every device: device 1 holds w2 like device 0
    w3_all = w2 + 0.5 * (_sgd(0, w2) - w2) + 0.5 * (_sgd(1, w2) - w2)
    np.testing.assert_allclose(_efl_trajectory("all"), [w1, w2, w3_all], rtol=1e-5)
    assert abs(w3 - w3_all) > 0.1
