"""MLflow mirror of the results (the only module that imports mlflow).

`results/` is the source of truth; each training job mirrors its run into MLflow: one experiment per
hetfl experiment, one run per grid point named by its coordinates, params once, metrics with step=round.
The store is SQLite under results/ unless MLFLOW_TRACKING_URI says otherwise.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUN_KEY_TAG = "hetfl.run_key"


def tracking_uri(results_dir: str | Path) -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


@contextmanager
def _store_lock(results_dir: Path):
    """Serialise writers of the default SQLite store (schema creation is not safe to race)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    with open(results_dir / ".mlflow.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = str(v)
    return out


@dataclass(frozen=True)
class RunRecord:
    """One run as MLflow gets it: coordinates, params, per-round metrics and tags."""

    experiment: str
    run_name: str
    params: dict[str, Any]
    records: list[tuple[int, str, float]]
    tags: dict[str, str]


def log_runs(results_dir: str | Path, runs: Iterable[RunRecord]) -> dict[str, str]:
    """Log runs with one client; a previous mirror of the same run (same experiment/run) is deleted first.

    Returns {"<experiment>/<run>": mlflow run id}.
    """
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    results_dir = Path(results_dir)
    ids: dict[str, str] = {}
    with _store_lock(results_dir):
        client = MlflowClient(tracking_uri=tracking_uri(results_dir))
        exp_ids: dict[str, str] = {}
        for run in runs:
            if run.experiment not in exp_ids:
                exp = client.get_experiment_by_name(run.experiment)
                exp_ids[run.experiment] = (exp.experiment_id if exp else
                                           client.create_experiment(run.experiment))
            exp_id = exp_ids[run.experiment]
            key = f"{run.experiment}/{run.run_name}"
            for old in client.search_runs([exp_id], filter_string=f"tags.`{RUN_KEY_TAG}` = '{key}'"):
                client.delete_run(old.info.run_id)
            created = client.create_run(exp_id, run_name=run.run_name, tags={RUN_KEY_TAG: key, **run.tags})
            rid = created.info.run_id
            now = int(time.time() * 1000)
            flat = [Param(k, v[:6000]) for k, v in flatten(run.params).items()]
            metrics = [Metric(m, v, now, r) for r, m, v in run.records if v == v]  # NaN is not logged
            for i in range(0, max(len(flat), 1), 100):
                client.log_batch(rid, params=flat[i:i + 100])
            for i in range(0, len(metrics), 1000):
                client.log_batch(rid, metrics=metrics[i:i + 1000])
            client.log_batch(rid, tags=[RunTag("hetfl.status", run.tags.get("hetfl.status", "ok"))])
            client.set_terminated(rid, status="FINISHED")
            ids[key] = rid
    return ids


def log_run(results_dir: str | Path, experiment: str, run_name: str, params: dict[str, Any],
            records: Iterable[tuple[int, str, float]], tags: dict[str, str]) -> str:
    """Log one run (see log_runs)."""
    return next(iter(log_runs(results_dir, [RunRecord(experiment, run_name, params, list(records), tags)])
                     .values()))


def mirror_run_dirs(results_dir: str | Path, run_dirs: Iterable[Path]) -> dict[str, str]:
    """Rebuild the MLflow mirror of finished runs from their run.json and metrics.parquet."""
    import json

    import pandas as pd

    runs = []
    for d in run_dirs:
        d = Path(d).parent if Path(d).name == "run.json" else Path(d)
        info = json.loads((d / "run.json").read_text())
        m = pd.read_parquet(d / "metrics.parquet")
        records = list(zip(m["round"].astype(int), m["metric"].astype(str), m["value"].astype(float),
                           strict=True))
        spec = info["spec"]
        tags = {"hetfl.status": info["status"], "git_commit": info.get("git_commit", "unknown"),
                "hetfl.run_dir": str(d)}
        runs.append(RunRecord(spec["experiment"], spec["run"], spec, records, tags))
    return log_runs(results_dir, runs)
