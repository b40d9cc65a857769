"""The CLI's errors name the flag, key or file, the value and what is allowed, in one line and before any
work starts (issue 11, item 10); `table`, `figure` and `track` take the README's glob results/<exp>/*
(item 9)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pandas as pd
import pytest

from hetfl import cli
from hetfl.config import expand_runs, validate_config
from hetfl.data.build import make_split
from hetfl.data.traces import make_traces
from hetfl.pipeline import run_training


def _main(capsys, *argv: str) -> tuple[int, str]:
    rc = cli.main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


SPLIT = ("split", "--num-devices", "4", "--seed", "0")


@pytest.mark.parametrize(("argv", "expect"), [
    (("--dataset", "synthetic", "--alpha", "1", "--beta", "1", "--sizes",
      '{"distribution": "equal", "sise": 5}'),
     "--sizes has key 'sise', which is not allowed; allowed keys: distribution, size, index, sigma, "
     "max_size, min_size"),
    (("--dataset", "digits", "--partition", '{"label_skew": "dirichlet", "beta": 0.3}'),
     "--partition has key 'beta', which is not allowed; allowed keys: label_skew, alpha, m,"),
    (("--dataset", "digits", "--partition", "dirichlet"),
     "--partition has value 'dirichlet', which is not valid JSON (Expecting value at line 1 column 1); "
     "allowed: a JSON object"),
    (("--dataset", "digits", "--partition", '{"label_skew": "pathological", "m": 0}'),
     "--partition: PartitionSpec.m=0 must be an integer >= 1"),
    (("--dataset", "digits", "--sizes", '{"distribution": "equal", "size": 50}'),
     "--sizes has key 'size', which is not used with distribution \"equal\" on dataset digits"),
    (("--dataset", "synthetic", "--alpha", "1", "--beta", "1", "--partition", '{"label_skew": "iid"}'),
     "--partition is not used with --dataset synthetic; allowed instead: --alpha, --beta, --iid"),
    (("--dataset", "digits", "--alpha", "1"), "--alpha is not used with --dataset digits"),
])
def test_split_flag_errors_name_flag_key_and_allowed(capsys, tmp_path, argv, expect):
    out = tmp_path / "s" / "split.npz"
    rc, err = _main(capsys, *SPLIT, *argv, "--out", str(out))
    assert rc == 2 and err.startswith("hetfl split: error: ") and expect in err, err
    assert len(err.strip().splitlines()) == 1 and not out.parent.exists()  # refused before any work


def test_drawn_sizes_this_machine_cannot_hold_are_refused_before_any_sample(capsys, tmp_path, monkeypatch):
    """A Pareto draw's tail is known only once drawn: num_devices 1,000,000 at index 0.5 with max_size
    1,000,000,000 drew about 2·10^11 samples, and the split job grew past 16 GB before it was stopped (an
    extreme-value probe). The drawn sizes are now checked against this machine's memory first."""
    from hetfl import cluster

    sizes = '{"distribution": "equal", "size": 50}'  # 4 devices x 50 samples x 248 bytes = 49,600
    out = tmp_path / "s" / "split.npz"
    monkeypatch.setattr(cluster, "host_memory_bytes", lambda: 49_599)
    rc, err = _main(capsys, *SPLIT, "--dataset", "synthetic", "--alpha", "1", "--beta", "1", "--sizes", sizes,
                    "--out", str(out))
    assert rc == 2 and not out.parent.exists(), err
    assert err.startswith('hetfl split: error: sizes {"distribution": "equal", "size": 50') and \
        "drew 200 samples over 4 devices (the largest 50), 0.0 GiB at 248 bytes a SYNTHETIC sample, more " \
        "than this machine's 0.0 GiB of memory; allowed: draws within it: a smaller sizes.max_size, " \
        "sizes.size or num_devices" in err, err
    # from the workflow (--config-key), one "allowed": the split's own, not the generic one beside it
    rc, err = _main(capsys, *SPLIT, "--dataset", "synthetic", "--alpha", "1", "--beta", "1", "--sizes", sizes,
                    "--config-key", "experiments.p.settings.N", "--out", str(out))
    assert rc == 2 and err.startswith("hetfl split: error: config entry 'experiments.p.settings.N' (seed 0) "
                                      "gives a split the data cannot make: sizes {") and \
        err.count("allowed:") == 1, err
    monkeypatch.setattr(cluster, "host_memory_bytes", lambda: 49_600)  # exactly fits
    rc, err = _main(capsys, *SPLIT, "--dataset", "synthetic", "--alpha", "1", "--beta", "1", "--sizes", sizes,
                    "--out", str(out))
    assert rc == 0 and out.is_file(), err


@pytest.mark.parametrize(("raised", "shown"), [
    (MemoryError("Unable to allocate 616. GiB for an array with shape (5, 826740822, 20) and data type "
                 "int64"), "Unable to allocate 616. GiB for an array with shape (5, 826740822, 20)"),
    (MemoryError(), "out of memory: MemoryError;"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                  "you tried to allocate 119760000000 bytes. Error code 12 (Cannot allocate memory)"),
     "DefaultCPUAllocator: can't allocate memory: you tried to allocate 119760000000 bytes"),
])
def test_a_training_job_out_of_memory_says_what_it_holds_not_a_traceback(capsys, monkeypatch, raised, shown):
    """An MLP with hidden [1000000] on 500 devices (its clients' parameter stacks) and local_epochs 1000000000
    (a round's minibatch indices) passed the workflow's start and failed in training with a traceback (an
    extreme-value probe): now one line, with the keys that lower what a job holds."""
    def train(args):
        raise raised

    monkeypatch.setattr(cli, "_cmd_train", train)
    rc, err = _main(capsys, "train", "--spec", "{}")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("hetfl train: error: out of memory: ") and shown in err, err
    assert "lower local_epochs, batch_size, clients_per_round or the model's size (model_params)" in err


def test_a_split_job_out_of_memory_says_where_splits_can_run(capsys, monkeypatch):
    """A real source's split holds the source's arrays: where the machine is too small, the splits can be
    cluster jobs."""
    def split(args):
        raise MemoryError("Unable to allocate 9.9 GiB for an array with shape (814255, 784)")

    monkeypatch.setattr(cli, "_cmd_split", split)
    rc, err = _main(capsys, *SPLIT, "--dataset", "digits", "--out", "split.npz")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("hetfl split: error: out of memory: Unable to allocate 9.9 GiB") and \
        "HETFL_SLURM_LOCAL_SPLIT_MB=0 to run the splits as cluster jobs" in err, err


def test_a_runtime_error_that_is_not_memory_still_raises(monkeypatch):
    def train(args):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")

    monkeypatch.setattr(cli, "_cmd_train", train)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        cli.main(["train", "--spec", "{}"])


@pytest.mark.parametrize(("flag", "value", "allowed"), [
    ("--threads", "0", ">= 1"), ("--threads", "-2", ">= 1"), ("--checkpoint-every", "-5", ">= 0")])
def test_train_counts_are_refused_as_parsed(capsys, flag, value, allowed):
    """--threads 0 was a traceback from torch.set_num_threads; --checkpoint-every -5 meant 5."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--spec", "{}", flag, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert f"argument {flag}: has value '{value}', which is not allowed; allowed: an integer {allowed}" in err


def test_split_spec_file_that_does_not_exist_names_the_flag(capsys, tmp_path):
    rc, err = _main(capsys, "split", "--spec", str(tmp_path / "none.json"), "--seed", "0", "--out",
                    str(tmp_path / "s" / "split.npz"))
    assert rc == 2 and "--spec has value" in err and "which is not an existing file" in err, err


def test_synthetic_equal_sizes_use_size(capsys, tmp_path):
    out = tmp_path / "split.npz"
    rc, _ = _main(capsys, *SPLIT, "--dataset", "synthetic", "--alpha", "1", "--beta", "1", "--sizes",
                  '{"distribution": "equal", "size": 50}', "--test-fraction", "0.2", "--out", str(out))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert rc == 0 and manifest["train_sizes"] == [40] * 4 and manifest["test_sizes"] == [10] * 4


@pytest.mark.parametrize("traceset,value",
                         [("T8", "2"), ("T2", "2"), ("T8", "-0.1"), ("T8", "1"), ("T8", "x")])
def test_trace_p_inactive_out_of_range_is_refused_naming_the_flag(capsys, tmp_path, traceset, value):
    """--p-inactive outside [0, 1): refused as parsed, naming the flag, whatever the traceset (an audit found
    the internal name p_inactive in the message, and 2 taken silently with T2, which draws no inactive
    rounds)."""
    out = tmp_path / "t.npz"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["trace", "--traceset", traceset, "--num-devices", "4", "--rounds", "3", "--seed", "0",
                  "--p-inactive", value, "--out", str(out)])
    assert exit_.value.code == 2 and not out.exists()
    assert (f"hetfl trace: error: argument --p-inactive: has value '{value}', which is not allowed; allowed: "
            f"a probability in [0, 1)") in capsys.readouterr().err


def test_trace_p_inactive_no_fit_exists_for_is_refused_naming_the_flag_and_the_bound(capsys, tmp_path):
    """--p-inactive 0.2 with T6: T_hi's zeros alone would exceed its Table 2 std; the message names the flag,
    the traceset and the largest value that fits, and nothing is written."""
    out = tmp_path / "t.npz"
    rc, err = _main(capsys, "trace", "--traceset", "T6", "--num-devices", "4", "--rounds", "3", "--seed", "0",
                    "--p-inactive", "0.2", "--out", str(out))
    assert rc == 2 and err.strip() == (
        "hetfl trace: error: --p-inactive has value 0.2, which is not allowed with traceset T6 (the zeros "
        "alone give a std above the target 0.2330; allowed: p_inactive < 0.0739)")
    assert not out.exists()


@pytest.mark.parametrize("verb", [("split", "--dataset", "synthetic", "--alpha", "1", "--beta", "1",
                                   "--num-devices", "4", "--out", "x.npz"),
                                  ("trace", "--traceset", "T2", "--num-devices", "4", "--rounds", "3",
                                   "--out", "x.npz")])
def test_negative_seed_gets_hetfls_message(capsys, verb):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*verb, "--seed", "-3"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"hetfl {verb[0]}: error: argument --seed: has value '-3', which is not allowed; allowed: an " \
           "integer >= 0" in err


def test_unknown_algorithm_name_is_an_error(capsys):
    rc, err = _main(capsys, "algorithms", "fedavgg")
    assert rc == 2 and "algorithm 'fedavgg' is unknown; allowed: fedavg, fedprox, scaffold" in err


def test_yaml_syntax_error_names_the_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiments:\n  a:\n    table: none\n   dataset: synthetic\n")
    rc, err = _main(capsys, "validate", str(bad))
    assert rc == 2 and f"config file {bad} is not valid YAML" in err and "at line 4, column 4" in err


TINY = {"experiments": {"e": {
    "table": "accuracy_difference", "dataset": "synthetic", "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}},
    "num_devices": 4, "sizes": {"distribution": "equal", "size": 20}, "schemes": ["A", "B", "C"],
    "num_traces": [1], "local_epochs": 1, "rounds": 2, "seeds": [0]}}}


def test_a_missing_data_set_says_where_it_looked_and_how_to_fetch(capsys, tmp_path, monkeypatch):
    """The CLI kept only the first line of the data layer's message (it is a FileNotFoundError), so
    where hetfl looked and the fetch command were lost (an audit)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HETFL_DATA_DIR", str(tmp_path / "empty"))
    rc, err = _main(capsys, "split", "--dataset", "mnist", "--num-devices", "5", "--seed", "0",
                    "--out", str(tmp_path / "s" / "split.npz"))
    assert rc == 2 and err.startswith("hetfl split: error: data set 'mnist' (split 'train') is not available")
    assert "looked on disk in" in err and "python -m hetfl.data.sources fetch mnist" in err


def test_a_missing_data_dir_is_refused_before_the_split(capsys, tmp_path, monkeypatch):
    """`hetfl split --data-dir` was not checked (the config key is): online the hub copy was downloaded into
    the misspelt directory."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = tmp_path / "dat"
    rc, err = _main(capsys, "split", "--dataset", "mnist", "--num-devices", "5", "--seed", "0",
                    "--data-dir", str(missing), "--out", str(tmp_path / "s" / "split.npz"))
    assert rc == 2 and f'--data-dir has value "{missing}", which is not an existing directory' in err
    spec = json.dumps({"dataset": "mnist", "num_devices": 5, "data_dir": str(missing)})
    out = str(tmp_path / "s" / "split.npz")
    rc, err = _main(capsys, "split", "--spec", spec, "--seed", "0", "--out", out)
    assert rc == 2 and "--spec's data_dir has value" in err
    assert not (tmp_path / "s").exists()


def test_full_disk_is_one_line_naming_the_file(capsys, tmp_path, monkeypatch):
    """pyarrow's ENOSPC names no file and came out as a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(json.dumps(TINY))

    def full(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    rc, err = _main(capsys, "train", "--config", "c.yaml", "--experiment", "e", "--run", "NIID_T1_B_s0",
                    "--no-mlflow", "--out", "run")
    assert rc == 2 and len(err.strip().splitlines()[-1:]) == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("hetfl train: error: cannot write run/metrics.parquet: No space left on device")
    assert "nothing partial was kept" in last
    left = {p.name for p in (tmp_path / "run").iterdir()}  # the checkpoint, to resume from once there is room
    assert not {"metrics.parquet", "run.json"} & left and not [n for n in left if n.startswith(".")]


def test_train_inputs_by_hand_are_checked_naming_the_flag_before_any_work(capsys, tmp_path, monkeypatch):
    """hetfl train's --cell, --spec, --split and --traces: invalid JSON, a missing file or a spec that is not
    one is said in one line naming the flag, the value and what is allowed (an audit found tracebacks
    and bare "No such file" messages)."""
    monkeypatch.chdir(tmp_path)
    spec = next(expand_runs(validate_config(TINY))).to_dict()
    (tmp_path / "bad.json").write_text('{"a": }')
    (tmp_path / "split.npz").write_bytes(b"")
    by_hand = ("--traces", "t.npz", "--out", "run")
    cases = [
        (["--cell", "{bad", "--splits-root", "x"], "--cell has value '{bad', which is not valid JSON "
         "(Expecting property name enclosed in double quotes at line 1 column 2); allowed: JSON text, e.g. "
         '[{"experiment": ..., "run": ...}], or the path of a cell file'),
        (["--cell", "none.json", "--splits-root", "x"], "--cell has value 'none.json', which is neither JSON "
         "nor an existing file; allowed: JSON text"),
        (["--cell", "bad.json", "--splits-root", "x"], "--cell names the file bad.json, which is not valid "
         "JSON (Expecting value at line 1 column 7)"),
        (["--cell", '{"x": 1}', "--splits-root", "x"], "--cell: a cell is a JSON list of run specs"),
        (["--cell", "[]", "--splits-root", "x"], "--cell has no run spec, which is not allowed"),

        (["--spec", "[1]", "--split", "split.npz", *by_hand], "--spec: a run spec is a JSON object of its "
         "fields; got a JSON list: [1]"),
        (["--spec", json.dumps({**spec, "colour": 1}), "--split", "split.npz", *by_hand],
         "--spec: a run spec has key(s) 'colour', which are not allowed; allowed keys: experiment, run,"),
        (["--spec", json.dumps({k: v for k, v in spec.items() if k != "seed"}), "--split", "split.npz",
          *by_hand], "--spec: a run spec has no key(s) seed, which are required; allowed keys: experiment,"),
        (["--spec", json.dumps(spec), "--split", "none.npz", *by_hand], "--split has value 'none.npz', which "
         "is not an existing file; allowed: a split.npz written by hetfl split"),
        (["--spec", json.dumps(spec), "--split", "split.npz", *by_hand], "--split has value 'split.npz', "
         "which is not a split file (it is not an .npz archive (EOFError)); allowed: a split.npz written by "
         "hetfl split"),
    ]
    for argv, message in cases:
        rc, err = _main(capsys, "train", "--no-mlflow", *argv)
        assert rc == 2 and len(err.strip().splitlines()) == 1, (argv, err)
        assert err.strip().startswith(f"hetfl train: error: {message}"), (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "split.npz"]
    # --config makes the run's own split and traces: --split or --traces beside it would be ignored
    (tmp_path / "c.yaml").write_text(json.dumps(TINY))
    rc, err = _main(capsys, "train", "--config", "c.yaml", "--experiment", "e", "--run", "NIID_T1_B_s0",
                    "--no-mlflow", "--out", "run", "--split", "split.npz", "--traces", "t.npz")
    assert rc == 2 and err.strip().startswith("hetfl train: error: --split and --traces given with --config, "
                                              "which is not allowed")
    assert not (tmp_path / "run").exists() and not (tmp_path / "data_splits").exists()


@pytest.mark.parametrize("flag,what", [("--graphs", "replays local steps from CUDA graphs"),
                                       ("--tf32", "trains with TF32 products on CUDA")])
def test_a_cuda_option_on_the_cpu_is_refused_before_any_work(flag, what, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(json.dumps(TINY))
    rc, err = _main(capsys, "train", "--config", "c.yaml", "--experiment", "e", "--run", "NIID_T1_B_s0",
                    "--no-mlflow", "--out", "run", flag)
    assert rc == 2 and err.strip() == (
        f"hetfl train: error: {flag} {what}; --device has value 'cpu', which is not allowed with it; "
        f"allowed: cuda, auto (or leave out {flag})")
    assert not (tmp_path / "run").exists() and not (tmp_path / "data_splits").exists()


@pytest.mark.parametrize("flags,given", [
    (["--keep-graphs"], "--device cpu"),
    (["--keep-graphs", "--no-graphs", "--device", "auto"], "--no-graphs")])
def test_keep_graphs_without_graphs_is_refused_before_any_work(flags, given, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(json.dumps(TINY))
    rc, err = _main(capsys, "train", "--config", "c.yaml", "--experiment", "e", "--run", "NIID_T1_B_s0",
                    "--no-mlflow", "--out", "run", *flags)
    assert rc == 2 and err.strip() == (
        f"hetfl train: error: --keep-graphs keeps CUDA graphs across rounds; {given} is not allowed with it; "
        f"allowed: --graphs or the engine's rule, on --device cuda or auto")
    assert not (tmp_path / "run").exists() and not (tmp_path / "data_splits").exists()


# -- item 9: the README's by-hand calls on results/<exp>/* ------------------------------------------------
@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("res")
    for spec in expand_runs(validate_config(TINY)):
        split = root / "splits" / spec.split_key / "split.npz"
        if not split.exists():
            make_split(split, spec.split_spec(), spec.seed)
        trace = root / "traces" / f"{spec.trace_key}.npz"
        if not trace.exists():
            make_traces(trace, traceset=spec.traceset, num_devices=4, rounds=2, seed=0)
        run_training(spec, split, trace, root / "results" / "e" / spec.run, progress=False)
    (root / "results" / "e" / "mlflow.json").write_text("{}")  # what the workflow's track job leaves
    (root / "results" / "e" / "killed_run").mkdir()  # a run that never finished: no run.json
    return root


def _glob(results: Path) -> list[str]:
    return sorted(str(p) for p in (results / "results" / "e").glob("*"))


@pytest.mark.parametrize("verb", [("table", "accuracy_difference"), ("figure", "scheme_curves")])
def test_table_and_figure_take_the_glob_and_skip_what_is_not_a_run(capsys, results, verb):
    out = results / "out" / verb[1]
    rc, err = _main(capsys, *verb, "--out", str(out), *_glob(results))
    assert rc == 0, err
    assert "skipped 2 path(s) that are not runs (no run.json)" in err and "mlflow.json" in err
    suffix = ".csv" if verb[0] == "table" else ".png"
    assert out.with_suffix(suffix).stat().st_size > 0


def test_track_takes_the_glob(capsys, results, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mirror = results / "mirror.json"
    rc, err = _main(capsys, "track", "--results-root", str(results / "results"), "--out", str(mirror),
                    *_glob(results))
    assert rc == 0, err
    assert sorted(json.loads(mirror.read_text())["runs"]) == [f"e/NIID_T1_{s}_s0" for s in "ABC"]


def test_run_paths_refuse_a_missing_path_or_no_run_at_all(capsys, results):
    rc, err = _main(capsys, "table", "accuracy_difference", "--out", "x", str(results / "nope"))
    assert rc == 2 and "nope does not exist" in err
    mlflow_json = str(results / "results/e/mlflow.json")
    rc, err = _main(capsys, "table", "accuracy_difference", "--out", "x", mlflow_json)
    assert rc == 2 and "none of the 1 path(s) given is a run directory" in err


@pytest.mark.parametrize(("experiment", "run", "expect"), [
    ("tiny_table", "NIID_T1_A_s0",
     "--experiment has value 'tiny_table', which is not allowed; allowed: tiny_table3, tiny_table4, "
     "tiny_table5"),
    ("tiny_table3", "NIID_T2_A_s0",
     "--run has value 'NIID_T2_A_s0', which is not a run of experiment tiny_table3 in "
     "workflow/config/tiny.yaml; allowed: its 18 runs, e.g. NIID_T6_A_s0, NIID_T1_A_s0"),
])
def test_train_by_config_names_the_unknown_experiment_or_run_and_what_is_allowed(capsys, experiment, run,
                                                                                 expect):
    """A typo in --experiment or --run names the flag, the value and what is allowed, before any work."""
    rc, err = _main(capsys, "train", "--config", "workflow/config/tiny.yaml", "--experiment", experiment,
                    "--run", run, "--no-mlflow")
    assert rc == 2
    assert expect in err
    assert "hetfl runs workflow/config/tiny.yaml" in err


def test_a_split_the_data_cannot_make_names_the_config_entry(capsys, tmp_path):
    """A grid whose split is impossible (more devices than the data can give each a sample) passed
    validation, and the split job's error named only the spec's fields; the workflow passes the config
    entry, which the error now names with the keys to change."""
    spec = json.dumps({"dataset": "digits", "num_devices": 1000, "partition": {"label_skew": "pathological",
                                                                             "m": 2}})
    rc, err = _main(capsys, "split", "--spec", spec, "--seed", "0", "--out", str(tmp_path / "s/split.npz"),
                    "--config-key", "experiments.big.settings.NIID")
    assert rc == 2
    assert "config entry 'experiments.big.settings.NIID' (seed 0) gives a split the data cannot make" in err
    assert "allowed: fewer devices (its experiment's num_devices)" in err
    assert not (tmp_path / "s/split.npz").exists()


def test_cell_inputs_of_every_cell_are_checked_before_the_first_cell_trains(capsys, tmp_path, monkeypatch):
    """`hetfl train --cell` with two cells whose second split (or a run's traces) is missing trained every run
    of the first cell, then stopped with "No such file or directory", naming no flag (an audit)."""
    from hetfl.config import specs_to_json

    monkeypatch.chdir(tmp_path)
    specs = list(expand_runs(validate_config({"experiments": {"e": {**TINY["experiments"]["e"],
                                                                    "seeds": [0, 1]}}})))
    for spec in specs:
        trace = Path("data_splits/traces", f"{spec.trace_key}.npz")
        if spec.seed == 0 and not trace.exists():
            make_traces(trace, traceset=spec.traceset, num_devices=4, rounds=2, seed=0)
    make_split(Path("data_splits", specs[0].split_key, "split.npz"), specs[0].split_spec(), 0)
    cell = ["train", "--no-mlflow", "--cell", specs_to_json(specs), "--splits-root", "data_splits",
            "--results-root", "res"]
    rc, err = _main(capsys, *cell)
    assert rc == 2 and err.strip() == (
        "hetfl train: error: --splits-root has value 'data_splits', which holds no split of cell "
        "e/NIID/seed1 (data_splits/e/NIID/seed1/split.npz does not exist); allowed: the directory `hetfl "
        "split` wrote the cells' splits to (<splits-root>/<experiment>/<setting>/seed<s>/split.npz)"), err
    make_split(Path("data_splits", specs[-1].split_key, "split.npz"), specs[-1].split_spec(), 1)
    rc, err = _main(capsys, *cell)
    assert rc == 2 and err.startswith(
        "hetfl train: error: --traces-root has value 'data_splits', which holds no traces of cell "
        "e/NIID/seed1 (data_splits/traces/T1/n4_r2_seed1.npz"), err
    assert not Path("res").exists()  # no run of the first cell trained


@pytest.mark.parametrize(("argv", "flag", "value"), [
    (["--config", "c.yaml", "--experiment", "e", "--run", "NIID_T1_B_s0", "--out", "taken"], "--out",
     "taken"),
    (["--config", "c.yaml", "--experiment", "e", "--run", "NIID_T1_B_s0", "--out", "taken/run"], "--out",
     "taken/run"),
    (["--cell", "cell.json", "--splits-root", "data_splits", "--results-root", "taken"], "--results-root",
     "taken"),
    (["--cell", "cell.json", "--splits-root", "data_splits", "--log-dir", "taken"], "--log-dir", "taken")])
def test_an_output_directory_that_is_a_file_is_refused_before_training(capsys, tmp_path, monkeypatch, argv,
                                                                       flag, value):
    """`hetfl train --out FILE` trained the whole run, then failed writing it ("File exists: FILE")."""
    from hetfl.config import specs_to_json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(json.dumps(TINY))
    (tmp_path / "taken").write_text("an earlier output\n")
    specs = list(expand_runs(validate_config(TINY)))
    (tmp_path / "cell.json").write_text(specs_to_json(specs))
    make_split(Path("data_splits", specs[0].split_key, "split.npz"), specs[0].split_spec(), 0)
    make_traces(Path("data_splits/traces", f"{specs[0].trace_key}.npz"), traceset="T1", num_devices=4,
                rounds=2, seed=0)
    rc, err = _main(capsys, "train", "--no-mlflow", *argv)
    assert rc == 2 and err.strip().startswith(
        f"hetfl train: error: {flag} has value '{value}', which is not a directory"), err
    assert "round" not in err and (tmp_path / "taken").read_text() == "an earlier output\n"
    assert not (tmp_path / "results").exists()


def test_a_split_or_traces_file_of_another_kind_is_refused_or_made_again(capsys, tmp_path, monkeypatch):
    """A torn .npz, or a split given as --traces, was a zipfile or KeyError traceback once training loaded
    it; `hetfl train --config` did not make a torn split or trace file at its canonical path again."""
    monkeypatch.chdir(tmp_path)
    spec = next(expand_runs(validate_config(TINY)))
    split, trace = Path("s/split.npz"), Path("t.npz")
    make_split(split, spec.split_spec(), 0)
    make_traces(trace, traceset="T1", num_devices=4, rounds=2, seed=0)
    Path("torn").mkdir()  # a copy cut short, its manifest beside it
    Path("torn/split.npz").write_bytes(split.read_bytes()[:300])
    Path("torn/manifest.json").write_bytes(Path("s/manifest.json").read_bytes())
    by_hand = ["train", "--no-mlflow", "--spec", json.dumps(spec.to_dict()), "--out", "run"]
    for given, message in [
        (["--split", "torn/split.npz", "--traces", str(trace)], "--split has value 'torn/split.npz', which "
         "is not a split file (it is not an .npz archive (BadZipFile)); allowed: a split.npz written by "
         "hetfl split"),
        (["--split", str(split), "--traces", str(split)], "--traces has value 's/split.npz', which is not a "
         "traces file (it has no fractions, assignment, trace_names); allowed: a traces .npz written by "
         "hetfl trace")]:
        rc, err = _main(capsys, *by_hand, *given)
        assert rc == 2 and err.strip() == f"hetfl train: error: {message}", err
    assert not Path("run").exists()
    # --config: a torn file at the run's canonical path is made again, as one made for other data is
    (tmp_path / "c.yaml").write_text(json.dumps(TINY))
    argv = ["train", "--config", "c.yaml", "--experiment", "e", "--run", spec.run, "--no-mlflow"]
    assert _main(capsys, *argv)[0] == 0
    from hetfl import paths

    for path in (paths.split_dir(spec) / "split.npz", paths.trace_file(spec)):
        path.write_bytes(path.read_bytes()[:300])
    rc, err = _main(capsys, *argv[:-1], "--out", "again", "--no-mlflow")
    assert rc == 0, err
    assert "making the split again" in err and "making the traces again" in err


@pytest.mark.parametrize(("verb", "expect"), [
    (("table", "fast_reboot"), "table fast_reboot reads runs with an event of kind arrival; run "),
    (("figure", "departure_curves"), "figure departure_curves (of table crossing_epochs's runs) reads runs "
     "with an event of kind departure; run "),
    (("table", "efl_lambda"), "table efl_lambda reads EFL's λ; the 3 run(s) given have algorithm fedavg, "
     "which is not allowed; allowed: the runs of an efl_lambda experiment"),
    (("figure", "efl_figure2"), "figure efl_figure2 (of table efl_lambda's runs) reads EFL's λ;")])
def test_a_table_or_figure_of_runs_without_what_it_reads_is_refused(capsys, results, verb, expect):
    """`hetfl table fast_reboot` (or figure arrival_curves) on runs without an event was a KeyError
    traceback ('event_round'), efl_lambda's on runs without EFL one on 'algorithm_params.lam'."""
    out = results / "wrong" / verb[1]
    rc, err = _main(capsys, *verb, "--out", str(out), *_glob(results))
    assert rc == 2 and f"hetfl {verb[0]}: error: {expect}" in err, err
    assert not out.parent.exists()


@pytest.mark.parametrize(("run_json", "expect"), [
    ('{"spec": ', "malformed run.json (not valid JSON): {run}/run.json: Expecting value: line 1 column 10 "
     "(char 9); delete it and run snakemake again to make it again"),
    ("[1]", "malformed run.json (top level is not an object): {run}/run.json")])
def test_track_names_a_malformed_run_json_before_the_mirror(capsys, results, tmp_path, monkeypatch, run_json,
                                                           expect):
    """`hetfl track` on a run whose run.json was cut short said only "Expecting value: line 1 column 10
    (char 9)", naming no file; a run.json holding a list was an AttributeError traceback."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = tmp_path / "broken"
    run.mkdir()
    (run / "run.json").write_text(run_json)
    (run / "metrics.parquet").write_bytes((results / "results/e/NIID_T1_A_s0/metrics.parquet").read_bytes())
    runs = sorted(str(p) for p in (results / "results/e").glob("NIID_*"))
    rc, err = _main(capsys, "track", "--results-root", str(tmp_path / "store"), *runs, str(run))
    assert rc == 2 and err.strip() == "hetfl track: error: " + expect.format(run=run), err
    assert not (tmp_path / "store").exists()  # nothing mirrored


@pytest.mark.parametrize(("argv", "expect"), [
    (("split", "--dataset", "quadratic", "--num-devices", "2", "--seed", "0", "--a", "1,x", "--out",
      "{tmp}/s/split.npz"),
     "hetfl split: error: --a has value '1,x', which is not allowed; allowed: numbers separated by commas, "
     "e.g. 1,2"),
    (("split-figure", "{tmp}/blob.npz", "--out", "{tmp}/fig/split"),
     "hetfl split-figure: error: manifest {tmp}/blob.npz is not a text file; allowed: the manifest.json "
     "`hetfl split` writes beside split.npz"),
    (("report", "tables", "--tables-dir", "{tmp}", "--out", "{tmp}/fig/report"),
     "hetfl report: error: hetfl report tables names no table, which is not allowed; allowed: one or more "
     "table names, e.g. accuracy_difference (the <table>.md and .csv in {tmp})"),
])
def test_flags_the_audit_found_unnamed_are_named_before_any_work(capsys, tmp_path, argv, expect):
    """`split --a 1,x` said "could not convert string to float: 'x'"; `split-figure` of an .npz said
    "'utf-8' codec can't decode ..."; `report tables` without a table said it wrote, and wrote nothing."""
    (tmp_path / "blob.npz").write_bytes(b"PK\x03\x04\x90\xff\x00binary")
    rc, err = _main(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert rc == 2 and err.strip() == expect.format(tmp=tmp_path), err
    assert not (tmp_path / "s").exists() and not (tmp_path / "fig").exists()


def test_track_refuses_an_out_that_is_a_directory_before_the_mirror(capsys, results, tmp_path, monkeypatch):
    """`hetfl track --out DIR` mirrored every run, then failed writing DIR."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rc, err = _main(capsys, "track", "--results-root", str(tmp_path / "store"), "--out", str(tmp_path),
                    *_glob(results))
    assert rc == 2 and err.strip() == (
        f"hetfl track: error: --out has value '{tmp_path}', which is a directory; allowed: a JSON file to "
        "write (new, or an earlier mirror's)"), err
    assert not (tmp_path / "store").exists()  # nothing mirrored


def test_a_readings_table_over_a_main_tables_stem_is_refused(capsys, results):
    """`hetfl table NAME --readings --out STEM`, given a main table's stem, overwrote its .md and .csv and
    left its .tex: three files of two different tables."""
    stem = results / "tables" / "accuracy_difference"
    rc, err = _main(capsys, "table", "accuracy_difference", "--out", str(stem), *_glob(results))
    assert rc == 0, err
    before = {p.name: p.read_bytes() for p in stem.parent.iterdir()}
    assert sorted(before) == [f"accuracy_difference.{e}" for e in ("csv", "md", "tex")]
    rc, err = _main(capsys, "table", "accuracy_difference", "--readings", "--out", str(stem), *_glob(results))
    assert rc == 2 and err.strip() == (
        f"hetfl table: error: --out has value {str(stem)!r}, which is not allowed with --readings: it is the "
        f"stem of a main table ({stem}.tex exists), whose .md and .csv a readings table would overwrite, "
        f"leaving its .tex beside them; allowed: another stem, e.g. {stem}_readings (the workflow's)"), err
    assert {p.name: p.read_bytes() for p in stem.parent.iterdir()} == before
    rc, err = _main(capsys, "table", "accuracy_difference", "--readings", "--out", f"{stem}_readings",
                    *_glob(results))
    assert rc == 0, err
    assert (stem.parent / "accuracy_difference_readings.csv").stat().st_size > 0
