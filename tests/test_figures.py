"""Figures are drawn from run directories and written as PNG and SVG."""

import pandas as pd
from conftest import curve_run  # tests/conftest.py (pytest puts tests/ on the path)

from hetfl.reports.figures import event_curves, scheme_curves


def test_scheme_curves(tmp_path):
    rows = [{"setting": s, "num_traces": k, "scheme": sch, "run_dir": curve_run(tmp_path, f"{s}{k}{sch}",
             "test_accuracy", [0.1, 0.5, 0.7])} for s in ("IID", "NIID") for k in (1, 8) for sch in "ABC"]
    scheme_curves(pd.DataFrame(rows), tmp_path / "fig" / "fig3")
    for suffix in (".png", ".svg"):
        out = tmp_path / "fig" / f"fig3{suffix}"
        assert out.stat().st_size > 1000
    assert (tmp_path / "fig" / "fig3.png").read_bytes()[:4] == b"\x89PNG"


def test_event_curves(tmp_path):
    rows = [{"event_round": t, "event_policy": pol, "run_dir": curve_run(tmp_path, f"{t}{pol}", "test_loss",
             [1.0, 0.8, 0.9, 0.6])} for t in (2, 3) for pol in ("include", "exclude")]
    event_curves(pd.DataFrame(rows), tmp_path / "dep", "test_loss", "departure")
    assert (tmp_path / "dep.png").exists() and (tmp_path / "dep.svg").exists()


# -- issue 11 items 7, 8, 13 ------------------------------------------------------------------------------
def _capture(monkeypatch):
    """Keep the figure a drawing function hands to _save (instead of writing it)."""
    import hetfl.reports.figures as figures

    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn.append(fig))
    return drawn


def _visible(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def test_event_curves_draw_each_tau0s_runs_in_its_own_panel(tmp_path, monkeypatch):
    """A panel per τ0, titled with it, holding that τ0's include and exclude curves only and a dashed line
    at τ0 (the file-exists test above let every panel plot every run)."""
    from hetfl.reports.figures import draw_event_curves

    curves = {(2, "include"): [1.0, 0.8, 0.9, 0.6], (2, "exclude"): [1.0, 0.7, 0.5, 0.4],
              (3, "include"): [3.0, 2.8, 2.9, 2.6], (3, "exclude"): [3.0, 2.7, 2.5, 2.4]}
    rows = [{"event_round": t, "event_policy": pol,
             "run_dir": curve_run(tmp_path, f"{t}{pol}", "test_loss", v)} for (t, pol), v in curves.items()]
    fig = draw_event_curves(pd.DataFrame(rows), "test_loss", "departure")
    panels = _visible(fig)
    assert [ax.get_title() for ax in panels] == ["departure, τ0 = 2", "departure, τ0 = 3"]
    for ax, tau0 in zip(panels, (2, 3), strict=True):
        solid = sorted(tuple(float(v) for v in line.get_ydata()) for line in ax.get_lines()
                       if line.get_linestyle() == "-")
        assert solid == sorted(tuple(v) for (t, _), v in curves.items() if t == tau0)
        dashed = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert dashed == [tau0]


def test_scheme_curves_shared_y_axis_shows_every_panels_curves(tmp_path):
    """The panels share their y axis; it was fixed from the first panel's range, so the NIID curves (above
    IID's) were out of sight in make reproduce's Figure 3 (an audit)."""
    from hetfl.reports.figures import draw_scheme_curves

    rows = [{"setting": s, "num_traces": 2, "scheme": sch, "seed": 0,
             "run_dir": curve_run(tmp_path, f"{s}{sch}", "test_accuracy",
                                  [0.4, 0.5, 0.6] if s == "IID" else [0.7, 0.8, 0.85])}
            for s in ("IID", "NIID") for sch in "AB"]
    for ax in _visible(draw_scheme_curves(pd.DataFrame(rows))):
        low, high = ax.get_ylim()
        assert low <= 0.4 and high >= 0.85, (ax.get_title(), low, high)


def test_scheme_curves_draw_a_grid_without_the_papers_trace_counts(tmp_path, monkeypatch):
    """num_traces [2] crashed the figure (and the workflow with it): every grid draws."""
    from hetfl.reports.figures import drawing

    rows = [{"dataset": "SYNTHETIC", "setting": "NIID", "num_traces": 2, "scheme": sch,
             "run_dir": curve_run(tmp_path, f"T2{sch}", "test_accuracy", [0.1, 0.5, 0.7])} for sch in "ABC"]
    drawn = _capture(monkeypatch)
    drawing("scheme_curves")(pd.DataFrame(rows), tmp_path / "fig3")
    (fig,) = drawn
    (ax,) = _visible(fig)
    assert ax.get_title() == "SYNTHETIC NIID, |T| = 2" and len(ax.get_lines()) == 3
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Scheme A", "Scheme B", "Scheme C"]


def test_trace_panels_are_the_papers_when_present_else_the_grids():
    from hetfl.reports.figures import trace_panels

    assert trace_panels(set(range(1, 9))) == [1, 3, 5, 8]  # the paper's Figure 3 when the grid has them
    assert trace_panels({2, 8}) == [2, 8] and trace_panels(set()) == []
    assert trace_panels(set(range(1, 9)), num_traces=(2, 4, 9)) == [2, 4]


def test_arrival_curves_with_datasets_of_different_tau0_draw_every_panel_with_a_legend(tmp_path, monkeypatch):
    from hetfl.reports.figures import drawing

    rows = [{"dataset": d, "setting": "NIID", "event_round": t, "event_policy": pol,
             "run_dir": curve_run(tmp_path, f"{d}{t}{pol}", "test_accuracy", [0.2, 0.4, 0.3, 0.5, 0.6, 0.7])}
            for d, taus in (("MNIST", (2, 3)), ("SYNTHETIC", (5,))) for t in taus
            for pol in ("fast_reboot", "vanilla")]
    drawn = _capture(monkeypatch)
    drawing("arrival_curves")(pd.DataFrame(rows), tmp_path / "arr")
    (fig,) = drawn
    panels = _visible(fig)
    assert sorted(ax.get_title() for ax in panels) == [
        "MNIST NIID arrival, τ0 = 2", "MNIST NIID arrival, τ0 = 3", "SYNTHETIC NIID arrival, τ0 = 5"]
    for ax in panels:
        assert len(ax.get_lines()) == 3  # two policies and the τ0 marker
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["fast_reboot", "vanilla"]


def test_figures_are_byte_identical_on_every_render(tmp_path):
    rows = [{"setting": "NIID", "num_traces": k, "scheme": sch, "run_dir": curve_run(tmp_path, f"{k}{sch}",
             "test_accuracy", [0.1, 0.5, 0.7])} for k in (1, 8) for sch in "ABC"]
    scheme_curves(pd.DataFrame(rows), tmp_path / "a" / "fig")
    scheme_curves(pd.DataFrame(rows), tmp_path / "b" / "fig")
    for suffix in (".png", ".svg"):
        first, second = ((tmp_path / d / f"fig{suffix}").read_bytes() for d in "ab")
        assert first == second, suffix
    svg = (tmp_path / "a" / "fig.svg").read_text()
    assert "<dc:date>" not in svg


def test_the_figure_registry_imports_no_plotting_library():
    """The Snakefile imports FIGURES at every Snakemake start (the run's and the report's): matplotlib and
    seaborn, with the scipy.stats seaborn brings, were 1.5-2.5 s of each, so they load on first draw."""
    import subprocess
    import sys

    code = ("import sys\nfrom hetfl.reports.figures import FIGURES\n"
            "print(sorted(m for m in ('matplotlib', 'seaborn', 'scipy.stats') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
