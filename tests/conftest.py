import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from xdist.scheduler import LoadFileScheduling

from hetfl.data.federation import from_device_lists
from hetfl.engine.reproducible import reproducible_cuda


def pytest_collection_modifyitems(config, items):
    """Files with a `slow` test (one that runs the Snakemake workflow) first, every file's tests in their
    own order: under `make test`'s `--dist loadfile --no-loadscope-reorder` the longest files start first
    and the many short ones fill in behind them. xdist's own reorder sends the files with the most tests
    first, so the few long workflow files started last and one worker ran them alone at the end."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: the rest keeps the collection order


#: test files that read a session fixture another file makes, scheduled in that file's unit of work:
#: tests/test_report.py reads workflow_dir (the tiny workflow, about 40 s), as tests/test_workflow.py does
SAME_UNIT = {"tests/test_report.py": "tests/test_workflow.py"}


class FileUnits(LoadFileScheduling):
    """`--dist loadfile`'s units (a file's tests on one worker: its module fixtures run once), with
    SAME_UNIT's files joined: one worker runs both, and their session fixture once. Apart, they went to
    one worker or to two as the order fell, and the tiny workflow then ran twice (make test's 2 × 41 s at
    b1b27d2). xdist's `--dist loadgroup` would say this with marks, but its xdist 3.8 sets an attribute
    that pytest 9's node ids no longer read, so every test is a unit of its own there."""

    def _split_scope(self, nodeid: str) -> str:
        file = super()._split_scope(nodeid)
        return SAME_UNIT.get(file, file)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which returns the plain LoadFileScheduling
def pytest_xdist_make_scheduler(config, log):
    return FileUnits(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.fixture(autouse=True, scope="session")
def _reproducible_cuda():
    """On a CUDA machine, as hetfl trains and measures there: no TF32, deterministic kernels
    (engine.reproducible). Nothing on the CPU."""
    if torch.cuda.is_available():
        reproducible_cuda()


@pytest.fixture
def torch_cuda_defaults(monkeypatch):
    """torch's own defaults for the settings engine.reproducible changes (TF32 allowed, as cuDNN allows
    it, nondeterministic kernels, no cuBLAS workspace and no cuDNN heuristic mode chosen) during the test;
    as they were afterwards. The TF32 flags are module properties, which monkeypatch cannot set."""
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
              torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.utils.deterministic.fill_uninitialized_memory, torch.backends.cudnn.benchmark)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("TORCH_CUDNN_USE_HEURISTIC_MODE_B", raising=False)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    torch.use_deterministic_algorithms(False)
    yield
    tf32_cudnn, tf32_matmul, deterministic, warn_only, fill, benchmark = before
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32_cudnn, tf32_matmul
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.utils.deterministic.fill_uninitialized_memory, torch.backends.cudnn.benchmark = fill, benchmark


@pytest.fixture
def tiny_fed():
    """Four devices of a random 60-feature, 10-class problem, sizes 5..80 (one smaller than a batch)."""
    rng = np.random.default_rng(0)
    sizes = [5, 30, 80, 13]
    xs = [rng.normal(size=(n, 60)).astype(np.float32) for n in sizes]
    ys = [rng.integers(0, 10, n) for n in sizes]
    return from_device_lists(xs, ys, [x[:3] for x in xs], [y[:3] for y in ys], num_classes=10)


ROOT = Path(__file__).resolve().parents[1]


def curve_run(root: Path, name: str, metric: str, values: list[float]) -> str:
    """A run directory <root>/<name> whose metrics.parquet holds one metric at rounds 1, 2, … (what the
    figures and event tables read from a run); its path as a string, as a runs frame's run_dir holds it."""
    d = Path(root) / name
    d.mkdir()
    pd.DataFrame({"round": range(1, len(values) + 1), "metric": metric, "value": values}).to_parquet(
        d / "metrics.parquet")
    return str(d)


def run_tiny_workflow(workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    """snakemake on workflow/config/tiny.yaml in `workdir` (2 cores, no MLflow server from the caller)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(ROOT / "workflow/config/tiny.yaml"), "--cores", "2", *extra],
        capture_output=True, text=True, env=env)


@pytest.fixture(scope="session")
def workflow_dir(tmp_path_factory):
    """The tiny workflow, run once per session: tests/test_workflow.py and tests/test_report.py read it."""
    workdir = tmp_path_factory.mktemp("wf")
    proc = run_tiny_workflow(workdir, "--resources", "mlflow_store=1")  # as make reproduce runs it
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir


def train_as_workflow(specs, root: Path):
    """Every run of ``specs`` trained as the workflow does: a split per split key and traces per trace key
    under ``root``, each run into results/<experiment>/<run>. Yields (spec, run dir, RunResult)."""
    from hetfl.data.build import make_split
    from hetfl.data.traces import make_traces
    from hetfl.pipeline import run_training

    for spec in specs:
        split = root / "splits" / spec.split_key / "split.npz"
        if not split.exists():
            make_split(split, spec.split_spec(), spec.seed)
        traces = root / "traces" / f"{spec.trace_key}.npz"
        if not traces.exists():
            make_traces(traces, traceset=spec.traceset, num_devices=spec.num_devices, rounds=spec.rounds,
                        seed=spec.seed)
        out = root / "results" / spec.experiment / spec.run
        yield spec, out, run_training(spec, split, traces, out, progress=False, checkpoint_every=0)
