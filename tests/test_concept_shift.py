"""FedFOR's concept-shift benchmark: the label maps, the engine training on them, and Table 5's measure."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from hetfl.data.concept_shift import label_maps, shift_rounds
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model
from hetfl.reports.fedfor import segment_best_mean


def test_maps_start_at_the_identity_and_change_one_class_at_a_time():
    maps = label_maps(10, 200, 0.05, seed=3)
    np.testing.assert_array_equal(maps[0], np.arange(10))
    shifts = shift_rounds(maps)
    assert shifts and all(t >= 2 for t in shifts)
    for t in shifts:  # one class, to a label other than its current one; the rest unchanged until then
        changed = np.flatnonzero(maps[t - 1] != maps[t - 2])
        assert len(changed) == 1
    for t in range(2, 201):
        if t not in shifts:
            np.testing.assert_array_equal(maps[t - 1], maps[t - 2])
    np.testing.assert_array_equal(maps, label_maps(10, 200, 0.05, seed=3))


def test_five_percent_gives_about_ten_shifts_in_200_rounds():
    counts = [len(shift_rounds(label_maps(10, 200, 0.05, seed=s))) for s in range(300)]
    assert 9.0 < np.mean(counts) < 10.9  # Binomial(199, 0.05): mean 9.95, sd of the mean 0.18
    assert shift_rounds(label_maps(5, 50, 0.0, seed=0)) == []
    assert shift_rounds(label_maps(5, 50, 1.0, seed=0)) == list(range(2, 51))


def test_the_engine_trains_and_evaluates_on_the_round_s_labels(tiny_fed):
    """A map in force from round 1 (a fixed permutation) trains exactly like data relabelled beforehand."""
    perm = np.array([3, 1, 4, 0, 2, 9, 8, 7, 6, 5])
    model = make_model("logreg", 60, 10)
    cfg = TrainSettings(scheme="B", local_epochs=1, batch_size=10, eta0=0.5, rounds=3, seed=0)
    maps = np.tile(perm, (3, 1))
    shifted = train(model, tiny_fed, np.ones((3, 4)), dataclasses.replace(cfg, label_maps=maps))
    relabelled = dataclasses.replace(tiny_fed, y_train=perm[tiny_fed.y_train], y_test=perm[tiny_fed.y_test])
    plain = train(model, relabelled, np.ones((3, 4)), cfg)
    for a, b in zip(shifted.params, plain.params, strict=True):
        torch.testing.assert_close(a, b)
    assert [r for r in shifted.records if r[1] == "test_accuracy"] == \
        [r for r in plain.records if r[1] == "test_accuracy"]


def test_a_shifting_run_keeps_its_labels_to_itself_in_a_stacked_cell(tiny_fed):
    """Runs of a cell share Data; a run under concept shift relabels its own copies, so a run stacked with
    it trains exactly as it would alone, and the federation's arrays stay as they were."""
    from hetfl.engine.runner import Data, RunLoop, train_stacked

    y_before = tiny_fed.y_train.copy()
    cfg = TrainSettings(scheme="B", local_epochs=1, batch_size=10, eta0=0.5, rounds=3, seed=0)
    maps = label_maps(10, 3, 1.0, seed=0)  # a shift at rounds 2 and 3
    data = Data.of(tiny_fed)
    loops = [RunLoop(make_model("logreg", 60, 10), data, np.ones((3, 4)), c)
             for c in (cfg, dataclasses.replace(cfg, label_maps=maps))]
    plain, shifted = train_stacked(loops)
    alone = train(make_model("logreg", 60, 10), tiny_fed, np.ones((3, 4)), cfg)
    for a, b in zip(plain.params, alone.params, strict=True):
        torch.testing.assert_close(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(shifted.params, alone.params, strict=True))
    np.testing.assert_array_equal(tiny_fed.y_train, y_before)


def test_average_best_per_stretch_by_hand():
    acc = pd.Series([0.2, 0.5, 0.4, 0.1, 0.3, 0.6, 0.2], index=range(1, 8))
    # shifts at the start of rounds 4 and 6: stretches 1-3 (best 0.5), 4-5 (0.3), 6-7 (0.6)
    assert segment_best_mean(acc, [4, 6]) == pytest.approx(100 * (0.5 + 0.3 + 0.6) / 3)
    assert segment_best_mean(acc, []) == pytest.approx(60.0)


def _table5_runs(tmp_path, probability):
    import json

    from hetfl.config import expand_runs, validate_config
    from hetfl.reports.results import collect_runs

    cfg = {"experiments": {"cs": {
        "table": "fedfor_concept_shift", "dataset": "mnist5k", "num_devices": 3,
        "settings": {"E2": {"partition": {"label_skew": "iid"}, "local_epochs": 2}},
        "algorithms": ["fedbn", "fedfor"], "concept_shift": {"probability": probability}, "schemes": ["B"],
        "num_traces": [1], "rounds": 4, "seeds": [0, 1]}}}
    curves = {("fedbn", 0): [0.2, 0.4, 0.3, 0.5], ("fedbn", 1): [0.1, 0.5, 0.2, 0.4],
              ("fedfor", 0): [0.3, 0.5, 0.4, 0.6], ("fedfor", 1): [0.3, 0.6, 0.5, 0.6]}
    dirs = []
    for spec in expand_runs(validate_config(cfg)):
        d = tmp_path / f"{probability}_{spec.run}"
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        pd.DataFrame({"round": [1, 2, 3, 4], "metric": "global_test_accuracy",
                      "value": curves[(spec.algorithm, spec.seed)]}).to_parquet(d / "metrics.parquet")
        dirs.append(d)
    return collect_runs(dirs)


def test_table5_by_hand(tmp_path):
    from hetfl.reports.fedfor import concept_shift_table

    # no shift: one stretch, the best accuracy. FedBN 50, 50; FedFOR 60, 60 → Δ = 10 in both seeds
    still = concept_shift_table(_table5_runs(tmp_path, 0.0)).set_index("method")
    assert still.loc["FedBN", "reproduced_mean"] == pytest.approx(50.0)
    assert still.loc["FedFOR", "diff_mean"] == pytest.approx(10.0)
    assert still.loc["FedFOR", "paper"] == pytest.approx(47.28) and still.loc["FedFOR", "paper_diff"] == \
        pytest.approx(47.28 - 46.84)  # Table 5, E = 2
    assert still.loc["FedFOR", "verdict"] == "not comparable"  # the paper's FedFOR runs on FedBN's backbone
    # a shift every round: every round is a stretch, the measure is the mean accuracy
    moving = concept_shift_table(_table5_runs(tmp_path, 1.0)).set_index("method")
    assert moving.loc["FedBN", "reproduced_mean"] == pytest.approx(100 * (1.4 / 4 + 1.2 / 4) / 2)
    assert moving.loc["FedBN", "shifts_mean"] == 3


def test_table5_counts_the_pairs_of_its_delta(tmp_path):
    """FedBN's seed 1 is missing: FedFOR has 2 seeds but 1 pair (seed 0: 60 − 50 = 10), and the Δ cell's
    Interval was given n_seeds (2), not the pairs its difference is over."""
    from hetfl.reports.fedfor import concept_shift_table

    runs = _table5_runs(tmp_path, 0.0)
    runs = runs[~((runs["algorithm"] == "fedbn") & (runs["seed"] == 1))]
    t = concept_shift_table(runs).set_index("method")
    assert t.loc["FedFOR", "n_seeds"] == 2 and t.loc["FedFOR", "n_pairs"] == 1
    assert t.loc["FedFOR", "diff_mean"] == pytest.approx(10.0) and np.isnan(t.loc["FedFOR", "ci_low"])
    assert t.loc["FedBN", "n_pairs"] == 0


def test_table5_readings_table_reads_each_validation_accuracy(tmp_path):
    """Table 5's readings table (rule table_readings) with no reading run: the cells under the experiment's
    own validation accuracy (the test split) and under the other two, read from the same runs. No shift:
    FedBN's holdout curves 0.1, 0.3, 0.2, 0.25 and 0.4, 0.1, 0.1, 0.1 → holdout 30 and 40 (mean 35); the
    test split at those rounds (2 and 1): 0.4 and 0.1 → 25."""
    import json

    from hetfl.reports.tables import build_table

    _table5_runs(tmp_path, 0.0)
    holdout = {("fedbn", 0): [0.1, 0.3, 0.2, 0.25], ("fedbn", 1): [0.4, 0.1, 0.1, 0.1],
               ("fedfor", 0): [0.2, 0.2, 0.2, 0.2], ("fedfor", 1): [0.2, 0.2, 0.2, 0.2]}
    dirs = sorted(d for d in tmp_path.iterdir() if d.is_dir())
    for d in dirs:
        spec = json.loads((d / "run.json").read_text())["spec"]
        test = pd.read_parquet(d / "metrics.parquet")
        val = pd.DataFrame({"round": [1, 2, 3, 4], "metric": "mean_client_accuracy",
                            "value": holdout[(spec["algorithm"], spec["seed"])]})
        pd.concat([test, val]).to_parquet(d / "metrics.parquet")
    out = build_table("fedfor_concept_shift", dirs, tmp_path / "readings", readings=True)
    tidy = pd.read_csv(f"{out}.csv")
    fedbn = tidy[tidy["method"] == "FedBN"].set_index("reading")["reproduced_mean"]
    assert list(fedbn.index) == ["paper/default", "validation_accuracy=holdout",
                                 "validation_accuracy=test_at_best_holdout"]
    assert fedbn.tolist() == pytest.approx([50.0, 35.0, 25.0])
    assert "| validation_accuracy=test_at_best_holdout " in (tmp_path / "readings.md").read_text()
