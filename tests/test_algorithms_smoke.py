"""Every algorithm through the pipeline on a tiny version of workflow/config/paper/algorithms_smoke.yaml,
and the configuration of algorithms (the `algorithms` axis, `algorithm_params`, the quadratic task)."""

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import train_as_workflow  # tests/conftest.py (pytest puts tests/ on the path)

from hetfl.algorithms import ALGORITHM_NAMES
from hetfl.config import ConfigError, expand_runs, load_config, load_schema, validate_config
from hetfl.data.build import make_split
from hetfl.data.traces import make_traces
from hetfl.pipeline import run_training

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "workflow/config/paper/algorithms_smoke.yaml"
RAW = yaml.safe_load(SMOKE.read_text())
COMM = {"bytes_up", "bytes_down", "nonzeros_up", "entropy_up"}


def test_smoke_config_runs_every_algorithm_on_both_tasks():
    runs = list(expand_runs(load_config(SMOKE)))
    for dataset in ("synthetic", "quadratic"):  # FedNova and EFL run in their own experiments (schemes)
        assert sorted(r.algorithm for r in runs if r.dataset == dataset) == sorted(ALGORITHM_NAMES)
    syn = next(r for r in runs if r.experiment == "algorithms_synthetic")
    assert (syn.alpha, syn.beta, syn.num_traces, syn.table) == (1.0, 1.0, 8, "none")
    assert {r.run for r in runs} >= {"fedavg_NIID_T8_C_s0", "scaffold_Q_T1_B_s0"}


def _tiny(spec):
    if spec.dataset == "quadratic":
        return dataclasses.replace(spec, rounds=30, eval_every=10)
    return dataclasses.replace(spec, rounds=3, num_devices=8, sizes={**spec.sizes, "max_size": 60})


def test_every_algorithm_trains_and_reports_communication(tmp_path):
    runs = [_tiny(s) for s in expand_runs(load_config(SMOKE))]
    for spec, out, result in train_as_workflow(runs, tmp_path):
        assert result.status == "ok", spec.run
        metrics = pd.read_parquet(out / "metrics.parquet")
        names = set(metrics["metric"])
        assert COMM <= names, (spec.run, COMM - names)
        info = json.loads((out / "run.json").read_text())
        assert info["spec"]["algorithm"] == spec.algorithm
        if spec.dataset == "quadratic":
            assert {"x", "objective"} <= names
            x = metrics[metrics.metric == "x"].sort_values("round")["value"].tolist()
            assert len(x) == 3 and all(abs(v) < 10 for v in x)
        else:
            assert "test_accuracy" in names


def test_quadratic_runs_reach_their_fixed_points(tmp_path):
    """FedAvg settles at the τ-weighted point, SCAFFOLD at x* = 11/3, through the whole pipeline."""
    runs = {s.algorithm: s for s in expand_runs(load_config(SMOKE)) if s.dataset == "quadratic"}
    x = {}
    for name in ("fedavg", "scaffold"):
        spec = runs[name]
        split, trace = tmp_path / "q/split.npz", tmp_path / f"t/{spec.trace_key}.npz"
        make_split(split, spec.split_spec(), 0)
        make_traces(trace, traceset=spec.traceset, num_devices=2, rounds=spec.rounds, seed=0)
        run_training(spec, split, trace, tmp_path / name, progress=False)
        m = pd.read_parquet(tmp_path / name / "metrics.parquet")
        x[name] = m[m.metric == "x"].sort_values("round")["value"].iloc[-1]
    assert x["scaffold"] == pytest.approx(11 / 3, abs=1e-3)
    assert x["fedavg"] == pytest.approx(4.5773, abs=1e-3)  # (1 − (1 − 2aη)^τ)-weighted b, η = 0.01


# -- configuration ----------------------------------------------------------------------------------------
def _exp(**changes):
    exp = copy.deepcopy(RAW["experiments"]["algorithms_quadratic"])
    exp.update(changes)
    return {"experiments": {"algorithms_quadratic": exp}}


@pytest.mark.parametrize(("params", "key", "shown", "allowed"), [
    ({"fedprox": {"mu": -1}}, "algorithm_params.fedprox.mu", "-1", ">= 0.0"),
    ({"fedprox": {"muu": 1}}, "algorithm_params.fedprox.muu", None, "only the keys mu, prox_step"),
    ({"fednova": {"tau_eff": "x"}}, "algorithm_params.fednova.tau_eff", '"x"', 'one of "paper"'),
    ({"efl": {"compress": 1}}, "algorithm_params.efl.compress", "1", "bool"),
    ({"fedbn": {"a": 1}}, "algorithm_params.fedbn.a", None, "no keys"),
])
def test_bad_algorithm_params_name_key_value_and_allowed(params, key, shown, allowed):
    with pytest.raises(ConfigError) as err:
        validate_config(_exp(algorithm_params=params))
    msg = str(err.value)
    assert f"'experiments.algorithms_quadratic.{key}'" in msg and allowed in msg
    if shown:
        assert f"value {shown}" in msg


def test_unknown_algorithm_and_both_algorithm_keys():
    with pytest.raises(ConfigError, match=r"algorithms.1' has value \"fedsgd\".*\"fedavg\""):
        validate_config(_exp(algorithms=["fedavg", "fedsgd"]))
    with pytest.raises(ConfigError, match=r"algorithm_params' .*not allowed"):
        validate_config(_exp(algorithm_params={"fedsgd": {}}))
    with pytest.raises(ConfigError, match=r"not allowed together"):
        validate_config(_exp(algorithm="fedavg"))


def test_single_algorithm_keeps_run_names_and_resolves_params():
    cfg = _exp(algorithms=["fedprox"], algorithm_params={"fedprox": {"mu": 0.5}})
    (run,) = expand_runs(validate_config(cfg))
    assert run.run == "Q_T1_B_s0" and run.algorithm_params == {"mu": 0.5, "prox_step": "gradient"}
    quick = list(expand_runs(load_config(ROOT / "workflow/config/quick.yaml")))
    ruan = [r for r in quick if r.experiment.startswith("ruan2021")]
    assert {r.algorithm for r in ruan} == {"fedavg"} and ruan[0].run.startswith(("IID_", "NIID_"))
    efl = [r for r in quick if r.experiment == "ma2022_efl_table2_mnist5k"]  # several: names carry them
    assert {r.run.split("_")[0] for r in efl} == {r.algorithm for r in efl} == {
        "fedavg", "fedgate", "vrlsgd", "apfl", "fedamp", "efl", "fedprox", "scaffold"}
    lam = [r for r in quick if r.table == "efl_lambda"]  # one algorithm: names without it
    assert {r.algorithm for r in lam} == {"efl"} and lam[0].run.startswith("NIID_")


def test_quadratic_needs_matching_model_sizes_and_steps():
    with pytest.raises(ConfigError, match=r"model' has value \"logreg\""):
        validate_config(_exp(model="logreg"))
    with pytest.raises(ConfigError, match=r"num_devices' has value 3.*allowed: 2"):
        validate_config(_exp(num_devices=3))
    with pytest.raises(ConfigError, match=r"local_steps' has 3 entries.*one per device \(2\)"):
        validate_config(_exp(local_steps=[1, 2, 3]))
    with pytest.raises(ConfigError, match=r"settings.Q.b' has 1 entries"):
        validate_config(_exp(settings={"Q": {"a": [1, 2], "b": [1]}}))
    (run,) = expand_runs(validate_config(_exp(settings={"Q": {}}, algorithms=["fedavg"])))
    assert run.quadratic == {"a": [1.0, 2.0], "b": [1.0, 5.0]} and run.num_devices == 2


def test_schema_lists_every_algorithm():
    assert load_schema()["$defs"]["algorithm_name"]["enum"] == list(ALGORITHM_NAMES)


def test_cli_lists_algorithms_with_papers_and_hyperparameters():
    proc = subprocess.run([sys.executable, "-m", "hetfl.cli", "algorithms"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for name in ALGORITHM_NAMES:
        assert f"{name}: " in proc.stdout
    assert "mu = 0.01" in proc.stdout and "seed 000" in proc.stdout
