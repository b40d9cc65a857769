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
from hetfl.config import TEXT_MODELS, RunSpec
from hetfl.data import concept_shift, traces
from hetfl.data.events import Event, Schedule, build_schedule
from hetfl.data.federation import Federation, from_device_lists, load_federation, save_federation
from hetfl.engine.runner import ProgressLog, TrainResult, TrainSettings, train
from hetfl.io import atomic_write, atomic_write_json, file_sha256
from hetfl.models import make_model
from hetfl.models.base import BatchedModel


def build_synthetic(alpha: float, beta: float, iid: bool, num_devices: int, size_spec: dict[str, Any],
                    test_fraction: float, seed: int) -> Federation:
    """SYNTHETIC(α, β) with per-device counts from the size distribution and a local train/test holdout."""
    from hetfl.data import sizes as sizes_mod
    from hetfl.data import synthetic

    rng = np.random.default_rng([seed, 0])
    n = sizes_mod.sample_sizes(num_devices, sizes_mod.SizeSpec(**size_spec), rng)
    gen = synthetic.generate_synthetic(alpha, beta, n, rng, iid=iid)
    parts: list[list[np.ndarray]] = [[], [], [], []]
    for x, y in zip(gen.xs, gen.ys, strict=True):
        tr, te = synthetic.holdout_split(len(y), test_fraction, rng)
        for lst, arr in zip(parts, (x[tr], y[tr], x[te], y[te]), strict=True):
            lst.append(arr)
    return from_device_lists(*parts, num_classes=gen.b.shape[-1])


def build_from_source(name: str, partition_spec: dict[str, Any], num_devices: int,
                      sizes: dict[str, Any] | None, test_fraction: float, seed: int,
                      data_dir: str | None = None, global_test: bool = True) -> Federation:
    """A real dataset dealt to devices: label skew × size skew, then a local train/test holdout each.

    `sizes` with distribution "equal" means the partitioner's own equal split of all samples. With
    `global_test`, the source's own test split (when it has one) becomes the global test set.
    """
    from hetfl.data import sizes as sizes_mod
    from hetfl.data.partition import PartitionSpec, local_holdout, partition
    from hetfl.data.sources import has_split, load_source

    src = load_source(name, data_dir=data_dir, split="train")
    held_out = None
    if global_test and has_split(name, "test", data_dir=data_dir):
        test = load_source(name, data_dir=data_dir, split="test")
        held_out = (test.x, test.y)
    size_spec = None if not sizes or sizes.get("distribution") == "equal" else sizes_mod.SizeSpec(**sizes)
    spec = PartitionSpec(**partition_spec, sizes=size_spec)
    parts = partition(src.y, spec, num_devices, seed, client_ids=src.client_ids)
    train_parts, test_parts = local_holdout(parts, test_fraction, seed)
    return from_device_lists([src.x[i] for i in train_parts], [src.y[i] for i in train_parts],
                             [src.x[i] for i in test_parts], [src.y[i] for i in test_parts],
                             num_classes=src.num_classes, global_test=held_out)


def make_split(out_npz: str | Path, split_spec: dict[str, Any], seed: int) -> dict[str, Any]:
    """Write split.npz and manifest.json for a split spec (RunSpec.split_spec())."""
    from hetfl.data import quadratic as quad_data
    from hetfl.data.sources import SOURCES

    s = dict(split_spec)
    dataset = s.get("dataset")
    if dataset == "quadratic":
        q = s.get("quadratic") or {}
        a, b = q.get("a", quad_data.DEFAULT_A), q.get("b", quad_data.DEFAULT_B)
        fed = quad_data.build_quadratic(a, b, q.get("n"))
    elif dataset == "synthetic":
        if s.get("alpha") is None or s.get("beta") is None:
            raise ValueError("dataset 'synthetic' needs alpha and beta")
        fed = build_synthetic(s["alpha"], s["beta"], s.get("iid", False), s["num_devices"],
                              s.get("sizes") or {}, s.get("test_fraction", 0.2), seed)
    elif dataset in SOURCES:
        fed = build_from_source(dataset, s.get("partition") or {"label_skew": "iid"}, s["num_devices"],
                                s.get("sizes"), s.get("test_fraction", 0.2), seed, s.get("data_dir"),
                                s.get("global_test", True))
    else:
        raise ValueError(f"dataset '{dataset}' is unknown; allowed: synthetic, quadratic, "
                         f"{', '.join(SOURCES)}")
    out_npz = Path(out_npz)
    return save_federation(fed, out_npz, out_npz.with_name("manifest.json"), {**s, "seed": seed})


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


def _make_model(name: str, fed: Federation, params: dict[str, Any] | None = None) -> BatchedModel:
    if name == "quadratic":  # the analytic test bed (not a classifier, so not in models.MODELS)
        from hetfl.models.quadratic import Quadratic

        return Quadratic(fed.x_train.shape[1])
    shape = fed.x_train.shape[1:]
    input_dim = int(shape[0]) if len(shape) == 1 else tuple(int(d) for d in shape)
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in (params or {}).items()}
    return make_model(name, input_dim, fed.num_classes, **kwargs)


def event_schedule(spec: RunSpec, num_devices: int) -> Schedule | None:
    """The run's arrivals/departures as a per-round schedule (data.events); None without an event."""
    ev = spec.event
    if not ev:
        return None
    if ev.get("stagger"):
        events = [Event(ev["kind"], ev["round"] + i * ev["stagger"], (d,), ev["policy"])
                  for i, d in enumerate(ev["devices"])]
    else:
        events = [Event(ev["kind"], ev["round"], tuple(ev["devices"]), ev["policy"])]
    return build_schedule(events, num_devices, spec.rounds, ev.get("departure_test_set", "remaining"))


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
    if spec.model == "logreg" and fed.x_train.ndim > 2:  # a linear model sees images as flat vectors
        fed.x_train = fed.x_train.reshape(len(fed.x_train), -1)
        fed.x_test = fed.x_test.reshape(len(fed.x_test), -1)
        if fed.x_global is not None:
            fed.x_global = fed.x_global.reshape(len(fed.x_global), -1)
    if np.issubdtype(fed.x_train.dtype, np.integer) and spec.model not in TEXT_MODELS.values():
        allowed = ", ".join(f"{m} ({d})" for d, m in TEXT_MODELS.items())
        raise ValueError(f"model {spec.model!r} cannot read the int64 token ids of dataset {spec.dataset!r}; "
                         f"allowed: {allowed}")
    model = _make_model(spec.model, fed, spec.model_params)
    maps = None if not spec.concept_shift else concept_shift.label_maps(
        fed.num_classes, spec.rounds, spec.concept_shift["probability"], spec.seed)
    settings = TrainSettings(scheme=spec.scheme, local_epochs=spec.local_epochs, batch_size=spec.batch_size,
                             eta0=spec.eta0, rounds=spec.rounds, eval_every=spec.eval_every, seed=spec.seed,
                             lr_schedule=spec.lr_schedule, local_steps=spec.local_steps,
                             clients_per_round=spec.clients_per_round, sampling_weights=spec.sampling_weights,
                             label_maps=maps)
    algorithm = make_algorithm(spec.algorithm, spec.algorithm_params)
    start = time.perf_counter()
    log = ProgressLog(spec.rounds, f"{spec.experiment}/{spec.run}") if progress else None
    result = train(model, fed, tr.fractions, settings, device=dev, progress=log, algorithm=algorithm,
                   schedule=event_schedule(spec, fed.num_devices))
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
