"""Ruan et al. (2021) Table 3: % improvement in test accuracy of Scheme B over A and of C over B.

The paper reports "the % improvement in the test accuracies", i.e. a *relative* change
``100 * (acc_new - acc_old) / acc_old``, not a difference in percentage points. Each reproduced
value is computed per seed on the final-round global test accuracy of two runs that share
dataset, setting, |T| and seed, then aggregated over seeds as mean and sample std (ddof=1).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hetfl.io import atomic_write_text

__all__ = [
    "COMPARISONS",
    "OUTPUT_COLUMNS",
    "accuracy_difference",
    "default_caption",
    "percent_improvement",
    "write_tables",
]

#: comparison name -> (new scheme, old scheme); the value is the improvement of new over old.
COMPARISONS: dict[str, tuple[str, str]] = {"B_vs_A": ("B", "A"), "C_vs_B": ("C", "B")}
CELL = ["dataset", "setting", "num_traces"]
OUTPUT_COLUMNS = [
    *CELL,
    "comparison",
    "reproduced_mean",
    "reproduced_std",
    "n_seeds",
    "paper",
    "same_sign",
    "n_excluded",
]
_RUN_COLUMNS = [*CELL, "seed", "scheme", "status", "final_test_accuracy"]
_REFERENCE_COLUMNS = [*CELL, "comparison", "pct_improvement"]
_LABELS = {"B_vs_A": "B vs A", "C_vs_B": "C vs B"}
_NO_VALUE = "—"

Numeric = float | np.ndarray | pd.Series


def percent_improvement(new: Numeric, old: Numeric) -> Numeric:
    """Relative improvement ``100 * (new - old) / old`` in percent (not percentage points).

    Table 3 of Ruan et al. reports "% improvement in the test accuracies", a relative change:
    e.g. 0.80 -> 0.88 is +10 %, not +8 points. ``old == 0`` gives ``inf``/``nan`` (no exception).
    """
    if np.isscalar(new) and np.isscalar(old):
        new, old = np.float64(new), np.float64(old)
    with np.errstate(divide="ignore", invalid="ignore"):
        result = 100.0 * (new - old) / old
    return float(result) if np.ndim(result) == 0 else result


def _require(frame: pd.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing}; has {list(frame.columns)}")


def _per_seed(cell_runs: pd.DataFrame, new: str, old: str) -> tuple[list[float], int]:
    """Per-seed improvements of ``new`` over ``old`` and the number of seeds that had to be excluded."""
    values: list[float] = []
    excluded = 0
    for _, seed_runs in cell_runs.groupby("seed", sort=True):
        acc = dict(zip(seed_runs["scheme"], seed_runs["acc"], strict=True))
        if new not in acc and old not in acc:
            continue
        acc_new, acc_old = acc.get(new, np.nan), acc.get(old, np.nan)
        if np.isnan(acc_new) or np.isnan(acc_old):
            excluded += 1
        else:
            values.append(float(percent_improvement(acc_new, acc_old)))
    return values, excluded


def accuracy_difference(runs: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Reproduce Table 3 from per-run results (as returned by ``collect_runs``).

    Runs are paired by (dataset, setting, num_traces, seed). A run is usable when its status is
    "ok" and its ``final_test_accuracy`` is finite; a seed whose pair lacks a usable partner is
    excluded from that comparison and counted in ``n_excluded``. Per cell and comparison the
    per-seed improvements give ``reproduced_mean``/``reproduced_std`` (ddof=1; NaN for < 2 seeds)
    and ``n_seeds``. ``paper`` comes from ``reference`` (NaN where absent). ``same_sign`` is a
    nullable boolean: NA when either value is missing or the paper value is 0.0 (sign undefined).
    Schemes other than A/B/C are ignored. Rows are sorted by dataset, setting, num_traces, comparison.
    """
    _require(runs, _RUN_COLUMNS, "runs")
    _require(reference, _REFERENCE_COLUMNS, "reference")
    df = runs.loc[runs["scheme"].isin({"A", "B", "C"}), _RUN_COLUMNS].copy()
    df["num_traces"] = df["num_traces"].astype("int64")
    dup = df.duplicated([*CELL, "seed", "scheme"], keep=False)
    if dup.any():
        examples = df.loc[dup, [*CELL, "seed", "scheme"]].drop_duplicates().head(5).to_dict("records")
        raise ValueError(f"several runs for the same dataset/setting/num_traces/seed/scheme, e.g. {examples}")
    acc = pd.to_numeric(df["final_test_accuracy"], errors="coerce").astype(float)
    df["acc"] = acc.where((df["status"] == "ok") & np.isfinite(acc))

    records: list[dict[str, Any]] = []
    for cell, cell_runs in df.groupby(CELL, sort=True):
        for comparison, (new, old) in COMPARISONS.items():
            values, excluded = _per_seed(cell_runs, new, old)
            seeds = pd.Series(values, dtype=float)
            records.append(
                {
                    **dict(zip(CELL, cell, strict=True)),
                    "comparison": comparison,
                    "reproduced_mean": seeds.mean(),
                    "reproduced_std": seeds.std(ddof=1),
                    "n_seeds": len(seeds),
                    "n_excluded": excluded,
                }
            )
    table = pd.DataFrame.from_records(
        records, columns=[c for c in OUTPUT_COLUMNS if c not in ("paper", "same_sign")]
    )
    table = table.astype({"num_traces": "int64", "n_seeds": "int64", "n_excluded": "int64"})
    table[["reproduced_mean", "reproduced_std"]] = table[["reproduced_mean", "reproduced_std"]].astype(float)

    ref = reference.loc[:, _REFERENCE_COLUMNS].rename(columns={"pct_improvement": "paper"})
    ref = ref.astype({"num_traces": "int64", "paper": float})
    if ref.duplicated([*CELL, "comparison"]).any():
        raise ValueError("reference has duplicate dataset/setting/num_traces/comparison rows")
    table = table.merge(ref, on=[*CELL, "comparison"], how="left", validate="one_to_one")

    comparable = table["reproduced_mean"].notna() & table["paper"].notna() & (table["paper"] != 0)
    same_sign = pd.Series(pd.NA, index=table.index, dtype="boolean")
    same_sign[comparable] = np.sign(table.loc[comparable, "reproduced_mean"]) == np.sign(
        table.loc[comparable, "paper"]
    )
    table["same_sign"] = same_sign
    table = table.sort_values([*CELL, "comparison"], kind="stable").reset_index(drop=True)
    return table.loc[:, OUTPUT_COLUMNS]


def default_caption(settings_note: str, rounds: int, n_devices: int) -> str:
    """Caption stating how the % improvement is computed, followed by the caller's ``settings_note``."""
    if rounds <= 0 or n_devices <= 0:
        raise ValueError(f"rounds and n_devices must be positive, got {rounds} and {n_devices}")
    caption = (
        "Reproduction of Ruan et al. (2021), Table 3: % improvement in test accuracy of Scheme B "
        "w.r.t. Scheme A (B vs A) and of Scheme C w.r.t. Scheme B (C vs B). "
        f"For each seed, the improvement is 100·(acc_B − acc_A)/acc_A (resp. 100·(acc_C − acc_B)/acc_B), "
        f"where acc is the global model's test accuracy at the final round ({rounds} rounds, "
        f"{n_devices} devices); it is a relative change, not a difference in percentage points. "
        "Reproduced cells give the mean ± sample standard deviation (ddof = 1) over seeds; "
        "a seed is excluded from a comparison when either run diverged or is missing. "
        "|T| = j uses the first j participation traces of the paper's Table 2. "
        "Paper values are from the paper's Table 3 (200 rounds)."
    )
    note = settings_note.strip()
    return f"{caption} {note}" if note else caption


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def _reproduced_cell(row: pd.Series) -> str:
    if row["n_seeds"] == 0:
        text = _NO_VALUE
    elif row["n_seeds"] == 1 or pd.isna(row["reproduced_std"]):
        text = _fmt(row["reproduced_mean"])
    else:
        text = f"{_fmt(row['reproduced_mean'])} ± {_fmt(row['reproduced_std'])}"
    notes = [f"n={row['n_seeds']}"] if row["n_seeds"] == 1 else []
    if row["n_excluded"] > 0:
        notes.append(f"{row['n_excluded']} excl.")
    return f"{text} ({', '.join(notes)})" if notes else text


def _paper_layout(table: pd.DataFrame) -> pd.DataFrame:
    """One row per dataset/setting/|T|; reproduced and paper cells side by side, as strings."""
    _require(table, OUTPUT_COLUMNS, "table")
    rows: list[dict[str, str]] = []
    for (dataset, setting, num_traces), group in table.groupby(CELL, sort=True):
        row = {"Dataset": str(dataset), "Setting": str(setting), "|T|": str(num_traces)}
        for comparison, label in _LABELS.items():
            match = group.loc[group["comparison"] == comparison]
            if match.empty:
                reproduced = paper = _NO_VALUE
            else:
                first = match.iloc[0]
                reproduced = _reproduced_cell(first)
                paper = _NO_VALUE if pd.isna(first["paper"]) else _fmt(first["paper"])
            row[f"{label} (reproduced)"] = reproduced
            row[f"{label} (paper)"] = paper
        rows.append(row)
    columns = ["Dataset", "Setting", "|T|"] + [
        f"{lab} ({kind})" for lab in _LABELS.values() for kind in ("reproduced", "paper")
    ]
    return pd.DataFrame(rows, columns=columns)


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "·": r"$\cdot$",
    "−": r"$-$",
    "×": r"$\times$",
    "—": "---",
    "–": "--",
    "α": r"$\alpha$",
    "β": r"$\beta$",
    "|": r"\textbar{}",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
}


def _latex(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _to_markdown(layout: pd.DataFrame, caption: str) -> str:
    md = layout.rename(columns={"|T|": r"\|T\|"})
    body = md.to_markdown(index=False, disable_numparse=True, colalign=["left"] * len(md.columns))
    return f"{caption}\n\n{body}\n"


def _to_latex(layout: pd.DataFrame, caption: str, label: str) -> str:
    header = [_latex(c) for c in layout.columns]
    header[2] = r"$|\mathcal{T}|$"
    lines = [
        "% Generated by hetfl.reports.accuracy_difference -- do not edit by hand.",
        r"\begin{table}[ht]",
        r"\centering",
        rf"\caption{{{_latex(caption)}}}",
        rf"\label{{tab:{label}}}",
        r"\begin{tabular}{ll" + "r" * (len(header) - 2) + "}",
        r"\hline",
        " & ".join(header) + r" \\",
        r"\hline",
        *(" & ".join(_latex(str(v)) for v in row) + r" \\" for row in layout.itertuples(index=False)),
        r"\hline",
        r"\end{tabular}",
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


def write_tables(table: pd.DataFrame, out_stem: Path, caption: str) -> None:
    """Write ``<stem>.csv`` (the table as is), ``<stem>.md`` and ``<stem>.tex`` (paper layout), atomically."""
    out_stem = Path(out_stem)
    layout = _paper_layout(table)
    label = re.sub(r"[^A-Za-z0-9:_-]", "-", out_stem.name)
    outputs = {
        ".csv": table.to_csv(index=False),
        ".md": _to_markdown(layout, caption),
        ".tex": _to_latex(layout, caption, label),
    }
    for suffix, text in outputs.items():
        atomic_write_text(out_stem.with_name(out_stem.name + suffix), text)
