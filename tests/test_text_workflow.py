"""LEAF Shakespeare and Sent140 end to end: LEAF JSON fixtures → `hetfl split` (natural split) → the
Snakemake workflow with char_lstm / sent_lstm. Never downloads: the data sets are tiny LEAF-format copies
written into tmp_path, and HF_HUB_OFFLINE is set."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from hetfl.config import ConfigError, expand_runs, validate_config
from hetfl.data.build import make_split
from hetfl.data.leaf import LEAF_LETTERS

ROOT = Path(__file__).resolve().parents[1]

# Sonnet 18 (public domain), repeated: every 80-character window is a Shakespeare sample, y the next char.
SONNET = ("Shall I compare thee to a summer's day? Thou art more lovely and more temperate: "
          "Rough winds do shake the darling buds of May, And summer's lease hath all too short a date; "
          "Sometime too hot the eye of heaven shines, And often is his gold complexion dimm'd; "
          "And every fair from fair sometime declines, By chance or nature's changing course untrimm'd. ") * 3
SPEAKERS = [f"THE_TEMPEST_{n}" for n in ("PROSPERO", "MIRANDA", "ARIEL", "CALIBAN", "FERDINAND", "GONZALO")]
USERS = ["alice_tw", "bob_tw", "carol_tw", "dan_tw", "erin_tw", "frank_tw"]
GOOD = ["love", "great", "happy", "awesome", "fun", "sunny"]
BAD = ["hate", "awful", "sad", "rainy", "tired", "broken"]
NEUTRAL = ["the", "day", "my", "phone", "work", "today", "is", "was", "so", "again"]


def _write_leaf(path: Path, users: list[str], xs: list[list], ys: list[list]) -> None:
    """One LEAF JSON file ({"users", "num_samples", "user_data"}), as LEAF's preprocessing writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {u: {"x": x, "y": y} for u, x, y in zip(users, xs, ys, strict=True)}
    path.write_text(json.dumps({"users": users, "num_samples": [len(x) for x in xs], "user_data": data}))


def write_leaf_text(root: Path, train: int = 120, test: int = 5) -> Path:
    """LEAF's layout <root>/<name>/data/{train,test}/*.json for shakespeare (6 speakers × `train` windows of
    80 characters, each the one before shifted by a character, y = the next character; the test windows
    start 79 windows after the last training one, as LEAF's split_data.py -t sample cuts a user) and
    sent140 (6 users × `train` tweets in LEAF's [id, date, query, user, text, "training"] rows, y = 0/1)."""
    rng = np.random.default_rng(0)
    for split, (lo, n) in {"train": (0, train), "test": (train + 79, test)}.items():
        xs, ys = [], []
        for s in range(len(SPEAKERS)):
            starts = [11 * s + i for i in range(lo, lo + n)]
            xs.append([SONNET[i:i + 80] for i in starts])
            ys.append([SONNET[i + 80] for i in starts])
        _write_leaf(root / f"shakespeare/data/{split}/all_data_niid_0_keep_0_{split}_9.json", SPEAKERS, xs,
                    ys)
        xs, ys = [], []
        for u, user in enumerate(USERS):
            rows, labels = [], []
            for i in range(n if split == "test" else 20 + 2 * u):  # 20..30 tweets per user
                label = int(rng.integers(2))
                words = [*rng.choice(NEUTRAL, 3), rng.choice(GOOD if label else BAD), *rng.choice(NEUTRAL, 2)]
                rows.append([str(1467810369 + 1000 * u + i), "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", user,
                             " ".join(words) + ("!" if label else "."), "training"])
                labels.append(label)
            xs.append(rows)
            ys.append(labels)
        _write_leaf(root / f"sent140/data/{split}/all_data_niid_0_keep_3_{split}_9.json", USERS, xs, ys)
    return root


@pytest.fixture(scope="module")
def leaf_dir(tmp_path_factory):
    return write_leaf_text(tmp_path_factory.mktemp("leaf"))


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _config(data_dir: Path) -> dict:
    common = {"table": "none", "data_dir": str(data_dir), "settings": {"NAT": {"partition": {"label_skew":
              "natural"}}}, "num_devices": 4, "algorithm": "fedavg", "schemes": ["C"], "num_traces": [1],
              "local_epochs": 1, "batch_size": 8, "eta0": 0.5, "rounds": 2, "seeds": [0]}
    return {"description": "LEAF text data end to end (tests/test_text_workflow.py)", "experiments": {
        "text_shakespeare": {**common, "dataset": "shakespeare", "model": "char_lstm",
                             "model_params": {"embed": 8, "hidden": 16, "layers": 2}},
        "text_sent140": {**common, "dataset": "sent140", "model": "sent_lstm",
                         "model_params": {"embed": 8, "hidden": 16, "layers": 1, "vocab": 20_000}},
    }}


@pytest.mark.parametrize(("dataset", "vocab", "seq"),
                         [("shakespeare", len(LEAF_LETTERS), 80), ("sent140", 20_000, 25)])
def test_natural_split_keeps_int64_token_ids(leaf_dir, tmp_path, dataset, vocab, seq):
    """`hetfl split` deals whole speakers/users (natural skew) and keeps x as int64 ids within the vocab."""
    runs = expand_runs(validate_config(_config(leaf_dir)))
    spec = next(s for s in runs if s.dataset == dataset).split_spec()
    assert spec["sizes"]["distribution"] == "equal"  # natural: sizes are the speakers' own
    out = tmp_path / "split.npz"
    proc = subprocess.run([sys.executable, "-m", "hetfl.cli", "split", "--spec", json.dumps(spec), "--seed",
                           "0", "--out", str(out), "--describe"], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.load(out) as z:
        for part in ("x_train", "x_test"):
            x = z[part]
            assert x.dtype == np.int64 and x.shape[1] == seq
            assert 0 <= x.min() and x.max() < vocab
        assert z["y_train"].max() < int(z["num_classes"])
        sizes = np.diff(z["train_offsets"]) + np.diff(z["test_offsets"])
    manifest = json.loads(out.with_name("manifest.json").read_text())
    assert manifest["num_devices"] == 4
    # every device holds one whole speaker/user; a speaker less the 79 windows between its local training
    # and test windows (the temporal holdout, LEAF's)
    per_client = {"shakespeare": {120 - 79}, "sent140": {20, 22, 24, 26, 28, 30}}[dataset]
    assert set(sizes.tolist()) <= per_client
    assert (out.with_name("labels.png")).stat().st_size > 1000
    header = proc.stdout.splitlines()[0].split()
    if dataset == "shakespeare":  # 80 classes: classes held and the most frequent, not 80 columns
        assert header[:4] == ["train", "test", "classes", "top"]
    else:
        assert header == ["train", "test", "0", "1"]


def test_split_is_deterministic_and_picks_speakers(leaf_dir, tmp_path):
    cfg = validate_config(_config(leaf_dir))
    spec = next(s for s in expand_runs(cfg) if s.dataset == "shakespeare").split_spec()
    a = make_split(tmp_path / "a/split.npz", spec, 0)
    b = make_split(tmp_path / "b/split.npz", spec, 0)
    assert a["sha256"] == b["sha256"] and a["num_classes"] == len(LEAF_LETTERS)


def test_shakespeare_local_test_windows_share_no_text_with_the_training_windows(tmp_path):
    """A Shakespeare window is its predecessor shifted by one character. The random local holdout made test
    windows whose 80 characters and target lay in the neighbouring training windows, so BMTA (the mean of
    the devices' local test accuracies, EFL Table 2) was measured on text the model trained on. The flwrlabs
    card warns of it ("the data is temporal"); LEAF's split_data.py keeps 79 windows between the two."""
    rng = np.random.default_rng(1)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz ,.;'ABCDEFGHIJ"))
    users, xs, ys = [], [], []
    for s in range(3):
        text = "".join(rng.choice(letters, 400))  # no 40-character repeat by chance
        n = 250 + 20 * s
        users.append(f"THE_TEMPEST_{SPEAKERS[s].rsplit('_', 1)[1]}")
        xs.append([text[i:i + 80] for i in range(n)])
        ys.append([text[i + 80] for i in range(n)])
    _write_leaf(tmp_path / "shakespeare/data/train/all_data_niid_0_keep_0_train_9.json", users, xs, ys)
    spec = {"dataset": "shakespeare", "num_devices": 3, "test_fraction": 0.1,
            "sizes": {"distribution": "equal"}, "partition": {"label_skew": "natural"},
            "data_dir": str(tmp_path), "global_test": False}
    manifest = make_split(tmp_path / "s/split.npz", spec, seed=0)
    assert manifest["holdout"] == "temporal"
    chars = np.array(list(LEAF_LETTERS))
    with np.load(tmp_path / "s/split.npz") as z:
        n_test, n_train = np.diff(z["test_offsets"]).tolist(), np.diff(z["train_offsets"]).tolist()
        sizes = set(zip(n_test, n_train, strict=True))
        assert sizes == {(round(0.1 * n), n - round(0.1 * n) - 79) for n in (250, 270, 290)}
        for k in range(3):
            tr = slice(z["train_offsets"][k], z["train_offsets"][k + 1])
            te = slice(z["test_offsets"][k], z["test_offsets"][k + 1])
            train_text = ["".join(chars[x]) + chars[y]
                          for x, y in zip(z["x_train"][tr], z["y_train"][tr], strict=True)]
            for x in z["x_test"][te]:
                assert not any("".join(chars[x[:40]]) in t for t in train_text)


def _speakers(n_speakers: int, n: int, seed: int = 1) -> list[tuple[str, list[str], list[str]]]:
    """Speakers of random text (no 40-character repeat by chance): (id, 80-character windows, targets),
    each window the one before shifted by a character, as LEAF's shake_utils.py makes them."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz ,.;'ABCDEFGHIJ"))
    out = []
    for s in range(n_speakers):
        text = "".join(rng.choice(letters, n + 80))
        out.append((f"THE_TEMPEST_{SPEAKERS[s].rsplit('_', 1)[1]}", [text[i:i + 80] for i in range(n)],
                    [text[i + 80] for i in range(n)]))
    return out


def _hub_shakespeare(monkeypatch, tmp_path, rows) -> dict:
    """flwrlabs/shakespeare as the hub holds it (one CSV: character_id, x, y), read through hetfl's hub path
    with `datasets`' own CSV builder, offline; the split spec that reads it."""
    import datasets

    pd.DataFrame(rows, columns=["character_id", "x", "y"]).to_csv(tmp_path / "shakespeare.csv", index=False)
    real = datasets.load_dataset

    def load(hub_id, name=None, split=None, revision=None, cache_dir=None):
        assert hub_id == "flwrlabs/shakespeare"
        return real("csv", data_files={split: str(tmp_path / "shakespeare.csv")}, split=split,
                    cache_dir=cache_dir)

    monkeypatch.setattr(datasets, "load_dataset", load)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # past hetfl's own offline guard
    return {"dataset": "shakespeare", "num_devices": 2, "test_fraction": 0.1,
            "sizes": {"distribution": "equal"}, "partition": {"label_skew": "natural"},
            "data_dir": str(tmp_path / "root"), "global_test": False}


def _leaks(npz: Path) -> bool:
    """Whether some local test window's first 40 characters lie in a training window of its device."""
    chars = np.array(list(LEAF_LETTERS))
    with np.load(npz) as z:
        for k in range(len(z["train_offsets"]) - 1):
            tr = slice(z["train_offsets"][k], z["train_offsets"][k + 1])
            te = slice(z["test_offsets"][k], z["test_offsets"][k + 1])
            train_text = ["".join(chars[x]) + chars[y] for x, y in zip(z["x_train"][tr], z["y_train"][tr],
                                                                       strict=True)]
            if any("".join(chars[x[:40]]) in t for x in z["x_test"][te] for t in train_text):
                return True
    return False


def test_the_hub_csvs_speakers_interleaved_in_text_order_still_split_without_a_leak(tmp_path, monkeypatch):
    """The temporal holdout drops the 79 rows before a speaker's test part, which are 79 of its windows only
    when no other speaker's rows sit between them. The flwrlabs CSV's row order is not stated (its card:
    columns character_id, x, y, "the data is temporal"): with two speakers' rows alternating, 79 rows were
    40 windows and the local test windows lay in the training ones. The loader now keeps each speaker's
    rows together, in file order."""
    (a, xa, ya), (b, xb, yb) = _speakers(2, 300)
    rows = [r for i in range(300) for r in ((a, xa[i], ya[i]), (b, xb[i], yb[i]))]
    spec = _hub_shakespeare(monkeypatch, tmp_path, rows)
    from hetfl.data.sources import load_source

    data = load_source("shakespeare", data_dir=tmp_path / "root")
    assert data.client_ids.tolist() == [a] * 300 + [b] * 300 and "rows grouped by client" in data.source
    make_split(tmp_path / "s/split.npz", spec, seed=0)
    assert not _leaks(tmp_path / "s/split.npz")


def test_the_hub_csvs_rows_out_of_text_order_are_refused(tmp_path, monkeypatch):
    """Nothing in the flwrlabs copy guarantees a speaker's rows in text order, and nothing in it (no position
    column) can restore the order; the temporal holdout assumed it. A speaker whose windows do not follow
    one another is now refused, naming the speaker, the sample and what to use instead."""
    (a, xa, ya), (b, xb, yb) = _speakers(2, 300)
    order = np.random.default_rng(0).permutation(300)  # e.g. a copy sorted by another column
    rows = [(a, xa[i], ya[i]) for i in range(300)] + [(b, xb[i], yb[i]) for i in order]
    spec = _hub_shakespeare(monkeypatch, tmp_path, rows)
    with pytest.raises(ValueError) as err:
        make_split(tmp_path / "s/split.npz", spec, seed=0)
    msg = str(err.value)
    assert (f"shakespeare: the windows of client '{b}' in hf://datasets/flwrlabs/shakespeare [train] are not "
            "in text order: its sample 1 (row 301) does not continue the one before it") in msg
    assert "flwrlabs/shakespeare card states no row order" in msg and "-t sample" in msg
    assert not (tmp_path / "s").exists()


def test_the_text_order_check_follows_each_client_whatever_the_row_order():
    """Each window is compared with the one before it of the same client, not with the row above: speakers
    interleaved in text order pass, a speaker with two windows swapped does not, a speaker no split deals
    is not looked at."""
    from hetfl.data.leaf import encode_chars
    from hetfl.data.sources import SourceData, check_text_order

    (a, xa, ya), (b, xb, yb) = _speakers(2, 100)
    xb[40], xb[41], yb[40], yb[41] = xb[41], xb[40], yb[41], yb[40]
    rows = [r for i in range(100) for r in ((a, xa[i], ya[i]), (b, xb[i], yb[i]))]
    data = SourceData(encode_chars([r[1] for r in rows], length=80),
                      encode_chars([r[2] for r in rows], length=1)[:, 0], len(LEAF_LETTERS),
                      np.array([r[0] for r in rows]), (80,), "shakespeare", "fixture")
    check_text_order(data, np.arange(0, 200, 2))  # a's rows only
    with pytest.raises(ValueError, match=f"client '{b}' in fixture are not in text order: its sample 40 "
                                         r"\(row 81\) does not continue .* at samples 40, 41, 42\)"):
        check_text_order(data, np.arange(200))


def test_leafs_line_by_line_windows_pass_the_text_order_check(tmp_path):
    """LEAF's older shake_utils.py windows every line apart, starting each line from 80 spaces: such a
    window does not continue the one before it, and is not a break of text order."""
    (a, xa, ya), (b, xb, yb) = _speakers(2, 200)
    pad = " " * 80
    line = [pad[i:] + xa[0][:i] for i in range(80)] + xa[:150]  # a new line: 80 spaces, then its text
    targets = [xa[0][i] for i in range(80)] + ya[:150]
    _write_leaf(tmp_path / "shakespeare/data/train/all_data_niid_0_keep_0_train_9.json", [a, b],
                [xb[:50] + line, xb], [yb[:50] + targets, yb])
    spec = {"dataset": "shakespeare", "num_devices": 2, "test_fraction": 0.1,
            "sizes": {"distribution": "equal"}, "partition": {"label_skew": "natural"},
            "data_dir": str(tmp_path), "global_test": False}
    make_split(tmp_path / "s/split.npz", spec, seed=0)


def test_a_shakespeare_split_made_with_the_random_holdout_is_made_again(leaf_dir, tmp_path):
    """Splits made before the temporal holdout have no 'holdout' in their manifest; a run refuses them
    rather than training on a split whose local test windows overlap its training windows."""
    from hetfl.data.build import check_split

    cfg = validate_config(_config(leaf_dir))
    spec = next(s for s in expand_runs(cfg) if s.dataset == "shakespeare").split_spec()
    assert spec["holdout"] == "temporal"
    assert "holdout" not in next(s for s in expand_runs(cfg) if s.dataset == "sent140").split_spec()
    make_split(tmp_path / "split.npz", spec, 0)
    check_split(tmp_path / "split.npz", spec, 0)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    del manifest["holdout"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match='holdout: split has "random", run needs "temporal"'):
        check_split(tmp_path / "split.npz", spec, 0)


@pytest.mark.parametrize(("dataset", "model", "fix"), [
    ("shakespeare", "cnn", '"char_lstm"'),
    ("sent140", "char_lstm", '"sent_lstm"'),
    ("mnist", "char_lstm", '"logreg"'),
    ("femnist", "sent_lstm", '"cnn"'),
])
def test_text_dataset_and_model_must_match(leaf_dir, dataset, model, fix):
    cfg = _config(leaf_dir)
    exp = cfg["experiments"]["text_shakespeare"]
    exp.update(dataset=dataset, model=model)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    msg = str(err.value)
    assert "'experiments.text_shakespeare.model'" in msg and f'"{model}"' in msg and fix in msg


def test_text_model_defaults_and_natural_sizes(leaf_dir):
    cfg = _config(leaf_dir)
    del cfg["experiments"]["text_sent140"]["model"]
    exp = validate_config(cfg)["experiments"]["text_sent140"]
    assert exp["model"] == "sent_lstm" and exp["sizes"]["distribution"] == "equal"
    cfg["experiments"]["text_sent140"]["sizes"] = {"distribution": "pareto"}
    with pytest.raises(ConfigError, match=r"'experiments.text_sent140.sizes.distribution' has value "
                                          r"\"pareto\".*label_skew \"natural\".*allowed: \"equal\""):
        validate_config(cfg)


@pytest.mark.slow
def test_workflow_trains_both_text_datasets(leaf_dir, tmp_path):
    """The real Snakefile on a config with one Shakespeare and one Sent140 experiment (2 rounds each)."""
    config = tmp_path / "text.yaml"
    config.write_text(yaml.safe_dump(_config(leaf_dir), sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(config), "--cores", "2", "--omit-from", "track"],  # the mirror: test_workflow's
        capture_output=True, text=True, env=env)
    logs = "\n".join(p.read_text()[-1500:] for p in sorted(tmp_path.glob("logs/**/*.log")))
    assert proc.returncode == 0, proc.stderr[-3000:] + logs
    for exp in ("text_shakespeare", "text_sent140"):
        run = tmp_path / "results" / exp / "NAT_T1_C_s0"
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "ok" and info["rounds_done"] == 2
        metrics = pd.read_parquet(run / "metrics.parquet")
        acc = metrics[metrics.metric == "test_accuracy"].sort_values("round")
        assert acc["round"].tolist() == [1, 2]
        assert np.isfinite(acc["value"]).all() and ((acc["value"] >= 0) & (acc["value"] <= 1)).all()
        loss = metrics.loc[metrics.metric == "train_loss", "value"]
        assert np.isfinite(loss).all()


def test_text_models_cover_the_text_sources():
    from hetfl.config import TEXT_MODELS
    from hetfl.data.sources import SOURCES
    from hetfl.models import MODELS

    text = {name for name, info in SOURCES.items() if info.task in ("next-char", "sentiment")}
    assert set(TEXT_MODELS) == text and set(TEXT_MODELS.values()) <= set(MODELS)


def test_paper_config_pairs_each_algorithm_with_its_scheme():
    from hetfl.config import load_config

    runs = list(expand_runs(load_config(ROOT / "workflow/config/paper/ma2022_efl_text.yaml")))
    assert {(r.dataset, r.model) for r in runs} == {("shakespeare", "char_lstm"), ("sent140", "sent_lstm")}
    assert {(r.algorithm, r.scheme) for r in runs} == {("fedavg", "A"), ("efl", "C")}
    assert {r.partition["label_skew"] for r in runs} == {"natural"}
    assert {r.sizes["distribution"] for r in runs} == {"equal"} and {r.num_traces for r in runs} == {1, 8}
