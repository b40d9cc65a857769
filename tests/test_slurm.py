"""The workflow on a cluster: which rules stay local, what training jobs ask for, and a real SLURM run.

The last test needs a SLURM that answers `sinfo` (scripts/slurm-local-up starts one on this machine) and
the executor plugin (`make slurm-setup`); it is skipped, saying which is missing, otherwise.
"""

import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hetfl.cluster import ENVIRONMENT, ClusterOptions, split_resources
from hetfl.data.sources import DATA_DIR_ENV
from hetfl.fingerprint import GIT_ENV

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "workflow/config/tiny.yaml"
PROFILE = ROOT / "workflow/profiles/slurm"
# the generated train_<experiment> rules (a job per cell) and the splits of large sources; the rest is local
CLUSTER_RULES = {"train", "split_large"}

#: cleared from the environment of each workflow run here: every HETFL_* variable the package or the
#: workflow reads (where cluster jobs go, the package's list hetfl.cluster.ENVIRONMENT; the data root,
#: HETFL_DATA_DIR, which config validation refuses where it names no directory; the git state the workflow
#: hands its jobs, hetfl.fingerprint.GIT_ENV, read where git cannot answer) and the MLflow server
HETFL_ENV = (*ENVIRONMENT, DATA_DIR_ENV, *GIT_ENV, "MLFLOW_TRACKING_URI")


def _snakemake(workdir: Path, configfile: Path, *extra: str, env: dict[str, str] | None = None):
    base = {k: v for k, v in os.environ.items() if k not in HETFL_ENV}
    base["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(configfile), *extra],
        capture_output=True, text=True, env={**base, **(env or {})})


def _rules(pattern: str) -> set[str]:
    text = "\n".join(p.read_text() for p in sorted((ROOT / "workflow/rules").glob("*.smk")))
    text += (ROOT / "Snakefile").read_text()
    return set(re.findall(pattern, text, flags=re.M))


def test_every_hetfl_variable_the_code_reads_is_cleared_before_a_workflow_run():
    """A HETFL_* variable of the user's environment changed what the workflow under test did:
    HETFL_SLURM_MAX_MEM_MB capped the memory, HETFL_SLURM_GPU_GRES turned --gpus into --gres, and the
    tests' list left both through; it also left HETFL_DATA_DIR (the data root) through, which made config
    validation refuse the runs here of a hub source where it named a directory this machine lacks. Every
    such name in the package or the workflow is cleared."""
    texts = [p.read_text() for p in sorted((ROOT / "src/hetfl").rglob("*.py"))]
    texts += [p.read_text() for p in sorted((ROOT / "workflow").rglob("*.smk"))]
    texts += [(ROOT / "Snakefile").read_text(), (PROFILE / "config.yaml").read_text()]
    read = set(re.findall(r"\bHETFL_[A-Z0-9_]+", "\n".join(texts)))
    assert {"HETFL_SLURM_MAX_MEM_MB", "HETFL_SLURM_GPU_GRES", "HETFL_DATA_DIR"} <= read  # the scan finds them
    assert read - set(HETFL_ENV) == set()


def test_a_users_data_dir_does_not_reach_the_workflow_under_test(tmp_path, monkeypatch):
    """HETFL_DATA_DIR naming a directory this machine lacks (a user's setting for another machine) failed
    the dry runs here: config validation refused the mnist and EMNIST experiments' data root."""
    monkeypatch.setenv("HETFL_DATA_DIR", str(tmp_path / "elsewhere"))
    config = {"experiments": {"img": {
        "table": "none", "dataset": "mnist", "settings": {"N": {"partition": {"label_skew": "iid"}}},
        "model": "mlp", "num_devices": 2, "schemes": ["A"], "num_traces": [1], "rounds": 2, "seeds": [0]}}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = _snakemake(tmp_path / "wd", path, "-n", "--cores", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_package_lists_exactly_the_variables_it_reads():
    """hetfl.cluster.ENVIRONMENT, which the tests clear, holds no name that ClusterOptions does not read:
    each, set alone, changes the options."""
    value = {"HETFL_GPUS": "1", "HETFL_SLURM_GPU_GRES": "gpu", "HETFL_SLURM_MAX_RUNTIME": "5",
             "HETFL_SLURM_MAX_MEM_MB": "512", "HETFL_SLURM_LOCAL_SPLIT_MB": "0",
             "HETFL_SLURM_GPU_GFLOPS": "7"}
    unset = ClusterOptions.from_environ({})
    for name in ENVIRONMENT:
        assert ClusterOptions.from_environ({name: value.get(name, "x")}) != unset, name


def test_every_light_rule_is_local():
    """A rule added later must be put in cluster.smk's localrules or here among the cluster rules."""
    block = re.search(r"^localrules:\n((?:    \w+,\n)+)", (ROOT / "workflow/rules/cluster.smk").read_text(),
                      flags=re.M)
    local = set(re.findall(r"\w+", block.group(1)))
    assert local == _rules(r"^rule (\w+):") - CLUSTER_RULES


def _train_jobs(dry_run_output: str) -> dict[str, tuple[bool, str]]:
    """The dry run's train jobs (one per cell) by experiment: (inside a group job, i.e. indented;
    resources + command)."""
    jobs = {}
    pattern = r"^( *)rule train_(\w+):\n((?:\1    .*\n)+)Shell command: (.*)"
    for m in re.finditer(pattern, dry_run_output, flags=re.M):
        jobs[m.group(2)] = (bool(m.group(1)), m.group(3) + m.group(4))
    return jobs


def test_training_jobs_ask_for_their_scale_and_the_environments_placement(tmp_path):
    """A CNN job gets a GPU in the GPU partition and trains on cuda; a SYNTHETIC job, short, joins the
    hetfl_short group in the CPU partition and trains on the CPU."""
    config = {"experiments": {
        "syn": {"table": "none", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
                "num_devices": 8, "schemes": ["A"], "num_traces": [1], "rounds": 3, "seeds": [0]},
        "img": {"table": "none", "dataset": "mnist", "settings": {"N": {"partition": {"label_skew": "iid"}}},
                "model": "cnn", "num_devices": 10, "schemes": ["A"], "num_traces": [1], "rounds": 200,
                "seeds": [0]},
    }}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {"HETFL_SLURM_PARTITION": "cpu", "HETFL_SLURM_GPU_PARTITION": "gpu", "HETFL_GPUS": "1",
           "HETFL_SLURM_ACCOUNT": "fl"}
    proc = _snakemake(tmp_path / "wd", path, "-n", "-p", "--cores", "2", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _train_jobs(proc.stdout + proc.stderr)
    grouped, cnn = jobs["img"]
    assert not grouped and re.search(r"resources:.*\bgpu=1\b", cnn) and "slurm_partition=gpu" in cnn
    assert "slurm_account=fl" in cnn and "--device cuda" in cnn
    # 200 rounds × 10,000 test images: hours on a CPU core, minutes by the GPU estimate
    gpu_minutes = int(re.search(r"\bruntime=(\d+)", cnn).group(1))
    assert gpu_minutes < 10
    grouped, syn = jobs["syn"]
    assert grouped and re.search(r"resources:.*\bgpu=0\b", syn) and "slurm_partition=cpu" in syn
    assert "--device cpu" in syn
    # without the environment: no GPU, no partition or account (the profile's defaults apply)
    proc = _snakemake(tmp_path / "wd", path, "-n", "-p", "--cores", "2")
    grouped, cnn = _train_jobs(proc.stdout + proc.stderr)["img"]
    assert not grouped and re.search(r"resources:.*\bgpu=0\b", cnn) and "--device cpu" in cnn  # hours: alone
    assert int(re.search(r"\bruntime=(\d+)", cnn).group(1)) > 10 * gpu_minutes  # 172 min on a CPU
    assert "slurm_partition" not in cnn and "slurm_account" not in cnn


def _split_jobs(dry_run_output: str) -> dict[str, tuple[str, str]]:
    """The dry run's split jobs by experiment: (rule, its job's lines)."""
    jobs = {}
    for m in re.finditer(r"^rule (split|split_large):\n((?:    .*\n)+)", dry_run_output, flags=re.M):
        experiment = re.search(r"output: data_splits/([^/]+)/", m.group(2)).group(1)
        jobs[experiment] = (m.group(1), m.group(2))
    return jobs


def test_splits_of_large_sources_are_cluster_jobs(tmp_path):
    """EMNIST's split loads 145,600 images (1.9 GB at its peak by the estimate): split_large, a cluster job
    with its memory; SYNTHETIC's stays in the local rule split. HETFL_SLURM_LOCAL_SPLIT_MB moves the line."""
    config = {"experiments": {
        "syn": {"table": "none", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
                "num_devices": 8, "schemes": ["A"], "num_traces": [1], "rounds": 3, "seeds": [0]},
        "em": {"table": "none", "dataset": "emnist-letters", "model": "cnn", "num_devices": 10,
               "settings": {"N": {"partition": {"label_skew": "iid"}}}, "schemes": ["A"], "num_traces": [1],
               "rounds": 2, "seeds": [0]},
    }}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = _snakemake(tmp_path / "wd", path, "-n", "-p", "--cores", "2",
                      env={"HETFL_SLURM_PARTITION": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _split_jobs(proc.stdout + proc.stderr)
    assert jobs["syn"][0] == "split" and jobs["em"][0] == "split_large"
    assert re.search(r"resources:.*\bmem_mb=3840\b", jobs["em"][1]) and "slurm_partition=cpu" in jobs["em"][1]
    proc = _snakemake(tmp_path / "wd", path, "-n", "--cores", "2", env={"HETFL_SLURM_LOCAL_SPLIT_MB": "4096"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {rule for rule, _ in _split_jobs(proc.stdout + proc.stderr).values()} == {"split"}


def test_bad_cluster_environment_stops_before_any_job(tmp_path):
    proc = _snakemake(tmp_path / "wd", TINY, "-n", "--cores", "2", env={"HETFL_GPUS": "all"})
    assert proc.returncode != 0
    assert "HETFL_GPUS has value 'all'" in proc.stderr
    assert "allowed: a whole number from 0 to 1" in proc.stderr


#: Without an accounting database sacct knows no jobs: squeue answers for them (slurm-local-up's MinJobAge
#: keeps a finished job in squeue for 600 s)
SQUEUE_STATUS = ("--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "5")


def _slurm_missing() -> str | None:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "the SLURM executor plugin is not installed (make slurm-setup)"
    if shutil.which("sinfo") is None:
        return "no SLURM here (scripts/slurm-local-up installs and starts a single-node one)"
    probe = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    if probe.returncode != 0 or not re.search(r"^(idle|mix|alloc)", probe.stdout, flags=re.M):
        said = (probe.stderr or probe.stdout).strip()
        return f"SLURM has no usable node (sinfo: {said!r}); start it with scripts/slurm-local-up"
    return None


def _outputs(root: Path) -> dict[str, bytes]:
    """Every split (its arrays and manifest), every run's metrics and every table, by path."""
    files = [*root.glob("data_splits/*/*/seed*/split.npz"), *root.glob("data_splits/*/*/seed*/manifest.json"),
             *root.glob("results/*/*/metrics.parquet"), *root.glob("reports/tables/*")]
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(files)}


def _tiny_grid() -> set[str]:
    """What the tiny config must write (every split's split.npz and manifest.json; every run's
    metrics.parquet; each table as .md, .csv, .tex and each readings table as .md, .csv:
    workflow/rules/common.smk)."""
    from hetfl.config import expand_runs, validate_config
    from hetfl.reports.tables import SOURCES

    runs = list(expand_runs(validate_config(yaml.safe_load(TINY.read_text()))))
    tables = {s.table for s in runs} - {"none"}
    tables |= {t for t, source in SOURCES.items() if source in tables}
    readings = {s.table for s in runs if s.reading} - {"none"}
    paths = {f"results/{s.experiment}/{s.run}/metrics.parquet" for s in runs}
    paths |= {f"data_splits/{s.split_key}/{name}" for s in runs for name in ("split.npz", "manifest.json")}
    paths |= {f"reports/tables/{t}.{ext}" for t in tables for ext in ("md", "csv", "tex")}
    paths |= {f"reports/tables/{t}_readings.{ext}" for t in readings for ext in ("md", "csv")}
    return paths


def _train_jobs_planned(log: str) -> int:
    """The training jobs in a Snakemake log's job stats (one per cell, or per setting or experiment where
    the cells are short: hetfl.cluster.cells_per_job)."""
    stats = log[log.index("Job stats:"):log.index("total", log.index("Job stats:"))]
    return sum(int(n) for n in re.findall(r"^train_\w+\s+(\d+)$", stats, flags=re.M))


def _cpu_busy_seconds() -> float:
    """CPU seconds this machine has spent busy (all processes, all cores) since boot: /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _timed(label: str, run, *args, **kwargs):
    """run(*args, **kwargs), printing its wall time, the CPU time of its process tree (what it waited for:
    not the jobs SLURM runs under slurmd), the whole machine's busy CPU time (every process: the SLURM jobs
    and anyone else's work) and the 1-minute load average before and after."""
    load0, busy0 = os.getloadavg()[0], _cpu_busy_seconds()
    rus0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = run(*args, **kwargs)
    wall, rus1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    tree = (rus1.ru_utime - rus0.ru_utime) + (rus1.ru_stime - rus0.ru_stime)
    print(f"\ntiny grid {label}: wall {wall:.0f} s, CPU {tree:.0f} s (its process tree), machine busy "
          f"{_cpu_busy_seconds() - busy0:.0f} CPU s on {os.cpu_count()} cores, "
          f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    return result


def _squeue(fields: str, jobids: list[str] | None = None) -> list[list[str]]:
    """squeue's rows of `fields` (its -o format) for the cluster jobs `jobids` (all where None), in every
    state: it keeps finished jobs for MinJobAge."""
    only = ["-j", ",".join(jobids)] if jobids is not None else []
    proc = subprocess.run(["squeue", "-h", "-t", "all", *only, "-o", fields], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [line.split() for line in proc.stdout.splitlines()]


def _slurm_elapsed(jobids: list[str]) -> str:
    """squeue's state and elapsed time of the cluster jobs."""
    return "; ".join(" ".join(row) for row in _squeue("%i %T %M %C", jobids))


def _submitted(log: str) -> dict[str, str]:
    """The cluster jobs a Snakemake log says it submitted: SLURM job id -> what ran in it, the name of its
    log's folder under .snakemake/slurm_logs (rule_<rule> for one job, group_<group>_<rules> for a group)."""
    pattern = r"submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/([^/\s]+)/"
    return {m.group(1): m.group(2) for m in re.finditer(pattern, log)}


def _minutes(limit: str) -> int:
    """squeue's time limit ([days-]hours:minutes:seconds or minutes:seconds) in whole minutes."""
    days, _, clock = limit.rpartition("-")
    parts = [int(v) for v in clock.split(":")]
    seconds = sum(v * 60**i for i, v in enumerate(reversed(parts)))
    return int(days or 0) * 1440 + seconds // 60


def _megabytes(memory: str) -> int:
    """squeue's memory request (e.g. 256M, 2G) in MB."""
    return round(float(memory[:-1]) * {"K": 2**-10, "M": 1, "G": 2**10, "T": 2**20}[memory[-1]])


def _slurm_requests(jobids: list[str]) -> dict[str, tuple[str, int, int]]:
    """squeue's (state, time limit in minutes, memory in MB) of the cluster jobs, by job id."""
    rows = _squeue("%i %T %l %m", jobids)
    return {i: (state, _minutes(limit), _megabytes(mem)) for i, state, limit, mem in rows}


def _slurm_nodes(jobids: list[str]) -> dict[str, str]:
    """The node each cluster job ran on (squeue's node list; one node a job here), by job id."""
    return dict(_squeue("%i %N", jobids))


def _ran_beside(ours: list[str]) -> list[str]:
    """Other cluster jobs that ran while any of `ours` did (another test's, under pytest's default
    distribution; `make test` runs this file's tests one after another): squeue's start and end times."""
    times = {i: (start, end) for i, start, end in _squeue("%i %S %e")  # ISO times: order by text
             if "N/A" not in (start, end)}
    first, last = min(times[i][0] for i in ours), max(times[i][1] for i in ours)
    return [i for i, (start, end) in times.items() if i not in ours and start < last and end > first]


def _nodes() -> set[str]:
    """The nodes of this SLURM (several where scripts/slurm-local-up ran with HETFL_LOCAL_NODES)."""
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


@pytest.mark.slow
@pytest.mark.skipif(_slurm_missing() is not None, reason=str(_slurm_missing()))
def test_tiny_grid_through_slurm_matches_a_local_run(tmp_path):
    """The slurm profile against a real scheduler: training in SLURM jobs (the short runs grouped), every
    split a split_large cluster job (HETFL_SLURM_LOCAL_SPLIT_MB=0) asking for the memory and time
    limit hetfl.cluster.split_resources gives it, the light rules on this host, and splits, metrics and
    tables byte-identical to a local run of the same config. Then, with the variable unset, nothing is
    rerun, and a split remade in the local rule split (on this host) is byte-identical too. On a SLURM of
    several nodes (HETFL_LOCAL_NODES=2 scripts/slurm-local-up) the split jobs run on more than one, where
    no other test's job held a node meanwhile."""
    expected = _tiny_grid()
    splits = {p for p in expected if p.endswith("/split.npz")}
    local = _timed("local (--cores 2)", _snakemake, tmp_path / "local", TINY, "--cores", "2")
    assert local.returncode == 0, local.stderr[-3000:]
    train_jobs = _train_jobs_planned(local.stdout + local.stderr)
    every_split_on_the_cluster = {"HETFL_SLURM_LOCAL_SPLIT_MB": "0"}
    # the profile as a user runs it (its cores: 1)
    slurm = _timed("through SLURM, every split a cluster job", _snakemake, tmp_path / "slurm", TINY,
                   "--profile", str(PROFILE), *SQUEUE_STATUS, env=every_split_on_the_cluster)
    log = slurm.stdout + slurm.stderr
    assert slurm.returncode == 0, log[-5000:]

    for rule in ("trace", "table", "table_readings", "figure", "split_figure", "track"):
        assert f"localrule {rule}:" in log
    assert "localrule train_" not in log and "Group job hetfl_short" in log
    assert "localrule split:" not in log
    # Snakemake's job stats count the training jobs it planned: the same jobs as the local run's
    assert train_jobs >= 2 and _train_jobs_planned(log) == train_jobs
    submitted = _submitted(log)
    print(f"cluster jobs submitted: {len(submitted)} ({len(splits)} splits, {train_jobs} training jobs); "
          f"squeue (id state elapsed cpus): {_slurm_elapsed(list(submitted))}")
    split_jobs = [i for i, what in submitted.items() if what == "rule_split_large"]
    training = [i for i, what in submitted.items() if what != "rule_split_large"]
    assert len(split_jobs) == len(splits)  # one cluster job a split
    assert 1 <= len(training) < train_jobs  # the short training jobs share cluster jobs (group hetfl_short)
    # what a split of SYNTHETIC asks for: 2 × its estimate (120 MB) rounded up to 256 MB, 60 min
    asked = split_resources("synthetic", ClusterOptions.from_environ(every_split_on_the_cluster))
    assert (asked["mem_mb"], asked["runtime"]) == (256, 60)
    requests = _slurm_requests(split_jobs)
    assert requests == {i: ("COMPLETED", asked["runtime"], asked["mem_mb"]) for i in split_jobs}
    ran_on, beside = _slurm_nodes(list(submitted)), _ran_beside(list(submitted))
    print(f"nodes (job: node): {ran_on}; other jobs meanwhile: {beside}")
    if len(_nodes()) > 1 and not beside:  # the 6 split jobs, submitted together, ask for 1 core each
        assert len({ran_on[i] for i in split_jobs}) > 1, ran_on

    ours, theirs = _outputs(tmp_path / "local"), _outputs(tmp_path / "slurm")
    assert set(ours) == expected
    assert ours.keys() == theirs.keys()
    assert [k for k in ours if ours[k] != theirs[k]] == []

    # the rule a split ran in does not matter: unset, the variable puts the splits back in the local rule
    # split, and that reruns nothing
    again = _snakemake(tmp_path / "slurm", TINY, "--profile", str(PROFILE), "-n", *SQUEUE_STATUS)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Nothing to be done" in again.stdout + again.stderr
    # and a split remade there, on this host, writes the same bytes
    split = sorted(splits)[0]
    remade = _snakemake(tmp_path / "slurm", TINY, "--profile", str(PROFILE), *SQUEUE_STATUS, "--force", split)
    log = remade.stdout + remade.stderr
    assert remade.returncode == 0, log[-3000:]
    assert "localrule split:" in log and not _submitted(log)
    assert (tmp_path / "slurm" / split).read_bytes() == ours[split]


def _sitecustomize(tmp_path: Path, code: str) -> dict[str, str]:
    """The environment that puts a sitecustomize.py of `code` on the path of every Python process of a
    workflow run (the SLURM jobs inherit it), before the path it has."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(code)
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}


def _memory_unenforced() -> str | None:
    """Why this SLURM lets a job use more memory than it asked for (None where it kills it: slurm-local-up's
    OverMemoryKill, or a site's task/cgroup)."""
    proc = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True)
    config = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", proc.stdout, flags=re.M))
    if "OverMemoryKill" in config.get("JobAcctGatherParams", "") or "cgroup" in config.get("TaskPlugin", ""):
        return None
    return ("this SLURM enforces no memory limit (neither JobAcctGatherParams=OverMemoryKill nor "
            "TaskPlugin=task/cgroup); scripts/slurm-local-up sets the first")


#: sitecustomize.py files, run by every Python process whose path holds their directory; each acts in
#: `hetfl train` alone, as a run needing more than its job's estimate would: "memory" holds and touches
#: BALLAST_MB megabytes until the process ends, "time" sleeps 10 minutes the first time it runs (it leaves
#: the file STALL_MARK)
OVERRUNS = {
    "memory": """
import os, sys
if os.path.basename(sys.argv[0]) == "hetfl" and sys.argv[1:2] == ["train"]:
    _ballast = bytearray(int(os.environ["BALLAST_MB"]) * 2**20)
    for _at in range(0, len(_ballast), 4096):
        _ballast[_at] = 1
""",
    "time": """
import os, sys, time
if os.path.basename(sys.argv[0]) == "hetfl" and sys.argv[1:2] == ["train"]:
    if not os.path.exists(os.environ["STALL_MARK"]):
        open(os.environ["STALL_MARK"], "w").close()
        time.sleep(600)
""",
}
#: the first job's squeue states and what its SLURM log says, by the limit it overran (memory:
#: OverMemoryKill's words and state, or task/cgroup's)
KILLED = {"memory": ({"FAILED", "OUT_OF_MEMORY"}, ("exceeded memory limit", "oom-kill")),
          "time": ({"TIMEOUT"}, ("DUE TO TIME LIMIT",))}


@pytest.mark.slow
@pytest.mark.skipif(_slurm_missing() is not None, reason=str(_slurm_missing()))
@pytest.mark.parametrize("limit", ["memory", "time"])
def test_a_training_job_killed_at_its_limit_is_retried_with_twice_as_much(tmp_path, limit):
    """docs/cluster.md: a job killed for memory or time is retried once (the profile's `retries: 1`),
    asking for twice the memory and time (hetfl.cluster.train_resources: × the attempt). The job's `hetfl
    train` overruns the first request (OVERRUNS: 1.3 × its memory beside its own, or 10 minutes' sleep
    against its time limit): SLURM kills the first job at that limit, and the second, asking for twice as
    much, completes the run. The memory case needs a SLURM that enforces memory (slurm-local-up's does)."""
    if limit == "memory" and (unenforced := _memory_unenforced()):
        pytest.skip(unenforced)
    from hetfl.cluster import train_resources
    from hetfl.config import expand_runs, validate_config

    config = {"experiments": {"big": {
        "table": "none", "dataset": "synthetic", "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}},
        "num_devices": 4, "schemes": ["C"], "num_traces": [1], "rounds": 2, "seeds": [0]}}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    specs = list(expand_runs(validate_config(config)))
    first, second = (train_resources(specs, ClusterOptions.from_environ({}), attempt) for attempt in (1, 2))
    assert second["mem_mb"] == 2 * first["mem_mb"] and second["runtime"] > first["runtime"]
    assert first["runtime"] < 10  # minutes: the "time" overrun's sleep outlasts the first job
    env = {**_sitecustomize(tmp_path, OVERRUNS[limit]),
           "BALLAST_MB": str(int(1.3 * first["mem_mb"])), "STALL_MARK": str(tmp_path / "stalled")}
    proc = _snakemake(tmp_path / "wd", path, "--profile", str(PROFILE), *SQUEUE_STATUS, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]

    jobs = sorted(_submitted(log), key=int)  # the splits and traces stay local: only the training job
    assert len(jobs) == 2 and "Trying to restart job" in log
    requests = _slurm_requests(jobs)
    states, said = KILLED[limit]
    assert requests[jobs[0]][0] in states and requests[jobs[0]][1:] == (first["runtime"], first["mem_mb"])
    assert requests[jobs[1]] == ("COMPLETED", second["runtime"], second["mem_mb"])
    killed = next((tmp_path / "wd/.snakemake/slurm_logs").glob(f"*/{jobs[0]}.log")).read_text()
    assert any(words in killed for words in said), killed[-2000:]
    run = json.loads((tmp_path / "wd" / f"results/big/{specs[0].run}/run.json").read_text())
    assert run["rounds_done"] == 2


#: a sitecustomize.py for the capped-job test: `hetfl train` process k (counted in the file STARTS) logs each
#: round it finishes to ROUNDS_LOG ("k tau") and, once round EVERY·k is finished and checkpointed, sleeps past
#: its job's time limit, unless that round is the run's last: a run needing three of its jobs' time limits,
#: each of which ends in a checkpoint, whatever the host's speed. It patches RunLoop.finish when the runner is
#: first imported, so that `hetfl train` itself imports torch as it always does.
STALLS_AFTER_EACH_CHECKPOINT = """
import importlib.abc, importlib.util, os, sys, time
if os.path.basename(sys.argv[0]) == "hetfl" and sys.argv[1:2] == ["train"]:
    with open(os.environ["STARTS"], "a") as f:
        f.write(str(os.getpid()) + "\\n")
    with open(os.environ["STARTS"]) as f:
        _attempt = len(f.read().split())

    def _stalling(finish):
        def finish_then_stall(loop, tau, finals):
            finish(loop, tau, finals)
            with open(os.environ["ROUNDS_LOG"], "a") as f:
                f.write(f"{_attempt} {tau}\\n")
            if tau == int(os.environ["EVERY"]) * _attempt and tau < loop.cfg.rounds:
                time.sleep(600)
        return finish_then_stall

    class _PatchRunner(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "hetfl.engine.runner":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)
                module.RunLoop.finish = _stalling(module.RunLoop.finish)
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _PatchRunner())
"""


@pytest.mark.slow
@pytest.mark.skipif(_slurm_missing() is not None, reason=str(_slurm_missing()))
def test_a_capped_job_resumes_from_its_checkpoints_in_the_next_snakemake_run(tmp_path):
    """docs/cluster.md: a job capped by HETFL_SLURM_MAX_RUNTIME asks for the cap again when retried and
    resumes from its runs' checkpoints (every 20 rounds, DEFAULT_CHECKPOINT_EVERY), so a cell that needs
    more than two caps of time needs Snakemake run again. A 60-round run whose `hetfl train` stalls after
    round 20, then after round 40 (STALLS_AFTER_EACH_CHECKPOINT), under a 1-minute cap: the first Snakemake
    run's two jobs both end at the cap (TIMEOUT), the second run's job resumes from round 40 and completes,
    and the run's metrics are byte-identical to an uninterrupted local run of the same config."""
    from hetfl.cluster import train_resources
    from hetfl.config import expand_runs, validate_config
    from hetfl.pipeline import DEFAULT_CHECKPOINT_EVERY as every

    config = {"experiments": {"long": {
        "table": "none", "dataset": "synthetic", "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}},
        "num_devices": 4, "schemes": ["C"], "num_traces": [1], "rounds": 3 * every, "seeds": [0]}}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    (spec,) = expand_runs(validate_config(config))
    capped = ClusterOptions.from_environ({"HETFL_SLURM_MAX_RUNTIME": "1"})
    first, second = (train_resources([spec], capped, attempt) for attempt in (1, 2))
    assert first["runtime"] == second["runtime"] == 1 and second["mem_mb"] == 2 * first["mem_mb"]
    env = {**_sitecustomize(tmp_path, STALLS_AFTER_EACH_CHECKPOINT), "HETFL_SLURM_MAX_RUNTIME": "1",
           "STARTS": str(tmp_path / "starts"), "ROUNDS_LOG": str(tmp_path / "rounds"), "EVERY": str(every)}
    metrics = f"results/long/{spec.run}/metrics.parquet"

    capped_run = _snakemake(tmp_path / "wd", path, "--profile", str(PROFILE), *SQUEUE_STATUS, env=env)
    log = capped_run.stdout + capped_run.stderr
    assert capped_run.returncode != 0 and "Trying to restart job" in log, log[-5000:]
    jobs = sorted(_submitted(log), key=int)
    assert len(jobs) == 2, log[-5000:]
    assert _slurm_requests(jobs) == {jobs[0]: ("TIMEOUT", 1, first["mem_mb"]),
                                     jobs[1]: ("TIMEOUT", 1, second["mem_mb"])}
    assert not (tmp_path / "wd" / metrics).exists()

    again = _snakemake(tmp_path / "wd", path, "--profile", str(PROFILE), *SQUEUE_STATUS, env=env)
    log = again.stdout + again.stderr
    assert again.returncode == 0, log[-5000:]
    (job,) = _submitted(log)
    assert _slurm_requests([job]) == {job: ("COMPLETED", 1, first["mem_mb"])}  # a new run's first attempt
    rounds = [tuple(map(int, line.split())) for line in (tmp_path / "rounds").read_text().splitlines()]
    # each job went on from the last checkpoint, the round after the one its predecessor stalled at
    assert rounds == [(1 + (tau - 1) // every, tau) for tau in range(1, 3 * every + 1)], rounds
    run = json.loads((tmp_path / "wd" / f"results/long/{spec.run}/run.json").read_text())
    assert run["rounds_done"] == 3 * every and run["resumed_from_round"] == 2 * every

    local = _snakemake(tmp_path / "local", path, "--cores", "1")
    assert local.returncode == 0, local.stderr[-3000:]
    assert (tmp_path / "wd" / metrics).read_bytes() == (tmp_path / "local" / metrics).read_bytes()


def _path_with_fakes(tmp_path: Path, tools: tuple[str, ...], body: str) -> str:
    """A PATH whose first folder holds a shell script `body` under each name in `tools`, so that a script
    under test calls them instead of the real ones."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body.format(tool=tool)}\n")
        (bin_dir / tool).chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


@pytest.mark.parametrize("written_by_us", [True, False])
def test_slurm_local_down_removes_only_the_config_local_up_wrote(tmp_path, written_by_us):
    """With slurm-local-up's config left behind and no controller, every SLURM client call waited about 9 s,
    and the SLURM executor plugin asks `scontrol show config` when Snakemake loads it: every Snakemake start
    on this machine took 11 s instead of 2. slurm-local-down removes that config (slurm-local-up writes it
    afresh) and leaves one it did not write. Fake scontrol and scancel keep the test off any real cluster."""
    if any(Path(p).exists() for p in ("/run/slurmd.pid", "/run/slurmctld.pid", "/run/munge/munged.pid")):
        pytest.skip("a local SLURM is running (scripts/slurm-local-up): slurm-local-down would stop it")
    # `scontrol ping` fails: no controller, so nothing is cancelled
    path = _path_with_fakes(tmp_path, ("scontrol", "scancel"), "exit 1")
    conf = tmp_path / "slurm.conf"
    conf.write_text(("# written by hetfl scripts/slurm-local-up: a single-node cluster for tests\n"
                     if written_by_us else "# a site's own config\n") + "ClusterName=x\n")
    env = {**os.environ, "PATH": path, "HETFL_SLURM_CONF_DIR": str(tmp_path)}
    out = subprocess.run([str(ROOT / "scripts/slurm-local-down")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert conf.exists() is not written_by_us
    assert ("removed" in out.stdout) is written_by_us


@pytest.mark.parametrize("nodes", ["0", "two", str(os.cpu_count() + 1)])
def test_slurm_local_up_refuses_a_bad_node_count_before_it_installs_or_starts_anything(tmp_path, nodes):
    """HETFL_LOCAL_NODES (docs/cluster.md) is a whole number from 1 to the CPUs, each node taking at least
    one: anything else is refused, naming the variable, the value and what is allowed, before the script
    installs packages or starts a daemon. Fakes of every such tool stand first on PATH and log any call.
    The CPUs are the machine's: `nproc` gave 1 under an exported OMP_NUM_THREADS=1, so one node of one CPU."""
    calls = tmp_path / "calls"
    path = _path_with_fakes(tmp_path, ("apt-get", "mungekey", "munge", "unmunge", "munged", "runuser",
                                       "slurmctld", "slurmd", "sinfo", "scontrol", "install"),
                            f"echo {{tool}} >> {calls}")
    env = {**os.environ, "PATH": path, "HETFL_LOCAL_NODES": nodes,
           "HETFL_SLURM_CONF_DIR": str(tmp_path / "conf"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([str(ROOT / "scripts/slurm-local-up")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert (f"HETFL_LOCAL_NODES has value '{nodes}'; allowed: a whole number from 1 to {os.cpu_count()}"
            in out.stderr), out.stderr
    assert not calls.exists() and not (tmp_path / "conf").exists()
