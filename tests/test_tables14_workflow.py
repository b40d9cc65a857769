"""End to end: issue 14's three tables and two figures from a tiny config, through Snakemake."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

TINY = {"experiments": {
    "tiny_oi": {
        "table": "objective_inconsistency", "dataset": "quadratic", "model": "quadratic",
        "settings": {"t2_10": {"a": [1.0, 2.0], "b": [1.0, 5.0], "local_steps": [2, 10], "n": [3, 1]}},
        "algorithms": ["fedavg", "scaffold"], "lr_schedule": "constant", "schemes": ["B"], "num_traces": [1],
        "batch_size": 1, "eta0": 0.01, "rounds": 200, "eval_every": 50, "seeds": [0]},
    "tiny_fedfor": {
        "table": "fedfor_by_e", "dataset": "digits",
        "settings": {"E2": {"partition": {"label_skew": "longtail", "imbalance_ratio": 0.05,
                                          "client_fraction": 0.5, "draw": "independent"},
                            "local_epochs": 2, "rounds": 4}},
        "num_devices": 6, "clients_per_round": 2, "sizes": {"distribution": "equal"}, "test_fraction": 0.1,
        "algorithms": ["fedavg", "fedfor"], "algorithm_params": {"fedfor": {"alpha": 0.5}}, "acc_x": 50,
        "local_work": "epochs", "schemes": ["B"], "num_traces": [1], "batch_size": 16, "eta0": 0.1,
        "lr_schedule": "constant", "seeds": [0, 1]},
    "tiny_comm": {
        "table": "communication_cost", "dataset": "digits",
        "settings": {"dir0.3": {"partition": {"label_skew": "dirichlet", "alpha": 0.3}}},
        "num_devices": 10, "clients_per_round": 3, "sizes": {"distribution": "lognormal", "size": 100,
                                                             "sigma": 0.3, "min_size": 10},
        "algorithms": ["fedprox", "fedelasticnet", "sign_ef"], "local_work": "epochs", "schemes": ["B"],
        "num_traces": [1], "local_epochs": 1, "batch_size": 10, "eta0": 0.1, "lr_schedule": "constant",
        "rounds": 3, "seeds": [0, 1]},
}}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = tmp_path_factory.mktemp("wf14")
    config = work / "tiny14.yaml"
    config.write_text(yaml.safe_dump(TINY))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(work), "--configfile", str(config), "--cores", "2",
                           "--omit-from", "track"],  # every job but the MLflow mirrors (test_workflow's)
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work


@pytest.mark.slow
def test_the_three_tables_and_two_figures_are_built(workdir):
    tables = workdir / "reports/tables"
    for name in ("objective_inconsistency", "fedfor_by_e", "communication_cost"):
        for ext in ("md", "csv", "tex"):
            assert (tables / f"{name}.{ext}").stat().st_size > 100
    for name in ("objective_inconsistency", "communication_nonzeros"):
        assert (workdir / f"reports/figures/{name}.png").stat().st_size > 1000
    oi = pd.read_csv(tables / "objective_inconsistency.csv")
    assert set(oi["verdict"]) == {"agrees"}  # FedAvg and SCAFFOLD reach their closed forms
    fedfor = pd.read_csv(tables / "fedfor_by_e.csv")
    assert set(fedfor["measure"]) == {"best@half", "best@full", "ACC_x"} and set(fedfor["n_seeds"]) == {2}
    assert "stand-in" in (tables / "fedfor_by_e.md").read_text()
    comm = pd.read_csv(tables / "communication_cost.csv")
    assert "FedAvg + sign + EF" in set(comm["method"])
    assert "3 of 10 clients per round" in (tables / "communication_cost.md").read_text()


@pytest.mark.slow
def test_sampled_runs_train_only_k_clients(workdir):
    metrics = pd.read_parquet(next((workdir / "results/tiny_comm").glob("fedprox_*s0/metrics.parquet")))
    active = metrics.loc[metrics["metric"] == "active_devices", "value"]
    assert len(active) == 3 and (active <= 3).all()
