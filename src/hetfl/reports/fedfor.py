"""FedFOR (Tian, Smith, Kira 2022; seed 003) Tables 2-4: best validation accuracy up to half and all of the
rounds, and the rounds to reach x % (ACC_x), for each local-epoch count E.

The paper: "The table reports the best validation accuracy up to the specified global iterations ... mean
(higher row) and standard deviation (lower row) over 3 runs ... the halfway performance and the final
performance" and "the global training steps required to achieve X performance (given as 'Accx')".

Per run (hetfl's reading, docs/fedfor.md):
- validation accuracy = as the run's `validation_accuracy` says (`reported_curves`): `test_split` (the
  default) `global_test_accuracy`, the source's own test split, else `test_accuracy`; `holdout` the mean
  over devices of each one's accuracy on its local holdout (`mean_client_accuracy`, FedBN's DomainNet
  validation); `test_at_best_holdout` the test split's accuracy at the round of the best holdout accuracy;
- best@half = the best up to the paper's halfway round when the run has the paper's R rounds (Table 4,
  E = 16: 15 of 25), else up to ⌊R/2⌋; best@full over all R rounds ("the best": the maximum, or under
  `test_at_best_holdout` the test accuracy of the earliest round with the best holdout accuracy);
- ACC_x = the first evaluated round whose best-so-far accuracy is ≥ x % (computed here from the curve, for
  the x of the run's `acc_x`, else the paper table's own x), or censored "> R" when it never gets there.
Over seeds: mean ± sample std (as the paper), and the paired difference to the table's baseline (FedAvg in
Table 2, FedBN, the paper's backbone, in Tables 3-4) over the seeds both ran (`n_pairs`) with its 95 %
Student-t interval and a verdict against the paper's difference of means (`reports.verdicts`); a censored
ACC_x uses the bounds rule.
Runs of several paper tables in one table (Tables 3 and 4's configs run together, a stand-in beside) are
grouped by the table each reproduces (paper_table_of) and each group is read against its own.
In Tables 3-5 the paper applies every method's local rule on top of FedBN (local batch norm); hetfl's
FedProx, FedDyn, FedCurv and FedFOR share all entries, so their verdicts there are "not comparable".

Table 5 (concept shift, `concept_shift_table`): "the average best validation accuracy over 200 training
iterations with 10 randomly constructed concept shifts". Reading: the run's rounds are cut at the shifts
(data.concept_shift, recomputed from the run's seed), the best validation accuracy of each stretch is
taken and those bests are averaged; the mean accuracy over all evaluated rounds is given beside it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from hetfl.algorithms import method_label
from hetfl.reports.event_tables import curve
from hetfl.reports.references import PRINT_RESOLUTION, load_reference
from hetfl.reports.verdicts import (
    RULE_TEXT,
    bounded_interval,
    counts_text,
    interval_text,
    t_interval,
    verdict,
)

#: paper table → reference, the x of its ACC_x (None: no ACC_x column) and the baseline of its differences
PAPER_TABLES = {
    "Table 2": ("tian2022_fedfor_table2_imbalanced_cifar10", None, "FedAvg"),
    "Table 3": ("tian2022_fedfor_table3_domainnet", 40.0, "FedBN"),
    "Table 4": ("tian2022_fedfor_table4_digits", 80.0, "FedBN"),
}
#: hetfl dataset → the paper table it reproduces (long-tail splits of any dataset reproduce Table 2)
DATASET_TABLES = {"domainnet": "Table 3", "digit5": "Table 4"}
MEASURES = ("best@half", "best@full", "ACC_x")
TIDY_COLUMNS = ["paper_table", "dataset", "local_epochs", "measure", "round", "acc_x", "method",
                "reproduced_mean", "reproduced_std", "n_seeds", "n_censored", "paper", "paper_std",
                "paper_round", "baseline",
                "diff_mean", "ci_low", "ci_high", "n_pairs", "diff_n_censored", "paper_diff", "verdict",
                "comparable"]


#: the data sets of FedFOR's Tables 2-5; any other (mnist5k's long tail in make reproduce) stands in
PAPER_DATASETS = ("cifar10", "domainnet", "digit5")


def is_stand_in(dataset: str) -> bool:
    """A run on another data set than the paper's: its Δ is judged for direction only (verdicts, kind
    "direction")."""
    return dataset not in PAPER_DATASETS


def validation_curve(run_dir: str | Path) -> pd.Series:
    """The run's test-split accuracy per evaluated round (the pooled local holdouts if the source has no
    test split)."""
    acc = curve(run_dir, "global_test_accuracy")
    return (acc if len(acc) else curve(run_dir, "test_accuracy")).dropna()


#: what FedFOR's "best validation accuracy" is (the runs' validation_accuracy; docs/fedfor.md)
VALIDATION_ACCURACIES = {
    "test_split": "the source's own test split",
    "holdout": "the mean over devices of each one's accuracy on its local holdout, scored by its own model "
               "(FedBN's DomainNet validation images under equal_counts_holdout rest)",
    "test_at_best_holdout": "the test split's accuracy at the round of the best holdout accuracy so far (the "
                            "holdout: each device's local holdout, scored by its own model, averaged)",
}


def validation_of(run: pd.Series) -> str:
    """A run's validation_accuracy (absent from the specs of runs under the default: test_split)."""
    value = run.get("validation_accuracy")
    return "test_split" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def validation_text(runs: pd.DataFrame) -> str:
    """What the runs' validation accuracy is, as a caption says it."""
    return "; ".join(VALIDATION_ACCURACIES[h] for h in sorted({validation_of(r) for _, r in runs.iterrows()}))


def reported_curves(run_dir: str | Path, how: str = "test_split") -> tuple[pd.Series, pd.Series | None]:
    """(acc, select) per evaluated round: the accuracy the table reports and, where another accuracy picks
    the round (test_at_best_holdout), that one (else None: the best of acc itself)."""
    if how not in VALIDATION_ACCURACIES:
        raise ValueError(f"validation_accuracy has value {how!r}, which is not allowed; allowed: "
                         + ", ".join(VALIDATION_ACCURACIES))
    if how == "test_split":
        return validation_curve(run_dir), None
    holdout = curve(run_dir, "mean_client_accuracy").dropna()
    if how == "holdout":
        return holdout, None
    both = pd.concat([validation_curve(run_dir), holdout], axis=1, join="inner").dropna()
    return both.iloc[:, 0], both.iloc[:, 1]


def running_best(acc: pd.Series, select: pd.Series | None = None) -> pd.Series:
    """At every evaluated round t, the accuracy reported for the rounds up to t: the best of acc so far, or,
    with select, acc at the earliest round with the best select so far (FedBN's fed_domainnet.py:343 keeps
    a new best only when it is strictly better)."""
    if select is None:
        return acc.cummax().ffill()  # a NaN round reports the best before it
    out, best, value = [], -math.inf, math.nan
    for t in acc.index:
        if select[t] > best:
            best, value = select[t], acc[t]
        out.append(value)
    return pd.Series(out, index=acc.index, dtype=float)


def best_up_to(acc: pd.Series, rounds: int, select: pd.Series | None = None) -> float:
    """Best accuracy (%) over the evaluated rounds ≤ `rounds` (with select: acc at the best select round);
    NaN when none was evaluated."""
    seen = running_best(acc, select)
    seen = seen[seen.index <= rounds]
    return 100.0 * float(seen.iloc[-1]) if len(seen) else math.nan


def rounds_to_reach(acc: pd.Series, x_pct: float, select: pd.Series | None = None) -> int | None:
    """FedFOR's ACC_x: the first evaluated round whose reported accuracy (running_best) is ≥ x %, or None if
    the run never gets there; without select, the first round whose accuracy is."""
    best = running_best(acc, select)
    hit = best[best.to_numpy() >= x_pct / 100.0 - 1e-12]
    return None if hit.empty else int(hit.index[0])


def paper_table_of(run: pd.Series) -> str | None:
    """Which of the paper's tables a run reproduces: Table 2 for a long-tail split of any data set, else its
    data set's (DATASET_TABLES), else none."""
    if run.get("partition.label_skew") == "longtail":
        return "Table 2"
    return DATASET_TABLES.get(str(run.get("dataset_name", run["dataset"])))


def reference_cells(table: str) -> pd.DataFrame:
    """The paper's cells as (method, local_epochs, measure, round, acc_x, paper, paper_std)."""
    name, x, _ = PAPER_TABLES[table]
    ref = load_reference(name)
    rows = []
    if "best_val_acc_pct" in ref.columns:  # Table 2: method, local_epochs, round, best_val_acc_pct, std
        for (method, e), g in ref.groupby(["method", "local_epochs"]):
            g = g.sort_values("round")
            for measure, (_, r) in zip(MEASURES, g.iterrows(), strict=False):
                rows.append((method, int(e), measure, int(r["round"]), np.nan, r["best_val_acc_pct"],
                             r["std_over_3_seeds"]))
    else:  # Tables 3-4: method, local_epochs, metric, round, value (the stds are not transcribed)
        for (method, e), g in ref.groupby(["method", "local_epochs"]):
            best = g[g["metric"] == "best_val_acc_pct"].sort_values("round")
            for measure, (_, r) in zip(MEASURES, best.iterrows(), strict=False):
                rows.append((method, int(e), measure, int(r["round"]), np.nan, r["value"], np.nan))
            for _, r in g[g["metric"].str.startswith("rounds_to_acc")].iterrows():
                acc_x = float(re.sub(r"\D", "", r["metric"]))
                rows.append((method, int(e), "ACC_x", np.nan, acc_x if x is None else x, r["value"], np.nan))
    return pd.DataFrame(rows, columns=["method", "local_epochs", "measure", "round", "acc_x", "paper",
                                       "paper_std"])


def halfway(ref: pd.DataFrame, e: int, rounds: int) -> int:
    """The paper's halfway round for E when its full round is `rounds`, else ⌊rounds/2⌋."""
    cells = ref[(ref["local_epochs"] == e) & ref["measure"].isin(["best@half", "best@full"])]
    half, full = (cells[cells["measure"] == "best@half"]["round"],
                  cells[cells["measure"] == "best@full"]["round"])
    if len(half) and len(full) and int(full.iloc[0]) == rounds:
        return int(half.iloc[0])
    return rounds // 2


def _per_seed(g: pd.DataFrame, acc_x: float | None, half: int, how: str | None = None) -> pd.DataFrame:
    """One row per run: seed, best@half, best@full and ACC_x bounds [lo, hi] (hi = ∞ when censored); `how`
    overrides the runs' own validation_accuracy (the readings table's other values)."""
    rows = []
    for _, r in g.iterrows():
        acc, select = reported_curves(r["run_dir"], how or validation_of(r))
        total = int(r["rounds"])
        reached = rounds_to_reach(acc, acc_x, select) if acc_x is not None else None
        lo = float(reached) if reached is not None else (float(total + 1) if acc_x is not None else math.nan)
        hi = float(reached) if reached is not None else (math.inf if acc_x is not None else math.nan)
        rows.append({"seed": int(r["seed"]), "best@half": best_up_to(acc, half, select),
                     "best@full": best_up_to(acc, total, select), "ACC_x_lo": lo, "ACC_x_hi": hi})
    return pd.DataFrame(rows).set_index("seed").sort_index()


def fedfor_by_e(runs: pd.DataFrame, comparable: bool = True, how: str | None = None) -> pd.DataFrame:
    """One tidy row per (paper table, dataset, E, measure, method); see the module docstring. Each group of
    runs is compared with the paper table it reproduces (paper_table_of: a long-tail split Table 2, DomainNet
    Table 3, Digits Table 4), its reference, baseline, ACC_x target and printed resolution: runs of Tables 3
    and 4 in one config, or a stand-in beside a paper run, were all read against the first run's table.
    `how`: a validation_accuracy for every run instead of each run's own."""
    runs = runs.assign(method=runs["algorithm"].map(lambda a: method_label(a)),
                       paper_table=[paper_table_of(r) or "—" for _, r in runs.iterrows()])
    if "acc_x" not in runs:
        runs = runs.assign(acc_x=np.nan)
    dataset_col = "dataset_name" if "dataset_name" in runs else "dataset"
    rows = []
    for table, group in runs.groupby("paper_table", sort=True):
        rows += _table_rows(None if table == "—" else str(table), group, dataset_col, comparable, how)
    return pd.DataFrame(rows, columns=TIDY_COLUMNS)


def _table_rows(table: str | None, runs: pd.DataFrame, dataset_col: str, comparable: bool,
                how: str | None) -> list[dict]:
    """fedfor_by_e's rows of the runs that reproduce one paper table (None: none of them)."""
    ref = reference_cells(table) if table else pd.DataFrame(columns=["method", "local_epochs", "measure"])
    baseline_name = PAPER_TABLES[table][2] if table else "FedAvg"
    paper_x = PAPER_TABLES[table][1] if table else None
    # half the paper's last printed digit, of an accuracy; a count of rounds (ACC_x) is exact
    resolution = PRINT_RESOLUTION.get(PAPER_TABLES[table][0], 0.0) if table else 0.0
    rows = []
    for (dataset, e), cell in runs.groupby([dataset_col, "local_epochs"], sort=True):
        x = cell["acc_x"].dropna()
        acc_x = float(x.iloc[0]) if len(x) else paper_x
        total = int(cell["rounds"].max())
        half = halfway(ref, int(e), total) if len(ref) else total // 2
        seeds = {m: _per_seed(g, acc_x, half, how) for m, g in cell.groupby("method")}
        base = seeds.get(baseline_name)
        for method, per in sorted(seeds.items()):
            for measure in MEASURES:
                if measure == "ACC_x" and acc_x is None:
                    continue
                paper = ref[(ref["method"] == method) & (ref["local_epochs"] == e)
                            & (ref["measure"] == measure)]
                p_base = ref[(ref["method"] == baseline_name) & (ref["local_epochs"] == e)
                             & (ref["measure"] == measure)]
                row = {"paper_table": table or "—", "dataset": dataset, "local_epochs": int(e),
                       "measure": measure, "round": {"best@half": half, "best@full": total}.get(measure),
                       "acc_x": acc_x if measure == "ACC_x" else np.nan, "method": method,
                       "paper": float(paper["paper"].iloc[0]) if len(paper) else np.nan,
                       "paper_std": float(paper["paper_std"].iloc[0]) if len(paper) else np.nan,
                       "paper_round": (float(paper["round"].iloc[0]) if len(paper) and measure != "ACC_x"
                                       else np.nan),
                       "baseline": baseline_name, "comparable": comparable}
                row.update(_summary(per, measure))
                row.update(_paired(per, base, measure, method == baseline_name))
                paper_diff = (row["paper"] - float(p_base["paper"].iloc[0])
                              if len(paper) and len(p_base) and method != baseline_name else np.nan)
                row["paper_diff"] = paper_diff
                row["comparable"] = comparable and (table in ("Table 2", None) or method == baseline_name)
                row["verdict"] = ("—" if method == baseline_name else
                                  verdict(None if np.isnan(paper_diff) else paper_diff, row["ci_low"],
                                          row["ci_high"], row["comparable"],
                                          kind="direction" if is_stand_in(dataset) else "difference",
                                          resolution=0.0 if measure == "ACC_x" else 2 * resolution))
                rows.append(row)
    return rows


def _summary(per: pd.DataFrame, measure: str) -> dict[str, float]:
    if measure == "ACC_x":
        iv = bounded_interval(per["ACC_x_lo"], per["ACC_x_hi"])
        return {"reproduced_mean": iv.mean, "reproduced_std": iv.std, "n_seeds": iv.n,
                "n_censored": iv.n_censored}
    values = per[measure].dropna()
    return {"reproduced_mean": float(values.mean()) if len(values) else np.nan,
            "reproduced_std": float(values.std(ddof=1)) if len(values) > 1 else np.nan,
            "n_seeds": len(per), "n_censored": 0}


def _paired(per: pd.DataFrame, base: pd.DataFrame | None, measure: str, is_base: bool) -> dict[str, float]:
    """method − baseline over the seeds both ran: mean, 95 % CI (bounds rule for censored ACC_x) and the
    number of pairs it is over (fewer than the method's seeds where the baseline lacks one)."""
    empty = {"diff_mean": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n_pairs": 0, "diff_n_censored": 0}
    if is_base or base is None:
        return empty
    both = per.merge(base, left_index=True, right_index=True, suffixes=("", "_base"))
    if both.empty:
        return empty
    if measure == "ACC_x":  # [lo − hi_base, hi − lo_base] bounds each seed's difference
        lo = both["ACC_x_lo"] - both["ACC_x_hi_base"]
        hi = both["ACC_x_hi"] - both["ACC_x_lo_base"]
        iv = bounded_interval(lo, hi)
    else:
        iv = t_interval((both[measure] - both[f"{measure}_base"]).dropna())
    return {"diff_mean": iv.mean, "ci_low": iv.low, "ci_high": iv.high, "n_pairs": iv.n,
            "diff_n_censored": iv.n_censored}


def _measure_text(r: pd.Series) -> str:
    if r["measure"] == "ACC_x":
        return f"ACC{r['acc_x']:g} (rounds)"
    return f"best@t={int(r['round'])}" if not pd.isna(r["round"]) else r["measure"]


def _full_rounds(tidy: pd.DataFrame) -> dict[tuple[str, str, int], int]:
    """(paper table, dataset, E) -> R, the rounds of its best@full rows: what a censored ACC_x cell shows as
    '> R' (per group: Tables 3 and 4 run E = 1 for 200 and 100 rounds)."""
    full = tidy[tidy["measure"] == "best@full"]
    return {(t, d, int(e)): int(r) for t, d, e, r in zip(full["paper_table"], full["dataset"],
                                                       full["local_epochs"], full["round"], strict=True)}


def _rounds_of(r: pd.Series, full: dict[tuple[str, str, int], int]) -> int:
    return full.get((r["paper_table"], r["dataset"], int(r["local_epochs"])), 0)


def _groups(tidy: pd.DataFrame) -> list[tuple[str, str]]:
    """The (paper table, dataset) groups of a tidy table, in its order."""
    return list(dict.fromkeys(zip(tidy["paper_table"], tidy["dataset"], strict=True)))


def _reproduced_text(r: pd.Series, rounds: int) -> str:
    if r["n_seeds"] == 0:
        return "—"
    if r["measure"] == "ACC_x" and r["n_censored"]:
        return f"> {rounds}" if r["n_censored"] == r["n_seeds"] else f"{int(r['n_censored'])} of " \
            f"{int(r['n_seeds'])} > {rounds}"
    text = "—" if pd.isna(r["reproduced_mean"]) else f"{r['reproduced_mean']:.2f}"
    return text + ("" if pd.isna(r["reproduced_std"]) else f" ± {r['reproduced_std']:.2f}")


def _paper_text(r: pd.Series) -> str:
    if pd.isna(r["paper"]):
        return "—"
    digits = 0 if r["measure"] == "ACC_x" else 2
    text = f"{r['paper']:.{digits}f}" + ("" if pd.isna(r["paper_std"]) else f" ({r['paper_std']:.2f})")
    # the paper's round where it is not the row's (a stand-in runs fewer rounds): t = 100's value in a
    # t = 10 row read as the paper's t = 10 (an audit)
    paper_round = r.get("paper_round", np.nan)
    if not pd.isna(paper_round) and (pd.isna(r["round"]) or int(paper_round) != int(r["round"])):
        text += f" @t={int(paper_round)}"
    return text


def layout(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per (E, measure, method): reproduced mean ± std, the paper's mean (std), the paired
    difference to the baseline with its 95 % CI, the paper's difference and the verdict. Rows of more than
    one (paper table, dataset) group carry a `table` column naming theirs, and rows of more than one
    baseline a `baseline` column (Table 2's is FedAvg, Tables 3-4's FedBN)."""
    from hetfl.reports.verdicts import Interval

    full = _full_rounds(tidy)
    several = len(_groups(tidy)) > 1
    baselines = list(dict.fromkeys(tidy["baseline"]))
    delta = f"Δ vs {baselines[0]} [95% CI]" if len(baselines) == 1 else "Δ vs baseline [95% CI]"
    rows = []
    for _, r in tidy.iterrows():
        n = 0 if pd.isna(r["diff_mean"]) and pd.isna(r["ci_low"]) else int(r["n_pairs"])
        diff = interval_text(Interval(r["diff_mean"], math.nan, r["ci_low"], r["ci_high"], n,
                                      int(r["diff_n_censored"])), digits=2)
        row = {"table": f"{r['paper_table']} · {r['dataset']}"} if several else {}
        row.update({"E": int(r["local_epochs"]), "measure": _measure_text(r), "method": r["method"],
                    "reproduced": _reproduced_text(r, _rounds_of(r, full)), "paper": _paper_text(r)})
        if len(baselines) > 1:
            row["baseline"] = r["baseline"]
        row.update({delta: diff if r["method"] != r["baseline"] else "—",
                    "paper Δ": "—" if pd.isna(r["paper_diff"]) else f"{r['paper_diff']:.2f}",
                    "verdict": r["verdict"]})
        rows.append(row)
    return pd.DataFrame(rows)


def _here(runs: pd.DataFrame) -> str:
    """The set-up of one group's runs, as the caption says it ('Here: ...')."""
    first = runs.iloc[0]
    dataset = first.get("dataset_name", first["dataset"])
    scale = "; ".join(f"E = {int(e)}: {int(g['rounds'].max())} rounds"
                      for e, g in runs.groupby("local_epochs"))
    k = first.get("clients_per_round")
    sampled = (f"{int(k)} of {int(first['num_devices'])} devices sampled per round"
               if not pd.isna(k) else f"all {int(first['num_devices'])} devices every round")
    skew = first.get("partition.label_skew")
    split = (f"per-client long tail, imbalance ratio {first.get('partition.imbalance_ratio', 0.01):g}, "
             f"client_fraction {first.get('partition.client_fraction', 0.1):g}, draw "
             f"{first.get('partition.draw', 'disjoint')}" if skew == "longtail" else f"label skew {skew}")
    return (f"{dataset}, {split}; {sampled}; model {first['model']}, B = {int(first['batch_size'])}, "
            f"constant η = {first['eta0']:g}, E counted in local epochs; {scale}; "
            f"{runs['seed'].nunique()} seed(s)")


def caption(tidy: pd.DataFrame, runs: pd.DataFrame) -> str:
    """The table's caption; where the runs reproduce more than one paper table (or data set), each group's
    set-up is given apart, under its table and data set."""
    dataset_col = "dataset_name" if "dataset_name" in runs else "dataset"
    groups = _groups(tidy) or [("—", runs.iloc[0][dataset_col])]
    tables = list(dict.fromkeys(t for t, _ in groups))
    table = " and ".join(tables)
    of_group = [(t, d, runs[[(paper_table_of(r) or "—") == t and r[dataset_col] == d
                             for _, r in runs.iterrows()]]) for t, d in groups]
    if len(of_group) == 1:
        here = _here(runs)
    else:
        here = " | ".join(f"{t} · {d}: {_here(g)}" for t, d, g in of_group)
    stand_ins = [d for _, d in groups if is_stand_in(d)]
    stand_in = ("This is an offline stand-in" if len(of_group) == 1 else f"{', '.join(stand_ins)} "
                + ("is an offline stand-in" if len(stand_ins) == 1 else "are offline stand-ins"))
    validation = validation_text(runs)
    return (f"Reproduction of Tian, Smith and Kira (2022), FedFOR {table}: best validation accuracy (%) up "
            "to the halfway round t (the paper's when the run has its R rounds, else ⌊R/2⌋) and all R of the "
            "rounds and, where a target is set, ACC_x = the first round whose "
            "validation accuracy reaches x % ('> R' when it never does); validation accuracy = "
            f"{validation}. Cells: mean ± sample std over seeds (the paper: mean (std) over 3 "
            "runs); Δ = the paired per-seed difference to the baseline with its 95 % Student-t interval "
            "(bounds rule for censored ACC_x), verdict against the paper's difference of means. "
            f"Here: {here}. The paper: Imbalanced CIFAR-10 / DomainNet / Digits, "
            "ResNet-20 / AlexNet / six-layer CNN; a 'paper' cell gives its round (@t=) where it is not the "
            "row's. "
            + (stand_in + " at reduced scale: the paper's numbers are CIFAR-10's, so "
               "magnitudes are not expected to match; the verdicts say whether the direction does: "
               + RULE_TEXT["direction"] + ". "
               if stand_ins else "")
            + f"Verdicts: {counts_text([v for v in tidy['verdict'] if v != '—'])}"
            + _not_comparable_text(tidy) + ".")


def _not_comparable_text(tidy: pd.DataFrame) -> str:
    """Why each 'not comparable' cell is so: no paper value (Table 2 prints no ACC_x), or a method the paper
    runs on FedBN's backbone (Tables 3-4). The caption gave no reason (an audit)."""
    nc = tidy[tidy["verdict"] == "not comparable"]
    if nc.empty:
        return ""
    reasons = []
    missing = nc[nc["paper_diff"].isna()]
    for table, cells in missing.groupby("paper_table", sort=False):  # each table's own (Table 2: no ACC_x)
        measures = ", ".join(dict.fromkeys(_measure_text(r).removesuffix(" (rounds)")
                                           for _, r in cells.iterrows()))
        reasons.append(f"no paper value for {measures} (the paper's {table} prints none)" if table != "—"
                       else f"no paper value for {measures} (the runs reproduce none of the paper's tables)")
    if (nc["paper_diff"].notna() & ~nc["comparable"].astype(bool)).any():
        reasons.append("the paper applies the method on FedBN's backbone, hetfl's shares every entry")
    return "; not comparable: " + "; ".join(reasons)


def _ok_runs(run_dirs: list[Path]) -> pd.DataFrame:
    """The runs that finished, with dataset_name (the source's name)."""
    from hetfl.reports.results import collect_runs

    runs = collect_runs(run_dirs)
    runs = runs[runs["status"] == "ok"]
    return runs.assign(dataset_name=runs["dataset"])


def build(run_dirs: list[Path], out_stem: Path) -> Path:
    """The table from run directories (reports.tables.BUILDERS), of the runs under their experiments' own
    readings (a by-hand glob may include readings variants: build_readings shows those)."""
    from hetfl.reports.ruan import own_readings
    from hetfl.reports.tables import provenance_note
    from hetfl.reports.writers import write_frame_tables

    runs = own_readings(_ok_runs(run_dirs))
    tidy = fedfor_by_e(runs)
    write_frame_tables(tidy, layout(tidy), out_stem,
                       caption(tidy, runs) + " " + provenance_note(runs))
    return out_stem


# ---- Table 5: concept shift ----------------------------------------------------------------------------
CS_COLUMNS = ["dataset", "local_epochs", "method", "shifts_mean", "reproduced_mean", "reproduced_std",
              "round_mean", "n_seeds", "paper", "baseline", "diff_mean", "ci_low", "ci_high", "n_pairs",
              "paper_diff", "verdict", "comparable"]


def _num_classes(dataset: str) -> int:
    from hetfl.data.sources import SOURCES

    return SOURCES[dataset].num_classes if dataset in SOURCES else 10


def segment_best_mean(acc: pd.Series, shifts: list[int], select: pd.Series | None = None) -> float:
    """Mean over the stretches between concept shifts of each stretch's best accuracy (%) (with select: acc
    at the stretch's earliest round with the best select)."""
    edges = [int(acc.index.min()) if len(acc) else 1, *shifts, math.inf]
    bests = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (acc.index >= lo) & (acc.index < hi)
        if not inside.any():
            continue
        best = running_best(acc[inside], None if select is None else select[inside])
        bests.append(best.iloc[-1])
    bests = [b for b in bests if not pd.isna(b)]
    return 100.0 * float(np.mean(bests)) if bests else math.nan


def concept_shift_table(runs: pd.DataFrame, how: str | None = None) -> pd.DataFrame:
    """One tidy row per (dataset, E, method): the average per-stretch best accuracy over seeds, the paired
    difference to FedBN and the verdict against the paper's Table 5. `how`: a validation_accuracy for every
    run instead of each run's own."""
    from hetfl.data.concept_shift import label_maps, shift_rounds

    name = "tian2022_fedfor_table5_concept_shift"
    ref, resolution = load_reference(name), 2 * PRINT_RESOLUTION[name]  # a difference of two printed values
    runs = runs.assign(method=runs["algorithm"].map(lambda a: method_label(a)))
    dataset_col = "dataset_name" if "dataset_name" in runs else "dataset"
    per = []
    for _, r in runs.iterrows():
        acc, select = reported_curves(r["run_dir"], how or validation_of(r))
        prob = r.get("concept_shift.probability", math.nan)
        shifts = [] if pd.isna(prob) else shift_rounds(
            label_maps(_num_classes(r[dataset_col]), int(r["rounds"]), float(prob), int(r["seed"])))
        per.append({"dataset": r[dataset_col], "local_epochs": int(r["local_epochs"]), "method": r["method"],
                    "seed": int(r["seed"]), "value": segment_best_mean(acc, shifts, select),
                    "round_mean": 100.0 * float(acc.mean()) if len(acc) else math.nan, "shifts": len(shifts)})
    per = pd.DataFrame(per)
    rows = []
    for (dataset, e), cell in per.groupby(["dataset", "local_epochs"], sort=True):
        base = cell[cell["method"] == "FedBN"].set_index("seed")
        p_base = ref[(ref["method"] == "FedBN") & (ref["local_epochs"] == e)]["avg_best_val_acc_pct"]
        for method, g in cell.groupby("method", sort=True):
            g = g.set_index("seed")
            iv = t_interval(g["value"].dropna())
            paper = ref[(ref["method"] == method) & (ref["local_epochs"] == e)]["avg_best_val_acc_pct"]
            paper = float(paper.iloc[0]) if len(paper) else math.nan
            is_base = method == "FedBN"
            diff = t_interval((g["value"] - base["value"]).dropna()) if not is_base and len(base) else None
            paper_diff = paper - float(p_base.iloc[0]) if len(p_base) and not is_base else math.nan
            comparable = is_base  # the paper's methods run on the FedBN backbone; hetfl's do not
            rows.append({"dataset": dataset, "local_epochs": int(e), "method": method,
                         "shifts_mean": float(g["shifts"].mean()), "reproduced_mean": iv.mean,
                         "reproduced_std": iv.std, "round_mean": float(g["round_mean"].mean()),
                         "n_seeds": iv.n, "paper": paper, "baseline": "FedBN",
                         "diff_mean": diff.mean if diff else math.nan,
                         "ci_low": diff.low if diff else math.nan,
                         "ci_high": diff.high if diff else math.nan, "n_pairs": diff.n if diff else 0,
                         "paper_diff": paper_diff,
                         "verdict": "—" if is_base else verdict(None if math.isnan(paper_diff)
                                                                     else paper_diff,
                                                                 diff.low if diff else math.nan,
                                                                 diff.high if diff else math.nan, comparable,
                                                                 resolution=resolution),
                         "comparable": comparable})
    return pd.DataFrame(rows, columns=CS_COLUMNS)


def build_concept_shift(run_dirs: list[Path], out_stem: Path) -> Path:
    """Table 5 from run directories (reports.tables.BUILDERS)."""
    from hetfl.reports.ruan import own_readings
    from hetfl.reports.tables import provenance_note
    from hetfl.reports.verdicts import Interval
    from hetfl.reports.writers import write_frame_tables

    runs = own_readings(_ok_runs(run_dirs))
    tidy = concept_shift_table(runs)
    out = pd.DataFrame({
        "E": tidy["local_epochs"], "method": tidy["method"],
        "avg best per stretch": [f"{m:.2f}" + ("" if pd.isna(s) else f" ± {s:.2f}")
                                 for m, s in zip(tidy["reproduced_mean"], tidy["reproduced_std"],
                                                 strict=True)],
        "mean over rounds": tidy["round_mean"].map(lambda v: f"{v:.2f}"),
        "shifts (mean)": tidy["shifts_mean"].map(lambda v: f"{v:.1f}"),
        "paper": tidy["paper"].map(lambda v: "—" if pd.isna(v) else f"{v:.2f}"),
        "Δ vs FedBN [95% CI]": [("—" if pd.isna(lo) and pd.isna(m) else
                                 interval_text(Interval(m, math.nan, lo, hi, int(n)), 2))
                                for m, lo, hi, n in zip(tidy["diff_mean"], tidy["ci_low"], tidy["ci_high"],
                                                        tidy["n_pairs"], strict=True)],
        "paper Δ": tidy["paper_diff"].map(lambda v: "—" if pd.isna(v) else f"{v:.2f}"),
        "verdict": tidy["verdict"]})
    first = runs.iloc[0]
    caption = ("Reproduction of Tian, Smith and Kira (2022), FedFOR Table 5 (concept shift): at the start of "
               "each round after the first, with probability "
               f"{first.get('concept_shift.probability', 0.05):g}, one "
               "class takes a new label on every client and in the test sets (data.concept_shift). Cell: the "
               "validation accuracy's best within each stretch between shifts, averaged over the stretches "
               "(hetfl's reading of 'the average best validation accuracy'; the mean over all rounds beside "
               "it), mean ± sample std over seeds; validation accuracy = "
               + validation_text(runs)
               + "; Δ = paired difference to FedBN with its 95 % Student-t "
               "interval. The paper runs every method on the FedBN backbone (local batch norm); hetfl's "
               "FedProx, FedDyn and FedFOR share every entry, so their verdicts are 'not comparable'. "
               f"Here: {first['dataset']}, model {first['model']}, {int(runs['rounds'].max())} rounds, "
               f"{runs['seed'].nunique()} seed(s). Verdicts: "
               f"{counts_text([v for v in tidy['verdict'] if v != '—'])}. " + provenance_note(runs))
    write_frame_tables(tidy, out, out_stem, caption)
    return out_stem


# ---- readings tables (Tables 3-5: what FedFOR leaves to FedBN's code) -----------------------------------
#: what FedBN's code does for each reading of FedFOR's Tables 3-5 (docs/fedfor.md quotes it with file:line)
READING_BASIS = {
    "equal_counts_fraction": "FedBN's fed_domainnet.py trains every domain on int(0.05 · min_data_len)",
    "equal_counts_pick": "FedBN keeps the first images, Subset(trainset, range(min_data_len))",
    "equal_counts_holdout": "FedBN's DomainNet validates on the last images of a domain, apart from its "
                            "training images; its Digits has no validation split",
    "global_test_average": "FedBN tests every domain with its client's model and averages the accuracies",
    "validation_accuracy": "FedFOR: 'the best validation accuracy'; FedBN's DomainNet picks its best round "
                           "on the validation images, its Digits tests on the test split every round",
}
_READINGS_COMPUTE = {"fedfor_by_e": fedfor_by_e, "fedfor_concept_shift": concept_shift_table}


def readings_table(table: str, run_dirs: list[Path]) -> pd.DataFrame:
    """Every cell under every reading the runs hold ('' = the experiments' own: 'paper/default'), tidy, with
    a `reading` column; then the cells under each other validation_accuracy, read from the runs under the
    experiments' own readings (those need no runs of their own; the two that read the local holdouts only
    where a run has one: not where every run has test_fraction 0)."""
    from hetfl.reports.ruan import own_readings, runs_under

    if table not in _READINGS_COMPUTE:
        raise ValueError(f"table '{table}' has no FedFOR readings table; allowed: "
                         + ", ".join(_READINGS_COMPUTE))
    compute = _READINGS_COMPUTE[table]
    runs = _ok_runs(run_dirs)
    readings = [""] + sorted(r for r in runs["reading"].fillna("").unique() if r)
    parts = [compute(runs_under(runs, r)).assign(reading=r or "paper/default") for r in readings]
    own = own_readings(runs)
    used = {validation_of(r) for _, r in own.iterrows()}
    # runs without a local holdout (test_fraction 0) record no holdout accuracy to read another way
    held_out = "test_fraction" not in own or bool((own["test_fraction"].astype(float) > 0).any())
    parts += [compute(own, how=how).assign(reading=f"validation_accuracy={how}")
              for how in VALIDATION_ACCURACIES if used != {how} and (held_out or how == "test_split")]
    return pd.concat(parts, ignore_index=True)


def _reading_cell(r: pd.Series, full: dict[tuple[str, str, int], int]) -> str:
    """A cell under one reading: its level (mean ± std over seeds) and, for a method, its Δ to the baseline
    with the 95 % CI and the verdict."""
    from hetfl.reports.verdicts import Interval

    if "measure" in r:
        level = _reproduced_text(r, _rounds_of(r, full))
    else:
        std = "" if pd.isna(r["reproduced_std"]) else f" ± {r['reproduced_std']:.2f}"
        level = "—" if pd.isna(r["reproduced_mean"]) else f"{r['reproduced_mean']:.2f}{std}"
    if r["method"] == r["baseline"]:
        return level
    n = 0 if pd.isna(r["diff_mean"]) and pd.isna(r["ci_low"]) else int(r["n_pairs"])
    censored = int(r["diff_n_censored"]) if "diff_n_censored" in r and pd.notna(r["diff_n_censored"]) else 0
    diff = interval_text(Interval(r["diff_mean"], math.nan, r["ci_low"], r["ci_high"], n, censored), digits=2)
    return f"{level}; Δ {diff} · {r['verdict']}"


def _readings_md(tidy: pd.DataFrame) -> str:
    from hetfl.reports.verdicts import VERDICTS, verdict_counts
    from hetfl.reports.writers import markdown

    full = _full_rounds(tidy) if "measure" in tidy else {}
    cells = tidy.assign(E=tidy["local_epochs"].astype(int),
                        text=[_reading_cell(r, full) for _, r in tidy.iterrows()])
    keys = ["dataset", "E", "method"]
    if "measure" in tidy:
        cells = cells.assign(measure=[_measure_text(r) for _, r in tidy.iterrows()])
        keys = ["dataset", "E", "measure", "method"]
        if tidy["paper_table"].nunique() > 1:  # one data set's runs of two paper tables (a long tail beside)
            keys = ["paper_table", *keys]
    order = list(dict.fromkeys(cells["reading"]))
    wide = cells.pivot_table(index=keys, columns="reading", values="text", aggfunc="first")[order]
    wide = wide.fillna("— (not run)")  # a cell the readings grid did not run under a reading
    summary = pd.DataFrame([{"reading": r, "what FedBN's code does": READING_BASIS.get(r.split("=")[0], "—"),
                             **verdict_counts([str(v) for v in cells.loc[cells["reading"] == r, "verdict"]
                                               if str(v) != "—"])}
                            for r in order], columns=["reading", "what FedBN's code does", *VERDICTS])
    return ("Verdict counts per reading (each changes one thing from the experiments' own readings):\n\n"
            + markdown(summary) + "\n\nEvery cell under every reading (mean ± std over seeds; for a method, "
            "Δ to the baseline [95 % CI] · verdict):\n\n" + markdown(wide.reset_index()) + "\n")


def build_readings(table: str, run_dirs: list[Path], out_stem: Path) -> Path:
    """<stem>.csv (tidy: every cell under every reading) and <stem>.md (a column per reading)
    (reports.tables.READINGS_BUILDERS)."""
    from hetfl.io import atomic_write_text
    from hetfl.reports.tables import provenance_note

    tidy = readings_table(table, run_dirs)
    runs = _ok_runs(run_dirs)
    caption = (f"Sensitivity of {table} (FedFOR Tables 3-5) to the readings FedFOR leaves to FedBN's code "
               "(docs/fedfor.md): each column changes one reading from the experiments' own, on the same "
               "seeds and grid; 'paper/default' is the main table. Where a reading cannot change a run (a "
               "split it does not apply to) the default run stands in. The validation_accuracy columns read "
               "the same runs another way and train nothing: "
               + "; ".join(f"{k} = {v}" for k, v in VALIDATION_ACCURACIES.items()) + ". "
               + provenance_note(runs))
    out_stem = Path(out_stem)
    atomic_write_text(out_stem.with_name(out_stem.name + ".csv"), tidy.to_csv(index=False))
    atomic_write_text(out_stem.with_name(out_stem.name + ".md"),
                      caption + "\n\n" + _readings_md(tidy))
    return out_stem
