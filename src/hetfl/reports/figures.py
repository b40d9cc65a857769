"""The papers' figures from run directories (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from hetfl.io import atomic_write  # noqa: E402
from hetfl.reports.event_tables import curve  # noqa: E402


def _save(fig, out: Path) -> None:
    fig.tight_layout()
    for suffix in (".png", ".svg"):  # the temporary file keeps the suffix, so savefig picks the format
        atomic_write(Path(out).with_suffix(suffix), lambda tmp: fig.savefig(tmp, dpi=120, bbox_inches="tight"))
    plt.close(fig)


def _mean_curve(run_dirs: list[str], metric: str) -> pd.Series:
    return pd.concat([curve(d, metric) for d in run_dirs], axis=1).mean(axis=1)


def scheme_curves(runs: pd.DataFrame, out: Path, num_traces: tuple[int, ...] = (1, 3, 5, 8)) -> None:
    """Ruan et al. Figure 3: test accuracy vs rounds per scheme, one panel per (setting, |T|)."""
    settings = sorted(runs["setting"].unique())
    ks = [k for k in num_traces if k in set(runs["num_traces"])]
    fig, axes = plt.subplots(len(settings), len(ks), figsize=(3.2 * len(ks), 2.6 * len(settings)),
                             squeeze=False, sharey=True)
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
    axes[0][-1].legend(fontsize=8)
    _save(fig, out)


def event_curves(runs: pd.DataFrame, out: Path, metric: str, title: str) -> None:
    """Ruan et al. Figure 4: a metric around the event, one line per policy; a panel per τ0 (columns) and
    per dataset/setting (rows), averaged over seeds."""
    runs = runs.copy()
    if "dataset" not in runs:
        runs["dataset"] = ""
    if "setting" not in runs:
        runs["setting"] = ""
    groups = list(runs.groupby(["dataset", "setting"], sort=True))
    taus = sorted(runs["event_round"].unique())
    fig, axes = plt.subplots(len(groups), len(taus), figsize=(3.2 * len(taus), 2.6 * len(groups)),
                             squeeze=False)
    for i, ((dataset, setting), g) in enumerate(groups):
        for j, tau0 in enumerate(taus):
            ax = axes[i][j]
            for policy, gp in g[g["event_round"] == tau0].groupby("event_policy"):
                mean = _mean_curve(list(gp["run_dir"]), metric)
                ax.plot(mean.index, mean.to_numpy(), label=policy)
            ax.axvline(tau0, linestyle="--", color="grey", linewidth=1)
            ax.set_title(f"{dataset} {setting} {title}, τ0 = {tau0}".strip(), fontsize=9)
            ax.set_xlabel("round")
        axes[i][0].set_ylabel(metric.replace("_", " "))
    axes[0][-1].legend(fontsize=8)
    _save(fig, out)


def _scheme_figure(runs: pd.DataFrame, out: Path) -> None:
    for (dataset, setting), g in runs.groupby(["dataset", "setting"]):
        runs.loc[g.index, "setting"] = f"{dataset} {setting}"
    scheme_curves(runs, out)


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
    "objective_inconsistency": ("objective_inconsistency", _objective_inconsistency),
    "communication_nonzeros": ("communication_cost", _communication_nonzeros),
}


def build_figure(name: str, run_dirs: list[Path], out: Path) -> None:
    """Draw one named figure from run directories (the Snakemake `figure` rule calls this)."""
    from hetfl.reports.tables import load_event_runs

    if name not in FIGURES:
        raise ValueError(f"figure '{name}' is unknown; allowed: {', '.join(FIGURES)}")
    FIGURES[name][1](load_event_runs(run_dirs), out)
