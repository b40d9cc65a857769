"""Objective inconsistency on the quadratic test bed (lecture notes, seed 001): FedAvg's, FedNova's and
SCAFFOLD's fixed points across local steps (τ1, τ2) and data weights p, simulated against the closed forms
of `reports.fixed_points`.

A run's fixed point is its global model x at the last round; the compared quantity is its inconsistency
x̃ − x*, the distance from the minimum of F = Σ p_i F_i, against the closed form's. The quadratic bed is
deterministic (full gradients: every minibatch of a client holds copies of its one sample (a_i, b_i)), so
every seed gives the same x and what separates it from the closed form is float32 arithmetic: the cell's
interval is the seeds' Student-t interval (a point when they agree) widened by TOLERANCE. The verdict
(`reports.verdicts.verdict`, a difference): agrees = the closed-form inconsistency lies inside it and 0 does
not (or the closed form is 0 and the interval holds 0); same direction = the simulated fixed point is off
x* on the predicted side by another amount; disagrees = on the other side, or
off x* where the closed form says x* exactly (SCAFFOLD). A run whose x still moved by more than TOLERANCE
over its last evaluation interval has not reached its fixed point: "inconclusive".
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from hetfl.algorithms import method_label
from hetfl.reports import fixed_points as fp
from hetfl.reports.event_tables import curve
from hetfl.reports.verdicts import counts_text, t_interval, verdict

TOLERANCE = 1e-4  # float32 resolution of x after hundreds of rounds (x ~ 1..10; float32 ε ≈ 6e-8)
TIDY_COLUMNS = ["tau", "setting", "p", "eta", "method", "rounds", "simulated", "last_change", "n_seeds",
                "closed_form", "notes_limit", "optimum", "simulated_inconsistency", "ci_low", "ci_high",
                "inconsistency", "verdict"]


def _list(value: object, n: int, default: float) -> list[float]:
    if isinstance(value, list | tuple | np.ndarray):
        return [float(v) for v in value]
    return [default] * n


def _run_setup(r: pd.Series) -> dict[str, object]:
    a = _list(r.get("quadratic.a"), 2, 1.0)
    b = _list(r.get("quadratic.b"), len(a), 0.0)
    n = _list(r.get("quadratic.n"), len(a), 1.0)
    tau = [int(t) for t in _list(r.get("local_steps"), len(a), 1.0)]
    p = [v / sum(n) for v in n]
    return {"a": a, "b": b, "p": p, "tau": tau}


def _text(values: list[float]) -> str:
    return "(" + ", ".join(f"{v:g}" for v in values) + ")"


def objective_inconsistency(runs: pd.DataFrame) -> pd.DataFrame:
    """One tidy row per (τ, setting, η, algorithm) over the runs' seeds."""
    dataset = runs["dataset_name"] if "dataset_name" in runs else runs["dataset"]  # tables.load_runs relabels
    bad = runs[(dataset != "quadratic") | (runs["lr_schedule"] != "constant")]
    if len(bad):
        first = bad.iloc[0]
        raise ValueError(f"objective_inconsistency needs dataset quadratic with lr_schedule constant; "
                         f"{first['run_dir']} has {dataset[bad.index[0]]}, {first['lr_schedule']}")
    unknown = sorted(set(runs["algorithm"]) - set(fp.ALGORITHMS))
    if unknown:
        raise ValueError(f"objective_inconsistency has closed forms for {', '.join(fp.ALGORITHMS)}; "
                         f"the runs include {', '.join(unknown)}")
    runs = runs.assign(tau=[_text(_run_setup(r)["tau"]) for _, r in runs.iterrows()])
    rows = []
    for (tau, setting, eta, algorithm), g in runs.groupby(["tau", "setting", "eta0", "algorithm"], sort=True):
        setup = _run_setup(g.iloc[0])
        finals, changes = [], []
        for d in g["run_dir"]:
            x = curve(d, "x").dropna()
            finals.append(float(x.iloc[-1]) if len(x) else math.nan)
            changes.append(float(abs(x.iloc[-1] - x.iloc[-2])) if len(x) > 1 else math.nan)
        values = [v for v in finals if not math.isnan(v)]
        iv = t_interval(values)
        low, high = (iv.low, iv.high) if iv.n > 1 else (iv.mean, iv.mean)  # one seed: a point
        closed = fp.fixed_point(algorithm, setup["a"], setup["b"], setup["p"], setup["tau"], float(eta))
        opt = fp.optimum(setup["a"], setup["b"], setup["p"])
        settled = bool(values) and max(changes) <= TOLERANCE
        ci = (low - opt - TOLERANCE, high - opt + TOLERANCE)
        rows.append({
            "tau": tau, "setting": setting, "p": _text([round(v, 4) for v in setup["p"]]), "eta": float(eta),
            "method": method_label(algorithm), "rounds": int(g["rounds"].max()),
            "simulated": iv.mean, "last_change": max(changes) if changes else math.nan,
            "n_seeds": len(finals), "closed_form": closed,
            "notes_limit": fp.limit(algorithm, setup["a"], setup["b"], setup["p"], setup["tau"]),
            "optimum": opt, "simulated_inconsistency": iv.mean - opt, "ci_low": ci[0], "ci_high": ci[1],
            "inconsistency": closed - opt,
            "verdict": verdict(closed - opt, *ci) if settled else "inconclusive",
        })
    return pd.DataFrame(rows, columns=TIDY_COLUMNS)


def layout(tidy: pd.DataFrame) -> pd.DataFrame:
    """People's layout: one row per cell, numbers to 4 decimals."""
    def num(v: float) -> str:
        return "—" if pd.isna(v) else f"{round(v, 4) + 0.0:.4f}"  # + 0.0: no "-0.0000"

    return pd.DataFrame({
        "τ": tidy["tau"], "setting": tidy["setting"], "p": tidy["p"],
        "η": tidy["eta"].map(lambda v: f"{v:g}"),
        "method": tidy["method"], "simulated x (rounds)": [f"{num(s)} ({r})" for s, r in
                                                           zip(tidy["simulated"], tidy["rounds"],
                                                               strict=True)],
        "closed form at η": tidy["closed_form"].map(num), "notes, η → 0": tidy["notes_limit"].map(num),
        "x*": tidy["optimum"].map(num), "simulated − x* [interval]": [
            f"{num(s)} [{num(lo)}, {num(hi)}]" for s, lo, hi in
            zip(tidy["simulated_inconsistency"], tidy["ci_low"], tidy["ci_high"], strict=True)],
        "closed form − x*": tidy["inconsistency"].map(num), "verdict": tidy["verdict"],
    })


def caption(tidy: pd.DataFrame, runs: pd.DataFrame) -> str:
    a = sorted({_text(_run_setup(r)["a"]) for _, r in runs.iterrows()})
    b = sorted({_text(_run_setup(r)["b"]) for _, r in runs.iterrows()})
    return ("Objective inconsistency (lecture notes, seed 001): the fixed point x̃ each algorithm reaches on "
            "the "
            f"quadratic test bed F_i(x) = a_i (x − b_i)² with a = {', '.join(a)}, b = {', '.join(b)}, data "
            "weights p_i = n_i/n, τ_i full-gradient local steps of constant size η per round, every client "
            "active, Scheme B (data weights; FedNova normalises Δ_i/τ_i and rescales by τ_eff = Σ p_i τ_i). "
            "Simulated x = the global model after the last round; closed form at η = FedAvg "
            "Σ p_i(1 − ρ_i)b_i/Σ p_i(1 − ρ_i) with ρ_i = (1 − 2a_iη)^τ_i (the notes' x̃), FedNova "
            "Σ p_i c_i b_i/Σ p_i c_i with c_i = (1 − ρ_i)/τ_i, SCAFFOLD x*; 'notes, η → 0' = FedAvg's "
            "Σ p_i τ_i a_i b_i/Σ p_i τ_i a_i (the notes' (τ1 x1* + 2τ2 x2*)/(τ1 + 2τ2)) and x* for FedNova "
            "and SCAFFOLD; x* = Σ p_i a_i b_i/Σ p_i a_i minimises F = Σ p_i F_i (11/3 in the notes). The bed "
            "is deterministic, so the interval of the simulated inconsistency x̃ − x* is the seeds' values ± "
            f"{TOLERANCE:g} (float32 resolution); verdict against the closed form's x̃ − x*: inside = "
            "agrees, off x* on the predicted side = same direction, on the other side (or off x* where the "
            "closed form is x*) = disagrees, 'inconclusive' when the interval holds 0 or x still moved by "
            f"more than {TOLERANCE:g} over the last evaluation interval. Verdicts: "
            f"{counts_text(list(tidy['verdict']))}. "
            f"Scale: {int(runs['rounds'].max())} rounds, {runs['seed'].nunique()} seed(s).")


def build(run_dirs: list[Path], out_stem: Path) -> Path:
    """The table from run directories (reports.tables.BUILDERS)."""
    from hetfl.reports.results import collect_runs
    from hetfl.reports.tables import provenance_note
    from hetfl.reports.writers import write_frame_tables

    runs = collect_runs(run_dirs)
    tidy = objective_inconsistency(runs)
    write_frame_tables(tidy, layout(tidy), out_stem, caption(tidy, runs) + " " + provenance_note(runs))
    return out_stem


def draw(runs: pd.DataFrame, out: Path) -> None:
    """The fixed points per (τ1, τ2): closed form (open marker) and simulated (filled), x* dashed; one panel
    per data weights p (and step size η)."""
    from hetfl.reports.plotting import pyplot, save

    plt = pyplot()
    tidy = objective_inconsistency(runs)
    panels = sorted({(p, eta) for p, eta in zip(tidy["p"], tidy["eta"], strict=True)})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    taus = sorted(tidy["tau"].unique(), key=lambda t: tuple(float(v) for v in t.strip("()").split(",")))
    shift = {m: 0.2 * (i - 1) for i, m in enumerate(sorted(tidy["method"].unique()))}
    for ax, (p, eta) in zip(axes[0], panels, strict=True):
        sel = tidy[(tidy["p"] == p) & (tidy["eta"] == eta)]
        for j, (method, g) in enumerate(sel.groupby("method", sort=True)):
            xs = [taus.index(t) + shift[method] for t in g["tau"]]
            color = f"C{j}"
            ax.scatter(xs, g["closed_form"], facecolors="none", edgecolors=color, s=60)
            ax.scatter(xs, g["simulated"], color=color, s=14, label=method)
        ax.axhline(sel["optimum"].iloc[0], linestyle="--", color="grey", linewidth=1, label="x*")
        ax.set_xticks(range(len(taus)), [f"τ = {t}" for t in taus])
        ax.set_title(f"p = {p}, η = {eta:g}", fontsize=9)
        ax.set_ylabel("fixed point x̃")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle("fixed points: simulated (filled) and closed form (open circle)", fontsize=9)
    save(fig, out)
