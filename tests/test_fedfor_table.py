"""FedFOR Tables 2-4 (reports.fedfor): best accuracy up to half and all rounds, ACC_x, paired verdicts."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from hetfl.config import expand_runs, validate_config
from hetfl.reports import fedfor
from hetfl.reports.results import collect_runs


def test_rounds_to_reach_is_the_first_round_at_or_above_x():
    acc = pd.Series([0.30, 0.55, 0.62, 0.58, 0.71], index=[1, 2, 3, 4, 5])
    assert fedfor.rounds_to_reach(acc, 60) == 3
    assert fedfor.rounds_to_reach(acc, 55) == 2  # "reach" includes equality
    assert fedfor.rounds_to_reach(acc, 71) == 5
    assert fedfor.rounds_to_reach(acc, 72) is None  # never: censored, reported "> R"
    # evaluated every other round: the first evaluated round that is there
    assert fedfor.rounds_to_reach(pd.Series([0.5, 0.65], index=[2, 4]), 60) == 4


def test_best_up_to_half_and_full():
    acc = pd.Series([0.30, 0.55, 0.62, 0.58, 0.71, 0.69], index=[1, 2, 3, 4, 5, 6])
    assert fedfor.best_up_to(acc, 3) == pytest.approx(62.0)
    assert fedfor.best_up_to(acc, 6) == pytest.approx(71.0)
    assert math.isnan(fedfor.best_up_to(acc[acc.index > 3], 3))


def test_halfway_is_the_paper_s_when_the_rounds_are():
    t4 = fedfor.reference_cells("Table 4")
    assert fedfor.halfway(t4, 16, 25) == 15  # the paper's t = 15 of 25
    assert fedfor.halfway(t4, 1, 100) == 50
    assert fedfor.halfway(t4, 16, 10) == 5  # a reduced run: ⌊R/2⌋


def test_reference_cells_of_the_three_tables():
    t2 = fedfor.reference_cells("Table 2").set_index(["method", "local_epochs", "measure"])
    assert t2.loc[("FedFOR", 8, "best@full"), "paper"] == pytest.approx(70.93)
    assert t2.loc[("FedFOR", 8, "best@full"), "round"] == 100
    assert t2.loc[("FedAvg", 16, "best@half"), "round"] == 25
    assert t2.loc[("FedAvg", 4, "best@half"), "paper_std"] == pytest.approx(0.01)
    t3 = fedfor.reference_cells("Table 3").set_index(["method", "local_epochs", "measure"])
    assert t3.loc[("FedFOR", 16, "ACC_x"), "paper"] == 13 and t3.loc[("FedFOR", 16, "ACC_x"), "acc_x"] == 40
    t4 = fedfor.reference_cells("Table 4").set_index(["method", "local_epochs", "measure"])
    assert t4.loc[("FedBN", 1, "ACC_x"), "acc_x"] == 80 and t4.loc[("FedBN", 1, "best@full"), "round"] == 100


def _config(acc_x=None):
    exp = {"table": "fedfor_by_e", "dataset": "mnist5k",
           "settings": {"E8": {"partition": {"label_skew": "longtail", "client_fraction": 0.25,
                                             "draw": "independent"}, "local_epochs": 8, "rounds": 4}},
           "num_devices": 10, "clients_per_round": 2, "sizes": {"distribution": "equal"},
           "algorithms": ["fedavg", "fedfor"], "schemes": ["B"], "num_traces": [1], "seeds": [0, 1, 2]}
    if acc_x is not None:
        exp["acc_x"] = acc_x
    return {"experiments": {"ff": exp}}


def _fake_runs(tmp_path, curves, acc_x=None):
    """Run directories whose global_test_accuracy per round is curves[(algorithm, seed)]."""
    dirs = []
    for spec in expand_runs(validate_config(_config(acc_x))):
        d = tmp_path / spec.run
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        acc = curves[(spec.algorithm, spec.seed)]
        pd.DataFrame({"round": np.arange(1, len(acc) + 1), "metric": "global_test_accuracy",
                      "value": acc}).to_parquet(d / "metrics.parquet")
        dirs.append(d)
    return collect_runs(dirs).assign(dataset_name="mnist5k")


CURVES = {  # four rounds: half = rounds ≤ 2
    ("fedavg", 0): [0.40, 0.50, 0.55, 0.60], ("fedfor", 0): [0.45, 0.60, 0.62, 0.70],
    ("fedavg", 1): [0.42, 0.52, 0.57, 0.58], ("fedfor", 1): [0.50, 0.58, 0.66, 0.69],
    ("fedavg", 2): [0.41, 0.49, 0.56, 0.59], ("fedfor", 2): [0.44, 0.61, 0.60, 0.72],
}


def test_table2_cells_by_hand(tmp_path):
    tidy = fedfor.fedfor_by_e(_fake_runs(tmp_path, CURVES))
    assert set(tidy["paper_table"]) == {"Table 2"}  # a long-tail split reproduces Table 2
    cell = tidy.set_index(["method", "measure"])
    # FedFOR best@full per seed: 70, 69, 72 → mean 70.33, std 1.53; FedAvg: 60, 58, 59
    full = cell.loc[("FedFOR", "best@full")]
    assert full["reproduced_mean"] == pytest.approx(211 / 3)
    assert full["reproduced_std"] == pytest.approx(np.std([70, 69, 72], ddof=1))
    assert full["round"] == 4 and full["paper"] == pytest.approx(70.93)  # E = 8's full-round cell
    # paired differences 10, 11, 13: mean 11.33, t(2) interval 11.33 ± 4.303·1.528/√3
    half_width = 4.302652729911275 * np.std([10, 11, 13], ddof=1) / np.sqrt(3)
    assert full["diff_mean"] == pytest.approx(34 / 3)
    assert full["ci_low"] == pytest.approx(34 / 3 - half_width)
    assert full["ci_high"] == pytest.approx(34 / 3 + half_width)
    assert full["paper_diff"] == pytest.approx(70.93 - 62.28)
    # 8.65 lies in [7.54, 15.13], but mnist5k stands in for CIFAR-10: its Δ is judged for direction only
    assert full["verdict"] == "same direction"
    (tmp_path / "c").mkdir()
    on_cifar = fedfor.fedfor_by_e(_fake_runs(tmp_path / "c", CURVES).assign(dataset_name="cifar10"))
    assert on_cifar.set_index(["method", "measure"]).loc[("FedFOR", "best@full"), "verdict"] == "agrees"
    # best@half (rounds ≤ 2): FedFOR 60, 58, 61 vs FedAvg 50, 52, 49 → differences 10, 6, 12
    half = cell.loc[("FedFOR", "best@half")]
    assert half["round"] == 2 and half["diff_mean"] == pytest.approx(28 / 3)
    assert half["paper_diff"] == pytest.approx(60.24 - 53.21)
    assert cell.loc[("FedAvg", "best@full"), "verdict"] == "—"  # the baseline has no difference
    assert "ACC_x" not in set(tidy["measure"])  # Table 2 has no ACC_x unless a target is set


def test_acc_x_with_a_censored_seed(tmp_path):
    tidy = fedfor.fedfor_by_e(_fake_runs(tmp_path, CURVES, acc_x=60))
    acc = tidy[tidy["measure"] == "ACC_x"].set_index("method")
    # FedFOR reaches 60 % at rounds 2, 3 (0.66), 2; FedAvg at 4, never (> 4), never
    assert acc.loc["FedFOR", "reproduced_mean"] == pytest.approx(7 / 3)
    assert acc.loc["FedAvg", "n_censored"] == 2 and math.isnan(acc.loc["FedAvg", "reproduced_mean"])
    # differences bounded by [lo − hi_base, hi − lo_base]: seed 0 exactly −2, seed 1 in (−∞, 3 − 5],
    # seed 2 in (−∞, 2 − 5]: the interval is unbounded below and the mean unknown
    assert acc.loc["FedFOR", "ci_low"] == -math.inf
    assert math.isnan(acc.loc["FedFOR", "diff_mean"])
    assert acc.loc["FedFOR", "verdict"] == "not comparable"  # Table 2 gives no ACC_x to compare with
    assert acc.loc["FedFOR", "acc_x"] == 60
    # two of the three paired seeds are censored: the Δ cell says 2, not 1 (a flag stood for the count)
    assert acc.loc["FedFOR", "diff_n_censored"] == 2
    shown = fedfor.layout(tidy).set_index(["method", "measure"])
    delta = next(c for c in shown.columns if c.startswith("Δ vs"))
    assert shown.loc[("FedFOR", "ACC60 (rounds)"), delta].startswith("2 of 3 censored")


def test_the_delta_cell_counts_the_pairs_not_the_methods_seeds(tmp_path):
    """FedAvg's seed 2 is missing: FedFOR's ACC60 has 3 seeds but 2 pairs. Seed 0: exactly 2 − 4 = −2;
    seed 1: 3 − (> 4), in (−∞, −2]. The Δ cell read "1 of 3 censored": the method's n_seeds, not the pairs
    its interval is over. Low end −∞ (seed 1's lower bound), high end the point of (−2, −2)."""
    runs = _fake_runs(tmp_path, CURVES, acc_x=60)
    runs = runs[~((runs["algorithm"] == "fedavg") & (runs["seed"] == 2))]
    tidy = fedfor.fedfor_by_e(runs)
    acc = tidy[tidy["measure"] == "ACC_x"].set_index("method")
    assert acc.loc["FedFOR", "n_seeds"] == 3 and acc.loc["FedFOR", "n_pairs"] == 2
    assert acc.loc["FedFOR", "diff_n_censored"] == 1 and acc.loc["FedAvg", "n_pairs"] == 0
    assert (acc.loc["FedFOR", "ci_low"], acc.loc["FedFOR", "ci_high"]) == (-math.inf, -2.0)
    shown = fedfor.layout(tidy).set_index(["method", "measure"])
    delta = next(c for c in shown.columns if c.startswith("Δ vs"))
    assert shown.loc[("FedFOR", "ACC60 (rounds)"), delta] == "1 of 2 censored [−∞, -2.00]"
    # the readings table's cell says the same
    row = tidy[(tidy["method"] == "FedFOR") & (tidy["measure"] == "ACC_x")].iloc[0]
    assert "; Δ 1 of 2 censored [−∞, -2.00] · " in fedfor._reading_cell(row, fedfor._full_rounds(tidy))
    # an uncensored measure counts its pairs too: best@full differences 10 and 11 (seeds 0, 1)
    full = tidy[tidy["measure"] == "best@full"].set_index("method")
    assert full.loc["FedFOR", "n_pairs"] == 2 and full.loc["FedFOR", "diff_mean"] == pytest.approx(10.5)


def test_the_paper_shows_in_the_layout(tmp_path):
    runs = _fake_runs(tmp_path, CURVES)
    tidy = fedfor.fedfor_by_e(runs)
    out = fedfor.layout(tidy)
    row = out[(out["method"] == "FedFOR") & (out["measure"] == "best@t=4")].iloc[0]
    # the paper's value is at its own round, t = 100, which the 4-round stand-in row says (it read as t = 4)
    assert row["paper"] == "70.93 (0.94) @t=100" and row["reproduced"] == "70.33 ± 1.53"
    assert row["Δ vs FedAvg [95% CI]"].startswith("11.33 [")
    assert "stand-in" in fedfor.caption(tidy, runs)


def test_the_caption_gives_the_reason_of_each_not_comparable_cell(tmp_path):
    """Table 2 prints no ACC_x, so a target set on a Table 2 run gives 'not comparable' cells; the caption
    counted them without a reason (an audit)."""
    runs = _fake_runs(tmp_path, CURVES, acc_x=60)
    text = fedfor.caption(fedfor.fedfor_by_e(runs), runs)
    assert ("1 not comparable; not comparable: no paper value for ACC60 (the paper's Table 2 prints "
            "none).") in text
    (tmp_path / "none").mkdir()
    runs = _fake_runs(tmp_path / "none", CURVES)  # no target: no ACC_x cell, nothing to explain
    assert "not comparable:" not in fedfor.caption(fedfor.fedfor_by_e(runs), runs)


# ---- which accuracy "best validation accuracy" is (validation_accuracy, docs/fedfor.md) ------------------


def test_the_test_split_at_the_best_holdout_round_by_hand():
    """FedBN's fed_domainnet.py:343 keeps a round as its best when its mean validation accuracy is strictly
    better than the best so far, and prints the test accuracy of that round. Validation 0.3, 0.5, 0.5, 0.4,
    0.6 (rounds 1-5) and test 0.2, 0.45, 0.7, 0.9, 0.55: the best validation rounds so far are 1, 2, 2, 2,
    5 (round 3 ties round 2, and round 2 stays), so the reported test accuracy runs 0.2, 0.45, 0.45, 0.45,
    0.55 — never the test split's own best, 0.9."""
    val = pd.Series([0.3, 0.5, 0.5, 0.4, 0.6], index=[1, 2, 3, 4, 5])
    test = pd.Series([0.2, 0.45, 0.7, 0.9, 0.55], index=[1, 2, 3, 4, 5])
    assert fedfor.running_best(test, val).tolist() == [0.2, 0.45, 0.45, 0.45, 0.55]
    assert fedfor.best_up_to(test, 4, val) == pytest.approx(45.0)
    assert fedfor.best_up_to(test, 5, val) == pytest.approx(55.0)
    assert fedfor.best_up_to(test, 4) == pytest.approx(90.0)  # the test split's own best
    assert fedfor.rounds_to_reach(test, 50, val) == 5  # 0.55 at round 5; the test split alone: round 3
    assert fedfor.rounds_to_reach(test, 50) == 3
    assert fedfor.rounds_to_reach(test, 60, val) is None
    from hetfl.reports.fedfor import segment_best_mean

    # stretches [1, 3) and [3, ∞): round 2 (0.45), then round 5 (0.55)
    assert segment_best_mean(test, [3], val) == pytest.approx(100 * (0.45 + 0.55) / 2)
    assert segment_best_mean(test, [3]) == pytest.approx(100 * (0.45 + 0.9) / 2)


def _fake_runs_two_curves(tmp_path, how):
    """Runs of the _config grid recording a test-split curve and a holdout curve (mean_client_accuracy)."""
    cfg = _config()
    if how is not None:
        cfg["experiments"]["ff"]["validation_accuracy"] = how
    dirs = []
    for spec in expand_runs(validate_config(cfg)):
        d = tmp_path / spec.run
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        test, val = TWO[(spec.algorithm, spec.seed)]
        frames = [pd.DataFrame({"round": np.arange(1, 5), "metric": m, "value": v})
                  for m, v in (("global_test_accuracy", test), ("mean_client_accuracy", val))]
        pd.concat(frames).to_parquet(d / "metrics.parquet")
        dirs.append(d)
    return collect_runs(dirs).assign(dataset_name="mnist5k")


TWO = {  # (test split, holdout) per round 1-4
    ("fedavg", 0): ([0.40, 0.50, 0.55, 0.60], [0.30, 0.60, 0.50, 0.40]),
    ("fedfor", 0): ([0.45, 0.60, 0.62, 0.70], [0.40, 0.50, 0.70, 0.60]),
    ("fedavg", 1): ([0.42, 0.52, 0.57, 0.58], [0.35, 0.45, 0.55, 0.65]),
    ("fedfor", 1): ([0.50, 0.58, 0.66, 0.69], [0.60, 0.50, 0.40, 0.30]),
    ("fedavg", 2): ([0.41, 0.49, 0.56, 0.59], [0.50, 0.50, 0.50, 0.50]),
    ("fedfor", 2): ([0.44, 0.61, 0.60, 0.72], [0.20, 0.30, 0.40, 0.80]),
}


def test_each_validation_accuracy_reads_its_curve(tmp_path):
    """best@full of FedFOR per seed under each value: test_split the test split's best (70, 69, 72);
    holdout the holdout's best (70, 60, 80); test_at_best_holdout the test accuracy at the best holdout
    round (round 3: 62; round 1: 50; round 4: 72). The spec records the key only when it is not the
    default."""
    want = {None: [70, 69, 72], "holdout": [70, 60, 80], "test_at_best_holdout": [62, 50, 72]}
    for i, (how, values) in enumerate(want.items()):
        (tmp_path / str(i)).mkdir()
        runs = _fake_runs_two_curves(tmp_path / str(i), how)
        spec = json.loads((tmp_path / str(i) / runs["run"].iloc[0] / "run.json").read_text())["spec"]
        assert ("validation_accuracy" in spec) == (how is not None)
        cell = fedfor.fedfor_by_e(runs).set_index(["method", "measure"]).loc[("FedFOR", "best@full")]
        assert cell["reproduced_mean"] == pytest.approx(np.mean(values)), how
        assert fedfor.validation_text(runs) in fedfor.caption(fedfor.fedfor_by_e(runs), runs)
    # a value for every run instead of each run's own (the readings table's other values)
    over = fedfor.fedfor_by_e(runs, how="test_split").set_index(["method", "measure"])
    assert over.loc[("FedFOR", "best@full"), "reproduced_mean"] == pytest.approx(np.mean([70, 69, 72]))
    (tmp_path / "plain").mkdir()
    plain = _fake_runs(tmp_path / "plain", CURVES)  # the caption make reproduce's table has
    assert "validation accuracy = the source's own test split. Cells:" in fedfor.caption(
        fedfor.fedfor_by_e(plain), plain)


# ---- runs of more than one paper table in one fedfor_by_e table ----------------------------------------


def _paper_experiment(name, rounds=4):
    """The paper config's experiment, at E = 1 with `rounds` rounds, FedBN and FedFOR."""
    import yaml

    cfg = yaml.safe_load(open(f"workflow/config/paper/{name}.yaml"))
    exp = cfg["experiments"][name]
    exp["settings"] = {"E1": {**exp["settings"]["E1"], "rounds": rounds}}
    exp["algorithms"] = ["fedbn", "fedfor"]
    return exp


def _runs_of(tmp_path, experiments, curve_of):
    """Run directories of the experiments' grids, each recording curve_of(spec) as its test-split and its
    holdout accuracy."""
    dirs = []
    for spec in expand_runs(validate_config({"experiments": experiments})):
        d = tmp_path / spec.experiment / spec.run
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        acc = curve_of(spec)
        frames = [pd.DataFrame({"round": np.arange(1, len(acc) + 1), "metric": m, "value": acc})
                  for m in ("global_test_accuracy", "mean_client_accuracy")]
        pd.concat(frames).to_parquet(d / "metrics.parquet")
        dirs.append(d)
    return dirs


def test_each_data_set_is_read_against_its_own_paper_table(tmp_path):
    """Tables 3 and 4's experiments in one config write one fedfor_by_e table: every row was read against
    the paper table of the first run's data set (Digits' cells beside DomainNet's numbers, ACC40 for both),
    and a censored ACC_x showed the largest R of its E over both. Each group of runs now has its own
    reference, ACC_x target, baseline and R, and the .md says which rows are whose."""
    experiments = {"t3": _paper_experiment("tian2022_fedfor_table3", rounds=6),
                   "t4": _paper_experiment("tian2022_fedfor_table4", rounds=4)}
    curves = {("domainnet", "fedfor"): [0.3, 0.5, 0.6, 0.6, 0.6, 0.6],
              ("domainnet", "fedbn"): [0.1, 0.2, 0.3, 0.3, 0.3, 0.3],  # never 40 %: "> 6"
              ("digit5", "fedfor"): [0.3, 0.5, 0.7, 0.9], ("digit5", "fedbn"): [0.3, 0.5, 0.6, 0.7]}
    dirs = _runs_of(tmp_path, experiments, lambda s: curves[(s.dataset, s.algorithm)])
    for order in (dirs, dirs[::-1]):  # whichever run comes first
        runs = collect_runs(order)
        tidy = fedfor.fedfor_by_e(runs.assign(dataset_name=runs["dataset"])).set_index(
            ["dataset", "method", "measure"])
        assert tidy.loc[("domainnet", "FedFOR", "best@full"), "paper_table"] == "Table 3"
        assert tidy.loc[("digit5", "FedFOR", "best@full"), "paper_table"] == "Table 4"
        assert tidy.loc[("domainnet", "FedFOR", "best@full"), "paper"] == pytest.approx(48.41)
        assert tidy.loc[("digit5", "FedFOR", "best@full"), "paper"] == pytest.approx(85.65)
        assert tidy.loc[("domainnet", "FedFOR", "ACC_x"), "acc_x"] == 40
        assert tidy.loc[("digit5", "FedFOR", "ACC_x"), "acc_x"] == 80
        assert tidy.loc[("digit5", "FedFOR", "ACC_x"), "paper"] == 8  # Table 4's ACC80, not Table 3's 58
        assert tidy.loc[("domainnet", "FedFOR", "ACC_x"), "reproduced_mean"] == 2  # 40 % at round 2
        assert tidy.loc[("digit5", "FedFOR", "ACC_x"), "reproduced_mean"] == 4  # 80 % at round 4
        assert tidy.loc[("digit5", "FedFOR", "best@half"), "diff_mean"] == pytest.approx(0.0)  # t = 2
        assert tidy.loc[("digit5", "FedFOR", "best@full"), "diff_mean"] == pytest.approx(20.0)
        assert tidy.loc[("domainnet", "FedFOR", "best@full"), "diff_mean"] == pytest.approx(30.0)
    fedfor.build(dirs, tmp_path / "fedfor_by_e")
    md = (tmp_path / "fedfor_by_e.md").read_text()
    assert "FedFOR Table 3 and Table 4:" in md
    assert "Table 3 · domainnet: domainnet, label skew natural" in md
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in md.splitlines()
             if line.startswith("| Table")]
    assert {c[0] for c in cells} == {"Table 3 · domainnet", "Table 4 · digit5"}
    # columns: table, E, measure, method, reproduced, ...; FedBN never reaches x %: each group's own R
    censored = {(c[0], c[2]): c[4] for c in cells if c[3] == "FedBN" and c[2].startswith("ACC")}
    assert censored == {("Table 3 · domainnet", "ACC40 (rounds)"): "> 6",
                        ("Table 4 · digit5", "ACC80 (rounds)"): "> 4"}


def test_a_stand_in_beside_a_paper_run_keeps_its_own_table_and_baseline(tmp_path):
    """make reproduce's Table 2 stand-in (mnist5k's long tail, FedAvg its baseline) beside Table 4's runs
    (FedBN the baseline): each group pairs with its own baseline, and the layout says which it is."""
    stand_in = _config()["experiments"]["ff"]
    experiments = {"ff": stand_in, "t4": _paper_experiment("tian2022_fedfor_table4")}
    dirs = _runs_of(tmp_path, experiments,
                    lambda s: [0.4, 0.5, 0.6, 0.8 if s.algorithm == "fedfor" else 0.7])
    runs = collect_runs(dirs)
    tidy = fedfor.fedfor_by_e(runs.assign(dataset_name=runs["dataset"]))
    by = tidy.set_index(["dataset", "method", "measure"])
    assert by.loc[("mnist5k", "FedFOR", "best@full"), "paper_table"] == "Table 2"
    assert by.loc[("mnist5k", "FedFOR", "best@full"), "baseline"] == "FedAvg"
    assert by.loc[("mnist5k", "FedFOR", "best@full"), "diff_mean"] == pytest.approx(10.0)  # 80 − 70
    assert by.loc[("digit5", "FedFOR", "best@full"), "baseline"] == "FedBN"
    assert by.loc[("digit5", "FedFOR", "best@full"), "diff_mean"] == pytest.approx(10.0)
    assert not tidy[tidy["dataset"] == "mnist5k"]["measure"].eq("ACC_x").any()  # Table 2 has no ACC_x
    shown = fedfor.layout(tidy)
    assert {"table", "baseline", "Δ vs baseline [95% CI]"} <= set(shown.columns)
    assert set(shown["table"]) == {"Table 2 · mnist5k", "Table 4 · digit5"}
    text = fedfor.caption(tidy, runs.assign(dataset_name=runs["dataset"]))
    assert "FedFOR Table 2 and Table 4:" in text and "mnist5k is an offline stand-in" in text


def test_runs_without_a_local_holdout_are_not_read_by_their_holdout_accuracy(tmp_path):
    """The readings table reads the runs under the other validation_accuracy values too; runs of
    test_fraction 0 record no holdout accuracy (mean_client_accuracy), so those columns were cells of
    nothing. They are left out where no run has a holdout."""
    def runs_with(test_fraction, where):
        cfg = _config()
        cfg["experiments"]["ff"]["test_fraction"] = test_fraction
        dirs = []
        for spec in expand_runs(validate_config(cfg)):
            d = where / spec.run
            d.mkdir(parents=True)
            (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
            acc = CURVES[(spec.algorithm, spec.seed)]
            pd.DataFrame({"round": np.arange(1, 5), "metric": "global_test_accuracy",
                          "value": acc}).to_parquet(d / "metrics.parquet")
            dirs.append(d)
        return dirs

    none = fedfor.readings_table("fedfor_by_e", runs_with(0, tmp_path / "none"))
    assert set(none["reading"]) == {"paper/default"}
    held = fedfor.readings_table("fedfor_by_e", runs_with(0.1, tmp_path / "held"))
    assert set(held["reading"]) == {"paper/default", "validation_accuracy=holdout",
                                    "validation_accuracy=test_at_best_holdout"}
