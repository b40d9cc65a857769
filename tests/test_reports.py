"""Tests for hetfl.reports: reference loading, run collection and the Table 3 accuracy difference."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hetfl import io as hetfl_io
from hetfl.reports.accuracy_difference import (
    OUTPUT_COLUMNS,
    accuracy_difference,
    default_caption,
    percent_improvement,
    point_difference,
    write_tables,
)
from hetfl.reports.references import available_references, load_reference
from hetfl.reports.results import collect_runs, load_metrics

TABLE3 = "ruan2021_table3_accuracy_difference"


def make_run(
    root: Path,
    scheme: str,
    seed: int,
    final_acc: float,
    *,
    setting: str = "NIID",
    num_traces: int = 2,
    status: str = "ok",
    rounds: int = 3,
) -> Path:
    """Write a fake run dir; test accuracy is 0.1 before the last round, ``final_acc`` at it."""
    run = f"{setting}-T{num_traces}-{scheme}-s{seed}"
    run_dir = root / "table3" / run
    run_dir.mkdir(parents=True)
    spec = {
        "experiment": "table3",
        "run": run,
        "dataset": "SYNTHETIC",
        "setting": setting,
        "num_traces": num_traces,
        "scheme": scheme,
        "seed": seed,
        "rounds": rounds,
        "optim": {"lr": 1.0},
    }
    (run_dir / "run.json").write_text(json.dumps({"spec": spec, "status": status}))
    rows = []
    for r in reversed(range(1, rounds + 1)):  # deliberately not sorted by round
        acc = final_acc if r == rounds else 0.1
        rows += [(r, "test_accuracy", acc), (r, "train_loss", 1.0 / r)]
    pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(run_dir / "metrics.parquet")
    return run_dir


@pytest.fixture()
def run_dirs(tmp_path: Path) -> list[Path]:
    dirs = [
        # NIID |T|=2: B/A = +10 %, +20 %; C/B = +5 %, 0 %.
        make_run(tmp_path, "A", 0, 0.80),
        make_run(tmp_path, "B", 0, 0.88),
        make_run(tmp_path, "C", 0, 0.924),
        make_run(tmp_path, "A", 1, 0.75),
        make_run(tmp_path, "B", 1, 0.90),
        make_run(tmp_path, "C", 1, 0.90),
        # IID |T|=1, seed 0: B diverged (finite accuracy, must still be excluded).
        make_run(tmp_path, "A", 0, 0.80, setting="IID", num_traces=1),
        make_run(tmp_path, "B", 0, 0.50, setting="IID", num_traces=1, status="diverged"),
        make_run(tmp_path, "C", 0, 0.90, setting="IID", num_traces=1),
        # IID |T|=1, seed 1: B/A = -2.5 %; C/B = 100 * 0.01 / 0.78.
        make_run(tmp_path, "A", 1, 0.80, setting="IID", num_traces=1),
        make_run(tmp_path, "B", 1, 0.78, setting="IID", num_traces=1),
        make_run(tmp_path, "C", 1, 0.79, setting="IID", num_traces=1),
        # IID |T|=9 (no paper value): A diverged with NaN, C missing -> B/A excluded, C/B excluded.
        make_run(tmp_path, "A", 0, float("nan"), setting="IID", num_traces=9, status="diverged"),
        make_run(tmp_path, "B", 0, 0.70, setting="IID", num_traces=9),
        # IID |T|=3, one seed: C worse than B (paper C/B is 0.0) and B worse than A (paper +6.6).
        make_run(tmp_path, "A", 0, 0.80, setting="IID", num_traces=3),
        make_run(tmp_path, "B", 0, 0.76, setting="IID", num_traces=3),
        make_run(tmp_path, "C", 0, 0.70, setting="IID", num_traces=3),
        # NIID |T|=4, three seeds (paper: B/A 38.2, C/B 3.2): B/A points 10, 9, 14; C/B points -3, -2, -2.
        *(make_run(tmp_path, sch, s, acc, num_traces=4)
          for s, accs in enumerate([(0.50, 0.60, 0.57), (0.52, 0.61, 0.59), (0.48, 0.62, 0.60)])
          for sch, acc in zip("ABC", accs, strict=True)),
    ]
    return dirs


@pytest.fixture()
def table(run_dirs: list[Path]) -> pd.DataFrame:
    return accuracy_difference(collect_runs(run_dirs), load_reference(TABLE3))


def row(table: pd.DataFrame, setting: str, num_traces: int, comparison: str) -> pd.Series:
    match = table[
        (table["setting"] == setting)
        & (table["num_traces"] == num_traces)
        & (table["comparison"] == comparison)
    ]
    assert len(match) == 1
    return match.iloc[0]


# --- references -----------------------------------------------------------------------------------


def test_load_reference_table3() -> None:
    ref = load_reference(TABLE3)
    assert list(ref.columns) == ["dataset", "setting", "num_traces", "comparison", "pct_improvement"]
    assert len(ref) == 3 * 2 * 8 * 2
    syn = ref[(ref.dataset == "SYNTHETIC") & (ref.setting == "NIID") & (ref.num_traces == 2)]
    assert dict(zip(syn.comparison, syn.pct_improvement, strict=True)) == {"B_vs_A": 9.6, "C_vs_B": 1.5}


def test_load_reference_unknown_lists_available() -> None:
    assert TABLE3 in available_references()
    with pytest.raises(ValueError, match="available:.*ruan2021_table3_accuracy_difference"):
        load_reference("no_such_table")


# --- results --------------------------------------------------------------------------------------


def test_collect_runs_flattens_spec_and_takes_last_round(run_dirs: list[Path]) -> None:
    runs = collect_runs(run_dirs[:2])
    assert len(runs) == 2
    for col in (
        "experiment",
        "run",
        "dataset",
        "setting",
        "num_traces",
        "scheme",
        "seed",
        "rounds",
        "optim.lr",
        "status",
        "final_test_accuracy",
        "final_train_loss",
        "last_round",
    ):
        assert col in runs.columns
    first = runs.iloc[0]
    assert first["scheme"] == "A" and first["status"] == "ok" and first["last_round"] == 3
    assert first["final_test_accuracy"] == pytest.approx(0.80)
    assert first["final_train_loss"] == pytest.approx(1.0 / 3)
    assert first["optim.lr"] == 1.0


def test_collect_runs_keeps_nan_of_diverged_run(tmp_path: Path) -> None:
    d = make_run(tmp_path, "A", 0, float("nan"), status="diverged")
    runs = collect_runs([d])
    assert runs.loc[0, "status"] == "diverged"
    assert math.isnan(runs.loc[0, "final_test_accuracy"])


def test_collect_runs_missing_run_json(tmp_path: Path) -> None:
    d = make_run(tmp_path, "A", 0, 0.8)
    (d / "run.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"run\.json") as info:
        collect_runs([d])
    assert str(d / "run.json") in str(info.value)


def test_collect_runs_malformed_files(tmp_path: Path) -> None:
    d = make_run(tmp_path, "A", 0, 0.8)
    (d / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"malformed run\.json") as info:
        collect_runs([d])
    assert str(d / "run.json") in str(info.value)

    (d / "run.json").write_text(json.dumps({"status": "ok"}))
    with pytest.raises(ValueError, match="spec"):
        collect_runs([d])

    (d / "run.json").write_text(json.dumps({"spec": {"scheme": "A"}, "status": "ok"}))
    pd.DataFrame({"round": [1], "value": [0.5]}).to_parquet(d / "metrics.parquet")
    with pytest.raises(ValueError, match=r"metrics\.parquet.*missing columns"):
        collect_runs([d])

    (d / "metrics.parquet").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"metrics\.parquet"):
        collect_runs([d])

    (d / "metrics.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=r"metrics\.parquet"):
        collect_runs([d])


@pytest.mark.parametrize("frame, problem", [
    ({"round": [1.5], "metric": ["m"], "value": [0.5]}, "'round' must be integers"),
    ({"round": ["one"], "metric": ["m"], "value": [0.5]}, "'round' must be integers"),
    ({"round": pd.array([1, None], dtype="Int64"), "metric": ["m", "m"], "value": [0.5, 0.6]},
     "'round' must be integers"),
    ({"round": [1], "metric": ["m"], "value": ["high"]}, "'value' must be numeric"),
    ({"round": [1, 2], "metric": ["m", None], "value": [0.5, 0.6]}, "'metric' has missing names"),
])
def test_load_metrics_names_a_malformed_column(tmp_path: Path, frame, problem) -> None:
    d = make_run(tmp_path, "A", 0, 0.8)
    pd.DataFrame(frame).to_parquet(d / "metrics.parquet")
    with pytest.raises(ValueError, match=re.escape(problem)) as info:
        load_metrics(d)
    assert str(d / "metrics.parquet") in str(info.value)


def test_load_metrics_reads_what_hetfl_writes_and_coerces_the_rest(tmp_path: Path) -> None:
    """int64 rounds and float64 values are taken as they are; other columns are coerced to the same frame
    (int64 round, str metric, float value)."""
    d = make_run(tmp_path, "A", 0, 0.8)
    written = pd.DataFrame({"round": np.array([1, 2], dtype=np.int64), "metric": ["a", "b"],
                            "value": np.array([0.5, np.nan])})
    written.to_parquet(d / "metrics.parquet")
    plain = load_metrics(d)
    pd.DataFrame({"round": [1.0, 2.0], "metric": ["a", "b"], "value": ["0.5", None]}).to_parquet(
        d / "metrics.parquet")
    coerced = load_metrics(d)
    assert plain.dtypes.equals(coerced.dtypes)
    for frame in (plain, coerced):
        assert str(frame["round"].dtype) == "int64" and str(frame["value"].dtype) == "float64"
        assert frame["round"].tolist() == [1, 2] and frame["metric"].tolist() == ["a", "b"]
        assert frame["value"].iloc[0] == 0.5 and math.isnan(frame["value"].iloc[1])


# --- percent improvement --------------------------------------------------------------------------


def test_percent_improvement_is_relative() -> None:
    assert percent_improvement(0.88, 0.80) == pytest.approx(10.0)  # not 8 percentage points
    assert percent_improvement(0.78, 0.80) == pytest.approx(-2.5)
    assert isinstance(percent_improvement(0.9, 0.9), float)
    np.testing.assert_allclose(
        percent_improvement(np.array([0.9, 0.6]), np.array([0.75, 0.8])), [20.0, -25.0]
    )
    assert math.isinf(percent_improvement(0.5, 0.0))


def test_point_difference_is_in_percentage_points() -> None:
    assert point_difference(0.88, 0.80) == pytest.approx(8.0)  # §5.2: "differences in the test accuracies"
    np.testing.assert_allclose(point_difference(np.array([0.9, 0.6]), np.array([0.75, 0.8])), [15.0, -20.0])


# --- accuracy difference --------------------------------------------------------------------------


def rows_of(table: pd.DataFrame, improvement: str) -> pd.DataFrame:
    return table[table["improvement"] == improvement]


def test_accuracy_difference_columns_and_order(table: pd.DataFrame) -> None:
    assert list(table.columns) == OUTPUT_COLUMNS
    keys = list(zip(table.setting, table.num_traces, table.comparison, table.improvement, strict=True))
    assert keys == sorted(keys)
    assert keys[:2] == [("IID", 1, "B_vs_A", "points"), ("IID", 1, "B_vs_A", "relative")]
    assert len(table) == 5 * 2 * 2  # cells × comparisons × {points, relative}


def test_both_forms_mean_std_ci_over_two_seeds(table: pd.DataFrame) -> None:
    t1 = 12.706204736174707  # t_{1, 0.975}
    pts = row(rows_of(table, "points"), "NIID", 2, "B_vs_A")
    assert pts["reproduced_mean"] == pytest.approx(11.5)  # (8 + 15) / 2 points
    assert pts["reproduced_std"] == pytest.approx(math.sqrt(24.5))
    assert pts["ci_low"] == pytest.approx(11.5 - t1 * 3.5)
    assert pts["ci_high"] == pytest.approx(11.5 + t1 * 3.5)
    # [−33.0, 56.0] holds 9.6 and 0: two seeds cannot tell the paper's gain from none
    assert pts["paper"] == pytest.approx(9.6) and pts["verdict"] == "inconclusive" and bool(pts["same_sign"])
    rel = row(rows_of(table, "relative"), "NIID", 2, "B_vs_A")
    assert rel["reproduced_mean"] == pytest.approx(15.0)  # (10 + 20) / 2 %
    assert rel["reproduced_std"] == pytest.approx(math.sqrt(50.0))  # ddof=1
    assert rel["n_seeds"] == 2 and rel["n_excluded"] == 0
    c_b = row(rows_of(table, "points"), "NIID", 2, "C_vs_B")
    assert c_b["reproduced_mean"] == pytest.approx(2.2)  # (4.4 + 0) / 2
    assert c_b["paper"] == pytest.approx(1.5)


def test_verdicts_by_hand_over_three_seeds(table: pd.DataFrame) -> None:
    t2 = 4.302652729749464  # t_{2, 0.975}
    b_a = row(rows_of(table, "points"), "NIID", 4, "B_vs_A")
    half = t2 * math.sqrt(7.0) / math.sqrt(3.0)  # points 10, 9, 14: mean 11, s² = 7
    assert b_a["reproduced_mean"] == pytest.approx(11.0)
    assert (b_a["ci_low"], b_a["ci_high"]) == (pytest.approx(11 - half), pytest.approx(11 + half))
    assert b_a["verdict"] == "same direction"  # CI in (4.4, 17.6) excludes 0, paper 38.2 outside
    c_b = row(rows_of(table, "points"), "NIID", 4, "C_vs_B")
    half = t2 * math.sqrt(1 / 3) / math.sqrt(3.0)  # -3, -2, -2: mean -7/3, s² = 1/3
    assert c_b["ci_high"] == pytest.approx(-7 / 3 + half) and c_b["ci_high"] < 0
    assert c_b["verdict"] == "disagrees"  # the paper's +3.2 has the other sign


def test_not_comparable_cells(run_dirs: list[Path]) -> None:
    runs = collect_runs(run_dirs).assign(comparable=lambda d: d["setting"] != "NIID")
    table = accuracy_difference(runs, load_reference(TABLE3))
    assert set(table.loc[table["setting"] == "NIID", "verdict"]) == {"not comparable"}
    iid = table[(table["setting"] == "IID") & table["num_traces"].isin([1, 3])]  # cells with a paper value
    assert "not comparable" not in set(iid["verdict"])


def test_diverged_run_is_excluded(table: pd.DataFrame) -> None:
    b_a = row(rows_of(table, "relative"), "IID", 1, "B_vs_A")
    assert b_a["n_seeds"] == 1 and b_a["n_excluded"] == 1
    assert b_a["reproduced_mean"] == pytest.approx(-2.5)
    assert math.isnan(b_a["reproduced_std"]) and math.isnan(b_a["ci_low"])  # one seed: no std, no CI
    assert b_a["paper"] == pytest.approx(-0.6) and bool(b_a["same_sign"])
    assert b_a["verdict"] == "inconclusive"
    assert row(rows_of(table, "points"), "IID", 1, "B_vs_A")["reproduced_mean"] == pytest.approx(-2.0)

    c_b = row(rows_of(table, "relative"), "IID", 1, "C_vs_B")
    assert c_b["n_seeds"] == 1 and c_b["n_excluded"] == 1
    assert c_b["reproduced_mean"] == pytest.approx(100 * 0.01 / 0.78)


def test_a_relative_change_from_an_accuracy_of_0_is_excluded() -> None:
    """Scheme A at accuracy 0 in seed 0 (a legal finished run): B − A in points is 0 there, but the relative
    change 0/0 is undefined. It was kept as NaN beside two finite seeds, so the cell's mean was NaN and it
    read "0 of 3 censored [−97.1, 157.1]": the CI of 2 seeds under n = 3, and nothing is censored."""
    rows = [{"dataset": "SYNTHETIC", "setting": "S", "num_traces": 1, "seed": seed, "scheme": scheme,
             "status": "ok", "final_test_accuracy": acc}
            for seed, accs in enumerate([(0.0, 0.0, 0.1), (0.5, 0.6, 0.6), (0.5, 0.7, 0.7)])
            for scheme, acc in zip("ABC", accs, strict=True)]
    ref = pd.DataFrame({"dataset": ["SYNTHETIC"] * 2, "setting": ["S"] * 2, "num_traces": [1, 1],
                        "comparison": ["B_vs_A", "C_vs_B"], "pct_improvement": [10.0, 0.0]})
    from hetfl.reports import accuracy_difference as ad

    table = ad.accuracy_difference(pd.DataFrame(rows), ref, 0.05)
    rel = table[table["improvement"] == "relative"].set_index("comparison")
    assert rel.loc["B_vs_A", "n_seeds"] == 2 and rel.loc["B_vs_A", "n_excluded"] == 1
    assert rel.loc["B_vs_A", "reproduced_mean"] == pytest.approx(30.0)  # (20 + 40) / 2
    assert ad._reproduced_cell(rel.loc["B_vs_A"]).startswith("30.0 [")
    assert rel.loc["C_vs_B", "n_seeds"] == 2 and rel.loc["C_vs_B", "n_excluded"] == 1  # 0.1 / 0: inf
    pts = table[table["improvement"] == "points"].set_index("comparison")
    assert pts.loc["B_vs_A", "n_seeds"] == 3 and pts.loc["B_vs_A", "n_excluded"] == 0  # 0 points: usable


def test_missing_partner_and_absent_paper(table: pd.DataFrame) -> None:
    for comparison in ("B_vs_A", "C_vs_B"):
        r = row(rows_of(table, "points"), "IID", 9, comparison)
        assert r["n_seeds"] == 0 and r["n_excluded"] == 1
        assert math.isnan(r["reproduced_mean"]) and math.isnan(r["paper"])
        assert pd.isna(r["same_sign"]) and r["verdict"] == "not comparable"


def test_same_sign_false_and_zero_paper(table: pd.DataFrame) -> None:
    b_a = row(rows_of(table, "points"), "IID", 3, "B_vs_A")
    assert b_a["reproduced_mean"] == pytest.approx(-4.0) and b_a["paper"] == pytest.approx(6.6)
    assert not bool(b_a["same_sign"])
    c_b = row(rows_of(table, "points"), "IID", 3, "C_vs_B")
    assert c_b["paper"] == 0.0 and pd.isna(c_b["same_sign"])  # sign of 0.0 is undefined
    assert str(table["same_sign"].dtype) == "boolean"


def test_duplicate_runs_rejected(run_dirs: list[Path]) -> None:
    runs = collect_runs(run_dirs)
    with pytest.raises(ValueError, match="several runs"):
        accuracy_difference(pd.concat([runs, runs.iloc[[0]]]), load_reference(TABLE3))


# --- output files ---------------------------------------------------------------------------------


def test_default_caption_states_formula_and_note() -> None:
    caption = default_caption("IID column uses SYNTHETIC(0, 0); reduced scale.", rounds=50, n_devices=20)
    assert "100·(acc_B − acc_A)" in caption and "100·(acc_B − acc_A)/acc_A" in caption
    assert "final round" in caption and "95 % Student-t CI" in caption and "not comparable" in caption
    assert "50 rounds" in caption and "20 devices" in caption
    assert caption.endswith("IID column uses SYNTHETIC(0, 0); reduced scale.")


def test_write_tables(table: pd.DataFrame, tmp_path: Path) -> None:
    caption = default_caption("Test note with 100% and SYNTHETIC_1_1.", rounds=3, n_devices=5)
    stem = tmp_path / "out" / "table3_accuracy_difference"
    write_tables(table, stem, caption)

    csv = pd.read_csv(stem.with_name(stem.name + ".csv"))
    assert list(csv.columns) == OUTPUT_COLUMNS and len(csv) == len(table)

    md = stem.with_name(stem.name + ".md").read_text(encoding="utf-8")
    assert md.startswith(caption)
    for header in ("B vs A (reproduced)", "B vs A (paper)", "B vs A verdict", "C vs B verdict",
                   r"\|T\|"):
        assert header in md
    lines = [line for line in md.splitlines() if "| NIID" in line and re.search(r"\|\s+2\s+\|", line)]
    assert len(lines) == 1  # the printed form is points: 11.5 [-33.0, 56.0]
    assert "11.5 [-33.0, 56.0]" in lines[0] and "9.6" in lines[0] and "inconclusive" in lines[0]
    assert "-2.0 (n=1, 1 excl.)" in md

    tex = stem.with_name(stem.name + ".tex").read_text(encoding="utf-8")
    assert r"\caption{" in tex and r"\begin{tabular}" in tex and r"\end{table}" in tex
    assert r"11.5 [-33.0, 56.0]" in tex
    assert r"100\%" in tex and r"SYNTHETIC\_1\_1" in tex  # caption escaped for LaTeX
    assert sorted(p.name for p in stem.parent.iterdir()) == [
        "table3_accuracy_difference.csv",
        "table3_accuracy_difference.md",
        "table3_accuracy_difference.tex",
    ]


def test_write_is_atomic(table: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "atomic"
    out.mkdir()
    stem = out / "t3"
    target = out / "t3.csv"
    target.write_text("previous")

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(hetfl_io.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_tables(table, stem, "caption")
    assert target.read_text() == "previous"  # old file untouched
    assert [p.name for p in out.iterdir()] == ["t3.csv"]  # temp file cleaned up


def test_latex_escape_leaves_only_what_pdflatex_reads():
    """The .tex tables carried Δ, Σ, ρ, x̃, F̄, ³ and ⌊⌋ as they were (an audit); every character the
    tables and captions use now comes out as ASCII LaTeX."""
    from hetfl.reports.writers import latex_escape

    text = "Δ vs FedAvg, Σ p_i, x̃ − x*, F̄, 10³ and 10⁶, ρ_i, ⌊f·E⌋, ℓ1 → §4, ε, σ, τ0, α ≥ 0, ±, —, Α"
    out = latex_escape(text)
    assert out.isascii(), [ch for ch in out if not ch.isascii()]
    assert r"$\Delta$ vs FedAvg" in out and r"$\tilde{x}$" in out and r"$\bar{F}$" in out
    assert r"10$^{3}$" in out and r"$\lfloor$f$\cdot$E$\rfloor$" in out and out.endswith(", A")


def test_scale_note_says_how_a_real_sources_equal_sizes_are_dealt():
    """'sizes equal' was printed for mnist5k's pathological split, whose devices hold 117 to 266 training
    samples (an audit): on a real source it is the label skew's deal unless equal_counts trims it."""
    from hetfl.reports.tables import scale_note

    run = {"dataset_name": "mnist5k", "sizes.distribution": "equal", "num_devices": 20, "model": "mlp",
           "rounds": 20, "seed": 0, "local_epochs": 20, "local_work": "steps", "batch_size": 10, "eta0": 0.05}
    assert "sizes as the label skew deals them (the whole split)" in scale_note(pd.DataFrame([run]))
    trimmed = pd.DataFrame([{**run, "partition.equal_counts": True}])
    assert "sizes equal (every device trimmed to one count)" in scale_note(trimmed)
    synthetic = pd.DataFrame([{**run, "dataset_name": "synthetic"}])
    assert "sizes equal" in scale_note(synthetic) and "label skew" not in scale_note(synthetic)


@pytest.mark.parametrize("table", ["accuracy_difference", "fast_reboot", "crossing_epochs"])
def test_another_algorithm_at_the_papers_set_up_is_not_comparable(table):
    """Ruan et al.'s Tables 3-5 are FedAvg's. Table 3's set-up said so, Tables 4 and 5's did not: a
    researcher's algorithm (FedAdam, a plugin) run at the paper's set-up got verdicts against FedAvg's
    numbers there (an audit). Each now names the departure, 'algorithm = fedadam (paper: fedavg)'."""
    from hetfl.reports.setups import PAPER_SETTINGS, PAPER_SETUPS, setup_differences

    stated = {**PAPER_SETUPS[(table, "SYNTHETIC")], **PAPER_SETTINGS.get((table, "SYNTHETIC", "NIID"), {})}
    row = {("dataset_name" if k == "dataset" else k): v for k, v in stated.items()}
    row.update(dataset="SYNTHETIC", setting="NIID", algorithm="fedavg")
    assert setup_differences(row, table) == []
    other = setup_differences({**row, "algorithm": "fedadam"}, table)
    assert other == ["algorithm = fedadam (paper: fedavg)"]
