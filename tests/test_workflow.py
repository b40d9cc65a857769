"""End to end: the Snakemake workflow on workflow/config/tiny.yaml, in a scratch directory."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "workflow/config/tiny.yaml"


def _snakemake(workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(TINY), "--cores", "2", *extra],
        capture_output=True, text=True, env=env)


# workflow_dir: the tiny workflow, run once per session (conftest.py; tests/test_report.py reads it too)


@pytest.mark.slow
def test_table_is_built_with_paper_values(workflow_dir):
    table = pd.read_csv(workflow_dir / "reports/tables/accuracy_difference.csv")
    cols = ["dataset", "setting", "num_traces", "comparison", "reproduced_mean", "reproduced_std", "paper",
            "ci_low", "ci_high", "n_seeds", "verdict", "improvement", "local_work", "completion",
            "trace_assignment"]
    assert set(cols) <= set(table.columns)
    assert len(table) == 2 * 2 * 2  # |T| ∈ {1, 6} × two comparisons × {points, relative}
    assert set(table["n_seeds"]) == {2} and set(table["local_work"]) == {"steps"}
    row = table[(table.num_traces == 6) & (table.comparison == "B_vs_A")].iloc[0]
    assert row["paper"] == pytest.approx(30.5)  # SYNTHETIC NIID |T| = 6, paper Table 3
    assert set(table["verdict"]) == {"not comparable"}  # 8 devices and 4 rounds are not the paper's set-up
    md = (workflow_dir / "reports/tables/accuracy_difference.md").read_text()
    assert "100·(acc_B − acc_A)" in md and "num_devices = 8 (paper: 50)" in md and "Verdicts: " in md
    assert "Runs read: " in md and "E[K_τ]" in md
    readings = pd.read_csv(workflow_dir / "reports/tables/accuracy_difference_readings.csv")
    assert set(readings["reading"]) == {"paper/default", "improvement=relative", "completion=floor"}
    # the cells a reading's grid did not run say so ("nan" read as a failed run; an audit)
    wide = (workflow_dir / "reports/tables/accuracy_difference_readings.md").read_text()
    assert "nan" not in wide.split("Every cell under every reading")[1]
    assert "the default's: " in wide  # an alternative's row gives the default's basis, labelled so


@pytest.mark.slow
def test_run_outputs_and_mlflow_mirror(workflow_dir):
    run = workflow_dir / "results/tiny_table3/NIID_T6_C_s0"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "ok" and info["spec"]["scheme"] == "C"
    assert len(info["split"]["sha256"]) == 64 and len(info["traces"]["sha256"]) == 64
    assert {"torch", "python", "hetfl"} <= set(info["versions"]) and info["wall_time_s"] > 0
    metrics = pd.read_parquet(run / "metrics.parquet")
    assert {"test_accuracy", "test_loss", "train_loss"} <= set(metrics["metric"])
    assert sorted(metrics.loc[metrics.metric == "test_accuracy", "round"]) == [1, 2, 3, 4]
    mirror = json.loads((workflow_dir / "results/tiny_table3/mlflow.json").read_text())
    run_id = mirror["runs"]["tiny_table3/NIID_T6_C_s0"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{workflow_dir / 'results/mlflow.db'}")
    exp = client.get_experiment_by_name("tiny_table3")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert len(runs) == 12 + 6 + 1  # its grid, the completion=floor variants (|T| = 6), its summary run
    run = client.get_run(run_id)
    assert run.data.params["scheme"] == "C"
    from hetfl.tracking import flat_ends

    # every evaluated round but those inside a flat stretch of the curve (tests/test_tracking.py)
    accuracy = metrics[metrics.metric == "test_accuracy"]
    history = client.get_metric_history(run_id, "test_accuracy")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == \
        [(r, v) for r, v in zip(flat_ends(accuracy)["round"], flat_ends(accuracy)["value"], strict=True)]
    assert {1, 4} <= {m.step for m in history}
    # what the MLflow UI shows: the training's duration, the source commit, artifacts, a description
    assert run.info.end_time - run.info.start_time == pytest.approx(info["wall_time_s"] * 1000, abs=50)
    assert run.data.tags["mlflow.source.git.commit"] == info["git_commit"]
    assert run.info.run_name == "tiny_table3/NIID_T6_C_s0"
    assert {a.path for a in client.list_artifacts(run_id)} == {"run.json", "metrics.parquet"}
    note = exp.tags["mlflow.note.content"]
    assert note.startswith("**tiny_table3**: table `accuracy_difference`")  # its own grid, then the config's
    assert note.endswith("\n\nPart of the grid: "
                         "Test-scale grid of Ruan et al. Tables 3-5 (tests/test_workflow.py).")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    summary = client.get_run(mirror["summaries"]["tiny_table3"])
    tables = {a.path for a in client.list_artifacts(summary.info.run_id, "tables")}
    figures = {a.path for a in client.list_artifacts(summary.info.run_id, "figures") if not a.is_dir}
    assert tables == {f"tables/accuracy_difference.{ext}" for ext in ("md", "csv", "tex")} | {
        f"tables/accuracy_difference_readings.{ext}" for ext in ("md", "csv")}
    assert figures == {f"figures/scheme_curves.{ext}" for ext in ("png", "svg", "caption.html")}
    splits = {a.path for a in client.list_artifacts(summary.info.run_id, "figures/splits")}
    assert splits == {f"figures/splits/tiny_table3.{ext}" for ext in ("png", "caption.html")}


def test_a_summary_run_carries_the_tables_of_its_runs_and_the_figures_captions(tmp_path):
    """The track job of a bmta experiment: its summary run carried bmta's table and EFL Figure 1 but not the
    fairness table built from the same runs (hetfl.reports.tables.SOURCES), nor a figure's caption (how
    its numbers are computed, the runs read) nor the experiment's split chart, so MLflow had none of them.
    `hetfl track --summary` takes one file each (it took every path after it): each file gets its own, and
    an experiment without a table a bare --summary, after the runs."""
    config = tmp_path / "efl.json"
    grid = {"dataset": "synthetic", "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}}, "num_devices": 6,
            "sizes": {"distribution": "equal", "size": 30}, "schemes": ["C"], "num_traces": [1],
            "local_epochs": 1, "rounds": 3, "seeds": [0], "algorithms": ["fedavg", "apfl"]}
    config.write_text(json.dumps({"experiments": {"t2": {"table": "bmta", **grid},
                                                  "t0": {"table": "none", **grid}}}))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
         str(tmp_path / "wd"), "--configfile", str(config), "--cores", "1", "-n", "-p",
         "results/t2/mlflow.json", "results/t0/mlflow.json"],
        capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls = [line.split(" > ")[0].split() for line in proc.stdout.splitlines() if "hetfl track" in line]
    (track,) = [c for c in calls if "results/t2/mlflow.json" in c]
    (bare,) = [c for c in calls if "results/t0/mlflow.json" in c]
    summary = [w.removeprefix("--summary=") for w in track if w.startswith("--summary")]
    tables = {f"reports/tables/{t}.{ext}" for t in ("bmta", "fairness") for ext in ("md", "csv", "tex")}
    figures = {f"reports/figures/efl_figure1.{ext}" for ext in ("png", "svg", "caption.html")}
    figures |= {f"reports/figures/splits/t2.{ext}" for ext in ("png", "caption.html")}
    assert sorted(summary) == sorted(tables | figures)  # each file once, each with its own --summary=
    runs = [w for w in track if w.endswith("/run.json")]
    assert track[-len(summary):] == [f"--summary={f}" for f in summary] and len(runs) == 2
    assert bare[-1] == "--summary" and bare[-3:-1] == [w.replace("t2", "t0") for w in runs]


@pytest.mark.slow
def test_rerun_of_a_job_gives_identical_metrics(workflow_dir, tmp_path):
    run = workflow_dir / "results/tiny_table3/NIID_T6_B_s1"
    info = json.loads((run / "run.json").read_text())
    out = tmp_path / "again"
    proc = subprocess.run(
        [sys.executable, "-m", "hetfl.cli", "train", "--spec", str(run / "run.json"),
         "--split", str(workflow_dir / info["split"]["path"]),
         "--traces", str(workflow_dir / info["traces"]["path"]), "--out", str(out), "--no-mlflow"],
        capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    again = pd.read_parquet(out / "metrics.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(run / "metrics.parquet"), again)


@pytest.mark.slow
def test_second_invocation_has_nothing_to_do(workflow_dir):
    proc = _snakemake(workflow_dir, "-n")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_deleted_run_file_is_made_again(workflow_dir, tmp_path):
    """A table reads run.json only, and Snakemake does not remake a missing file whose consumers exist: a
    deleted metrics.parquet stayed deleted ("Nothing to be done") until every run's files became targets."""
    metrics = workflow_dir / "results/tiny_table3/NIID_T1_A_s0/metrics.parquet"
    aside = tmp_path / "metrics.parquet"
    os.replace(metrics, aside)
    try:
        proc = _snakemake(workflow_dir, "-n")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-2000:]
        assert "Nothing to be done" not in out
        assert re.search(r"rule train_tiny_table3\b", out) and "results/tiny_table3/NIID_T1_A_s0" in out
    finally:
        os.replace(aside, metrics)


@pytest.mark.slow
def test_event_tables_and_figures(workflow_dir):
    fast = pd.read_csv(workflow_dir / "reports/tables/fast_reboot.csv")
    assert set(fast["method"]) == {"fast_reboot", "vanilla", "vanilla_minus_fast"}
    assert set(fast["tau0"]) == {3}
    assert (fast["n_seeds"] == 2).all() and {"paper", "ci_low", "ci_high", "verdict"} <= set(fast.columns)
    cross = pd.read_csv(workflow_dir / "reports/tables/crossing_epochs.csv")
    assert len(cross) == 1 and cross.iloc[0]["n_seeds"] == 2
    md = (workflow_dir / "reports/tables/crossing_epochs.md").read_text()
    assert "as the paper's Figure 4" in md  # the caption says which test data
    for table, reading in (("fast_reboot", "boost=multiplicative"),
                           ("crossing_epochs", "departure_test_set=remaining")):
        readings = pd.read_csv(workflow_dir / f"reports/tables/{table}_readings.csv")
        assert set(readings["reading"]) == {"paper/default", reading}
    for fig in ("scheme_curves", "arrival_curves", "departure_curves"):
        assert (workflow_dir / f"reports/figures/{fig}.png").stat().st_size > 1000
    run_json = workflow_dir / "results/tiny_table4/NIID_T5_C_arr3_fast_reboot_s0/run.json"
    run = json.loads(run_json.read_text())
    assert run["spec"]["event"]["devices"] == [5]


@pytest.mark.slow
def test_mirror_is_rebuilt_not_duplicated(workflow_dir):
    """`hetfl track` again on the same runs updates their MLflow mirror in place: same run ids, no
    deleted run (the workflow's track job already ran once)."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    before = json.loads((workflow_dir / "results/tiny_table4/mlflow.json").read_text())
    runs = sorted((workflow_dir / "results/tiny_table4").glob("*/run.json"))
    out = workflow_dir / "again.json"
    proc = subprocess.run([sys.executable, "-m", "hetfl.cli", "track", "--results-root",
                           str(workflow_dir / "results"), "--out", str(out), *map(str, runs)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["runs"] == before["runs"]
    client = MlflowClient(tracking_uri=f"sqlite:///{workflow_dir / 'results/mlflow.db'}")
    exp = client.get_experiment_by_name("tiny_table4")
    assert len(client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL)) == len(runs) + 1
    assert client.search_runs([exp.experiment_id], run_view_type=ViewType.DELETED_ONLY) == []


def _open_jobs(log: str, rule: str) -> int:
    """The most jobs of `rule` a Snakemake log shows running at once (started, not yet finished)."""
    running, most, current = set(), 0, None
    for line in log.splitlines():
        if line.startswith(("rule ", "localrule ")):
            current = line.split()[1].rstrip(":")
        elif line.strip().startswith("jobid: ") and current == rule:
            running.add(line.split()[1])
            most = max(most, len(running))
        elif line.startswith("Finished jobid: "):
            running.discard(line.split()[2])
    return most


def test_open_jobs_reads_a_snakemake_log():
    log = ("rule track:\n    jobid: 3\nrule track:\n    jobid: 4\nFinished jobid: 3 (Rule: track)\n"
           "localrule track:\n    jobid: 5\nFinished jobid: 4 (Rule: track)\n")
    assert _open_jobs(log, "track") == 2 and _open_jobs(log.replace("jobid: 4", "jobid: 4x"), "track") == 2
    assert _open_jobs("rule track:\n    jobid: 3\nFinished jobid: 3 (Rule: track)\n" * 3, "track") == 1


@pytest.mark.slow
def test_mirrors_run_one_at_a_time(workflow_dir, tmp_path):
    """Rule track asks for the `mlflow_store` resource, so with `--resources mlflow_store=1` (make reproduce)
    no two mirrors run at once: the store takes one writer, and a second mirror would hold a core waiting."""
    log = max((workflow_dir / ".snakemake/log").glob("*.snakemake.log"), key=lambda p: p.stat().st_size)
    text = log.read_text()
    assert text.count("rule track:") == 3 and _open_jobs(text, "track") == 1
    dry = _snakemake(tmp_path, "-n")
    jobs = [b for b in (dry.stdout + dry.stderr).split("rule ")[1:] if b.startswith("track:")]
    assert len(jobs) == 3 and all(re.search(r"resources: .*\bmlflow_store=1\b", b) for b in jobs)


def test_lint_finds_nothing_but_the_software_environment_remark(tmp_path):
    """snakemake --lint on the embedded default: only 'Specify a conda environment or container' remains
    (hetfl runs from one virtual environment on purpose). Its regex "rule .+?:" also matches comments,
    which is how helper functions next to rules slipped in before."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(ROOT / "workflow/config/quick.yaml"), "--lint"],
        capture_output=True, text=True, cwd=tmp_path)
    remarks = {line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("    * ")}
    assert remarks == {"* Specify a conda environment or container for each rule.:"}, remarks



MINI = {"experiments": {"m": {
    "table": "accuracy_difference", "dataset": "synthetic", "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}},
    "num_devices": 4, "sizes": {"distribution": "equal", "size": 20}, "schemes": ["A", "B", "C"],
    "num_traces": [1], "local_epochs": 1, "rounds": 2, "seeds": [0]}}}


def _snakemake_mini(workdir: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(config), "--cores", "1", *extra], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def mini_workflow(tmp_path_factory):
    """A three-run workflow (a table, a figure, a mirror), run once: (its config, its directory). A test
    copies the directory (shutil.copytree keeps the modification times Snakemake compares) before it edits
    it."""
    root = tmp_path_factory.mktemp("mini")
    config = root / "c.json"
    config.write_text(json.dumps(MINI))
    proc = _snakemake_mini(root / "wd", config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return config, root / "wd"


def _copy_of(mini_workflow, tmp_path: Path) -> Path:
    import shutil

    workdir = tmp_path / "wd"
    shutil.copytree(mini_workflow[1], workdir)
    proc = _snakemake_mini(workdir, mini_workflow[0], "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    return workdir


@pytest.mark.slow
def test_a_deleted_split_manifest_is_made_again(mini_workflow, tmp_path):
    """A training job reads its splits' manifest.json (hetfl.data.build.check_split), which no rule asked
    for: a deleted manifest stayed deleted ("Nothing to be done") and the next training job that read the
    split failed, asking for the split directory to be deleted by hand. Now the split job makes it again."""
    workdir = _copy_of(mini_workflow, tmp_path)
    (workdir / "data_splits/m/NIID/seed0/manifest.json").unlink()
    proc = _snakemake_mini(workdir, mini_workflow[0], "-n")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "Nothing to be done" not in out
    assert re.search(r"rule split\b", out) and "data_splits/m/NIID/seed0/manifest.json" in out


@pytest.mark.slow
def test_a_metrics_file_cut_off_by_hand_is_not_read_as_it_was(mini_workflow, tmp_path):
    """The table, figure and track jobs read metrics.parquet beside each run.json but declared run.json only:
    a metrics.parquet emptied by hand left the tables, figures and MLflow mirror as they were ("Nothing to
    be done"). Now they are built again, and that names the file and how to make it again."""
    workdir = _copy_of(mini_workflow, tmp_path)
    metrics = workdir / "results/m/NIID_T1_B_s0/metrics.parquet"
    metrics.write_bytes(b"")
    proc = _snakemake_mini(workdir, mini_workflow[0], "-n")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    for rule in ("table", "figure", "track"):
        assert re.search(rf"rule {rule}:", out), rule
    assert not re.search(r"rule train_m\b", out)
    proc = _snakemake_mini(workdir, mini_workflow[0], "--keep-going")
    log = (workdir / "logs/tables/accuracy_difference.log").read_text()
    assert proc.returncode != 0
    assert "malformed metrics.parquet (unreadable): results/m/NIID_T1_B_s0/metrics.parquet" in log
    assert "delete it and run snakemake again" in log


def test_a_trace_no_machine_here_can_hold_is_refused_before_any_job(tmp_path):
    """`rounds: 1099511627776` passed validation; the splits ran and the trace job then failed on a 64 TiB
    allocation. Snakemake now stops at its start (hetfl.cluster.check_memory), naming both keys."""
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"experiments": {"m": {**MINI["experiments"]["m"], "rounds": 2**40}}}))
    proc = _snakemake_mini(tmp_path / "wd", config)
    assert proc.returncode != 0
    assert "hetfl: experiment 'm', run 'NIID_T1_A_s0': rounds 1099511627776 x num_devices 4" in proc.stderr
    assert not (tmp_path / "wd/data_splits").exists() and not (tmp_path / "wd/logs").exists()
