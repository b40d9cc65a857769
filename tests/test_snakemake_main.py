"""hetfl.snakemake_main: Snakemake's run and exit status, without waiting for its scheduler's timers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hetfl.snakemake_main import exit_status

SNAKEFILE = """rule all:
    input: "b"
rule a:
    output: "a"
    shell: "echo a > a"
rule b:
    input: "a"
    output: "b"
    shell: "{cmd}"
"""


def _run(tmp_path, cmd: str) -> subprocess.CompletedProcess:
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(cmd=cmd))
    # a one-hour timespan: every scheduler pass leaves a one-hour timer behind, which `python -m snakemake`
    # waits for before it exits; hetfl.snakemake_main must not (the timeout only catches a hang)
    return subprocess.run([sys.executable, "-m", "hetfl.snakemake_main", "--cores", "1", "--directory",
                           str(tmp_path), "-s", str(tmp_path / "Snakefile"), "--max-jobs-per-timespan",
                           "10000/1h"], capture_output=True, text=True, timeout=300)


def test_a_run_ends_with_snakemakes_status_not_its_last_timer(tmp_path):
    ok = _run(tmp_path, "cat a > b")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (tmp_path / "b").read_text() == "a\n" and "2 of 3 steps (67%) done" in ok.stderr
    locks = tmp_path / ".snakemake" / "locks"
    assert not (locks.is_dir() and any(locks.iterdir()))  # released before the end
    (tmp_path / "b").unlink()
    failed = _run(tmp_path, "exit 3")
    assert failed.returncode == 1 and "Error in rule b" in failed.stderr


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (2, 2), ("hetfl: bad config", 1)])
def test_exit_status_is_what_sys_exit_gives(code, status, capsys):
    assert exit_status(code) == status
    assert capsys.readouterr().err == ("hetfl: bad config\n" if isinstance(code, str) else "")
