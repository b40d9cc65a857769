"""Fairness of the per-device losses, per method (lecture notes, seed 001, "Measures of fairness in FL").

For the K devices of a round's test set, with F_i the loss of the evaluated model on device i's local
training data (engine.evaluate.loss_fairness, recorded every evaluated round):

    variance  (1/K) Σ_i (F_i − F̄)²
    entropy   −Σ_i q_i log q_i,  q_i = F_i / Σ_j F_j        (log K when every device has the same loss)
    Jain      (Σ_i F_i)² / (K Σ_i F_i²)                       (1 when equal, 1/K when one device has all)

Per run hetfl takes the values at the final evaluated round (the model a user would keep); per cell
(method × data set × setting × |T| × scheme) the mean and 95 % Student-t CI over seeds, and the paired
per-seed difference to FedAvg with its CI. No paper reports these numbers for EFL's methods, so every
verdict is "not comparable"; the caption says so.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from hetfl.algorithms import method_label
from hetfl.reports.bmta import (
    KEYS,
    REFERENCE_METHOD,
    check_one_run_per_seed,
    model_note,
    paired,
    reference_runs,
)
from hetfl.reports.event_tables import curve
from hetfl.reports.tables import load_runs, notes
from hetfl.reports.verdicts import Interval, counts_text, interval_text, t_interval, within
from hetfl.reports.writers import write_frame_tables

#: metric → the name the lecture notes give it
MEASURES = {"client_loss_variance": "variance", "client_loss_entropy": "entropy", "client_loss_jain": "Jain"}
NO_PAPER = "no paper reports these measures for EFL's methods (the lecture notes define them)"


def final_value(run_dir: str, metric: str) -> float:
    """The metric at the run's last evaluated round (NaN when that round has none, e.g. a diverged run)."""
    values = curve(run_dir, metric)
    return float(values.iloc[-1]) if len(values) else np.nan


def fairness(runs: pd.DataFrame) -> pd.DataFrame:
    """One tidy row per (method, data set, setting, |T|, scheme) with each measure's mean, CI and paired
    difference to FedAvg over seeds."""
    check_one_run_per_seed(runs, "fairness")
    runs = runs.copy()
    for metric in MEASURES:
        runs[metric] = [final_value(d, metric) for d in runs["run_dir"]]
    rows = []
    for (algorithm, dataset, setting, k, scheme), g in runs.groupby(KEYS, sort=True):
        first = g.iloc[0]
        ref = reference_runs(runs, first) if algorithm != REFERENCE_METHOD else g.iloc[0:0]
        row: dict[str, object] = {"method": method_label(algorithm), "dataset": dataset, "setting": setting,
                                  "num_traces": int(k), "scheme": scheme, "n_seeds": len(g),
                                  "n_diverged": int((g["status"] != "ok").sum())}
        k = first.get("num_devices")
        k_devices = float(k) if k is not None and not pd.isna(k) and k >= 1 else math.inf  # unknown: no bound
        ranges = {"variance": (0.0, math.inf), "entropy": (0.0, math.log(k_devices)),
                  "Jain": (1.0 / k_devices, 1.0)}  # what each measure can take over K devices
        for metric, name in MEASURES.items():
            values = g.set_index("seed")[metric]
            iv = within(t_interval(values.dropna().to_list()), *ranges[name])
            diff = t_interval(paired(values, ref.set_index("seed")[metric])) if len(ref) else t_interval([])
            row.update({f"{name}_mean": iv.mean, f"{name}_ci_low": iv.low, f"{name}_ci_high": iv.high,
                        f"{name}_diff_mean": diff.mean, f"{name}_diff_ci_low": diff.low,
                        f"{name}_diff_ci_high": diff.high})
        row["verdict"] = "not comparable"
        rows.append(row)
    return pd.DataFrame(rows)


def layout(tidy: pd.DataFrame) -> pd.DataFrame:
    varying = [c for c in ("dataset", "setting", "num_traces", "scheme") if tidy[c].nunique() > 1]
    out = []
    for _, r in tidy.iterrows():
        row = {"method": r["method"], **{c: str(r[c]) for c in varying}}
        for name in MEASURES.values():
            row[f"{name} [95% CI]"] = _interval(r, name, "", r["n_seeds"])
            row[f"{name} Δ vs FedAvg"] = _interval(r, name, "_diff", r["n_seeds"])
        row["verdict"] = r["verdict"]
        out.append(row)
    return pd.DataFrame(out)


def _interval(r: pd.Series, name: str, kind: str, n: int) -> str:
    mean = r[f"{name}{kind}_mean"]
    if pd.isna(mean):
        return "—"
    digits = 3 if name == "Jain" else 4
    return interval_text(Interval(mean, np.nan, r[f"{name}{kind}_ci_low"], r[f"{name}{kind}_ci_high"], n),
                         digits=digits)


def caption(settings_note: str, verdicts: list[str] | None = None) -> str:
    """verdicts: the cells' (as the report's fidelity summary counts them), counted in the caption."""
    counted = f"Verdicts: {counts_text(verdicts)}. " if verdicts is not None else ""
    return ("Fairness of the per-device losses (lecture notes, seed 001): variance (1/K)Σ(F_i − F̄)², entropy "
            "−Σ q_i log q_i with q_i = F_i/ΣF_j (at most log K; natural log) and Jain's index "
            "(ΣF_i)²/(KΣF_i²) (1 = equal), F_i = the loss of the evaluated model on device i's local "
            "training data, over the devices of the test set; values at the final evaluated round. Evaluated "
            "model: the global model (FedAMP: the data-weighted mean of the devices' models; APFL: the "
            "shared w), not the personalised "
            "models the BMTA table scores. Cells: mean [95% Student-t CI] over seeds; 'Δ vs FedAvg' = paired "
            f"per-seed difference on the same split and seed. Verdict: not comparable, {NO_PAPER}. "
            + counted + settings_note)


def write(runs: pd.DataFrame, out_stem: Path, settings_note: str) -> pd.DataFrame:
    tidy = fairness(runs)
    shown = [str(v) for v in tidy["verdict"] if isinstance(v, str) and v != "—"]
    write_frame_tables(tidy, layout(tidy), out_stem, caption(settings_note + " " + model_note(runs), shown))
    return tidy


def build(run_dirs: list[Path], out_stem: Path) -> Path:
    """The table from run directories (reports.tables.BUILDERS)."""
    runs = load_runs(run_dirs)
    write(runs, out_stem, notes(runs))
    return out_stem
