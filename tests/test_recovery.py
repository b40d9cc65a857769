"""`make reproduce` (python -m hetfl.reproduce) recovers by itself from a killed run: a stale lock is removed,
jobs the kill left incomplete run again; a live snakemake is named, not unlocked (issue 11, item 16).
A YAML error in the config names its line before snakemake starts (item 10)."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from hetfl import reproduce

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """experiments:
  t:
    table: accuracy_difference
    dataset: synthetic
    settings:
      NIID: {alpha: 1.0, beta: 1.0}
    num_devices: 4
    sizes: {distribution: equal, size: 20}
    schemes: [B]
    num_traces: [1]
    local_epochs: 1
    rounds: 3
    seeds: [0]
"""
TARGET = "results/t/NIID_T1_B_s0/run.json"  # split, traces and one train job: 3 jobs


def _env() -> dict[str, str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _entry(workdir: Path, config: Path) -> list[str]:
    return [sys.executable, "-m", "hetfl.reproduce", "--directory", str(workdir), "--configfile", str(config),
            "--cores", "1", "-s", str(ROOT / "Snakefile"), TARGET]


@pytest.mark.slow
def test_reproduce_recovers_after_a_kill(tmp_path):
    config, workdir = tmp_path / "c.yaml", tmp_path / "wd"
    config.write_text(CONFIG)
    workdir.mkdir()
    first = subprocess.Popen(_entry(workdir, config), env=_env(), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    incomplete = workdir / ".snakemake" / "incomplete"
    deadline = time.monotonic() + 300
    while not (incomplete.is_dir() and any(incomplete.iterdir())):  # a job is running
        assert first.poll() is None and time.monotonic() < deadline, "no job started"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # snakemake and its job, as a closed terminal or the OOM killer
    first.wait()
    while reproduce.snakemake_pids(workdir) and time.monotonic() < deadline:  # SIGKILL lands asynchronously
        time.sleep(0.05)
    assert reproduce.stale_lock(workdir) is True
    # a job output the kill left behind half written: snakemake marks it incomplete
    marked = Path(base64.b64decode(next(incomplete.iterdir()).name).decode())
    (workdir / marked).parent.mkdir(parents=True, exist_ok=True)
    (workdir / marked).write_bytes(b"partial")

    plain = subprocess.run([sys.executable, "-m", "snakemake", "--directory", str(workdir), "--configfile",
                            str(config), "--cores", "1", "-s", str(ROOT / "Snakefile"), TARGET],
                           env=_env(), capture_output=True, text=True)
    out = plain.stdout + plain.stderr  # what `make reproduce` did on main: one of the two, then the other
    assert plain.returncode != 0 and ("IncompleteFilesException" in out or "LockException" in out)

    again = subprocess.run(_entry(workdir, config), env=_env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "holds the lock of an interrupted snakemake run and no snakemake is running there" in again.stderr
    assert (workdir / TARGET).is_file() and not reproduce.stale_lock(workdir)
    if marked.suffix == ".npz":
        np.load(workdir / marked)  # rewritten by the rerun, not the partial bytes


@pytest.mark.parametrize("name", ["snakemake", "hetfl.snakemake_main"])  # make reproduce runs the second
def test_a_running_snakemake_is_named_not_unlocked(tmp_path, name):
    config, workdir = tmp_path / "c.yaml", tmp_path / "wd"
    config.write_text(CONFIG)
    (workdir / ".snakemake" / "locks").mkdir(parents=True)
    (workdir / ".snakemake" / "locks" / "0.input.lock").write_text("")
    fake = tmp_path / "bin" / name  # a process whose argv[0] is that name, working in workdir
    fake.parent.mkdir()
    fake.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(fake), "60"], cwd=workdir)
    try:
        try:
            os.stat(f"/proc/{proc.pid}/cwd")
        except OSError as err:  # a sandbox whose /proc hides working directories: nothing to detect with
            pytest.skip(f"/proc does not show a child's working directory here: {err}")
        for _ in range(50):  # the child may not have exec'd yet
            if reproduce.stale_lock(workdir) == [proc.pid]:
                break
            time.sleep(0.1)
        assert reproduce.stale_lock(workdir) == [proc.pid]
        rc = reproduce.main(["--directory", str(workdir), "--configfile", str(config), "--cores", "1"])
        assert rc == 2
    finally:
        proc.kill()
        proc.wait()
    assert (workdir / ".snakemake" / "locks" / "0.input.lock").exists()  # left alone
    assert reproduce.stale_lock(workdir) is True
    assert reproduce.stale_lock(tmp_path) is False  # no lock at all


def test_a_yaml_error_names_its_line_before_snakemake_starts(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text(CONFIG.replace("    table:", "   table:"))
    rc = reproduce.main(["--directory", str(tmp_path), "--configfile", str(bad), "--cores", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "is not valid YAML" in err and "line 4, column" in err
    assert not (tmp_path / ".snakemake").exists()


@pytest.mark.parametrize("kind", ["directory", "binary"])
def test_a_config_that_is_a_directory_or_not_text_is_named_before_snakemake_starts(tmp_path, capsys, kind):
    """--configfile DIR was an IsADirectoryError traceback, and --configfile split.npz a UnicodeDecodeError
    one (`hetfl validate` said only "'utf-8' codec can't decode byte ..."); nothing named the flag."""
    config = tmp_path / "c"
    if kind == "directory":
        config.mkdir()
    else:
        config.write_bytes(b"PK\x03\x04\x90\xff binary")
    rc = reproduce.main(["--directory", str(tmp_path), "--configfile", str(config), "--cores", "1"])
    err = capsys.readouterr().err
    what = "a directory" if kind == "directory" else "not a text file (invalid start byte at byte 4)"
    assert rc == 2 and err.strip() == (
        f"hetfl reproduce: error: --configfile has value '{config}', which is {what}; allowed: a YAML config "
        "file, e.g. workflow/config/quick.yaml")
    assert not (tmp_path / ".snakemake").exists()


def test_the_run_lets_one_mlflow_mirror_run_at_a_time_unless_told_otherwise():
    rate = ["--max-jobs-per-timespan", reproduce.LOCAL_JOB_RATE]
    assert reproduce.run_args(["--cores", "2"]) == [
        "--rerun-incomplete", "--keep-going", "--resources", "mlflow_store=1", *rate, "--cores", "2"]
    for own in (["--resources", "mlflow_store=2"], ["--resources=gpu=1"]):
        assert reproduce.run_args(own) == ["--rerun-incomplete", "--keep-going", *rate, *own]


def test_the_scheduler_wakes_on_jobs_ends_unless_told_otherwise():
    """Snakemake's default 100/1s re-runs the scheduler every second per finished job (LOCAL_JOB_RATE);
    a rate the caller gives is theirs, and the constant is one Snakemake's own parser takes."""
    from snakemake.settings.types import MaxJobsPerTimespan

    limit = MaxJobsPerTimespan.parse_choice(reproduce.LOCAL_JOB_RATE)
    assert (limit.max_jobs, limit.timespan) == (10000, 10)
    for own in (["--max-jobs-per-timespan", "50/1m"], ["--max-jobs-per-timespan=50/1m"]):
        args = reproduce.run_args(own)
        assert reproduce.LOCAL_JOB_RATE not in args and args[-len(own):] == own
    profile = yaml.safe_load((ROOT / "workflow/profiles/default/config.yaml").read_text())
    assert profile["max-jobs-per-timespan"] == reproduce.LOCAL_JOB_RATE


def test_after_a_failed_run_the_report_bundles_only_up_to_date_outputs(tmp_path, capsys):
    """Snakemake's --report bundles whatever file exists: after a run whose training failed, the table of
    the previous grid (its runs removed with the failed job's outputs) was shown as the config's (an audit:
    a 5-round config's report showing the 4-round table). Only up-to-date outputs are bundled now."""
    calls = tmp_path / "calls"
    fake = tmp_path / "fake_snakemake.py"
    fake.write_text(
        "import sys\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if '--summary' in sys.argv:\n"
        "    print('output_file\\tdate\\trule\\tlog-file(s)\\tstatus\\tplan')\n"
        "    print('reports/tables/a.md\\tThu\\ttable\\tlogs/a.log\\tok\\tupdate pending')\n"
        "    print('reports/tables/b.md\\tThu\\ttable\\tlogs/b.log\\tok\\tno update')\n"
        "    print('results/e/r/run.json\\tThu\\ttrain_e\\t\\tok\\tno update')\n")
    snakemake = [sys.executable, str(fake)]
    assert reproduce.write_report(snakemake, ["--cores", "1"], dict(os.environ), failed=True) == 0
    report_call = calls.read_text().splitlines()[-1]
    assert report_call.endswith(f"--report {reproduce.REPORT} reports/tables/b.md")
    assert "reports/tables/a.md" in capsys.readouterr().err
    calls.unlink()  # a run that succeeded: the whole report, no summary asked for
    assert reproduce.write_report(snakemake, ["--cores", "1"], dict(os.environ)) == 0
    assert calls.read_text().splitlines() == [f"--cores 1 --report {reproduce.REPORT}"]
