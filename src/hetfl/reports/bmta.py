"""Ma et al. (2022) EFL Table 2: best mean testing accuracy (BMTA), in percent.

EFL §5.2: "the best mean testing accuracy (BMTA) in percentage, where the mean testing accuracy is the
average of the testing accuracy on all participants". Per run, the mean testing accuracy of a round is
the metric ``mean_client_accuracy`` (engine.evaluate: the unweighted mean over devices of each device's
accuracy on its own local test set); BMTA is its maximum over the evaluated rounds. Over seeds hetfl
reports the mean and sample std of the per-seed BMTA (the paper does not say how it combines seeds).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hetfl.algorithms import method_label
from hetfl.reports.event_tables import curve

METRIC = "mean_client_accuracy"
TIDY_COLUMNS = ["method", "dataset", "setting", "num_traces", "scheme", "reproduced_mean", "reproduced_std",
                "n_seeds", "n_diverged", "best_round_mean", "paper"]


def best_mean_test_accuracy(mean_accuracy: pd.Series) -> tuple[float, int | None]:
    """(BMTA in %, the round where it is reached) of one run's mean_client_accuracy curve; NaN rounds (a
    diverged run's last round) are skipped; (nan, None) when no round has a value."""
    values = mean_accuracy.dropna()
    if values.empty:
        return float("nan"), None
    return 100.0 * float(values.max()), int(values.idxmax())


def bmta(runs: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """runs: one row per run with algorithm, dataset, setting, num_traces, scheme, seed, status, run_dir.

    One tidy row per (method, dataset, setting, |T|, scheme); the paper's value joins on (method, dataset),
    and the paper's methods hetfl did not run get a row of their own with no reproduced value.
    """
    rows = []
    keys = ["algorithm", "dataset", "setting", "num_traces", "scheme"]
    for (algorithm, dataset, setting, k, scheme), g in runs.groupby(keys, sort=True):
        found = [best_mean_test_accuracy(curve(d, METRIC)) for d in g["run_dir"]]
        values = [v for v, _ in found if not np.isnan(v)]
        rows.append({
            "method": method_label(algorithm), "dataset": dataset, "setting": setting,
            "num_traces": int(k), "scheme": scheme,
            "reproduced_mean": float(np.mean(values)) if values else np.nan,
            "reproduced_std": float(np.std(values, ddof=1)) if len(values) > 1 else np.nan,
            "n_seeds": len(found), "n_diverged": int((g["status"] != "ok").sum()),
            "best_round_mean": float(np.mean([r for _, r in found if r is not None])) if values else np.nan,
        })
    tidy = pd.DataFrame(rows, columns=TIDY_COLUMNS[:-1])
    ref = reference.rename(columns={"bmta_pct": "paper"})[["method", "dataset", "paper"]]
    tidy = tidy.merge(ref, how="left", on=["method", "dataset"])
    not_run = ref[ref["dataset"].isin(tidy["dataset"]) & ~ref["method"].isin(tidy["method"])]
    return pd.concat([tidy, not_run], ignore_index=True)[TIDY_COLUMNS]


def layout(tidy: pd.DataFrame) -> pd.DataFrame:
    """People's layout: a row per method (and setting, |T|, scheme when they vary), a reproduced and a
    paper column per dataset."""
    varying = [c for c in ("setting", "num_traces", "scheme") if tidy[c].dropna().nunique() > 1]
    out: dict[tuple, dict[str, str]] = {}
    for _, r in tidy.iterrows():
        key = (r["method"], *(r[c] for c in varying))
        row = out.setdefault(key, {"method": r["method"], **{c: _text(r[c]) for c in varying}})
        row[f"{r['dataset']} (reproduced)"] = _cell(r)
        row[f"{r['dataset']} (paper)"] = "—" if pd.isna(r["paper"]) else f"{r['paper']:.2f}"
    frame = pd.DataFrame(list(out.values()))
    return frame.fillna("—")


def _text(value: object) -> str:
    if pd.isna(value):
        return "—"
    return f"{int(value)}" if isinstance(value, float) and value.is_integer() else str(value)


def _cell(r: pd.Series) -> str:
    if pd.isna(r["n_seeds"]):
        return "not run"
    if pd.isna(r["reproduced_mean"]):
        return "diverged"
    text = f"{r['reproduced_mean']:.2f}"
    if not pd.isna(r["reproduced_std"]):
        text += f" ± {r['reproduced_std']:.2f}"
    return text
