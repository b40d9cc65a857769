"""Two data sources under one paper label (mnist and mnist5k are both "MNIST", config.DATASET_LABELS) on a
table whose cells group runs by that label: refused at validation where the table would pair them, kept
apart by the table under setting names of their own."""

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_config import QUICK, _alone, _refusal  # tests/ is on the path (pytest's rootdir conftest)

from hetfl.config import expand_runs, validate_config
from hetfl.reports import event_tables as ev
from hetfl.reports import ruan
from hetfl.reports.bmta import model_note
from hetfl.reports.efl_lambda import lambda_table
from hetfl.reports.fairness import fairness
from hetfl.reports.multiple_arrivals import multiple_arrivals
from hetfl.reports.tables import build_table, load_event_runs, load_runs, scale_note, settings_note

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "workflow/config"
TABLE3 = yaml.safe_load((CONFIG / "paper/ruan2021_table3_mnist.yaml").read_text())["experiments"][
    "ruan2021_table3_mnist"]
TABLE4 = yaml.safe_load((CONFIG / "checks/table4_mnist5k.yaml").read_text())["experiments"][
    "ruan2021_table4_mnist5k"]
FIGURE5 = yaml.safe_load((CONFIG / "paper/ruan2021_figure5.yaml").read_text())["experiments"][
    "ruan2021_figure5_mnist"]


def _small(exp: dict, **change) -> dict:
    """A shipped experiment at a few rounds and two seeds (the table tests fake every run's metrics)."""
    out = {k: v for k, v in copy.deepcopy(exp).items() if k not in ("readings", "readings_grid")}
    out.update(rounds=6, seeds=[0, 1], eval_every=1)
    out.update(copy.deepcopy(change))
    return out


_BMTA = _alone(QUICK, "ma2022_efl_table2_mnist5k")
_LAM0 = _alone(QUICK, "ma2022_efl_figure2_mnist5k_lam0")
_NIID3 = {"NIID": TABLE3["settings"]["NIID"]}
_ARRIVAL = {"kind": "arrival", "rounds": [3], "stagger": 1, "devices": [7, 8]}
_DEPARTURE = {"kind": "departure", "rounds": [3]}

#: table -> two experiments (first on one source, then on another source of the paper's MNIST, under the
#: first's setting name) whose runs differ in what the table pairs within a row: the method (fairness's
#: Δ vs FedAvg), λ (efl_lambda), the scheme (Table 3), the policy (Tables 4-5, Figure 5)
CASES = {
    "fairness": (_small(_BMTA, algorithms=["fedavg"]),
                 _small(_BMTA, table="fairness", dataset="mnist", algorithms=["efl"])),
    "efl_lambda": (_small(_LAM0),
                   _small(_LAM0, dataset="mnist", algorithm_params={"efl": {"q": 0.1, "lam": 0.1}})),
    "accuracy_difference": (_small(TABLE3, settings=_NIID3, num_traces=[1], schemes=["A"]),
                            _small(TABLE3, settings=_NIID3, num_traces=[1], schemes=["B"],
                                   dataset="mnist5k")),
    "fast_reboot": (_small(TABLE4, event={**_ARRIVAL, "devices": [9], "policies": ["fast_reboot"]}),
                    _small(TABLE4, event={**_ARRIVAL, "devices": [9], "policies": ["vanilla"]},
                           dataset="mnist")),
    "crossing_epochs": (_small(TABLE4, table="crossing_epochs",
                               event={**_DEPARTURE, "policies": ["include"]}),
                        _small(TABLE4, table="crossing_epochs",
                               event={**_DEPARTURE, "policies": ["exclude"]}, dataset="mnist")),
    "multiple_arrivals": (_small(FIGURE5, event={**_ARRIVAL, "policies": ["fast_reboot"]}),
                          _small(FIGURE5, event={**_ARRIVAL, "policies": ["vanilla"]}, dataset="mnist5k")),
}


def _renamed(exp: dict) -> dict:
    """The experiment with its one setting under a name of its own."""
    (name, setting), = exp["settings"].items()
    return {**exp, "settings": {f"{name}_{exp['dataset']}": setting}}


@pytest.mark.parametrize("table", CASES)
def test_two_sources_of_one_label_under_one_setting_are_refused_before_any_job(table):
    """mnist5k's runs beside mnist's under one setting name passed validation, trained, and then the table
    paired them seed by seed as one data set's (Table 3's B vs A across the two sources). Validation refuses
    the second source, naming both experiments, both sources, the label, the setting and what is allowed;
    under a setting name of its own (a row of its own) the pair validates."""
    first, second = CASES[table]
    text = _refusal({"experiments": {"first": first, "second": second}})
    (setting,) = first["settings"]
    assert (f"config key 'experiments.second.dataset' has value \"{second['dataset']}\", which is not "
            f"allowed beside experiment first (dataset \"{first['dataset']}\") on table {table}: both are "
            f"the paper's MNIST under setting {setting}, and the table's cells group runs by that label and "
            "setting, so it would pair the two sources' runs seed by seed") in text, text
    assert (f"allowed: \"{first['dataset']}\", as first has, or a source of another label or a setting name "
            "of its own") in text, text
    validate_config({"experiments": {"first": first, "second": _renamed(second)}})


METRICS = ("test_accuracy", "test_loss", "mean_client_accuracy", "train_loss", "client_loss_variance",
           "client_loss_entropy", "client_loss_jain")


def _fake_runs(root: Path, experiments: dict[str, dict]) -> list[Path]:
    """A run directory for every run of each experiment (each validated alone: two under one setting name
    pass only so), with a curve of every metric a table reads."""
    dirs = []
    for name, exp in experiments.items():
        for spec in expand_runs(validate_config({"experiments": {name: exp}})):
            d = root / name / spec.run
            d.mkdir(parents=True)
            (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
            rows = [(r, m, 0.5 + 0.01 * r + 0.001 * spec.seed) for r in range(1, spec.rounds + 1)
                    for m in METRICS]
            pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(d / "metrics.parquet")
            dirs.append(d)
    return dirs


def _paired(table: str, dirs: list[Path]) -> pd.DataFrame:
    """The table's rows that pair the two experiments' runs, with their setting and count of pairs."""
    if table == "fairness":
        t = fairness(load_runs(dirs))
        t = t[t["method"] == "EFL"]
        return pd.DataFrame({"setting": t["setting"], "n": t["Jain_diff_mean"].notna().astype(int)})
    if table == "efl_lambda":
        t = lambda_table(load_runs(dirs))
        t = t[t["lam"] > 0]
        return pd.DataFrame({"setting": t["setting"], "n": t["bmta_n_pairs"]})
    if table == "accuracy_difference":
        t = ruan.compute_accuracy_difference(load_runs(dirs))
        t = t[(t["comparison"] == "B_vs_A") & (t["improvement"] == "points")]
    elif table == "fast_reboot":
        t = ruan.compute_fast_reboot(load_event_runs(dirs))
        t = t[t["method"] == ev.DIFFERENCE]
    elif table == "crossing_epochs":
        t = ruan.compute_crossing(load_event_runs(dirs))
    else:
        t = multiple_arrivals(load_event_runs(dirs))
        t = t[t["method"] == ev.DIFFERENCE]
    return pd.DataFrame({"setting": t["setting"], "n": t["n_seeds"]})


@pytest.mark.parametrize("table", CASES)
def test_under_setting_names_of_their_own_the_table_keeps_two_sources_apart(table, tmp_path):
    """What validation refuses: under one setting name the table pairs mnist5k's runs with mnist's seed by
    seed (two seeds). Under setting names of their own the two sources are rows of their own, no pair across
    them, and the settings note names each row's source."""
    first, second = CASES[table]
    together = _paired(table, _fake_runs(tmp_path / "together", {"first": first, "second": second}))
    assert len(together) and together["n"].gt(0).all(), together
    apart = {"first": first, "second": _renamed(second)}
    validate_config({"experiments": apart})
    dirs = _fake_runs(tmp_path / "apart", apart)
    got = _paired(table, dirs)
    assert got["n"].max() == 0, got
    (setting,) = first["settings"]
    own = f"{setting}_{second['dataset']}"
    if table not in ("fairness", "efl_lambda"):  # theirs: one method's or λ's row each, the other has none
        assert sorted(set(got["setting"])) == sorted([setting, own]), got
    else:
        assert got["setting"].tolist() == [own], got
    note = settings_note((load_event_runs if "event" in first else load_runs)(dirs))
    assert f"MNIST {setting} = {first['dataset']}" in note, note
    assert f"MNIST {own} = {second['dataset']}" in note, note


def test_table5s_md_has_a_row_per_setting_where_two_share_the_label_and_alpha_beta(tmp_path):
    """Table 5's rows are (data set, α, β, τ0), as the paper's; a real source's settings all have α = β = 0,
    so mnist5k's and mnist's runs under setting names of their own were one row of the .md, mnist's cells
    written over mnist5k's (the .csv had both). The .md now has a row per setting there, and no setting
    column where (α, β) tell the settings apart (the paper's SYNTHETIC rows)."""
    first, second = CASES["crossing_epochs"]
    dirs = _fake_runs(tmp_path, {"first": first, "second": _renamed(second)})
    build_table("crossing_epochs", dirs, tmp_path / "table5")
    md = (tmp_path / "table5.md").read_text()
    rows = [[c.strip() for c in line.split("|")[1:3]] for line in md.splitlines()
            if line.startswith("| MNIST")]
    assert rows == [["MNIST", "NIID"], ["MNIST", "NIID_mnist"]], md
    tidy = ruan.compute_crossing(load_event_runs(dirs))
    paper = tidy.assign(setting=["a1", "a0.5"], alpha=[1.0, 0.5], beta=[1.0, 0.5], dataset="SYNTHETIC")
    assert list(ruan.crossing_layout(paper).columns[:4]) == ["dataset", "alpha", "beta", "τ0"]


def test_a_captions_notes_per_source_name_each_of_two_sources_of_one_label(tmp_path):
    """Two sources of one label under setting names of their own, each with its own model: the model note
    named the first source's model only ("Models: MNIST mlp"), the scale note the label twice. Each now
    names the source beside the label where two share it, and only there (one source: "MNIST mlp")."""
    first, second = CASES["fairness"]
    second = {**_renamed(second), "model": "cnn", "model_params": {}}
    runs = load_runs(_fake_runs(tmp_path, {"first": first, "second": second}))
    assert model_note(runs) == "Models: MNIST (mnist) cnn; MNIST (mnist5k) mlp (hidden [64])."
    scale = scale_note(runs)
    assert "MNIST (mnist): 20 devices, model cnn" in scale, scale
    assert "MNIST (mnist5k): 20 devices, model mlp" in scale, scale
    alone = runs[runs["dataset_name"] == "mnist5k"]
    assert model_note(alone) == "Models: MNIST mlp (hidden [64])."
    assert scale_note(alone).startswith("Scale: MNIST: 20 devices")
