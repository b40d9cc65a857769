"""The Python scripts the docs tell a researcher to run (scripts/*.py): each imports and runs on a tiny
case, so a moved function fails here and not in a reader's hands (docs/aggregation.md,
docs/algorithms.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from hetfl.engine import comm

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the scripts run only under __main__
    return module


@pytest.mark.parametrize("path", sorted(SCRIPTS.glob("*.py")), ids=lambda p: p.name)
def test_every_script_imports_without_running(path: Path, capsys) -> None:
    load(path.stem)
    assert capsys.readouterr().out == ""


def test_compare_synthetic_iid_prints_a_line_per_seed_and_traceset(capsys) -> None:
    load("compare_synthetic_iid").main(["iid", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6  # seeds 0 and 1, |T| = 2, 5, 8
    assert all(line.startswith("iid 2 ") and "B vs A" in line and "C vs B" in line for line in lines)


def test_entropy_bins_prints_both_binnings_and_restores_the_measure(capsys) -> None:
    before = comm.entropy_bits
    load("entropy_bins").main(["2"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 10  # two tasks, five algorithms
    assert all("floor" in line and "centred" in line for line in lines)
    assert comm.entropy_bits is before


def test_table3_variants_prints_both_metrics_per_traceset(capsys) -> None:
    load("table3_variants").main(["--setting", "IID00", "--T", "1,2", "--seeds", "0,1", "--rounds", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("IID00 |T|=1 ") and lines[1].startswith("IID00 |T|=2 ")
    for line in lines:
        for name in ("pooled B vs A", "pooled C vs B", "per-device B vs A", "per-device C vs B"):
            assert name in line
    assert "pooled B vs A 0.0 [0.0, 0.0]" in lines[0]  # |T| = 1: every device complete, the schemes agree
