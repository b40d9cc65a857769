"""A change under src/hetfl reruns exactly the jobs whose code it is (issue: old and new numbers must never be
mixed without a word). The workflow runs on a copy of the package, which the test then edits."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_registry import PLUGIN_ALGO  # tests/ is on the path (pytest's rootdir conftest)

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """
experiments:
  plain:
    table: none
    dataset: synthetic
    settings: {NIID: {alpha: 1.0, beta: 1.0}}
    num_devices: 4
    schemes: [C]
    num_traces: [2]
    rounds: 2
    seeds: [0]
  prox:
    table: none
    dataset: synthetic
    algorithm: fedprox
    settings: {NIID: {alpha: 1.0, beta: 1.0}}
    num_devices: 4
    schemes: [C]
    num_traces: [2]
    rounds: 2
    seeds: [0]
"""


def _snakemake(repo: Path, work: Path, *extra: str, site: Path | None = None,
               environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """snakemake on work/c.yaml with repo's code; site: put on the path after it; environ: set on top."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(str(p) for p in (repo / "src", site) if p)}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.update(environ or {})
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "--directory",
                           str(work), "--configfile", str(work / "c.yaml"), "--cores", "2", *extra],
                          capture_output=True, text=True, env=env, cwd=work)


def _ran_once(tmp_path: Path, config: str, site: Path | None = None) -> tuple[Path, Path]:
    """A copy of the repository's code (repo) and a workflow directory (work) on which the config has run
    once: an edit of the copy then shows what it reruns. site: a directory of installed plugins, put on the
    workflow's path. (That a run leaves "Nothing to be done" is _plain_ran's check, and each test's plan
    names what it may hold, so a job planned for another reason fails it.)"""
    repo = tmp_path / "repo"
    for part in ("src", "workflow"):  # with the bytecode: copytree keeps the times it is checked against
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("*.egg-info"))
    shutil.copy(ROOT / "Snakefile", repo / "Snakefile")
    work = tmp_path / "work"
    work.mkdir()
    (work / "c.yaml").write_text(config)
    first = _snakemake(repo, work, site=site)
    assert first.returncode == 0, first.stderr[-3000:]
    return repo, work


@pytest.fixture(scope="module")
def _plain_ran(tmp_path_factory) -> Path:
    """CONFIG run once for the tests that start from it (each takes its own copy, ``_copy_of``)."""
    root = tmp_path_factory.mktemp("plain")
    repo, work = _ran_once(root, CONFIG)
    again = _snakemake(repo, work, "-n")
    assert "Nothing to be done" in again.stdout + again.stderr
    return root


def _copy_of(ran: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of a ran-once pair (repo, work), as up to date as the original (Snakemake's records name the
    outputs relative to the working directory, and copytree keeps their times): each test's plan is exact,
    so a copy that planned more would fail it. The MLflow store stays behind: its artifact locations are
    absolute paths, which hetfl.tracking refuses to mirror into from a copy, and the next mirror makes a
    store of the copy's own."""
    shutil.copytree(ran, tmp_path, symlinks=True, dirs_exist_ok=True,
                    ignore=lambda d, names: {"mlflow.db", "mlartifacts"} & set(names))
    return tmp_path / "repo", tmp_path / "work"


def _planned(proc: subprocess.CompletedProcess) -> set[str]:
    stats = (proc.stdout + proc.stderr).split("Job stats:")[1].split("Reasons")[0]
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+$", stats, re.M)} - {"total", "all"}


@pytest.mark.slow
def test_editing_an_algorithm_reruns_its_runs_only(_plain_ran, tmp_path):
    repo, work = _copy_of(_plain_ran, tmp_path)

    fedprox = repo / "src/hetfl/algorithms/fedprox.py"
    fedprox.write_text(fedprox.read_text() + "\n_EDITED = True  # an edit of FedProx's code\n")
    plan = _snakemake(repo, work, "-n")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert _planned(plan) == {"train_prox", "track"}  # the FedProx cell and its mirror; not FedAvg's
    assert "Params have changed" in plan.stdout + plan.stderr

    engine = repo / "src/hetfl/engine/runner.py"
    engine.write_text(engine.read_text() + "\n_EDITED = True  # an edit of the round loop\n")
    assert _planned(_snakemake(repo, work, "-n")) == {"train_plain", "train_prox", "track"}


TABLES = """
experiments:
  t3:
    table: accuracy_difference
    dataset: synthetic
    settings: {NIID: {alpha: 1.0, beta: 1.0}}
    num_devices: 4
    schemes: [A, B]
    num_traces: [1]
    rounds: 2
    seeds: [0, 1]
  oi:
    table: objective_inconsistency
    dataset: quadratic
    model: quadratic
    settings: {S: {a: [1.0, 2.0], b: [1.0, 5.0], local_steps: [2, 10]}}
    algorithms: [fedavg, scaffold]
    lr_schedule: constant
    schemes: [B]
    num_traces: [1]
    batch_size: 1
    eta0: 0.01
    rounds: 20
    eval_every: 10
    seeds: [0]
"""


def _outputs(proc: subprocess.CompletedProcess) -> set[str]:
    """The files a dry run plans to write (its jobs' `output:` lines)."""
    return {f.strip() for m in re.finditer(r"^\s+output: (.+)$", proc.stdout + proc.stderr, re.M)
            for f in m.group(1).split(",")}


@pytest.mark.slow
def test_editing_a_tables_builder_rebuilds_that_table_only(tmp_path):
    """Every table and figure rule hashed one closure (hetfl.reports.tables imported every builder): an edit
    of objective_inconsistency.py rebuilt Table 3 and its figure too. Each table's and figure's code is its
    own now (hetfl.fingerprint.REGISTRIES); the report pages and the summary mirror of a rebuilt table
    follow it, as its files change."""
    repo, work = _ran_once(tmp_path, TABLES)

    for module, rebuilt, kept in (
            ("objective_inconsistency.py", {"reports/tables/objective_inconsistency.md",
                                            "reports/figures/objective_inconsistency.png"},
             {"reports/tables/accuracy_difference.md", "reports/figures/scheme_curves.png"}),
            ("ruan.py", {"reports/tables/accuracy_difference.md"},
             {"reports/tables/objective_inconsistency.md", "reports/figures/objective_inconsistency.png",
              "reports/figures/scheme_curves.png"})):
        path = repo / "src/hetfl/reports" / module
        code = path.read_text()
        path.write_text(code + "\n_EDITED = True  # an edit of one table's builder\n")
        plan = _snakemake(repo, work, "-n")
        assert plan.returncode == 0, plan.stderr[-3000:]
        planned = _outputs(plan)
        assert rebuilt <= planned and not kept & planned, (module, sorted(planned))
        assert _planned(plan) <= {"table", "figure", "report_table", "fidelity_summary", "track"}, module
        # undone before the next edit, which then shows this one's outputs back as they were (its `kept`):
        # the code is a param, not an input, so its time is not read
        path.write_text(code)


# A plugin whose registration (the entry point's AlgorithmEntry, with the table label) is a module of its
# own that its algorithm's module does not import: the label is outside the runs' code fingerprint.
LABEL_PLUGIN = {
    "params.py": """
from dataclasses import dataclass
from hetfl.algorithms.hparams import hyper


@dataclass(frozen=True)
class HalfParams:
    step: float = hyper(0.5, "server step size", exclusive_minimum=0.0)
""",
    # test_registry's plugin class (FedAvg with a server step size), its Params from the module above
    "algo.py": PLUGIN_ALGO.replace("from demo_plugin import", "from demo_labels.params import")
                          .replace('"demohalf"', '"demolabel"'),
    "registration.py": """
from demo_labels.params import HalfParams
from hetfl.algorithms.registry import AlgorithmEntry

ENTRY = AlgorithmEntry("demolabel", "demo_labels.algo:FedHalf", HalfParams, "a test plugin", "FedHalf")
""",
    "__init__.py": "",
}
LABELS = """
experiments:
  efl:
    table: bmta
    dataset: synthetic
    settings: {NIID: {alpha: 1.0, beta: 1.0}}
    num_devices: 4
    algorithms: [fedavg, demolabel]
    schemes: [C]
    num_traces: [1]
    rounds: 2
    seeds: [0, 1]
"""


@pytest.mark.slow
def test_a_plugins_new_label_rebuilds_the_tables_and_figures_that_print_it(tmp_path):
    """A plugin's table label was in no fingerprint: renamed in the plugin, the tables and figures kept
    printing the old one ("Nothing to be done"). The table and figure rules' `labels` param is the label of
    each algorithm they show (workflow/rules/common.smk, method_labels); the runs do not retrain."""
    site = tmp_path / "site"
    pkg = site / "demo_labels"
    pkg.mkdir(parents=True)
    for name, text in LABEL_PLUGIN.items():
        (pkg / name).write_text(text)
    info = site / "demo_labels-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-labels\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hetfl.algorithms]\ndemolabel = demo_labels.registration:ENTRY\n")
    repo, work = _ran_once(tmp_path, LABELS, site=site)
    table = work / "reports/tables/bmta.md"
    assert "FedHalf" in table.read_text()

    registration = pkg / "registration.py"
    registration.write_text(registration.read_text().replace('"FedHalf")', '"FedHalf (renamed)")'))
    plan = _snakemake(repo, work, "-n", site=site)
    assert plan.returncode == 0, plan.stderr[-3000:]
    # the tables that print the label (fairness is built from bmta's runs) and the figure drawn from them
    assert {"reports/tables/bmta.md", "reports/tables/fairness.md",
            "reports/figures/efl_figure1.png"} <= _outputs(plan)
    assert _planned(plan) <= {"table", "figure", "report_table", "fidelity_summary", "track"}
    done = _snakemake(repo, work, site=site)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FedHalf (renamed)" in table.read_text()
    assert "FedHalf (renamed)" in (work / "reports/figures/efl_figure1.caption.html").read_text()


@pytest.mark.slow
def test_a_new_version_of_torch_or_numpy_reruns_the_jobs_it_can_change(_plain_ran, tmp_path):
    """torch's and numpy's versions keyed a training checkpoint, but no rule saw them: after an upgrade the
    runs, splits and traces made under the old versions stayed ("Nothing to be done"), and a later edit
    retrained some runs only, old and new numbers side by side. Now the split, trace and training rules
    pass the versions of what they compute with (`versions` param, hetfl.fingerprint.VERSIONS); a
    training job rerun under the same versions restores its runs from their checkpoints."""
    repo, work = _copy_of(_plain_ran, tmp_path)
    for dist, rules in (("numpy", {"split", "split_figure", "trace", "train_plain", "train_prox", "track"}),
                        ("torch", {"train_plain", "train_prox", "track"})):
        site = tmp_path / f"site-{dist}"  # metadata only: the same modules, another version on record
        info = site / f"{dist}-0.0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
        plan = _snakemake(repo, work, "-n", site=site)
        assert plan.returncode == 0, plan.stderr[-3000:]
        assert _planned(plan) == rules, dist
    done = _snakemake(repo, work, site=site)  # the torch on record changed, the one that trains did not:
    assert done.returncode == 0, done.stderr[-3000:]  # the checkpoints' key holds, so nothing retrains
    logs = "".join(p.read_text() for p in (work / "logs/train").rglob("cell*.log"))
    assert logs.count("(restored)") == 2, logs[-2000:]
    again = _snakemake(repo, work, "-n", site=site)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_another_mlflow_store_mirrors_again(_plain_ran, tmp_path):
    """The mirror's store (MLFLOW_TRACKING_URI, else results/mlflow.db) reached no rule: pointed at another
    store, the workflow said "Nothing to be done", and that store never got the runs while mlflow.json
    still named the old one. The store is the track rule's `store` param."""
    repo, work = _copy_of(_plain_ran, tmp_path)
    store = {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'other.db'}"}
    plan = _snakemake(repo, work, "-n", environ=store)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert _planned(plan) == {"track"}
    done = _snakemake(repo, work, environ=store)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((work / "results/plain/mlflow.json").read_text())["tracking_uri"] == store[
        "MLFLOW_TRACKING_URI"]
