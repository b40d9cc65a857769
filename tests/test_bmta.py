"""EFL Table 2: best mean testing accuracy from run directories."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from hetfl.reports.bmta import best_mean_test_accuracy, bmta, layout
from hetfl.reports.references import load_reference


def make_run(root: Path, algorithm: str, seed: int, curve: list[float], status: str = "ok") -> Path:
    run_dir = root / f"{algorithm}_NIID_T1_C_s{seed}"
    run_dir.mkdir(parents=True)
    spec = {"algorithm": algorithm, "dataset": "MNIST", "setting": "NIID", "num_traces": 1, "scheme": "C",
            "seed": seed}
    (run_dir / "run.json").write_text(json.dumps({"spec": spec, "status": status}))
    rows = [(r, "mean_client_accuracy", v) for r, v in enumerate(curve, start=1)]
    rows += [(r, "test_accuracy", 0.99) for r in range(1, len(curve) + 1)]  # must not be what BMTA reads
    pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(run_dir / "metrics.parquet")
    return run_dir


def runs_frame(dirs: list[Path]) -> pd.DataFrame:
    from hetfl.reports.results import collect_runs

    return collect_runs(dirs)


def test_best_over_rounds_skips_nan():
    assert best_mean_test_accuracy(pd.Series([0.2, 0.7, 0.5, math.nan], index=[1, 2, 3, 4])) == (70.0, 2)
    value, where = best_mean_test_accuracy(pd.Series([math.nan], index=[1]))
    assert math.isnan(value) and where is None


def test_bmta_is_the_seed_mean_of_per_seed_bests_with_paper_values(tmp_path):
    dirs = [make_run(tmp_path, "fedavg", 0, [0.5, 0.8, 0.6]),   # best 80 at round 2
            make_run(tmp_path, "fedavg", 1, [0.7, 0.6, 0.9]),   # best 90 at round 3
            make_run(tmp_path, "efl", 0, [0.1, 0.4, math.nan], status="diverged")]
    tidy = bmta(runs_frame(dirs), load_reference("ma2022_efl_table2_bmta"))
    fedavg = tidy[tidy["method"] == "FedAvg"].iloc[0]
    assert fedavg["reproduced_mean"] == pytest.approx(85.0)  # not the best of the mean curve (80)
    assert fedavg["reproduced_std"] == pytest.approx(math.sqrt(50.0))
    assert fedavg["best_round_mean"] == pytest.approx(2.5)
    assert fedavg["paper"] == pytest.approx(98.30)
    efl = tidy[tidy["method"] == "EFL"].iloc[0]
    assert efl["reproduced_mean"] == pytest.approx(40.0) and efl["n_diverged"] == 1
    not_run = tidy[tidy["n_seeds"].isna()]
    assert set(not_run["method"]) == {"FedGATE", "VRL-SGD", "APFL", "FedAMP"}
    assert set(not_run["dataset"]) == {"MNIST"}  # only the data sets that were run
    shown = layout(tidy).set_index("method")
    assert shown.loc["FedAvg", "MNIST (reproduced)"] == "85.00 ± 7.07"
    assert shown.loc["APFL", "MNIST (reproduced)"] == "not run"
    assert shown.loc["APFL", "MNIST (paper)"] == "98.49"


def test_build_bmta_writes_md_csv_tex(tmp_path):
    from hetfl.reports.tables import build_table

    dirs = []
    for seed in (0, 1):
        d = make_run(tmp_path / "r", "fedavg", seed, [0.3, 0.6])
        spec = json.loads((d / "run.json").read_text())
        spec["spec"].update(dataset="mnist5k", num_devices=20, model="mlp", rounds=2, local_epochs=1,
                            batch_size=10, eta0=0.05, lr_schedule="constant",
                            **{"sizes": {"distribution": "equal"},
                               "partition": {"label_skew": "pathological", "m": 2}})
        (d / "run.json").write_text(json.dumps(spec))
        dirs.append(d)
    build_table("bmta", dirs, tmp_path / "out" / "bmta")
    md = (tmp_path / "out" / "bmta.md").read_text()
    assert "best mean testing accuracy" in md and "60.00" in md and "Not run here" in md
    assert "η_τ = 0.05," in md  # a constant learning rate is not printed as η0/τ
    assert (tmp_path / "out" / "bmta.csv").is_file() and (tmp_path / "out" / "bmta.tex").is_file()
