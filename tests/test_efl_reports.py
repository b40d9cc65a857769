"""EFL's fairness table, the λ table behind Figure 2, Figures 1-2, and their place in the workflow."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from hetfl.reports.efl_lambda import best_lambda, lambda_table, layout, with_values
from hetfl.reports.fairness import fairness
from hetfl.reports.tables import BUILDERS, SOURCES, load_runs

ROOT = Path(__file__).resolve().parents[1]
T2 = 4.302652729911275  # Student t, 97.5 % quantile, 2 degrees of freedom
T1 = 12.706204736174698  # ... 1 degree of freedom


def make_run(root: Path, name: str, spec: dict, metrics: dict[str, list[float]], status: str = "ok") -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    base = {"dataset": "mnist5k", "setting": "NIID", "num_traces": 1, "scheme": "C",
            "partition": {"label_skew": "pathological", "m": 2}}
    (run_dir / "run.json").write_text(json.dumps({"spec": {**base, **spec}, "status": status}))
    rows = [(r, m, v) for m, vs in metrics.items() for r, v in enumerate(vs, start=1)]
    pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(run_dir / "metrics.parquet")
    return run_dir


def test_fairness_takes_the_final_round_with_ci_and_paired_difference(tmp_path):
    dirs = []
    for alg, jains in (("fedavg", (0.8, 0.9, 0.85)), ("efl", (0.9, 0.95, 0.9))):
        for seed, j in enumerate(jains):
            dirs.append(make_run(tmp_path, f"{alg}_s{seed}", {"algorithm": alg, "seed": seed}, {
                "client_loss_jain": [0.1, 0.2, j],  # only the final round counts
                "client_loss_variance": [1.0, 1.0, 0.01 * (seed + 1)],
                "client_loss_entropy": [2.0, 2.0, 2.5]}))
    dirs.append(make_run(tmp_path, "efl_s3", {"algorithm": "efl", "seed": 3},
                         {"client_loss_jain": [0.5, math.nan], "client_loss_variance": [0.1, math.nan],
                          "client_loss_entropy": [1.0, math.nan]}, status="diverged"))
    t = fairness(load_runs(dirs)).set_index("method")
    fedavg, efl = t.loc["FedAvg"], t.loc["EFL"]
    # Jain: FedAvg (.8, .9, .85): .85 ± 4.3027·.05/√3
    assert fedavg["Jain_mean"] == pytest.approx(0.85)
    assert fedavg["Jain_ci_high"] == pytest.approx(0.85 + T2 * 0.05 / math.sqrt(3))
    assert fedavg["variance_mean"] == pytest.approx(0.02) and fedavg["entropy_mean"] == pytest.approx(2.5)
    # EFL: the diverged seed 3 has no final value; pairs (.1, .05, .05) with FedAvg's seeds
    assert efl["n_seeds"] == 4 and efl["n_diverged"] == 1 and efl["Jain_mean"] == pytest.approx(2.75 / 3)
    assert efl["Jain_diff_mean"] == pytest.approx(0.2 / 3)
    assert math.isnan(fedavg["Jain_diff_mean"]) and set(t["verdict"]) == {"not comparable"}
    # FedAvg's variance (.01, .02, .03): .02 − 4.3027·.01/√3 = −.0048, cut at 0, a variance's least (an
    # audit found such negative ends printed); Jain's .85 + .124 is below 1 and stays
    assert fedavg["variance_ci_low"] == 0.0
    assert fedavg["variance_ci_high"] == pytest.approx(0.02 + T2 * 0.01 / math.sqrt(3))


def test_best_lambda_and_the_paired_differences_to_lambda_zero(tmp_path):
    dirs = []
    # BMTA per seed (%): λ = 0 (80, 82, 78); λ = 0.1 (85, 86, 84); λ = 1 (70, 99, 75) → best λ = 0.1
    values = {0.0: (80, 82, 78), 0.1: (85, 86, 84), 1.0: (70, 99, 75)}
    losses = {0.0: (0.6, 0.5, 0.7), 0.1: (0.5, 0.5, 0.5), 1.0: (0.9, 0.2, 1.0)}
    for lam, bmtas in values.items():
        for seed, b in enumerate(bmtas):
            dirs.append(make_run(tmp_path, f"lam{lam}_s{seed}", {
                "algorithm": "efl", "seed": seed, "algorithm_params": {"lam": lam, "q": 0.1}},
                {"mean_client_accuracy": [b / 200, b / 100], "train_loss": [2.0, losses[lam][seed]]}))
    runs = load_runs(dirs)
    assert best_lambda(with_values(runs)) == 0.1
    t = lambda_table(runs).set_index("lam")
    best = t.loc[0.1]
    assert best["is_best"] and not t.loc[1.0, "is_best"]
    # Δ BMTA (5, 4, 6): 5 ± 4.3027/√3·1 = [2.516, 7.484] > 0: the paper's direction
    assert best["bmta_diff_mean"] == pytest.approx(5.0)
    assert best["bmta_diff_ci_low"] == pytest.approx(5 - T2 / math.sqrt(3))
    assert best["bmta_verdict"] == "same direction"
    # Δ loss (−.1, 0, −.2): −.1 ± 4.3027·.1/√3 contains 0
    assert best["loss_diff_mean"] == pytest.approx(-0.1) and best["loss_verdict"] == "inconclusive"
    assert t.loc[1.0, "bmta_verdict"] == "not comparable" and t.loc[0.0, "bmta_verdict"] == "—"
    # a tie goes to the smaller λ
    tie = with_values(runs)
    tie.loc[tie["lam"] == 1.0, "bmta"] = 85.0
    assert best_lambda(tie) == 0.1


def test_figures_draw_whatever_grid_they_are_given(tmp_path):
    from hetfl.reports.figures import FIGURES, build_figure

    assert FIGURES["efl_figure1"][0] == "bmta" and FIGURES["efl_figure2"][0] == "efl_lambda"
    curves = {"mean_client_accuracy": [0.3, 0.5, 0.6], "train_loss": [2.0, 1.0, 0.8]}
    def spec(alg, setting, s):
        skew = "iid" if setting == "IID" else "pathological"
        return {"algorithm": alg, "seed": s, "setting": setting, "partition": {"label_skew": skew, "m": 2}}

    dirs = [make_run(tmp_path / "f1", f"{alg}_{setting}_s{s}", spec(alg, setting, s), curves)
            for alg in ("fedavg", "apfl", "fedgate") for setting in ("IID", "NIID") for s in (0, 1)]
    build_figure("efl_figure1", dirs, tmp_path / "out" / "fig1")
    assert (tmp_path / "out" / "fig1.png").stat().st_size > 1000 and (tmp_path / "out" / "fig1.svg").is_file()
    # only λ = 0 (no λ > 0 to call best): one line per panel, no crash
    efl0 = {"algorithm": "efl", "algorithm_params": {"lam": 0.0}}
    lam0 = [make_run(tmp_path / "f2", f"lam0_s{s}", {**efl0, "seed": s}, curves) for s in (0, 1)]
    build_figure("efl_figure2", lam0, tmp_path / "out" / "fig2")
    assert (tmp_path / "out" / "fig2.png").stat().st_size > 1000


@pytest.mark.filterwarnings("ignore:No artists with labels")  # _band is replaced: no line, no legend entry
def test_figure1_draws_full_participation_and_figure3_the_low_rate(tmp_path, monkeypatch):
    """The bmta table's runs may hold |T| = 1 and |T| = 8 (ma2022_efl_text.yaml): Figure 1 mixed both
    into one band per method. It now draws |T| = 1 only, and Figure 3 (low participation rate) draws the
    methods run at |T| > 1, a column per |T|; the workflow draws Figure 3 only where such runs exist."""
    from types import SimpleNamespace

    from hetfl.reports import efl_figures
    from hetfl.reports.figures import DRAWN_WHEN, FIGURES

    curves = {"mean_client_accuracy": [0.3, 0.5, 0.6]}
    dirs = [make_run(tmp_path / "r", f"{alg}_T{k}_s{s}", {"algorithm": alg, "num_traces": k, "seed": s,
                                                          "scheme": "A" if alg == "fedavg" else "C"}, curves)
            for alg, ks in (("fedavg", (1, 8)), ("efl", (1, 8)), ("apfl", (1,))) for k in ks for s in (0, 1)]
    runs = load_runs(dirs)
    drawn = []
    monkeypatch.setattr(efl_figures, "_band", lambda ax, run_dirs, metric, label, scale=1.0:
                        drawn.append((label, sorted(Path(d).name for d in run_dirs))))
    efl_figures.figure1(runs, tmp_path / "fig1")
    assert {label: names for label, names in drawn} == {
        "FedAvg": ["fedavg_T1_s0", "fedavg_T1_s1"], "EFL": ["efl_T1_s0", "efl_T1_s1"],
        "APFL": ["apfl_T1_s0", "apfl_T1_s1"]}
    drawn.clear()
    efl_figures.figure3(runs, tmp_path / "fig3")
    assert drawn == [("FedAvg (Scheme A)", ["fedavg_T1_s0", "fedavg_T1_s1"]),
                     ("EFL (Scheme C)", ["efl_T1_s0", "efl_T1_s1"]),
                     ("FedAvg (Scheme A)", ["fedavg_T8_s0", "fedavg_T8_s1"]),
                     ("EFL (Scheme C)", ["efl_T8_s0", "efl_T8_s1"])]
    assert FIGURES["efl_figure3"][0] == "bmta"
    assert not DRAWN_WHEN["efl_figure3"]([SimpleNamespace(num_traces=1)])
    assert DRAWN_WHEN["efl_figure3"]([SimpleNamespace(num_traces=1), SimpleNamespace(num_traces=8)])


def test_quick_config_runs_every_table_2_method_and_builds_the_efl_outputs(tmp_path):
    """Acceptance of issue 13 at the planning level: every Table 2 method on mnist5k with ≥ 3 seeds, the
    fairness table built from the bmta runs, Figures 1-2 drawn (a Snakemake dry run of quick.yaml)."""
    from hetfl.config import expand_runs, load_config
    from hetfl.reports.references import load_reference

    runs = [r for r in expand_runs(load_config(ROOT / "workflow/config/quick.yaml")) if r.table == "bmta"]
    paper = load_reference("ma2022_efl_table2_bmta")
    from hetfl.algorithms import method_label

    niid = {(method_label(r.algorithm), r.seed) for r in runs
            if r.dataset == "mnist5k" and r.setting == "NIID"}
    for method in set(paper["method"]):
        assert {s for m, s in niid if m == method} >= {0, 1, 2}, method
    assert SOURCES == {"fairness": "bmta"} and set(SOURCES) <= set(BUILDERS)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--configfile", str(ROOT / "workflow/config/quick.yaml"), "-n",
                           "--cores", "2"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for target in ("reports/tables/bmta.csv", "reports/tables/fairness.csv", "reports/tables/efl_lambda.csv",
                   "reports/figures/efl_figure1.png", "reports/figures/efl_figure2.png",
                   "reports/figures/efl_figure3.png"):
        assert target in proc.stdout, target


@pytest.mark.slow
def test_efl_outputs_end_to_end(tmp_path):
    """A tiny version of quick.yaml's EFL block through Snakemake: bmta, fairness (from bmta's runs),
    efl_lambda and both figures (asked for by name: the MLflow mirrors are not needed here)."""
    base = {"table": "bmta", "dataset": "synthetic", "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}},
            "num_devices": 6, "sizes": {"distribution": "equal", "size": 30}, "schemes": ["C"],
            "num_traces": [1], "local_epochs": 1, "rounds": 3, "seeds": [0]}
    config = {"experiments": {
        "t2": {**base, "algorithms": ["fedavg", "apfl"]},
        **{name: {**base, "table": "efl_lambda", "algorithm": "efl",
                  "algorithm_params": {"efl": {"lam": lam}}} for name, lam in (("lam0", 0.0), ("lam1", 0.1))},
    }}
    cfg = tmp_path / "efl.yaml"
    cfg.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    targets = [f"reports/tables/{t}.csv" for t in ("bmta", "fairness", "efl_lambda")]
    targets += [f"reports/figures/efl_figure{i}.png" for i in (1, 2)]
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path / "wd"), "--configfile", str(cfg), "--cores", "2", *targets],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "wd" / "reports"
    bmta = pd.read_csv(out / "tables/bmta.csv")
    assert set(bmta["method"]) == {"FedAvg", "APFL"}
    assert (bmta["n_seeds"] == 1).all() and set(bmta["verdict"]) == {"not comparable"}  # SYNTHETIC: no paper
    fair = pd.read_csv(out / "tables/fairness.csv")
    assert set(fair["method"]) == set(bmta["method"]) and fair["Jain_mean"].between(0, 1).all()
    lam = pd.read_csv(out / "tables/efl_lambda.csv")
    assert sorted(lam["lam"]) == [0.0, 0.1] and lam["is_best"].sum() == 1
    for fig in ("efl_figure1", "efl_figure2"):
        assert (out / f"figures/{fig}.png").stat().st_size > 1000


def test_captions_count_what_the_fidelity_summary_counts():
    """efl_lambda's caption left out its 'not comparable' cells and fairness's counted none, while the
    report's fidelity summary counts them (an audit: 48 there against 31 in the captions)."""
    import pandas as pd

    from hetfl.reports import catalog, efl_lambda, fairness
    from hetfl.reports.verdicts import counts_text

    lam = pd.DataFrame({"bmta_verdict": ["—", "not comparable", "same direction"],
                        "loss_verdict": ["—", "not comparable", "inconclusive"]})
    counted = counts_text(catalog.counted_verdicts("efl_lambda", lam))
    assert f"Verdicts: {counted}." in efl_lambda.caption(lam, "")
    fair = pd.DataFrame({"verdict": ["not comparable"] * 3})
    assert f"Verdicts: {counts_text(catalog.counted_verdicts('fairness', fair))}." in \
        fairness.caption("", list(fair["verdict"]))


def test_a_figures_caption_names_the_lines_that_hide_each_other(tmp_path):
    """APFL equals FedAvg seed by seed on IID data: Figure 1 draws one line where its legend names two. The
    bmta table's caption said so, the figure's did not (an open item of the report audit)."""
    from hetfl.reports.report_pages import figure_caption

    same = {"mean_client_accuracy": [0.3, 0.5, 0.6]}
    other = {"mean_client_accuracy": [0.2, 0.4, 0.7]}
    dirs = [make_run(tmp_path, f"{alg}_s{s}", {"algorithm": alg, "seed": s}, curves)
            for alg, curves in (("fedavg", same), ("apfl", same), ("efl", other)) for s in (0, 1)]
    runs = load_runs(dirs)
    caption = figure_caption("efl_figure1", runs, "bmta")
    assert "Identical in every seed, so one line hides the other: APFL = FedAvg (MNIST NIID)." in caption
    assert "Identical" not in figure_caption("efl_figure1", runs[runs["algorithm"] != "apfl"], "bmta")


def test_an_efl_figures_caption_counts_the_runs_it_draws(tmp_path):
    """A researcher's FedAdam beside FedAvg on the bmta table: Figure 1 draws FedAvg's 2 runs, and its
    caption said "4 runs", counting FedAdam's 2 it does not draw (a walkthrough). Each EFL figure's caption
    now counts the runs drawn and says whose runs are left out and why; where none are, it is as before."""
    import html

    from hetfl.reports import report_pages

    def figure_caption(*args):
        return html.unescape(report_pages.figure_caption(*args))

    curves = {"mean_client_accuracy": [0.3, 0.5, 0.6], "train_loss": [1.0, 0.8, 0.7]}

    def runs_of(spec_list):
        return load_runs([make_run(tmp_path, f"r{len(list(tmp_path.iterdir()))}", spec, curves)
                          for spec in spec_list])

    grid = runs_of([{"algorithm": a, "seed": s, "experiment": "g"} for a in ("fedavg", "fedadam")
                    for s in (0, 1)])
    caption = figure_caption("efl_figure1", grid, "bmta")
    assert "(2 of its 4 runs, 2 seed(s); data: mnist5k)." in caption
    assert ("fedadam's 2 runs are not drawn: Figure 1 draws the paper's methods (FedAvg, FedProx, SCAFFOLD, "
            "APFL, EFL).") in caption
    paper = grid[grid["algorithm"] == "fedavg"]
    assert "(2 runs, 2 seed(s); data: mnist5k)." in figure_caption("efl_figure1", paper, "bmta")
    assert "not drawn" not in figure_caption("efl_figure1", paper, "bmta")

    # Figure 1 leaves Figure 3's |T| = 8 runs out, Figure 3 the methods and settings not run at |T| > 1
    low = runs_of([{"algorithm": a, "seed": 0, "num_traces": k} for a, k in
                   (("fedavg", 1), ("fedavg", 8), ("apfl", 1))]
                  + [{"algorithm": "fedavg", "seed": 0, "setting": "IID",
                      "partition": {"label_skew": "iid"}}])
    caption = figure_caption("efl_figure1", low, "bmta")
    assert "(3 of its 4 runs, 1 seed(s)" in caption
    assert "FedAvg's 1 run at |T| > 1 is not drawn: Figure 1 draws full participation (|T| = 1)" in caption
    caption = figure_caption("efl_figure3", low, "bmta")
    assert "(2 of its 4 runs, 1 seed(s)" in caption
    assert "APFL's 1 run is not drawn: Figure 3 draws the methods run at |T| > 1 (FedAvg)." in caption
    assert ("FedAvg's 1 run on MNIST IID is not drawn: Figure 3 draws the data sets and settings run at "
            "|T| > 1.") in caption

    # Figure 2 draws λ = 0 and the best λ only
    lam = runs_of([{"algorithm": "efl", "seed": 0, "algorithm_params": {"lam": v}} for v in (0.0, 0.1, 1.0)]
                  + [{"algorithm": "fedavg", "seed": 0}])
    caption = figure_caption("efl_figure2", lam, "efl_lambda")
    assert "(2 of its 4 runs, 1 seed(s)" in caption
    assert "FedAvg's 1 run is not drawn: Figure 2 draws EFL only." in caption
    assert "EFL's 1 run at λ = 1 is not drawn: Figure 2 draws λ = 0 and the best λ" in caption


def _lambda_runs(tmp_path, losses):
    """EFL runs at λ = 0 and 0.1, three seeds each (BMTA 80, 82, 78 and 85, 86, 84), with these final
    training losses by λ; a run whose loss is infinite diverged."""
    dirs = []
    for lam, bmtas in {0.0: (80, 82, 78), 0.1: (85, 86, 84)}.items():
        for seed, b in enumerate(bmtas):
            loss = losses[lam][seed]
            dirs.append(make_run(tmp_path, f"lam{lam}_s{seed}", {
                "algorithm": "efl", "seed": seed, "algorithm_params": {"lam": lam, "q": 0.1}},
                {"mean_client_accuracy": [b / 200, b / 100], "train_loss": [2.0, loss]},
                status="ok" if math.isfinite(loss) else "diverged"))
    return dirs


def test_a_pair_where_both_runs_diverged_is_excluded_from_the_loss_delta_and_counted(tmp_path):
    """Seed 2 diverges at λ = 0.1 and at λ = 0 alike: its loss Δ is ∞ − ∞, no value. It went into the
    interval as NaN, which made the whole Δ cell "—" though two pairs exist. Now it is left out and counted
    (as the communication-cost table's Δ): Δ loss over seeds 0 and 1 is (−0.1, 0.0), mean −0.05; the cell
    says "(1 excl.)". Seeds at +∞ and −∞ in one Δ print why the mean is missing, not "—"."""
    tidy = lambda_table(load_runs(_lambda_runs(tmp_path, {0.0: (0.6, 0.5, math.inf),
                                                          0.1: (0.5, 0.5, math.inf)})))
    best = tidy.set_index("lam").loc[0.1]
    assert best["loss_diff_mean"] == pytest.approx(-0.05)
    assert best["loss_n_pairs"] == 2 and best["loss_n_excluded"] == 1
    assert best["loss_diff_ci_low"] == pytest.approx(-0.05 - T1 * 0.05)
    cell = layout(tidy).set_index("λ").loc["0.1 (best)", "Δ loss vs λ = 0"]
    assert cell == f"-0.050 [{-0.05 - T1 * 0.05:.3f}, {-0.05 + T1 * 0.05:.3f}] (1 excl.)"
    both = tidy.copy()  # a Δ over seeds at +∞ and −∞: t_interval's (NaN, −∞, ∞)
    both.loc[both["lam"] == 0.1, ["loss_diff_mean", "loss_diff_ci_low", "loss_diff_ci_high"]] = \
        [math.nan, -math.inf, math.inf]
    cell = layout(both).set_index("λ").loc["0.1 (best)", "Δ loss vs λ = 0"]
    assert cell == "no mean (seeds at ∞ and −∞) [−∞, ∞] (1 excl.)"


def test_a_seed_whose_loss_is_infinite_leaves_the_loss_cell_unbounded(tmp_path):
    """A run that diverges through an infinite loss records it (engine.runner: the round's row is kept), so
    the λ table's final train_loss is inf for that seed. Its loss CI read [0.5, ∞]: the low end of seeds 0
    and 1 only (both 0.5), and its paired Δ low end −0.685 = −0.05 − T1·0.05 of two of the three pairs."""
    dirs = _lambda_runs(tmp_path, {0.0: (0.6, 0.5, 0.7), 0.1: (0.5, 0.5, math.inf)})
    best = lambda_table(load_runs(dirs)).set_index("lam").loc[0.1]
    assert best["loss_mean"] == math.inf and best["loss_diff_mean"] == math.inf
    assert (best["loss_ci_low"], best["loss_ci_high"]) == (-math.inf, math.inf)
    assert (best["loss_diff_ci_low"], best["loss_diff_ci_high"]) == (-math.inf, math.inf)
    assert best["loss_n_pairs"] == 3 and best["loss_verdict"] == "inconclusive"
    # the finite column is untouched: Δ BMTA (5, 4, 6) as in the test above
    assert best["bmta_diff_ci_low"] == pytest.approx(5 - T2 / math.sqrt(3))
