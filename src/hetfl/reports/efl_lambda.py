"""EFL's Figure 2 in numbers: EFL with λ = 0 against EFL with the best λ (Ma et al. 2022, §5.3).

The paper: "We compare the result between EFL with λ = 0 and EFL with best λ. For all datasets, it can be
observed that the appropriate λ can increase the stability for unstable methods and can force divergent
methods to converge, and it also increases the accuracy in most cases." It tunes λ per data set and does
not report the values, nor how "best" is chosen.

hetfl runs EFL at several λ (one experiment per λ, table `efl_lambda`) on the same splits and seeds. Per λ:
BMTA (as bmta.py) and the training loss F(w) at the final evaluated round, mean and 95 % CI over seeds.
Reading of "best λ": the λ > 0 with the highest mean BMTA over seeds (ties: the smaller λ) — chosen on the
same runs it is then compared on, as the paper's tuning does, which favours it. For every λ > 0 the paired
per-seed differences to λ = 0 (BMTA, final training loss) with their CIs (a seed whose two runs both
diverged has no loss difference, ∞ − ∞: left out and counted, "k excl."); verdicts only for the best λ,
against the directions the paper states (BMTA up; training loss down, "stabilizes and improves the
convergence"): the paper gives directions, not numbers, so "agrees" cannot occur.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from hetfl.reports.bmta import model_note, paired, per_run
from hetfl.reports.fairness import final_value
from hetfl.reports.tables import load_runs, notes
from hetfl.reports.verdicts import Interval, counts_text, excluded_text, interval_text, t_interval, verdict
from hetfl.reports.writers import write_frame_tables

LAMBDA = "algorithm_params.lam"
GROUP = ["dataset", "setting", "num_traces", "scheme"]
#: the paper's direction for (best λ) − (λ = 0): +∞ / −∞ stand for "up" / "down" (no number is published)
PAPER_DIRECTION = {"bmta": math.inf, "loss": -math.inf}


def with_values(runs: pd.DataFrame) -> pd.DataFrame:
    """EFL runs with their λ, BMTA (%) and final training loss."""
    runs = per_run(runs[runs["algorithm"] == "efl"])
    runs["lam"] = runs[LAMBDA].astype(float)
    runs["loss"] = [final_value(d, "train_loss") for d in runs["run_dir"]]
    return runs


def best_lambda(group: pd.DataFrame) -> float | None:
    """The λ > 0 with the highest mean BMTA over seeds (ties: the smaller λ); None when there is none."""
    means = group[group["lam"] > 0].groupby("lam")["bmta"].mean().dropna()
    if means.empty:
        return None
    return float(means[means == means.max()].index.min())


def lambda_table(runs: pd.DataFrame) -> pd.DataFrame:
    runs = with_values(runs)
    rows = []
    for key, g in runs.groupby(GROUP, sort=True):
        best = best_lambda(g)
        zero = g[g["lam"] == 0].set_index("seed")
        for lam, gl in g.groupby("lam", sort=True):
            row = dict(zip(GROUP, key, strict=True))
            row.update(lam=lam, is_best=lam == best, n_seeds=len(gl),
                       n_diverged=int((gl["status"] != "ok").sum()))
            by_seed = gl.set_index("seed")
            for what in ("bmta", "loss"):
                iv = t_interval(by_seed[what].dropna().to_list())
                compared = lam > 0 and len(zero) > 0
                pairs = paired(by_seed[what], zero[what]) if compared else []
                # a seed whose runs both diverged: its loss Δ is ∞ − ∞, no value (left out, counted)
                usable = [d for d in pairs if not math.isnan(d)]
                diff = t_interval(usable) if compared else None
                row.update({f"{what}_mean": iv.mean, f"{what}_ci_low": iv.low, f"{what}_ci_high": iv.high})
                row.update({f"{what}_diff_mean": diff.mean if diff else np.nan,
                            f"{what}_diff_ci_low": diff.low if diff else np.nan,
                            f"{what}_diff_ci_high": diff.high if diff else np.nan,
                            f"{what}_n_pairs": diff.n if diff else 0,
                            f"{what}_n_excluded": len(pairs) - len(usable)})
                row[f"{what}_verdict"] = ("—" if lam == 0 else "not comparable" if not (lam == best and diff)
                                          else verdict(PAPER_DIRECTION[what], diff.low, diff.high))
            rows.append(row)
    return pd.DataFrame(rows)


def layout(tidy: pd.DataFrame) -> pd.DataFrame:
    varying = [c for c in GROUP if tidy[c].nunique() > 1]
    out = []
    for _, r in tidy.iterrows():
        row = {**{c: str(r[c]) for c in varying}, "λ": f"{r['lam']:g}" + (" (best)" if r["is_best"] else "")}
        row["BMTA [95% CI]"] = _cell(r, "bmta", "", r["n_seeds"])
        row["Δ BMTA vs λ = 0"] = _cell(r, "bmta", "_diff", r["bmta_n_pairs"], excluded=r["bmta_n_excluded"])
        row["Δ verdict (paper: up)"] = r["bmta_verdict"]
        row["final train loss [95% CI]"] = _cell(r, "loss", "", r["n_seeds"], digits=3)
        row["Δ loss vs λ = 0"] = _cell(r, "loss", "_diff", r["loss_n_pairs"], digits=3,
                                       excluded=r["loss_n_excluded"])
        row["Δ verdict (paper: down)"] = r["loss_verdict"]
        row["diverged"] = f"{r['n_diverged']} of {r['n_seeds']}"
        out.append(row)
    return pd.DataFrame(out)


def _cell(r: pd.Series, what: str, kind: str, n: int, digits: int = 2, excluded: int = 0) -> str:
    """A cell's text; '—' where it has no value at all. A mean that is NaN beside a CI (seeds at +∞ and
    −∞: ∞ − ∞) says why (verdicts.interval_text); `excluded` pairs (both runs diverged) are counted."""
    mean, low, high = r[f"{what}{kind}_mean"], r[f"{what}{kind}_ci_low"], r[f"{what}{kind}_ci_high"]
    if n == 0 or (pd.isna(mean) and pd.isna(low) and pd.isna(high)):
        text = "—"
    else:
        text = interval_text(Interval(mean, np.nan, low, high, int(n)), digits=digits)
    return text + excluded_text(excluded)


def caption(tidy: pd.DataFrame, settings_note: str) -> str:
    # every cell the report's fidelity summary counts (catalog: both columns, '—' is no verdict)
    judged = [v for c in ("bmta_verdict", "loss_verdict") for v in tidy[c] if v != "—"]
    return ("Ma et al. (2022), EFL Figure 2 in numbers: EFL with λ = 0 against EFL with the best λ in the "
            "non-IID setting. BMTA as in the bmta table (%, best over rounds of the mean testing accuracy); "
            "final train loss = F(w) on all local training data at the last evaluated round. Best λ = the λ "
            "> 0 with the highest mean BMTA over these seeds (chosen on the runs it is compared on, like the "
            "paper's tuning, which favours it). Δ = paired per-seed difference to λ = 0 on the same split "
            "and seed, mean "
            "[95% Student-t CI]; a seed whose λ and λ = 0 runs both diverged has no loss Δ (∞ − ∞) and is "
            "left out (\"k excl.\"). The paper states directions only (accuracy up, training loss down), "
            "so a verdict is 'same direction', 'inconclusive' or 'disagrees', never 'agrees'; λ other than "
            f"the best are not judged (not comparable). Verdicts: {counts_text(judged)}. " + settings_note)


def write(runs: pd.DataFrame, out_stem: Path, settings_note: str) -> pd.DataFrame:
    tidy = lambda_table(runs)
    write_frame_tables(tidy, layout(tidy), out_stem, caption(tidy, settings_note + " " + model_note(runs)))
    return tidy


def build(run_dirs: list[Path], out_stem: Path) -> Path:
    """The table from run directories (reports.tables.BUILDERS)."""
    runs = load_runs(run_dirs)
    write(runs, out_stem, notes(runs))
    return out_stem
