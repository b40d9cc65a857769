"""The papers' figures from run directories (matplotlib, headless).

Each figure is a `draw_*` function (runs → Figure) plus `_save`, which writes PNG and SVG byte for byte
the same on every run: no date or version metadata, and SVG ids from a fixed salt instead of random ones.
A figure draws whatever grid its runs span: a panel per value present, never an empty grid.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from hetfl.io import atomic_write  # noqa: E402
from hetfl.reports.event_tables import curve  # noqa: E402

#: Ruan et al. Figure 3 shows |T| = 1, 3, 5, 8; a grid holding all four draws those, any other grid its own
PAPER_TRACE_PANELS = (1, 3, 5, 8)
# metadata that would differ between runs or matplotlib versions (None removes the entry)
_METADATA = {".png": {"Software": None}, ".svg": {"Date": None, "Creator": None}}


def _save(fig: Figure, out: Path) -> None:
    fig.tight_layout()
    with plt.rc_context({"svg.hashsalt": "hetfl"}):  # clip-path ids hashed from content, not random
        for suffix, metadata in _METADATA.items():  # the temporary file keeps the suffix (format)
            atomic_write(Path(out).with_suffix(suffix),
                         lambda tmp, m=metadata: fig.savefig(tmp, dpi=120, bbox_inches="tight", metadata=m))
    plt.close(fig)


def _mean_curve(run_dirs: list[str], metric: str) -> pd.Series:
    return pd.concat([curve(d, metric) for d in run_dirs], axis=1).mean(axis=1)


def _grid(rows: int, cols: int, **kwargs) -> tuple[Figure, list[list]]:
    fig, axes = plt.subplots(max(rows, 1), max(cols, 1), figsize=(3.2 * max(cols, 1), 2.6 * max(rows, 1)),
                             squeeze=False, **kwargs)
    return fig, axes


def _finish_panel(ax) -> None:
    """A legend where lines were drawn; a note where there was nothing to draw."""
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


def draw_scheme_curves(runs: pd.DataFrame, num_traces: tuple[int, ...] | None = None) -> Figure:
    """Ruan et al. Figure 3: test accuracy vs rounds per scheme, one panel per (setting, |T|)."""
    settings = sorted(runs["setting"].unique()) if len(runs) else []
    ks = trace_panels({int(k) for k in runs["num_traces"]} if len(runs) else set(), num_traces)
    fig, axes = _grid(len(settings), len(ks), sharey=True)
    for i, setting in enumerate(settings):
        for j, k in enumerate(ks):
            ax = axes[i][j]
            sel = runs[(runs["setting"] == setting) & (runs["num_traces"] == k)]
            for scheme, g in sel.groupby("scheme"):
                mean = _mean_curve(list(g["run_dir"]), "test_accuracy")
                ax.plot(mean.index, mean.to_numpy(), label=f"Scheme {scheme}")
            ax.set_title(f"{setting}, |T| = {k}", fontsize=9)
            ax.set_xlabel("round")
            if j == 0:
                ax.set_ylabel("test accuracy")
            _finish_panel(ax)
    if not settings or not ks:
        _finish_panel(axes[0][0])
    return fig


def scheme_curves(runs: pd.DataFrame, out: Path, num_traces: tuple[int, ...] | None = None) -> None:
    _save(draw_scheme_curves(runs, num_traces), out)


def draw_event_curves(runs: pd.DataFrame, metric: str, title: str) -> Figure:
    """Ruan et al. Figure 4: a metric around the event, one line per policy, averaged over seeds; a row per
    dataset/setting and, in it, a panel per τ0 that row has (datasets may use different τ0)."""
    runs = runs.copy()
    for col in ("dataset", "setting"):
        if col not in runs:
            runs[col] = ""
    groups = list(runs.groupby(["dataset", "setting"], sort=True)) if len(runs) else []
    taus = [sorted(g["event_round"].unique()) for _, g in groups]
    fig, axes = _grid(len(groups), max((len(t) for t in taus), default=0))
    for i, ((dataset, setting), g) in enumerate(groups):
        for j, ax in enumerate(axes[i]):
            if j >= len(taus[i]):
                ax.set_visible(False)  # this row has fewer τ0 than the widest one
                continue
            tau0 = taus[i][j]
            for policy, gp in g[g["event_round"] == tau0].groupby("event_policy"):
                mean = _mean_curve(list(gp["run_dir"]), metric)
                ax.plot(mean.index, mean.to_numpy(), label=policy)
            ax.axvline(tau0, linestyle="--", color="grey", linewidth=1)
            ax.set_title(f"{dataset} {setting} {title}, τ0 = {tau0}".strip(), fontsize=9)
            ax.set_xlabel("round")
            if j == 0:
                ax.set_ylabel(metric.replace("_", " "))
            _finish_panel(ax)
    if not groups:
        _finish_panel(axes[0][0])
    return fig


def event_curves(runs: pd.DataFrame, out: Path, metric: str, title: str) -> None:
    _save(draw_event_curves(runs, metric, title), out)


def _scheme_figure(runs: pd.DataFrame, out: Path) -> None:
    for (dataset, setting), g in runs.groupby(["dataset", "setting"]):
        runs.loc[g.index, "setting"] = f"{dataset} {setting}"
    scheme_curves(runs, out)


def _efl_figure(name: str):
    """EFL's figures live in reports/efl_figures.py, which imports this module's helpers: imported on use."""
    def draw(runs: pd.DataFrame, out: Path) -> None:
        from hetfl.reports import efl_figures

        getattr(efl_figures, name)(runs, out)
    return draw


def _objective_inconsistency(runs: pd.DataFrame, out: Path) -> None:
    from hetfl.reports.objective_inconsistency import draw

    draw(runs, out)


def _communication_nonzeros(runs: pd.DataFrame, out: Path) -> None:
    from hetfl.reports.communication_cost import draw_nonzeros

    draw_nonzeros(runs, out)


#: figure name -> (the table whose runs draw it, the drawing function). The workflow draws a figure
#: whenever its table is in the config (workflow/rules/common.smk); `hetfl figure` takes these names.
FIGURES = {
    "scheme_curves": ("accuracy_difference", _scheme_figure),
    "arrival_curves": ("fast_reboot", lambda runs, out: event_curves(runs, out, "test_accuracy", "arrival")),
    "departure_curves": ("crossing_epochs",
                         lambda runs, out: event_curves(runs, out, "test_loss", "departure")),
    "efl_figure1": ("bmta", _efl_figure("figure1")),  # Ma et al. Figure 1: IID vs non-IID curves
    "efl_figure2": ("efl_lambda", _efl_figure("figure2")),  # Ma et al. Figure 2: λ = 0 vs best λ
    "objective_inconsistency": ("objective_inconsistency", _objective_inconsistency),
    "communication_nonzeros": ("communication_cost", _communication_nonzeros),
}


def build_figure(name: str, run_dirs: list[Path], out: Path) -> None:
    """Draw one named figure from run directories (the Snakemake `figure` rule calls this)."""
    from hetfl.reports.tables import load_event_runs

    if name not in FIGURES:
        raise ValueError(f"figure '{name}' is unknown; allowed: {', '.join(FIGURES)}")
    FIGURES[name][1](load_event_runs(run_dirs), out)
