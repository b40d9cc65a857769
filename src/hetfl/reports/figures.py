"""The papers' figures from run directories (matplotlib and seaborn, headless).

Each figure is a `draw_*` function (runs → Figure) plus `_save` (reports.plotting.save), which writes PNG
and SVG byte for byte the same on every run: no date or version metadata, and SVG ids from a fixed salt
instead of random ones.
A figure draws whatever grid its runs span: a panel per value present, never an empty grid.

Every curve is the mean over seeds of the runs' per-round metric with a band of the 95 % Student-t
interval over seeds at each round (`hetfl.reports.verdicts.t_interval`, the tables' interval; no band
with one seed), drawn by `seaborn.lineplot`. The figure's title says what it shows and over how many
seeds (`hetfl.reports.catalog.figure_title`).
"""

from __future__ import annotations

import pkgutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from hetfl.reports.catalog import figure_title
from hetfl.reports.event_tables import curve, event_rounds
from hetfl.reports.plotting import pyplot
from hetfl.reports.plotting import save as _save
from hetfl.reports.registry import DRAWN_WHEN as DRAWN_WHEN
from hetfl.reports.registry import FIGURES as FIGURES
from hetfl.reports.verdicts import t_interval

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Ruan et al. Figure 3 shows |T| = 1, 3, 5, 8; a grid holding all four draws those, any other grid its own
PAPER_TRACE_PANELS = (1, 3, 5, 8)
#: the second title line of a |T| = 1 panel whose one trace is T_0 (Ruan et al. Table 2: T_0 completes
#: every round, so no device is incomplete or inactive and Schemes A, B and C give the same p_τ^k)
ONE_TRACE_NOTE = "A, B, C coincide: all devices complete (T_0)"
def t_band(values: pd.Series) -> tuple[float, float]:
    """seaborn's errorbar: the 95 % Student-t interval of the mean over seeds (NaN, no band, for one seed)."""
    iv = t_interval(values.to_numpy())
    return iv.low, iv.high


def _seeds(runs: pd.DataFrame) -> pd.Series:
    """Each run's seed (a run without one, as in hand-made frames, counts as its own seed)."""
    return runs["seed"] if "seed" in runs else pd.Series(range(len(runs)), index=runs.index)


def _curves(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Long frame of the runs' curves: round, value, seed and the run's index in `runs` (column 'run')."""
    seeds = _seeds(runs)
    parts = [curve(d, metric).rename_axis("round").reset_index(name="value").assign(seed=seeds[i], run=i)
             for i, d in runs["run_dir"].items()]
    return (pd.concat(parts, ignore_index=True) if parts
            else pd.DataFrame(columns=["round", "value", "seed", "run"]))


def _mean_band(ax, curves: pd.DataFrame, label: str, color: str) -> None:
    """One line: the mean over seeds per round, and its 95 % t band."""
    import seaborn as sns

    sns.lineplot(data=curves, x="round", y="value", estimator="mean", errorbar=t_band, ax=ax, label=label,
                 color=color, linewidth=1.4)


def _lines(ax, runs: pd.DataFrame, metric: str, hue: str, labels: dict, colors: dict) -> None:
    """A mean line with band per value of `hue` (labels and colors fixed per figure, so panels agree)."""
    curves = _curves(runs, metric)
    for value, g in runs.groupby(hue, sort=True):
        _mean_band(ax, curves[curves["run"].isin(g.index)], labels[value], colors[value])


def _palette(values) -> dict:
    return {v: f"C{i}" for i, v in enumerate(sorted(set(values)))}


def _grid(rows: int, cols: int, **kwargs) -> tuple[Figure, list[list]]:
    fig, axes = pyplot().subplots(max(rows, 1), max(cols, 1),
                                  figsize=(3.2 * max(cols, 1), 2.6 * max(rows, 1)), squeeze=False, **kwargs)
    return fig, axes


def _title(fig: Figure, name: str, runs: pd.DataFrame, line_keys: list[str]) -> None:
    """The figure's caption line (catalog.figure_title) with the seeds behind each line, wrapped to the
    figure's width."""
    if not len(runs):
        return
    per_line = _seeds(runs).groupby([runs[k] for k in line_keys if k in runs]).nunique().tolist()
    fig.suptitle(textwrap.fill(figure_title(name, per_line), max(40, int(fig.get_figwidth() * 15))),
                 fontsize=8)


def _finish_panel(ax, metric: str = "") -> None:
    """A legend where lines were drawn, a note where there was nothing to draw; the y axis kept to the
    metric's range (a t band over 2 seeds, t = 12.7, would otherwise squash the curves)."""
    low, high = ax.get_ylim()
    if metric.endswith("accuracy"):
        ax.set_ylim(max(low, 0.0), min(high, 1.0))
    elif metric.endswith("loss"):
        ax.set_ylim(max(low, 0.0), high)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes, color="grey")


def trace_panels(present: set[int], num_traces: tuple[int, ...] | None = None) -> list[int]:
    """The |T| panels: `num_traces` if given, else the paper's four when all are present, else every value
    present (a grid of |T| = [2] draws |T| = 2)."""
    if num_traces is not None:
        return [k for k in num_traces if k in present]
    return list(PAPER_TRACE_PANELS) if set(PAPER_TRACE_PANELS) <= present else sorted(present)


def _all_complete(runs: pd.DataFrame) -> bool:
    """Every run has one trace and it is T_0 (runs without a trace_order are the default order, T_0 first)."""
    if "trace_order" not in runs:
        return True
    return all(order is None or (isinstance(order, float) and pd.isna(order)) or list(order)[:1] == ["T_0"]
               for order in runs["trace_order"])


def draw_scheme_curves(runs: pd.DataFrame, num_traces: tuple[int, ...] | None = None,
                       name: str = "scheme_curves") -> Figure:
    """Ruan et al. Figure 3: test accuracy vs rounds per scheme, one panel per (setting, |T|); mean over seeds
    with a 95 % t band. A |T| = 1 panel of T_0 runs says that A, B and C coincide there (Ruan et al. §3.2:
    with no incomplete or inactive device the three schemes give the same p_τ^k)."""
    settings = sorted(runs["setting"].unique()) if len(runs) else []
    ks = trace_panels({int(k) for k in runs["num_traces"]} if len(runs) else set(), num_traces)
    fig, axes = _grid(len(settings), len(ks), sharey=True)
    colors = _palette(runs["scheme"]) if len(runs) else {}
    labels = {s: f"Scheme {s}" for s in colors}
    for i, setting in enumerate(settings):
        for j, k in enumerate(ks):
            ax = axes[i][j]
            sel = runs[(runs["setting"] == setting) & (runs["num_traces"] == k)]
            _lines(ax, sel, "test_accuracy", "scheme", labels, colors)
            note = f"\n{ONE_TRACE_NOTE}" if k == 1 and len(sel) and _all_complete(sel) else ""
            ax.set_title(f"{setting}, |T| = {k}{note}", fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel("test accuracy" if j == 0 else "")
    # the panels share their y axis: fixed only once every panel's lines are drawn, or the first panel's
    # range would hide the others' curves (NIID's B and C sat above IID's range, out of sight)
    for row in axes[:len(settings)]:
        for ax in row[:len(ks)]:
            _finish_panel(ax, "test_accuracy")
    if not settings or not ks:
        _finish_panel(axes[0][0])
    # the seeds of the lines drawn: a |T| panel left out (trace_panels) draws none
    _title(fig, name, runs[runs["num_traces"].isin(ks)] if len(runs) else runs,
           ["setting", "num_traces", "scheme"])
    return fig


def scheme_curves(runs: pd.DataFrame, out: Path, num_traces: tuple[int, ...] | None = None) -> None:
    _save(draw_scheme_curves(runs, num_traces), out)


def draw_event_curves(runs: pd.DataFrame, metric: str, title: str, name: str = "arrival_curves") -> Figure:
    """Ruan et al. Figures 4 and 5: a metric around the events, one line per policy (mean over seeds, 95 % t
    band), a dashed line at every event; a row per dataset/setting and, in it, a panel per τ0 that row has
    (datasets may use different τ0)."""
    runs = runs.copy()
    for col in ("dataset", "setting"):
        if col not in runs:
            runs[col] = ""
    groups = list(runs.groupby(["dataset", "setting"], sort=True)) if len(runs) else []
    taus = [sorted(g["event_round"].unique()) for _, g in groups]
    fig, axes = _grid(len(groups), max((len(t) for t in taus), default=0))
    colors = _palette(runs["event_policy"]) if len(runs) else {}
    labels = {p: p for p in colors}
    for i, ((dataset, setting), g) in enumerate(groups):
        for j, ax in enumerate(axes[i]):
            if j >= len(taus[i]):
                ax.set_visible(False)  # this row has fewer τ0 than the widest one
                continue
            tau0 = taus[i][j]
            sel = g[g["event_round"] == tau0]
            _lines(ax, sel, metric, "event_policy", labels, colors)
            for tau in event_rounds(sel, tau0):
                ax.axvline(tau, linestyle="--", color="grey", linewidth=1)
            ax.set_title(f"{dataset} {setting} {title}, τ0 = {tau0}".strip(), fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel(metric.replace("_", " ") if j == 0 else "")
            _finish_panel(ax, metric)
    if not groups:
        _finish_panel(axes[0][0])
    _title(fig, name, runs, ["dataset", "setting", "event_round", "event_policy"])
    return fig


def event_curves(runs: pd.DataFrame, out: Path, metric: str, title: str,
                 name: str = "arrival_curves") -> None:
    _save(draw_event_curves(runs, metric, title, name), out)


def _scheme_figure(runs: pd.DataFrame, out: Path) -> None:
    for (dataset, setting), g in runs.groupby(["dataset", "setting"]):
        runs.loc[g.index, "setting"] = f"{dataset} {setting}"
    scheme_curves(runs, out)


def arrival_curves(runs: pd.DataFrame, out: Path) -> None:
    event_curves(runs, out, "test_accuracy", "arrival", "arrival_curves")


def departure_curves(runs: pd.DataFrame, out: Path) -> None:
    event_curves(runs, out, "test_loss", "departure", "departure_curves")


def multiple_arrival_curves(runs: pd.DataFrame, out: Path) -> None:
    event_curves(runs, out, "test_accuracy", "arrivals", "multiple_arrival_curves")


def drawing(name: str) -> Callable[[pd.DataFrame, Path], None]:
    """Figure `name`'s drawing function (runs, out), its module imported now."""
    return pkgutil.resolve_name(FIGURES[name][1])


#: the columns drawn_runs needs to tell a figure's drawn runs from the rest (a hand-made frame may lack them)
_DRAWN_COLUMNS = {"efl_figure1": {"algorithm", "num_traces", "dataset", "setting"},
                  "efl_figure2": {"algorithm", "run_dir", "dataset", "setting", "num_traces", "scheme"},
                  "efl_figure3": {"algorithm", "num_traces", "dataset", "setting"},
                  "scheme_curves": {"num_traces"}}


def drawn_runs(name: str, runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The runs of its table that figure `name` draws, and a sentence per kind of run it leaves out (whose,
    how many, why): its caption counts the runs drawn. EFL Figure 1 draws the paper's five methods at
    |T| = 1, Figure 2 EFL at λ = 0 and the best λ, Figure 3 the methods and rows run at |T| > 1; Ruan et
    al.'s Figure 3 the |T| panels of trace_panels; every other figure every run."""
    if name not in _DRAWN_COLUMNS or not len(runs) or not _DRAWN_COLUMNS[name] <= set(runs.columns):
        return runs, []
    if name == "scheme_curves":
        ks = trace_panels({int(k) for k in runs["num_traces"]})
        rest = runs[~runs["num_traces"].isin(ks)]
        if rest.empty:
            return runs, []
        shown = ", ".join(str(int(k)) for k in sorted(rest["num_traces"].unique()))
        n = len(rest)
        return runs[runs["num_traces"].isin(ks)], [
            f"The {n} run{'s' if n != 1 else ''} at |T| = {shown} {'is' if n == 1 else 'are'} not drawn: "
            f"the figure draws the paper's panels, |T| = {', '.join(map(str, PAPER_TRACE_PANELS))}, where "
            "the grid has all four (the table holds every |T|)."]
    from hetfl.reports import efl_figures

    shown = efl_figures.drawn(name, runs)
    return shown, efl_figures.left_out(name, runs, shown)


def build_figure(name: str, run_dirs: list[Path], out: Path) -> None:
    """Draw one named figure from run directories (the Snakemake `figure` rule calls this)."""
    from hetfl.reports.tables import load_event_runs

    if name not in FIGURES:
        raise ValueError(f"figure '{name}' is unknown; allowed: {', '.join(FIGURES)}")
    from hetfl.reports.references import reading_only
    from hetfl.reports.report_pages import write_figure_caption

    # no figure reads a paper reference, so the figure rule's fingerprint hashes none (hetfl.fingerprint.DATA)
    with reading_only(f"figure '{name}'", (), "hetfl.fingerprint.DATA (none for figures)"):
        runs = load_event_runs(run_dirs)
        drawing(name)(runs, out)
        write_figure_caption(name, runs, FIGURES[name][0], out)  # <out>.caption.html, the report's caption
