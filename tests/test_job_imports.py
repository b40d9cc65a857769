"""A table's and a figure's code fingerprint against what building it imports (hetfl.fingerprint.REGISTRIES).

A table's rules hash the import closure of hetfl.reports.tables and of its builders' modules, which the
registry names ("module:function") and build_table imports when it builds the table; a figure's, that of
hetfl.reports.figures and its drawing function's module. The closure follows every import statement, but
not a module a registry entry or importlib names: each table and figure is built here, in a process of
its own, on run directories made from a shipped experiment of its table, and every hetfl module the build
imported must be in the closure its rule hashes. A module outside it is code whose edit would leave the
table or figure as it was, "Nothing to be done"."""

import copy
import functools
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from hetfl import fingerprint as fp
from hetfl.config import expand_runs, validate_config
from hetfl.reports.figures import FIGURES
from hetfl.reports.tables import BUILDERS, READINGS_BUILDERS, SOURCES

CONFIG = Path(__file__).resolve().parents[1] / "workflow/config"
#: where a table's experiments come from: the first of these files with an experiment of the table
CONFIGS = [CONFIG / "tiny.yaml", CONFIG / "quick.yaml", *sorted((CONFIG / "paper").glob("*.yaml")),
           *sorted((CONFIG / "checks").glob("*.yaml"))]
#: every metric a table or figure reads from a run's metrics.parquet
METRICS = ("test_accuracy", "test_loss", "mean_client_accuracy", "train_loss", "client_loss_variance",
           "client_loss_entropy", "client_loss_jain", "global_test_accuracy", "validation_accuracy",
           "nonzeros_up", "entropy_up", "bytes_up", "x")

# Forks a process per build from one that has imported no hetfl module (pandas, pyarrow and matplotlib
# are shared, as importing them is most of a build's time); each child prints the hetfl modules in
# sys.modules once its build is done. "before" is code a child runs first (the check's own test).
_CHILD = r"""
import json, os, sys
from pathlib import Path
import matplotlib, pandas, pyarrow.parquet, seaborn  # noqa: F401
assert not [m for m in sys.modules if m.split(".")[0] == "hetfl"]
results = []
for job in json.load(sys.stdin):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        error = None
        try:
            exec(job["before"], {})
            runs = [Path(d) for d in job["runs"]]
            if job["kind"] == "table":
                from hetfl.reports.tables import build_table
                build_table(job["name"], runs, Path(job["out"]), readings=job["readings"])
            else:
                from hetfl.reports.figures import build_figure
                build_figure(job["name"], runs, Path(job["out"]))
        except BaseException as e:
            error = f"{type(e).__name__}: {e}"
        with os.fdopen(w, "w") as f:
            json.dump({"modules": sorted(m for m in sys.modules if m.split(".")[0] == "hetfl"),
                       "error": error}, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        results.append(json.load(f))
    os.waitpid(pid, 0)
json.dump(results, sys.stdout)
"""


def _experiments(table: str, readings: bool) -> dict[str, dict]:
    """The experiments of `table` (and of the table its runs come from too, SOURCES) in the first shipped
    config that has one (where `readings`, one with a readings axis if a config has one), at 6 rounds (their
    own where an event needs more) and two seeds."""
    tables = {table, SOURCES.get(table)}
    configs = [yaml.safe_load(path.read_text()).get("experiments") or {} for path in CONFIGS]
    candidates = [{name: exp for name, exp in c.items() if exp.get("table") in tables} for c in configs]
    candidates = [c for c in candidates if c]
    assert candidates, f"no shipped config has an experiment of table {table}"
    with_axis = [c for c in candidates if any("readings" in e or "readings_grid" in e for e in c.values())]
    found = (with_axis or candidates)[0] if readings else candidates[0]
    out = {}
    for name, exp in found.items():
        exp = copy.deepcopy(exp)
        if not readings:
            exp.pop("readings", None)
            exp.pop("readings_grid", None)
        exp.update(rounds=exp["rounds"] if "event" in exp else 6, seeds=[0, 1], eval_every=1)
        for setting in (exp.get("settings") or {}).values():
            if isinstance(setting, dict):
                setting.pop("rounds", None)
        out[name] = exp
    return out


@functools.cache
def _runs(root: Path, table: str, readings: bool) -> tuple[str, ...]:
    """Run directories (run.json and a curve of every metric) of `table`'s experiments (_experiments)."""
    dirs = []
    for spec in expand_runs(validate_config({"experiments": _experiments(table, readings)})):
        d = root / ("readings" if readings else "main") / table / spec.experiment / spec.run
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        rows = [(r, m, 0.5 + 0.01 * r + 0.001 * spec.seed) for r in range(1, spec.rounds + 1)
                for m in METRICS]
        pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(d / "metrics.parquet")
        dirs.append(str(d))
    return tuple(dirs)


def _imports(root: Path, jobs: list[dict]) -> list[dict]:
    """Build each job ({kind, name, readings, before}) in a process of its own: [{modules, error}]."""
    for i, job in enumerate(jobs):
        table = job["name"] if job["kind"] == "table" else FIGURES[job["name"]][0]
        job.update(runs=list(_runs(root, table, job.get("readings", False))), out=str(root / "out" / str(i)),
                   readings=job.get("readings", False), before=job.get("before", ""))
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(jobs), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _outside(kind: str, name: str, modules: list[str]) -> list[str]:
    """The hetfl modules of `modules` whose files the code fingerprint of `kind`'s job `name` does not hash
    (fingerprint.NOT_CODE's are hashed by no job)."""
    files = set(fp.closure(fp.job_entries(kind, name)))
    return [m for m in modules if m not in fp.NOT_CODE and fp.module_file(m) not in files]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("job_imports")


def test_every_table_imports_only_modules_its_fingerprint_hashes(root):
    jobs = [{"kind": "table", "name": t} for t in BUILDERS]
    jobs += [{"kind": "table", "name": t, "readings": True} for t in READINGS_BUILDERS]
    for job, got in zip(jobs, _imports(root, jobs), strict=True):
        what = f"table {job['name']}" + (" --readings" if job.get("readings") else "")
        assert got["error"] is None, f"{what}: {got['error']}"
        builder = (READINGS_BUILDERS if job.get("readings") else BUILDERS)[job["name"]].partition(":")[0]
        assert builder in got["modules"], what
        outside = _outside("table", job["name"], got["modules"])
        assert outside == [], f"{what} imports {outside}, which its code fingerprint does not hash"


def test_every_figure_imports_only_modules_its_fingerprint_hashes(root):
    jobs = [{"kind": "figure", "name": f} for f in FIGURES]
    for job, got in zip(jobs, _imports(root, jobs), strict=True):
        assert got["error"] is None, f"figure {job['name']}: {got['error']}"
        assert FIGURES[job["name"]][1].partition(":")[0] in got["modules"], job["name"]
        outside = _outside("figure", job["name"], got["modules"])
        assert outside == [], f"figure {job['name']} imports {outside}, which its fingerprint does not hash"


def test_a_builder_importing_a_module_outside_its_closure_is_caught(root):
    """The check itself: communication_cost's builder made to import fairness by name at build time (as a
    registry entry or importlib would), which no import statement of its closure names."""
    before = ("import importlib\nfrom hetfl.reports import communication_cost as cc\nreal = cc.build\n"
              "def build(run_dirs, out_stem):\n"
              "    importlib.import_module('hetfl.reports.fairness')\n"
              "    return real(run_dirs, out_stem)\n"
              "cc.build = build\n")
    (got,) = _imports(root, [{"kind": "table", "name": "communication_cost", "before": before}])
    assert got["error"] is None, got["error"]
    assert "hetfl.reports.fairness" in _outside("table", "communication_cost", got["modules"])
