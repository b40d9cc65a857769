"""`hetfl bench`: well-formed records from a tiny run (correctness only, no timing assertions)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from hetfl import bench
from hetfl.models import make_model

KEYS = {"workload", "engine", "clients", "batch", "client_steps_per_s", "peak_rss_mb", "device"}


@pytest.fixture(autouse=True)
def _quick_machine_facts(monkeypatch):
    """Small matmul and copy measurements (the real ones time 2048² matmuls and 256 MiB copies), and
    torch's thread count restored after `--threads`."""
    gemm, copy = bench.gemm_gflops, bench.copy_gbps
    monkeypatch.setattr(bench, "gemm_gflops", lambda device, **kw: gemm(device, **{"n": 256, **kw}))
    monkeypatch.setattr(bench, "copy_gbps", lambda device, **kw: copy(device, **{"mbytes": 8, **kw}))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_tiny_bench_json(tmp_path, capsys):
    """Every default workload (one per model of the zoo) runs both engines and gives finite records."""
    out = tmp_path / "bench.json"
    argv = ["--steps", "1", "--repeat", "1", "--clients", "2", "--batch", "3", "--threads", "1",
            "--device", "cpu", "--json", str(out)]
    assert bench.main(argv) == 0
    records = json.loads(out.read_text())
    assert [(r["workload"], r["engine"]) for r in records] == [
        (w, e) for w in bench.DEFAULT_WORKLOADS for e in ("batched", "reference")]
    for r in records:
        assert KEYS <= set(r)
        assert r["device"] == "cpu" and r["clients"] == 2 and r["steps"] == 1 and r["repeat"] == 1
        assert r["batch"] == 3
        assert r["cpu_s_per_client_step"] > 0 and r["executor"]
        for key in ("client_steps_per_s", "peak_rss_mb", "gflops", "bound_client_steps_per_s",
                    "fraction_of_bound", "fraction_of_matmul", "matmul_gflops", "copy_gbps", "speedup"):
            assert math.isfinite(r[key]) and r[key] > 0, key
        rate = r["client_steps_per_s"]
        assert r["fraction_of_bound"] == pytest.approx(rate / r["bound_client_steps_per_s"])
    ref = {r["workload"]: r["client_steps_per_s"] for r in records if r["engine"] == "reference"}
    for r in records:
        assert r["speedup"] == pytest.approx(r["client_steps_per_s"] / ref[r["workload"]])
    table = capsys.readouterr().out
    assert "sent-lstm-sent140" in table and "GFLOP/s" in table and "matmul" in table


@pytest.mark.parametrize("flag", [["--json"], ["--json", "-"]])
def test_json_to_stdout(capsys, flag):
    """`--json` without a path (issue 12) or with '-' writes the records to stdout, the table to stderr."""
    assert bench.main(["--workloads", "logreg-synthetic", "--steps", "2", "--repeat", "1", "--clients", "2",
                       "--device", "cpu", "--threads", "1", *flag]) == 0
    captured = capsys.readouterr()
    records = json.loads(captured.out)
    assert len(records) == 2 and "logreg-synthetic" in captured.err  # the table goes to stderr then


def test_model_params_reach_every_workloads_model(monkeypatch):
    """--model-params: keyword arguments for each workload's model on top of its own, in the records; the
    convolutional models' channels_last=False builds NCHW models (the layout a GPU should compare)."""
    built = []
    real = bench.make_model
    monkeypatch.setattr(bench, "make_model", lambda *a, **k: built.append(k) or real(*a, **k))
    records, _ = bench.run_bench(["cnn-mnist", "resnet20-cifar"], steps=1, device="cpu", threads=1, repeat=1,
                                 clients=2, batch=2, model_params={"channels_last": False})
    assert built and all(k.get("channels_last") is False for k in built)
    assert {r["workload"] for r in records} == {"cnn-mnist", "resnet20-cifar"}
    assert all(r["model_params"] == {"channels_last": False} for r in records)
    assert all(r["tf32"] is False for r in records)  # IEEE float32 unless --tf32 (CUDA only)
    assert all(r["cudnn"] is None for r in records)  # cuDNN's heuristics: a CUDA bench's only


def test_a_cuda_bench_says_which_cudnn_heuristics_chose_its_convolutions(torch_cuda_defaults, monkeypatch,
                                                                        capsys):
    """engine.reproducible asks cuDNN's mode B (TORCH_CUDNN_USE_HEURISTIC_MODE_B=1) unless the user set the
    variable; torch reads "1" and "0" only. gpu-check's `instant` rows set "0": the records say which."""
    assert bench.cudnn_heuristics("1") == "mode B"
    assert bench.cudnn_heuristics("0") == bench.cudnn_heuristics(None) == "instant"
    # the header, on a CUDA device faked up to its measurements (no workload runs)
    monkeypatch.setattr(bench, "resolve_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(bench, "device_name", lambda device: "Fake GPU")
    monkeypatch.setattr(bench, "run_workload", lambda *args, **kwargs: [])
    monkeypatch.setattr(bench, "gemm_gflops", lambda device: {"torch.mm": 1000.0})
    monkeypatch.setattr(bench, "copy_gbps", lambda device: 100.0)
    assert bench.main(["--workloads", "logreg-synthetic", "--device", "cuda"]) == 0
    assert "Fake GPU (cuda, cuDNN mode B heuristics, " in capsys.readouterr().out
    monkeypatch.setenv("TORCH_CUDNN_USE_HEURISTIC_MODE_B", "0")  # as gpu-check's `instant` step runs
    assert bench.main(["--workloads", "logreg-synthetic", "--device", "cuda"]) == 0
    assert "Fake GPU (cuda, cuDNN instant heuristics, " in capsys.readouterr().out



def test_the_batch_norm_resnet_runs_under_model_params():
    """--model-params '{"norm": "batch"}' (FedFOR Table 2's ResNet-20): both engines train and evaluate
    the batch-norm model, the records say so, and a step's bytes count its running statistics (read and
    written, 2 × 688 float32 entries more than GroupNorm's); a norm the ResNets do not take is refused
    before any work."""
    records, _ = bench.run_bench(["resnet20-cifar"], steps=1, device="cpu", threads=1, repeat=1, clients=2,
                                 batch=2, model_params={"norm": "batch"}, eval_samples=8)
    assert {(r["mode"], r["engine"]) for r in records} == {(m, e) for m in ("train", "evaluate")
                                                         for e in ("batched", "reference")}
    assert all(r["model_params"] == {"norm": "batch"} for r in records)
    w = bench.WORKLOADS["resnet20-cifar"]
    group, batch = (bench.step_bytes(bench.workload_model(bench.with_model_params(w, {"norm": n})), [], 2)
                    for n in ("group", "batch"))
    assert batch - group == 2 * 4 * 2 * 688
    assert {r["bytes_per_client_step"] for r in records if r["mode"] == "train"} == {batch}
    with pytest.raises(ValueError) as err:
        bench.check_workloads(["resnet20-cifar"], {"norm": "layer"})
    assert str(err.value) == ('--model-params {"norm": "layer"}: model \'resnet20\' (workload '
                              "resnet20-cifar) refuses them: norm 'layer' is unknown; allowed: group, batch")


@pytest.mark.parametrize("flag,option,recorded", [(["--graphs"], True, True), (["--no-graphs"], False, False),
                                                  ([], None, False)])
def test_graphs_flag_reaches_the_engine_and_its_record(flag, option, recorded, capsys, monkeypatch):
    """--graphs / --no-graphs: every local_sgd call of the batched engine gets graphs=True / False, and
    without either None (the executor's rule: no graphs on the CPU); the batched record says what was
    used, the reference loop's never graphs."""
    seen = []
    real = bench.local_sgd
    monkeypatch.setattr(bench, "local_sgd", lambda *a, **k: seen.append(k.get("graphs")) or real(*a, **k))
    assert bench.main(["--workloads", "logreg-synthetic", "--steps", "7", "--repeat", "1", "--clients", "2",
                       "--device", "cpu", "--threads", "1", *flag, "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert seen and set(seen) == {option}
    assert {r["engine"]: r["graphs"] for r in records} == {"batched": recorded, "reference": False}


@pytest.mark.parametrize("flags,kept", [(["--graphs", "--keep-graphs"], True), (["--keep-graphs"], False),
                                        (["--graphs"], False)])
def test_keep_graphs_shares_one_cache_over_the_timed_rounds(flags, kept, capsys, monkeypatch):
    """--keep-graphs: the batched engine's timed rounds share one GraphCache, so where graphs are on the
    first round captures and the later rounds only replay; where graphs are off (the rule: none on the
    CPU) nothing is kept. The batched record says so."""
    from hetfl.engine import graphs

    captures, caches = [], set()
    real_capture, real_sgd = graphs.capture, bench.local_sgd
    monkeypatch.setattr(graphs, "capture", lambda *a: captures.append(1) or real_capture(*a))

    def sgd(*a, **k):
        caches.add(id(k["graph_cache"]) if k.get("graph_cache") is not None else None)
        return real_sgd(*a, **k)

    monkeypatch.setattr(bench, "local_sgd", sgd)
    steps = graphs.GRAPH_MIN_STEPS + 1
    assert bench.main(["--workloads", "logreg-synthetic", "--steps", str(steps), "--repeat", "3",
                       "--clients", "2", "--device", "cpu", "--threads", "1", *flags, "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["engine"]: r["graphs_kept"] for r in records} == {"batched": kept, "reference": False}
    if "--keep-graphs" in flags:
        assert len(caches - {None}) == 1  # the timed rounds' one (the untimed warm-up keeps none)
    # one block of 2 clients x `steps` steps: one capture in all when kept, one per timed round when not
    assert len(captures) == (1 if kept else 3 if "--graphs" in flags else 0)


def test_no_reference_times_the_batched_engine_only(capsys, monkeypatch):
    """--no-reference: no call of the reference loop, only batched records, with no speed-up; refused with
    --eval (which times evaluation against the torch.nn module) before any work."""
    monkeypatch.setattr(bench, "local_sgd_reference", lambda *a, **k: pytest.fail("the loop ran"))
    argv = ["--workloads", "logreg-synthetic,mlp-mnist", "--steps", "2", "--repeat", "1", "--clients", "2",
            "--device", "cpu", "--threads", "1", "--no-reference", "--json"]
    assert bench.main(argv) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["workload"], r["engine"]) for r in records] == [("logreg-synthetic", "batched"),
                                                              ("mlp-mnist", "batched")]
    assert all(r["speedup"] is None and r["client_steps_per_s"] > 0 for r in records)
    assert bench.main(["--no-reference", "--eval", "64"]) == 2
    assert "--no-reference and --eval are both given" in capsys.readouterr().err


def test_ref_threads_times_the_reference_loop_on_its_own_thread_count(capsys, monkeypatch):
    """--ref-threads 1 with --threads 2: every reference call runs on one torch thread, every engine call
    on two, the caller's count is back after, and each record says its engine's threads; a count below 1
    is refused before any work."""
    seen: dict[str, set[int]] = {"batched": set(), "reference": set()}
    for name, engine in (("local_sgd", "batched"), ("local_sgd_reference", "reference")):
        real = getattr(bench, name)
        monkeypatch.setattr(bench, name, lambda *a, _r=real, _e=engine, **k: seen[_e].add(
            torch.get_num_threads()) or _r(*a, **k))
    before = torch.get_num_threads()
    try:
        assert bench.main(["--workloads", "logreg-synthetic", "--steps", "2", "--repeat", "1", "--clients",
                           "2", "--device", "cpu", "--threads", "2", "--ref-threads", "1", "--json"]) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    records = json.loads(capsys.readouterr().out)
    assert seen == {"batched": {2}, "reference": {1}}
    assert {r["engine"]: r["threads"] for r in records} == {"batched": 2, "reference": 1}
    monkeypatch.setattr(bench, "run_workload", lambda *a, **k: pytest.fail("measured despite bad input"))
    # the CLI refuses 0 as it parses (test_counts_out_of_range_are_refused_naming_the_flag); run_bench too
    with pytest.raises(ValueError, match="--ref-threads has value 0, which is not allowed; allowed: 1 or"):
        bench.run_bench(["logreg-synthetic"], device="cpu", ref_threads=0)


def test_cpu_workers_times_the_engine_under_the_chosen_executor(capsys):
    """--cpu-workers off|on: the batched engine's blocks on workers or not, whatever the model's rule, so
    that a new CPU can measure both (the rule was measured on a 2-core Zen 3); each record says its
    executor, and the process's setting is the rule's again after."""
    from hetfl.engine import executor

    before = torch.get_num_threads()
    try:
        for mode, workers in (("auto", "2 workers"), ("off", "1 worker")):
            assert bench.main(["--workloads", "cnn-mnist", "--steps", "1", "--repeat", "1", "--clients", "4",
                               "--device", "cpu", "--threads", "2", "--no-reference", "--cpu-workers", mode,
                               "--json"]) == 0
            (record,) = json.loads(capsys.readouterr().out)
            assert record["executor"].endswith(workers) and record["cpu_workers"] == mode
            assert executor.cpu_workers() == "auto"
    finally:
        torch.set_num_threads(before)
    # --profile and --count-ops time no executor choice: refused, as --tf32 is there
    assert bench.main(["--workloads", "cnn-mnist", "--profile", "--cpu-workers", "off"]) == 2
    assert "--cpu-workers is given with --count-ops or --profile" in capsys.readouterr().err


@pytest.mark.parametrize("value,message", [
    ('{"channels_last": false}', "model 'mlp' (workload mlp-mnist) does not take them"),
    ("[1]", "has value '[1]', which is not allowed; allowed: a JSON object"),
    ("{x", "is not valid JSON"),
])
def test_bad_model_params_fail_before_any_work(value, message, capsys, monkeypatch):
    monkeypatch.setattr(bench, "run_workload", lambda *a, **k: pytest.fail("measured despite bad input"))
    assert bench.main(["--workloads", "cnn-mnist,mlp-mnist", "--device", "cpu", "--model-params", value]) == 2
    err = capsys.readouterr().err
    assert "--model-params" in err and message in err


def test_eval_times_the_models_logits_against_its_torch_nn_module(capsys):
    """--eval N: after the training records (mode "train"), one record per workload and engine (mode
    "evaluate") for evaluating the global model on N samples, the model's logits against the torch.nn
    twin's forward pass; and a second table."""
    argv = ["--workloads", "logreg-synthetic,cnn-mnist", "--steps", "1", "--repeat", "1", "--clients", "2",
            "--batch", "2", "--threads", "1", "--device", "cpu", "--eval", "30", "--json"]
    assert bench.main(argv) == 0
    captured = capsys.readouterr()
    records = json.loads(captured.out)
    assert [(r["mode"], r["workload"], r["engine"]) for r in records] == [
        (m, w, e) for m in ("train", "evaluate") for w in ("logreg-synthetic", "cnn-mnist")
        for e in ("batched", "reference")]
    evals = [r for r in records if r["mode"] == "evaluate"]
    for r in evals:
        assert r["samples"] == 30 and r["repeat"] == 1 and r["device"] == "cpu" and r["threads"] == 1
        assert math.isfinite(r["samples_per_s"]) and r["samples_per_s"] > 0
    for batched, reference in zip(evals[::2], evals[1::2], strict=True):
        assert batched["speedup"] == pytest.approx(batched["samples_per_s"] / reference["samples_per_s"])
        assert reference["speedup"] == 1.0
    assert [r["executor"] for r in evals[2:]] == ["model.logits, chunks of 4096", "torch.nn module, no_grad"]
    assert "samples/s" in captured.err and "cnn-mnist" in captured.err


def test_eval_rates_are_medians_and_both_engines_compute_the_same_logits(monkeypatch):
    runs = iter([(4.0, 0.0), (1.0, 0.0), (2.0, 0.0), (8.0, 0.0), (3.0, 0.0), (2.0, 0.0)])  # alternating
    monkeypatch.setattr(bench, "timed", lambda fn, device: next(runs))
    batched, reference = bench.run_eval(bench.WORKLOADS["cnn-mnist"], 12, torch.device("cpu"), repeat=3)
    assert batched["samples_per_s"] == pytest.approx(12 / 3.0)  # walls 4, 2, 3
    assert reference["samples_per_s"] == pytest.approx(12 / 2.0)  # walls 1, 8, 2
    for name in ("cnn-mnist", "sent-lstm-sent140"):
        w = bench.WORKLOADS[name]
        model = bench.workload_model(w)
        params = model.init_params(torch.Generator().manual_seed(0))
        x = bench.random_inputs(w, 7, torch.Generator().manual_seed(1))
        ours, theirs = (bench.eval_fn(e, model, params, x)() for e in bench.ENGINES)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flags", [["--eval", "0"], ["--eval", "5", "--count-ops"]])
def test_bad_eval_fails_before_any_work(flags, capsys, monkeypatch):
    monkeypatch.setattr(bench, "run_workload", lambda *a, **k: pytest.fail("measured despite bad input"))
    monkeypatch.setattr(bench, "count_ops", lambda *a, **k: pytest.fail("counted despite bad input"))
    assert bench.main(["--workloads", "cnn-mnist", "--device", "cpu", *flags]) == 2
    assert "--eval has value" in capsys.readouterr().err


@pytest.mark.parametrize("count_ops", [False, True])
def test_unwritable_json_path_fails_before_any_work(count_ops, tmp_path, capsys, monkeypatch):
    """--json into a directory that does not exist (or onto a directory) is refused before anything is
    measured, not after: a GPU session's bench once timed every workload, then lost the records."""
    monkeypatch.setattr(bench, "run_workload", lambda *a, **k: pytest.fail("measured despite bad input"))
    monkeypatch.setattr(bench, "count_ops", lambda *a, **k: pytest.fail("counted despite bad input"))
    flags = ["--count-ops"] if count_ops else []
    for path in (tmp_path / "missing" / "bench.json", tmp_path):
        argv = ["--workloads", "logreg-synthetic", "--device", "cpu", *flags, "--json", str(path)]
        assert bench.main(argv) == 2
        err = capsys.readouterr().err
        assert f"--json has value '{path}'" in err and "existing, writable directory" in err


def test_unknown_workload():
    with pytest.raises(ValueError, match="unknown workload"):
        bench.run_bench(["nope"], steps=1)


def test_workloads_are_the_issues():
    """Issue 12: the bench covers every model of the zoo at the papers' sizes, by default."""
    def spec(name: str) -> tuple:
        w = bench.WORKLOADS[name]
        return w.model, w.input_shape, w.num_classes, w.batch, w.clients, w.kwargs

    assert spec("logreg-synthetic") == ("logreg", (60,), 10, 20, 50, {})
    assert spec("mlp-mnist") == ("mlp", (784,), 10, 10, 100, {"hidden": (200, 200)})
    assert spec("cnn-mnist")[:4] == ("cnn", (1, 28, 28), 10, 10)
    assert {bench.WORKLOADS[n].model for n in bench.DEFAULT_WORKLOADS} == {
        "logreg", "mlp", "cnn", "cnn_bn", "vgg11", "resnet20", "char_lstm", "sent_lstm"}
    assert set(bench.DEFAULT_WORKLOADS) <= set(bench.WORKLOADS)
    text = [bench.WORKLOADS[n] for n in bench.DEFAULT_WORKLOADS if "lstm" in n]
    assert [(w.input_shape, w.vocab) for w in text] == [((80,), 80), ((25,), 20_000)]  # LEAF's sequences


def test_rates_are_medians_of_the_runs(monkeypatch):
    """client_steps_per_s = work / median wall time; cpu_s_per_client_step = median CPU time / work."""
    runs = iter([(4.0, 1.0), (1.0, 9.0), (2.0, 3.0), (8.0, 8.0), (3.0, 2.0), (2.0, 2.0)])  # alternating
    monkeypatch.setattr(bench, "timed", lambda fn, device: next(runs))
    w = bench.WORKLOADS["logreg-synthetic"]
    batched, reference = bench.run_workload(w, 3, torch.device("cpu"), repeat=3, clients=2)
    assert batched["client_steps_per_s"] == pytest.approx(6 / 3.0)  # walls 4, 2, 3
    assert batched["cpu_s_per_client_step"] == pytest.approx(2.0 / 6)  # cpus 1, 3, 2
    assert reference["client_steps_per_s"] == pytest.approx(6 / 2.0)  # walls 1, 8, 2
    assert reference["cpu_s_per_client_step"] == pytest.approx(8.0 / 6)  # cpus 9, 8, 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_cuda_fails_clearly_before_any_work(capsys):
    assert bench.main(["--device", "cuda", "--workloads", "logreg-synthetic"]) == 2
    err = capsys.readouterr().err
    assert "--device cuda" in err and "no CUDA device" in err and "allowed: auto, cpu" in err
    with pytest.raises(ValueError, match="allowed: auto, cpu, cuda"):
        bench.resolve_device("tpu")
    assert bench.main(["--workloads", "nope"]) == 2
    assert "unknown workload" in capsys.readouterr().err


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_gemm_products_are_the_same_product():
    """Every library the bound is measured on computes a · bᵀ (oneDNN's inner product too, where torch has
    it: on the project's Zen 5 host torch.mm reaches half its rate, so torch.mm alone was no bound)."""
    cpu = torch.device("cpu")
    products = bench.gemm_products(cpu)
    assert set(products) == {"torch.mm", "oneDNN"}
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(33, 70, generator=gen), torch.randn(21, 70, generator=gen)
    for name, product in products.items():
        torch.testing.assert_close(product(a, b), a @ b.t(), msg=name)


def test_bound_is_the_fastest_library(monkeypatch, capsys):
    """The bound (matmul_gflops, the records' fractions, the header) is the fastest library's rate, and the
    header names it and gives the others'."""
    monkeypatch.setattr(bench, "gemm_gflops", lambda device, **kw: {"torch.mm": 100.0, "oneDNN": 250.0})
    assert bench.matmul_gflops(torch.device("cpu")) == 250.0
    assert bench.main(["--workloads", "logreg-synthetic", "--steps", "1", "--repeat", "1", "--clients", "2",
                       "--device", "cpu", "--threads", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert "matmul 250 GFLOP/s (oneDNN; torch.mm 100)" in captured.err
    records = json.loads(captured.out)
    assert {r["matmul_gflops"] for r in records} == {250.0}
    assert all(r["matmul_library"] == "oneDNN" and r["gemm_gflops"] == {"torch.mm": 100.0, "oneDNN": 250.0}
               for r in records)
    for r in records:
        assert r["fraction_of_matmul"] == pytest.approx(r["gflops"] / 250.0)


def test_machine_is_measured_after_the_workloads(monkeypatch):
    """The GEMM and copy measurements' buffers stay resident once freed (main keeps freed memory,
    engine.allocator), so measured first they were counted in every workload's peak RSS."""
    calls = []
    gemm, copy, workload = bench.gemm_gflops, bench.copy_gbps, bench.run_workload
    monkeypatch.setattr(bench, "gemm_gflops", lambda *a, **kw: calls.append("gemm") or gemm(*a, **kw))
    monkeypatch.setattr(bench, "copy_gbps", lambda *a, **kw: calls.append("copy") or copy(*a, **kw))
    monkeypatch.setattr(bench, "run_workload",
                        lambda *a, **kw: calls.append("workload") or workload(*a, **kw))
    records, machine = bench.run_bench(["logreg-synthetic"], steps=1, device="cpu", threads=1, repeat=1,
                                       clients=2)
    assert calls == ["workload", "gemm", "copy"]
    assert records[0]["matmul_gflops"] == machine["matmul_gflops"] > 0


def test_flops_and_bounds():
    logreg = make_model("logreg", 60, 10)
    assert bench.train_flops(logreg, 20) == 2 * 2 * 20 * 60 * 10
    records = [{"workload": "w", "engine": e, "client_steps_per_s": rate, "flops_per_client_step": 1e9,
                "bytes_per_client_step": 1e9} for e, rate in (("batched", 20.0), ("reference", 5.0))]
    bench.add_bounds(records, matmul=100.0, bandwidth=50.0)  # bound: min(100, 50) steps/s
    assert records[0]["bound_client_steps_per_s"] == pytest.approx(50.0)
    assert records[0]["fraction_of_bound"] == pytest.approx(0.4)
    assert records[0]["gflops"] == pytest.approx(20.0)
    assert records[0]["fraction_of_matmul"] == pytest.approx(0.2)
    assert records[0]["speedup"] == pytest.approx(4.0) and records[1]["speedup"] == pytest.approx(1.0)


def test_machine_measurements_are_positive():
    cpu = torch.device("cpu")
    rates = bench.gemm_gflops(cpu, n=128, repeat=2)
    assert set(rates) == set(bench.gemm_products(cpu)) and all(r > 0 for r in rates.values())
    assert bench.matmul_gflops(cpu, n=128, repeat=2) > 0
    assert bench.copy_gbps(cpu, mbytes=4, repeat=2) > 0
    assert bench.peak_rss_mb() > 0
    assert bench.resolve_device("cpu") == cpu
    got, _ = bench.peak_allocated_bytes(lambda: torch.ones(1000).mul(2).sum())
    assert 4000 <= got < 1_000_000  # the 4,000-byte product, and not much else


def test_cuda_runs_are_reproducible_float32(torch_cuda_defaults, monkeypatch):
    """engine.reproducible: TF32 off for cuDNN and cuBLAS, torch's deterministic mode, cuBLAS's fixed
    workspace and cuDNN's heuristic mode B (read by torch on CUDA only); hetfl bench sets them before it
    measures on CUDA, not on the CPU."""
    from hetfl.engine.reproducible import reproducible_cuda

    def settings():
        return (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
                torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                os.environ.get("TORCH_CUDNN_USE_HEURISTIC_MODE_B"))

    seen = []

    def stop(*args):  # the first call after the device is resolved
        seen.append(settings())
        raise ValueError("stop here")

    monkeypatch.setattr(bench, "device_name", stop)
    assert bench.main(["--workloads", "logreg-synthetic", "--device", "cpu"]) == 2
    monkeypatch.setattr(bench, "resolve_device", lambda device: torch.device("cuda"))
    assert bench.main(["--workloads", "logreg-synthetic", "--device", "cuda"]) == 2
    # --tf32: TF32 products, the kernels deterministic all the same
    assert bench.main(["--workloads", "logreg-synthetic", "--device", "cuda", "--tf32"]) == 2
    assert seen == [(True, True, False, None, None), (False, False, True, ":4096:8", "1"),
                    (True, True, True, ":4096:8", "1")]
    assert reproducible_cuda() == {"cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": False,
                                   "deterministic_algorithms": True, "cudnn.benchmark": False,
                                   "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
                                   "TORCH_CUDNN_USE_HEURISTIC_MODE_B": "1"}
    assert reproducible_cuda(tf32=True)["cudnn.allow_tf32"] is True
    # a user's own choice stays: torch reads the variable once, so hetfl only fills it in
    monkeypatch.setenv("TORCH_CUDNN_USE_HEURISTIC_MODE_B", "0")
    assert reproducible_cuda()["TORCH_CUDNN_USE_HEURISTIC_MODE_B"] == "0"


@pytest.mark.parametrize("extra,message", [
    (["--device", "cpu"], "--tf32 (TF32 products on CUDA) was asked for, but the bench runs on cpu; "
                          "allowed: --tf32 with --device cuda"),
    (["--profile"], "--tf32 is given with --count-ops or --profile; allowed: --tf32 with the timed bench "
                    "only"),
    (["--count-ops"], "--tf32 is given with --count-ops or --profile")])
def test_tf32_is_refused_off_cuda_and_off_the_timed_bench(extra, message, capsys):
    assert bench.main(["--workloads", "logreg-synthetic", "--tf32", "--repeat", "1", *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device (scripts/gpu-check runs this on a GPU machine)")
def test_a_cuda_bench_records_peak_device_memory_allocated_and_reserved():
    """On CUDA each record carries the engine's peak device memory, allocated and reserved (the caching
    allocator's, which holds CUDA graphs' pools: the report's memory table of kept graphs)."""
    records, _ = bench.run_bench(["mlp-mnist"], steps=2, device="cuda", repeat=1, clients=4)
    for r in records:
        assert 0 < r["peak_device_mb"] <= r["peak_device_reserved_mb"], r


@pytest.mark.parametrize("flag,value,minimum", [
    ("--steps", "0", 1), ("--threads", "0", 1), ("--repeat", "0", 1), ("--clients", "0", 1),
    ("--batch", "0", 1), ("--ref-threads", "0", 1), ("--ref-clients", "-1", 0), ("--repeat", "two", 1)])
def test_counts_out_of_range_are_refused_naming_the_flag(flag, value, minimum, capsys):
    """A count of 0 timed nothing (--repeat 0: a table of NaN, exit 0) or fell back to the default unsaid
    (--steps 0, --clients 0, --threads 0); an audit found both. argparse refuses them before any work."""
    with pytest.raises(SystemExit) as stop:
        bench.main(["--workloads", "logreg-synthetic", flag, value])
    assert stop.value.code == 2
    assert (f"hetfl bench: error: argument {flag}: has value '{value}', which is not allowed; allowed: an "
            f"integer >= {minimum}") in capsys.readouterr().err


def test_a_round_on_cuda_has_at_least_64_clients():
    """On CUDA the batched rate grows with the round's clients (docs/engine.md, "On a GPU"), so a workload
    trains at least CUDA_CLIENTS there unless --clients says otherwise; on the CPU its own count."""
    vgg, mlp = bench.WORKLOADS["vgg11-cifar"], bench.WORKLOADS["mlp-mnist"]
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert bench.workload_clients(vgg, cpu) == 4 and bench.workload_clients(mlp, cpu) == 100
    assert bench.workload_clients(vgg, cuda) == bench.CUDA_CLIENTS == 64
    assert bench.workload_clients(mlp, cuda) == 100
    assert bench.workload_clients(vgg, cuda, clients=8) == 8 and bench.workload_clients(mlp, cpu, 3) == 3


def test_count_ops_counts_a_steps_operators_on_meta(capsys, monkeypatch):
    """--count-ops: the ATen operators of one batched step of K clients, on the meta device (no timing, no
    data). The logistic regression's fused step is its seven kernels; the LSTMs' fused cells take a
    fifth of the operators of the element-wise cell; views and allocations are not counted."""
    monkeypatch.setattr(bench, "run_workload", lambda *a, **k: pytest.fail("timed despite --count-ops"))
    logreg = bench.count_ops(bench.WORKLOADS["logreg-synthetic"], clients=3)
    assert logreg["aten_ops"] == dict.fromkeys(
        ["aten.baddbmm", "aten._softmax", "aten.full", "aten.scatter_add_", "aten.baddbmm_", "aten.sum",
         "aten.sub_"], 1)
    assert (logreg["clients"], logreg["batch"], logreg["aten_ops_per_step"]) == (3, 20, 7)
    char = bench.WORKLOADS["char-lstm-shakespeare"]
    ops, fused = (bench.count_ops(char, 8, model_params=p)["aten_ops_per_step"]
                  for p in ({"cell": "ops"}, {"cell": "fused"}))
    steps, layers = char.input_shape[0], 2
    assert fused <= 5 * steps * layers and 5 * fused < ops
    assert bench.count_ops(char)["clients"] == bench.CUDA_CLIENTS
    for k, v in bench.count_ops(bench.WORKLOADS["resnet20-cifar"], 2, 4)["aten_ops"].items():
        assert k not in bench.NO_KERNEL_OPS and v > 0
    assert bench.main(["--count-ops", "--workloads", "logreg-synthetic,mlp-mnist", "--json"]) == 0
    captured = capsys.readouterr()
    assert [r["workload"] for r in json.loads(captured.out)] == ["logreg-synthetic", "mlp-mnist"]
    assert "ATen ops per step" in captured.err
    assert bench.main(["--count-ops", "--workloads", "mlp-mnist", "--model-params", '{"cell": "fused"}']) == 2
    assert "model 'mlp' (workload mlp-mnist) does not take them" in capsys.readouterr().err
