"""scripts/gpu-check's plumbing on the CPU, through a fake interpreter: which steps run, in which order,
what a failing step or GPU_CHECK_DEADLINE does, and that GPU_CHECK_TAR holds every file after each step
(a lease can end mid-call). The real commands run on a GPU machine (docs/engine.md, "On a GPU")."""

from __future__ import annotations

import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-check"

#: says CUDA is there; logs each command; writes the --json and --markdown files; sleeps $FAKE_SLEEP in a
#: bench; exits 3 when its command line holds $FAKE_FAIL; ignores SIGTERM with $FAKE_IGNORE_TERM
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "$1" = - ]; then cat >/dev/null; echo "fake CUDA"; exit 0; fi
echo "$*" >>"$FAKE_LOG"
args=("$@") json= md=
for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in --json) json=${args[i+1]} ;; --markdown) md=${args[i+1]} ;; esac
done
[[ -n ${FAKE_FAIL:-} && "$*" == *"$FAKE_FAIL"* ]] && exit 3
[ -n "${FAKE_IGNORE_TERM:-}" ] && trap '' TERM
case $2 in
    pytest) echo "3 passed in 0.10s" ;;
    hetfl.gpureport) echo "fake report"; echo "fake report" >"$md" ;;
    *) sleep "${FAKE_SLEEP:-0}"; echo "[]" >"$json" ;;
esac
"""

JSONS = ["", "-profile", "-profile-unfold", "-nhwc", "-grouped", "-unfold", "-instant", "-lstm-ops",
         "-lstm-2", "-lstm-3", "-lstm-4", "-tf32", "-cell-fedfor", "-cell-efl", "-cell-text", "-graphs",
         "-kept", "-steps20", "-fedfor-e1", "-steps20-graphs", "-fedfor-e1-graphs", "-steps20-kept",
         "-fedfor-e1-kept"]
#: every step of the six parts, in the order run
STEPS = ["tests", "bench", "profile", "profile-unfold", "nhwc", "grouped", "unfold", "instant",
         "lstm-ops", "lstm-2", "lstm-3", "lstm-4", "tf32", "cell-fedfor", "cell-efl", "cell-text",
         "graph-tests", "graphs", "kept", "steps20", "fedfor-e1", "steps20-graphs", "fedfor-e1-graphs",
         "steps20-kept", "fedfor-e1-kept"]


@pytest.fixture()
def fake(tmp_path: Path) -> dict[str, str]:
    py = tmp_path / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    return {**os.environ, "PYTHON": str(py), "FAKE_LOG": str(tmp_path / "commands.log"),
            "GPU_BENCH_JSON": str(tmp_path / "j" / "gpu-bench.json"),
            "GPU_CHECK_TAR": str(tmp_path / "out" / "j.tar")}


def check(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], env={**env, **extra}, capture_output=True, text=True,
                          timeout=60)


def steps(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["GPU_BENCH_JSON"]).with_name("gpu-bench-steps.tsv")
    return [line.split("\t") for line in path.read_text().splitlines()]


def packed(env: dict[str, str]) -> set[str]:
    with tarfile.open(env["GPU_CHECK_TAR"]) as tar:
        return set(tar.getnames())


def test_every_part_runs_its_steps_and_the_tar_holds_every_file(fake: dict[str, str]) -> None:
    done = check(fake, "--repeat", "3")
    assert done.returncode == 0, done.stderr
    assert [s[0] for s in steps(fake)] == STEPS and all(s[1] == "0" for s in steps(fake))
    expected = {f"gpu-bench{s}.json" for s in JSONS} | {
        "gpu-bench-tests.log", "gpu-bench-graph-tests.log", "gpu-bench-steps.tsv", "gpu-bench-report.md"}
    assert packed(fake) == expected
    assert not list(Path(fake["GPU_CHECK_TAR"]).parent.glob("*.part"))
    benches = [c for c in Path(fake["FAKE_LOG"]).read_text().splitlines() if "hetfl.bench" in c]
    # the script's own options reach every bench (every JSON but the probe's and the cells'), after the step's
    assert len(benches) == len(JSONS) - 4 and all(c.endswith("--repeat 3") for c in benches)
    assert done.stdout.rstrip().endswith("fake report")


def test_parts_run_in_the_scripts_order_whatever_the_order_named(fake: dict[str, str]) -> None:
    done = check(fake, GPU_CHECK_PARTS="graphs tf32 tests")
    assert done.returncode == 0, done.stderr
    assert [s[0] for s in steps(fake)] == ["tests", "tf32", *STEPS[STEPS.index("graph-tests"):]]
    assert "--tf32" in Path(fake["FAKE_LOG"]).read_text()


@pytest.mark.parametrize(("failing", "step"),
                         [("-k cuda and not graph", "tests"), ("-grouped.json", "grouped")])
def test_a_failing_step_is_reported_and_the_check_goes_on(fake: dict[str, str], failing: str,
                                                          step: str) -> None:
    done = check(fake, FAKE_FAIL=failing)
    assert done.returncode == 1
    assert f"gpu-check: {step} FAILED (exit 3)" in done.stdout
    assert [s[:2] for s in steps(fake) if s[1] != "0"] == [[step, "3"]]
    # every later step ran, and the report was written
    assert [s[0] for s in steps(fake)] == STEPS and "gpu-bench-report.md" in packed(fake)


def test_the_deadline_stops_a_step_skips_the_rest_and_still_reports(fake: dict[str, str]) -> None:
    start = time.monotonic()
    done = check(fake, GPU_CHECK_PARTS="bench compare", GPU_CHECK_DEADLINE="2", FAKE_SLEEP="30")
    assert time.monotonic() - start < 20
    assert done.returncode == 1
    assert steps(fake)[0][:2] == ["bench", "124"]
    assert "gpu-check: bench FAILED (exit 124, stopped at GPU_CHECK_DEADLINE)" in done.stdout
    assert steps(fake)[1:] == [[s, "skipped", "0"] for s in STEPS[2:12]]
    assert "past GPU_CHECK_DEADLINE (2 s): lstm-4 skipped" in done.stdout
    assert {"gpu-bench-report.md", "gpu-bench-steps.tsv"} <= packed(fake)


def test_a_step_deaf_to_the_deadlines_term_is_killed_and_counted_as_stopped(fake: dict[str, str]) -> None:
    """timeout's KILL, 10 s after a TERM the step ignored (a hung CUDA call): still the deadline's stop."""
    start = time.monotonic()
    done = check(fake, GPU_CHECK_PARTS="bench", GPU_CHECK_DEADLINE="1", FAKE_SLEEP="60", FAKE_IGNORE_TERM="1")
    assert 10 < time.monotonic() - start < 40
    assert steps(fake)[0][:2] == ["bench", "124"] and steps(fake)[1][1] == "skipped"
    assert "gpu-check: bench FAILED (exit 124, stopped at GPU_CHECK_DEADLINE)" in done.stdout


def test_the_deadline_counts_from_the_start_not_from_the_wall_clocks_last_whole_second(
        fake: dict[str, str]) -> None:
    """Started 20 ms before a whole second, a 1 s deadline still leaves the first step most of its second.

    Bash's SECONDS counts whole seconds of the wall clock since the shell started, so it reads 1 a few
    milliseconds after a start just before a second's end: the step was skipped as past a deadline it was
    nowhere near (the CI failure of the test above, at 429c775: the check took 38 ms)."""
    for _ in range(3):
        time.sleep((0.98 - time.time() % 1) % 1)
        done = check(fake, GPU_CHECK_PARTS="bench", GPU_CHECK_DEADLINE="1")
        assert steps(fake)[0][:2] == ["bench", "0"], done.stdout
        Path(fake["GPU_BENCH_JSON"]).with_name("gpu-bench-steps.tsv").unlink()


def test_a_check_killed_mid_step_leaves_the_tar_of_the_steps_before(fake: dict[str, str]) -> None:
    proc = subprocess.Popen([str(SCRIPT)], env={**fake, "GPU_CHECK_PARTS": "tests bench", "FAKE_SLEEP": "30"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    tar = Path(fake["GPU_CHECK_TAR"])
    try:
        for _ in range(200):
            if tar.exists():
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert packed(fake) == {"gpu-bench-tests.log", "gpu-bench-steps.tsv"}


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("GPU_CHECK_PARTS", "tests bogus", "allowed: tests, bench, compare, tf32, cell, graphs"),
    ("GPU_CHECK_DEADLINE", "5m", "allowed: whole seconds above 0"),
    ("GPU_CHECK_DEADLINE", "0", "allowed: whole seconds above 0"),
])
def test_bad_settings_are_refused_before_any_step(fake: dict[str, str], key: str, value: str,
                                                  allowed: str) -> None:
    done = check(fake, **{key: value})
    assert done.returncode == 2
    assert key in done.stderr and f"'{value.split()[-1]}'" in done.stderr and allowed in done.stderr
    assert not Path(fake["FAKE_LOG"]).exists() and not Path(fake["GPU_CHECK_TAR"]).exists()


def test_the_steps20_benches_run_every_workload(fake: dict[str, str]) -> None:
    """The graphs rule is per model: part graphs' rounds of 20 steps per client time every workload (no
    --workloads), the three ways, where the bench's own steps with kept graphs stay the slow ones'."""
    done = check(fake, GPU_CHECK_PARTS="graphs")
    assert done.returncode == 0, done.stderr
    commands = Path(fake["FAKE_LOG"]).read_text().splitlines()
    steps20 = [c for c in commands if "-steps20" in c]
    assert len(steps20) == 3 and not any("--workloads" in c for c in steps20)
    assert [c for c in commands if c.endswith("-kept.json") or "-kept.json " in c
            if "-steps20" not in c and "fedfor" not in c][0].count("--workloads vgg11-cifar,") == 1


def test_fedfor_e1_rounds_time_table_2s_batch_norm_resnet(fake: dict[str, str]) -> None:
    """FedFOR Table 2 trains He et al.'s ResNet-20 with batch norm (norm: batch): part graphs' E = 1
    rounds time that model, the three ways."""
    assert check(fake, GPU_CHECK_PARTS="graphs").returncode == 0
    fedfor = [c for c in Path(fake["FAKE_LOG"]).read_text().splitlines() if "-fedfor-e1" in c]
    assert len(fedfor) == 3 and all('--model-params {"norm": "batch"}' in c for c in fedfor)


def test_the_cell_part_times_paper_configs_that_exist_on_cuda(fake: dict[str, str]) -> None:
    """Part cell: python -m hetfl.gpucell on FedFOR's and EFL's CIFAR configs, on CUDA, without the bench's
    options (gpucell takes none of them)."""
    assert check(fake, "--repeat", "3", GPU_CHECK_PARTS="cell").returncode == 0
    cells = [c.split() for c in Path(fake["FAKE_LOG"]).read_text().splitlines() if "hetfl.gpureport" not in c]
    assert [c[1] for c in cells] == ["hetfl.gpucell"] * 3 and all("--repeat" not in c for c in cells)
    for command in cells:
        assert (ROOT / command[2]).is_file() and command[command.index("--device") + 1] == "cuda"
    assert [s[0] for s in steps(fake)] == ["cell-fedfor", "cell-efl", "cell-text"]
