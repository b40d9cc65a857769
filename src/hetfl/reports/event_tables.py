"""Ruan et al. Table 4 (fast-reboot recovery after an arrival) and Table 5 (rounds until the include and
exclude loss curves cross after a departure), from run directories.

Each seed's count is observed (r rounds after τ0) or censored ("> R": not within the R rounds observed
after τ0). Over seeds a cell reports a 95 % interval by the bounds rule of hetfl.reports.verdicts: a
censored count lies in [R + 1, ∞). Table 4's cell is the paired per-seed difference vanilla − fast (the
rounds fast reboot saves, same seed, split and traces), reported beside each method's own count; Table 5's
cell is the crossing round itself, a paired statistic of the include and exclude runs of one seed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from hetfl.reports.curves import observed_after, rounds_to_cross, rounds_to_recover
from hetfl.reports.results import load_metrics
from hetfl.reports.verdicts import Interval, bounded_interval, interval_text, verdict, within

TIDY_COLUMNS = ["dataset", "setting", "tau0", "method", "reproduced_mean", "reproduced_std", "ci_low",
                "ci_high", "n_seeds", "n_never", "observed_rounds", "paper", "verdict"]
DIFFERENCE = "vanilla_minus_fast"  # Table 4's paired cell: rounds fast reboot saves


def curve(run_dir: str | Path, metric: str) -> pd.Series:
    m = load_metrics(Path(run_dir))
    m = m[m["metric"] == metric]
    return pd.Series(m["value"].to_numpy(), index=m["round"].to_numpy(), dtype=float).sort_index()


def bounds(value: int | None, observed: int) -> tuple[float, float]:
    """A seed's count as an interval: [r, r] when observed, [R + 1, ∞) when it did not happen within R."""
    return (float(value), float(value)) if value is not None else (observed + 1.0, math.inf)


def summarise(lower: list[float], upper: list[float], observed: int, paper: float,
              comparable: bool = True, kind: str = "level") -> dict[str, float | int | str]:
    """The cell's numbers: mean/std (only when no seed is censored), bounds-rule CI, censored count, verdict.

    kind (reports.verdicts): "level" for a count of rounds, "difference" for vanilla − fast."""
    iv = bounded_interval(lower, upper) if lower else Interval(math.nan, math.nan, math.nan, math.nan, 0)
    if kind == "level":  # a count of epochs from τ0 on is at least 1 (curves.py)
        iv = within(iv, low=1.0)
    return {"reproduced_mean": iv.mean, "reproduced_std": iv.std, "ci_low": iv.low, "ci_high": iv.high,
            "n_seeds": iv.n, "n_never": iv.n_censored, "observed_rounds": observed, "paper": paper,
            "verdict": verdict(paper, iv.low, iv.high, comparable, kind)}


def cell_text(row: pd.Series) -> str:
    if row["n_seeds"] == 0:
        return "—"
    iv = Interval(row["reproduced_mean"], row["reproduced_std"], row["ci_low"], row["ci_high"],
                  int(row["n_seeds"]), int(row["n_never"]))
    if row["n_never"] == row["n_seeds"] and math.isinf(row["ci_high"]) and row["method"] != DIFFERENCE:
        return f"> {row['observed_rounds']} (all {row['n_seeds']} seeds)"
    return interval_text(iv)


def _paper(reference: pd.DataFrame, keys: dict, value: str) -> float:
    ref = reference
    for k, v in keys.items():
        ref = ref[ref[k] == v]
    return float(ref[value].iloc[0]) if len(ref) else math.nan


def check_one_run_per_policy(runs: pd.DataFrame, table: str, cell: tuple[str, ...] = ()) -> None:
    """A cell (dataset, setting, τ0, and `cell`'s columns) holds one run per seed and policy: two
    experiments with the same setting and τ0 (another algorithm, or the same one with another step size)
    were paired by seed silently, the later run replacing the earlier (an audit). ValueError naming the
    cell and the experiments."""
    keys = ["dataset", "setting", *cell, "event_round", "seed", "event_policy"]
    dup = runs[runs.duplicated(keys, keep=False)]
    if dup.empty:
        return
    first = dup.iloc[0]
    same = dup[(dup[keys] == first[keys]).all(axis=1)]
    where = (", from the experiments " + ", ".join(sorted(same["experiment"].astype(str).unique()))
             if "experiment" in same else "")
    raise ValueError(f"table {table}: seed {first['seed']} of the cell (dataset {first['dataset']}, setting "
                     f"{first['setting']}, τ0 {first['event_round']}) has several {first['event_policy']} "
                     f"runs{where}; allowed: one run per seed and policy (one experiment per setting and τ0 "
                     "in a config: another algorithm or step size in a config of its own)")


def fast_reboot(runs: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """runs: one row per run with dataset, setting, event_round, event_policy, seed, run_dir (and optionally
    comparable). Rows per (dataset, setting, τ0): fast_reboot, vanilla and their paired difference."""
    check_one_run_per_policy(runs, "fast_reboot")
    ref = reference.assign(method=lambda d: d["method"].str.replace("vanilla_reboot", "vanilla"))
    rows = []
    for (dataset, setting, tau0), g in runs.groupby(["dataset", "setting", "event_round"], sort=True):
        comparable = bool(g["comparable"].all()) if "comparable" in g else True
        per_seed: dict[int, dict[str, tuple[float, float]]] = {}
        observed = 0
        for _, r in g.iterrows():
            acc = curve(r["run_dir"], "test_accuracy")
            seen = observed_after(acc, int(tau0))
            observed = max(observed, seen)
            per_seed.setdefault(int(r["seed"]), {})[r["event_policy"]] = bounds(
                rounds_to_recover(acc, int(tau0)), seen)
        papers = {m: _paper(ref, {"dataset": dataset, "tau0": int(tau0), "method": m}, "rounds_to_recover")
                  for m in ("fast_reboot", "vanilla")}
        for method in ("fast_reboot", "vanilla"):
            got = [s[method] for s in per_seed.values() if method in s]
            rows.append({"dataset": dataset, "setting": setting, "tau0": int(tau0), "method": method,
                         **summarise([lo for lo, _ in got], [hi for _, hi in got], observed, papers[method],
                                     comparable)})
        pairs = [(s["vanilla"], s["fast_reboot"]) for s in per_seed.values() if len(s) == 2]
        lower = [v[0] - f[1] for v, f in pairs]  # the fewest rounds saved the bounds allow
        upper = [v[1] - f[0] for v, f in pairs]
        rows.append({"dataset": dataset, "setting": setting, "tau0": int(tau0), "method": DIFFERENCE,
                     **summarise(lower, upper, observed, papers["vanilla"] - papers["fast_reboot"],
                                 comparable, kind="difference")})
    return pd.DataFrame(rows, columns=TIDY_COLUMNS)


def crossing(runs: pd.DataFrame, reference: pd.DataFrame, metric: str = "test_loss") -> pd.DataFrame:
    """runs: rows with dataset, setting, alpha, beta, event_round, seed and event_policy include/exclude."""
    check_one_run_per_policy(runs, "crossing_epochs", ("alpha", "beta"))
    rows = []
    keys = ["dataset", "setting", "alpha", "beta", "event_round"]
    for (dataset, setting, alpha, beta, tau0), g in runs.groupby(keys, sort=True):
        comparable = bool(g["comparable"].all()) if "comparable" in g else True
        lower, upper, observed = [], [], 0
        for _, pair in g.groupby("seed"):
            by = {r["event_policy"]: r["run_dir"] for _, r in pair.iterrows()}
            if {"include", "exclude"} - set(by):
                continue
            inc, exc = curve(by["include"], metric), curve(by["exclude"], metric)
            # a crossing needs both curves: R is the shorter one's (an exclude run that diverged at round 40
            # censors its seed at 40 − τ0, not at the include run's last round)
            seen = min(observed_after(inc, int(tau0)), observed_after(exc, int(tau0)))
            observed = max(observed, seen)
            lo, hi = bounds(rounds_to_cross(inc, exc, int(tau0)), seen)
            lower.append(lo)
            upper.append(hi)
        paper = _paper(reference, {"dataset": dataset, "alpha": alpha, "beta": beta, "tau0": int(tau0)},
                       "rounds_to_cross")
        rows.append({"dataset": dataset, "setting": setting, "alpha": alpha, "beta": beta, "tau0": int(tau0),
                     "method": "include_vs_exclude", **summarise(lower, upper, observed, paper, comparable)})
    if not rows:
        return pd.DataFrame(columns=[*TIDY_COLUMNS, "alpha", "beta"])
    return pd.DataFrame(rows)[["dataset", "setting", "alpha", "beta", *TIDY_COLUMNS[2:]]]


_METHOD_LABELS = {"fast_reboot": "fast", "vanilla": "vanilla", DIFFERENCE: "vanilla − fast",
                  "include_vs_exclude": "crossing"}


def layout(tidy: pd.DataFrame, row_keys: list[str]) -> pd.DataFrame:
    """People's layout: one row per (row_keys, τ0) with reproduced cell, paper value and verdict per
    method."""
    out = []
    for keys, g in tidy.groupby([*row_keys, "tau0"], sort=True):
        row = dict(zip([*row_keys, "τ0"], keys, strict=True))
        for _, r in g.iterrows():
            label = _METHOD_LABELS.get(r["method"], r["method"])
            row[f"{label} (reproduced)"] = cell_text(r)
            row[f"{label} (paper)"] = "—" if pd.isna(r["paper"]) else f"{r['paper']:g}"
            row[f"{label} verdict"] = r["verdict"]
        out.append(row)
    return pd.DataFrame(out)


def verdicts_of(tidy: pd.DataFrame) -> list[str]:
    """The verdicts a table's caption counts: Table 4's paired cells (vanilla − fast), Table 5's crossings."""
    cells = tidy[tidy["method"].isin([DIFFERENCE, "include_vs_exclude"])]
    return [str(v) for v in cells["verdict"]]


__all__ = ["DIFFERENCE", "TIDY_COLUMNS", "bounds", "cell_text", "crossing", "curve", "fast_reboot", "layout",
           "summarise", "verdicts_of"]


def event_rounds(group: pd.DataFrame, tau0: int) -> list[int]:
    """The rounds the events of runs with first event round τ0 happen at: τ0, and with a stagger s > 0 each
    further device i of event.devices at τ0 + i·s (Ruan et al. Figure 5's arrivals 50 rounds apart)."""
    stagger = int(pd.to_numeric(group["event.stagger"]).fillna(0).max()) if "event.stagger" in group else 0
    devices = group["event.devices"].iloc[0] if "event.devices" in group else None
    count = len(devices) if stagger > 0 and isinstance(devices, list | tuple) else 1
    return [int(tau0) + i * stagger for i in range(count)]
