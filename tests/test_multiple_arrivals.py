"""Ruan et al. Figure 5 (staggered arrivals) in numbers and drawn, and the figures' 95 % bands over seeds and
the |T| = 1 note, on hand-made curves whose numbers are worked out in the comments."""

import math

import numpy as np
import pandas as pd
import pytest
from conftest import curve_run  # tests/conftest.py (pytest puts tests/ on the path)

from hetfl.reports import figures
from hetfl.reports.multiple_arrivals import event_rounds, multiple_arrivals, recovery_per_arrival

# arrivals at rounds 3 and 6 (τ0 = 3, stagger 3, devices 7 and 8); rounds 1..8
CURVES = {(0, "fast_reboot"): [0.5, 0.6, 0.55, 0.62, 0.63, 0.6, 0.66, 0.7],  # back at round 4, 7: r = 1, 1
          (0, "vanilla"): [0.5, 0.6, 0.5, 0.55, 0.61, 0.55, 0.58, 0.64],      # round 5, 8: r = 2, 2
          (1, "fast_reboot"): [0.5, 0.6, 0.55, 0.62, 0.63, 0.6, 0.66, 0.7],  # r = 1, 1
          (1, "vanilla"): [0.5, 0.6, 0.5, 0.52, 0.6, 0.55, 0.62, 0.7]}       # round 5 (0.6 ≥ 0.6), 7: 2, 1


def _runs(tmp_path):
    return pd.DataFrame([{"dataset": "MNIST", "setting": "NIID", "event_round": 3, "event_policy": pol,
                          "seed": seed, "event.stagger": 3, "event.devices": [7, 8],
                          "run_dir": curve_run(tmp_path, f"s{seed}{pol}", "test_accuracy", acc)}
                         for (seed, pol), acc in CURVES.items()])


def test_event_rounds_are_staggered():
    g = pd.DataFrame({"event.stagger": [50], "event.devices": [[7, 8, 9]]})
    assert event_rounds(g, 100) == [100, 150, 200]  # Ruan et al. §5.3: three devices 50 rounds apart
    assert event_rounds(pd.DataFrame({"event.stagger": [0], "event.devices": [[7, 8]]}), 5) == [5]


def test_recovery_is_counted_up_to_the_next_arrival_and_censored_there():
    acc = pd.Series([0.5, 0.6, 0.5, 0.5, 0.5, 0.5, 0.7, 0.7], index=range(1, 9))
    # arrival 1 (τ = 3, level 0.6): not back by round 5 (the next arrival is at 6): 3 epochs observed
    # (rounds 3, 4, 5), > 3, [4, ∞); recovering at round 7 does not count for it. Arrival 2 (τ = 6, level
    # acc[5] = 0.5): back in round 6, its first epoch; rounds 6, 7, 8 observed.
    assert recovery_per_arrival(acc, [3, 6]) == [(4.0, math.inf, 3), (1.0, 1.0, 3)]


def test_multiple_arrivals_cells(tmp_path):
    tidy = multiple_arrivals(_runs(tmp_path)).set_index(["arrival", "method"])
    assert tidy.loc[(1, "fast_reboot"), "reproduced_mean"] == pytest.approx(2.0)  # epochs, from 1
    assert tidy.loc[(1, "vanilla"), "reproduced_mean"] == pytest.approx(3.0)
    # arrival 1: vanilla − fast = 1 and 1 → mean 1, CI [1, 1]
    d1 = tidy.loc[(1, "vanilla_minus_fast")]
    assert (d1["reproduced_mean"], d1["ci_low"], d1["ci_high"]) == pytest.approx((1.0, 1.0, 1.0))
    # arrival 2: 2 − 1 = 1 and 1 − 1 = 0 → mean 0.5, s = 0.7071, t(0.975, 1) = 12.706:
    # 0.5 ± 12.706 · 0.7071 / √2 = 0.5 ± 6.353
    d2 = tidy.loc[(2, "vanilla_minus_fast")]
    assert d2["tau0"] == 6 and d2["n_seeds"] == 2
    assert (d2["ci_low"], d2["ci_high"]) == pytest.approx((-5.853, 6.853), abs=1e-3)
    assert set(tidy["verdict"]) == {"not comparable"}  # the paper gives curves, no number


def test_multiple_arrival_curves_mark_every_arrival(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn.append(fig))
    figures.drawing("multiple_arrival_curves")(_runs(tmp_path), tmp_path / "fig5")
    (fig,) = drawn
    (ax,) = [a for a in fig.axes if a.get_visible()]
    dashed = sorted(line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--")
    assert dashed == [3, 6]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["fast_reboot", "vanilla"]
    assert "2 seed(s)" in fig._suptitle.get_text()


def test_band_is_the_t_interval_over_seeds(tmp_path, monkeypatch):
    # Scheme A, seeds 0 and 1: round 2 values 0.5 and 0.7 → mean 0.6, s = 0.1414, half width
    # 12.706 · 0.1414 / √2 = 1.2706: the band at round 2 spans [−0.6706, 1.8706]
    assert figures.t_band(pd.Series([0.5, 0.7])) == pytest.approx((-0.6706, 1.8706), abs=1e-4)
    assert all(math.isnan(x) for x in figures.t_band(pd.Series([0.5])))  # one seed: no band
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn.append(fig))
    rows = [{"dataset": "SYN", "setting": "NIID", "num_traces": 3, "scheme": "A", "seed": s,
             "run_dir": curve_run(tmp_path, f"A{s}", "test_accuracy", [0.1, v, 0.8])}
            for s, v in ((0, 0.5), (1, 0.7))]
    figures.drawing("scheme_curves")(pd.DataFrame(rows), tmp_path / "fig3")
    (ax,) = [a for a in drawn[0].axes if a.get_visible()]
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices
    at2 = ys[np.isclose(ys[:, 0], 2.0), 1]
    assert sorted(at2) == pytest.approx([-0.6706, 1.8706], abs=1e-4)
    assert ax.get_ylim() == (0.0, 1.0)  # accuracy axis kept to its range


def test_one_trace_panel_says_the_schemes_coincide(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn.append(fig))
    rows = [{"dataset": "SYN", "setting": "NIID", "num_traces": k, "scheme": sch, "seed": 0,
             "run_dir": curve_run(tmp_path, f"{k}{sch}", "test_accuracy", [0.1, 0.5])}
            for k in (1, 3) for sch in "ABC"]
    figures.drawing("scheme_curves")(pd.DataFrame(rows), tmp_path / "fig3")
    titles = [a.get_title() for a in drawn[0].axes if a.get_visible()]
    assert titles == [f"SYN NIID, |T| = 1\n{figures.ONE_TRACE_NOTE}", "SYN NIID, |T| = 3"]
    # a |T| = 1 grid whose one trace is not T_0 has incomplete devices: no note
    other = pd.DataFrame(rows[:3]).assign(trace_order=[["T_3"]] * 3)
    figures.drawing("scheme_curves")(other, tmp_path / "fig3b")
    assert [a.get_title() for a in drawn[1].axes if a.get_visible()] == ["SYN NIID, |T| = 1"]
