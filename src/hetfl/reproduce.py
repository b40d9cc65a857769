"""`make reproduce`: run the workflow, and recover by itself from an interrupted run.

A snakemake run that is killed (Ctrl-C twice, a closed terminal, an out-of-memory kill, a power loss)
leaves its lock in .snakemake/locks and marks the outputs of the jobs it was running as incomplete: the
next run stops with LockException and, once unlocked, may stop with IncompleteFilesException. This entry
point, before starting snakemake:

1. validates the config with hetfl, so a YAML syntax error names its line and column (snakemake's own
   message, "Config file is not valid JSON or YAML", does not), and checks the data of the splits it
   still has to make, missing or made for other data by their manifest.json (hetfl.config.check_data: a
   prepared domainnet/digit5 copy, a local copy that is there but unreadable, offline a hub source's copy
   in the datasets cache);
2. looks for a lock. If a snakemake process is working in the directory, it stops and names it; if none
   is, the lock is stale: it says so and removes it (`snakemake --unlock`);
3. runs snakemake with --rerun-incomplete (jobs cut off by the kill run again; finished jobs are kept)
   and --keep-going (a failing job does not stop the tables that do not depend on it), and
   --resources mlflow_store=1 (one MLflow mirror at a time: rule track; unless the arguments set
   --resources), and --max-jobs-per-timespan 10000/10s (LOCAL_JOB_RATE: Snakemake's scheduler wakes on
   jobs' ends, not every second; unless the arguments set it);
4. ends by writing reports/report.html (`snakemake --report`, same config; docs/report.md): every table
   and figure with its caption, opening on the fidelity summary. After a failed run it is still written,
   from the outputs that are up to date only: an output whose job failed or did not run (a table whose runs
   failed to retrain) is left out and named, not bundled as the config's result; its failure is reported
   without hiding the run's.

usage: python -m hetfl.reproduce --cores N --configfile FILE [--directory DIR] [other snakemake args]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from hetfl.cli import load_config_arg
from hetfl.config import ConfigError, check_data

#: what names a snakemake process in its first three arguments: `snakemake ...`, `python -m snakemake ...`,
#: and `python -m hetfl.snakemake_main ...`, as make reproduce runs it
SNAKEMAKE_ARGV = (b"snakemake", b"hetfl.snakemake_main")


def snakemake_pids(directory: Path) -> list[int]:
    """Processes running snakemake whose working directory is `directory` (Linux /proc; [] without it).

    Snakemake's --directory changes its working directory, so this finds `snakemake --directory DIR`
    started anywhere, and not the job processes (`hetfl train`) it spawns. Directories are compared by
    device and inode, not by path: under a chroot or a bind mount /proc names the same directory by
    another path."""
    try:
        target = os.stat(directory)
    except OSError:
        return []
    me, found = os.getpid(), []
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:3]
            cwd = os.stat(entry / "cwd")
        except OSError:  # gone, or not ours to read
            continue
        same_dir = (cwd.st_dev, cwd.st_ino) == (target.st_dev, target.st_ino)
        if same_dir and any(os.path.basename(a) in SNAKEMAKE_ARGV for a in argv):
            found.append(int(entry.name))
    return sorted(found)


def stale_lock(directory: Path) -> bool | list[int]:
    """False without a lock; True for a lock no running snakemake holds; the pids of those that may."""
    locks = directory / ".snakemake" / "locks"
    if not (locks.is_dir() and any(locks.iterdir())):
        return False
    return snakemake_pids(directory) or True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hetfl.reproduce", description=__doc__.split("\n")[0],
                                     epilog="Every other option goes to snakemake as given, e.g. --cores 2 "
                                            "(make reproduce passes it).")
    parser.add_argument("--configfile", required=True)
    parser.add_argument("--directory", "-d", default=".")
    args, rest = parser.parse_known_args(argv)
    directory = Path(args.directory)
    config = Path(args.configfile).resolve()
    if not directory.is_dir():
        print(f"hetfl reproduce: error: --directory has value {str(directory)!r}, which is not an "
              "existing directory; allowed: the workflow's directory (the checkout's root by default)",
              file=sys.stderr)
        return 2
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cwd = Path.cwd()
    try:
        os.chdir(directory)  # relative paths in the config (data_dir) are the workflow's
        # the data of the splits still to make, missing or made for other data (a prepared domainnet/digit5
        # copy, a readable local copy): refused here, not by the first split job after others ran (the
        # Snakefile's onstart checks it too, and also a split whose code alone changed: docs/datasets.md)
        check_data(load_config_arg("--configfile", config), splits_root="data_splits")
    except ConfigError as err:
        print(f"hetfl reproduce: error: {err}", file=sys.stderr)
        return 2
    finally:
        os.chdir(cwd)
    # hetfl.snakemake_main: Snakemake, minus the wait for its scheduler's last timer at exit
    snakemake = [sys.executable, "-m", "hetfl.snakemake_main", "--directory", str(directory),
                 "--configfile", str(config)]
    lock = stale_lock(directory)
    if isinstance(lock, list):
        print(f"hetfl reproduce: error: snakemake is already running in {directory.resolve()} (pid "
              f"{', '.join(map(str, lock))}); wait for it to finish or stop it, then run again",
              file=sys.stderr)
        return 2
    if lock:
        print(f"hetfl reproduce: {directory.resolve()} holds the lock of an interrupted snakemake run and no "
              "snakemake is running there: unlocking; jobs it left incomplete run again", file=sys.stderr)
        unlock = subprocess.run([*snakemake, *rest, "--unlock"], env=env, capture_output=True, text=True)
        if unlock.returncode:
            print(unlock.stderr[-2000:], file=sys.stderr)
            return unlock.returncode
    code = subprocess.run([*snakemake, *run_args(rest)], env=env).returncode
    (directory / REPORT).parent.mkdir(parents=True, exist_ok=True)  # a run of one target may not make it
    report = write_report(snakemake, rest, env, failed=bool(code))
    return code or report


#: `--max-jobs-per-timespan` of a local run. Snakemake's default, 100/1s, makes each pass of its scheduler
#: that leaves jobs waiting start a 1-second timer that triggers another pass, which starts another timer:
#: every job that finishes while others wait adds one such chain, and each pass re-evaluates the params and
#: resources and stats the inputs of every waiting job (snakemake/scheduling/job_scheduler.py, 9.27). In a
#: make reproduce on 2 cores the scheduler took 537 CPU-s, a fifth of all the run's CPU. Passes are also
#: triggered by every job that ends, so a 10-second timespan loses nothing but the wait for the last timer
#: at exit (at most 10 s), and 10,000 jobs per 10 s never limits a local run.
LOCAL_JOB_RATE = "10000/10s"


def _given(rest: list[str], option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in rest)


def run_args(rest: list[str]) -> list[str]:
    """The run's snakemake arguments: recover (--rerun-incomplete, --keep-going); let one MLflow mirror run
    at a time (rule track's `mlflow_store` resource: the store takes one writer, and a mirror waiting for it
    would hold a core) unless the caller sets --resources; re-evaluate the schedule on jobs' ends rather
    than every second (LOCAL_JOB_RATE) unless the caller sets --max-jobs-per-timespan."""
    own = [] if _given(rest, "--resources") else ["--resources", "mlflow_store=1"]
    if not _given(rest, "--max-jobs-per-timespan"):
        own += ["--max-jobs-per-timespan", LOCAL_JOB_RATE]
    return ["--rerun-incomplete", "--keep-going", *own, *rest]


#: where `make reproduce` writes the report, relative to the workflow directory
REPORT = "reports/report.html"


#: the outputs `snakemake --report` can bundle (every `report()` output of the workflow is under it)
REPORT_OUTPUTS = "reports/"


def report_outputs(snakemake: list[str], rest: list[str], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(up to date, not up to date): the workflow's outputs under REPORT_OUTPUTS by `snakemake --summary`'s
    plan ("no update" = up to date; "update pending" = its job failed, did not run, or its inputs, params or
    code changed since)."""
    proc = subprocess.run([*snakemake, *rest, "--summary"], env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"snakemake --summary failed:\n{proc.stderr[-2000:]}")
    fresh, stale = [], []
    for line in proc.stdout.splitlines()[1:]:  # header: output_file, date, rule, log-file(s), status, plan
        fields = line.split("\t")
        if len(fields) >= 2 and fields[0].startswith(REPORT_OUTPUTS):
            (fresh if fields[-1] == "no update" else stale).append(fields[0])
    return fresh, stale


def write_report(snakemake: list[str], rest: list[str], env: dict[str, str], failed: bool = False) -> int:
    """`snakemake --report reports/report.html` with the run's config; its own message on failure (e.g. an
    output it bundles is missing because its job failed).

    After a failed run (`failed`), the report bundles only the outputs that are up to date: Snakemake's
    --report bundles whatever file exists, so a table left from the previous grid, whose runs failed to
    retrain (and were removed), was shown as the config's result (an audit: a report of a 5-round config
    showing the 4-round table). The others are named."""
    targets: list[str] = []
    if failed:
        try:
            fresh, stale = report_outputs(snakemake, rest, env)
        except RuntimeError as err:
            print(f"hetfl reproduce: error: the report {REPORT} was not written: {err}", file=sys.stderr)
            return 1
        if stale:
            shown = ", ".join(stale[:10]) + (f" and {len(stale) - 10} more" if len(stale) > 10 else "")
            print(f"hetfl reproduce: the report leaves out {len(stale)} output(s) that are not up to date "
                  f"(their jobs failed or did not run): {shown}", file=sys.stderr)
            if not fresh:
                print(f"hetfl reproduce: error: the report {REPORT} was not written: none of its outputs "
                      "is up to date", file=sys.stderr)
                return 1
            targets = fresh
    proc = subprocess.run([*snakemake, *rest, "--report", REPORT, *targets], env=env, capture_output=True,
                          text=True)
    if proc.returncode:
        print(f"hetfl reproduce: error: the report {REPORT} was not written:\n{proc.stderr[-2000:]}",
              file=sys.stderr)
    else:
        print(f"hetfl reproduce: wrote {REPORT} (open it in a browser)", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
