"""Every algorithm pinned to its equations on the quadratic test bed of the lecture notes (seed 001).

Clients F_i(x) = a_i (x − b_i)² with a = (1, 2), b = (1, 5), exact gradients 2a_i(x − b_i), equal data
weights p = (½, ½). Each one-round test writes the paper's update as a scalar recursion or closed form
and compares the engine's result with it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hetfl.algorithms import ALGORITHM_NAMES, CATALOG, make_algorithm
from hetfl.algorithms.base import RoundInfo, Task
from hetfl.algorithms.fednova import normalizer
from hetfl.data.quadratic import build_quadratic, optimum
from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import minibatch_indices
from hetfl.engine.oracle import local_sgd_reference
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model
from hetfl.models.quadratic import Quadratic

A, B = (1.0, 2.0), (1.0, 5.0)
FED = build_quadratic(A, B)
MODEL = Quadratic()


def grad(i: int, y: float) -> float:
    return 2 * A[i] * (y - B[i])


def local(i: int, x0: float, steps: int, lr: float, extra=lambda y: 0.0) -> float:
    """Client i's SGD from x0: y ← y − η (∇F_i(y) + extra(y))."""
    y = x0
    for _ in range(steps):
        y = y - lr * (grad(i, y) + extra(y))
    return y


def one_round(alg, x0: float, steps, lr: float, state=None, weights=None, trainer=local_sgd, fed=FED,
              model=MODEL, params=None):
    """One round through the engine's hooks (what runner.train does), from a given state."""
    x, y = torch.from_numpy(fed.x_train), torch.from_numpy(fed.y_train)
    alg.setup(Task(model, x, y, fed.train_offsets))
    params = params if params is not None else [torch.tensor([x0])]
    state = alg.init_state(params, fed.num_devices) if state is None else state
    clients = np.arange(fed.num_devices)
    done = np.asarray(steps, dtype=np.int64)
    w = fed.p if weights is None else np.asarray(weights, dtype=np.float64)
    # clients are incomplete (done < full): algorithms must use the steps actually done
    info = RoundInfo(tau=1, lr=lr, clients=clients, done=done, full=done + 2, weights=w, p=fed.p)
    ctx = alg.client_context(state, params, info)
    idx = minibatch_indices(fed.train_offsets, clients, done, 1, 0, 1)
    start = alg.client_start(state, params, info)
    finals = trainer(alg.local_model(model), params, x, y, idx, done, lr, correction=alg.correct, ctx=ctx,
                     start=start)
    new, state, metrics = alg.aggregate(state, params, finals, info)
    return new, state, metrics, finals


def scalar(t) -> float:
    return float(t.reshape(-1)[0])


def col(t) -> np.ndarray:
    return t.reshape(len(t), -1)[:, 0].double().numpy()


X0, LR, STEPS = 0.0, 0.1, (2, 3)


# -- one round of each algorithm against its equation ----------------------------------------------------
def test_fedavg_one_round():
    # w ← w + Σ p_τ^k (y_k − w), y_k = b_k + (1 − 2a_kη)^τ_k (x0 − b_k)
    new, _, m, _ = one_round(make_algorithm("fedavg"), X0, STEPS, LR, weights=[0.5, 0.8])  # Scheme C-like
    y = [B[i] + (1 - 2 * A[i] * LR) ** STEPS[i] * (X0 - B[i]) for i in range(2)]
    assert scalar(new[0]) == pytest.approx(X0 + 0.5 * (y[0] - X0) + 0.8 * (y[1] - X0), rel=1e-5)
    assert m["bytes_up"] == 2 * 4 and m["bytes_down"] == 2 * 4 and m["nonzeros_up"] == 2


def test_fedavgm_one_round_with_server_momentum():
    # m ← βm + Σ p_τ^k Δ_k;  w ← w + η_s m.  From m = 0.4, β = 0.5, η_s = 2 and the weights (0.5, 0.8):
    # y = (1 − 0.8², 5 − 5·0.6³) = (0.36, 3.92);  u = 0.5·0.36 + 0.8·3.92 = 3.316;
    # m = 0.2 + 3.316 = 3.516;  w = 0 + 2·3.516 = 7.032
    alg = make_algorithm("fedavgm", beta=0.5, server_lr=2.0)
    new, st, m, _ = one_round(alg, X0, STEPS, LR, state={"m": [torch.tensor([0.4])]}, weights=[0.5, 0.8])
    assert scalar(st["m"][0]) == pytest.approx(3.516, rel=1e-5)
    assert scalar(new[0]) == pytest.approx(7.032, rel=1e-5)
    assert m["bytes_up"] == 2 * 4  # Δ only: the momentum lives on the server
    # β = 0, η_s = 1 is FedAvg
    plain, *_ = one_round(make_algorithm("fedavgm", beta=0.0), X0, STEPS, LR, weights=[0.5, 0.8])
    fedavg, *_ = one_round(make_algorithm("fedavg"), X0, STEPS, LR, weights=[0.5, 0.8])
    assert scalar(plain[0]) == pytest.approx(scalar(fedavg[0]), rel=1e-6)
    # the first round starts from init_state, m = 0 (an audit set it to ones and no test noticed):
    # m = 0.5·0 + 3.316, w = 2·3.316
    first, st, *_ = one_round(alg, X0, STEPS, LR, weights=[0.5, 0.8])
    assert scalar(st["m"][0]) == pytest.approx(3.316, rel=1e-5)
    assert scalar(first[0]) == pytest.approx(6.632, rel=1e-5)


def apfl_local(i: int, w: float, v: float, a: float, steps: int, lr: float) -> tuple[float, float, float]:
    """APFL Algorithm 1 on client i, all three updates from the values before the step:
    w ← w − η∇F_i(w);  v ← v − η α ∇F_i(v̄);  α ← clip(α − η ⟨v − w, ∇F_i(v̄)⟩, 0, 1),  v̄ = αv + (1 − α)w."""
    for _ in range(steps):
        g = grad(i, a * v + (1 - a) * w)
        w, v, a = w - lr * grad(i, w), v - lr * a * g, min(max(a - lr * (v - w) * g, 0.0), 1.0)
    return w, v, a


def test_apfl_one_round_personal_model_and_adaptive_alpha():
    alg = make_algorithm("apfl")
    state = {"v": [torch.tensor([[3.0], [1.0]])], "alpha": torch.tensor([[0.5], [0.25]])}
    new, st, m, _ = one_round(alg, X0, (1, 2), LR, state=state)
    # client 0 (a = 1, b = 1), one step from w = 0, v = 3, α = .5: v̄ = 1.5, ∇F(v̄) = 1, ∇F(w) = −2
    #   w = 0.2, v = 3 − .1·.5·1 = 2.95, α = .5 − .1·(3 − 0)·1 = 0.2
    # client 1 (a = 2, b = 5), from w = 0, v = 1, α = .25: v̄ = .25, ∇F(v̄) = −19, ∇F(w) = −20
    #   step 1: w = 2, v = 1.475, α = .25 + 1.9 → clipped to 1
    #   step 2: v̄ = v = 1.475, ∇F(v̄) = −14.1, ∇F(w) = −12:
    #           w = 3.2, v = 2.885, α = 1 − .1·(1.475 − 2)(−14.1) = .25975
    expect = [(0.2, 2.95, 0.2), (3.2, 2.885, 0.25975)]
    assert [apfl_local(0, X0, 3.0, 0.5, 1, LR), apfl_local(1, X0, 1.0, 0.25, 2, LR)] == [
        pytest.approx(e) for e in expect]
    np.testing.assert_allclose(col(st["v"][0]), [2.95, 2.885], rtol=1e-5)
    np.testing.assert_allclose(st["alpha"][:, 0].numpy(), [0.2, 0.25975], rtol=1e-5)
    assert scalar(new[0]) == pytest.approx(0.5 * 0.2 + 0.5 * 3.2, rel=1e-6)  # the mean of the w_k: 1.7
    # each device is scored with α_k v_k + (1 − α_k) w: .2·2.95 + .8·1.7 = 1.95; .25975·2.885 + .74025·1.7
    np.testing.assert_allclose(col(alg.client_models(st, new)[0]), [1.95, 2.00780375], rtol=1e-5)
    assert m["bytes_up"] == 2 * 4 and m["alpha_mean"] == pytest.approx((0.2 + 0.25975) / 2, rel=1e-5)
    # with α fixed (adaptive false) only v and w move
    state = {"v": [torch.tensor([[3.0], [1.0]])], "alpha": torch.tensor([[0.5], [0.25]])}
    _, fixed, *_ = one_round(make_algorithm("apfl", adaptive=False), X0, (1, 2), LR, state=state)
    np.testing.assert_allclose(fixed["alpha"][:, 0].numpy(), [0.5, 0.25])


def test_fedamp_one_round_attention_cloud_models_and_prox():
    alg = make_algorithm("fedamp", alpha_k=0.5, sigma=2.0, lam=0.3)
    state = {"w": [torch.tensor([[1.0], [3.0]])], "seen": torch.tensor([True, True])}
    new, st, m, _ = one_round(alg, X0, STEPS, LR, state=state)
    # Eq. 7: ξ_01 = ξ_10 = (α_k/σ) exp(−‖w_0 − w_1‖²/σ) = .25·e^(−2) = .0338338; ξ_ii = 1 − ξ_01
    #   u_0 = .966166·1 + .0338338·3 = 1.0676676,  u_1 = .0338338·1 + .966166·3 = 2.9323324
    xi = 0.25 * math.exp(-2.0)
    u = [(1 - xi) * 1.0 + xi * 3.0, xi * 1.0 + (1 - xi) * 3.0]
    assert u == [pytest.approx(1.0676676), pytest.approx(2.9323324)]
    # Eq. 8 by local SGD from u_i: y ← y − η(∇F_i(y) + (λ/α_k)(y − u_i)), λ/α_k = 0.6
    y = [local(i, u[i], STEPS[i], LR, lambda yy, i=i: 0.6 * (yy - u[i])) for i in range(2)]
    assert y == [pytest.approx(1.0441193), pytest.approx(4.4471884)]
    np.testing.assert_allclose(col(st["w"][0]), y, rtol=1e-5)
    np.testing.assert_allclose(col(alg.client_models(st, new)[0]), y, rtol=1e-5)  # each scored by its own
    assert scalar(new[0]) == pytest.approx(np.mean(y), rel=1e-5)  # pooled metrics: the p-weighted mean
    assert m["fedamp_self_weight"] == pytest.approx(1 - xi) and m["fedamp_clipped"] == 0
    # start "own": the same local objective from the device's own w_i
    own, st_own, *_ = one_round(make_algorithm("fedamp", alpha_k=0.5, sigma=2.0, lam=0.3, start="own"), X0,
                                STEPS, LR, state={"w": [torch.tensor([[1.0], [3.0]])],
                                                  "seen": torch.tensor([True, True])})
    y_own = [local(i, (1.0, 3.0)[i], STEPS[i], LR, lambda yy, i=i: 0.6 * (yy - u[i])) for i in range(2)]
    np.testing.assert_allclose(col(st_own["w"][0]), y_own, rtol=1e-5)


def test_fedamp_weights_before_any_report_and_when_the_self_weight_would_be_negative():
    from hetfl.algorithms.fedamp import attention_weights

    models = [torch.tensor([[1.0], [3.0], [3.5]])]
    # nobody has reported: no neighbours, u_i = w_i
    xi, clipped = attention_weights(models, np.array([0, 1]), torch.tensor([False] * 3), 0.5, 2.0, (True,))
    np.testing.assert_allclose(xi.numpy(), [[1, 0, 0], [0, 1, 0]])
    # device 2 has not reported: it gets no weight; α_k = 20: 10·e^(−2) = 1.353 > 1 → scaled to 1, ξ_ii = 0
    xi, clipped = attention_weights(models, np.array([0, 1]), torch.tensor([True, True, False]), 20.0, 2.0,
                                    (True,))
    np.testing.assert_allclose(xi.numpy(), [[0, 1, 0], [1, 0, 0]], atol=1e-12)
    assert clipped.tolist() == [True, True]


def test_vrlsgd_one_round_correction_and_its_update():
    state = {"delta": [torch.tensor([[0.3], [-0.2]])]}
    new, st, m, _ = one_round(make_algorithm("vrlsgd"), X0, STEPS, LR, state=state)
    # local: y ← y − η(∇F_k(y) − Δ_k): y = (.414, 3.8808); x̂ = mean y = 2.1474
    y = [local(i, X0, STEPS[i], LR, lambda _y, i=i: -(0.3, -0.2)[i]) for i in range(2)]
    assert y == [pytest.approx(0.414), pytest.approx(3.8808)]
    assert scalar(new[0]) == pytest.approx(2.1474, rel=1e-5)
    # Δ_k ← Δ_k + d_k − d̄, d_k = (x̂_old − y_k)/(τ_k η) = (−2.07, −12.936), d̄ = −7.503: Δ = (5.733, −5.633)
    np.testing.assert_allclose(col(st["delta"][0]), [5.733, -5.633], rtol=1e-4)
    assert m["bytes_up"] == 2 * 4  # no extra communication
    # with equal steps this is the paper's Δ_k ← Δ_k + (x̂ − x_k)/(kγ)
    new, st, *_ = one_round(make_algorithm("vrlsgd"), X0, (3, 3), LR, state=state)
    y = [local(i, X0, 3, LR, lambda _y, i=i: -(0.3, -0.2)[i]) for i in range(2)]
    xhat = np.mean(y)
    paper = [(0.3, -0.2)[i] + (xhat - y[i]) / (3 * LR) for i in range(2)]
    np.testing.assert_allclose(col(st["delta"][0]), paper, rtol=1e-5)


def test_vrlsgd_and_fedgate_period_full_divide_by_a_complete_rounds_steps():
    """period: full uses τ_k = a complete round's steps (one_round's full = done + 2: 4 and 5 for VRL-SGD's
    2 and 3 steps done, 5 for FedGATE's 3) where the default divides by the steps done."""
    state = {"delta": [torch.tensor([[0.3], [-0.2]])]}
    _, st, *_ = one_round(make_algorithm("vrlsgd", period="full"), X0, STEPS, LR, state=state)
    y = [local(i, X0, STEPS[i], LR, lambda _y, i=i: -(0.3, -0.2)[i]) for i in range(2)]
    d = [(X0 - y[i]) / ((STEPS[i] + 2) * LR) for i in range(2)]  # (−1.035, −7.7616), mean −4.3983
    np.testing.assert_allclose(col(st["delta"][0]), [(0.3, -0.2)[i] + d[i] - np.mean(d) for i in range(2)],
                               rtol=1e-5)
    np.testing.assert_allclose(col(st["delta"][0]), [3.6633, -3.5633], rtol=1e-4)
    _, st, *_ = one_round(make_algorithm("fedgate", server_lr=0.5, period="full"), X0, (3, 3), LR,
                          state=state)
    y = [local(i, X0, 3, LR, lambda _y, i=i: -(0.3, -0.2)[i]) for i in range(2)]
    big_delta = [(X0 - y[i]) / LR for i in range(2)]
    np.testing.assert_allclose(col(st["delta"][0]),
                               [(0.3, -0.2)[i] + (big_delta[i] - np.mean(big_delta)) / 5 for i in range(2)],
                               rtol=1e-5)


def test_vrlsgd_is_scaffold_option_ii_when_every_device_takes_part(tiny_fed):
    """SCAFFOLD's correction s_k = c − c_k obeys s_k ← s_k + d̄ − d_k when all devices report (c becomes
    Σ p^k d_k), VRL-SGD's −Δ_k the same recursion: with everyone in every round (incomplete or not) the two
    are one algorithm; when some device sits a round out, SCAFFOLD's c averages over the round only."""
    model = make_model("logreg", 60, 10)
    cfg = TrainSettings(scheme="C", local_epochs=2, batch_size=10, eta0=0.5, rounds=3, seed=0)

    def params(name, fractions):
        return train(model, tiny_fed, fractions, cfg, algorithm=make_algorithm(name)).params

    everyone = np.array([[1.0, 0.3, 0.7, 1.0], [0.5, 1.0, 1.0, 0.2], [1.0, 1.0, 0.4, 1.0]])
    for a, b in zip(params("vrlsgd", everyone), params("scaffold", everyone), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    some_out = everyone.copy()
    some_out[0, 1] = 0.0
    vrl, scaffold = params("vrlsgd", some_out), params("scaffold", some_out)
    assert not all(torch.allclose(a, b, atol=1e-4) for a, b in zip(vrl, scaffold, strict=True))


def test_fedgate_one_round_gradient_tracking_server_step_and_quantised_upload():
    state = {"delta": [torch.tensor([[0.3], [-0.2]])]}
    new, st, m, _ = one_round(make_algorithm("fedgate", server_lr=0.5), X0, (3, 3), LR, state=state)
    # local d = ∇F_j − δ_j; a one-entry tensor is quantised exactly (its bucket norm is the entry itself)
    y = [local(i, X0, 3, LR, lambda _y, i=i: -(0.3, -0.2)[i]) for i in range(2)]
    # server: Δ = mean_j (w − w_j)/η;  w ← w − ηγΔ = w + γ·mean(y_j − w)
    big_delta = [(X0 - y[i]) / LR for i in range(2)]
    assert scalar(new[0]) == pytest.approx(X0 - LR * 0.5 * np.mean(big_delta), rel=1e-5)
    # δ_j ← δ_j + (Δ_j − Δ)/τ
    np.testing.assert_allclose(col(st["delta"][0]),
                               [(0.3, -0.2)[i] + (big_delta[i] - np.mean(big_delta)) / 3 for i in range(2)],
                               rtol=1e-5)
    assert m["bytes_up"] == 2 * (1 * 8 + 32) / 8  # 8 bits (sign + 7-bit level) and one float32 norm
    assert m["bytes_down"] == 2 * 2 * 4  # w and the average Δ


def test_qsgd_is_unbiased_on_its_grid_reproducible_and_counted():
    from hetfl.engine.comm import qsgd_bits, qsgd_quantize

    # v = (3, 4), ‖v‖ = 5, s = 1: entry i is 5·sign with probability |v_i|/5, else 0
    v = torch.tensor([[3.0, -4.0]]).repeat(20000, 1)
    q = qsgd_quantize(v, levels=1, bucket=2, generator=torch.Generator().manual_seed(0))
    assert set(q[:, 0].tolist()) == {0.0, 5.0} and set(q[:, 1].tolist()) == {0.0, -5.0}
    np.testing.assert_allclose(q.double().mean(0).numpy(), [3.0, -4.0], atol=0.06)
    again = qsgd_quantize(v, levels=1, bucket=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(q, again)
    # buckets: (3, 4 | 12 + padding) quantise with norms 5 and 12; s = 4 levels: 12 → 12 exactly
    one = qsgd_quantize(torch.tensor([[3.0, 4.0, 12.0]]), 4, 2, torch.Generator().manual_seed(1))
    assert one[0, 2] == 12.0 and all(float(x) * 4 / 5 == round(float(x) * 4 / 5) for x in one[0, :2])
    assert qsgd_bits(1000, 127, 512) == 1000 * 8 + 2 * 32 and qsgd_bits(3, 1, 2) == 3 * 2 + 2 * 32


@pytest.mark.parametrize("name,hp", [("apfl", {}), ("fedamp", {}), ("fedgate", {}), ("vrlsgd", {}),
                                     ("fedavgm", {"beta": 0.5})])
@pytest.mark.parametrize("scheme", ["A", "B", "C"])
def test_new_algorithms_run_under_every_scheme_with_inactive_devices(tiny_fed, name, hp, scheme):
    model = make_model("logreg", 60, 10)
    # device 3 never trains; the others are inactive, incomplete or complete in turn
    fractions = np.array([[1.0, 0.5, 0.0, 0.0], [0.0, 1.0, 0.3, 0.0], [0.6, 0.0, 1.0, 0.0],
                          [1.0, 1.0, 1.0, 0.0]])
    cfg = TrainSettings(scheme=scheme, local_epochs=2, batch_size=10, eta0=0.5, rounds=4, seed=0)
    alg = make_algorithm(name, **hp)
    res = train(model, tiny_fed, fractions, cfg, algorithm=alg)
    assert res.status == "ok" and all(bool(torch.isfinite(p).all()) for p in res.params)
    values = [v for _, k, v in res.records if k in ("mean_client_accuracy", "train_loss", "test_loss")]
    assert len(values) == 12 and all(math.isfinite(v) for v in values)


@pytest.mark.parametrize("prox_step", ["gradient", "proximal"])
def test_fedprox_one_round(prox_step):
    mu = 3.0
    # gradient:  y ← y − η(2a(y − b) + μ(y − x0));  proximal: the same divided by (1 + ημ)
    div = 1.0 if prox_step == "gradient" else 1 + LR * mu
    y = []
    for i in range(2):
        yy = X0
        for _ in range(STEPS[i]):
            yy -= LR * (grad(i, yy) + mu * (yy - X0)) / div
        y.append(yy)
    new, *_ = one_round(make_algorithm("fedprox", mu=mu, prox_step=prox_step), X0, STEPS, LR)
    assert scalar(new[0]) == pytest.approx(np.mean(y), rel=1e-5)


def test_scaffold_one_round_option_ii_with_actual_steps():
    alg = make_algorithm("scaffold", global_lr=0.7)
    c, ck = 0.3, (0.1, 0.5)
    state = {"c": [torch.tensor([c])], "ck": [torch.tensor([[ck[0]], [ck[1]]])]}
    new, st, m, _ = one_round(alg, X0, STEPS, LR, state=state)
    # y ← y − η(∇F_k(y) − c_k + c);  c_k⁺ = c_k − c + (x − y_k)/(K_k η);  x ← x + η_g mean Δy;
    # c ← c + (|S|/N) mean Δc = c + ½ Σ Δc
    y = [local(i, X0, STEPS[i], LR, lambda _y, i=i: c - ck[i]) for i in range(2)]
    ck_new = [ck[i] - c + (X0 - y[i]) / (STEPS[i] * LR) for i in range(2)]
    assert scalar(new[0]) == pytest.approx(X0 + 0.7 * np.mean([yy - X0 for yy in y]), rel=1e-5)
    np.testing.assert_allclose(col(st["ck"][0]), ck_new, rtol=1e-5)
    assert scalar(st["c"][0]) == pytest.approx(c + 0.5 * sum(ck_new[i] - ck[i] for i in range(2)), rel=1e-5)
    assert m["bytes_up"] == 2 * 2 * 4  # Δy and Δc


def test_fednova_one_round_plain_sgd():
    new, _, m, _ = one_round(make_algorithm("fednova"), X0, STEPS, LR)
    # x ← x + τ_eff Σ p_i Δ_i/τ_i,  τ_eff = Σ p_i τ_i
    y = [local(i, X0, STEPS[i], LR) for i in range(2)]
    tau_eff = 0.5 * STEPS[0] + 0.5 * STEPS[1]
    expect = X0 + tau_eff * sum(0.5 * (y[i] - X0) / STEPS[i] for i in range(2))
    assert scalar(new[0]) == pytest.approx(expect, rel=1e-5)
    assert m["tau_eff"] == pytest.approx(tau_eff)


def test_fednova_one_round_momentum_and_prox():
    rho, mu = 0.5, 2.0
    new, *_ = one_round(make_algorithm("fednova", momentum=rho, mu=mu), X0, STEPS, LR)
    # buf ← ρ buf + g;  y ← y − η (buf + μ(y − x0));  a_i from the released code's recursion
    ys, a = [], []
    for i in range(2):
        yy, buf, counter, ai = X0, 0.0, 0.0, 0.0
        for _ in range(STEPS[i]):
            buf = rho * buf + grad(i, yy)
            yy -= LR * (buf + mu * (yy - X0))
            counter = counter * rho + 1
            ai = (ai + counter) * (1 - LR * mu) + 1
        ys.append(yy)
        a.append(ai)
    tau_eff = 0.5 * (a[0] + a[1])
    expect = X0 + tau_eff * sum(0.5 * (ys[i] - X0) / a[i] for i in range(2))
    assert scalar(new[0]) == pytest.approx(expect, rel=1e-5)


def test_fednova_normalises_weights_that_do_not_sum_to_one():
    """Only active devices are clients: under Scheme B with an inactive device their p^k sum below 1.
    FedNova's Σ p_i Δ_i/a_i and τ_eff use p over the clients, renormalised (every other test had p = ½, ½)."""
    new, _, m, _ = one_round(make_algorithm("fednova"), X0, STEPS, LR, weights=[0.3, 0.2])
    w = [0.6, 0.4]
    y = [local(i, X0, STEPS[i], LR) for i in range(2)]
    tau_eff = w[0] * STEPS[0] + w[1] * STEPS[1]
    assert m["tau_eff"] == pytest.approx(tau_eff)
    expect = X0 + tau_eff * sum(w[i] * (y[i] - X0) / STEPS[i] for i in range(2))
    assert scalar(new[0]) == pytest.approx(expect, rel=1e-5)


def test_fednova_official_code_tau_eff_counts_steps_under_a_proximal_term():
    """tau_eff: official_code (the released code with μ ≠ 0): τ_eff = Σ p_i τ_i, the normaliser a_i still
    divides Δ_i; the paper's (the default) τ_eff = Σ p_i a_i."""
    mu = 2.0
    a = normalizer(np.asarray(STEPS), LR, mu=mu)
    y = [local(i, X0, STEPS[i], LR, lambda yy: mu * (yy - X0)) for i in range(2)]
    for tau_eff_reading, tau_eff in (("official_code", 0.5 * sum(STEPS)), ("paper", 0.5 * float(a.sum()))):
        new, _, m, _ = one_round(make_algorithm("fednova", mu=mu, tau_eff=tau_eff_reading), X0, STEPS, LR)
        assert m["tau_eff"] == pytest.approx(tau_eff)
        expect = X0 + tau_eff * sum(0.5 * (y[i] - X0) / a[i] for i in range(2))
        assert scalar(new[0]) == pytest.approx(expect, rel=1e-5)


def test_fednova_normalizer_closed_forms():
    steps, lr = np.array([1, 4, 9]), 0.1
    np.testing.assert_allclose(normalizer(steps, lr), steps)
    rho = 0.9  # a = Σ_{t=1..τ} (1 − ρ^t)/(1 − ρ)
    mom = [sum((1 - rho ** t) / (1 - rho) for t in range(1, s + 1)) for s in steps]
    np.testing.assert_allclose(normalizer(steps, lr, momentum=rho), mom)
    mu = 0.5  # a = [1 − (1 − ημ)^τ]/(ημ)
    np.testing.assert_allclose(normalizer(steps, lr, mu=mu), (1 - (1 - lr * mu) ** steps) / (lr * mu))


def test_feddyn_one_round():
    alpha, g, h = 0.5, (0.2, -0.4), -0.1
    state = {"h": [torch.tensor([h])], "g": [torch.tensor([[g[0]], [g[1]]])]}
    new, st, *_ = one_round(make_algorithm("feddyn", alpha=alpha), X0, STEPS, LR, state=state)
    # local gradient ∇F_k(θ) − g_k + α(θ − θ^{t−1});  g_k ← g_k − αΔ_k;  h ← h − α/m Σ Δ_k;
    # θ ← mean θ_k − h/α
    y = [local(i, X0, STEPS[i], LR, lambda yy, i=i: -g[i] + alpha * (yy - X0)) for i in range(2)]
    h_new = h - alpha / 2 * sum(yy - X0 for yy in y)
    assert scalar(new[0]) == pytest.approx(np.mean(y) - h_new / alpha, rel=1e-5)
    np.testing.assert_allclose(col(st["g"][0]), [g[i] - alpha * (y[i] - X0) for i in range(2)], rtol=1e-5)
    assert scalar(st["h"][0]) == pytest.approx(h_new, rel=1e-5)


def test_feddyn_averages_over_the_clients_with_renormalised_weights():
    """θ ← Σ p̃_k θ_k − h/α with p̃ the clients' weights renormalised (Scheme C's E/s makes them sum above 1);
    h ← h − α Σ p^k Δ_k keeps the unrenormalised data weights p (here ½, ½)."""
    alpha, h = 0.5, -0.1
    state = {"h": [torch.tensor([h])], "g": [torch.tensor([[0.0], [0.0]])]}
    new, st, *_ = one_round(make_algorithm("feddyn", alpha=alpha), X0, STEPS, LR, state=state,
                            weights=[0.5, 0.8])
    y = [local(i, X0, STEPS[i], LR, lambda yy: alpha * (yy - X0)) for i in range(2)]
    h_new = h - alpha * 0.5 * sum(yy - X0 for yy in y)
    assert scalar(st["h"][0]) == pytest.approx(h_new, rel=1e-5)
    assert scalar(new[0]) == pytest.approx((0.5 * y[0] + 0.8 * y[1]) / 1.3 - h_new / alpha, rel=1e-5)


def test_fedcurv_one_round_excludes_own_terms_and_sums_fisher():
    lam, u, v = 0.25, (0.5, 1.5), (0.2, 3.0)
    state = {"u": [torch.tensor([[u[0]], [u[1]]])], "v": [torch.tensor([[v[0]], [v[1]]])]}
    new, st, m, _ = one_round(make_algorithm("fedcurv", lam=lam), X0, STEPS, LR, state=state)
    # client k: + 2λ[(u − u_k) y − (v − v_k)] = 2λ[u_j y − v_j], j the other client
    y = [local(i, X0, STEPS[i], LR, lambda yy, i=i: 2 * lam * (u[1 - i] * yy - v[1 - i])) for i in range(2)]
    assert scalar(new[0]) == pytest.approx(np.mean(y), rel=1e-5)
    # Fisher after training: the (single) sample's squared gradient; u_k = F_k, v_k = F_k y_k
    fisher = [grad(i, y[i]) ** 2 for i in range(2)]
    np.testing.assert_allclose(col(st["u"][0]), fisher, rtol=1e-5)
    np.testing.assert_allclose(col(st["v"][0]), [fisher[i] * y[i] for i in range(2)], rtol=1e-5)
    assert m["bytes_up"] == 2 * 3 * 4  # Δ, F_k, F_k w_k


def test_fedfor_one_round_penalises_only_moves_against_the_last_update():
    alpha = 0.5
    prev, x1 = 1.0, 0.0  # w^{t−2}, w^{t−1}: the last global update moved −1, so d = w^{t−2} − w^{t−1} = 1
    alg = make_algorithm("fedfor", alpha=alpha)
    new, st, m, _ = one_round(alg, x1, STEPS, LR, state={"prev": [torch.tensor([prev])]})
    # + (α/η) d·1[d (y − w^{t−1}) > 0]: both clients move up (b > 0), against the last update
    d = prev - x1
    y = [local(i, x1, STEPS[i], LR, lambda yy: alpha / LR * d * (d * (yy - x1) > 0)) for i in range(2)]
    assert scalar(new[0]) == pytest.approx(np.mean(y), rel=1e-5)
    assert scalar(st["prev"][0]) == x1
    assert m["bytes_down"] == 2 * 2 * 4  # w^{t−1} and w^{t−2}
    # the first round has no w^{t−2}: plain SGD
    first, *_ = one_round(make_algorithm("fedfor", alpha=alpha), X0, STEPS, LR)
    plain, *_ = one_round(make_algorithm("fedavg"), X0, STEPS, LR)
    assert scalar(first[0]) == scalar(plain[0])


def test_efl_one_round_elastic_term_and_scheme_weights():
    lam, u, v = 0.2, (0.5, 1.5), (0.2, 3.0)
    alg = make_algorithm("efl", lam=lam)
    state = alg.init_state([torch.tensor([X0])], 2)
    state["u"], state["v"] = [torch.tensor([[u[0]], [u[1]]])], [torch.tensor([[v[0]], [v[1]]])]
    w = [0.5 * 3 / 2, 0.5 * 3 / 3]  # Scheme C: E·p^k/s_k with full = 3 steps, done = (2, 3)
    new, st, m, _ = one_round(alg, X0, STEPS, LR, state=state, weights=w)
    # + λ(u y − v) with u = Σ_i u_i, v = Σ_i v_i over ALL devices (own included, Eq. 2-3)
    y = [local(i, X0, STEPS[i], LR, lambda yy: lam * (sum(u) * yy - sum(v))) for i in range(2)]
    # one entry per tensor: ST keeps it exactly, residuals stay 0; Δ_G = Σ p_τ^k Δ_k
    expect = X0 + sum(w[i] * (y[i] - X0) for i in range(2))
    assert scalar(new[0]) == pytest.approx(expect, rel=1e-5)
    assert scalar(alg.global_model(st, new)[0]) == pytest.approx(expect, rel=1e-5)
    np.testing.assert_allclose(col(st["u"][0]), [grad(i, y[i]) ** 2 for i in range(2)], rtol=1e-5)


def test_efl_aggregate_with_compression_and_residuals():
    # four entries, q = 0.25: ST keeps k = max(4·0.25, 1) = 1 entry per client and μ = its magnitude
    alg = make_algorithm("efl", q=0.25)
    params = [torch.zeros(4)]
    state = alg.init_state(params, 2)
    state["rk"] = [torch.tensor([[0.0, 0.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]])]
    finals = [torch.tensor([[1.0, -0.2, 0.1, 0.0], [0.0, 0.3, -2.0, 0.1]])]
    info = RoundInfo(tau=1, lr=0.1, clients=np.array([0, 1]), done=np.array([1, 1]), full=np.array([1, 1]),
                     weights=np.array([0.5, 0.5]), p=np.array([0.5, 0.5]))
    fed = build_quadratic((1, 1, 1, 1), (0, 0, 0, 0))  # a stand-in task: Fisher of a 4-entry model
    alg.setup(Task(_VectorQuadratic(), torch.from_numpy(fed.x_train[:2]), torch.zeros(2, dtype=torch.int64),
                   np.array([0, 1, 2])))
    new, st, m, _ = alg.aggregate(state, params, finals, info) + (None,)
    # client 0: Δ̃ = R + Δ = (1, −.2, .1, .5) → sends (1, 0, 0, 0), keeps (0, −.2, .1, .5)
    # client 1: Δ̃ = (0, .3, −2, .1) → sends (0, 0, −2, 0), keeps (0, .3, 0, .1)
    np.testing.assert_allclose(st["rk"][0].numpy(), [[0, -0.2, 0.1, 0.5], [0, 0.3, 0, 0.1]], atol=1e-7)
    # server: Δ_G = R_G + Σ p Δ̃_sent = (.5, 0, −1, 0) → broadcasts ST = (0, 0, −1, 0), keeps (.5, 0, 0, 0)
    np.testing.assert_allclose(new[0].numpy(), [0, 0, -1, 0], atol=1e-7)
    np.testing.assert_allclose(st["rg"][0].numpy(), [0.5, 0, 0, 0], atol=1e-7)
    np.testing.assert_allclose(alg.global_model(st, new)[0].numpy(), [0.5, 0, -1, 0], atol=1e-7)
    assert m["nonzeros_up"] >= 2  # the two ST entries (plus the Fisher statistics)


class _VectorQuadratic:
    """A 4-entry model with F(w) = Σ_j (w_j − b)² for the EFL aggregate test (only its Fisher is used)."""

    trainable = (True,)

    def grads(self, params, x, y):
        return [2 * (params[0] - x[..., 1:2].mean(dim=1, keepdim=True).reshape(-1, 1))]


@pytest.mark.parametrize("eps", [0.0, 1e-3, 0.5])
def test_fedelasticnet_one_round(eps):
    l1, l2 = 0.3, 0.7
    new, _, m, _ = one_round(make_algorithm("fedelasticnet", lambda1=l1, lambda2=l2, epsilon=eps), X0,
                             STEPS, LR)
    # + λ2(y − x0) + λ1 sign(y − x0);  send Δ with |Δ| ≤ ε zeroed;  x ← x + Σ p Δ̃
    y = [local(i, X0, STEPS[i], LR, lambda yy: l2 * (yy - X0) + l1 * np.sign(yy - X0)) for i in range(2)]
    sent = [(yy - X0) * (abs(yy - X0) > eps) for yy in y]
    assert scalar(new[0]) == pytest.approx(X0 + 0.5 * sum(sent), rel=1e-5, abs=1e-7)
    assert m["nonzeros_up"] == sum(s != 0 for s in sent)


def test_scaffold_elasticnet_one_round():
    l1, l2, eps, c, ck = 0.2, 0.1, 0.45, 0.3, (0.1, 0.5)
    state = {"c": [torch.tensor([c])], "ck": [torch.tensor([[ck[0]], [ck[1]]])]}
    alg = make_algorithm("scaffold_elasticnet", lambda1=l1, lambda2=l2, epsilon=eps)
    new, st, *_ = one_round(alg, X0, STEPS, LR, state=state)
    y = [local(i, X0, STEPS[i], LR, lambda yy, i=i: c - ck[i] + l2 * (yy - X0) + l1 * np.sign(yy - X0))
         for i in range(2)]
    sent = [(yy - X0) * (abs(yy - X0) > eps) for yy in y]
    assert sent[0] == 0 and sent[1] != 0  # ε zeroes client 0's small update
    assert scalar(new[0]) == pytest.approx(X0 + 0.5 * sum(sent), rel=1e-5)
    ck_new = [ck[i] - c + (X0 - y[i]) / (STEPS[i] * LR) for i in range(2)]  # actual y_k, Alg. 2 line 9
    np.testing.assert_allclose(col(st["ck"][0]), ck_new, rtol=1e-5)


def test_feddyn_elasticnet_one_round():
    l1, l2, eps, g, h = 0.05, 0.5, 0.0, (0.2, -0.4), -0.1
    state = {"h": [torch.tensor([h])], "g": [torch.tensor([[g[0]], [g[1]]])]}
    alg = make_algorithm("feddyn_elasticnet", lambda1=l1, lambda2=l2, epsilon=eps)
    new, st, *_ = one_round(alg, X0, STEPS, LR, state=state)
    # Alg. 3: local ∇L − g_k + λ2(θ − θ^{t−1}) + λ1 sign(θ − θ^{t−1});  g_k ← g_k − λ2Δ − λ1 sign Δ;
    # h ← h − λ2/m ΣΔ − λ1/m Σ sign Δ;  θ ← mean θ_k − h/λ2
    y = [local(i, X0, STEPS[i], LR, lambda yy, i=i: -g[i] + l2 * (yy - X0) + l1 * np.sign(yy - X0))
         for i in range(2)]
    d = [yy - X0 for yy in y]
    h_new = h - l2 / 2 * sum(d) - l1 / 2 * sum(np.sign(d))
    assert scalar(new[0]) == pytest.approx(np.mean(y) - h_new / l2, rel=1e-5)
    np.testing.assert_allclose(col(st["g"][0]), [g[i] - l2 * d[i] - l1 * np.sign(d[i]) for i in range(2)],
                               rtol=1e-5)


# -- FedBN: local entries stay on the clients ------------------------------------------------------------
class BNQuadratic:
    """Params [x, s]: F_i(x, s) = a_i (x − b_i)² + (s − b_i)²; s stands for a batch-norm entry."""

    name = "bnquad"
    trainable = (True, True)
    local_mask = (False, True)

    def init_params(self, generator):
        return [torch.zeros(1), torch.zeros(1)]

    def grads(self, params, x, y):
        a, b = x[..., 0], x[..., 1]
        gx = (2 * a * (params[0] - b)).mean(dim=1, keepdim=True)
        gs = (2 * (params[1] - b)).mean(dim=1, keepdim=True)
        return [gx.reshape(params[0].shape), gs.reshape(params[1].shape)]

    def make_module(self):
        return _BNModule()

    def to_module(self, params, module):
        with torch.no_grad():
            module.x.copy_(params[0])
            module.s.copy_(params[1])

    def from_module(self, module):
        return [module.x.detach().clone(), module.s.detach().clone()]

    @staticmethod
    def loss(out, y):
        return out.mean()

    def evaluate(self, params, x, y):
        return {"loss": float((x[:, 0] * (params[0] - x[:, 1]) ** 2).mean())}


class _BNModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.x = torch.nn.Parameter(torch.zeros(1))
        self.s = torch.nn.Parameter(torch.zeros(1))

    def forward(self, f):
        return f[:, 0] * (self.x - f[:, 1]) ** 2 + (self.s - f[:, 1]) ** 2


@pytest.mark.parametrize("trainer", [local_sgd, local_sgd_reference])
def test_fedbn_keeps_local_entries_and_starts_each_client_from_its_own(trainer):
    model, alg = BNQuadratic(), make_algorithm("fedbn")
    s_own = (0.7, -0.3)
    params = [torch.tensor([X0]), torch.tensor([9.0])]  # the global s is never used by the clients
    alg.setup(Task(model, torch.from_numpy(FED.x_train), torch.from_numpy(FED.y_train), FED.train_offsets))
    state = {1: torch.tensor([[s_own[0]], [s_own[1]]])}
    new, st, m, finals = one_round(alg, X0, STEPS, LR, state=state, trainer=trainer, model=model,
                                   params=params)
    # x: FedAvg; s_k: each client's own SGD from its own s_k, kept on the client
    y = [local(i, X0, STEPS[i], LR) for i in range(2)]
    s = [B[i] + (1 - 2 * LR) ** STEPS[i] * (s_own[i] - B[i]) for i in range(2)]
    assert scalar(new[0]) == pytest.approx(np.mean(y), rel=1e-5)
    np.testing.assert_allclose(col(st[1]), s, rtol=1e-5)
    assert scalar(new[1]) == pytest.approx(np.mean(s), rel=1e-5)  # global s: data-weighted mean, for eval
    assert m["bytes_up"] == 2 * 4  # only x travels


# -- batched engine = per-client loop, with corrections ---------------------------------------------------
@pytest.mark.parametrize("name,hp", [
    ("fedprox", {"mu": 0.5}), ("fedprox", {"mu": 0.5, "prox_step": "proximal"}), ("scaffold", {}),
    ("fednova", {"momentum": 0.5, "mu": 0.1}), ("feddyn", {"alpha": 0.1}), ("fedcurv", {"lam": 0.5}),
    ("fedfor", {"alpha": 0.5}),
    # sign(), thresholds and top-k turn rounding differences into jumps: those parts are off here (the
    # one-round tests pin them)
    ("fedelasticnet", {"lambda1": 0.0, "lambda2": 0.1, "epsilon": 0.0}),
    ("efl", {"lam": 0.1, "compress": False}),
    ("vrlsgd", {}), ("fedgate", {"quantizer": "none"}),
    ("fedamp", {"alpha_k": 0.05, "sigma": 1.0, "lam": 0.01}),
])
def test_training_with_corrections_equals_per_client_loop(tiny_fed, name, hp):
    model = make_model("logreg", 60, 10)
    fractions = np.random.default_rng(0).choice([0.0, 0.3, 0.7, 1.0], size=(3, 4))
    scheme = "C" if "C" in CATALOG[name].schemes else "B"  # FedNova refuses C (its own step correction)
    cfg = TrainSettings(scheme=scheme, local_epochs=2, batch_size=10, eta0=0.5, rounds=3, seed=0)
    a = train(model, tiny_fed, fractions, cfg, algorithm=make_algorithm(name, **hp))
    b = train(model, tiny_fed, fractions, cfg, algorithm=make_algorithm(name, **hp),
              local_trainer=local_sgd_reference)
    for pa, pb in zip(a.params, b.params, strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


# -- the quadratic test bed: fixed points and client drift ------------------------------------------------
TAU = (2, 10)


def run_quadratic(name: str, lr: float, rounds: int, steps=TAU, x0: float = 0.0, **hp) -> list[float]:
    # every round is complete here, so C's E/s = 1 and C = B: EFL (which refuses B) runs under C
    scheme = "B" if "B" in CATALOG[name].schemes else "C"
    cfg = TrainSettings(scheme, 1, 1, lr, rounds, eval_every=1, lr_schedule="constant", local_steps=steps)
    res = train(Quadratic(x0=x0), FED, np.ones((rounds, 2)), cfg, algorithm=make_algorithm(name, **hp))
    return [v for _, m, v in res.records if m == "x"]


def test_fedavg_settles_at_the_tau_weighted_point():
    lr, a, b, tau = 0.01, np.array(A), np.array(B), np.array(TAU)
    x = run_quadratic("fedavg", lr, 400)[-1]
    # lecture notes: x̃ = Σ(1 − (1 − 2a_iη)^τ_i) b_i / Σ(1 − (1 − 2a_iη)^τ_i) → Σ τ_i a_i b_i / Σ τ_i a_i
    c = 1 - (1 - 2 * a * lr) ** tau
    assert x == pytest.approx(float(c @ b / c.sum()), abs=1e-4)
    limit = float(tau * a @ b / (tau @ a))  # (τ1 a1 b1 + τ2 a2 b2)/(τ1 a1 + τ2 a2) = 51/11
    assert x == pytest.approx(limit, abs=0.1) and abs(x - 11 / 3) > 0.8
    assert run_quadratic("fedavg", 1e-3, 500)[-1] == pytest.approx(limit, abs=0.01)


def test_fednova_settles_at_the_true_optimum():
    lr, a, b, tau = 0.01, np.array(A), np.array(B), np.array(TAU)
    x = run_quadratic("fednova", lr, 400)[-1]
    c = (1 - (1 - 2 * a * lr) ** tau) / tau  # Σ p_i Δ_i/τ_i = 0 at the fixed point
    assert x == pytest.approx(float(c @ b / c.sum()), abs=1e-4)
    assert x == pytest.approx(optimum(A, B), abs=0.2)  # O(η τ) from 11/3 ...
    assert run_quadratic("fednova", 1e-3, 500)[-1] == pytest.approx(11 / 3, abs=0.02)  # ... → 11/3


@pytest.mark.parametrize("name,hp", [("scaffold", {}), ("feddyn", {"alpha": 2.0})])
def test_scaffold_and_feddyn_remove_client_drift(name, hp):
    x = run_quadratic(name, 0.01, 400, **hp)
    assert x[-1] == pytest.approx(11 / 3, abs=1e-4)  # exact, unlike FedAvg's 4.58 at the same η and τ
    assert abs(x[-1] - x[-2]) < 1e-5


def test_fedprox_with_huge_mu_stays_at_the_broadcast_model():
    x = run_quadratic("fedprox", 0.01, 20, x0=2.0, mu=1e12, prox_step="proximal")
    assert max(abs(v - 2.0) for v in x) < 1e-6
    # with the explicit gradient step a large μ moves the client by at most one plain step per step
    y = run_quadratic("fedprox", 0.01, 1, x0=2.0, mu=100.0)  # ημ = 1: the prox term cancels the drift
    assert abs(y[0] - 2.0) < 0.01 * abs(grad(1, 2.0)) + 1e-6


def test_every_algorithm_runs_on_the_quadratic_task():
    for name in ALGORITHM_NAMES:
        x = run_quadratic(name, 0.01, 5)
        assert len(x) == 5 and all(math.isfinite(v) for v in x), name


def test_catalog_lists_every_algorithm_module():
    assert set(CATALOG) == set(ALGORITHM_NAMES)
    for name in ALGORITHM_NAMES:
        assert make_algorithm(name).name == name


def test_batch_norm_model_fedbn_and_corrections_leave_buffers_to_the_forward_pass():
    """A LayerNet with BatchNorm2d: FedBN keeps its BN entries local (no `local_mask` needed), and a
    correction never touches the running statistics (trainable False); batched equals the loop."""
    from hetfl.algorithms.fedbn import local_mask
    from hetfl.models import MODELS

    if "cnn_bn" not in MODELS:
        pytest.skip("no batch-norm model registered")
    model = make_model("cnn_bn", (1, 12, 12), 3, channels=(2, 3), hidden=(8,))
    flags = local_mask(model, len(model.trainable))
    assert any(flags) and all(f for f, t in zip(flags, model.trainable, strict=True) if not t)
    _batched_equals_loop(model, _bn_federation(0), (("fedbn", {}), ("fedprox", {"mu": 0.5})))


def _bn_federation(seed: int):
    """Three devices of 6, 9 and 12 flat 12x12 images, 3 classes, their first 3 samples as test sets."""
    from hetfl.data.federation import from_device_lists

    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(n, 144)).astype(np.float32) for n in (6, 9, 12)]
    ys = [rng.integers(0, 3, len(x)) for x in xs]
    return from_device_lists(xs, ys, [x[:3] for x in xs], [y[:3] for y in ys], num_classes=3)


def _batched_equals_loop(model, fed, algorithms) -> None:
    """Three rounds of each (name, hyperparameters) under Scheme B with partial work: the batched engine
    ends where the per-client loop (engine.oracle) ends."""
    fractions = np.array([[1.0, 0.5, 1.0], [0.5, 1.0, 0.0], [1.0, 1.0, 1.0]])
    cfg = TrainSettings("B", 1, 3, 0.1, 3)
    for name, hp in algorithms:
        a = train(model, fed, fractions, cfg, algorithm=make_algorithm(name, **hp))
        b = train(model, fed, fractions, cfg, algorithm=make_algorithm(name, **hp),
                  local_trainer=local_sgd_reference)
        for pa, pb in zip(a.params, b.params, strict=True):
            torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


def test_batch_norm_resnet_fedbn_keeps_every_block_norm_local_and_equals_the_loop():
    """The batch-norm ResNet (norm="batch", FedFOR Table 2's) has its norms inside residual blocks: FedBN
    keeps all of them local, the stem's and the blocks' (it kept only the stem's before), nothing else;
    FedBN and FedFOR (whose correction skips the running statistics) equal the per-client loop."""
    from hetfl.algorithms.fedbn import local_mask

    model = make_model("resnet_emnist", (1, 12, 12), 3, widths=(2, 4), blocks=1, norm="batch")
    flags = local_mask(model, len(model.trainable))
    # the stem's and 2 blocks' 2 norms: 5 batch norms of 4 entries (weight, bias, running mean and var)
    assert sum(flags) == 5 * 4 and all(f for f, t in zip(flags, model.trainable, strict=True) if not t)
    shapes = [s for layer in model.layers for s in layer.shapes]
    assert all(len(s) == 1 for s, f in zip(shapes, flags, strict=True) if f)  # no convolution, no linear
    group = make_model("resnet_emnist", (1, 12, 12), 3, widths=(2, 4), blocks=1)
    assert not any(local_mask(group, len(group.trainable)))  # GroupNorm: nothing local, FedBN is FedAvg
    _batched_equals_loop(model, _bn_federation(1), (("fedbn", {}), ("fedfor", {"alpha": 5.0})))


def test_fedbn_mean_client_accuracy_scores_each_device_with_its_own_batch_norm():
    """FedBN's per-device accuracies use each device's local BN entries (client_models), not the
    p-weighted global BN the pooled test_accuracy is scored with."""
    from hetfl.algorithms.fedbn import FedBN, local_mask
    from hetfl.data.federation import from_device_lists

    class Seen(FedBN):
        def client_models(self, state, params):
            self.seen = super().client_models(state, params)
            return self.seen

    rng = np.random.default_rng(1)
    # the same task on every device, seen through a different scale and offset (FedBN's feature shift)
    zs = [rng.normal(size=(30, 144)).astype(np.float32) for _ in range(3)]
    ys = [np.digitize(z[:, :72].mean(1), [-0.05, 0.05]) for z in zs]
    xs = [z * sc + off for z, sc, off in zip(zs, (1.0, 4.0, 0.3), (0.0, 3.0, -2.0), strict=True)]
    fed = from_device_lists(xs, ys, [x[:10] for x in xs], [y[:10] for y in ys], num_classes=3)
    model = make_model("cnn_bn", (1, 12, 12), 3, channels=(2, 3), hidden=(8,))
    alg = Seen()
    res = train(model, fed, np.ones((8, 3)), TrainSettings("C", 2, 5, 0.3, 8, lr_schedule="constant"),
                algorithm=alg)
    got = {k: v for r, k, v in res.records if r == 8}
    flags = local_mask(model, len(res.params))
    for i, (own, glob) in enumerate(zip(alg.seen, res.params, strict=True)):
        if flags[i]:  # local entries: each device its own, and not the global p-weighted mean
            assert not torch.allclose(own[0], own[1])
        else:
            torch.testing.assert_close(own, glob.expand_as(own))
    own, shared = [], []
    for k in range(3):
        lo, hi = fed.test_offsets[k], fed.test_offsets[k + 1]
        x, y = torch.from_numpy(fed.x_test[lo:hi]), fed.y_test[lo:hi]
        own.append(float((model.logits([p[k] for p in alg.seen], x).argmax(1).numpy() == y).mean()))
        shared.append(float((model.logits(res.params, x).argmax(1).numpy() == y).mean()))
    assert got["mean_client_accuracy"] == pytest.approx(np.mean(own))
    assert np.mean(own) != pytest.approx(np.mean(shared))  # the fixture tells the two apart


def test_new_algorithms_in_one_cell_end_where_each_ends_alone(tiny_fed):
    """A cell's runs train side by side (engine.runner.train_stacked): FedAvgM shares FedAvg's local_sgd
    call, APFL trains its own (w, v, α) model alone, the others their corrections; each run's records and
    model equal those of `train` on that run alone, bitwise."""
    from hetfl.engine.runner import Data, RunLoop, train_stacked

    names = ["fedavg", "fedavgm", "apfl", "fedamp", "fedgate", "vrlsgd"]
    fractions = np.random.default_rng(5).choice([0.0, 0.4, 1.0], size=(4, 4))
    cfg = TrainSettings("C", 2, 10, 0.5, 4, seed=0)
    model = make_model("logreg", 60, 10)
    alone = [train(model, tiny_fed, fractions, cfg, algorithm=make_algorithm(n)) for n in names]
    data = Data.of(tiny_fed)
    stacked = train_stacked([RunLoop(model, data, fractions, cfg, make_algorithm(n)) for n in names])
    for name, a, s in zip(names, alone, stacked, strict=True):
        assert a.records == s.records, name
        assert all(torch.equal(pa, ps) for pa, ps in zip(a.params, s.params, strict=True)), name
