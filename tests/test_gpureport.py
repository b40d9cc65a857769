"""python -m hetfl.gpureport: gpu-check's JSONs read back into one report, and the graphs rule proposed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetfl import bench, gpureport, graphprobe
from hetfl.engine.graphs import GRAPH_MIN_STEPS


def rec(workload: str, engine: str, rate: float, clients: int = 64, device: str = "cuda",
        steps: int = 3) -> dict:
    return {"workload": workload, "engine": engine, "client_steps_per_s": rate, "mode": "train",
            "clients": clients, "steps": steps, "model_params": {}, "fraction_of_matmul": 0.125,
            "device": device, "device_name": "NVIDIA H100"}


def pair(workload: str, batched: float, reference: float, **kw) -> list[dict]:
    return [rec(workload, "batched", batched, **kw), rec(workload, "reference", reference, **kw)]


def probe_rec(workload: str, min_steps: int | None, diff: float = 0.0, error: str | None = None) -> dict:
    r = {"workload": workload, "clients": 64, "eager_client_steps_per_s": 100.0,
         "graph_client_steps_per_s": 300.0, "speedup": 3.0, "max_abs_diff": diff, "capture_s": 0.25,
         "graph_min_steps": min_steps}
    return {**r, "error": error} if error else r


def write(directory: Path, name: str, records: list[dict]) -> None:
    (directory / name).write_text(json.dumps(records))


def table_row(text: str, *cells: str) -> str:
    """The one markdown row of `text` that holds every cell."""
    rows = [line for line in text.splitlines()
            if line.startswith("|") and all(f" {c} " in line for c in cells)]
    assert len(rows) == 1, (cells, rows)
    return rows[0]


@pytest.fixture()
def check_dir(tmp_path: Path) -> Path:
    """A gpu-check run's files, by hand: every part."""
    write(tmp_path, "gpu-bench.json", pair("resnet20-cifar", 750.0, 150.0) + pair("cnn-mnist", 1000.0, 40.0))
    write(tmp_path, "gpu-bench-nhwc.json", pair("cnn-mnist", 500.0, 40.0))
    write(tmp_path, "gpu-bench-instant.json", pair("resnet20-cifar", 600.0, 150.0))
    write(tmp_path, "gpu-bench-lstm-2.json", pair("char-lstm-shakespeare", 90.0, 120.0, clients=2))
    write(tmp_path, "gpu-bench-graphs.json", [
        probe_rec("resnet20-cifar", 9), probe_rec("vgg11-cifar", 3),
        probe_rec("char-lstm-shakespeare", 4, diff=0.5), probe_rec("sent-lstm-sent140", 7, diff=3e-7)])
    write(tmp_path, "gpu-bench-steps20.json", pair("resnet20-cifar", 100.0, 20.0)
          + pair("vgg11-cifar", 100.0, 20.0) + pair("char-lstm-shakespeare", 100.0, 20.0)
          + pair("sent-lstm-sent140", 100.0, 10.0))
    write(tmp_path, "gpu-bench-steps20-graphs.json", pair("resnet20-cifar", 200.0, 20.0)
          + pair("vgg11-cifar", 102.0, 20.0) + pair("char-lstm-shakespeare", 150.0, 20.0)
          + pair("sent-lstm-sent140", 110.0, 10.0))
    write(tmp_path, "gpu-bench-profile.json", [{
        "workload": "resnet20-cifar", "clients": 64, "batch": 32, "steps": 3, "round_ms": 250.0, "workers": 1,
        "kernels_per_round": 24344.0, "kernel_ms": 180.0,
        "ops": [{"op": "convolution_backward", "calls": 114.0, "share": 0.55}],
        "kernels": [{"kernel": "cudnn::wgrad", "launches": 7296.0, "share": 0.4}]}])
    write(tmp_path, "gpu-bench-profile-unfold.json", [{
        "workload": "resnet20-cifar", "model_params": {"conv": "unfold"}, "clients": 64, "batch": 32,
        "steps": 3, "round_ms": 300.0, "workers": 1, "kernels_per_round": 1000.0, "kernel_ms": 290.0,
        "ops": [{"op": "bmm", "calls": 100.0, "share": 0.7}], "kernels": []}])
    # as gpu-check writes them: kept graphs timed without the loop (--no-reference), which the report takes
    # from the same rounds without graphs
    write(tmp_path, "gpu-bench-steps20-kept.json", [rec("resnet20-cifar", "batched", 230.0),
                                                    rec("vgg11-cifar", "batched", 103.0)])
    write(tmp_path, "gpu-bench-fedfor-e1-kept.json", [rec("resnet20-cifar", "batched", 160.0, clients=10)])
    write(tmp_path, "gpu-bench-kept.json", [rec("resnet20-cifar", "batched", 1650.0)])
    write(tmp_path, "gpu-bench-fedfor-e1.json", pair("resnet20-cifar", 100.0, 25.0, clients=10))
    write(tmp_path, "gpu-bench-fedfor-e1-graphs.json", pair("resnet20-cifar", 80.0, 25.0, clients=10))
    return tmp_path


def test_report_reads_every_part_and_computes_the_ratios(check_dir: Path) -> None:
    text = gpureport.report(check_dir / "gpu-bench.json")
    assert "NVIDIA H100" in text
    # the bench against the loop, and the 10x target on CUDA
    assert " no " in table_row(text, "resnet20-cifar", "750", "150", "5.00")
    assert " yes " in table_row(text, "cnn-mnist", "1,000", "40", "25.00")
    # a variant against the default rows
    table_row(text, "channels_last true", "cnn-mnist", "500", "1,000", "0.50")
    # torch's default cuDNN heuristics against the engine's mode B (engine.reproducible)
    table_row(text, "cuDNN instant heuristics", "resnet20-cifar", "600", "750", "0.80")
    # small rounds: against their own loop
    table_row(text, "2", "char-lstm-shakespeare", "90", "120", "0.75")
    # where a round's time goes
    assert "24,344 kernels a round (8,115 a step)" in text
    assert "convolution_backward 55% (114 calls)" in text and "cudnn::wgrad 40% (7,296)" in text
    # how busy the GPU is in a round timed without the profiler: 64 clients x 3 steps at 750 steps/s
    assert "- resnet20-cifar: kernels run 70 % of a round (180.0 of 256.0 ms at the bench's rate), partly " \
           "launch-bound" in text
    # the unfold profile: no bench row of its model parameters here (part compare's unfold rows would be)
    assert "conv unfold:" in text and "1,000 kernels a round" in text
    assert text.count("kernels run") == 1
    # the probe, and the engine with graphs against without (and each against the loop)
    table_row(text, "resnet20-cifar", "64", "100", "300", "3.00", "0.250", "9")
    table_row(text, "20 steps per client", "resnet20-cifar", "100", "200", "2.00", "5.00", "10.00")
    table_row(text, "FedFOR E = 1 round", "resnet20-cifar", "100", "80", "160", "0.80", "1.60", "4.00",
              "3.20", "6.40")
    # the bench's own steps: part bench's rows, no graph per run (—), kept graphs
    table_row(text, "the bench's own steps", "resnet20-cifar", "750", "—", "1,650", "2.20", "5.00", "11.00")


def test_proposals_follow_the_measurements(check_dir: Path) -> None:
    text = gpureport.report(check_dir / "gpu-bench.json", min_gain=1.05)
    proposed = text.split("## Proposed")[1]
    # ResNet-20 gains 2x and sent-LSTM 1.1x: their classes get the attribute
    assert "set `cuda_graphs = True` on `hetfl.models.zoo.ResNet20`" in proposed
    # the engine's model, not its torch.nn twin
    assert "set `cuda_graphs = True` on `hetfl.models.zoo.TextLSTM`" not in proposed
    sent = gpureport.model_class("sent-lstm-sent140")
    # the sent-LSTM's class sets it already (the H100's measurement): kept, not set again
    assert f"- keep `cuda_graphs = True` on `{sent}`, which sets it now (sent-lstm-sent140: " in proposed
    assert f"set `cuda_graphs = True` on `{sent}`" not in proposed.replace("keep `cuda", "")
    # VGG-11's 1.02x is below the gain asked for
    assert "keep vgg11-cifar eager: graphs 1.02×" in proposed
    # the char-LSTM gains 1.5x, but its replay did not end where its eager steps end: flagged, not proposed
    assert "**char-lstm-shakespeare: a replay did not end where the eager steps end**" in proposed
    char = gpureport.model_class("char-lstm-shakespeare")
    assert f"set `cuda_graphs = True` on `{char}`" not in proposed
    # ... and its class sets the attribute now: the report says to unset it
    assert f"before that is understood; unset `cuda_graphs` on `{char}`, which sets it now" in proposed
    # within the tolerance but not bitwise: said, and still proposed
    assert "sent-lstm-sent140: a replay ends within 3e-07 of the eager steps, not bitwise" in proposed
    # GRAPH_MIN_STEPS: the largest of the winners' (9 and 7), not of the flagged char-LSTM's or VGG-11's
    assert f"GRAPH_MIN_STEPS = 9 (now {GRAPH_MIN_STEPS})" in proposed
    assert "(9, 7)" in proposed
    # FedFOR's E = 1 round loses with per-round captures
    assert "graphs 0.80× without, per-round captures lose at E = 1 (graphs kept across rounds: the kept " \
           "column)" in proposed
    assert "keep char-lstm-shakespeare eager" not in proposed  # flagged, not judged on its speed
    # kept graphs: 2x per-run graphs in FedFOR's round (ResNet-20 160 against 80), 1.15x at 20 steps; VGG-11
    # 1.01x is no gain; at the bench's own steps ResNet-20 kept 2.2x without, 11x the loop
    assert "- resnet20-cifar, FedFOR E = 1 round: graphs kept across rounds 2.00× graphs captured per run " \
           "(6.4× the loop)" in proposed
    assert "- resnet20-cifar, 20 steps per client: graphs kept across rounds 1.15×" in proposed
    assert "vgg11-cifar, 20 steps per client: graphs kept" not in proposed
    assert "- resnet20-cifar at the bench's own steps with kept graphs: 2.20× without, 11.0× the loop " \
           "(meets 10×)" in proposed
    # a higher bar drops the sent-LSTM
    stricter = gpureport.report(check_dir / "gpu-bench.json", min_gain=1.5).split("## Proposed")[1]
    assert f"keep `cuda_graphs = True` on `{sent}`" not in stricter and "GRAPH_MIN_STEPS = 9" in stricter
    assert f"- unset `cuda_graphs` on `{sent}`, which sets it now: sent-lstm-sent140 with graphs 1.10× " \
           "(below 1.5×)" in stricter
    assert "(9)" in stricter


def test_proposals_read_the_rule_as_it_is(check_dir: Path, monkeypatch) -> None:
    """A model whose class sets `cuda_graphs` and loses is to be unset, not kept eager; a
    GRAPH_MIN_STEPS the measurements confirm is said to stand."""
    vgg = type(gpureport.workload_model(gpureport.WORKLOADS["vgg11-cifar"]))
    monkeypatch.setattr(vgg, "cuda_graphs", True, raising=False)
    monkeypatch.setattr(gpureport, "GRAPH_MIN_STEPS", 9)
    proposed = gpureport.report(check_dir / "gpu-bench.json", min_gain=1.05).split("## Proposed")[1]
    assert f"- unset `cuda_graphs` on `{gpureport.model_class('vgg11-cifar')}`, which sets it now: " \
           "vgg11-cifar with graphs 1.02× (below 1.05×)" in proposed
    assert "keep vgg11-cifar eager" not in proposed
    assert "GRAPH_MIN_STEPS = 9 (as now)" in proposed


def test_missing_parts_are_skipped_and_no_files_is_an_error(check_dir: Path, tmp_path_factory,
                                                            capsys) -> None:
    for name in ["gpu-bench-graphs.json", "gpu-bench-steps20.json", "gpu-bench-fedfor-e1.json",
                 "gpu-bench-kept.json"]:
        (check_dir / name).unlink()
    text = gpureport.report(check_dir / "gpu-bench.json")
    assert "## The bench" in text and "## The comparisons" in text
    assert "graph probe" not in text and "## Proposed" not in text
    empty = tmp_path_factory.mktemp("empty")
    assert gpureport.main([str(empty / "gpu-bench.json")]) == 2
    err = capsys.readouterr().err
    assert str(empty / "gpu-bench.json") in err and "GPU_BENCH_JSON" in err
    assert gpureport.main([str(check_dir / "gpu-bench.json"), "--markdown", str(empty / "r.md")]) == 0
    assert (empty / "r.md").read_text() == capsys.readouterr().out.rstrip("\n") + "\n"


def test_min_gain_must_be_positive(check_dir: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        gpureport.main([str(check_dir / "gpu-bench.json"), "--min-gain", "0"])
    assert "--min-gain: 0.0 is not allowed" in capsys.readouterr().err


def test_a_file_that_is_not_a_list_of_records_is_refused(check_dir: Path, capsys) -> None:
    (check_dir / "gpu-bench-nhwc.json").write_text('{"workload": "cnn-mnist"}')
    assert gpureport.main([str(check_dir / "gpu-bench.json")]) == 2
    assert "gpu-bench-nhwc.json: expected a JSON list of records, got dict" in capsys.readouterr().err


def test_report_of_real_bench_and_probe_files(tmp_path: Path) -> None:
    """The files `hetfl bench` and the probe write (here on the CPU) are what the report reads."""
    main = tmp_path / "gpu-bench.json"
    common = ["--workloads", "logreg-synthetic", "--repeat", "1", "--threads", "1"]
    assert bench.main([*common, "--steps", "2", "--json", str(main)]) == 0
    for graphs, suffix in [("--no-graphs", "steps20"), ("--graphs", "steps20-graphs")]:
        out = str(tmp_path / f"gpu-bench-{suffix}.json")
        assert bench.main([*common, "--steps", "6", graphs, "--json", out]) == 0
    assert bench.main([*common, "--steps", "2", "--graphs", "--keep-graphs", "--json",
                       str(tmp_path / "gpu-bench-kept.json")]) == 0
    assert graphprobe.main(["--workloads", "logreg-synthetic", "--steps", "2", "--repeat", "1",
                            "--json", str(tmp_path / "gpu-bench-graphs.json")]) == 0
    rate = {}
    for s in ["", "-steps20", "-steps20-graphs"]:
        records = json.loads((tmp_path / f"gpu-bench{s}.json").read_text())
        rate[s] = next(r["client_steps_per_s"] for r in records if r["engine"] == "batched")
    text = gpureport.report(main, min_gain=1e-9)  # any gain: the CPU's "graphs" are the eager steps
    assert "`hetfl bench --device cpu`" in text and "≥ 10×" not in text  # the CUDA target only on CUDA
    table_row(text, "20 steps per client", "logreg-synthetic", f"{rate['-steps20']:,.0f}",
              f"{rate['-steps20-graphs']:,.0f}", f"{rate['-steps20-graphs'] / rate['-steps20']:.2f}")
    assert "keep `cuda_graphs = True` on `hetfl.models.logreg.LogReg`, which sets it now" in text
    # kept graphs at the bench's own steps: said, without the CUDA target on the CPU
    line = next(x for x in text.splitlines() if "at the bench's own steps with kept graphs" in x)
    # no target verdict, "(meets 10×)" or "(misses 10×)"; "10×" alone also matched a measured 1.10×
    assert line.endswith("the loop") and "meets" not in line and "misses" not in line


PYTEST_LOG = """\
........F.......s.....                                                   [100%]
=================================== FAILURES ===================================
_____________________ test_one_round_equals_loop[cuda-cnn] _____________________
E   AssertionError: 3.6e-03 > 1e-04
=============================== warnings summary ===============================
tests/test_resume.py::test_a_run_with_graphs_is_reproducible_and_equals_the_eager_run[cuda]
  /w/tests/test_resume.py:286: UserWarning: graphs on cuda: metrics within float32 rounding of the eager \
run, not bitwise (largest difference 2.4e-07)
    warnings.warn(f"graphs on {device}: metrics within float32 rounding of the eager run, not bitwise "
=========================== short test summary info ============================
FAILED tests/test_models.py::test_one_round_equals_loop[cuda-cnn] - AssertionError: 3.6e-03 > 1e-04
1 failed, 20 passed, 1 skipped, 1 warning in 81.23s (0:01:21)
"""


def test_report_summarises_the_pytest_logs(check_dir: Path) -> None:
    (check_dir / "gpu-bench-graph-tests.log").write_text(PYTEST_LOG)
    (check_dir / "gpu-bench-tests.log").write_text("....\n271 passed, 1 skipped in 80.00s (0:01:20)\n")
    text = gpureport.report(check_dir / "gpu-bench.json")
    tests = text.split("## Tests")[1].split("\n## ")[0]
    assert "the tests with a CUDA case: **271 passed, 1 skipped in 80.00s (0:01:20)**" in tests
    assert "the CUDA-graph tests: **1 failed, 20 passed, 1 skipped, 1 warning in 81.23s (0:01:21)**" in tests
    assert "- FAILED tests/test_models.py::test_one_round_equals_loop[cuda-cnn] - AssertionError" in tests
    assert "UserWarning: graphs on cuda: metrics within float32 rounding of the eager run, not bitwise " \
           "(largest difference 2.4e-07)" in tests
    # the failure and the finding; nothing else of the log
    assert sum(line.startswith("- ") for line in tests.splitlines()) == 2
    # last, after the proposals: the end of a cut output keeps it
    assert text.rindex("## Tests") > text.index("## Proposed") and text.endswith(tests.rstrip("\n") + "\n")
    # a log cut short says so; and the logs alone make a report
    (check_dir / "gpu-bench-tests.log").write_text("....\n")
    for f in check_dir.glob("*.json"):
        f.unlink()
    text = gpureport.report(check_dir / "gpu-bench.json")
    assert "the tests with a CUDA case: **no pytest summary line (cut short?)**" in text
    assert "## The bench" not in text


def test_report_shows_the_graphs_peak_device_memory_where_recorded(check_dir: Path) -> None:
    """Kept graphs hold their pools across rounds: the batched engine's peak reserved memory per mode, a
    table of its own under the graphs table, only where the bench recorded it (CUDA)."""
    assert "peak device memory" not in gpureport.report(check_dir / "gpu-bench.json")
    for name, mb in (("gpu-bench-steps20.json", 1000.0), ("gpu-bench-steps20-graphs.json", 1500.0),
                     ("gpu-bench-steps20-kept.json", 2500.0)):
        records = gpureport.load(check_dir / name)
        for r in records:
            if r["engine"] == "batched" and r["workload"] == "resnet20-cifar":
                r["peak_device_reserved_mb"] = mb
        write(check_dir, name, records)
    text = gpureport.report(check_dir / "gpu-bench.json")
    memory = text.split("peak device memory")[1].split("\n## ")[0]
    table_row(memory, "20 steps per client", "resnet20-cifar", "1,000", "1,500", "2,500")
    assert "vgg11-cifar" not in memory  # none recorded


def test_report_sets_tf32_against_the_ieee_rows(check_dir: Path) -> None:
    """Part tf32: each engine's TF32 rate ÷ its IEEE rate (the default rows), the TF32 engine against the
    TF32 loop, and the 10x target; absent without the file."""
    assert "## TF32" not in gpureport.report(check_dir / "gpu-bench.json")
    write(check_dir, "gpu-bench-tf32.json",
          pair("resnet20-cifar", 2250.0, 200.0) + pair("vgg11-cifar", 90.0, 9.0))
    text = gpureport.report(check_dir / "gpu-bench.json")
    section = text.split("## TF32")[1].split("\n## ")[0]
    # 2,250 / 750 = 3.00 the engine's gain, 200 / 150 = 1.33 the loop's, 11.25x the TF32 loop, 5x in IEEE
    assert " yes " in table_row(section, "resnet20-cifar", "2,250", "200", "3.00", "1.33", "11.25", "5.00")
    # no IEEE row for VGG-11 in this bench: its ratios to IEEE are not measured
    assert " yes " in table_row(section, "vgg11-cifar", "90", "9", "—", "10.00")
    assert text.index("## The comparisons") < text.index("## TF32") < text.index("## The CUDA graph probe")


def test_report_lists_the_steps_and_what_the_deadline_cut(check_dir: Path, capsys) -> None:
    steps = check_dir / "gpu-bench-steps.tsv"
    steps.write_text("tests\t0\t96\nbench\t1\t80\ngraphs\t124\t40\nkept\tskipped\t0\n")
    (check_dir / "gpu-bench-tests.log").write_text("....\n271 passed in 80.00s (0:01:20)\n")
    text = gpureport.report(check_dir / "gpu-bench.json")
    section = text.split("## Steps")[1].split("\n## ")[0]
    assert "4 steps in 216 s: 1 failed, 2 cut by the deadline" in section
    assert " ok " in table_row(section, "tests", "96")
    assert "FAILED (exit 1)" in table_row(section, "bench", "80")
    assert "stopped at GPU_CHECK_DEADLINE" in table_row(section, "graphs", "40")
    assert "skipped: past GPU_CHECK_DEADLINE" in table_row(section, "kept", "0")
    # before the tests, which stay last
    assert text.index("## Proposed") < text.index("## Steps") < text.index("## Tests")
    # the steps alone make a report
    for f in check_dir.glob("*.json"):
        f.unlink()
    assert "## Steps" in gpureport.report(check_dir / "gpu-bench.json")
    steps.write_text("tests\t0\t96\nbench 1 80\n")
    assert gpureport.main([str(check_dir / "gpu-bench.json")]) == 2
    assert "gpu-bench-steps.tsv, line 2: 'bench 1 80' is not" in capsys.readouterr().err


def test_busy_share_times_the_round_by_the_matching_bench_row() -> None:
    profile = {"workload": "resnet20-cifar", "clients": 64, "steps": 3, "kernel_ms": 96.0,
               "model_params": {"conv": "unfold"}}
    default = rec("resnet20-cifar", "batched", 750.0)
    unfold = {**rec("resnet20-cifar", "batched", 600.0), "model_params": {"conv": "unfold"}}
    assert gpureport.busy_share(profile, [default]) is None  # other model parameters: another round
    assert gpureport.busy_share(profile, [default, unfold]) == pytest.approx((0.3, 320.0))
    assert gpureport.busy_share({**profile, "steps": 20}, [default, unfold]) is None
    on_cpu = {k: v for k, v in profile.items() if k != "kernel_ms"}
    assert gpureport.busy_share(on_cpu, [unfold]) is None
    text = gpureport.profile_section({"conv unfold": [{**profile, "batch": 32, "round_ms": 400.0, "ops": [],
                                                       "kernels_per_round": 900.0}]}, [unfold])
    assert "kernels run 30 % of a round (96.0 of 320.0 ms at the bench's rate), mostly idle between " \
           "kernels: launch-bound" in text


def test_report_sets_paper_cells_beside_the_time_model(check_dir: Path) -> None:
    """Part cell: each timed run's seconds beside the cluster model's, with their ratio, from both files;
    absent without them."""
    assert "## Paper cells" not in gpureport.report(check_dir / "gpu-bench.json")
    cell = {"model": "resnet20", "rounds": 20, "split_s": 4.2, "train_s": 12.5, "modelled_s": 50.0,
            "modelled_over_measured": 4.0}
    write(check_dir, "gpu-bench-cell-fedfor.json", [{"experiment": "fedfor", "run": "E1_s0", **cell,
                                                     "warmup_s": 3.5}])
    efl = {**cell, "model": "vgg11", "rounds": 3, "train_s": 40.0, "modelled_over_measured": 1.25}
    write(check_dir, "gpu-bench-cell-efl.json", [{"experiment": "efl", "run": "IID_s0", **efl}])
    text = gpureport.report(check_dir / "gpu-bench.json")
    section = text.split("## Paper cells")[1].split("\n## ")[0]
    assert table_row(section, "fedfor", "E1_s0", "resnet20", "20", "4.2", "3.5", "12.5", "50.0", "4.00")
    # a record from before the warm-up round was timed
    assert table_row(section, "efl", "IID_s0", "vgg11", "3", "4.2", "—", "40.0", "50.0", "1.25")
    assert text.index("## Paper cells") < text.index("## The CUDA graph probe")
