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
from hetfl.data.sources import SourceUnavailableError, check_available  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIGIT5 = {"table": "none", "dataset": "digit5",
          "settings": {"E1": {"partition": {"label_skew": "natural", "equal_counts": True}, "local_epochs": 1,
                              "rounds": 2}},
          "num_devices": 2, "sizes": {"distribution": "equal"}, "test_fraction": 0.1,
          "global_test_average": "domains", "model": "cnn_bn", "algorithms": ["fedavg"], "schemes": ["B"],
          "num_traces": [1], "seeds": [0]}


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
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


def test_a_hub_sources_local_copy_is_checked_and_no_copy_is_left_to_the_hub(tmp_path):
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
    for seed in (0, 1):
        (splits / f"{'d5' if seed == 0 else 'other'}/E1/seed{seed}").mkdir(parents=True)
        (splits / f"{'d5' if seed == 0 else 'other'}/E1/seed{seed}/split.npz").write_bytes(b"")
    check_data(config, splits_root=splits)  # every split made: nothing reads the data again
    (splits / "other/E1/seed1/split.npz").unlink()
    with pytest.raises(ConfigError, match=r"'experiments.other.dataset' has value \"digit5\""):
        check_data(config, splits_root=splits)
    fedbn_copy(tmp_path / "empty")
    check_data(config)
    validate_config({"experiments": {"d5": DIGIT5}})  # validation itself needs no data (dry runs, planning)


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
