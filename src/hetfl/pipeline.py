"""Training in the one flow: one run, or a cell of runs that share a split, in one process.

`run_training` trains one run and writes metrics.parquet and run.json atomically. It refuses a split or
trace file made for other parameters (data.build.check_split, check_traces), checkpoints every K rounds
(torch.save, atomic; loaded with weights_only=True) and resumes a killed run so that its final metrics
are bitwise those of an uninterrupted one. A finished run leaves a light checkpoint (its records and
run.json, no tensors), so when Snakemake reruns a killed cell job every finished run is restored instead
of retrained. A checkpoint is reused only under the same key: spec, split and trace hashes, the code
fingerprint of the training job (hetfl.fingerprint) and the torch/numpy versions.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import hashlib
import json
import platform
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd
import torch

import hetfl
from hetfl.algorithms import hparams, make_algorithm
from hetfl.config import INACTIVE_TRACES, TEXT_MODELS, RunSpec
from hetfl.data import concept_shift, traces
from hetfl.data.build import check_split
from hetfl.data.events import Event, Schedule, build_schedule
from hetfl.data.federation import Federation, load_federation
from hetfl.engine import executor
from hetfl.engine.graphs import GraphCache
from hetfl.engine.local import local_sgd
from hetfl.engine.reproducible import check_tf32, reproducible_cuda
from hetfl.engine.runner import (
    Data,
    ProgressLog,
    RunLoop,
    Snapshot,
    TrainResult,
    TrainSettings,
    train_stacked,
)
from hetfl.engine.schemes import complete_round_steps, local_steps
from hetfl.fingerprint import fingerprint, git_state
from hetfl.io import atomic_write, atomic_write_json, file_sha256
from hetfl.models import make_model
from hetfl.models.base import BatchedModel

CHECKPOINT = "checkpoint.pt"
DEFAULT_CHECKPOINT_EVERY = 20


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
    return build_schedule(events, num_devices, spec.rounds, ev.get("departure_test_set", "paper"),
                          ev.get("boost_decay", "shifted"))


def check_traces(tr: traces.Traces, spec: RunSpec, path: str | Path) -> None:
    """Refuse traces made for other parameters than the run's (trace set, N, R, seed, assignment,
    p_inactive)."""
    if tr.params is None:
        raise ValueError(f"traces {path} do not record how they were made (an older hetfl wrote them); "
                         "delete them and let hetfl make them again")
    want = {"traceset": spec.traceset, "num_devices": spec.num_devices, "rounds": spec.rounds,
            "seed": spec.seed, "assignment": spec.trace_assignment, "p_inactive": float(spec.p_inactive)}
    if not set(spec.trace_order[: spec.num_traces]) & set(INACTIVE_TRACES):
        want.pop("p_inactive")  # no trace of the set has inactive rounds: the value changes nothing
    diff = {k: (tr.params.get(k), v) for k, v in want.items() if tr.params.get(k) != v}
    if diff:
        what = "; ".join(f"{k}: traces have {json.dumps(a)}, run needs {json.dumps(b)}"
                         for k, (a, b) in diff.items())
        raise ValueError(f"traces {path} were made for another run ({what}); delete them (or run "
                         "`snakemake --forcerun trace`) so that they are made again")


def participation(tr: traces.Traces, spec: RunSpec, train_sizes: np.ndarray) -> dict[str, Any]:
    """What the traces gave this run: devices per trace, P(complete round) per trace, and E[K_τ], the mean
    number of devices completing their round (the captions of Table 3 state them; docs/readings.md)."""
    full = (complete_round_steps(train_sizes, spec.local_epochs, spec.batch_size, spec.local_work)
            if spec.local_steps is None else np.asarray(spec.local_steps, dtype=np.int64))
    done = np.stack([local_steps(row, full, spec.completion) for row in tr.fractions])
    complete = done == full[None, :]
    names = np.asarray(tr.trace_names)[tr.assignment]
    p_complete = {t: float(complete[:, names == t].mean()) for t in tr.trace_names if (names == t).any()}
    return {"devices_per_trace": tr.devices_per_trace(), "p_complete": p_complete,
            "mean_complete_devices": float(complete.sum(axis=1).mean())}


def _for_model(fed: Federation, model: str) -> Federation:
    """The federation as the model reads it: a linear model sees images as flat vectors (views, no copy)."""
    if model != "logreg" or fed.x_train.ndim <= 2:
        return fed
    def flat_of(x: np.ndarray) -> np.ndarray:  # an explicit width: -1 cannot be inferred for no rows
        return x.reshape(len(x), int(np.prod(x.shape[1:])))

    flat = {k: flat_of(getattr(fed, k)) for k in ("x_train", "x_test")}  # no local holdout: x_test is empty
    if fed.x_global is not None:
        flat["x_global"] = flat_of(fed.x_global)
    return replace(fed, **flat)


@dataclass(frozen=True)
class Provenance:
    """What run.json says about the code and the files a run came from."""

    code: str  # hetfl.fingerprint of the training job
    commit: str
    dirty: bool | None


def provenance(algorithms: Iterable[str]) -> Provenance:
    commit, dirty = git_state()
    return Provenance(fingerprint("train", tuple(sorted(set(algorithms)))), commit, dirty)


def _user() -> str | None:
    """Who trains the run: the login name, None where the system has none for this uid (containers)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def checkpoint_key(spec: RunSpec, split_sha: str, traces_sha: str, code: str, tf32: bool = False,
                   threads: int = 1, device: str = "cpu", cpu_workers: str = "auto") -> str:
    """A checkpoint continues a run only if nothing that decides its numbers has changed. tf32: trained
    with TF32 products on CUDA (engine.reproducible), a key of its own; IEEE runs keep the key they had.
    threads (torch's intra-op threads, `hetfl train --threads`) and device (its type): the CNNs' blocks
    of clients train on as many CPU workers as threads (engine.executor) and end a few ulps apart from
    one thread, and CUDA equals the CPU to rounding only, so a checkpoint made under other threads or on
    another device type is not continued (an audit: --threads 2 killed, resumed with 1, matched
    neither). The workflow's one thread on the CPU keeps the key it had. cpu_workers (`hetfl train
    --cpu-workers`, engine.executor.set_cpu_workers) other than the rule's "auto" moves blocks on or off the
    CPU workers, as threads do: a key of its own."""
    key = {"spec": spec.to_dict(), "split": split_sha, "traces": traces_sha, "code": code,
           "torch": torch.__version__, "numpy": np.__version__}
    if tf32:
        key["tf32"] = True
    if threads != 1:
        key["threads"] = int(threads)
    if device != "cpu":
        key["device"] = device
    if cpu_workers != "auto":
        key["cpu_workers"] = cpu_workers
    blob = json.dumps(key, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _pack(records: list[tuple[int, str, float]]) -> dict[str, Any]:
    """Records as three tensors and a name list: torch.save pickles a list of tuples object by object."""
    names = sorted({m for _, m, _ in records})
    index = {m: i for i, m in enumerate(names)}
    return {"names": names,
            "round": torch.tensor([r for r, _, _ in records], dtype=torch.int64),
            "metric": torch.tensor([index[m] for _, m, _ in records], dtype=torch.int64),
            "value": torch.tensor([v for _, _, v in records], dtype=torch.float64)}


def _unpack(packed: dict[str, Any]) -> list[tuple[int, str, float]]:
    names = packed["names"]
    return [(int(r), names[int(m)], float(v))
            for r, m, v in zip(packed["round"], packed["metric"], packed["value"], strict=True)]


def _load_checkpoint(path: Path, key: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a torn or foreign file is not an error: the run starts over and overwrites it
        return None
    return ckpt if isinstance(ckpt, dict) and ckpt.get("key") == key else None


def _save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def _write_outputs(out_dir: Path, records: list[tuple[int, str, float]], info: dict[str, Any]) -> None:
    metrics = pd.DataFrame(records, columns=["round", "metric", "value"]).astype(
        {"round": "int64", "metric": "string", "value": "float64"})
    atomic_write(out_dir / "metrics.parquet", lambda tmp: metrics.to_parquet(tmp, index=False))
    atomic_write_json(out_dir / "run.json", info)


class RunJob:
    """One run from its inputs to its outputs: checks, checkpoint, the round loop, run.json.

    `restored` is set when a finished checkpoint with the same key exists (its outputs are written back);
    otherwise `loop` is the run's engine.runner.RunLoop, to train alone or stacked with other runs, and
    metrics.parquet, run.json and the light final checkpoint are written at the run's last round (its
    final checkpoint call) or, without checkpoints, by `finish(result)`.
    """

    def __init__(self, spec: RunSpec, split_npz: str | Path, traces_npz: str | Path, out_dir: str | Path, *,
                 device: str = "cpu", progress: bool | TextIO = True,
                 checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY, fed: Federation | None = None,
                 prov: Provenance | None = None, data: Data | None = None,
                 graphs: bool | None = None, keep_graphs: bool = False, tf32: bool = False) -> None:
        self.spec, self.out_dir = spec, Path(out_dir)
        self.graphs = graphs  # CUDA graphs for local steps (engine.graphs); None: the executor's rule
        self.keep_graphs = keep_graphs  # kept across rounds (engine.graphs.GraphCache) where they are on
        self.split_npz, self.traces_npz = split_npz, traces_npz
        self.device = resolve_device(device)
        self.tf32 = check_tf32(tf32, self.device)
        if self.device.type == "cuda":
            # deterministic kernels, and no TF32 unless asked: reruns agree, and with the CPU to rounding
            reproducible_cuda(tf32)
        check_split(split_npz, spec.split_spec(), spec.seed)
        tr = traces.load_traces(traces_npz)
        check_traces(tr, spec, traces_npz)
        fed = data.fed if data is not None else _for_model(
            fed if fed is not None else load_federation(split_npz), spec.model)
        if tr.fractions.shape != (spec.rounds, fed.num_devices):
            raise ValueError(f"traces {traces_npz} have shape {tr.fractions.shape}; the run needs "
                             f"(rounds, num_devices) = ({spec.rounds}, {fed.num_devices})")
        if np.issubdtype(fed.x_train.dtype, np.integer) and spec.model not in TEXT_MODELS.values():
            allowed = ", ".join(f"{m} ({d})" for d, m in TEXT_MODELS.items())
            raise ValueError(f"model {spec.model!r} cannot read the int64 token ids of dataset "
                             f"{spec.dataset!r}; allowed: {allowed}")
        self.prov = prov or provenance([spec.algorithm])
        self.split_sha, self.traces_sha = file_sha256(split_npz), file_sha256(traces_npz)
        self.participation = participation(tr, spec, fed.train_sizes)
        self.key = checkpoint_key(spec, self.split_sha, self.traces_sha, self.prov.code, self.tf32,
                                  torch.get_num_threads(), self.device.type, executor.cpu_workers())
        self.ckpt_path = self.out_dir / CHECKPOINT
        ckpt = _load_checkpoint(self.ckpt_path, self.key)
        self.restored: TrainResult | None = None
        self.loop: RunLoop | None = None
        self.stacked_with = 1  # runs trained in the same train_stacked call (run_cell sets it)
        self._written: TrainResult | None = None
        if ckpt is not None and "info" in ckpt:  # finished under the same key: restore, do not retrain
            records = _unpack(ckpt["records"])
            _write_outputs(self.out_dir, records, ckpt["info"])
            self.restored = TrainResult(records=records, status=ckpt["info"]["status"],
                                        rounds_done=ckpt["info"]["rounds_done"])
            return
        settings = TrainSettings(scheme=spec.scheme, local_epochs=spec.local_epochs,
                                 batch_size=spec.batch_size, eta0=spec.eta0, rounds=spec.rounds,
                                 eval_every=spec.eval_every, seed=spec.seed, lr_schedule=spec.lr_schedule,
                                 local_steps=spec.local_steps, local_work=spec.local_work,
                                 completion=spec.completion,
                                 boost=(spec.event or {}).get("boost", "additive"),
                                 global_test_samples=spec.global_test_samples,
                                 global_test_average=spec.global_test_average,
                                 clients_per_round=spec.clients_per_round,
                                 sampling_weights=spec.sampling_weights,
                                 label_maps=None if not spec.concept_shift else concept_shift.label_maps(
                                     fed.num_classes, spec.rounds, spec.concept_shift["probability"],
                                     spec.seed))
        self.resume = None if ckpt is None else Snapshot(ckpt["tau"], ckpt["params"], ckpt["state"],
                                                         _unpack(ckpt["records"]), ckpt["status"])
        self.wall_before = 0.0 if ckpt is None else float(ckpt["wall"])
        self.start = time.perf_counter()
        stream = None if progress is False else (sys.stderr if progress is True else progress)
        log = ProgressLog(spec.rounds, f"{spec.experiment}/{spec.run}", stream=stream) if stream else None
        self.loop = RunLoop(_make_model(spec.model, fed, spec.model_params),
                            data if data is not None else Data.of(fed, self.device), tr.fractions, settings,
                            make_algorithm(spec.algorithm, spec.algorithm_params),
                            event_schedule(spec, fed.num_devices), self.resume, log,
                            self._save if checkpoint_every else None, checkpoint_every)

    def _save(self, snap: Snapshot) -> None:
        if snap.status != "ok" or snap.tau >= self.spec.rounds:
            # The run's last round: its outputs and the light final checkpoint now, in place of a full
            # checkpoint that they would replace a moment later (FedElasticNet's SCAFFOLD and FedDyn runs
            # carry a control variate per device, 80 MB a save: 9 % of that training job).
            self._written = self._write(TrainResult(records=snap.records, status=snap.status,
                                                    rounds_done=snap.tau))
            return
        _save_checkpoint(self.ckpt_path, {
            "key": self.key, "tau": snap.tau, "params": [t.cpu() for t in snap.params],
            "state": _cpu(snap.state), "records": _pack(snap.records), "status": snap.status,
            "wall": self.wall_before + time.perf_counter() - self.start})

    def finish(self, result: TrainResult) -> TrainResult:
        """The run's outputs, unless its last round wrote them already (_save)."""
        if self._written is None:
            return self._write(result)
        if (self._written.status, self._written.rounds_done) != (result.status, result.rounds_done):
            raise RuntimeError(f"{self.spec.run}: the outputs written at round {self._written.rounds_done} "
                               f"({self._written.status}) are not the run's end ({result.rounds_done}, "
                               f"{result.status})")
        return result

    def _write(self, result: TrainResult) -> TrainResult:
        spec = self.spec
        wall = self.wall_before + time.perf_counter() - self.start
        finished_at = datetime.now(UTC)
        info = {
            "spec": spec.to_dict(),
            "status": result.status,
            "rounds_done": result.rounds_done,
            "resumed_from_round": None if self.resume is None else self.resume.tau,
            "split": {"path": str(self.split_npz), "sha256": self.split_sha},
            "traces": {"path": str(self.traces_npz), "sha256": self.traces_sha, **self.participation},
            "versions": {"hetfl": hetfl.__version__, "python": platform.python_version(),
                         "torch": torch.__version__, "numpy": np.__version__, "pandas": pd.__version__},
            "git_commit": self.prov.commit,
            "git_dirty": self.prov.dirty,  # of src/hetfl: a plugin's algorithm has its own record below
            "code_fingerprint": self.prov.code,
            "device": str(self.device),
            # CUDA graphs on for the run's fused local steps (engine.graphs): asked for, or the model's rule
            "cuda_graphs": (graphed := self.device.type == "cuda"
                            and executor.graphs_on(self.loop.model, self.device, self.graphs)),
            "cuda_graphs_kept": graphed and self.keep_graphs,
            # TF32 products on CUDA (engine.reproducible; hetfl train --tf32), else IEEE float32
            "cuda_tf32": self.tf32,
            "torch_threads": torch.get_num_threads(),
            # which models' blocks train on CPU workers (engine.executor; hetfl train --cpu-workers)
            "cpu_workers": executor.cpu_workers(),
            "user": _user(),  # the MLflow mirror's mlflow.user (the UI's User column)
            # a run trained stacked with others shares their wall time (engine.runner.train_stacked)
            "stacked_runs": self.stacked_with,
            "wall_time_s": round(wall, 3),
            # the MLflow run's start and end (docs/tracking.md); a resumed run's start is its end less its
            # training time
            "started_at": (finished_at - timedelta(seconds=wall)).isoformat(timespec="milliseconds"),
            "finished_at": finished_at.isoformat(timespec="milliseconds"),
        }
        source = hparams.PLUGINS.get(spec.algorithm)
        if source is not None:  # the package whose code trained the run (hetfl's own: the commit above)
            info["algorithm_source"] = dict(source)
        info = json.loads(json.dumps(info))  # plain JSON types (torch.__version__ is a str subclass)
        _write_outputs(self.out_dir, result.records, info)
        # the light final checkpoint: both outputs, no tensors (it loads with weights_only=True)
        _save_checkpoint(self.ckpt_path, {"key": self.key, "records": _pack(result.records), "info": info})
        return result


def run_training(spec: RunSpec, split_npz: str | Path, traces_npz: str | Path, out_dir: str | Path,
                 *, device: str = "cpu", progress: bool | TextIO = True,
                 checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY, fed: Federation | None = None,
                 prov: Provenance | None = None, graphs: bool | None = None,
                 keep_graphs: bool = False, tf32: bool = False) -> TrainResult:
    """Train one run and write metrics.parquet and run.json (each atomically).

    progress: True prints progress lines to stderr, a stream prints them there, False prints none.
    fed: the split already loaded. checkpoint_every = 0 keeps no mid-run checkpoint.
    graphs: on CUDA, replay local steps from CUDA graphs (engine.graphs) or not; None: the engine's rule.
    keep_graphs: where graphs are on, keep them across the run's rounds (engine.graphs.GraphCache).
    tf32: on CUDA, TF32 products instead of IEEE float32 (engine.reproducible; refused on the CPU).
    """
    job = RunJob(spec, split_npz, traces_npz, out_dir, device=device, progress=progress,
                 checkpoint_every=checkpoint_every, fed=fed, prov=prov, graphs=graphs,
                 keep_graphs=keep_graphs, tf32=tf32)
    if job.restored is not None:
        return job.restored
    return job.finish(train_stacked([job.loop], _trainer(graphs, keep_graphs))[0])


def _trainer(graphs: bool | None, keep_graphs: bool = False):
    """engine.local.local_sgd with the CUDA-graphs option (None: the executor's rule) and, with
    keep_graphs, one GraphCache for every round it trains."""
    return functools.partial(local_sgd, graphs=graphs, graph_cache=GraphCache() if keep_graphs else None)


def _cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_cpu(v) for v in obj)
    return obj


#: models with fewer parameters train a cell's runs stacked (one local_sgd call per round for all of them);
#: bigger ones train run after run so that only one run's model and state is in memory
STACK_MAX_PARAMETERS = 1_000_000


def run_cell(specs: list[RunSpec], split_npz: str | Path, traces_of: dict[str, str | Path],
             results_root: str | Path = "results", log_dir: str | Path | None = None, *, device: str = "cpu",
             checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY, graphs: bool | None = None,
             keep_graphs: bool = False, tf32: bool = False) -> dict[str, str]:
    """Train every run of a cell (runs that share a split) in this process: imports, the split and the code
    fingerprint are paid once, and small models train all their runs stacked (engine.runner.train_stacked:
    each run ends bitwise where it would alone). traces_of maps each run name to its trace file; each run
    writes <results_root>/<experiment>/<run>/ and, with log_dir, its progress to <log_dir>/<run>.log.
    graphs, keep_graphs, tf32: as run_training's (one GraphCache for the cell). Returns {run: status}."""
    if len({s.split_key for s in specs}) > 1:
        raise ValueError(f"a cell's runs share one split; got {sorted({s.split_key for s in specs})}")
    fed = load_federation(split_npz)
    # each run's own code: the training closure and its algorithm's module. One fingerprint over the cell's
    # algorithms retrained every run of a cell when one algorithm's file changed (an audit: fedavg's runs
    # retrained for an edit of fedprox.py) and gave a run another fingerprint than it has trained alone.
    commit, dirty = git_state()
    prov = {a: Provenance(fingerprint("train", (a,)), commit, dirty)
            for a in sorted({s.algorithm for s in specs})}
    dev = resolve_device(device)
    check_tf32(tf32, dev)  # before the cell's data goes to the device
    data: dict[str, Data] = {}  # one copy on the device per model's view of the data
    statuses: dict[str, str] = {}
    with contextlib.ExitStack() as files:
        jobs = []
        for spec in specs:
            if spec.model not in data:
                data[spec.model] = Data.of(_for_model(fed, spec.model), dev)
            stream: bool | TextIO = True
            if log_dir is not None:
                Path(log_dir).mkdir(parents=True, exist_ok=True)
                stream = files.enter_context(open(Path(log_dir) / f"{spec.run}.log", "w", encoding="utf-8"))
            jobs.append(RunJob(spec, split_npz, traces_of[spec.run],
                               Path(results_root) / spec.experiment / spec.run, device=device,
                               progress=stream, checkpoint_every=checkpoint_every, prov=prov[spec.algorithm],
                               data=data[spec.model], graphs=graphs, keep_graphs=keep_graphs, tf32=tf32))
        todo = [j for j in jobs if j.restored is None]
        small = [j for j in todo if sum(p.numel() for p in j.loop.params) < STACK_MAX_PARAMETERS]
        for job in small:
            job.stacked_with = len(small)
        trainer = _trainer(graphs, keep_graphs)
        for job, result in zip(small, train_stacked([j.loop for j in small], trainer), strict=True):
            job.finish(result)
        for job in (j for j in todo if j not in small):
            job.finish(train_stacked([job.loop], trainer)[0])
        for job in jobs:
            result = job.restored or job.loop.result
            statuses[job.spec.run] = result.status
            print(f"{job.spec.experiment}/{job.spec.run}: {result.status} after {result.rounds_done} rounds"
                  f"{' (restored)' if job.restored else ''} -> {job.out_dir}", file=sys.stderr, flush=True)
    return statuses

