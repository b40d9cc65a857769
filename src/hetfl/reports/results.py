"""Collect per-run results (``run.json`` + ``metrics.parquet``) into one summary table."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["collect_runs", "load_metrics", "load_run_json"]

RUN_JSON = "run.json"
METRICS_PARQUET = "metrics.parquet"
METRICS_COLUMNS = ("round", "metric", "value")


def load_run_json(run_dir: Path) -> dict[str, Any]:
    """Read and validate ``<run_dir>/run.json`` (an object with a ``spec`` object and a ``status`` string)."""
    path = Path(run_dir) / RUN_JSON
    if not path.is_file():
        raise FileNotFoundError(f"missing {RUN_JSON}: {path}")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        # cut off by hand or by a full disk: newer than its inputs, so Snakemake does not make it again
        raise ValueError(f"malformed {RUN_JSON} (not valid JSON): {path}: {exc}; delete it and run snakemake "
                         "again to make it again") from exc
    if not isinstance(record, dict):
        raise ValueError(f"malformed {RUN_JSON} (top level is not an object): {path}")
    if not isinstance(record.get("spec"), dict):
        raise ValueError(f"malformed {RUN_JSON} (no 'spec' object): {path}")
    if not isinstance(record.get("status"), str):
        raise ValueError(f"malformed {RUN_JSON} (no 'status' string): {path}")
    return record


def load_metrics(run_dir: Path) -> pd.DataFrame:
    """Read and validate ``<run_dir>/metrics.parquet`` (long format: round, metric, value)."""
    path = Path(run_dir) / METRICS_PARQUET
    if not path.is_file():
        raise FileNotFoundError(f"missing {METRICS_PARQUET}: {path}")
    try:
        metrics = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises a variety of error types for corrupt files
        raise ValueError(f"malformed {METRICS_PARQUET} (unreadable): {path}: {exc}; delete it and run "
                         "snakemake again to make it again") from exc
    missing = [c for c in METRICS_COLUMNS if c not in metrics.columns]
    if missing:
        raise ValueError(f"malformed {METRICS_PARQUET} (missing columns {missing}): {path}")
    rounds, names, values = (metrics[c] for c in METRICS_COLUMNS)
    # hetfl writes int64 rounds and float64 values: those need no coercion (which was half of the 8 ms a
    # run took to load; a Table 3 table or figure job loads 330 runs)
    if not _numpy_kind(rounds, "iu"):
        rounds = pd.to_numeric(rounds, errors="coerce")
        if rounds.isna().any() or not (rounds == rounds.round()).all():
            raise ValueError(f"malformed {METRICS_PARQUET} ('round' must be integers): {path}")
    if not _numpy_kind(values, "f"):
        coerced = pd.to_numeric(values, errors="coerce")
        if (coerced.isna() & values.notna()).any():
            raise ValueError(f"malformed {METRICS_PARQUET} ('value' must be numeric): {path}")
        values = coerced
    if names.isna().any():
        raise ValueError(f"malformed {METRICS_PARQUET} ('metric' has missing names): {path}")
    return pd.DataFrame({"round": rounds.astype("int64"), "metric": names.astype(str), "value": values})


def _numpy_kind(column: pd.Series, kinds: str) -> bool:
    """Whether a column has a plain numpy dtype of one of these kinds (not a nullable extension dtype,
    which can hold missing values)."""
    return isinstance(column.dtype, np.dtype) and column.dtype.kind in kinds


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, prefix=f"{name}."))
        else:
            flat[name] = value
    return flat


def _final_values(metrics: pd.DataFrame, path: Path) -> dict[str, float]:
    """Value of each metric at the last round at which that metric was recorded."""
    last = metrics.loc[metrics["round"] == metrics.groupby("metric")["round"].transform("max")]
    duplicated = last["metric"].duplicated(keep=False)
    if duplicated.any():
        names = sorted(set(last.loc[duplicated, "metric"]))
        raise ValueError(
            f"malformed {METRICS_PARQUET} (several values at the last round for {names}): {path}"
        )
    return {f"final_{m}": float(v) for m, v in zip(last["metric"], last["value"], strict=True)}


def collect_runs(run_dirs: Iterable[Path]) -> pd.DataFrame:
    """One row per run directory (or its run.json: the table and figure rules pass those).

    Columns: every ``spec`` field (nested objects flattened with dotted names), ``status``,
    ``run_dir``, the provenance ``git_commit``/``git_dirty``/``code_fingerprint``, the participation
    ``mean_complete_devices``/``p_complete``/``traces_sha256`` (None for records that lack them),
    ``last_round`` (largest round in the metrics) and ``final_<metric>`` for each
    metric, i.e. the value at the metric's last (largest) recorded round -- NaN stays NaN, so a
    diverged run keeps its NaN. Raises ``FileNotFoundError``/``ValueError`` naming the offending file.
    """
    run_dirs = [Path(d).parent if Path(d).name == "run.json" else Path(d) for d in run_dirs]
    rows: list[dict[str, Any]] = []
    for run_dir in map(Path, run_dirs):
        record = load_run_json(run_dir)
        metrics = load_metrics(run_dir)
        row = _flatten(record["spec"])
        traces = record.get("traces") if isinstance(record.get("traces"), Mapping) else {}
        extra: dict[str, Any] = {
            "status": record["status"],
            "run_dir": str(run_dir),
            # provenance and participation (tables name the commits they read and state E[K_τ])
            "git_commit": record.get("git_commit", "unknown"),
            "git_dirty": record.get("git_dirty"),
            "code_fingerprint": record.get("code_fingerprint"),
            "mean_complete_devices": traces.get("mean_complete_devices"),
            "p_complete": traces.get("p_complete"),
            "traces_sha256": traces.get("sha256"),
            "last_round": int(metrics["round"].max()) if len(metrics) else pd.NA,
            **_final_values(metrics, run_dir / METRICS_PARQUET),
        }
        clash = sorted(set(row) & set(extra))
        if clash:
            raise ValueError(f"spec fields {clash} clash with derived columns: {run_dir / RUN_JSON}")
        row.update(extra)
        rows.append(row)
    return pd.DataFrame(rows)
