"""The data a split job reads is checked before any job starts (hetfl.data.sources.check_available,
hetfl.config.check_data; the Snakefile's onstart, hetfl reproduce, hetfl validate). DomainNet and Digits-5
have no hub copy: a config using them without a prepared copy failed only in its split job, after the
trace jobs had run. Fixtures are written in the real on-disk formats (DatasetDict.save_to_disk, NIST's
IDX); nothing is downloaded."""

from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

datasets = pytest.importorskip("datasets")
from PIL import Image  # noqa: E402

from hetfl import cli, reproduce  # noqa: E402
from hetfl.config import ConfigError, check_data, validate_config  # noqa: E402
from hetfl.data import sources  # noqa: E402
from hetfl.data.sources import SourceUnavailableError, check_available, load_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIGIT5 = {"table": "none", "dataset": "digit5",
          "settings": {"E1": {"partition": {"label_skew": "natural", "equal_counts": True}, "local_epochs": 1,
                              "rounds": 2}},
          "num_devices": 2, "sizes": {"distribution": "equal"}, "test_fraction": 0.1,
          "global_test_average": "domains", "model": "cnn_bn", "algorithms": ["fedavg"], "schemes": ["B"],
          "num_traces": [1], "seeds": [0]}
MNIST = {"table": "none", "dataset": "mnist",
         "settings": {"IID": {"partition": {"label_skew": "iid"}, "local_epochs": 1, "rounds": 2}},
         "num_devices": 2, "sizes": {"distribution": "equal"}, "test_fraction": 0.1, "model": "mlp",
         "algorithms": ["fedavg"], "schemes": ["B"], "num_traces": [1], "seeds": [0]}


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_home/datasets")  # not the user's
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("HETFL_DATA_DIR", str(tmp_path / "empty"))


def fedbn_copy(root: Path, name: str = "digit5", splits=("train", "test"),
               columns=("image", "label", "domain")):
    """A prepared copy as `python -m hetfl.data.sources prepare` writes it: a DatasetDict of RGB images."""
    size = sources.SOURCES[name].input_shape[1]
    rng = np.random.default_rng(0)

    def split(n):
        feats = {"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10),
                 "domain": datasets.Value("string")}
        pixels = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
        cols = {"image": [Image.fromarray(p) for p in pixels],
                "label": rng.integers(0, 10, n).tolist(), "domain": ["MNIST", "SVHN"] * (n // 2)}
        return datasets.Dataset.from_dict({c: cols[c] for c in columns},
                                          features=datasets.Features({c: feats[c] for c in columns}))

    datasets.DatasetDict({s: split(4) for s in splits}).save_to_disk(str(root / name))
    return root / name


def write_idx(path: Path, array) -> None:
    array = np.asarray(array, dtype=np.uint8)
    raw = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)


def hub_repo(repo: Path, config: str | None = None, splits=("train", "test")) -> Path:
    """A hub dataset repository's files as the hub holds them (ylecun/mnist: a README whose YAML declares the
    config and its Parquet files; images as PNG bytes), 4 random 28x28 images per split."""
    rng = np.random.default_rng(0)
    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    for split in splits:
        pixels = rng.integers(0, 256, (4, 28, 28), dtype=np.uint8)
        cols = {"image": [Image.fromarray(p) for p in pixels], "label": [0, 1, 2, 3]}
        ds = datasets.Dataset.from_dict(cols, features=feats)
        (repo / "data").mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(repo / "data" / f"{split}-00000-of-00001.parquet"))
    files = "".join(f"  - split: {s}\n    path: data/{s}-*\n" for s in splits)
    (repo / "README.md").write_text(f"---\nconfigs:\n- config_name: {config or 'default'}\n  data_files:\n"
                                    f"{files}---\n")
    return repo


def datasets_cache(cache: Path, hub_id: str, config: str | None = None, splits=("train", "test")) -> Path:
    """`hub_id` in a datasets cache as an online `load_dataset(hub_id, name=config, cache_dir=cache)` leaves
    it, <namespace>___<name>/<config>/<version>/<hash>/ (dataset_info.json, <name>-<split>.arrow): prepared
    by datasets' own builder from the repository's files (hub_repo); only the namespace prefix, which
    datasets adds for a hub id, is put on by renaming. Returns <cache>/<namespace>___<name>."""
    namespace, name = hub_id.split("/")
    repo = hub_repo(cache.parent / f"repo-{namespace}" / name, config, splits)
    datasets.load_dataset_builder(str(repo), cache_dir=str(cache)).download_and_prepare()
    return (cache / name).rename(cache / f"{namespace}___{name}")


@pytest.fixture
def no_network(monkeypatch):
    """Any connection or name look-up fails the test."""
    import socket

    def refused(*args, **kwargs):
        raise AssertionError("the data check touched the network")

    for obj, attr in ((socket.socket, "connect"), (socket, "getaddrinfo"), (socket, "create_connection")):
        monkeypatch.setattr(obj, attr, refused)


# ---- hetfl.data.sources.check_available ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["digit5", "domainnet"])
def test_a_local_only_source_without_a_copy_names_where_it_looked_and_how_to_prepare(name, tmp_path):
    with pytest.raises(SourceUnavailableError) as err:
        check_available(name)
    msg = str(err.value)
    root = tmp_path / "empty"
    assert msg.startswith(f"data set '{name}' (split 'train') is not available")
    assert f"looked on disk in: {root / name}, {root / name / 'train'}, {root / name / 'data/train'}" in msg
    assert f"(data root {root}: $HETFL_DATA_DIR)" in msg
    assert f"accepted layouts under {root / name}:" in msg
    assert (f"dataset_dict.json and train/ (DatasetDict.save_to_disk: `python -m hetfl.data.sources prepare "
            f"{name} --from FEDBN/data` writes it)") in msg and "train/state.json" in msg
    assert f"python -m hetfl.data.sources prepare {name} --from FEDBN/data --data-dir DIR" in msg
    with pytest.raises(SourceUnavailableError, match=r"data root .*: the data_dir given\)"):
        check_available(name, data_dir=tmp_path)


def test_a_prepared_copy_passes_without_reading_its_data(tmp_path, monkeypatch):
    fedbn_copy(tmp_path)

    def no_reads(*args, **kwargs):
        raise AssertionError("check_available read the data")

    monkeypatch.setattr(datasets, "load_from_disk", no_reads)
    assert check_available("digit5", data_dir=tmp_path, splits=("train", "test")) == str(tmp_path / "digit5")


def test_a_prepared_copy_that_is_incomplete_is_named(tmp_path):
    copy = fedbn_copy(tmp_path, columns=("image", "label"))
    with pytest.raises(ValueError, match=r"digit5: .*train lacks column\(s\) \['domain'\]; it has \['image', "
                                         r"'label'\].*reads \['image', 'label', 'domain'\]"):
        check_available("digit5", data_dir=tmp_path)
    copy = fedbn_copy(tmp_path, splits=("train",))
    check_available("digit5", data_dir=tmp_path)
    with pytest.raises(ValueError, match=r"holds splits \['train'\], not 'test'"):
        check_available("digit5", data_dir=tmp_path, splits=("train", "test"))
    copy = fedbn_copy(tmp_path)
    next((copy / "test").glob("*.arrow")).unlink()  # a copy cut short
    with pytest.raises(ValueError, match=r"test lacks the data file\(s\) \['data-00000-of-00001.arrow'\] "
                                         "that its state.json names: the copy is incomplete"):
        check_available("digit5", data_dir=tmp_path, splits=("train", "test"))
    (copy / "dataset_dict.json").write_text("{not json")
    with pytest.raises(ValueError, match="dataset_dict.json is not the JSON DatasetDict.save_to_disk writes"):
        check_available("digit5", data_dir=tmp_path)


def test_a_hub_sources_local_copy_is_checked_and_online_no_copy_is_left_to_the_hub(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert check_available("mnist").startswith("the Hugging Face Hub (ylecun/mnist; no local copy under")
    assert check_available("digits") == "scikit-learn (shipped)"
    (tmp_path / "empty/cifar10").mkdir()
    (tmp_path / "empty/cifar10/cifar-10-python.tar.gz").write_bytes(b"")  # the download, not unpacked
    with pytest.raises(ValueError, match="the local copy .*cifar10 is in no layout hetfl reads"):
        check_available("cifar10")


def test_nists_files_are_checked_from_their_headers(tmp_path, monkeypatch):
    root = tmp_path / "emnist-balanced"
    write_idx(root / "emnist-balanced-train-images-idx3-ubyte.gz", np.zeros((3, 28, 28)))
    with pytest.raises(ValueError, match="has emnist-balanced-train-images-idx3-ubyte.gz but not "
                                         "emnist-balanced-train-labels-idx1-ubyte.gz"):
        check_available("emnist-balanced", data_dir=tmp_path)
    write_idx(root / "emnist-balanced-train-labels-idx1-ubyte.gz", [0, 1])
    with pytest.raises(ValueError, match="holds 3 images but emnist-balanced-train-labels-idx1-ubyte.gz 2"):
        check_available("emnist-balanced", data_dir=tmp_path)
    write_idx(root / "emnist-balanced-train-images-idx3-ubyte.gz", np.zeros((2, 32, 32)))
    with pytest.raises(ValueError, match="holds images of 32x32 pixels; NIST's emnist-balanced images are "
                                         "28x28"):
        check_available("emnist-balanced", data_dir=tmp_path)
    (root / "emnist-balanced-train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="is not a complete gzip file"):
        check_available("emnist-balanced", data_dir=tmp_path)
    write_idx(root / "emnist-balanced-train-images-idx3-ubyte.gz", np.zeros((2, 28, 28)))
    monkeypatch.setattr(sources, "_read_idx", lambda *a: (_ for _ in ()).throw(AssertionError("read")))
    assert check_available("emnist-balanced", data_dir=tmp_path) == str(root)


# ---- hub sources in offline mode: a copy in the datasets cache hetfl passes, or a refusal ---------------


def test_offline_a_hub_source_with_no_cached_copy_is_refused_naming_the_caches(tmp_path, monkeypatch,
                                                                                no_network):
    """With HF_HUB_OFFLINE=1 and neither a local copy nor a cached one, the split job failed (≈0.5 s) only
    after the other jobs had run; now the check refuses, naming the source, the hub id, where it looked
    and what to do, without creating anything or touching the network."""
    root = tmp_path / "empty"
    with pytest.raises(SourceUnavailableError) as err:
        check_available("mnist", splits=("train", "test"))
    msg = str(err.value)
    assert msg.startswith("data set 'mnist' (split 'train') is not available offline.\n"), msg
    assert "offline mode is set (HF_HUB_OFFLINE=1): hetfl reads the Hugging Face Hub copy ylecun/mnist " \
           "only from the datasets cache" in msg
    assert f"looked in the datasets cache: {root / 'hf_cache'} (data root {root}: $HETFL_DATA_DIR)" in msg
    assert "ConnectionError" in msg  # datasets' own answer
    assert f"looked on disk in: {root / 'mnist'}, {root / 'mnist/train'}, {root / 'mnist/data/train'}" in msg
    assert f"accepted layouts under {root / 'mnist'}:" in msg and "train/state.json" in msg
    assert "run once with internet and offline mode unset (unset HF_HUB_OFFLINE HF_DATASETS_OFFLINE)" in msg
    assert f"downloads ylecun/mnist and prepares it in {root / 'hf_cache'}, which later offline" in msg
    assert "python -m hetfl.data.sources fetch mnist --data-dir DIR" in msg
    assert not (root / "hf_cache").exists()
    with pytest.raises(SourceUnavailableError) as err:
        check_available("emnist-letters", data_dir=tmp_path)
    msg = str(err.value)
    assert "tanganke/emnist_letters (config emnist-letters)" in msg and "(data root " in msg
    assert "emnist-letters-{train,test}-images-idx3-ubyte.gz" in msg  # NIST's own files, the other way
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(SourceUnavailableError, match=r"offline mode is set \(HF_DATASETS_OFFLINE=1\)"):
        check_available("cifar10")
    config = validate_config({"experiments": {"m": MNIST}})
    with pytest.raises(ConfigError) as err:
        check_data(config)
    assert str(err.value).startswith(
        "data not available:\n  config key 'experiments.m.dataset' has value \"mnist\", whose data cannot be "
        "read, so its split jobs would fail (nothing ran): data set 'mnist' (split 'train') is not available "
        "offline")


def test_offline_a_cached_copy_passes_and_is_what_load_source_reads(tmp_path, monkeypatch, no_network):
    root = tmp_path / "empty"
    entry = datasets_cache(root / "hf_cache", "ylecun/mnist", "mnist")

    def no_reads(*args, **kwargs):
        raise AssertionError("check_available read the data")

    with monkeypatch.context() as m:
        m.setattr(datasets.Dataset, "from_file", no_reads)
        m.setattr(datasets.DatasetBuilder, "as_dataset", no_reads)
        where = check_available("mnist", splits=("train", "test"))
    assert where.startswith(f"the datasets cache {entry / 'mnist/0.0.0'}/") and "HF_HUB_OFFLINE=1" in where
    check_data(validate_config({"experiments": {"m": MNIST}}))
    # HF_HUB_OFFLINE was set after datasets' import, which left datasets' switch off: load_source, offline
    # as the check decided, reads the same cache without the network
    assert not datasets.config.HF_HUB_OFFLINE
    data = load_source("mnist", split="test")
    assert len(data) == 4 and data.x.shape == (4, 1, 28, 28)


def test_offline_a_cached_copy_without_the_split_or_the_config_is_refused(tmp_path, no_network):
    root = tmp_path / "empty"
    entry = datasets_cache(root / "hf_cache", "ylecun/mnist", "mnist", splits=("train",))
    assert check_available("mnist").startswith("the datasets cache")
    with pytest.raises(SourceUnavailableError, match=r"(?s)split 'test'.*the cached copy .*ylecun___mnist.* "
                                                     r"holds split\(s\) \['train'\], not 'test'"):
        check_available("mnist", splits=("train", "test"))
    next(entry.glob("mnist/0.0.0/*/mnist-train.arrow")).unlink()  # a copy cut short
    with pytest.raises(SourceUnavailableError, match=r"lacks \['mnist-train.arrow'\]"):
        check_available("mnist")
    datasets_cache(root / "hf_cache", "tanganke/emnist_letters", "default")  # another config than hetfl's
    with pytest.raises(SourceUnavailableError, match="Couldn't find cache for tanganke/emnist_letters for "
                                                     "config 'emnist-letters'"):
        check_available("emnist-letters")


def test_offline_a_corrupt_cache_entry_is_refused_naming_it_not_a_traceback(tmp_path, no_network):
    """A dataset_info.json without config_name (an entry edited, or cut short by hand) made datasets' offline
    look-up raise KeyError: the check stopped the workflow with a traceback instead of a refusal. Any failure
    of the look-up is now the same refusal as a missing copy, naming the cache, the entry and the error; in
    hetfl's cache, in datasets' default cache (looked at for the message's "copy it" line), and in the
    split job's load_source."""
    import json

    root = tmp_path / "empty"
    entry = datasets_cache(root / "hf_cache", "ylecun/mnist", "mnist")
    info = next(entry.glob("mnist/0.0.0/*/dataset_info.json"))
    meta = json.loads(info.read_text())
    del meta["config_name"]
    info.write_text(json.dumps(meta))
    with pytest.raises(SourceUnavailableError) as err:
        check_available("mnist")
    msg = str(err.value)
    assert msg.startswith("data set 'mnist' (split 'train') is not available offline.\n"), msg
    assert f"looked in the datasets cache: {root / 'hf_cache'} (data root {root}: $HETFL_DATA_DIR): " \
           f"looking the copy up failed: KeyError: 'config_name'; {entry} is there but not as datasets " \
           f"writes it: delete it and prepare the copy again" in msg, msg
    with pytest.raises(ConfigError, match=r"(?s)'experiments.m.dataset' has value \"mnist\".*KeyError: "
                                          r"'config_name'"):
        check_data(validate_config({"experiments": {"m": MNIST}}))
    with pytest.raises(SourceUnavailableError, match=r"(?s)read from the datasets cache .* only: KeyError: "
                                                     r"'config_name'"):
        load_source("mnist", split="test")
    info.write_text("{")  # cut short: not JSON
    with pytest.raises(SourceUnavailableError, match=r"looking the copy up failed: JSONDecodeError: .* is "
                                                     r"there but not as datasets writes it"):
        check_available("mnist")
    info.write_text(json.dumps(meta))  # without config_name again
    default = Path(datasets.config.HF_DATASETS_CACHE)
    default.mkdir(parents=True)
    entry.rename(default / entry.name)  # only in datasets' default cache, and corrupt there
    with pytest.raises(SourceUnavailableError) as err:
        check_available("mnist")
    msg = str(err.value)
    assert f"{root / 'hf_cache'} (data root {root}: $HETFL_DATA_DIR): ConnectionError" in msg, msg
    assert f"not read by hetfl: datasets' default cache {default}" in msg and "* copy " not in msg


def test_online_the_cache_is_not_looked_up(monkeypatch):
    """Without offline mode the split job asks the hub (or, with no network, fails after its retries): no
    network-free signal says beforehand whether the hub will answer, so the check does not guess."""
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def looked(*args, **kwargs):
        raise AssertionError("the cache was looked up online")

    monkeypatch.setattr(datasets, "load_dataset_builder", looked)
    assert check_available("cifar10").startswith("the Hugging Face Hub (uoft-cs/cifar10; no local copy under")


PROBE = """
import json
from huggingface_hub import try_to_load_from_cache
from hetfl.data.sources import check_available, load_source

out = {"hub_cache": try_to_load_from_cache("ylecun/mnist", "README.md", repo_type="dataset")}
for what, call in (("check", lambda: check_available("mnist", splits=("train", "test"))),
                   ("load", lambda: len(load_source("mnist", split="test")))):
    try:
        out[what] = call()
    except Exception as err:
        out[what] = f"{type(err).__name__}: {err}"
print(json.dumps(out))
"""


def test_offline_caches_hetfl_does_not_read_are_refused_and_named(tmp_path):
    """In fresh processes (datasets and huggingface_hub read these variables at import) with HF_HOME,
    HF_DATASETS_CACHE and HF_HUB_CACHE pointed at temporary directories: the check's answer is the loader's.
    A copy in the hub's file cache alone (what try_to_load_from_cache finds) is not loaded offline: datasets
    reads only the Arrow copies it prepared in the cache_dir hetfl passes; nor is one in datasets' default
    cache, which the message names, and once copied as it says, both the check and load_source pass."""
    import json
    import shutil

    root = tmp_path / "empty"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_CACHE": str(tmp_path / "hub_cache"),
           "HF_DATASETS_CACHE": str(tmp_path / "ds_cache"), "HF_HUB_OFFLINE": "1",
           "HETFL_DATA_DIR": str(root)}

    def probe() -> dict:
        proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    sha = "0123456789abcdef0123456789abcdef01234567"
    hub = tmp_path / "hub_cache/datasets--ylecun--mnist"
    hub_repo(hub / "snapshots" / sha, "mnist")
    (hub / "refs").mkdir()
    (hub / "refs/main").write_text(sha)
    out = probe()
    assert out["hub_cache"] == str(hub / "snapshots" / sha / "README.md")
    assert out["check"].startswith("SourceUnavailableError: data set 'mnist' (split 'train') is not "
                                   "available offline"), out
    assert f"not read by hetfl: datasets' default cache {tmp_path / 'ds_cache'}" in out["check"]
    assert f"the hub's file cache {tmp_path / 'hub_cache'}" in out["check"]
    assert out["load"].startswith("SourceUnavailableError: data set 'mnist' (split 'test') is not available")
    entry = datasets_cache(tmp_path / "ds_cache", "ylecun/mnist", "mnist")
    out = probe()
    assert f"copy {entry} into {root / 'hf_cache'}" in out["check"], out
    assert out["load"].startswith("SourceUnavailableError")
    shutil.copytree(entry, root / "hf_cache" / entry.name)
    out = probe()
    assert out["check"].startswith(f"the datasets cache {root / 'hf_cache/ylecun___mnist/mnist/0.0.0'}"), out
    assert out["load"] == 4


OFFLINE_COMBOS = [{}, {"HF_HUB_OFFLINE": "1"}, {"HF_DATASETS_OFFLINE": "1"}, {"TRANSFORMERS_OFFLINE": "1"},
                  {"HF_DATASETS_OFFLINE": "0", "HF_HUB_OFFLINE": "1"},
                  {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "0"},
                  {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"},
                  {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "yes"},
                  {"HF_DATASETS_OFFLINE": "", "HF_HUB_OFFLINE": "true"}, {"HF_HUB_OFFLINE": "no"}]

LIBRARIES_OFFLINE = """
import importlib, json, os, sys
import datasets.config, huggingface_hub.constants
from hetfl.data.sources import offline_switches

out = []
for combo in json.loads(sys.argv[1]):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.pop(name, None)
    os.environ.update(combo)
    importlib.reload(huggingface_hub.constants)  # both read the variables at import
    importlib.reload(datasets.config)
    out.append([datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE, offline_switches()])
print(json.dumps(out))
"""


def test_offline_is_what_either_library_reads_as_offline():
    """One answer to "offline?" for check_available and load_source (offline_switches): offline where
    huggingface_hub (HF_HUB_OFFLINE, else TRANSFORMERS_OFFLINE) or datasets (HF_DATASETS_OFFLINE where set,
    else huggingface_hub's) would not go to the network, as each reads the variables at import; the
    switches that say so are named. datasets downloads through huggingface_hub, so with
    HF_DATASETS_OFFLINE=0 and HF_HUB_OFFLINE=1 it reads only its cache too."""
    import json

    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")}
    proc = subprocess.run([sys.executable, "-c", LIBRARIES_OFFLINE, json.dumps(OFFLINE_COMBOS)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(proc.stdout.strip().splitlines()[-1])
    for combo, (datasets_off, hub_off, switches) in zip(OFFLINE_COMBOS, answers, strict=True):
        assert bool(switches) == (datasets_off or hub_off), (combo, datasets_off, hub_off, switches)
        assert all(s.split("=")[0] in combo and combo[s.split("=")[0]] == s.split("=", 1)[1]
                   for s in switches), (combo, switches)
    assert answers[OFFLINE_COMBOS.index({"HF_DATASETS_OFFLINE": "0", "HF_HUB_OFFLINE": "1"})][:2] == \
        [False, True]  # the contradictory pair: datasets online, the hub offline
    contradictory = {"HF_DATASETS_OFFLINE": "0", "HF_HUB_OFFLINE": "1"}
    assert sources.offline_switches(contradictory) == ["HF_HUB_OFFLINE=1"]
    assert sources.offline_switches({"TRANSFORMERS_OFFLINE": "1"}) == ["TRANSFORMERS_OFFLINE=1"]
    assert sources.offline_switches({}) == []


@pytest.mark.parametrize("combo", [{"HF_DATASETS_OFFLINE": "0", "HF_HUB_OFFLINE": "1"},
                                   {"TRANSFORMERS_OFFLINE": "1"}])
def test_the_check_and_load_source_agree_on_offline_whatever_the_variables_say(tmp_path, combo):
    """HF_DATASETS_OFFLINE=0 with HF_HUB_OFFLINE=1: datasets goes online, the hub refuses, datasets reads its
    cache. The check read the cached copy and passed, but load_source's own guard refused every hub load
    whatever was cached, so the split job failed after the other jobs had run. TRANSFORMERS_OFFLINE=1
    (huggingface_hub's fallback switch) turns both libraries offline, but the check took it for online and
    passed with no cached copy. In fresh processes: with no cached copy both refuse, with one both read it."""
    import json

    root = tmp_path / "empty"
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(combo, HF_HOME=str(tmp_path / "hf_home"), HETFL_DATA_DIR=str(root))

    def probe() -> dict:
        proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    out = probe()
    switch = "HF_HUB_OFFLINE=1" if "HF_HUB_OFFLINE" in combo else "TRANSFORMERS_OFFLINE=1"
    assert out["check"].startswith("SourceUnavailableError: data set 'mnist' (split 'train') is not "
                                   f"available offline.\n  offline mode is set ({switch})"), out
    assert out["load"].startswith("SourceUnavailableError: data set 'mnist' (split 'test') is not "
                                  "available"), out
    datasets_cache(root / "hf_cache", "ylecun/mnist", "mnist")
    out = probe()
    assert out["check"].startswith(f"the datasets cache {root / 'hf_cache/ylecun___mnist/mnist/0.0.0'}"), out
    assert switch in out["check"] and out["load"] == 4, out


# ---- hetfl.config.check_data -----------------------------------------------------------------------------


def test_check_data_names_the_key_and_value_and_skips_what_needs_no_data(tmp_path):
    config = validate_config({"experiments": {"d5": DIGIT5, "other": {**DIGIT5, "seeds": [1]},
                                              "synth": {"table": "none", "dataset": "synthetic",
                                                        "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}},
                                                        "num_devices": 4, "schemes": ["B"],
                                                        "num_traces": [1], "seeds": [0]}}})
    with pytest.raises(ConfigError) as err:
        check_data(config)
    msg = str(err.value)
    assert msg.startswith("data not available:\n  config key 'experiments.d5.dataset' (and in experiment(s) "
                          "other) has value \"digit5\", whose data cannot be read, so its split jobs would "
                          "fail (nothing ran): data set 'digit5' (split 'train') is not available."), msg
    check_data(config, experiments={"synth"})  # the workflow asks only for the splits it will make
    splits = tmp_path / "splits"
    made_splits(splits, config)
    check_data(config, splits_root=splits)  # every split made: nothing reads the data again
    (splits / "other/E1/seed1/split.npz").unlink()
    with pytest.raises(ConfigError, match=r"'experiments.other.dataset' has value \"digit5\""):
        check_data(config, splits_root=splits)
    fedbn_copy(tmp_path / "empty")
    check_data(config)
    validate_config({"experiments": {"d5": DIGIT5}})  # validation itself needs no data (dry runs, planning)


def made_splits(root: Path, config: dict, **changed) -> None:
    """Every split of a validated config as the split job leaves it for the check: a split.npz (empty: nothing
    reads it) and the manifest.json that says what it was made for (`changed`: made for other data)."""
    import json

    from hetfl.config import expand_runs

    for spec in expand_runs(config):
        folder = root / spec.split_key
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "split.npz").write_bytes(b"")
        (folder / "manifest.json").write_text(json.dumps({**spec.split_spec(), "seed": spec.seed, **changed}))


def test_a_split_to_be_made_again_is_checked_like_a_missing_one(tmp_path, capsys, monkeypatch):
    """hetfl validate and hetfl reproduce checked the data only of experiments with a split.npz missing: a
    split made for other data (the config's split parameters changed since) passed them, though Snakemake
    makes it again (its `spec` param changed) or, without Snakemake's record of it, the training job refuses
    it (check_split) and it has to be made again; only the workflow's onstart refused. Its manifest.json, read
    as the training job's check_split reads it, tells them; so does a manifest.json missing (Snakemake
    remakes a split whose output is missing)."""
    monkeypatch.chdir(tmp_path)
    raw = {"experiments": {"d5": DIGIT5}}
    cfg = tmp_path / "d5.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    config = validate_config(yaml.safe_load(cfg.read_text()))
    made_splits(tmp_path / "data_splits", config)
    assert cli.main(["validate", str(cfg)]) == 0  # made for this config: no data needed
    capsys.readouterr()
    ran = []

    def snakemake(args, **kwargs):
        ran.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(reproduce.subprocess, "run", snakemake)
    assert reproduce.main(["--configfile", str(cfg), "--cores", "1"]) == 0 and ran
    assert "data not available" not in capsys.readouterr().err
    made_splits(tmp_path / "data_splits", config, test_fraction=0.2)  # made for another test_fraction
    assert cli.main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hetfl validate: error: data not available:\n  config key 'experiments.d5.dataset' "
                          "has value \"digit5\"") and "prepare digit5" in err, err
    ran.clear()
    assert reproduce.main(["--configfile", str(cfg), "--cores", "1"]) == 2
    assert not ran and "hetfl reproduce: error: data not available:" in capsys.readouterr().err
    made_splits(tmp_path / "data_splits", config)
    check_data(config, splits_root="data_splits")
    next((tmp_path / "data_splits").rglob("manifest.json")).unlink()
    with pytest.raises(ConfigError, match=r"'experiments.d5.dataset' has value \"digit5\""):
        check_data(config, splits_root="data_splits")


def test_hetfl_validate_and_reproduce_refuse_before_snakemake_runs(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "d5.yaml"
    cfg.write_text(yaml.safe_dump({"experiments": {"d5": DIGIT5}}))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hetfl validate: error: data not available:") and "prepare digit5" in err
    assert cli.main(["validate", "--no-data", str(cfg)]) == 0
    capsys.readouterr()
    ran = []
    monkeypatch.setattr(reproduce.subprocess, "run", lambda *a, **k: ran.append(a))
    (tmp_path / "wf").mkdir()
    rc = reproduce.main(["--configfile", str(cfg), "--directory", str(tmp_path / "wf"), "--cores", "1"])
    assert rc == 2
    assert not ran and "hetfl reproduce: error: data not available:" in capsys.readouterr().err


def _snakemake(workdir: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(workdir), "--configfile", str(config), "--cores", "1", *extra],
                          capture_output=True, text=True, env=env)


def test_the_workflow_refuses_before_any_job_and_a_dry_run_still_plans(tmp_path):
    """The split job of a digit5 experiment stopped on the missing copy after the trace jobs had run; now
    the run stops before any job (Snakemake's onstart), naming the data set and how to prepare it. A dry
    run (-n: no handler runs) still shows the plan."""
    cfg = tmp_path / "d5.yaml"
    cfg.write_text(yaml.safe_dump({"experiments": {"d5": DIGIT5}}))
    work = tmp_path / "wf"
    work.mkdir()
    dry = _snakemake(work, cfg, "-n")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "split" in dry.stdout + dry.stderr
    run = _snakemake(work, cfg)
    assert run.returncode != 0
    assert "hetfl: data not available:" in run.stderr and "python -m hetfl.data.sources prepare digit5" in \
        run.stderr, run.stderr[-3000:]
    assert not (work / "data_splits").exists() and not (work / "logs").exists()  # no job ran
    assert not any((work / ".snakemake" / "locks").glob("*"))  # and the next run is not locked out


def test_the_workflow_offline_refuses_a_hub_source_with_no_cached_copy_before_any_job(tmp_path):
    """HF_HUB_OFFLINE=1 and no copy of ylecun/mnist anywhere hetfl reads: the split job failed only after
    the trace jobs had run; now the run stops before any job, naming the key, the hub id and the cache."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text(yaml.safe_dump({"experiments": {"m": MNIST}}))
    work = tmp_path / "wf"
    work.mkdir()
    run = _snakemake(work, cfg)
    assert run.returncode != 0
    key = "hetfl: data not available:\n  config key 'experiments.m.dataset' has value \"mnist\""
    assert key in run.stderr and "not available offline" in run.stderr and "ylecun/mnist" in run.stderr, \
        run.stderr[-3000:]
    assert f"looked in the datasets cache: {tmp_path / 'empty/hf_cache'}" in run.stderr
    assert not (work / "data_splits").exists() and not (work / "logs").exists()  # no job ran


def test_a_run_whose_splits_are_made_needs_no_data(tmp_path):
    """Only the experiments whose split jobs Snakemake will run are checked: once the splits are made (here,
    or on another machine), a run that only reads them starts without the data."""
    import shutil

    data = tmp_path / "data"
    fedbn_copy(data)
    cfg = tmp_path / "d5.yaml"
    cfg.write_text(yaml.safe_dump({"experiments": {"d5": {**DIGIT5, "data_dir": str(data)}}}))
    work = tmp_path / "wf"
    work.mkdir()
    made = _snakemake(work, cfg, "data_splits/d5/E1/seed0/split.npz")
    assert made.returncode == 0, made.stderr[-3000:]
    shutil.rmtree(data / "digit5")
    figure = _snakemake(work, cfg, "reports/figures/splits/d5.png")
    assert figure.returncode == 0, figure.stderr[-3000:]
    assert (work / "reports/figures/splits/d5.png").is_file()
    (work / "data_splits/d5/E1/seed0/split.npz").unlink()
    again = _snakemake(work, cfg, "data_splits/d5/E1/seed0/split.npz")
    assert again.returncode != 0 and "hetfl: data not available:" in again.stderr
