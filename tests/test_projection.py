"""`hetfl project`: random stand-ins of the real sources, the scaled grid, the fitted line, the projection,
and its errors before any work."""

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from hetfl.cluster import ENVIRONMENT, cells_per_job
from hetfl.config import ConfigError, by_cell, expand_runs, load_config, validate_config
from hetfl.data.sources import load_source
from hetfl.projection import Projection, fake_source, fit, full_grid_jobs, project, scaled_config

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "workflow/config/paper"


@pytest.fixture(autouse=True)
def _no_cluster_environment(monkeypatch):
    """project reads the cluster's variables (HETFL_GPUS): a user's own leave these tests alone."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def test_a_fake_source_loads_as_the_real_one_would(tmp_path):
    fake_source("mnist", tmp_path, sizes=(40, 12))
    fake_source("cifar100", tmp_path, sizes=(9, 0))
    train, test = (load_source("mnist", data_dir=tmp_path, split=s) for s in ("train", "test"))
    assert train.x.shape == (40, 1, 28, 28) and test.x.shape == (12, 1, 28, 28)
    assert train.x.dtype == np.float32 and 0 <= train.x.min() and train.x.max() <= 1
    assert set(np.unique(train.y)) <= set(range(10)) and "save_to_disk" in train.source
    assert load_source("cifar100", data_dir=tmp_path).x.shape == (9, 3, 32, 32)
    with pytest.raises(ConfigError, match="'shakespeare' has no random stand-in; allowed: mnist"):
        fake_source("shakespeare", tmp_path)


def test_the_scaled_grid_keeps_one_seed_and_a_fraction_of_every_rounds(tmp_path):
    mnist = load_config(PAPER / "ruan2021_table3_mnist.yaml")
    scaled = scaled_config(mnist, 0.05, tmp_path)
    exp = scaled["experiments"]["ruan2021_table3_mnist"]
    assert exp["rounds"] == 10 and exp["seeds"] == [0] and exp["data_dir"] == str(tmp_path)
    runs = list(expand_runs(mnist))
    assert len(list(expand_runs(scaled))) * 3 == len(runs) == 144  # 3 seeds -> 1
    # per-setting rounds (FedFOR's E-dependent rounds) and event rounds scale alike, rounded up
    fedfor = load_config(PAPER / "tian2022_fedfor_table2.yaml")
    def setting_rounds(config):
        return {n: s["rounds"] for e in config["experiments"].values() for n, s in e["settings"].items()}
    assert setting_rounds(scaled_config(fedfor, 0.1, None)) == \
        {n: -(-r // 10) for n, r in setting_rounds(fedfor).items()}
    table4 = scaled_config(load_config(PAPER / "ruan2021_table4.yaml"), 0.1, tmp_path)
    assert {tuple(e["event"]["rounds"]) for e in table4["experiments"].values()} == {(2, 3, 5, 7)}  # 10..70
    with pytest.raises(ConfigError, match="fraction has value 1.5"):
        scaled_config(mnist, 1.5, None)
    text = load_config(PAPER / "ma2022_efl_table2_shakespeare.yaml")
    with pytest.raises(ConfigError, match="dataset has value 'shakespeare'.*cannot stand in"):
        scaled_config(text, 0.1, None)


def test_every_fraction_runs_the_jobs_of_the_full_grid():
    """Left to the estimate, 10 rounds of one seed of the MNIST grid would train both settings in one job,
    20 rounds in two, where the full grid trains a job per cell: each fraction gets the full grid's jobs."""
    mnist = load_config(PAPER / "ruan2021_table3_mnist.yaml")
    assert full_grid_jobs(mnist) == {"ruan2021_table3_mnist": "cell"}
    for fraction in (0.05, 0.1):
        scaled = scaled_config(mnist, fraction, None)
        assert scaled["experiments"]["ruan2021_table3_mnist"]["cells_per_job"] == "cell"
        auto = {**scaled["experiments"]["ruan2021_table3_mnist"], "cells_per_job": "auto"}
        cells = by_cell(expand_runs(validate_config({"experiments": {"x": auto}})))
        assert cells_per_job(cells, level="auto") == ("group" if fraction == 0.05 else "setting")
    # a grid the full run trains in one job stays in one; a level the config forces is the full grid's
    smoke = load_config(PAPER / "algorithms_smoke.yaml")
    assert set(full_grid_jobs(smoke).values()) == {"group"}
    assert {e["cells_per_job"] for e in scaled_config(smoke, 0.5, None)["experiments"].values()} == {"group"}
    mnist["experiments"]["ruan2021_table3_mnist"]["cells_per_job"] = "group"
    assert scaled_config(mnist, 0.1, None)["experiments"]["ruan2021_table3_mnist"]["cells_per_job"] == "group"


def test_the_scaled_config_the_workflow_reads_validates_again(tmp_path):
    """hetfl project writes its scaled copy of a validated config as its workflow's config file (project):
    there every default validation filled in (m 2 beside dirichlet, sizes.size beside equal on a real
    source, iid false) reads as written, and must not be refused as a key nothing reads."""
    config = validate_config({"experiments": {"e": {
        "table": "none", "dataset": "mnist", "settings": {"D": {"partition": {"label_skew": "dirichlet"}}},
        "sizes": {"distribution": "equal"}, "num_devices": 4, "schemes": ["B"], "num_traces": [1],
        "rounds": 4, "seeds": [0, 1]}}})
    exp = config["experiments"]["e"]
    assert (exp["settings"]["D"]["partition"]["m"], exp["sizes"]["size"], exp["settings"]["D"]["iid"]) \
        == (2, 20, False)
    scaled = scaled_config(config, 0.5, tmp_path)
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(scaled, sort_keys=False))
    assert validate_config(yaml.safe_load(configfile.read_text())) == scaled
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "-s",
                           str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
                           str(configfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_line_and_the_projection_by_hand():
    a, b = fit([(0.05, 12.0), (0.1, 20.0)])  # slope 8 / 0.05 = 160, intercept 12 − 8 = 4
    assert (a, b) == pytest.approx((4.0, 160.0))
    p = Projection(((0.05, 12.0), (0.1, 20.0)), a, b, runs_measured=48, runs_full=144, cores=2)
    assert p.seconds == pytest.approx((4 + 160) * 3)  # T(1) × 144 / 48 runs
    assert "492 s (0.14 h) for all 144 runs on 2 core(s)" in p.report()
    assert "trained as" not in p.report()
    jobs = Projection(p.points, a, b, 48, 144, 2, (("m", "cell"), ("s", "group"), ("t", "cell"))).report()
    assert "  trained as the full grid trains them, a job per cell: m, t\n" in jobs
    assert "  trained as the full grid trains them, one job for all its cells: s\n" in jobs
    with pytest.raises(ValueError, match="two different fractions"):
        fit([(0.1, 3.0), (0.1, 4.0)])


def test_a_slope_below_the_timing_noise_is_named_and_never_negative():
    """Measured on the paper SYNTHETIC grid at f = 0.05 and 0.1: 37.1 s and 35.1 s, a slope of −40 s, so
    T(1) = −0.9 s and the grid (× 5) −4.5 s before; now the fixed part alone, 39.1 s × 5, and the report
    says why."""
    a, b = fit([(0.05, 37.1), (0.1, 35.1)])
    assert (a, b) == pytest.approx((39.1, -40.0))
    p = Projection(((0.05, 37.1), (0.1, 35.1)), a, b, runs_measured=48, runs_full=240, cores=2)
    assert p.below_noise and p.seconds == pytest.approx(39.1 * 5)
    assert "did not grow with the rounds between f = 0.05 and 0.1" in p.report()
    assert "--fractions (e.g. 0.25 0.5)" in p.report() and "projected: 196 s" in p.report()
    assert not Projection(((0.05, 12.0), (0.1, 20.0)), 4.0, 160.0, 48, 144, 2).below_noise


def test_bad_arguments_are_named_before_any_work(tmp_path):
    config = validate_config({"experiments": {"e": {
        "table": "none", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
        "num_devices": 4, "schemes": ["C"], "num_traces": [1], "rounds": 20, "seeds": [0]}}})
    with pytest.raises(ConfigError, match=r"--fractions has value \[0.1\]"):
        project(config, [0.1], workdir=tmp_path)
    with pytest.raises(ConfigError, match="--snakefile nowhere/Snakefile does not exist"):
        project(config, [0.1, 0.2], workdir=tmp_path, snakefile=Path("nowhere/Snakefile"))
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
def test_a_small_grid_is_projected_from_two_measured_runs(tmp_path):
    """The real workflow at 25 % and 50 % of 8 rounds on a 4-device SYNTHETIC grid (2 seeds → 1 measured)."""
    config = validate_config({"experiments": {"e": {
        "table": "none", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
        "num_devices": 4, "schemes": ["B", "C"], "num_traces": [2], "rounds": 8, "seeds": [0, 1]}}})
    p = project(config, [0.25, 0.5], cores=2, workdir=tmp_path, snakefile=ROOT / "Snakefile")
    assert [f for f, _ in p.points] == [0.25, 0.5] and all(s > 0 for _, s in p.points)
    assert (p.runs_measured, p.runs_full) == (2, 4)
    assert p.jobs == (("e", "group"),)  # 8 rounds of 4 devices: one job in full, so one at each fraction
    # 2 and 4 rounds of a 4-device grid: the slope may be below the timing noise, and is then counted as 0
    assert p.seconds == pytest.approx((p.a + max(p.b, 0.0)) * 2)
    for f, rounds in ((0.25, 2), (0.5, 4)):
        runs = sorted((tmp_path / f"f{f:g}" / "results/e").glob("*/run.json"))
        assert len(runs) == 2 and all(f'"rounds": {rounds}' in r.read_text() for r in runs)


def test_a_kept_directory_with_an_earlier_projection_is_refused(tmp_path, monkeypatch):
    """Run again in the same --keep DIR, Snakemake found the first projection's outputs up to date and the
    second projection timed nothing (2 s instead of 19 s; an audit): it is refused before any work."""
    import subprocess

    calls = []
    monkeypatch.setattr("hetfl.projection.subprocess.run",
                        lambda argv, **kw: calls.append(argv) or subprocess.CompletedProcess(argv, 0, "", ""))
    config = validate_config({"experiments": {"e": {
        "table": "none", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
        "num_devices": 4, "schemes": ["C"], "num_traces": [1], "rounds": 20, "seeds": [0]}}})
    (tmp_path / "f0.2" / "results").mkdir(parents=True)  # what an earlier projection left
    with pytest.raises(ConfigError, match=r"--keep .* already holds a projection's workflow .*f0\.2"):
        project(config, [0.1, 0.2], workdir=tmp_path, snakefile=ROOT / "Snakefile")
    assert calls == [] and (tmp_path / "f0.2" / "results").is_dir()  # nothing run, nothing removed
    (tmp_path / "f0.1").mkdir()  # an empty directory is fine
    project(config, [0.1, 0.3], workdir=tmp_path, snakefile=ROOT / "Snakefile")
    assert len(calls) == 2


def test_the_workflow_is_run_at_make_reproduces_job_rate(tmp_path, monkeypatch):
    """Snakemake's default 100/1s rate costs minutes of scheduler CPU on a grid (docs/engine-measurements.md,
    "`make reproduce`: where its time goes"); a projection must time the grid as `make reproduce` runs it."""
    import subprocess

    from hetfl.reproduce import LOCAL_JOB_RATE

    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr("hetfl.projection.subprocess.run", fake_run)
    config = validate_config({"experiments": {"e": {
        "table": "none", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
        "num_devices": 4, "schemes": ["C"], "num_traces": [1], "rounds": 20, "seeds": [0]}}})
    project(config, [0.1, 0.2], workdir=tmp_path, snakefile=ROOT / "Snakefile")
    assert len(calls) == 2
    for argv in calls:
        assert argv[1:3] == ["-m", "hetfl.snakemake_main"]  # without the wait for the last timer at exit
        i = argv.index("--max-jobs-per-timespan")
        assert argv[i + 1] == LOCAL_JOB_RATE == "10000/10s"


def _workflow_calls(monkeypatch) -> list[list[str]]:
    """The workflow runs project() starts, recorded instead of run."""
    import subprocess

    calls: list[list[str]] = []
    monkeypatch.setattr("hetfl.projection.subprocess.run",
                        lambda argv, **kw: calls.append(argv) or subprocess.CompletedProcess(argv, 0, "", ""))
    return calls


def _resources(argv: list[str]) -> list[str]:
    i = argv.index("--resources")
    return list(itertools.takewhile(lambda a: not a.startswith("--"), argv[i + 1:]))


def _grid(model: str, dataset: str) -> dict:
    setting = {"alpha": 1.0, "beta": 1.0} if dataset == "synthetic" else {"partition": {"label_skew": "iid"}}
    return validate_config({"experiments": {"e": {
        "table": "none", "dataset": dataset, "settings": {"N": setting}, "model": model, "num_devices": 4,
        "schemes": ["C"], "num_traces": [1], "rounds": 20, "seeds": [0]}}})


def test_with_hetfl_gpus_the_projection_runs_the_workflow_with_the_gpu_and_says_so(tmp_path, monkeypatch):
    """With HETFL_GPUS=1 the workflow trains a CNN's runs on cuda (hetfl.cluster.train_device), each job
    asking for the resource gpu, which a local run leaves unconstrained unless --resources names it: the
    projection ran as many GPU jobs at once as it had cores, on one GPU, and reported '2 core(s)' only. It
    now runs the workflow with --resources gpu=1, as a one-GPU machine runs the grid, and says so; without
    HETFL_GPUS, or with no GPU model in the grid (no job asks for one), nothing changes."""
    calls = _workflow_calls(monkeypatch)
    monkeypatch.setenv("HETFL_GPUS", "1")
    p = project(_grid("cnn", "mnist5k"), [0.1, 0.2], workdir=tmp_path / "gpu", snakefile=ROOT / "Snakefile")
    assert [_resources(argv) for argv in calls] == [["mlflow_store=1", "gpu=1"]] * 2
    assert p.gpus == 1
    assert "wall on 2 core(s) and 1 GPU, 1 runs" in p.report(), p.report()
    assert "for all 1 runs on 2 core(s) and 1 GPU (T(1)" in p.report(), p.report()
    for env, grid in (({}, _grid("cnn", "mnist5k")), ({"HETFL_GPUS": "1"}, _grid("logreg", "synthetic"))):
        calls.clear()
        monkeypatch.delenv("HETFL_GPUS", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        p = project(grid, [0.1, 0.2], workdir=tmp_path / f"cpu{len(env)}", snakefile=ROOT / "Snakefile")
        assert [_resources(argv) for argv in calls] == [["mlflow_store=1"]] * 2
        assert p.gpus == 0 and "GPU" not in p.report(), p.report()


def test_a_bad_hetfl_gpus_is_named_before_any_work(tmp_path, monkeypatch):
    calls = _workflow_calls(monkeypatch)
    monkeypatch.setenv("HETFL_GPUS", "2")
    with pytest.raises(ValueError, match="environment variable HETFL_GPUS has value '2'"):
        project(_grid("cnn", "mnist5k"), [0.1, 0.2], workdir=tmp_path, snakefile=ROOT / "Snakefile")
    assert calls == [] and not any(tmp_path.iterdir())
