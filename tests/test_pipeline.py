"""The split step on a real offline dataset (mnist5k), and training on it through the pipeline."""

import json
import subprocess
import sys

import numpy as np

from hetfl.config import RunSpec
from hetfl.data.build import make_split
from hetfl.data.traces import make_traces
from hetfl.pipeline import run_training


def test_mnist5k_one_label_per_device_split_and_training(tmp_path):
    split_spec = {"dataset": "mnist5k", "num_devices": 10, "test_fraction": 0.2,
                  "sizes": {"distribution": "equal"}, "partition": {"label_skew": "pathological", "m": 1},
                  "data_dir": None}
    manifest = make_split(tmp_path / "split.npz", split_spec, seed=0)
    hist = np.asarray(manifest["label_histogram"])
    assert ((hist > 0).sum(axis=1) == 1).all()  # Ruan et al.: one label per device
    # mnist5k keeps a fixed stratified 20 % as its global test split: 4,000 are dealt, none lost
    assert hist.sum() + sum(manifest["test_sizes"]) == 4000
    make_traces(tmp_path / "t.npz", traceset="T5", num_devices=10, rounds=2, seed=0)
    spec = RunSpec(experiment="e", run="r", table="none", dataset="mnist5k", setting="NIID", alpha=0, beta=0,
                   iid=False, num_devices=10, sizes={"distribution": "equal"}, test_fraction=0.2,
                   model="logreg", algorithm="fedavg", scheme="C", num_traces=5,
                   trace_order=("T_0", "T_30", "T_50", "T_70", "T_90"), local_epochs=1, batch_size=10,
                   eta0=0.1, rounds=2, eval_every=1, seed=0, partition=split_spec["partition"])
    result = run_training(spec, tmp_path / "split.npz", tmp_path / "t.npz", tmp_path / "run",
                          progress=False)
    assert result.status == "ok"
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["spec"]["partition"] == {"label_skew": "pathological", "m": 1}


def test_split_describe_prints_and_draws(tmp_path):
    out = tmp_path / "d" / "split.npz"
    args = ["split", "--dataset", "digits", "--partition", '{"label_skew": "dirichlet", "alpha": 0.3}',
            "--sizes", '{"distribution": "equal"}', "--num-devices", "5", "--seed", "1", "--out", str(out),
            "--describe"]
    proc = subprocess.run([sys.executable, "-m", "hetfl.cli", *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "device" in proc.stdout and "train" in proc.stdout
    assert (tmp_path / "d" / "labels.png").read_bytes()[:4] == b"\x89PNG"


def test_image_model_on_token_ids_fails_before_training(tmp_path):
    import dataclasses

    import pytest

    from hetfl.data.federation import from_device_lists, save_federation

    rng = np.random.default_rng(0)
    xs = [rng.integers(0, 80, size=(6, 80)) for _ in range(2)]  # int64 token ids, as Shakespeare's
    ys = [rng.integers(0, 80, 6) for _ in range(2)]
    fed = from_device_lists(xs, ys, xs, ys, num_classes=80)
    assert fed.x_train.dtype == np.int64
    spec = RunSpec(experiment="e", run="r", table="none", dataset="shakespeare", setting="NIID", alpha=0,
                   beta=0, iid=False, num_devices=2, sizes={"distribution": "equal"}, test_fraction=0.2,
                   model="char_lstm", algorithm="fedavg", scheme="C", num_traces=1, trace_order=("T_0",),
                   local_epochs=1, batch_size=3, eta0=0.1, rounds=1, eval_every=1, seed=0)
    save_federation(fed, tmp_path / "split.npz", tmp_path / "manifest.json", {**spec.split_spec(), "seed": 0})
    make_traces(tmp_path / "t.npz", traceset="T1", num_devices=2, rounds=1, seed=0)
    with pytest.raises(ValueError, match=r"model 'logreg' cannot read the int64 token ids.*char_lstm"):
        run_training(dataclasses.replace(spec, model="logreg"), tmp_path / "split.npz", tmp_path / "t.npz",
                     tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_eval_every_changes_what_is_recorded_not_the_training(tmp_path):
    """The paper configs evaluate every 5th round (and the last) because their tables read the final round:
    that is only sound if evaluation draws nothing from the training's random streams. Same run at
    eval_every 1 and 3: the rounds both evaluated (3, 6 and the last, 7) and every per-round diagnostic agree
    exactly."""
    import dataclasses

    import pandas as pd

    split_spec = {"dataset": "synthetic", "alpha": 1.0, "beta": 1.0, "iid": False, "num_devices": 8,
                  "test_fraction": 0.2, "sizes": {"distribution": "pareto", "index": 0.5, "size": 20,
                                                  "max_size": 200}}
    make_split(tmp_path / "split.npz", split_spec, seed=0)
    make_traces(tmp_path / "t.npz", traceset="T3", num_devices=8, rounds=7, seed=0)
    spec = RunSpec(experiment="e", run="r", table="none", dataset="synthetic", setting="NIID", alpha=1.0,
                   beta=1.0, iid=False, num_devices=8, sizes=split_spec["sizes"], test_fraction=0.2,
                   model="logreg", algorithm="fedavg", scheme="B", num_traces=3,
                   trace_order=("T_0", "T_30", "T_50"), local_epochs=5, batch_size=20, eta0=1.0, rounds=7,
                   eval_every=1, seed=0)
    frames = {}
    for every in (1, 3):
        out = tmp_path / f"run{every}"
        assert run_training(dataclasses.replace(spec, eval_every=every), tmp_path / "split.npz",
                            tmp_path / "t.npz", out, progress=False).status == "ok"
        frames[every] = pd.read_parquet(out / "metrics.parquet").set_index(["metric", "round"])["value"]
    every_round, sparse = frames[1], frames[3]
    assert set(sparse.xs("test_accuracy").index) == {3, 6, 7}
    assert len(every_round.xs("test_accuracy")) == 7
    shared = sparse.index.intersection(every_round.index)
    assert len(shared) == len(sparse)  # nothing recorded at eval_every 3 is missing at eval_every 1
    pd.testing.assert_series_equal(sparse.loc[shared], every_round.loc[shared])
