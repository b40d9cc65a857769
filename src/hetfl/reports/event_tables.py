"""Ruan et al. Table 4 (fast-reboot recovery after an arrival) and Table 5 (rounds until the include and
exclude loss curves cross after a departure), from run directories."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hetfl.reports.curves import observed_after, rounds_to_cross, rounds_to_recover
from hetfl.reports.results import load_metrics

TIDY_COLUMNS = ["dataset", "setting", "tau0", "method", "reproduced_mean", "reproduced_std", "n_seeds",
                "n_never", "observed_rounds", "paper"]


def curve(run_dir: str | Path, metric: str) -> pd.Series:
    m = load_metrics(Path(run_dir))
    m = m[m["metric"] == metric]
    return pd.Series(m["value"].to_numpy(), index=m["round"].to_numpy(), dtype=float).sort_index()


def summarise(values: list[int | None], observed: int) -> dict[str, float | int]:
    """Mean ± std over the seeds that got there; n_never counts the ones that did not (reported '> R')."""
    got = [v for v in values if v is not None]
    return {
        "reproduced_mean": float(np.mean(got)) if got else np.nan,
        "reproduced_std": float(np.std(got, ddof=1)) if len(got) > 1 else np.nan,
        "n_seeds": len(values),
        "n_never": len(values) - len(got),
        "observed_rounds": observed,
    }


def cell_text(row: pd.Series) -> str:
    if row["n_seeds"] == 0:
        return "—"
    if row["n_never"] == row["n_seeds"]:
        return f"> {row['observed_rounds']}"
    text = f"{row['reproduced_mean']:.1f}"
    if not np.isnan(row["reproduced_std"]):
        text += f" ± {row['reproduced_std']:.1f}"
    if row["n_never"]:
        text += f" ({row['n_never']} of {row['n_seeds']} > {row['observed_rounds']})"
    return text


def fast_reboot(runs: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """runs: one row per run with dataset, setting, event_round, event_policy, seed, run_dir."""
    rows = []
    for (dataset, setting, tau0, method), g in runs.groupby(
            ["dataset", "setting", "event_round", "event_policy"], sort=True):
        values, observed = [], 0
        for run_dir in g["run_dir"]:
            acc = curve(run_dir, "test_accuracy")
            values.append(rounds_to_recover(acc, int(tau0)))
            observed = max(observed, observed_after(acc, int(tau0)))
        rows.append({"dataset": dataset, "setting": setting, "tau0": int(tau0), "method": method,
                     **summarise(values, observed)})
    tidy = pd.DataFrame(rows, columns=[c for c in TIDY_COLUMNS if c != "paper"])
    ref = reference.rename(columns={"rounds_to_recover": "paper"}).assign(
        method=lambda d: d["method"].str.replace("vanilla_reboot", "vanilla"))
    return tidy.merge(ref[["dataset", "tau0", "method", "paper"]], how="left",
                      on=["dataset", "tau0", "method"])[TIDY_COLUMNS]


def crossing(runs: pd.DataFrame, reference: pd.DataFrame, metric: str = "test_loss") -> pd.DataFrame:
    """runs: rows with dataset, setting, alpha, beta, event_round, seed and event_policy include/exclude."""
    rows = []
    keys = ["dataset", "setting", "alpha", "beta", "event_round"]
    for (dataset, setting, alpha, beta, tau0), g in runs.groupby(keys, sort=True):
        values, observed = [], 0
        for _, pair in g.groupby("seed"):
            by = {r["event_policy"]: r["run_dir"] for _, r in pair.iterrows()}
            if {"include", "exclude"} - set(by):
                continue
            inc, exc = curve(by["include"], metric), curve(by["exclude"], metric)
            values.append(rounds_to_cross(inc, exc, int(tau0)))
            observed = max(observed, observed_after(inc, int(tau0)))
        rows.append({"dataset": dataset, "setting": setting, "alpha": alpha, "beta": beta, "tau0": int(tau0),
                     "method": "include_vs_exclude", **summarise(values, observed)})
    tidy = pd.DataFrame(rows)
    if tidy.empty:
        return pd.DataFrame(columns=[*TIDY_COLUMNS, "alpha", "beta"])
    ref = reference.rename(columns={"rounds_to_cross": "paper"})
    return tidy.merge(ref[["dataset", "alpha", "beta", "tau0", "paper"]], how="left",
                      on=["dataset", "alpha", "beta", "tau0"])


def layout(tidy: pd.DataFrame, row_keys: list[str]) -> pd.DataFrame:
    """People's layout: one row per (row_keys, τ0) with reproduced and paper cells per method."""
    out = []
    for keys, g in tidy.groupby([*row_keys, "tau0"], sort=True):
        row = dict(zip([*row_keys, "τ0"], keys, strict=True))
        for _, r in g.iterrows():
            row[f"{r['method']} (reproduced)"] = cell_text(r)
            row[f"{r['method']} (paper)"] = "—" if pd.isna(r["paper"]) else f"{r['paper']:g}"
        out.append(row)
    return pd.DataFrame(out)
