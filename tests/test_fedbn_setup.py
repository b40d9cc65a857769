"""FedFOR Tables 3-4 follow FedBN's set-up (docs/fedfor.md): the options where FedFOR's words leave FedBN's
code and hetfl's generic behaviour apart, each tested on a case small enough to work out by hand."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from conftest import train_as_workflow  # tests/conftest.py (pytest puts tests/ on the path)

from hetfl.config import ConfigError, expand_runs, validate_config

ROOT = Path(__file__).resolve().parents[1]
TABLE3 = yaml.safe_load((ROOT / "workflow/config/paper/tian2022_fedfor_table3.yaml").read_text())
TABLE4 = yaml.safe_load((ROOT / "workflow/config/paper/tian2022_fedfor_table4.yaml").read_text())
EXP3, EXP4 = "tian2022_fedfor_table3", "tian2022_fedfor_table4"


def _refused(cfg: dict, *parts: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    for part in parts:
        assert part in str(err.value)


# ---- training size: FedBN's DomainNet trains every domain on int(0.05 * min_data_len) ---------------------


def test_equal_counts_fraction_reaches_the_split_spec_and_is_refused_where_it_cannot_apply():
    cfg = copy.deepcopy(TABLE3)
    exp = cfg["experiments"][EXP3]
    exp["settings"] = {"E1": {"partition": {"label_skew": "natural", "equal_counts": True,
                                            "equal_counts_fraction": 0.05}, "local_epochs": 1, "rounds": 2}}
    runs = list(expand_runs(validate_config(cfg)))
    assert runs and all(r.split_spec()["partition"]["equal_counts_fraction"] == 0.05 for r in runs)
    bad = copy.deepcopy(cfg)
    bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_fraction"] = 0
    _refused(bad, f"'experiments.{EXP3}.settings.E1.partition.equal_counts_fraction'", "0")
    bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_fraction"] = 1.5
    _refused(bad, f"'experiments.{EXP3}.settings.E1.partition.equal_counts_fraction'", "1.5")
    bad["experiments"][EXP3]["settings"]["E1"]["partition"] = {"label_skew": "natural",
                                                               "equal_counts_fraction": 0.05}
    _refused(bad, f"'experiments.{EXP3}.settings.E1.partition.equal_counts_fraction' has value 0.05, "
                  "which is not allowed with label_skew \"natural\" and equal_counts false; allowed: a share "
                  "of the smallest domain's count only with label_skew \"natural\" and equal_counts true")


# ---- the test metric: FedBN averages the per-domain test accuracies --------------------------------------


class _Bias:
    """logits = x + b: a model whose predictions are worked out by hand (b is [C], or [N, C] per device)."""

    def logits(self, params, x):
        return x + params[0]


def test_domain_mean_is_the_mean_of_per_domain_accuracies_not_the_pooled_one():
    """Three domains with 1, 1 and 4 test samples: correct 1/1, 0/1, 1/4. FedBN's metric is
    (1 + 0 + 0.25) / 3 = 0.4167; pooled it is 2/6 = 0.333. A sample of a domain no device holds (-1) is left
    out. With a model per device (FedBN's local BN), device 1's own bias makes its sample right:
    (1 + 1 + 0.25) / 3 = 0.75."""
    import torch

    from hetfl.engine.runner import _domain_mean

    eye = torch.eye(3)
    x = torch.stack([eye[0], eye[0], eye[0], eye[1], eye[1], eye[1], eye[0]])
    y = torch.tensor([0, 1, 0, 0, 0, 0, 0])
    dev = torch.tensor([0, 1, 2, 2, 2, 2, -1])
    glob = [torch.zeros(3)]
    got = _domain_mean(_Bias(), glob, False, x, y, dev)
    assert got["global_test_accuracy"] == pytest.approx((1 + 0 + 0.25) / 3)
    pooled = float((_Bias().logits(glob, x[:6]).argmax(1) == y[:6]).float().mean())
    assert pooled == pytest.approx(2 / 6)
    own = [torch.zeros(3, 3)]
    own[0][1, 1] = 2.0  # device 1 predicts class 1
    assert _domain_mean(_Bias(), own, True, x, y, dev)["global_test_accuracy"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="no global test sample belongs to a domain a device holds"):
        _domain_mean(_Bias(), glob, False, x, y, torch.full((7,), -1))


def test_train_reports_the_domain_mean_with_the_pooled_value_beside_it():
    import numpy as np
    import torch

    from hetfl.data.federation import from_device_lists
    from hetfl.engine.evaluate import per_sample
    from hetfl.engine.runner import TrainSettings, train
    from hetfl.models import make_model

    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 12)).astype(np.float32) for n in (8, 8, 8)]
    ys = [rng.integers(0, 3, 8) for _ in xs]
    gx = rng.normal(size=(12, 12)).astype(np.float32)
    gy = rng.integers(0, 3, 12)
    gd = np.array([0] * 2 + [1] * 3 + [2] * 7)  # test sizes 2, 3, 7: pooled and domain mean differ
    fed = from_device_lists(xs, ys, [x[:2] for x in xs], [y[:2] for y in ys], num_classes=3,
                            global_test=(gx, gy), global_devices=gd)
    model = make_model("mlp", (12,), 3, hidden=[4])
    cfg = TrainSettings("B", 1, 4, 0.1, 2, lr_schedule="constant", global_test_average="domains")
    res = train(model, fed, np.ones((2, 3)), cfg)
    rec = {m: v for t, m, v in res.records if t == 2}
    correct, _ = per_sample(model, res.params, torch.from_numpy(gx), torch.from_numpy(gy))
    per_domain = [float(correct[torch.from_numpy(gd == k)].mean()) for k in range(3)]
    assert rec["global_test_accuracy"] == pytest.approx(np.mean(per_domain))
    assert rec["global_test_pooled_accuracy"] == pytest.approx(float(correct.mean()))
    pooled = train(model, fed, np.ones((2, 3)), TrainSettings("B", 1, 4, 0.1, 2, lr_schedule="constant"))
    assert {m: v for t, m, v in pooled.records if t == 2}["global_test_accuracy"] == pytest.approx(
        float(correct.mean()))
    # a subsample of the global test set keeps every sample's domain with it
    import dataclasses

    from hetfl.engine.evaluate import eval_subsample

    sub = train(model, fed, np.ones((2, 3)), dataclasses.replace(cfg, global_test_samples=6))
    keep = eval_subsample(12, 6, cfg.seed)
    held = sorted(set(gd[keep].tolist()))
    want = np.mean([float(correct[torch.from_numpy(keep[gd[keep] == k])].mean()) for k in held])
    assert {m: v for t, m, v in sub.records if t == 2}["global_test_accuracy"] == pytest.approx(want)
    with pytest.raises(ValueError, match="needs a split that records the domain"):
        train(model, from_device_lists(xs, ys, [x[:2] for x in xs], [y[:2] for y in ys], num_classes=3,
                                       global_test=(gx, gy)), np.ones((2, 3)), cfg)


def _prepared_copy(root, source, names, train, test, side):
    """A prepared copy of a per-domain source (python -m hetfl.data.sources prepare's layout): RGB
    side×side images of len(names) domains, train and test sizes per domain, random pixels and labels."""
    import datasets
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)

    def split(sizes):
        doms = [d for d, n in zip(names, sizes, strict=True) for _ in range(n)]
        pixels = rng.integers(0, 256, (len(doms), side, side, 3), dtype=np.uint8)
        feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10),
                                   "domain": datasets.Value("string")})
        return datasets.Dataset.from_dict({"image": [Image.fromarray(p) for p in pixels],
                                           "label": rng.integers(0, 10, len(doms)).tolist(),
                                           "domain": doms}, features=feats)

    datasets.DatasetDict({"train": split(train), "test": split(test)}).save_to_disk(str(root / source))


def _fake_domainnet(root, train=(6, 4, 5), test=(1, 2, 3)):
    """A prepared domainnet copy of three domains (train and test sizes per domain)."""
    names = ["clipart", "infograph", "painting"]
    _prepared_copy(root, "domainnet", names, train, test, side=64)
    return names


def test_a_domains_split_records_the_device_of_every_global_test_sample(tmp_path):
    """hetfl split on a fake DomainNet: with global_test_average 'domains' the split keeps, per global test
    sample, the device that holds its domain (-1 for a domain no device holds); a pooled split is as
    before (no such array). equal_counts_fraction 0.5 of the smallest domain (4) keeps 2 per domain."""
    import numpy as np

    from hetfl.data.build import make_split
    from hetfl.data.federation import load_federation
    from hetfl.data.sources import load_source

    names = _fake_domainnet(tmp_path)
    test = load_source("domainnet", data_dir=tmp_path, split="test")
    spec = {"dataset": "domainnet", "num_devices": 3, "test_fraction": 0.5,
            "sizes": {"distribution": "equal"},
            "partition": {"label_skew": "natural", "equal_counts": True, "equal_counts_fraction": 0.5},
            "data_dir": str(tmp_path), "global_test": True}
    make_split(tmp_path / "pooled" / "split.npz", spec, seed=0)
    assert load_federation(tmp_path / "pooled" / "split.npz").d_global is None
    manifest = make_split(tmp_path / "domains" / "split.npz", {**spec, "global_test_average": "domains"}, 0)
    assert manifest["train_sizes"] == [1, 1, 1] and manifest["test_sizes"] == [1, 1, 1]
    fed = load_federation(tmp_path / "domains" / "split.npz")
    assert fed.d_global.tolist() == [names.index(str(d)) for d in test.client_ids]
    two = make_split(tmp_path / "two" / "split.npz",
                     {**spec, "num_devices": 2, "global_test_average": "domains"}, 0)
    fed2 = load_federation(tmp_path / "two" / "split.npz")
    assert two["num_devices"] == 2 and sorted(set(fed2.d_global.tolist())) == [-1, 0, 1]
    assert np.sum(fed2.d_global == -1) in (1, 2, 3)  # the test samples of the domain left out


def test_global_test_average_is_validated_naming_key_value_and_allowed():
    cfg = copy.deepcopy(TABLE4)
    cfg["experiments"][EXP4]["global_test_average"] = "domains"
    runs = list(expand_runs(validate_config(cfg)))
    assert runs and all(r.global_test_average == "domains"
                        and r.split_spec()["global_test_average"] == "domains" for r in runs)
    cfg["experiments"][EXP4]["global_test_average"] = "per_domain"
    _refused(cfg, f"'experiments.{EXP4}.global_test_average'", "per_domain", "pooled", "domains")
    quick = yaml.safe_load((ROOT / "workflow/config/quick.yaml").read_text())
    name = next(n for n, e in quick["experiments"].items() if e["dataset"] == "mnist5k")
    quick["experiments"][name]["global_test_average"] = "domains"
    _refused(quick, f"'experiments.{name}.global_test_average' has value \"domains\", which is not "
                    "allowed with dataset \"mnist5k\"",
                    "allowed: \"pooled\", or \"domains\" only for a source with a domain column")


# ---- which images: FedBN keeps the first ones of every domain --------------------------------------------


def test_equal_counts_pick_reaches_the_split_spec_and_is_refused_where_it_cannot_apply():
    cfg = copy.deepcopy(TABLE3)
    exp = cfg["experiments"][EXP3]
    exp["settings"] = {"E1": {"partition": {"label_skew": "natural", "equal_counts": True,
                                            "equal_counts_pick": "first"}, "local_epochs": 1, "rounds": 2}}
    runs = list(expand_runs(validate_config(cfg)))
    assert runs and all(r.split_spec()["partition"]["equal_counts_pick"] == "first" for r in runs)
    bad = copy.deepcopy(cfg)
    bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_pick"] = "last"
    _refused(bad, f"experiments.{EXP3}.settings.E1.partition.equal_counts_pick", "last", "random", "first")
    bad["experiments"][EXP3]["settings"]["E1"]["partition"] = {"label_skew": "natural",
                                                               "equal_counts_pick": "first"}
    _refused(bad, f"'experiments.{EXP3}.settings.E1.partition.equal_counts_pick' has value \"first\", "
                  "which is not allowed with label_skew \"natural\" and equal_counts false; allowed: "
                  "\"first\" only with label_skew \"natural\" and equal_counts true")


# ---- the local holdout: FedBN validates on images apart from the ones it trains on -----------------------


def _split(tmp_path, name, partition, test_fraction=0.5, seed=0):
    from hetfl.data.build import make_split
    from hetfl.data.federation import load_federation

    spec = {"dataset": "domainnet", "num_devices": 3, "test_fraction": test_fraction,
            "sizes": {"distribution": "equal"}, "partition": partition, "data_dir": str(tmp_path),
            "global_test": True}
    make_split(tmp_path / name / "split.npz", spec, seed=seed)
    return load_federation(tmp_path / name / "split.npz")


def test_rest_holdout_trains_on_fedbns_first_images_and_tests_on_its_validation_images(tmp_path):
    """A fake DomainNet of three domains with 20, 10 and 16 training images in that order (clipart 0..19,
    infograph 20..29, painting 30..45). FedBN (fed_domainnet.py:156-161): m = int(0.5 · 10) = 5 here, train
    on each domain's first 5, validate on its last 5. With pick "first", holdout "rest" and test_fraction
    0.5 the split is exactly that; holdout "kept" (hetfl before) cuts the test part out of the 5 kept, so
    every domain trains on 3 (n_test = round(0.5 · 5) = 2)."""
    import numpy as np

    from hetfl.data.sources import load_source

    _fake_domainnet(tmp_path, train=(20, 10, 16))
    src = load_source("domainnet", data_dir=tmp_path)
    first = {"label_skew": "natural", "equal_counts": True, "equal_counts_fraction": 0.5,
             "equal_counts_pick": "first"}
    rest = {**first, "equal_counts_holdout": "rest"}
    fed = _split(tmp_path, "rest", rest)
    starts, ends = (0, 20, 30), (20, 30, 46)
    want_train = np.concatenate([np.arange(s, s + 5) for s in starts])
    want_test = np.concatenate([np.arange(e - 5, e) for e in ends])
    assert fed.train_sizes.tolist() == [5, 5, 5] and fed.test_sizes.tolist() == [5, 5, 5]
    np.testing.assert_array_equal(fed.x_train, src.x[want_train])
    np.testing.assert_array_equal(fed.x_test, src.x[want_test])
    for seed in (1, 2):  # FedBN's images whatever the seed
        again = _split(tmp_path, f"rest{seed}", rest, seed=seed)
        np.testing.assert_array_equal(again.x_test, src.x[want_test])
    kept = _split(tmp_path, "kept", first)
    assert kept.train_sizes.tolist() == [3, 3, 3] and kept.test_sizes.tolist() == [2, 2, 2]
    rows = {r.tobytes() for r in np.concatenate([kept.x_train, kept.x_test])}
    assert rows == {r.tobytes() for r in src.x[want_train]}  # FedBN's 15 training images, cut in two
    rand = _split(tmp_path, "random", {**rest, "equal_counts_pick": "random"})
    assert rand.train_sizes.tolist() == [5, 5, 5] and rand.test_sizes.tolist() == [5, 5, 5]
    train_rows = {r.tobytes() for r in rand.x_train}
    assert not train_rows & {r.tobytes() for r in rand.x_test}  # apart from the training images


def test_equal_counts_holdout_is_validated_naming_key_value_and_allowed():
    cfg = copy.deepcopy(TABLE3)
    exp = cfg["experiments"][EXP3]
    exp["settings"] = {"E1": {"partition": {"label_skew": "natural", "equal_counts": True,
                                            "equal_counts_fraction": 0.05, "equal_counts_holdout": "rest"},
                              "local_epochs": 1, "rounds": 2}}
    runs = list(expand_runs(validate_config(cfg)))
    assert runs and all(r.split_spec()["partition"]["equal_counts_holdout"] == "rest" for r in runs)
    key = f"experiments.{EXP3}.settings.E1.partition.equal_counts_holdout"
    bad = copy.deepcopy(cfg)
    bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_holdout"] = "apart"
    _refused(bad, key, "apart", "kept", "rest")
    del bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_fraction"]
    bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_holdout"] = "rest"
    _refused(bad, f"'{key}' has value \"rest\", which is not allowed with equal_counts_fraction 1 (the "
                  "smallest domain keeps all of its samples and has none left to hold out); allowed: "
                  "\"rest\" with equal_counts_fraction below 1, or \"kept\"")
    bad["experiments"][EXP3]["settings"]["E1"]["partition"] = {"label_skew": "natural",
                                                               "equal_counts_holdout": "rest"}
    _refused(bad, f"'{key}' has value \"rest\", which is not allowed with label_skew \"natural\" and "
                  "equal_counts false; allowed: \"rest\" only with label_skew \"natural\" and equal_counts "
                  "true")


def test_a_rest_holdout_is_refused_where_the_local_test_part_is_each_devices_last_samples():
    cfg = copy.deepcopy(TABLE3)
    exp = cfg["experiments"][EXP3]
    exp.update(dataset="shakespeare", global_test_average="pooled", model="char_lstm", num_devices=3,
               settings={"E1": {"partition": {"label_skew": "natural", "equal_counts": True,
                                              "equal_counts_fraction": 0.5, "equal_counts_holdout": "rest"},
                                "local_epochs": 1, "rounds": 2}})
    _refused(cfg, f"'experiments.{EXP3}.settings.E1.partition.equal_counts_holdout' has value \"rest\", "
                  "which is not allowed with dataset \"shakespeare\" (its local test part is each device's "
                  "last samples); allowed: \"kept\"")


# ---- which accuracy the tables report: FedBN's DomainNet validates, its Digits tests ----------------------


def test_validation_accuracy_reaches_the_runs_and_is_refused_where_it_cannot_apply():
    cfg = copy.deepcopy(TABLE3)
    cfg["experiments"][EXP3]["validation_accuracy"] = "test_at_best_holdout"
    runs = list(expand_runs(validate_config(cfg)))
    assert runs and all(r.validation_accuracy == "test_at_best_holdout"
                        and r.to_dict()["validation_accuracy"] == "test_at_best_holdout" for r in runs)
    key = f"'experiments.{EXP3}.validation_accuracy'"
    bad = copy.deepcopy(cfg)
    bad["experiments"][EXP3]["validation_accuracy"] = "validation"
    _refused(bad, key.strip("'"), "validation", "test_split", "holdout", "test_at_best_holdout")
    bad["experiments"][EXP3].update(validation_accuracy="test_at_best_holdout", global_test=False,
                                    global_test_average="pooled")
    _refused(bad, f"{key} has value \"test_at_best_holdout\", which is not allowed with global_test false "
                  "(no test split is scored); allowed: \"holdout\", or global_test true")
    quick = yaml.safe_load((ROOT / "workflow/config/quick.yaml").read_text())
    name = next(n for n, e in quick["experiments"].items() if e["table"] == "bmta")
    quick["experiments"][name]["validation_accuracy"] = "holdout"
    _refused(quick, f"'experiments.{name}.validation_accuracy' has value \"holdout\", which is not allowed "
                    "with table bmta (it does not read it); allowed: \"holdout\" only with table fedfor_by_e "
                    "or fedfor_concept_shift")


# ---- the readings axis of FedFOR's tables: every reading above in one table ------------------------------


def test_the_readings_axis_varies_one_fedbn_reading_at_a_time_and_is_validated():
    cfg = copy.deepcopy(TABLE3)
    exp = cfg["experiments"][EXP3]
    exp["settings"] = {"E1": {"partition": {"label_skew": "natural", "equal_counts": True,
                                            "equal_counts_fraction": 0.05}, "local_epochs": 1, "rounds": 2}}
    exp["algorithms"] = ["fedbn", "fedfor"]
    exp["readings"] = {"equal_counts_fraction": [1], "equal_counts_pick": ["first"],
                       "equal_counts_holdout": ["rest"], "global_test_average": ["pooled"]}
    runs = list(expand_runs(validate_config(cfg)))
    own = [r for r in runs if not r.reading]
    assert len(own) == 2 * 3 and len(runs) == 5 * len(own)
    by = {r.reading: r for r in runs if r.reading and r.algorithm == "fedbn" and r.seed == 0}
    base = next(r for r in own if r.algorithm == "fedbn" and r.seed == 0)
    assert by["equal_counts_fraction=1"].partition == {**base.partition, "equal_counts_fraction": 1}
    assert by["equal_counts_pick=first"].partition["equal_counts_pick"] == "first"
    assert by["equal_counts_holdout=rest"].partition["equal_counts_holdout"] == "rest"
    assert by["global_test_average=pooled"].global_test_average == "pooled"
    assert by["global_test_average=pooled"].partition == base.partition
    for reading, spec in by.items():  # each changes the data (or what the split records): a split of its own
        assert spec.run == f"{base.run}__{reading.replace('=', '-')}"
        assert spec.split_key == f"{EXP3}/E1__{reading.replace('=', '-')}/seed0" != base.split_key
    key = f"'experiments.{EXP3}.readings."
    bad = copy.deepcopy(cfg)
    bad["experiments"][EXP3]["readings"] = {"equal_counts_pick": ["random"]}
    _refused(bad, f"{key}equal_counts_pick' has value \"random\", which changes no run")
    bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_holdout"] = "rest"
    bad["experiments"][EXP3]["readings"] = {"equal_counts_fraction": [1]}
    _refused(bad, f"{key}equal_counts_fraction' has value 1, which is not allowed with setting E1's "
                  "partition", "needs equal_counts_fraction < 1",
             "allowed: a fraction below 1, or equal_counts_holdout='kept'")
    bad["experiments"][EXP3]["readings"] = {"equal_counts_pick": ["last"]}
    _refused(bad, "equal_counts_pick", "last", "random", "first")
    quick = yaml.safe_load((ROOT / "workflow/config/quick.yaml").read_text())
    name = next(n for n, e in quick["experiments"].items() if e["table"] == "bmta")
    quick["experiments"][name]["readings"] = {"local_work": ["epochs"]}
    _refused(quick, f"'experiments.{name}.readings' is not allowed with table bmta (it has no readings "
                    "table); allowed: readings only with table accuracy_difference, fast_reboot, "
                    "crossing_epochs, fedfor_by_e, fedfor_concept_shift or none")


def test_every_table_with_readings_has_a_readings_builder():
    from hetfl.config import READINGS_TABLES
    from hetfl.reports.tables import READINGS_BUILDERS

    assert set(READINGS_TABLES) == set(READINGS_BUILDERS)


def test_the_fedfor_readings_table_shows_every_reading_of_fedbns_setup_in_one_table(tmp_path):
    """Table 3's set-up (FedBN's first images, validation images apart from them, the best validation
    accuracy) on a fake DomainNet (three domains, 20, 10 and 16 training images; half of the smallest kept),
    two rounds, FedBN and FedFOR, two seeds, with each of FedBN's readings on the readings axis: `hetfl
    table fedfor_by_e --readings` shows every cell under each, and under the two other validation
    accuracies read from the same runs; the main table reads only the runs under the experiment's own
    readings."""
    import numpy as np
    import pandas as pd

    from hetfl.reports.event_tables import curve
    from hetfl.reports.fedfor import running_best
    from hetfl.reports.tables import build_table

    _fake_domainnet(tmp_path, train=(20, 10, 16), test=(4, 4, 4))
    cfg = copy.deepcopy(TABLE3)
    exp = cfg["experiments"][EXP3]
    fedbn = {**exp["settings"]["E1"]["partition"], "equal_counts_fraction": 0.5}
    # a narrow cnn_bn: the table reads the runs' curves whatever the model (the full one: 52 s of 20 runs)
    exp.update(data_dir=str(tmp_path), num_devices=3, algorithms=["fedbn", "fedfor"], seeds=[0, 1],
               model_params={"channels": [4, 8], "hidden": [16]}, batch_size=4,
               settings={"E1": {"partition": fedbn, "local_epochs": 1, "rounds": 2}},
               readings={"equal_counts_fraction": [0.25], "equal_counts_pick": ["random"],
                         "equal_counts_holdout": ["kept"], "global_test_average": ["pooled"]})
    assert exp["validation_accuracy"] == "holdout" and fedbn["equal_counts_holdout"] == "rest"
    dirs = [out for _, out, _ in train_as_workflow(expand_runs(validate_config(cfg)), tmp_path)]
    out = build_table("fedfor_by_e", dirs, tmp_path / "fedfor_by_e_readings", readings=True)
    tidy = pd.read_csv(f"{out}.csv")
    assert list(dict.fromkeys(tidy["reading"])) == [
        "paper/default", "equal_counts_fraction=0.25", "equal_counts_holdout=kept",
        "equal_counts_pick=random", "global_test_average=pooled", "validation_accuracy=test_split",
        "validation_accuracy=test_at_best_holdout"]
    assert (tidy["n_seeds"] == 2).all()  # each reading's cells read two seeds, not every run of the method
    cell = tidy[(tidy["method"] == "FedBN") & (tidy["measure"] == "best@full")].set_index("reading")
    runs = tmp_path / "results" / EXP3

    def run(seed, reading=""):
        return runs / (f"fedbn_E1_T1_B_s{seed}" + (f"__{reading.replace('=', '-')}" if reading else ""))

    def best(metric, reading=""):
        return np.mean([100 * curve(run(s, reading), metric).max() for s in (0, 1)])

    assert cell.loc["paper/default", "reproduced_mean"] == pytest.approx(best("mean_client_accuracy"))
    assert cell.loc["validation_accuracy=test_split", "reproduced_mean"] == pytest.approx(
        best("global_test_accuracy"))
    pairs = [(curve(run(s), "global_test_accuracy"), curve(run(s), "mean_client_accuracy")) for s in (0, 1)]
    at_best = [100 * running_best(test, val).iloc[-1] for test, val in pairs]
    assert cell.loc["validation_accuracy=test_at_best_holdout", "reproduced_mean"] == pytest.approx(
        np.mean(at_best))
    assert cell.loc["equal_counts_pick=random", "reproduced_mean"] == pytest.approx(
        best("mean_client_accuracy", "equal_counts_pick=random"))
    for s in (0, 1):  # the pooled reading's runs train as the default ones and score what they record beside
        pd.testing.assert_series_equal(curve(run(s, "global_test_average=pooled"), "global_test_accuracy"),
                                       curve(run(s), "global_test_pooled_accuracy"), check_names=False)
    md = Path(f"{out}.md").read_text()
    assert "Sensitivity of fedfor_by_e (FedFOR Tables 3-5)" in md and "| equal_counts_holdout=kept " in md
    from hetfl.reports.report_pages import verdict_line

    # the report's page counts it per reading, as the Ruan tables' readings tables
    line = verdict_line("fedfor_by_e_readings", Path(f"{out}.csv"))
    assert line.startswith("per reading, paper/default: ") and "; equal_counts_pick=random: " in line
    main = build_table("fedfor_by_e", dirs, tmp_path / "fedfor_by_e")
    assert (pd.read_csv(f"{main}.csv")["n_seeds"] == 2).all()


# ---- the paper configs follow FedBN's code; the checks config runs the other readings ----------------------


def test_tables_3_and_5_train_on_fedbns_images_and_validate_on_its_validation_images():
    """Tables 3 and 5 (DomainNet): FedBN's first 5 % of each domain, its validation images apart from them
    (as many: test_fraction 0.5), its best round picked on them; Table 4 (Digits) tests on the test split,
    as FedBN's fed_digits.py, and trains on all of its 743 images (no local holdout: test_fraction 0)."""
    from hetfl.config import load_config

    fedbn = {"label_skew": "natural", "equal_counts": True, "equal_counts_fraction": 0.05,
             "equal_counts_pick": "first", "equal_counts_holdout": "rest"}
    for n in (3, 5):
        runs = list(expand_runs(load_config(ROOT / f"workflow/config/paper/tian2022_fedfor_table{n}.yaml")))
        assert all(fedbn.items() <= r.partition.items() and r.test_fraction == 0.5
                   and r.validation_accuracy == "holdout" and r.global_test_average == "domains"
                   for r in runs), n
    runs = list(expand_runs(load_config(ROOT / "workflow/config/paper/tian2022_fedfor_table4.yaml")))
    assert all(r.partition["equal_counts"] and "equal_counts_holdout" not in r.partition
               and r.test_fraction == 0 and r.validation_accuracy == "test_split" for r in runs)


def test_the_checks_config_is_table_3_with_a_readings_axis():
    from hetfl.config import load_config

    checks = yaml.safe_load((ROOT / "workflow/config/checks/fedfor_fedbn_readings.yaml").read_text())
    exp = dict(checks["experiments"][EXP3])
    readings, grid = exp.pop("readings"), exp.pop("readings_grid")
    assert exp == TABLE3["experiments"][EXP3]  # the paper config's experiment, runs shared with it
    assert set(readings) == {"equal_counts_fraction", "equal_counts_pick", "equal_counts_holdout",
                             "global_test_average"} and grid == {"settings": ["E1"]}
    runs = list(expand_runs(load_config(ROOT / "workflow/config/checks/fedfor_fedbn_readings.yaml")))
    assert len([r for r in runs if not r.reading]) == 5 * 5 * 3
    variants = [r for r in runs if r.reading]
    assert len(variants) == 4 * 5 * 3 and {r.setting for r in variants} == {"E1"}


# ---- no local holdout: FedBN's Digits trains on all 743 images of a domain ---------------------------------


def _fake_digit5(root, train=(6, 6), test=(3, 3), names=("MNIST", "SVHN")):
    """A prepared digit5 copy (3×28×28 RGB) of len(names) domains, train and test sizes per domain."""
    _prepared_copy(root, "digit5", names, train, test, side=28)


def _table4(**changes):
    cfg = copy.deepcopy(TABLE4)
    cfg["experiments"][EXP4].update(changes)
    return cfg


def test_no_local_holdout_is_allowed_where_the_test_split_is_reported_and_refused_elsewhere():
    """test_fraction 0: every device trains on all of its samples. The schema refused it (exclusiveMinimum
    0); it is allowed where the only accuracy read is the source's own test split, and refused, naming key,
    value and what is allowed, where a holdout metric would be read or nothing would be scored."""
    runs = list(expand_runs(validate_config(_table4(test_fraction=0))))
    assert runs and all(r.test_fraction == 0.0 and isinstance(r.test_fraction, float)
                        and r.split_spec()["test_fraction"] == 0.0 for r in runs)
    key = f"'experiments.{EXP4}.test_fraction' has value 0 (no local holdout), which is not allowed"
    _refused(_table4(test_fraction=0, validation_accuracy="holdout"),
             key, "with validation_accuracy \"holdout\"", "allowed: a test_fraction in (0, 1), or 0 with "
             "validation_accuracy \"test_split\"")
    _refused(_table4(test_fraction=0, global_test=False, global_test_average="pooled"),
             key, "with global_test false", "allowed: a test_fraction in (0, 1), or 0 with global_test true")
    _refused(_table4(test_fraction=0, table="bmta"), key, "with table bmta",
             "or 0 with table fedfor_by_e or fedfor_concept_shift under validation_accuracy \"test_split\"")
    rest = _table4(test_fraction=0)
    rest["experiments"][EXP4]["settings"] = {"E1": {"partition": {
        "label_skew": "natural", "equal_counts": True, "equal_counts_fraction": 0.5,
        "equal_counts_holdout": "rest"}, "local_epochs": 1, "rounds": 2}}
    _refused(rest, key, f"experiments.{EXP4}.settings.E1.partition.equal_counts_holdout \"rest\"",
             "allowed: a test_fraction in (0, 1) with \"rest\", or 0 with \"kept\"")
    readings = _table4(test_fraction=0, readings={"equal_counts_holdout": ["rest"]})
    _refused(readings, key, f"experiments.{EXP4}.readings.equal_counts_holdout \"rest\"")
    quick = yaml.safe_load((ROOT / "workflow/config/quick.yaml").read_text())
    name = next(n for n, e in quick["experiments"].items() if e["dataset"] == "synthetic")
    quick["experiments"][name]["test_fraction"] = 0
    _refused(quick, f"'experiments.{name}.test_fraction' has value 0 (no local holdout)",
             "with dataset \"synthetic\" (it has no test split of its own")
    _refused(_table4(test_fraction=-0.1), f"experiments.{EXP4}.test_fraction", "-0.1")


def test_a_split_without_a_local_holdout_trains_on_every_image(tmp_path):
    """A digit5 copy holding FedBN's training images only (here 6 per domain, FedBN's 743): with test_fraction
    0.1 a device trained on 5 of its 6 (Table 4 before: 669 of 743), with 0 on all 6, and its local test part
    is empty. Without the source's test split, or under equal_counts_holdout rest, it is refused."""
    import numpy as np

    from hetfl.data.build import make_split
    from hetfl.data.federation import load_federation
    from hetfl.data.sources import load_source

    _fake_digit5(tmp_path)
    src = load_source("digit5", data_dir=tmp_path)
    spec = {"dataset": "digit5", "num_devices": 2, "sizes": {"distribution": "equal"},
            "partition": {"label_skew": "natural", "equal_counts": True}, "data_dir": str(tmp_path),
            "global_test": True, "global_test_average": "domains"}
    before = make_split(tmp_path / "tenth" / "split.npz", {**spec, "test_fraction": 0.1}, seed=0)
    assert before["train_sizes"] == [5, 5] and before["test_sizes"] == [1, 1]
    manifest = make_split(tmp_path / "none" / "split.npz", {**spec, "test_fraction": 0.0}, seed=0)
    assert manifest["train_sizes"] == [6, 6] and manifest["test_sizes"] == [0, 0]
    assert manifest["global_test_size"] == 6
    fed = load_federation(tmp_path / "none" / "split.npz")
    np.testing.assert_array_equal(fed.x_train, src.x)  # every training image, in the copy's order
    assert fed.x_test.shape == (0, 3, 28, 28) and fed.d_global.tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="split key 'test_fraction' has value 0 .* without its own test "
                                         "split"):
        make_split(tmp_path / "x" / "split.npz", {**spec, "test_fraction": 0.0, "global_test": False,
                                                  "global_test_average": "pooled"}, seed=0)
    rest = {**spec["partition"], "equal_counts_fraction": 0.5, "equal_counts_holdout": "rest"}
    with pytest.raises(ValueError, match="equal_counts_holdout 'rest'"):
        make_split(tmp_path / "y" / "split.npz", {**spec, "partition": rest, "test_fraction": 0.0}, seed=0)


def test_a_run_without_a_local_holdout_records_the_test_split_and_no_holdout_metric():
    """With no local test sample the pooled test accuracy and loss were NaN (a mean over nothing), the NaN
    test_loss marked the run diverged after its first round, and mean_client_accuracy was NaN. Now they are
    not recorded; test_samples is 0, and the global test split, the training loss and its fairness are."""
    import numpy as np

    from hetfl.data.federation import from_device_lists
    from hetfl.engine.runner import TrainSettings, train
    from hetfl.models import make_model
    from hetfl.pipeline import _for_model

    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(8, 12)).astype(np.float32) for _ in range(3)]
    ys = [rng.integers(0, 3, 8) for _ in xs]
    empty_x, empty_y = np.zeros((0, 12), np.float32), np.zeros(0, np.int64)
    fed = from_device_lists(xs, ys, [empty_x] * 3, [empty_y] * 3, num_classes=3,
                            global_test=(rng.normal(size=(9, 12)).astype(np.float32), rng.integers(0, 3, 9)),
                            global_devices=np.repeat(np.arange(3), 3))
    model = make_model("mlp", (12,), 3, hidden=[4])
    res = train(model, fed, np.ones((3, 3)), TrainSettings("B", 1, 4, 0.1, 3, lr_schedule="constant",
                                                           global_test_average="domains"))
    assert res.status == "ok" and res.rounds_done == 3
    names = {m for _, m, _ in res.records}
    assert not names & {"test_accuracy", "test_loss", "mean_client_accuracy"}
    assert {"global_test_accuracy", "global_test_pooled_accuracy", "train_loss", "client_loss_jain",
            "test_samples"} <= names
    assert all(v == 0 for _, m, v in res.records if m == "test_samples")
    images = from_device_lists([rng.normal(size=(4, 1, 8, 8)).astype(np.float32)] * 2, [np.zeros(4, int)] * 2,
                               [np.zeros((0, 1, 8, 8), np.float32)] * 2, [empty_y] * 2, num_classes=2)
    assert _for_model(images, "logreg").x_test.shape == (0, 64)  # reshape(0, -1) cannot infer the width


def test_table4_trains_every_domain_on_all_of_its_images_and_reports_the_test_split(tmp_path):
    """Table 4's config, at E = 1 for 2 rounds with FedBN and FedFOR, on a digit5 copy of five domains of 4
    training images each (FedBN's 743): every device trains on all 4 (with test_fraction 0.1, 3: FedBN's
    669 of 743), the runs finish, and the table reads the test split's per-domain mean."""
    import pandas as pd

    from hetfl.data.fedbn import DIGIT_SETS
    from hetfl.reports import fedfor
    from hetfl.reports.results import collect_runs

    _fake_digit5(tmp_path, train=(4,) * 5, test=(2,) * 5, names=DIGIT_SETS)
    cfg = copy.deepcopy(TABLE4)
    exp = cfg["experiments"][EXP4]
    exp.update(settings={"E1": {**exp["settings"]["E1"], "rounds": 2}}, algorithms=["fedbn", "fedfor"],
               seeds=[0], data_dir=str(tmp_path))
    specs = list(expand_runs(validate_config(cfg)))
    dirs = []
    for spec, out, result in train_as_workflow(specs, tmp_path):
        assert result.status == "ok", spec.run
        manifest = yaml.safe_load((tmp_path / "splits" / spec.split_key / "manifest.json").read_text())
        assert manifest["train_sizes"] == [4] * 5 and manifest["test_sizes"] == [0] * 5
        dirs.append(out)
    runs = collect_runs(dirs)
    assert "final_mean_client_accuracy" not in runs and runs["final_global_test_accuracy"].notna().all()
    tidy = fedfor.fedfor_by_e(runs.assign(dataset_name=runs["dataset"]))
    cell = tidy.set_index(["method", "measure"]).loc[("FedBN", "best@full")]
    metrics = pd.read_parquet(next(d for d in dirs if "fedbn" in d.name) / "metrics.parquet")
    best = metrics[metrics["metric"] == "global_test_accuracy"]["value"].max()
    assert cell["paper_table"] == "Table 4" and cell["reproduced_mean"] == pytest.approx(100 * best)
