"""Stale inputs are refused; killed runs resume bitwise; finished runs are restored; stale checkpoints not."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from hetfl import cli, pipeline
from hetfl.config import RunSpec
from hetfl.data.build import make_split
from hetfl.data.traces import make_traces
from hetfl.pipeline import CHECKPOINT, Provenance, run_cell, run_training

SPEC = RunSpec(experiment="e", run="r", table="none", dataset="synthetic", setting="NIID", alpha=1.0,
               beta=1.0, iid=False, num_devices=20, sizes={"distribution": "pareto", "size": 20, "index": 0.5,
                                                 "max_size": 200, "min_size": 10, "sigma": 0.3},
               test_fraction=0.2, model="logreg", algorithm="scaffold", scheme="C", num_traces=8,
               trace_order=("T_0", "T_30", "T_50", "T_70", "T_90", "T_hi", "T_mi", "T_lo"),
               local_epochs=5,
               batch_size=20, eta0=1.0, rounds=12, eval_every=1, seed=0,
               algorithm_params={"global_lr": 1.0})


def _inputs(tmp_path: Path, spec: RunSpec = SPEC) -> tuple[Path, Path]:
    split, trace = tmp_path / "split" / "split.npz", tmp_path / "traces.npz"
    make_split(split, spec.split_spec(), spec.seed)
    make_traces(trace, traceset=spec.traceset, num_devices=spec.num_devices, rounds=spec.rounds,
                seed=spec.seed)
    return split, trace


def test_stale_split_and_traces_are_refused_naming_the_key(tmp_path):
    split, trace = _inputs(tmp_path)
    with pytest.raises(ValueError, match=r"alpha: split has 1.0, run needs 0.5.*delete it"):
        run_training(dataclasses.replace(SPEC, alpha=0.5), split, trace, tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match=r"seed: traces have 0, run needs 1"):
        make_split(tmp_path / "s1" / "split.npz", SPEC.split_spec(), 1)
        run_training(dataclasses.replace(SPEC, seed=1), tmp_path / "s1" / "split.npz", trace,
                     tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match=r"assignment: traces have \"random\", run needs \"stratified\""):
        run_training(dataclasses.replace(SPEC, trace_assignment="stratified"), split, trace, tmp_path / "run",
                     progress=False)
    assert not (tmp_path / "run").exists()  # refused before any output


def test_a_split_made_before_equal_counts_is_stale_for_a_run_that_asks_for_it():
    """A one-label split made without partition.equal_counts (devices of 2,000 to 6,000 MNIST samples) is
    other data than a run with it asks for; one made without it still serves runs without it."""
    from hetfl.data.build import split_mismatch

    part = {"label_skew": "pathological", "m": 1, "label_choice": "random"}
    old = {"dataset": "mnist", "num_devices": 10, "sizes": {"distribution": "equal"}, "partition": part,
           "seed": 0}
    run = {k: v for k, v in old.items() if k != "seed"}
    assert split_mismatch(old, run, 0) == {}
    diff = split_mismatch(old, {**run, "partition": {**part, "equal_counts": True}}, 0)
    assert list(diff) == ["partition"]
    assert diff["partition"][0]["equal_counts"] is False and diff["partition"][1]["equal_counts"] is True


def test_a_by_hand_split_with_fewer_keys_is_the_same_data(tmp_path):
    """`hetfl split` by hand fills defaults the config states explicitly: equal after resolution."""
    split = tmp_path / "split.npz"
    make_split(split, {"dataset": "synthetic", "alpha": 1.0, "beta": 1.0, "num_devices": 20,
                       "sizes": {"distribution": "pareto", "size": 20, "max_size": 200, "min_size": 10}}, 0)
    trace = tmp_path / "t.npz"
    make_traces(trace, traceset="T8", num_devices=20, rounds=12, seed=0)
    assert run_training(SPEC, split, trace, tmp_path / "run", progress=False).status == "ok"


def test_cli_by_hand_rebuilds_a_stale_split(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("experiments:\n  e:\n    table: none\n    dataset: synthetic\n    settings:\n"
                   "      NIID: {alpha: 1.0, beta: 1.0}\n    num_devices: 4\n    schemes: [C]\n"
                   "    num_traces: [2]\n    rounds: 2\n    seeds: [0]\n")
    cmd = [sys.executable, "-m", "hetfl.cli", "train", "--config", str(cfg), "--experiment", "e", "--run",
           "NIID_T2_C_s0", "--no-mlflow"]
    assert subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True).returncode == 0
    cfg.write_text(cfg.read_text().replace("alpha: 1.0", "alpha: 0.5"))
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "making the split again: split" in proc.stderr
    assert "alpha: split has 1.0, run needs 0.5" in proc.stderr
    manifest = json.loads((tmp_path / "data_splits/e/NIID/seed0/manifest.json").read_text())
    info = json.loads((tmp_path / "results/e/NIID_T2_C_s0/run.json").read_text())
    assert manifest["alpha"] == 0.5 == info["spec"]["alpha"]  # the data used and the record agree


def test_by_hand_a_split_or_traces_made_by_other_code_are_made_again(tmp_path, monkeypatch):
    """`hetfl train --config` made a split again only for other parameters: after an edit of the split code
    (data/synthetic.py) it trained on the split the old code made, and its numbers differed from a fresh
    directory's. A split records its code's fingerprint; traces, cheap to draw, are drawn and compared."""
    from hetfl import fingerprint as fp
    from hetfl.data import traces as traces_module

    monkeypatch.chdir(tmp_path)
    spec = dataclasses.replace(SPEC, rounds=3)
    split, trace = cli._prepare_by_hand(spec)
    manifest = json.loads(split.with_name("manifest.json").read_text())
    assert manifest[cli.SPLIT_CODE_KEY] == fp.fingerprint("split")
    stamps = split.stat().st_mtime_ns, trace.stat().st_mtime_ns
    assert cli._prepare_by_hand(spec) == (split, trace)  # the same code: both kept as they are
    assert (split.stat().st_mtime_ns, trace.stat().st_mtime_ns) == stamps
    real = fp.fingerprint
    monkeypatch.setattr(fp, "fingerprint", lambda kind, *a: "0" * 16 if kind == "split" else real(kind, *a))
    cli._prepare_by_hand(spec)  # the split code changed: the split is made again
    assert json.loads(split.with_name("manifest.json").read_text())[cli.SPLIT_CODE_KEY] == "0" * 16
    assert trace.stat().st_mtime_ns == stamps[1]
    draw = traces_module.generate_traces

    def other(*args, **kwargs):  # the trace code now draws other fractions
        tr = draw(*args, **kwargs)
        tr.fractions = tr.fractions * 0.5
        return tr

    monkeypatch.setattr(traces_module, "generate_traces", other)
    cli._prepare_by_hand(spec)
    expected = draw(spec.num_traces, spec.num_devices, spec.rounds, spec.seed,
                    names=spec.trace_order[: spec.num_traces], p_inactive=spec.p_inactive).fractions * 0.5
    assert np.array_equal(traces_module.load_traces(trace).fractions, expected)


def _train_cmd(spec: RunSpec, split: Path, trace: Path, out: Path, every: int) -> list[str]:
    return [sys.executable, "-m", "hetfl.cli", "train", "--spec", json.dumps(spec.to_dict()), "--split",
            str(split), "--traces", str(trace), "--out", str(out), "--no-mlflow", "--checkpoint-every",
            str(every)]


def test_killed_run_resumes_to_bitwise_the_same_metrics(tmp_path):
    spec = dataclasses.replace(SPEC, num_devices=50, rounds=400)
    split, trace = _inputs(tmp_path, spec)
    whole = tmp_path / "whole"
    assert subprocess.run(_train_cmd(spec, split, trace, whole, 0), capture_output=True).returncode == 0

    out = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(spec, split, trace, out, 5), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    seen = 0
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if (out / CHECKPOINT).exists():
            try:
                seen = torch.load(out / CHECKPOINT, weights_only=True).get("tau", 0)
            except Exception:  # caught mid-rename: look again
                seen = 0
            if seen >= 10:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        time.sleep(0.02)
    proc.wait()
    assert 10 <= seen < spec.rounds, "the run must be killed part-way (lengthen it if this machine is fast)"
    assert not (out / "metrics.parquet").exists()

    again = subprocess.run(_train_cmd(spec, split, trace, out, 5), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    info = json.loads((out / "run.json").read_text())
    assert info["resumed_from_round"] >= seen and info["rounds_done"] == spec.rounds
    pd.testing.assert_frame_equal(pd.read_parquet(whole / "metrics.parquet"),
                                  pd.read_parquet(out / "metrics.parquet"))


def test_finished_runs_are_restored_and_stale_checkpoints_ignored(tmp_path):
    split, trace = _inputs(tmp_path)
    specs = [SPEC, dataclasses.replace(SPEC, run="r2", scheme="B")]
    run_cell(specs, split, {s.run: trace for s in specs}, tmp_path / "results")
    first = {s.run: (tmp_path / "results/e" / s.run / "run.json").read_text() for s in specs}
    for s in specs:  # Snakemake removes a killed job's outputs before it reruns the job
        (tmp_path / "results/e" / s.run / "run.json").unlink()
        (tmp_path / "results/e" / s.run / "metrics.parquet").unlink()
    run_cell(specs, split, {s.run: trace for s in specs}, tmp_path / "results")
    for s in specs:
        assert (tmp_path / "results/e" / s.run / "run.json").read_text() == first[s.run]  # restored as it was
    # other code (another fingerprint) must not reuse the checkpoint
    out = tmp_path / "results/e/r"
    prov = Provenance(code="0" * 16, commit="x", dirty=False)
    result = run_training(SPEC, split, trace, out, progress=False, prov=prov)
    info = json.loads((out / "run.json").read_text())
    assert result.rounds_done == SPEC.rounds and info["code_fingerprint"] == "0" * 16
    assert info["resumed_from_round"] is None and info["wall_time_s"] != json.loads(first["r"])["wall_time_s"]


def test_a_cells_run_is_keyed_by_its_own_algorithms_code(tmp_path, monkeypatch):
    """A run's code fingerprint (run.json, checkpoint key) is its own algorithm's closure, not the cell's:
    an edit of fedprox.py restores the cell's fedavg runs instead of retraining them, and a run trained
    alone is restored in a cell."""
    from hetfl.fingerprint import fingerprint

    split, trace = _inputs(tmp_path)
    fedavg = dataclasses.replace(SPEC, run="avg", algorithm="fedavg", algorithm_params={})
    fedprox = dataclasses.replace(SPEC, run="prox", algorithm="fedprox", algorithm_params={})
    root = tmp_path / "results"
    run_training(fedavg, split, trace, root / "e/avg", progress=False)
    alone = (root / "e/avg/run.json").read_text()
    assert json.loads(alone)["code_fingerprint"] == fingerprint("train", ("fedavg",))
    run_cell([fedavg, fedprox], split, {"avg": trace, "prox": trace}, root)
    assert (root / "e/avg/run.json").read_text() == alone  # restored, not retrained
    edited = {("fedavg",): fingerprint("train", ("fedavg",)), ("fedprox",): "0" * 16}
    monkeypatch.setattr(pipeline, "fingerprint", lambda kind, algorithms=(): edited[tuple(algorithms)])
    prox_before = (root / "e/prox/run.json").read_text()
    run_cell([fedavg, fedprox], split, {"avg": trace, "prox": trace}, root)
    assert (root / "e/avg/run.json").read_text() == alone
    assert json.loads((root / "e/prox/run.json").read_text())["code_fingerprint"] == "0" * 16
    assert (root / "e/prox/run.json").read_text() != prox_before


def test_a_job_of_several_cells_writes_what_one_job_per_cell_writes(tmp_path):
    """`hetfl train --cell` with the runs of two cells (two seeds) and --splits-root trains both, cell after
    cell, and each run's metrics are those of a job for its cell alone (--split)."""
    from hetfl import paths
    from hetfl.config import specs_to_json

    specs = [dataclasses.replace(SPEC, algorithm="fedavg", algorithm_params={}, rounds=4, seed=seed,
                                 scheme=scheme, run=f"NIID_{scheme}_s{seed}")
             for seed in (0, 1) for scheme in ("A", "C")]
    root = tmp_path / "data_splits"
    for spec in specs:
        make_split(paths.split_dir(spec, root) / "split.npz", spec.split_spec(), spec.seed)
        make_traces(paths.trace_file(spec, root), traceset=spec.traceset, num_devices=spec.num_devices,
                    rounds=spec.rounds, seed=spec.seed)

    def train(cell, results, *split):
        cmd = [sys.executable, "-m", "hetfl.cli", "train", "--cell", specs_to_json(cell), "--traces-root",
               str(root), "--results-root", str(results), *split]
        return subprocess.run(cmd, capture_output=True, text=True)

    both = train(specs, tmp_path / "both", "--splits-root", str(root))
    assert both.returncode == 0, both.stderr
    assert "cell e/NIID/seed0: 2 ok" in both.stderr and "cell e/NIID/seed1: 2 ok" in both.stderr
    for seed in (0, 1):
        cell = [s for s in specs if s.seed == seed]
        alone = train(cell, tmp_path / "alone", "--split", str(paths.split_dir(cell[0], root) / "split.npz"))
        assert alone.returncode == 0, alone.stderr
        for spec in cell:
            both_m, alone_m = (pd.read_parquet(tmp_path / kind / "e" / spec.run / "metrics.parquet")
                               for kind in ("both", "alone"))
            pd.testing.assert_frame_equal(both_m, alone_m)
    # one --split cannot serve two cells: refused before any training
    refused = train(specs, tmp_path / "refused", "--split", str(root / "e/NIID/seed0/split.npz"))
    assert refused.returncode != 0
    assert "--split names one split, but --cell has runs of 2 cells" in refused.stderr
    assert not (tmp_path / "refused").exists()


def test_the_last_round_writes_the_outputs_not_a_full_checkpoint(tmp_path, monkeypatch):
    """At a run's last round the checkpoint call writes metrics.parquet, run.json and the light final
    checkpoint (no tensors), not a full checkpoint they would replace; mid-run checkpoints stay full, and the
    outputs are those of a run without checkpoints."""
    from hetfl import pipeline

    split, trace = _inputs(tmp_path)
    specs = [SPEC, dataclasses.replace(SPEC, run="r2", scheme="B")]
    saved = []
    real = pipeline._save_checkpoint

    def spy(path, payload):
        saved.append((path.parent.name, payload.get("tau"), "params" in payload, "info" in payload))
        real(path, payload)

    monkeypatch.setattr(pipeline, "_save_checkpoint", spy)
    run_cell(specs, split, {s.run: trace for s in specs}, tmp_path / "every", checkpoint_every=1)
    full = [tau for _, tau, has_params, _ in saved if has_params]
    assert len(full) == 2 * (SPEC.rounds - 1) and max(full) == SPEC.rounds - 1
    assert sorted(run for run, _, _, final in saved if final) == ["r", "r2"]
    run_cell(specs, split, {s.run: trace for s in specs}, tmp_path / "none", checkpoint_every=0)
    for s in specs:
        a, b = (tmp_path / root / "e" / s.run for root in ("every", "none"))
        pd.testing.assert_frame_equal(pd.read_parquet(a / "metrics.parquet"),
                                      pd.read_parquet(b / "metrics.parquet"))
        info = json.loads((a / "run.json").read_text())
        assert info["stacked_runs"] == 2 and info["rounds_done"] == SPEC.rounds
        assert torch.load(a / CHECKPOINT, weights_only=True)["info"] == info  # the light final checkpoint


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device (scripts/gpu-check runs this on a GPU machine)")
def test_a_run_on_cuda_is_reproducible_and_equals_the_cpu_run(tmp_path, torch_cuda_defaults):
    """A training run on CUDA sets IEEE float32 and deterministic kernels itself (engine.reproducible),
    also when its caller left torch's defaults; run twice it gives bitwise the same metrics, and it ends
    where the same run on the CPU ends, to float32 rounding."""
    spec = dataclasses.replace(SPEC, model="mlp", algorithm="fedavg", algorithm_params={}, eta0=0.1, rounds=4)
    split, trace = _inputs(tmp_path, spec)
    runs = {}
    for device in ("cpu", "cuda", "cuda-again"):
        assert run_training(spec, split, trace, tmp_path / device, device=device.split("-")[0],
                            progress=False, checkpoint_every=0).status == "ok"
        runs[device] = pd.read_parquet(tmp_path / device / "metrics.parquet")
    assert not torch.backends.cudnn.allow_tf32 and torch.are_deterministic_algorithms_enabled()
    cpu, cuda = runs["cpu"], runs["cuda"]
    pd.testing.assert_frame_equal(runs["cuda-again"], cuda)
    assert cpu[["round", "metric"]].equals(cuda[["round", "metric"]])
    # float32 sums in another order: losses agree to ~1e-6; an accuracy may move by one test sample (1/463)
    np.testing.assert_allclose(cuda["value"], cpu["value"], rtol=1e-3, atol=5e-3)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device (scripts/gpu-check runs this on a GPU machine)")
def test_a_tf32_run_on_cuda_is_reproducible_and_does_not_reuse_the_ieee_run(tmp_path, torch_cuda_defaults):
    """`run_training(..., tf32=True)` (hetfl train --tf32): TF32 products, still deterministic kernels, so a
    rerun gives bitwise the same metrics; run.json says cuda_tf32. In the directory of a finished IEEE run
    it trains anew (its checkpoint key differs) instead of restoring the IEEE numbers, and ends near them
    (TF32 keeps 10 mantissa bits in the products)."""
    spec = dataclasses.replace(SPEC, model="mlp", algorithm="fedavg", algorithm_params={}, eta0=0.1, rounds=4)
    split, trace = _inputs(tmp_path, spec)
    runs = {}
    for name, tf32 in (("ieee", False), ("tf32", True), ("tf32-again", True)):
        out = tmp_path / ("shared" if name == "tf32" else name)
        if name == "tf32":  # over a finished IEEE run: not restored
            assert run_training(spec, split, trace, out, device="cuda", progress=False).status == "ok"
            runs["ieee-shared"] = pd.read_parquet(out / "metrics.parquet")
        result = run_training(spec, split, trace, out, device="cuda", progress=False, tf32=tf32)
        assert result.status == "ok" and result.rounds_done == spec.rounds
        assert json.loads((out / "run.json").read_text())["cuda_tf32"] is tf32
        assert torch.backends.cudnn.allow_tf32 is tf32 and torch.backends.cuda.matmul.allow_tf32 is tf32
        assert torch.are_deterministic_algorithms_enabled()
        runs[name] = pd.read_parquet(out / "metrics.parquet")
    pd.testing.assert_frame_equal(runs["tf32-again"], runs["tf32"])
    pd.testing.assert_frame_equal(runs["ieee-shared"], runs["ieee"])
    assert runs["ieee"][["round", "metric"]].equals(runs["tf32"][["round", "metric"]])
    np.testing.assert_allclose(runs["tf32"]["value"], runs["ieee"]["value"], rtol=5e-2, atol=5e-2)
    if runs["tf32"]["value"].equals(runs["ieee"]["value"]):  # said in pytest's summary: the GPU's finding
        warnings.warn("tf32 on cuda: metrics bitwise equal to the IEEE run's (TF32 not in effect?)",
                      stacklevel=1)


def test_tf32_is_a_checkpoint_key_of_its_own_and_refused_off_cuda(tmp_path):
    """A TF32 run's checkpoint key differs from the IEEE run's, which keeps the key it had before the option
    existed (finished checkpoints stay valid); --tf32 on the CPU is refused before anything is written."""
    import hashlib

    key = pipeline.checkpoint_key(SPEC, "a" * 64, "b" * 64, "code")
    before = json.dumps({"spec": SPEC.to_dict(), "split": "a" * 64, "traces": "b" * 64, "code": "code",
                         "torch": torch.__version__, "numpy": np.__version__}, sort_keys=True)
    assert key == hashlib.sha256(before.encode()).hexdigest()
    assert pipeline.checkpoint_key(SPEC, "a" * 64, "b" * 64, "code", tf32=True) != key
    split, trace = _inputs(tmp_path, SPEC)
    with pytest.raises(ValueError, match=r"^--tf32 \(TF32 products on CUDA\) was asked for, but the run "
                                         r"trains on cpu; allowed: --tf32 with --device cuda"):
        run_training(SPEC, split, trace, tmp_path / "run", device="cpu", progress=False, tf32=True)
    with pytest.raises(ValueError, match="--tf32"):
        run_cell([SPEC], split, {SPEC.run: trace}, tmp_path / "cell", device="cpu", tf32=True)
    assert not (tmp_path / "run").exists() and not (tmp_path / "cell").exists()


def test_a_checkpoint_made_under_other_threads_or_device_is_not_continued(tmp_path):
    """--threads changes a CNN's numbers in their last bits (its blocks train on as many CPU workers), so a
    run killed under --threads 2 and rerun with --threads 1 matched neither uninterrupted run: a checkpoint
    is continued (or a finished run restored) only under the threads and device type it was made with.
    One thread on the CPU, the workflow's, keeps the key it had."""
    args = (SPEC, "a" * 64, "b" * 64, "code")
    key = pipeline.checkpoint_key(*args)
    assert pipeline.checkpoint_key(*args, threads=1, device="cpu") == key
    assert len({key, pipeline.checkpoint_key(*args, threads=2), pipeline.checkpoint_key(*args, device="cuda"),
                pipeline.checkpoint_key(*args, tf32=True, device="cuda")}) == 4
    split, trace = _inputs(tmp_path)
    out = tmp_path / "run"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        run_training(SPEC, split, trace, out, progress=False, checkpoint_every=5)
        (out / "run.json").unlink()
        (out / "metrics.parquet").unlink()
        torch.set_num_threads(1)
        run_training(SPEC, split, trace, out, progress=False, checkpoint_every=5)
    finally:
        torch.set_num_threads(threads)
    info = json.loads((out / "run.json").read_text())
    assert info["torch_threads"] == 1 and info["resumed_from_round"] is None  # trained again, not restored


def test_cpu_workers_is_recorded_and_a_checkpoint_key_of_its_own(tmp_path):
    """`hetfl train --cpu-workers off|on` changes how a CNN's blocks are trained, and with it the last bits
    of its numbers (as --threads does): run.json records it, and a checkpoint made under another setting is
    not continued. The rule ("auto") keeps the key it had."""
    args = (SPEC, "a" * 64, "b" * 64, "code")
    key = pipeline.checkpoint_key(*args)
    assert pipeline.checkpoint_key(*args, cpu_workers="auto") == key
    assert len({key, pipeline.checkpoint_key(*args, cpu_workers="off"),
                pipeline.checkpoint_key(*args, cpu_workers="on")}) == 3
    run = dataclasses.replace(SPEC, rounds=2)
    split, trace = _inputs(tmp_path, run)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(run.to_dict()))
    try:
        for flag, mode in (([], "auto"), (["--cpu-workers", "off"], "off")):
            out = tmp_path / f"run-{mode}"
            assert cli.main(["train", "--spec", str(spec), "--split", str(split), "--traces", str(trace),
                             "--out", str(out), "--no-mlflow", *flag]) == 0
            assert json.loads((out / "run.json").read_text())["cpu_workers"] == mode
    finally:
        from hetfl.engine import executor
        executor.set_cpu_workers("auto")


@pytest.mark.skipif(torch.cuda.is_available(), reason="--device auto would train on CUDA")
@pytest.mark.parametrize("flag,expect", [([], None), (["--graphs"], True), (["--no-graphs"], False)])
def test_hetfl_train_passes_its_graphs_option_down(flag, expect, tmp_path, monkeypatch):
    """`hetfl train --graphs/--no-graphs` reaches every local_sgd call of the run (absent: None, the
    executor's rule); run.json says whether the run used CUDA graphs (never on the CPU: --device auto
    without CUDA trains the same steps eagerly)."""
    run = dataclasses.replace(SPEC, algorithm="fedavg", algorithm_params={}, rounds=2)
    split, trace = _inputs(tmp_path, run)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(run.to_dict()))
    seen: list[bool | None] = []
    real = pipeline.local_sgd
    monkeypatch.setattr(pipeline, "local_sgd", lambda *a, **k: seen.append(k.get("graphs")) or real(*a, **k))
    out = tmp_path / "run"
    assert cli.main(["train", "--spec", str(spec), "--split", str(split), "--traces", str(trace),
                     "--out", str(out), "--no-mlflow", "--device", "auto", *flag]) == 0
    assert seen and set(seen) == {expect}
    assert json.loads((out / "run.json").read_text())["cuda_graphs"] is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="--device auto would train on CUDA")
def test_hetfl_train_keep_graphs_gives_every_round_one_cache(tmp_path, monkeypatch):
    """`hetfl train --graphs --keep-graphs`: every local_sgd call of the run gets the same GraphCache (one
    per run or cell, kept across its rounds); without --keep-graphs none. run.json says whether graphs were
    kept (never on the CPU)."""
    run = dataclasses.replace(SPEC, algorithm="fedavg", algorithm_params={}, rounds=3)
    split, trace = _inputs(tmp_path, run)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(run.to_dict()))
    real = pipeline.local_sgd
    caches: list[object] = []
    monkeypatch.setattr(pipeline, "local_sgd",
                        lambda *a, **k: caches.append(k.get("graph_cache")) or real(*a, **k))
    for flags, kept in ((["--graphs", "--keep-graphs"], True), (["--graphs"], False)):
        caches.clear()
        out = tmp_path / f"run-{kept}"
        assert cli.main(["train", "--spec", str(spec), "--split", str(split), "--traces", str(trace),
                         "--out", str(out), "--no-mlflow", "--device", "auto", *flags]) == 0
        assert len(caches) == run.rounds
        assert len({id(c) for c in caches}) == 1 and (caches[0] is not None) == kept
        info = json.loads((out / "run.json").read_text())
        assert info["cuda_graphs_kept"] is False and info["cuda_tf32"] is False


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (scripts/gpu-check runs this on a GPU machine)"))])
def test_a_run_with_graphs_is_reproducible_and_equals_the_eager_run(device, tmp_path, monkeypatch,
                                                                     torch_cuda_defaults):
    """`run_training(..., graphs=True)`: local steps are replayed from captured graphs (engine.graphs; on the
    CPU the same steps eagerly, bitwise), a rerun gives bitwise the same metrics, and the run ends where the
    eager run ends (on CUDA a replay runs the captured kernels again; float32 rounding allowed, should the
    graph's stream pick other kernels). Every client trains E = 8 steps (one trace, T_0: every device
    completes), so every round has a run long enough to capture. The same with graphs kept across rounds
    (`keep_graphs`, what `hetfl train --keep-graphs` passes): at a constant learning rate the first round
    captures and the later rounds replay, so the run captures fewer graphs than it has rounds."""
    from hetfl.engine import graphs

    spec = dataclasses.replace(SPEC, model="mlp", algorithm="fedavg", algorithm_params={}, eta0=0.1, rounds=4,
                               num_traces=1, trace_order=("T_0",), local_epochs=8, lr_schedule="constant")
    split, trace = _inputs(tmp_path, spec)
    captures: list[int] = []
    real = graphs.capture
    monkeypatch.setattr(graphs, "capture", lambda *a: captures.append(a[2]) or real(*a))
    runs = {}
    modes = (("eager", False, False), ("graphs", True, False), ("graphs-again", True, False),
             ("kept", True, True), ("kept-again", True, True))
    for name, option, keep in modes:
        before = len(captures)
        assert run_training(spec, split, trace, tmp_path / name, device=device, progress=False,
                            checkpoint_every=0, graphs=option, keep_graphs=keep).status == "ok"
        captured = len(captures) - before
        if keep:  # the first round's blocks capture, the later rounds replay them
            assert 0 < captured < spec.rounds, (name, captured)
        else:
            assert (captured >= spec.rounds) == option, name  # a capture a round, at least
        runs[name] = pd.read_parquet(tmp_path / name / "metrics.parquet")
        info = json.loads((tmp_path / name / "run.json").read_text())
        assert info["cuda_graphs"] is (option and device == "cuda")
        assert info["cuda_graphs_kept"] is (keep and device == "cuda")
    eager = runs["eager"]
    for name in ("graphs", "kept"):
        graphed = runs[name]
        pd.testing.assert_frame_equal(runs[f"{name}-again"], graphed)
        if device == "cpu":
            pd.testing.assert_frame_equal(graphed, eager)
        assert eager[["round", "metric"]].equals(graphed[["round", "metric"]])
        np.testing.assert_allclose(graphed["value"], eager["value"], rtol=1e-5, atol=1e-6)
        if not graphed["value"].equals(eager["value"]):  # said in pytest's summary: the GPU's finding
            diff = float((graphed["value"] - eager["value"]).abs().max())
            warnings.warn(f"{name} graphs on {device}: metrics within float32 rounding of the eager run, not "
                          f"bitwise (largest difference {diff:.2e})", stacklevel=1)
