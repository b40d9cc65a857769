"""python -m hetfl.gpucell: a paper cell's rounds on a random stand-in of its source, timed beside the
cluster's time model (the CPU case here; scripts/gpu-check runs it on CUDA)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from hetfl import gpucell
from hetfl.cluster import estimate_run, gpu_seconds_run
from hetfl.config import load_config
from hetfl.data import sources

CONFIG = """\
description: a two-setting CIFAR-10 cell for hetfl.gpucell's test
experiments:
  cell:
    table: bmta
    dataset: cifar10
    settings:
      IID: {partition: {label_skew: iid}}
      NIID: {partition: {label_skew: pathological, m: 3}}
    num_devices: 4
    sizes: {distribution: equal}
    model: cnn_cifar
    algorithms: [fedavg]
    schemes: [C]
    num_traces: [1]
    local_work: epochs
    batch_size: 16
    rounds: 10
    seeds: [0, 1]
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "cell.yaml"
    path.write_text(CONFIG)
    return path


def test_the_random_source_has_the_real_shape_and_counts_and_leaves_other_sources_alone(tmp_path):
    with gpucell.random_source("cifar10", (30, 7), seed=3):
        train = sources.load_source("cifar10", split="train")
        test = sources.load_source("cifar10", split="test")
        again = sources.load_source("cifar10", split="train")
        assert sources.has_split("cifar10", "test") and sources.load_source("digits").x.shape[1:] == (1, 8, 8)
    assert train.x.shape == (30, 3, 32, 32) and test.x.shape == (7, 3, 32, 32) and train.x.dtype == np.float32
    assert 0 <= train.x.min() and train.x.max() <= 1 and set(np.unique(train.y)) <= set(range(10))
    np.testing.assert_array_equal(train.x, again.x)  # seeded: a rerun makes the same split
    assert not np.array_equal(train.x[:7], test.x)
    assert sources.load_source is not None and sources.load_source.__module__ == "hetfl.data.sources"
    with pytest.raises(ValueError, match=r"dataset 'femnist' has no random stand-in; allowed: mnist, "):
        with gpucell.random_source("femnist"):
            pass


def test_runs_are_picked_one_per_setting_first_with_rounds_cut(tmp_path):
    specs = gpucell.pick_runs(load_config(_config(tmp_path)), None, 3, 4)
    assert [(s.setting, s.seed, s.rounds) for s in specs] == [("IID", 0, 4), ("NIID", 0, 4), ("IID", 1, 4)]
    assert [s.rounds for s in gpucell.pick_runs(load_config(_config(tmp_path)), None, 1, 50)] == [10]
    with pytest.raises(ValueError, match=r"--experiment has value 'nope', which is not allowed; allowed: ce"):
        gpucell.pick_runs(load_config(_config(tmp_path)), "nope", 1, 1)


def test_a_cell_trains_on_the_stand_in_and_is_set_beside_the_model(tmp_path, monkeypatch, capsys):
    """No copy of CIFAR-10 is on this machine (HETFL_DATA_DIR empty, the hub offline): the run trains on
    the stand-in, records every round, and the model's seconds are the CPU estimate of the cut run."""
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("HETFL_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "cell.json"
    assert gpucell.main([str(_config(tmp_path)), "--rounds", "2", "--samples", "80,20", "--device", "cpu",
                         "--json", str(out)]) == 0
    [record] = json.loads(out.read_text())
    assert record["status"] == "ok" and record["rounds_recorded"] == 2 and record["run"].startswith("IID_")
    [spec] = gpucell.pick_runs(load_config(_config(tmp_path)), None, 1, 2)
    assert record["modelled_s"] == pytest.approx(estimate_run(spec).seconds)
    assert record["modelled_over_measured"] is None  # the model counts CIFAR-10's 50,000, not the 80
    assert record["train_s"] > 0 and record["warmup_s"] > 0 and record["gpu_gflops"] is None
    assert "cell/IID_T1_C_s0: cnn_cifar on cifar10, 2 rounds on cpu: split " in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--samples", "80"], r"--samples has value '80', which is not allowed; allowed: TRAIN,TEST"),
    (["--rounds", "0"], r"--runs and --rounds take positive numbers; got 1 and 0"),
    (["--experiment", "x"], r"--experiment has value 'x'"),
])
def test_bad_options_are_refused_before_any_work(tmp_path, capsys, args, message):
    assert gpucell.main([str(_config(tmp_path)), "--device", "cpu", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpucell: error: ") and re.search(message, err)


def test_a_gpu_run_is_modelled_at_the_cards_rate_as_the_slurm_profile_reads_it():
    assert gpucell.card_gflops("cuda", {"HETFL_SLURM_GPU_GFLOPS": "19000"}) == 19_000
    assert gpucell.card_gflops("cuda", {}) == 43_400
    with pytest.raises(ValueError, match=r"HETFL_SLURM_GPU_GFLOPS has value '19T'"):
        gpucell.card_gflops("cuda", {"HETFL_SLURM_GPU_GFLOPS": "19T"})
    efl = Path(__file__).parents[1] / "workflow/config/paper/ma2022_efl_table2_cifar100.yaml"
    [spec] = gpucell.pick_runs(load_config(efl), None, 1, 3)
    assert gpucell.modelled_seconds(spec, "cuda", 19_000) == pytest.approx(gpu_seconds_run(spec, 19_000))
    assert gpucell.modelled_seconds(spec, "cpu", 19_000) == pytest.approx(estimate_run(spec).seconds)


def test_each_runs_record_is_written_as_it_ends(tmp_path, monkeypatch):
    """gpu-check's deadline can stop the check mid-run: the runs that ended are in the JSON already."""
    out, done = tmp_path / "cells.json", []

    def time_run(spec, work, device, gflops, sizes=None):
        if done:
            raise KeyboardInterrupt  # stopped in the second run
        done.append(spec.run)
        return {"experiment": spec.experiment, "run": spec.run, "model": spec.model, "dataset": spec.dataset,
                "rounds": spec.rounds, "device": device, "split_s": 1.0, "warmup_s": 1.0, "train_s": 2.0,
                "modelled_s": 3.0, "modelled_over_measured": None}

    monkeypatch.setattr(gpucell, "time_run", time_run)
    with pytest.raises(KeyboardInterrupt):
        gpucell.main([str(_config(tmp_path)), "--runs", "2", "--samples", "80,20", "--device", "cpu",
                      "--json", str(out)])
    assert [r["run"] for r in json.loads(out.read_text())] == done == ["IID_T1_C_s0"]


def test_the_text_stand_ins_are_dealt_as_leafs_speakers_and_users_in_text_order(tmp_path):
    """Shakespeare: every speaker one text of LEAF's mean size whose windows follow each other (the temporal
    holdout's check passes, and a split of it is made); Sent140: hashed word ids (0 is padding) and users of
    LEAF's mean size."""
    from hetfl.config import RunSpec
    from hetfl.data.build import make_split

    with gpucell.random_source("shakespeare", (20_000, 0)):
        text = sources.load_source("shakespeare", split="train")
        assert not sources.has_split("shakespeare", "test")
    assert text.x.shape == (20_000, 80) and text.x.dtype == np.int64
    np.testing.assert_array_equal(text.x[1, :-1], text.x[0, 1:])
    assert text.x[1, -1] == text.y[0]
    _, per = np.unique(text.client_ids, return_counts=True)
    assert list(per[:-1]) == [3_743] * 5 and per[-1] == 20_000 - 5 * 3_743
    sources.check_text_order(text, np.arange(len(text)))
    spec = RunSpec.from_dict({**gpucell.pick_runs(load_config(_config(tmp_path)), None, 1, 1)[0].to_dict(),
                              "dataset": "shakespeare", "model": "char_lstm", "num_devices": 3,
                              "partition": {"label_skew": "natural"}, "sizes": None, "global_test": False})
    with gpucell.random_source("shakespeare", (20_000, 0)):
        make_split(tmp_path / "split.npz", spec.split_spec(), 0)  # natural, temporal holdout
    with gpucell.random_source("sent140", (5_000, 100)):
        words = sources.load_source("sent140", split="train")
    assert words.x.shape == (5_000, 25) and words.x.min() >= 1 and words.x.max() < 20_000
    assert set(np.unique(words.y)) == {0, 1} and 5_000 / len(np.unique(words.client_ids)) < 3
