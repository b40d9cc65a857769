"""`hetfl project CONFIG`: what a grid costs on this machine, measured before it is run.

A paper grid can take hours to weeks, and its data may not be on the machine yet. This runs the grid's own
workflow (splits, traces, training, tables, the MLflow mirror) twice, on one seed per experiment and on a
fraction f of every run's rounds (event rounds scaled alike), with random data of each real source's exact
shape and size stored the way hetfl reads a local copy (`DatasetDict.save_to_disk` under `data_dir`).
Training and evaluation cost depends on shapes, step counts and the evaluation cadence, never on pixel
values, so the timings are those of the real data. The wall time T(f) = a + b·f is fitted through the
measured points; the whole grid is projected as T(1) times the ratio of its run count to the measured run
count (exact when an experiment's seeds cost alike). Every fraction runs the jobs the full grid would run
(`full_grid_jobs`): the same cells share a process. docs/engine.md, "Projecting a paper grid".
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetfl.cluster import ClusterOptions, cells_per_job, gpus_for, train_groups
from hetfl.config import ConfigError, by_cell, expand_runs, validate_config
from hetfl.reproduce import LOCAL_JOB_RATE

#: datasets that need no data on disk (generated, or shipped with a Python package)
OFFLINE = ("synthetic", "quadratic", "digits", "mnist5k")
#: image sources whose random stand-in hetfl can write (no writer/domain column to invent)
FAKEABLE = ("mnist", "emnist-balanced", "emnist-byclass", "emnist-letters", "cifar10", "cifar100")


def fake_source(name: str, root: Path, seed: int = 0, sizes: tuple[int, int] | None = None) -> Path:
    """Random uint8 images and labels of source `name`'s shape and split sizes (train, test: hetfl.cluster's
    SOURCE_SIZES unless `sizes` is given), saved where `load_source(name, data_dir=root)` reads them."""
    import datasets

    from hetfl.cluster import SOURCE_SIZES
    from hetfl.data.sources import SOURCES

    if name not in FAKEABLE:
        raise ConfigError(f"dataset '{name}' has no random stand-in; allowed: {', '.join(FAKEABLE)} "
                          f"(and {', '.join(OFFLINE)}, which need none)")
    info = SOURCES[name]
    channels, height, width = info.input_shape
    image = (datasets.Array2D((height, width), "uint8") if channels == 1
             else datasets.Array3D((height, width, channels), "uint8"))
    features = datasets.Features({info.x_column: image,
                                  info.y_column: datasets.ClassLabel(num_classes=info.num_classes)})
    rng = np.random.default_rng(seed)
    splits = {}
    for split, n in zip(("train", "test"), sizes or SOURCE_SIZES[name], strict=True):
        if n:
            shape = (n, height, width) if channels == 1 else (n, height, width, channels)
            splits[split] = datasets.Dataset.from_dict(
                {info.x_column: rng.integers(0, 256, shape, dtype=np.uint8),
                 info.y_column: rng.integers(0, info.num_classes, n)}, features=features)
    out = Path(root) / name
    datasets.DatasetDict(splits).save_to_disk(str(out))
    return out


def _scaled(rounds: int, fraction: float) -> int:
    return max(2, math.ceil(rounds * fraction))


def full_grid_jobs(config: dict[str, Any]) -> dict[str, str]:
    """experiment -> the `cells_per_job` its one-seed projection runs with, from the full grid's jobs:
    "group" where each of its training rules trains all its cells in one job (hetfl.cluster.cells_per_job),
    else "cell" (with one seed a job per cell is a job per setting, as the full grid's jobs per cell or
    per setting run side by side).

    Left to the estimate, the bundling would follow the scaled grid: a fraction of the rounds is a fraction
    of the estimate, so the fractions would bundle cells that the full grid trains apart, and differently
    from each other. `hetfl project` of ruan2021_table3_mnist.yaml (one job per cell in full) trained its two
    settings one after the other in one job at f = 0.05 and side by side at f = 0.1, and fitted
    T(f) = 187 s + 138 s × f, against 29 s + 1,683 s × f with the full grid's jobs. An experiment whose
    rules bundle differently (a small readings rule beside large ones) is projected with a job per cell."""
    cells = by_cell(expand_runs(config))
    levels: dict[str, set[str]] = {}
    for experiment, _, _, keys in train_groups(cells):
        levels.setdefault(experiment, set()).add(cells_per_job(
            {k: cells[k] for k in keys}, level=config["experiments"][experiment]["cells_per_job"]))
    return {experiment: "group" if found == {"group"} else "cell" for experiment, found in levels.items()}


def scaled_config(config: dict[str, Any], fraction: float, data_dir: Path | None) -> dict[str, Any]:
    """`config` (validated) on its first seed per experiment, with every run's rounds (and the event rounds)
    scaled by `fraction`, rounded up, every real source read from `data_dir`, and the full grid's job of
    each cell (full_grid_jobs)."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"fraction has value {fraction}, which is not allowed; allowed: 0 < fraction <= 1")
    out = copy.deepcopy(config)
    jobs = full_grid_jobs(config)
    for name, exp in out["experiments"].items():
        exp["cells_per_job"] = jobs[name]
        if exp["dataset"] not in OFFLINE and exp["dataset"] not in FAKEABLE:
            raise ConfigError(f"experiments.{name}.dataset has value '{exp['dataset']}', which hetfl project "
                              f"cannot stand in for; allowed: {', '.join(FAKEABLE + OFFLINE)}")
        exp["seeds"] = exp["seeds"][:1]
        exp["rounds"] = _scaled(exp["rounds"], fraction)
        for setting in exp["settings"].values():
            if "rounds" in setting:
                setting["rounds"] = _scaled(setting["rounds"], fraction)
        if exp.get("event"):
            exp["event"]["rounds"] = sorted({_scaled(r, fraction) for r in exp["event"]["rounds"]})
        if data_dir is not None and exp["dataset"] in FAKEABLE:
            exp["data_dir"] = str(data_dir)
    return validate_config(out)


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(a, b) of the least-squares line seconds = a + b·fraction through (fraction, seconds) points."""
    if len({f for f, _ in points}) < 2:
        raise ValueError("fit needs wall times at two different fractions at least")
    b, a = np.polyfit([f for f, _ in points], [s for _, s in points], 1)
    return float(a), float(b)


@dataclass(frozen=True)
class Projection:
    """Measured (fraction, wall seconds) points, the fitted line, and the grid projected from it; `jobs`:
    (experiment, cells_per_job) as every fraction ran them (full_grid_jobs); `gpus`: the GPUs the workflow
    ran with (project_gpus)."""

    points: tuple[tuple[float, float], ...]
    a: float
    b: float
    runs_measured: int
    runs_full: int
    cores: int
    jobs: tuple[tuple[str, str], ...] = ()
    gpus: int = 0

    @property
    def machine(self) -> str:
        """What the workflow ran on: '2 core(s)', '2 core(s) and 1 GPU'."""
        return f"{self.cores} core(s)" + (f" and {self.gpus} GPU" if self.gpus else "")

    @property
    def below_noise(self) -> bool:
        """The wall time did not grow with the rounds: at these fractions the training is below the timing
        noise, and the fitted slope says nothing about it."""
        return self.b <= 0

    @property
    def seconds(self) -> float:
        """T(1) scaled from the measured runs (one seed per experiment) to all of the grid's runs; a slope
        below the noise counts as 0 (the fixed part alone), never as a negative cost."""
        return (self.a + max(self.b, 0.0)) * self.runs_full / self.runs_measured

    def report(self) -> str:
        rows = [f"  f = {f:g}: {s:.1f} s wall on {self.machine}, {self.runs_measured} runs"
                for f, s in self.points]
        layouts = {"cell": "a job per cell", "group": "one job for all its cells"}
        for level, name in layouts.items():
            experiments = [e for e, lv in self.jobs if lv == level]
            if experiments:
                rows.append(f"  trained as the full grid trains them, {name}: {', '.join(experiments)}")
        rows.append(f"  fit: T(f) = {self.a:.1f} s + {self.b:.1f} s × f")
        if self.below_noise:
            lo, hi = min(f for f, _ in self.points), max(f for f, _ in self.points)
            rows.append(f"  the wall time did not grow with the rounds between f = {lo:g} and {hi:g}: the "
                        "training is below the timing noise there and is counted as 0 s; time larger "
                        "--fractions (e.g. 0.25 0.5) to measure it")
        hours = self.seconds / 3600
        rows.append(f"projected: {self.seconds:.0f} s ({hours:.2f} h) for all {self.runs_full} runs on "
                    f"{self.machine} (T(1) × {self.runs_full}/{self.runs_measured} runs)")
        return "\n".join(rows)


def project_gpus(config: dict[str, Any], environ: Mapping[str, str]) -> int:
    """The GPUs a projection of `config` runs the workflow with: HETFL_GPUS (ClusterOptions.gpus, 0 or 1)
    where a run of the grid trains on it (a convolutional or recurrent model: cluster.gpus_for), else 0.
    Every such job trains on `cuda`, the one device, so the workflow gets --resources gpu=1, as on a one-GPU
    machine: unnamed, the resource constrains nothing, and as many jobs as cores shared the GPU at once."""
    options = ClusterOptions.from_environ(environ)
    return max((gpus_for([spec], options) for spec in expand_runs(config)), default=0)


def project(config: dict[str, Any], fractions: Sequence[float] = (0.05, 0.1), cores: int = 2,
            workdir: Path | None = None, snakefile: Path = Path("Snakefile")) -> Projection:
    """Run `config` (validated) at each fraction of its rounds on one seed, in fresh directories under
    `workdir` (a temporary one by default), and project the whole grid (see the module docstring)."""
    import yaml

    if not Path(snakefile).is_file():
        raise ConfigError(f"--snakefile {snakefile} does not exist; allowed: hetfl's Snakefile (run from the "
                          "repository root, or pass its path)")
    if len(set(fractions)) < 2:
        raise ConfigError(f"--fractions has value {list(fractions)}; allowed: two different fractions or "
                          "more (a line is fitted through their wall times)")
    for f in fractions:  # every problem before any work
        scaled_config(config, f, None)
    gpus = project_gpus(config, os.environ)  # a bad HETFL_GPUS too
    if workdir is not None:
        # a --keep DIR that holds an earlier projection: Snakemake would find that run's outputs up to date
        # and time only what is left to do (a second `hetfl project --keep DIR` projected 2 s for a grid
        # measured at 19 s; an audit), and another config's runs of the same names would be reused alike
        used = [d for d in (Path(workdir) / f"f{f:g}" for f in fractions) if d.is_dir() and any(d.iterdir())]
        if used:
            held = ", ".join(map(str, used))
            raise ConfigError(f"--keep {workdir} already holds a projection's workflow ({held}), "
                              "whose outputs would be reused instead of timed; allowed: a new or empty "
                              "directory (move or remove the earlier one: nothing there is deleted)")
    runs_full = len(list(expand_runs(config)))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MLFLOW_TRACKING_URI", None)  # each run's own store, in its directory
    with tempfile.TemporaryDirectory(prefix="hetfl-project-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        data = root / "data"
        for name in sorted({e["dataset"] for e in config["experiments"].values()} & set(FAKEABLE)):
            if not (data / name).exists():
                fake_source(name, data)
        points, runs_measured = [], 0
        for f in fractions:
            scaled = scaled_config(config, f, data.resolve())
            runs_measured = len(list(expand_runs(scaled)))
            run_dir = root / f"f{f:g}"
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "config.yaml").write_text(yaml.safe_dump(scaled, sort_keys=False))
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "hetfl.snakemake_main", "-s",
                                   str(Path(snakefile).resolve()),
                                   "--directory", str(run_dir), "--configfile", str(run_dir / "config.yaml"),
                                   "--cores", str(cores), "--resources", "mlflow_store=1",
                                   *([f"gpu={gpus}"] if gpus else []), "--quiet",
                                   "--max-jobs-per-timespan", LOCAL_JOB_RATE],  # as make reproduce runs
                                  capture_output=True, text=True, env=env)
            seconds = time.perf_counter() - t0
            if proc.returncode:
                raise RuntimeError(f"the workflow at fraction {f:g} failed (rc {proc.returncode}) in "
                                   f"{run_dir}:\n{proc.stderr[-3000:]}")
            points.append((f, seconds))
    a, b = fit(points)
    return Projection(tuple(points), a, b, runs_measured, runs_full, cores,
                      tuple(sorted(full_grid_jobs(config).items())), gpus)
