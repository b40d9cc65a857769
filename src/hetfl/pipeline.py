"""The steps of the one flow (split → traces → train), callable from the CLI and from tests."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

import hetfl
from hetfl.algorithms import make_algorithm
from hetfl.config import RunSpec
from hetfl.data import quadratic as quad_data
from hetfl.data import sizes as sizes_mod
from hetfl.data import synthetic, traces
from hetfl.data.federation import Federation, from_device_lists, load_federation, save_federation
from hetfl.engine.runner import ProgressLog, TrainResult, TrainSettings, train
from hetfl.io import atomic_write, atomic_write_json, file_sha256
from hetfl.models import make_model
from hetfl.models.base import BatchedModel


def build_synthetic(alpha: float, beta: float, iid: bool, num_devices: int, size_spec: dict[str, Any],
                    test_fraction: float, seed: int) -> Federation:
    """SYNTHETIC(α, β) with per-device counts from the size distribution and a local train/test holdout."""
    rng = np.random.default_rng([seed, 0])
    n = sizes_mod.sample_sizes(num_devices, sizes_mod.SizeSpec(**size_spec), rng)
    gen = synthetic.generate_synthetic(alpha, beta, n, rng, iid=iid)
    parts: list[list[np.ndarray]] = [[], [], [], []]
    for x, y in zip(gen.xs, gen.ys, strict=True):
        tr, te = synthetic.holdout_split(len(y), test_fraction, rng)
        for lst, arr in zip(parts, (x[tr], y[tr], x[te], y[te]), strict=True):
            lst.append(arr)
    return from_device_lists(*parts, num_classes=gen.b.shape[-1])


def make_split(out_npz: str | Path, *, dataset: str, alpha: float | None = None, beta: float | None = None,
               iid: bool = False, num_devices: int = 0, sizes: dict[str, Any] | None = None,
               test_fraction: float = 0.2, seed: int = 0, quadratic: dict[str, list[float]] | None = None
               ) -> dict[str, Any]:
    if dataset == "quadratic":
        q = quadratic or {}
        a, b = q.get("a", quad_data.DEFAULT_A), q.get("b", quad_data.DEFAULT_B)
        fed = quad_data.build_quadratic(a, b)
        meta = {"dataset": dataset, "a": list(a), "b": list(b), "seed": seed}
    elif dataset == "synthetic":
        if alpha is None or beta is None:
            raise ValueError("dataset 'synthetic' needs alpha and beta")
        fed = build_synthetic(alpha, beta, iid, num_devices, sizes or {}, test_fraction, seed)
        meta = {"dataset": dataset, "alpha": alpha, "beta": beta, "iid": iid, "sizes": sizes,
                "test_fraction": test_fraction, "seed": seed}
    else:
        raise ValueError(f"dataset '{dataset}' is unknown; allowed: synthetic, quadratic")
    out_npz = Path(out_npz)
    return save_federation(fed, out_npz, out_npz.with_name("manifest.json"), meta)


def make_traces(out_npz: str | Path, *, traceset: str, num_devices: int, rounds: int, seed: int
                ) -> traces.Traces:
    """Traces of a trace set ("T8", or names joined by '-'); see data.traces.parse_traceset."""
    names = traces.parse_traceset(traceset)
    tr = traces.generate_traces(len(names), num_devices, rounds, seed, names=names)
    out_npz = Path(out_npz)
    traces.save_traces(tr, out_npz, out_npz.with_suffix(".csv"))
    return tr


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for, but torch sees no CUDA device; allowed: auto, cpu")
    return torch.device(device)


def _make_model(name: str, fed: Federation) -> BatchedModel:
    if name == "quadratic":  # the analytic test bed (not a classifier, so not in models.MODELS)
        from hetfl.models.quadratic import Quadratic

        return Quadratic(fed.x_train.shape[1])
    return make_model(name, fed.x_train.shape[1], fed.num_classes)


def run_training(spec: RunSpec, split_npz: str | Path, traces_npz: str | Path, out_dir: str | Path,
                 *, device: str = "cpu", results_root: str | Path | None = None, track: bool = True,
                 progress: bool = True) -> TrainResult:
    """Train one run and write metrics.parquet and run.json (each atomically), then mirror to MLflow."""
    out_dir = Path(out_dir)
    dev = resolve_device(device)
    fed = load_federation(split_npz)
    tr = traces.load_traces(traces_npz)
    if tr.fractions.shape != (spec.rounds, fed.num_devices):
        raise ValueError(f"traces {traces_npz} have shape {tr.fractions.shape}; the run needs "
                         f"(rounds, num_devices) = ({spec.rounds}, {fed.num_devices})")
    model = _make_model(spec.model, fed)
    settings = TrainSettings(scheme=spec.scheme, local_epochs=spec.local_epochs, batch_size=spec.batch_size,
                             eta0=spec.eta0, rounds=spec.rounds, eval_every=spec.eval_every, seed=spec.seed,
                             lr_schedule=spec.lr_schedule, local_steps=spec.local_steps)
    algorithm = make_algorithm(spec.algorithm, spec.algorithm_params)
    start = time.perf_counter()
    log = ProgressLog(spec.rounds, f"{spec.experiment}/{spec.run}") if progress else None
    result = train(model, fed, tr.fractions, settings, device=dev, progress=log, algorithm=algorithm)
    wall = time.perf_counter() - start

    metrics = pd.DataFrame(result.records, columns=["round", "metric", "value"]).astype(
        {"round": "int64", "metric": "string", "value": "float64"})
    atomic_write(out_dir / "metrics.parquet", lambda tmp: metrics.to_parquet(tmp, index=False))
    info = {
        "spec": spec.to_dict(),
        "status": result.status,
        "rounds_done": result.rounds_done,
        "split": {"path": str(split_npz), "sha256": file_sha256(split_npz)},
        "traces": {"path": str(traces_npz), "sha256": file_sha256(traces_npz)},
        "versions": {"hetfl": hetfl.__version__, "python": platform.python_version(),
                     "torch": torch.__version__, "numpy": np.__version__, "pandas": pd.__version__},
        "git_commit": _git_commit(),
        "device": str(dev),
        "torch_threads": torch.get_num_threads(),
        "wall_time_s": round(wall, 3),
    }
    if track:
        try:
            from hetfl.tracking import log_run

            info["mlflow_run_id"] = log_run(
                results_root or "results", spec.experiment, spec.run, spec.to_dict(),
                result.records, {"hetfl.status": result.status, "git_commit": info["git_commit"]})
        except Exception as exc:  # results on disk are the source of truth: never lose them to tracking
            info["mlflow_error"] = repr(exc)
            print(f"warning: MLflow logging failed ({exc!r}); results are kept in {out_dir}", file=sys.stderr)
    atomic_write_json(out_dir / "run.json", info)
    return result


def spec_from_arg(arg: str) -> RunSpec:
    """A run spec from a JSON string or a path to a JSON file (e.g. an earlier run.json)."""
    text = Path(arg).read_text() if not arg.lstrip().startswith("{") else arg
    d = json.loads(text)
    return RunSpec.from_dict(d.get("spec", d))
