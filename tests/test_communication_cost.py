"""FedElasticNet's communication-cost table (reports.communication_cost) on hand-made run directories."""

import json

import numpy as np
import pandas as pd
import pytest

from hetfl.config import expand_runs, validate_config
from hetfl.reports import communication_cost as cc
from hetfl.reports.results import collect_runs


def _config():
    return {"experiments": {"cc": {
        "table": "communication_cost", "dataset": "mnist5k", "settings": {"dir0.3": {
            "partition": {"label_skew": "dirichlet", "alpha": 0.3}}},
        "num_devices": 20, "clients_per_round": 2, "algorithms": ["fedprox", "fedelasticnet", "topk_ef"],
        "schemes": ["B"], "num_traces": [1], "rounds": 3, "seeds": [0, 1, 2]}}}


# per (algorithm, seed): non-zeros of rounds 1-3, entropy of rounds 1-3, final accuracy
RUNS = {
    ("fedprox", 0): ([100, 100, 100], [1.0, 1.0, 1.0], 0.80),
    ("fedprox", 1): ([120, 100, 80], [0.9, 1.0, 1.1], 0.82),
    ("fedprox", 2): ([100, 110, 90], [1.0, 1.0, 1.0], 0.81),
    ("fedelasticnet", 0): ([80, 70, 60], [0.8, 0.8, 0.8], 0.80),
    ("fedelasticnet", 1): ([90, 60, 60], [0.7, 0.8, 0.9], 0.83),
    ("fedelasticnet", 2): ([60, 60, 30], [0.8, 0.7, 0.6], 0.81),
    ("topk_ef", 0): ([5, 5, 5], [0.1, 0.1, 0.1], 0.70),
    ("topk_ef", 1): ([5, 5, 5], [0.1, 0.1, 0.1], 0.71),
    ("topk_ef", 2): ([5, 5, 5], [0.1, 0.1, 0.1], 0.72),
}


def _runs(tmp_path):
    dirs = []
    for spec in expand_runs(validate_config(_config())):
        d = tmp_path / spec.run
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        nz, ent, acc = RUNS[(spec.algorithm, spec.seed)]
        rows = [(r + 1, "nonzeros_up", float(v)) for r, v in enumerate(nz)]
        rows += [(r + 1, "entropy_up", v) for r, v in enumerate(ent)]
        rows += [(r + 1, "bytes_up", 4000.0) for r in range(3)]
        rows += [(3, "global_test_accuracy", acc)]
        pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(d / "metrics.parquet")
        dirs.append(d)
    return collect_runs(dirs)


def test_measures_and_pairs_by_hand(tmp_path):
    tidy = cc.communication_cost(_runs(tmp_path))
    methods = tidy[tidy["kind"] == "method"].set_index(["method", "measure"])
    # FedProx totals 300, 300, 300 per seed; per round 100; entropy 1.0; 12 kB over 3 rounds
    assert methods.loc[("FedProx", "total_nonzeros"), "mean"] == 300
    assert methods.loc[("FedProx", "nonzeros_per_round"), "mean"] == 100
    assert methods.loc[("FedProx", "entropy"), "mean"] == pytest.approx(1.0)
    assert methods.loc[("FedProx", "mb_sent"), "mean"] == pytest.approx(0.012)
    assert methods.loc[("FedAvg + top-k + EF", "accuracy"), "mean"] == pytest.approx(71.0)
    pairs = tidy[tidy["kind"] == "pair"].set_index("measure")
    # elastic-net totals 210, 210, 150 against 300 each: changes −30 %, −30 %, −50 %
    change = pairs.loc["nonzeros_change_pct"]
    assert change["mean"] == pytest.approx(-110 / 3)
    half_width = 4.302652729911275 * np.std([-30, -30, -50], ddof=1) / np.sqrt(3)
    assert change["ci_low"] == pytest.approx(-110 / 3 - half_width)
    assert change["ci_high"] == pytest.approx(-110 / 3 + half_width)
    # entropy: means 0.8, 0.8, 0.7 against 1.0 → −0.2, −0.2, −0.3
    assert pairs.loc["entropy_diff", "mean"] == pytest.approx(-0.7 / 3)
    assert pairs.loc["accuracy_diff", "mean"] == pytest.approx(1 / 3)  # 0, +1, 0 points
    assert set(pairs["verdict"]) == {"not comparable"}  # the paper's numbers are not transcribed
    assert list(tidy.loc[tidy["kind"] == "method", "method"].unique()) == [
        "FedProx", "FedProx + elastic net (Alg. 1)", "FedAvg + top-k + EF"]  # each base before its variant


def test_layout_and_caption(tmp_path):
    runs = _runs(tmp_path)
    tidy = cc.communication_cost(runs)
    out = cc.layout(tidy)
    delta = out[out["method"].str.startswith("Δ")].iloc[0]
    assert delta["total non-zeros (10⁶)"].startswith("-36.67 [")
    text = cc.caption(tidy, runs)
    assert "not comparable" in text and "2 of 20 clients per round" in text
    # a Δ row carries three verdicts (non-zeros, entropy, accuracy), and its paper cell all three claims:
    # the caption counted three times the verdict cells shown, and the accuracy claim was hidden (an audit)
    assert "one for each Δ row's non-zeros, entropy and accuracy" in text
    assert delta["paper"] == "lower non-zeros and entropy; accuracy ≈ 0"


def test_other_algorithms_take_the_registrys_label_and_the_caption_the_runs_sizes():
    """A new algorithm's row read its registry name ('fedavgm'), and the caption said 'lognormal sizes'
    whatever the runs used (an audit adding an algorithm)."""
    assert cc._label("fedavgm") == "FedAvgM"
    assert cc._label("fedelasticnet") == "FedProx + elastic net (Alg. 1)"
    assert cc._sizes_text(pd.Series({"sizes.distribution": "equal"})) == "equal sizes"
    lognormal = pd.Series({"sizes.distribution": "lognormal", "sizes.sigma": 0.3})
    assert cc._sizes_text(lognormal) == "lognormal sizes (σ = 0.3)"


def _two_datasets(tmp_path, second: dict):
    """The fedprox runs of _config on mnist5k beside an experiment on digits (`second` changes it)."""
    first = {**_config()["experiments"]["cc"], "algorithms": ["fedprox"]}
    cfg = {"experiments": {"cc": first, "cc_digits": {**first, "dataset": "digits", **second}}}
    dirs = []
    for spec in expand_runs(validate_config(cfg)):
        d = tmp_path / spec.experiment / spec.run
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        nz, ent, acc = RUNS[(spec.algorithm, spec.seed)]
        rows = [(r + 1, m, float(v)) for m, vs in (("nonzeros_up", nz), ("entropy_up", ent))
                for r, v in enumerate(vs)]
        rows += [(r + 1, "bytes_up", 4000.0) for r in range(3)] + [(3, "global_test_accuracy", acc)]
        pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(d / "metrics.parquet")
        dirs.append(d)
    return dirs


def test_two_data_sets_are_rows_of_their_own_and_never_paired(tmp_path):
    """The table had no data set column: FedProx on mnist5k and FedProx + elastic net on digits under one
    setting name were paired seed by seed as one setting's "elastic net vs FedProx" (validation allowed
    it: the cells differed in the method), and two data sets under setting names of their own were rows
    a reader could not tell apart, the caption naming the first run's data set only. A row is now per data
    set and setting, in the .csv and the .md, no pair crosses data sets, and the caption names both."""
    runs = collect_runs(_two_datasets(tmp_path, {"algorithms": ["fedelasticnet"]}))
    tidy = cc.communication_cost(runs)
    assert tidy.columns[0] == "dataset" and tidy["kind"].eq("method").all(), tidy  # no pair across
    methods = tidy.drop_duplicates(["dataset", "setting", "method"])
    assert methods[["dataset", "method"]].values.tolist() == [
        ["digits", "FedProx + elastic net (Alg. 1)"], ["mnist5k", "FedProx"]]
    out = cc.layout(tidy)
    assert out[["dataset", "setting", "method"]].values.tolist() == [
        ["digits", "dir0.3", "FedProx + elastic net (Alg. 1)"], ["mnist5k", "dir0.3", "FedProx"]]
    assert "Here: digits, mnist5k, digits dir0.3: Dirichlet α = 0.3; mnist5k dir0.3: Dirichlet α = 0.3, " \
        in cc.caption(tidy, runs)


def test_one_setting_name_on_two_data_sets_is_two_cells_for_validation_and_figure(tmp_path, monkeypatch):
    """With the data set a column, validation's cell is (data set, setting, method, seed) as the table's:
    FedProx on mnist5k and on digits under one setting name validates (it refused them as one cell), and
    the non-zeros figure has a panel per data set and setting, titled by both (one panel held both data
    sets' lines, under the setting's name)."""
    from hetfl.reports import plotting

    runs = collect_runs(_two_datasets(tmp_path, {}))
    tidy = cc.communication_cost(runs)
    assert tidy.groupby("dataset")["n_seeds"].max().to_dict() == {"digits": 3, "mnist5k": 3}
    drawn = []
    monkeypatch.setattr(plotting, "save", lambda fig, out: drawn.append(fig))
    cc.draw_nonzeros(runs.assign(dataset_name=runs["dataset"], dataset="MNIST"), tmp_path / "nz")
    assert [ax.get_title() for ax in drawn[0].axes] == ["digits dir0.3", "mnist5k dir0.3"]
    one = runs[runs["dataset"] == "mnist5k"]
    cc.draw_nonzeros(one, tmp_path / "nz1")
    assert [ax.get_title() for ax in drawn[1].axes] == ["dir0.3"]


def test_a_change_from_a_base_of_0_non_zeros_is_excluded(tmp_path, monkeypatch):
    """FedProx seed 0 sent no non-zero entry (every update exactly 0): the elastic net's change 100·(210/0
    − 1) is +∞, a relative change from 0, which has no value. It was kept beside −30 and −50 (seeds 1, 2),
    so the cell read "∞ [−∞, ∞] %"; with both totals 0 (0/0, NaN) the seed was dropped without a word. As
    Table 3's relative change from an accuracy of 0 (accuracy_difference), the seed is excluded from that
    Δ and counted, and the cell and caption say so; the entropy and accuracy Δs keep all three seeds."""
    monkeypatch.setitem(RUNS, ("fedprox", 0), ([0, 0, 0], [0.0, 0.0, 0.0], 0.80))
    runs = _runs(tmp_path)
    tidy = cc.communication_cost(runs)
    pairs = tidy[tidy["kind"] == "pair"].set_index("measure")
    change = pairs.loc["nonzeros_change_pct"]
    assert change["mean"] == pytest.approx(-40.0) and change["n_seeds"] == 2 and change["n_excluded"] == 1
    half_width = 12.706204736174698 * np.std([-30, -50], ddof=1) / np.sqrt(2)  # 127.06
    assert change["ci_low"] == pytest.approx(-40 - half_width)
    assert change["ci_high"] == pytest.approx(-40 + half_width)
    assert pairs.loc["entropy_diff", "n_seeds"] == 3 and pairs.loc["entropy_diff", "n_excluded"] == 0
    out = cc.layout(tidy)
    delta = out[out["method"].str.startswith("Δ")].iloc[0]
    assert delta["total non-zeros (10⁶)"] == "-40.00 [-167.06, 87.06] % (1 excl.)"
    assert not delta["entropy (bits/value)"].endswith("excl.)")
    assert "a base run with no non-zero entry" in cc.caption(tidy, runs)
    # both totals 0: 0/0, excluded and counted too (it was dropped silently)
    monkeypatch.setitem(RUNS, ("fedelasticnet", 0), ([0, 0, 0], [0.0, 0.0, 0.0], 0.80))
    (tmp_path / "zero").mkdir()
    change = cc.communication_cost(_runs(tmp_path / "zero")).set_index("measure").loc["nonzeros_change_pct"]
    assert change["n_seeds"] == 2 and change["n_excluded"] == 1


def test_a_run_that_lacks_a_measure_is_counted_in_its_methods_cell(tmp_path, monkeypatch):
    """FedProx seed 0 recorded no non-zeros (no round had a client): its non-zero measures are NaN. The
    method's cell was the mean ± std of the other two seeds, silently; it now says "(1 excl.)" as the Δ rows
    do, and the CSV counts it (n_excluded). Its entropy, recorded, keeps all three seeds."""
    monkeypatch.setitem(RUNS, ("fedprox", 0), ([], [1.0, 1.0, 1.0], 0.80))
    tidy = cc.communication_cost(_runs(tmp_path))
    methods = tidy[tidy["kind"] == "method"].set_index(["method", "measure"])
    total = methods.loc[("FedProx", "total_nonzeros")]
    assert total["mean"] == 300 and total["n_seeds"] == 2 and total["n_excluded"] == 1
    assert methods.loc[("FedProx", "entropy"), "n_excluded"] == 0
    row = cc.layout(tidy).set_index("method").loc["FedProx"]
    assert row["total non-zeros (10⁶)"] == "0.00 ± 0.00 (1 excl.)"
    assert row["non-zeros / round (10³)"] == "0.1 ± 0.0 (1 excl.)"
    assert not row["entropy (bits/value)"].endswith("excl.)")
