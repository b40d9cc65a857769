"""A paper cell trained for a few rounds, timed against the cluster's time model (hetfl.cluster).

The SLURM profile asks for a GPU job's time limit from a rough model, `cluster.gpu_seconds_run`: the run's
FLOPs at the model's share of the card's float32 matmul rate, measured by `hetfl bench --device cuda`, plus
GPU_STEP_SECONDS for every local step and ROUND_SECONDS a round. The bench times one block's local steps;
this times the whole of `hetfl train`'s work for a run of a paper config (schedule, traces, the engine at
the config's own clients, batch and steps, evaluation, aggregation, its checkpoint-free bookkeeping), on
the config's source at its real size, so that the model can be checked where it is used.

The source is random, as many samples as hetfl.cluster's SOURCE_SIZES (the copies docs/datasets.md names),
stood in for `load_source` while the split is made: for an image source uint8-valued pixels of its shape
scaled to [0, 1] and uniform labels; for Shakespeare random letters, every speaker (as many as LEAF's mean,
cluster.NATURAL_SAMPLES_PER_DEVICE) one text whose windows follow each other in text order, as the temporal
holdout requires; for Sent140 random hashed word ids and labels, dealt to users of LEAF's mean size.
Training time does not depend on the values; the accuracies mean nothing. Nothing is downloaded and no data
copy is needed, so it runs on a GPU machine without `datasets`.

    python -m hetfl.gpucell CONFIG [--experiment NAME] [--runs N] [--rounds R] [--device cuda]
                            [--samples TRAIN,TEST] [--json PATH]

Reported per run: the seconds the split took (not modelled: a split job's), the seconds of a first
`run_training` of one round (a warm-up: in the first run of a process it holds the process's first CUDA
work, which the model counts in its process start), the seconds `run_training` then took for the run's
rounds (its whole call: reading the split and moving it to the device too, a few of the model's process
start's seconds), the model's seconds for the same rounds (`gpu_seconds_run` on CUDA at
HETFL_SLURM_GPU_GFLOPS or its default; on the CPU `estimate_run`, one core's), and their ratio (none under
`--samples`, a resized stand-in for tests: the model counts the real source's samples).
`scripts/gpu-check` runs it on Table 2 of FedFOR and of EFL (CIFAR-100) in its part `cell`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from hetfl.bench import check_json_path, resolve_device, write_json
from hetfl.config import RunSpec

#: the sources a random stand-in can take the place of: images without a writer or domain column, and the
#: two LEAF text sources, whose speakers and users it deals at LEAF's mean size
RANDOM_SOURCES = ("mnist", "mnist5k", "digits", "emnist-balanced", "emnist-byclass", "emnist-letters",
                  "cifar10", "cifar100", "shakespeare", "sent140")


def _random_arrays(name: str, n: int, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(x, y, client ids) of n random samples of source `name` (see the module doc)."""
    from hetfl.cluster import NATURAL_SAMPLES_PER_DEVICE
    from hetfl.data.sources import SOURCES

    info = SOURCES[name]
    if info.task == "image":
        x = rng.integers(0, 256, (n, *info.input_shape), dtype=np.uint8).astype(np.float32) / 255
        return x, rng.integers(0, info.num_classes, n), None
    size = max(1, round(NATURAL_SAMPLES_PER_DEVICE[name]))  # a speaker's or user's samples
    clients = -(-n // size)
    if info.task == "next-char":  # each speaker one text: window i + 1 is window i shifted by its target
        width = info.input_shape[0]
        text = rng.integers(0, info.num_classes, (clients, size + width))
        x = np.lib.stride_tricks.sliding_window_view(text, width, axis=1)[:, :size].reshape(-1, width)[:n]
        speakers = np.repeat(np.arange(clients), size)[:n]
        return np.ascontiguousarray(x), text[:, width:].reshape(-1)[:n], speakers
    # sentiment: hashed word ids 1 .. vocab - 1 (0 pads; hetfl.data.leaf.hash_tokens) of the model's hashed
    # vocabulary, users of LEAF's mean size
    from hetfl.models.zoo import SentLSTM

    x = rng.integers(1, SentLSTM.default_vocab, (n, *info.input_shape))
    return x, rng.integers(0, info.num_classes, n), rng.integers(0, clients, n)


@contextlib.contextmanager
def random_source(name: str, sizes: tuple[int, int] | None = None, seed: int = 0) -> Iterator[None]:
    """Within the block, `hetfl.data.sources.load_source(name, split=...)` returns random images of the
    source's shape and classes, `sizes` (train, test) of them (default: cluster.SOURCE_SIZES), and
    `has_split` says the source has both splits."""
    from hetfl.cluster import SOURCE_SIZES
    from hetfl.data import sources

    if name not in RANDOM_SOURCES:
        raise ValueError(f"dataset '{name}' has no random stand-in; allowed: {', '.join(RANDOM_SOURCES)}")
    info = sources.SOURCES[name]
    counts = dict(zip(("train", "test"), sizes or SOURCE_SIZES[name], strict=True))
    real_load, real_has = sources.load_source, sources.has_split

    def load(source: str, *, split: str = "train", **kwargs: Any) -> sources.SourceData:
        if source != name:
            return real_load(source, split=split, **kwargs)
        x, y, clients = _random_arrays(name, counts[split], np.random.default_rng([seed, ("train", "test")
                                                                                  .index(split)]))
        return sources.SourceData(x, y, info.num_classes, clients, info.input_shape, name,
                                  "random (hetfl.gpucell)")

    def has(source: str, split: str, **kwargs: Any) -> bool:
        return bool(counts.get(split)) if source == name else real_has(source, split, **kwargs)

    with mock.patch.object(sources, "load_source", load), mock.patch.object(sources, "has_split", has):
        yield


def modelled_seconds(spec: RunSpec, device: str, gpu_gflops: float) -> float:
    """The time model's seconds for `spec` (no process start): cluster.gpu_seconds_run on CUDA, one CPU
    core's estimate_run elsewhere."""
    from hetfl.cluster import estimate_run, gpu_seconds_run

    return gpu_seconds_run(spec, gpu_gflops) if device == "cuda" else estimate_run(spec).seconds


def time_run(spec: RunSpec, work: Path, device: str, gpu_gflops: float,
             sizes: tuple[int, int] | None = None) -> dict[str, Any]:
    """Make the split (random source) of `spec` under `work`, train one round of it, then the whole run on
    `device`, and return the seconds each took beside the model's for the whole run."""
    import pandas as pd

    from hetfl.data.build import make_split
    from hetfl.data.traces import make_traces
    from hetfl.pipeline import run_training

    split = work / "split" / "split.npz"
    start = time.perf_counter()
    with random_source(spec.dataset, sizes, spec.seed):
        make_split(split, spec.split_spec(), spec.seed)
    prepared = time.perf_counter() - start
    seconds = {}
    # first one round: the process's first CUDA work (context, cuDNN and cuBLAS handles, the allocator's
    # first blocks), which a job pays once (START_SECONDS), timed apart from the rounds the model counts
    for name, run in (("warmup", dataclasses.replace(spec, rounds=1)), ("train", spec)):
        trace = work / f"traces-{name}.npz"
        make_traces(trace, traceset=run.traceset, num_devices=run.num_devices, rounds=run.rounds,
                    seed=run.seed, assignment=run.trace_assignment, p_inactive=run.p_inactive)
        began = time.perf_counter()
        result = run_training(run, split, trace, work / name, device=device, progress=False,
                              checkpoint_every=0)
        seconds[name] = time.perf_counter() - began
    trained = seconds["train"]
    modelled = modelled_seconds(spec, device, gpu_gflops)
    metrics = pd.read_parquet(work / "train" / "metrics.parquet")
    return {"experiment": spec.experiment, "run": spec.run, "model": spec.model, "dataset": spec.dataset,
            "device": device, "rounds": spec.rounds, "num_devices": spec.num_devices,
            "clients_per_round": spec.clients_per_round, "batch_size": spec.batch_size,
            "status": result.status, "rounds_recorded": int(metrics["round"].max()),
            "split_s": prepared, "warmup_s": seconds["warmup"], "train_s": trained, "modelled_s": modelled,
            # the model counts the real source's samples: against a resized stand-in it compares nothing
            "modelled_over_measured": None if sizes else modelled / trained,
            "gpu_gflops": gpu_gflops if device == "cuda" else None}


def pick_runs(config: dict[str, Any], experiment: str | None, runs: int, rounds: int | None) -> list[RunSpec]:
    """The first `runs` runs of `experiment` (default: the config's first), one per setting before a second
    of any, with rounds cut to `rounds` (at most the run's own)."""
    from hetfl.config import expand_runs

    specs = [s for s in expand_runs(config) if experiment in (None, s.experiment)]
    if not specs:
        raise ValueError(f"--experiment has value {experiment!r}, which is not allowed; allowed: "
                         + ", ".join(sorted({s.experiment for s in expand_runs(config)})))
    first = [s for s in specs if s.experiment == specs[0].experiment]
    by_setting: dict[str, RunSpec] = {}
    for s in first:
        by_setting.setdefault(s.setting, s)
    chosen = (list(by_setting.values()) + [s for s in first if s not in by_setting.values()])[:runs]
    return [dataclasses.replace(s, rounds=min(rounds, s.rounds)) if rounds else s for s in chosen]


def card_gflops(device: str, environ: Mapping[str, str]) -> float:
    """The float32 matmul GFLOP/s the model scales a GPU run by: HETFL_SLURM_GPU_GFLOPS, as the SLURM
    profile reads it (a bad value refused, naming it), on CUDA; the default elsewhere (unused there)."""
    from hetfl.cluster import GPU_GFLOPS, ClusterOptions

    return ClusterOptions.from_environ(environ).gpu_gflops if device == "cuda" else GPU_GFLOPS


def _sizes(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        train, test = (int(v) for v in text.split(","))
    except ValueError:
        train = test = -1
    if train < 1 or test < 0:
        raise ValueError(f"--samples has value {text!r}, which is not allowed; allowed: TRAIN,TEST, a "
                         "positive and a non-negative whole number, e.g. 2000,500")
    return train, test


def main(argv: list[str] | None = None) -> int:
    from hetfl.config import load_config

    parser = argparse.ArgumentParser(prog="python -m hetfl.gpucell", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="a config, e.g. workflow/config/paper/tian2022_fedfor_table2.yaml")
    parser.add_argument("--experiment", default=None, help="the config's experiment (default: its first)")
    parser.add_argument("--runs", type=int, default=1, help="runs timed, one per setting first (default 1)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds each run trains (default 5)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--samples", metavar="TRAIN,TEST", default=None,
                        help="samples of the random source (default: the real source's, hetfl.cluster); the "
                             "model still counts the real source's, so no ratio is given")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the records to PATH ('-': "
                                                                     "stdout), checked before anything runs")
    args = parser.parse_args(argv)
    try:
        if min(args.runs, args.rounds) < 1:
            raise ValueError(f"--runs and --rounds take positive numbers; got {args.runs} and {args.rounds}")
        sizes = _sizes(args.samples)
        check_json_path(args.json)
        device = resolve_device(args.device)
        specs = pick_runs(load_config(args.config), args.experiment, args.runs, args.rounds)
        for spec in specs:
            if spec.dataset not in RANDOM_SOURCES:
                raise ValueError(f"dataset '{spec.dataset}' of {spec.experiment} has no random stand-in; "
                                 f"allowed: {', '.join(RANDOM_SOURCES)}")
        gflops = card_gflops(device.type, os.environ)
    except (ValueError, OSError) as err:
        print(f"gpucell: error: {err}", file=sys.stderr)
        return 2
    records = []  # run_training sets IEEE float32 and deterministic kernels on CUDA itself
    for spec in specs:
        with tempfile.TemporaryDirectory(prefix="hetfl-gpucell-") as work:
            r = time_run(spec, Path(work), device.type, gflops, sizes)
        records.append(r)
        ratio = "" if sizes else f" ({r['modelled_over_measured']:.2f}x the measured)"
        print(f"{r['experiment']}/{r['run']}: {r['model']} on {r['dataset']}, {r['rounds']} rounds on "
              f"{r['device']}: split {r['split_s']:.1f} s, warm-up round {r['warmup_s']:.1f} s, training "
              f"{r['train_s']:.1f} s, model "
              f"{r['modelled_s']:.1f} s{ratio}", flush=True)
        if args.json not in (None, "-"):  # after every run: a check's deadline keeps the runs before it
            write_json(records, args.json)
    if args.json == "-":
        write_json(records, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
