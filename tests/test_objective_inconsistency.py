"""Objective inconsistency (lecture notes, seed 001): closed-form fixed points, the engine reaching them,
and the table's verdicts."""

import json

import numpy as np
import pandas as pd
import pytest

from hetfl.algorithms import make_algorithm
from hetfl.config import ConfigError, expand_runs, validate_config
from hetfl.data.quadratic import build_quadratic
from hetfl.engine.runner import TrainSettings, train
from hetfl.models.quadratic import Quadratic
from hetfl.reports import fixed_points as fp
from hetfl.reports.objective_inconsistency import TOLERANCE, objective_inconsistency
from hetfl.reports.results import collect_runs

A, B = (1.0, 2.0), (1.0, 5.0)  # F_1 = (x − 1)², F_2 = 2(x − 5)²
# η = 0.01, τ = (2, 10): 1 − ρ_1 = 1 − 0.98² = 0.0396, 1 − ρ_2 = 1 − 0.96¹⁰ = 1 − 0.6648326359915008
R1, R2 = 0.0396, 1 - 0.6648326359915008


def test_the_notes_example():
    assert fp.optimum(A, B) == pytest.approx(11 / 3)
    # the notes' limit (τ1 x1* + 2τ2 x2*)/(τ1 + 2τ2) at τ = (2, 10): (2 + 100)/22 = 51/11
    assert fp.fedavg_limit(A, B, None, (2, 10)) == pytest.approx(51 / 11)
    # the notes' x̃ = [(1 − ρ1) x1* + (1 − ρ2) x2*]/[(1 − ρ1) + (1 − ρ2)]
    assert fp.fedavg(A, B, None, (2, 10), 0.01) == pytest.approx((R1 * 1 + R2 * 5) / (R1 + R2))
    assert fp.fedavg(A, B, None, (2, 10), 0.01) == pytest.approx(4.577337796157703)
    # FedNova: c_i = (1 − ρ_i)/τ_i
    assert fp.fednova(A, B, None, (2, 10), 0.01) == pytest.approx(3.5145377353078655)
    assert fp.fixed_point("scaffold", A, B, None, (2, 10), 0.01) == pytest.approx(11 / 3)


def test_unequal_weights():
    p = (0.75, 0.25)
    assert fp.optimum(A, B, p) == pytest.approx((0.75 + 2.5) / 1.25)  # = 2.6
    assert fp.fedavg(A, B, p, (2, 10), 0.01) == pytest.approx(
        (0.75 * R1 * 1 + 0.25 * R2 * 5) / (0.75 * R1 + 0.25 * R2))
    # η → 0: (0.75·2·1·1 + 0.25·10·2·5)/(0.75·2·1 + 0.25·10·2) = 26.5/6.5
    assert fp.fedavg_limit(A, B, p, (2, 10)) == pytest.approx(26.5 / 6.5)


def test_equal_steps_are_consistent_only_as_eta_vanishes():
    assert fp.fedavg_limit(A, B, None, (5, 5)) == pytest.approx(11 / 3)
    assert abs(fp.fedavg(A, B, None, (5, 5), 0.05) - 11 / 3) > 0.05
    assert abs(fp.fedavg(A, B, None, (5, 5), 1e-5) - 11 / 3) < 1e-3
    assert abs(fp.fednova(A, B, None, (2, 10), 1e-5) - 11 / 3) < 1e-3


def test_quadratic_clients_carry_their_weights():
    fed = build_quadratic(A, B, (3, 1))
    np.testing.assert_allclose(fed.p, [0.75, 0.25])
    with pytest.raises(ValueError, match="one integer >= 1 per client"):
        build_quadratic(A, B, (3,))


@pytest.mark.parametrize("algorithm", fp.ALGORITHMS)
@pytest.mark.parametrize(("tau", "n"), [((2, 10), (1, 1)), ((10, 2), (3, 1))])
def test_the_engine_reaches_the_closed_form(algorithm, tau, n):
    fed = build_quadratic(A, B, n)
    cfg = TrainSettings(scheme="B", local_epochs=1, batch_size=1, eta0=0.01, rounds=300, eval_every=300,
                        lr_schedule="constant", local_steps=tau)
    result = train(Quadratic(2), fed, np.ones((300, 2)), cfg, algorithm=make_algorithm(algorithm))
    p = np.asarray(n) / sum(n)
    assert float(result.params[0][0]) == pytest.approx(fp.fixed_point(algorithm, A, B, p, tau, 0.01),
                                                       abs=TOLERANCE)


def _config(**setting):
    return {"experiments": {"oi": {
        "table": "objective_inconsistency", "dataset": "quadratic", "model": "quadratic",
        "settings": {"S": {"a": list(A), "b": list(B), **setting}}, "algorithms": ["fedavg", "scaffold"],
        "lr_schedule": "constant", "schemes": ["B"], "num_traces": [1], "eta0": 0.01, "rounds": 30,
        "eval_every": 10, "seeds": [0]}}}


def _fake_runs(tmp_path, xs):
    """Run directories with the given x curve per algorithm (what `hetfl train` writes)."""
    dirs = []
    for spec in expand_runs(validate_config(_config(local_steps=[2, 10], n=[3, 1]))):
        d = tmp_path / spec.run
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        x = xs[spec.algorithm]
        metrics = pd.DataFrame({"round": [10, 20, 30], "metric": ["x"] * 3, "value": x})
        metrics.to_parquet(d / "metrics.parquet")
        dirs.append(d)
    return collect_runs(dirs)


def test_table_verdicts(tmp_path):
    p = (0.75, 0.25)
    avg = fp.fedavg(A, B, p, (2, 10), 0.01)
    runs = _fake_runs(tmp_path, {"fedavg": [1.0, avg + 1e-5, avg + 2e-5],  # settled at the closed form
                                 "scaffold": [1.0, 2.0, 2.3]})  # still moving
    tidy = objective_inconsistency(runs).set_index("method")
    assert tidy.loc["FedAvg", "verdict"] == "agrees"
    assert tidy.loc["FedAvg", "p"] == "(0.75, 0.25)" and tidy.loc["FedAvg", "tau"] == "(2, 10)"
    assert tidy.loc["FedAvg", "notes_limit"] == pytest.approx(26.5 / 6.5)
    assert tidy.loc["SCAFFOLD", "verdict"] == "inconclusive"
    assert tidy.loc["SCAFFOLD", "closed_form"] == pytest.approx(2.6)


@pytest.mark.parametrize(("fedavg_x", "scaffold_x", "fedavg", "scaffold"), [
    (3.0, 2.6, "same direction", "agrees"),  # FedAvg off x* = 2.6 on the predicted side, by less
    (2.0, 2.7, "disagrees", "disagrees"),  # FedAvg on the wrong side; SCAFFOLD off x*, predicted exact
    (2.6, 2.6, "inconclusive", "agrees"),  # FedAvg at x*: the interval holds 0, the prediction does not
])
def test_table_says_when_the_closed_form_is_missed(tmp_path, fedavg_x, scaffold_x, fedavg, scaffold):
    runs = _fake_runs(tmp_path, {"fedavg": [fedavg_x] * 3, "scaffold": [scaffold_x] * 3})
    tidy = objective_inconsistency(runs).set_index("method")
    assert tidy.loc["FedAvg", "verdict"] == fedavg
    assert tidy.loc["SCAFFOLD", "verdict"] == scaffold


def test_config_checks_per_setting_lengths():
    with pytest.raises(ConfigError, match=r"'experiments.oi.settings.S.n' has 3 entries.*as many as a \(2\)"):
        validate_config(_config(n=[1, 2, 3]))
    with pytest.raises(ConfigError, match=r"'experiments.oi.settings.S.local_steps' has 1 entries"):
        validate_config(_config(local_steps=[2]))
    run = next(expand_runs(validate_config(_config(local_steps=[2, 10], n=[3, 1]))))
    assert run.local_steps == (2, 10) and run.quadratic["n"] == [3, 1]
