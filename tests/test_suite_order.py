"""The suite's own order (tests/conftest.py): under `make test`'s `--dist loadfile --no-loadscope-reorder`
the files that run Snakemake start first, so that the many short files fill in behind them."""

from pathlib import Path
from types import SimpleNamespace

from conftest import pytest_collection_modifyitems


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
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    test_rule = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "--dist loadfile" in test_rule and "--no-loadscope-reorder" in test_rule
