"""Ma et al. (2022) EFL Figures 1 and 2 at the scale of the runs given (matplotlib, headless).

Figure 1 ("Testing Accuracy-Communication Rounds comparisons ... for IID and non-IID data"): the mean
testing accuracy (mean_client_accuracy, the metric behind BMTA; personalised methods scored with their
personalised models) against rounds for FedAvg, FedProx, SCAFFOLD, APFL and EFL, a panel per data setting
(IID first, then the non-IID ones) and a row per data set; lines are means over seeds, bands their range.

Figure 2 ("The first row shows Testing Accuracy-Communication Rounds comparison and the second row shows
Training Loss-Communication Rounds comparison in non-IID setting"): EFL with λ = 0 against EFL with the
best λ (efl_lambda.best_lambda), a column per data set and setting.

Figure 3 ("Testing Accuracy-Communication Rounds comparisons among different algorithms in low
participation rate"): the same curves for the methods run at a low participation rate (|T| > 1; hetfl's
reading: Ruan et al.'s traces, as ma2022_efl_text.yaml says), a column per |T| with full participation
(|T| = 1) first, a row per data set and setting. Figure 1 draws the |T| = 1 runs only: the bmta table's
runs may hold both.

All three draw whatever grid they are given: a missing method or λ is left out, an empty grid gives an
empty panel that says so.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hetfl.algorithms import method_label
from hetfl.reports.bmta import is_iid
from hetfl.reports.efl_lambda import GROUP, LAMBDA, best_lambda, with_values
from hetfl.reports.event_tables import curve
from hetfl.reports.plotting import pyplot, save

FIGURE1_METHODS = ("fedavg", "fedprox", "scaffold", "apfl", "efl")


def _band(ax, run_dirs: list[str], metric: str, label: str, scale: float = 1.0) -> None:
    """Mean over seeds as a line, min–max over seeds as a band."""
    curves = pd.concat([curve(d, metric) for d in run_dirs], axis=1) * scale
    mean = curves.mean(axis=1)
    (line,) = ax.plot(mean.index, mean.to_numpy(), label=label)
    if curves.shape[1] > 1:
        ax.fill_between(curves.index, curves.min(axis=1), curves.max(axis=1), color=line.get_color(),
                        alpha=0.15)


def _method_panel(ax, sel: pd.DataFrame, methods, empty: str, first_column: bool,
                  with_scheme: bool = False) -> None:
    """One panel of Figures 1 and 3: a band of the mean testing accuracy per method of `methods` that `sel`
    holds runs of, in that order (Figure 3 names the scheme each ran: FedAvg under A, EFL under C), or the
    `empty` text; the axis labels."""
    for algorithm in methods:
        g = sel[sel["algorithm"] == algorithm]
        if len(g):
            label = method_label(algorithm)
            if with_scheme:
                label += f" (Scheme {'/'.join(sorted(g['scheme'].unique()))})"
            _band(ax, list(g["run_dir"]), "mean_client_accuracy", label, 100.0)
    if sel.empty:
        _empty(ax, empty)
    ax.set_xlabel("round")
    if first_column:
        ax.set_ylabel("mean testing accuracy (%)")


def _finish(fig, axes, legend: bool, title: str, out: Path) -> None:
    if legend:
        axes[0][-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    save(fig, out)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=8)


def _low_methods(runs: pd.DataFrame) -> set[str]:
    """The algorithms run at |T| > 1: the methods Figure 3 draws."""
    return set(runs.loc[runs["num_traces"] > 1, "algorithm"])


def _low_rows(runs: pd.DataFrame) -> pd.Series:
    """Whether each run's data set and setting has runs at |T| > 1 (Figure 3 draws a row per such pair)."""
    low = runs[runs["num_traces"] > 1]
    pairs = set(zip(low["dataset"], low["setting"], strict=True))
    return pd.Series([(d, s) in pairs for d, s in zip(runs["dataset"], runs["setting"], strict=True)],
                     index=runs.index, dtype=bool)


def _figure2_drawn(runs: pd.DataFrame) -> pd.DataFrame:
    """Figure 2's runs: EFL's at λ = 0 and at the best λ of each column (efl_lambda.best_lambda)."""
    runs = with_values(runs)
    keep = []
    for _, g in runs.groupby(GROUP, sort=True):
        best = best_lambda(g)
        keep.extend(g.index[(g["lam"] == 0.0) | ((g["lam"] == best) if best is not None else False)])
    return runs.loc[sorted(keep)]


def drawn(name: str, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs figure `name` draws a line of: Figure 1 its five methods at full participation (a |T| = 8
    run, Figure 3's, in the same band would lower the mean), Figure 2 EFL at λ = 0 and the best λ, Figure 3
    the methods run at |T| > 1 on the data sets and settings run at |T| > 1 (a row each)."""
    if name == "efl_figure1":
        return runs[runs["algorithm"].isin(FIGURE1_METHODS) & (runs["num_traces"] == 1)]
    if name == "efl_figure2":
        return _figure2_drawn(runs)
    if name == "efl_figure3":
        return runs[runs["algorithm"].isin(_low_methods(runs)) & _low_rows(runs)]
    raise ValueError(f"figure '{name}' is not one of EFL's figures; allowed: efl_figure1, efl_figure2, "
                     "efl_figure3")


def _methods_runs(runs: pd.DataFrame) -> str:
    """"FedAdam's 2 runs" / "FedGATE's 3 runs and FedAMP's 3 runs", methods by name."""
    parts = [f"{method_label(a)}'s {len(g)} run{'s' if len(g) != 1 else ''}"
             for a, g in runs.groupby("algorithm", sort=True)]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _are(runs: pd.DataFrame) -> str:
    return "is" if len(runs) == 1 else "are"


def left_out(name: str, runs: pd.DataFrame, shown: pd.DataFrame | None = None) -> list[str]:
    """A sentence per kind of run of the table that figure `name` does not draw: whose runs, how many, and
    why (a caption counts the runs drawn; an audit found Figure 1's counting a plugin's runs it left out).
    shown: drawn(name, runs) where the caller has it (Figure 2's reads every EFL run's metrics)."""
    rest = runs.drop((drawn(name, runs) if shown is None else shown).index)
    if rest.empty:
        return []
    if name == "efl_figure1":
        other = rest[~rest["algorithm"].isin(FIGURE1_METHODS)]
        low = rest[rest["algorithm"].isin(FIGURE1_METHODS)]
        paper = ", ".join(method_label(a) for a in FIGURE1_METHODS)
        notes = [f"{_methods_runs(other)} {_are(other)} not drawn: Figure 1 draws the paper's methods "
                 f"({paper})." if len(other) else "",
                 f"{_methods_runs(low)} at |T| > 1 {_are(low)} not drawn: Figure 1 draws full participation "
                 "(|T| = 1), Figure 3 the low participation rate." if len(low) else ""]
        return [n for n in notes if n]
    if name == "efl_figure2":
        other = rest[rest["algorithm"] != "efl"]
        efl = rest[rest["algorithm"] == "efl"]
        lams = ", ".join(f"{v:g}" for v in sorted(efl[LAMBDA].astype(float).unique())) if len(efl) else ""
        notes = [f"{_methods_runs(other)} {_are(other)} not drawn: Figure 2 draws EFL only." if len(other)
                 else "",
                 f"EFL's {len(efl)} run{'s' if len(efl) != 1 else ''} at λ = {lams} {_are(efl)} not drawn: "
                 "Figure 2 draws λ = 0 and the best λ (the highest mean BMTA, as the efl_lambda table "
                 "picks it)." if len(efl) else ""]
        return [n for n in notes if n]
    methods = _low_methods(runs)
    other = rest[~rest["algorithm"].isin(methods)]
    rows = rest[rest["algorithm"].isin(methods)]
    shown = ", ".join(method_label(a) for a in sorted(methods, key=lambda a: (a != "fedavg", a)))
    where = ", ".join(sorted({f"{d} {s}" for d, s in zip(rows["dataset"], rows["setting"], strict=True)}))
    notes = [(f"{_methods_runs(other)} {_are(other)} not drawn: Figure 3 draws the methods run at |T| > 1"
              + (f" ({shown})." if shown else ".")) if len(other) else "",
             f"{_methods_runs(rows)} on {where} {_are(rows)} not drawn: Figure 3 draws the data sets and "
             "settings run at |T| > 1." if len(rows) else ""]
    return [n for n in notes if n]


def figure1(runs: pd.DataFrame, out: Path) -> None:
    runs = drawn("efl_figure1", runs)
    datasets = sorted(runs["dataset"].unique()) or ["—"]
    settings = sorted(runs["setting"].unique(),
                      key=lambda s: (not is_iid(runs[runs["setting"] == s].iloc[0]), s))
    settings = settings or ["—"]
    fig, axes = pyplot().subplots(len(datasets), len(settings),
                                  figsize=(3.6 * len(settings), 2.8 * len(datasets)), squeeze=False,
                                  sharey=True)
    for i, dataset in enumerate(datasets):
        for j, setting in enumerate(settings):
            ax = axes[i][j]
            sel = runs[(runs["dataset"] == dataset) & (runs["setting"] == setting)]
            _method_panel(ax, sel, FIGURE1_METHODS, "no runs of Figure 1's methods", j == 0)
            kind = "IID" if not sel.empty and is_iid(sel.iloc[0]) else "non-IID"
            named = str(setting).upper() in ("IID", "NIID", "NON-IID")  # the label says it already
            ax.set_title(f"{dataset} {setting}" + ("" if named else f" ({kind})"), fontsize=9)
    _finish(fig, axes, not runs.empty, "EFL Figure 1 (reduced scale): IID vs non-IID", out)


def figure2(runs: pd.DataFrame, out: Path) -> None:
    runs = with_values(runs)
    groups = list(runs.groupby(GROUP, sort=True)) or [(("—",) * len(GROUP), runs)]
    fig, axes = pyplot().subplots(2, len(groups), figsize=(3.8 * len(groups), 5.2), squeeze=False)
    for j, (key, g) in enumerate(groups):
        best = best_lambda(g) if len(g) else None
        for lam, label in ((0.0, "EFL, λ = 0"),
                           (best, f"EFL, best λ = {best:g}" if best is not None else "")):
            sel = g[g["lam"] == lam] if lam is not None else g.iloc[0:0]
            if len(sel):
                _band(axes[0][j], list(sel["run_dir"]), "mean_client_accuracy", label, 100.0)
                _band(axes[1][j], list(sel["run_dir"]), "train_loss", label)
        if g.empty:
            _empty(axes[0][j], "no EFL runs")
        axes[0][j].set_title(" ".join(str(k) for k in key[:2]), fontsize=9)
        axes[1][j].set_xlabel("round")
    axes[0][0].set_ylabel("mean testing accuracy (%)")
    axes[1][0].set_ylabel("training loss")
    if not runs.empty:
        axes[0][-1].legend(fontsize=7)
    fig.suptitle("EFL Figure 2 (reduced scale): the elastic term, λ = 0 vs best λ", fontsize=10)
    save(fig, out)


def figure3(runs: pd.DataFrame, out: Path) -> None:
    low = runs[runs["num_traces"] > 1]
    # the |T| columns of every run of the methods run at |T| > 1, as before drawn() kept only their rows
    of_low = runs[runs["algorithm"].isin(_low_methods(runs))]
    ks = sorted(int(k) for k in of_low["num_traces"].unique()) or [1]
    runs = drawn("efl_figure3", runs)
    methods = sorted(set(runs["algorithm"]), key=lambda a: (a != "fedavg", a))  # FedAvg first, then by name
    rows = sorted(low.groupby(["dataset", "setting"]).groups) or [("—", "—")]
    fig, axes = pyplot().subplots(len(rows), len(ks), figsize=(3.6 * len(ks), 2.8 * len(rows)), squeeze=False,
                                  sharey=True)
    for i, (dataset, setting) in enumerate(rows):
        for j, k in enumerate(ks):
            ax = axes[i][j]
            sel = runs[(runs["dataset"] == dataset) & (runs["setting"] == setting)
                       & (runs["num_traces"] == k)]
            empty = "no runs at |T| > 1 (low participation)" if low.empty else "no runs"
            _method_panel(ax, sel, methods, empty, j == 0, with_scheme=True)
            ax.set_title(f"{dataset} {setting}, |T| = {k}" + (" (full)" if k == 1 else " (low)"), fontsize=9)
    _finish(fig, axes, not low.empty, "EFL Figure 3 (reduced scale): low participation rate", out)
