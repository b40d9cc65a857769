"""Ruan et al. (2021) Table 3: the improvement in test accuracy of Scheme B over A and of C over B.

§5.2: "Table 3 records the differences in the test accuracies between different aggregation schemes after
200 global epochs"; the table's title says "% improvement". Both readings are computed from the same
runs (docs/readings.md): ``points``, the difference in percentage points 100·(acc_new − acc_old) — the
paper's own sentence, printed in the .md/.tex — and ``relative``, 100·(acc_new − acc_old)/acc_old. Each
value is a paired per-seed difference of two runs that share dataset, setting, |T|, split, traces and
seed, on the final-round test accuracy; over seeds a cell reports the mean, the sample std, a 95 % Student-t
interval (hetfl.reports.verdicts) and a verdict against the paper's value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hetfl.reports.verdicts import RULE_TEXT, interval_text, t_interval, verdict
from hetfl.reports.writers import write_frame_tables

__all__ = [
    "COMPARISONS",
    "IMPROVEMENTS",
    "OUTPUT_COLUMNS",
    "accuracy_difference",
    "default_caption",
    "percent_improvement",
    "point_difference",
    "write_tables",
]

#: comparison name -> (new scheme, old scheme); the value is the improvement of new over old.
COMPARISONS: dict[str, tuple[str, str]] = {"B_vs_A": ("B", "A"), "C_vs_B": ("C", "B")}
#: how an improvement is expressed; the first is the printed one (the paper's "differences")
IMPROVEMENTS = ("points", "relative")
CELL = ["dataset", "setting", "num_traces"]
OUTPUT_COLUMNS = [
    *CELL,
    "comparison",
    "improvement",
    "reproduced_mean",
    "reproduced_std",
    "ci_low",
    "ci_high",
    "n_seeds",
    "paper",
    "same_sign",
    "verdict",
    "n_excluded",
]
_RUN_COLUMNS = [*CELL, "seed", "scheme", "status", "final_test_accuracy"]
_REFERENCE_COLUMNS = [*CELL, "comparison", "pct_improvement"]
_LABELS = {"B_vs_A": "B vs A", "C_vs_B": "C vs B"}
_NO_VALUE = "—"

Numeric = float | np.ndarray | pd.Series


def percent_improvement(new: Numeric, old: Numeric) -> Numeric:
    """Relative improvement ``100 * (new - old) / old`` in percent (the ``relative`` reading).

    0.80 -> 0.88 is +10 %. ``old == 0`` gives ``inf``/``nan`` (no exception).
    """
    if np.isscalar(new) and np.isscalar(old):
        new, old = np.float64(new), np.float64(old)
    with np.errstate(divide="ignore", invalid="ignore"):
        result = 100.0 * (new - old) / old
    return float(result) if np.ndim(result) == 0 else result


def point_difference(new: Numeric, old: Numeric) -> Numeric:
    """Difference in percentage points ``100 * (new - old)`` (the ``points`` reading): 0.80 -> 0.88 is +8."""
    result = 100.0 * (np.float64(new) - np.float64(old)) if np.isscalar(new) else 100.0 * (new - old)
    return float(result) if np.ndim(result) == 0 else result


_FORMS = {"points": point_difference, "relative": percent_improvement}


def _require(frame: pd.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing}; has {list(frame.columns)}")


def _per_seed(cell_runs: pd.DataFrame, new: str, old: str, form: str) -> tuple[list[float], int]:
    """Per-seed improvements of ``new`` over ``old`` and the number of seeds that had to be excluded."""
    values: list[float] = []
    excluded = 0
    for _, seed_runs in cell_runs.groupby("seed", sort=True):
        acc = dict(zip(seed_runs["scheme"], seed_runs["acc"], strict=True))
        if new not in acc and old not in acc:
            continue
        acc_new, acc_old = acc.get(new, np.nan), acc.get(old, np.nan)
        value = np.nan if np.isnan(acc_new) or np.isnan(acc_old) else float(_FORMS[form](acc_new, acc_old))
        if np.isfinite(value):
            values.append(value)
        else:  # no usable partner, or a relative change from an accuracy of 0 (inf or 0/0)
            excluded += 1
    return values, excluded


def accuracy_difference(runs: pd.DataFrame, reference: pd.DataFrame, resolution: float = 0.0) -> pd.DataFrame:
    """Reproduce Table 3 from per-run results (as returned by ``collect_runs``), in both forms.

    Runs are paired by (dataset, setting, num_traces, seed). A run is usable when its status is "ok" and
    its ``final_test_accuracy`` is finite; a seed whose pair lacks a usable partner (or, in the relative
    form, whose old accuracy is 0) is excluded from that comparison and counted in ``n_excluded``. Per
    cell, comparison and improvement form: mean, sample std (ddof=1), the 95 % t-interval [ci_low,
    ci_high] (NaN below 2 seeds), ``n_seeds``, the paper's value
    (``reference``; the paper prints one number per cell, compared with both forms), ``same_sign``
    (nullable; NA when a value is missing or the paper's is 0) and the ``verdict``. A ``comparable``
    column in ``runs`` (False where the set-up is not the paper's) makes the cell "not comparable".
    Rows are sorted by dataset, setting, num_traces, comparison, improvement.
    """
    _require(runs, _RUN_COLUMNS, "runs")
    _require(reference, _REFERENCE_COLUMNS, "reference")
    cols = _RUN_COLUMNS + (["comparable"] if "comparable" in runs.columns else [])
    df = runs.loc[runs["scheme"].isin({"A", "B", "C"}), cols].copy()
    df["num_traces"] = df["num_traces"].astype("int64")
    dup = df.duplicated([*CELL, "seed", "scheme"], keep=False)
    if dup.any():
        examples = df.loc[dup, [*CELL, "seed", "scheme"]].drop_duplicates().head(5).to_dict("records")
        raise ValueError(f"several runs for the same dataset/setting/num_traces/seed/scheme, e.g. {examples}")
    acc = pd.to_numeric(df["final_test_accuracy"], errors="coerce").astype(float)
    df["acc"] = acc.where((df["status"] == "ok") & np.isfinite(acc))

    ref = reference.loc[:, _REFERENCE_COLUMNS].rename(columns={"pct_improvement": "paper"})
    ref = ref.astype({"num_traces": "int64", "paper": float})
    if ref.duplicated([*CELL, "comparison"]).any():
        raise ValueError("reference has duplicate dataset/setting/num_traces/comparison rows")
    paper = {tuple(k): v for *k, v in ref.itertuples(index=False)}

    records: list[dict[str, Any]] = []
    for cell, cell_runs in df.groupby(CELL, sort=True):
        comparable = bool(cell_runs["comparable"].all()) if "comparable" in cell_runs else True
        for comparison, (new, old) in COMPARISONS.items():
            value = paper.get((*cell, comparison), np.nan)
            for form in IMPROVEMENTS:
                values, excluded = _per_seed(cell_runs, new, old, form)
                iv = t_interval(values)
                same = pd.NA if np.isnan(iv.mean) or np.isnan(value) or value == 0 \
                    else bool(np.sign(iv.mean) == np.sign(value))
                records.append({
                    **dict(zip(CELL, cell, strict=True)), "comparison": comparison, "improvement": form,
                    "reproduced_mean": iv.mean, "reproduced_std": iv.std,
                    "ci_low": iv.low, "ci_high": iv.high,
                    "n_seeds": iv.n, "paper": value, "same_sign": same,
                    "verdict": verdict(value, iv.low, iv.high, comparable, resolution=resolution),
                    "n_excluded": excluded,
                })
    table = pd.DataFrame.from_records(records, columns=OUTPUT_COLUMNS)
    table = table.astype({"num_traces": "int64", "n_seeds": "int64", "n_excluded": "int64",
                          "same_sign": "boolean"})
    for c in ("reproduced_mean", "reproduced_std", "ci_low", "ci_high", "paper"):
        table[c] = table[c].astype(float)
    return table.sort_values([*CELL, "comparison", "improvement"], kind="stable").reset_index(drop=True)


def default_caption(settings_note: str, rounds: int, n_devices: int) -> str:
    """Caption stating how the cells are computed and judged, followed by the caller's ``settings_note``."""
    if rounds <= 0 or n_devices <= 0:
        raise ValueError(f"rounds and n_devices must be positive, got {rounds} and {n_devices}")
    caption = (
        "Reproduction of Ruan et al. (2021), Table 3: improvement in test accuracy of Scheme B over Scheme A "
        "(B vs A) and of Scheme C over Scheme B (C vs B). "
        "Printed: the difference in percentage points, 100·(acc_B − acc_A) (resp. 100·(acc_C − acc_B)), "
        "as §5.2 says ('records the differences in the test accuracies'); the CSV also carries the relative "
        "change 100·(acc_B − acc_A)/acc_A (improvement = relative). "
        f"acc is the global model's test accuracy at the final round ({rounds} rounds, {n_devices} devices), "
        "and each value is a paired per-seed difference of runs sharing split, traces and seed. "
        "Cells: mean [95 % Student-t CI] over seeds; a seed is excluded from a comparison when either run "
        "diverged or is missing. Verdict against the paper (hetfl.reports.verdicts): "
        + RULE_TEXT["difference"] + "; not comparable = a set-up that differs from the paper's, named below. "
        "|T| = j uses the first j participation traces of the paper's Table 2."
    )
    note = settings_note.strip()
    return f"{caption} {note}" if note else caption


def _reproduced_cell(row: pd.Series) -> str:
    from hetfl.reports.verdicts import Interval

    iv = Interval(row["reproduced_mean"], row["reproduced_std"], row["ci_low"], row["ci_high"],
                  int(row["n_seeds"]))
    text = interval_text(iv)
    notes = [f"n={row['n_seeds']}"] if row["n_seeds"] == 1 else []
    if row["n_excluded"] > 0:
        notes.append(f"{row['n_excluded']} excl.")
    return f"{text} ({', '.join(notes)})" if notes else text


def paper_layout(table: pd.DataFrame, improvement: str = "points") -> pd.DataFrame:
    """One row per dataset/setting/|T|: reproduced cell, paper value and verdict per comparison (strings)."""
    _require(table, OUTPUT_COLUMNS, "table")
    table = table[table["improvement"] == improvement]
    rows: list[dict[str, str]] = []
    for (dataset, setting, num_traces), group in table.groupby(CELL, sort=True):
        row = {"Dataset": str(dataset), "Setting": str(setting), "|T|": str(num_traces)}
        for comparison, label in _LABELS.items():
            match = group.loc[group["comparison"] == comparison]
            first = None if match.empty else match.iloc[0]
            row[f"{label} (reproduced)"] = _NO_VALUE if first is None else _reproduced_cell(first)
            row[f"{label} (paper)"] = _NO_VALUE if first is None or pd.isna(first["paper"]) \
                else f"{first['paper']:.1f}"
            row[f"{label} verdict"] = _NO_VALUE if first is None else str(first["verdict"])
        rows.append(row)
    columns = ["Dataset", "Setting", "|T|"] + [
        f"{lab}{kind}" for lab in _LABELS.values() for kind in (" (reproduced)", " (paper)", " verdict")
    ]
    return pd.DataFrame(rows, columns=columns)


def write_tables(table: pd.DataFrame, out_stem: Path, caption: str) -> None:
    """``<stem>.csv`` (every row, both improvement forms), ``<stem>.md`` and ``<stem>.tex`` (the paper's
    layout, in points), each atomically."""
    write_frame_tables(table, paper_layout(table), out_stem, caption)
