"""Figures are drawn from run directories and written as PNG and SVG."""

import pandas as pd

from hetfl.reports.figures import event_curves, scheme_curves


def _run(tmp_path, name, metric, values):
    d = tmp_path / name
    d.mkdir()
    pd.DataFrame({"round": range(1, len(values) + 1), "metric": metric, "value": values}).to_parquet(
        d / "metrics.parquet")
    return str(d)


def test_scheme_curves(tmp_path):
    rows = [{"setting": s, "num_traces": k, "scheme": sch, "run_dir": _run(tmp_path, f"{s}{k}{sch}",
             "test_accuracy", [0.1, 0.5, 0.7])} for s in ("IID", "NIID") for k in (1, 8) for sch in "ABC"]
    scheme_curves(pd.DataFrame(rows), tmp_path / "fig" / "fig3")
    for suffix in (".png", ".svg"):
        out = tmp_path / "fig" / f"fig3{suffix}"
        assert out.stat().st_size > 1000
    assert (tmp_path / "fig" / "fig3.png").read_bytes()[:4] == b"\x89PNG"


def test_event_curves(tmp_path):
    rows = [{"event_round": t, "event_policy": pol, "run_dir": _run(tmp_path, f"{t}{pol}", "test_loss",
             [1.0, 0.8, 0.9, 0.6])} for t in (2, 3) for pol in ("include", "exclude")]
    event_curves(pd.DataFrame(rows), tmp_path / "dep", "test_loss", "departure")
    assert (tmp_path / "dep.png").exists() and (tmp_path / "dep.svg").exists()
