"""The suite's own order (tests/conftest.py): under `make test`'s `--dist loadfile --no-loadscope-reorder`
the files that run Snakemake start first, so that the many short files fill in behind them."""

from pathlib import Path
from types import SimpleNamespace

from conftest import SAME_UNIT, FileUnits, pytest_collection_modifyitems, pytest_xdist_make_scheduler

ROOT = Path(__file__).resolve().parents[1]


def _item(path: str, name: str, slow: bool):
    return SimpleNamespace(path=Path(path), name=name, get_closest_marker=lambda m: object() if slow and
                           m == "slow" else None)


def test_files_with_a_slow_test_come_first_each_in_its_own_order():
    items = [_item("a.py", "a1", False), _item("b.py", "b1", False), _item("b.py", "b2", True),
             _item("c.py", "c1", False), _item("d.py", "d1", True), _item("d.py", "d2", False)]
    pytest_collection_modifyitems(None, items)
    assert [i.name for i in items] == ["b1", "b2", "d1", "d2", "a1", "c1"]


def test_make_test_keeps_that_order():
    """xdist's default reorder (files with the most tests first) would undo it."""
    makefile = (ROOT / "Makefile").read_text()
    test_rule = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "--dist loadfile" in test_rule and "--no-loadscope-reorder" in test_rule


def test_the_files_that_share_a_session_fixture_are_one_unit():
    """Under --dist loadfile a unit of work is a file, but for SAME_UNIT: test_report.py goes with
    test_workflow.py, whose workflow_dir it reads, so that the tiny workflow runs once."""
    def config(dist: str) -> SimpleNamespace:  # what the scheduler reads: two workers, as make test has
        return SimpleNamespace(getvalue={"dist": dist, "tx": ["2*popen"]}.get)

    units = pytest_xdist_make_scheduler(config("loadfile"), None)
    assert isinstance(units, FileUnits) and units.numnodes == 2
    assert units._split_scope("tests/test_report.py::test_x[1]") == "tests/test_workflow.py"
    assert units._split_scope("tests/test_workflow.py::test_y") == "tests/test_workflow.py"
    assert units._split_scope("tests/test_sizes.py::test_z") == "tests/test_sizes.py"
    assert all((ROOT / path).is_file() for pair in SAME_UNIT.items() for path in pair)
    assert pytest_xdist_make_scheduler(config("load"), None) is None  # xdist's own then
