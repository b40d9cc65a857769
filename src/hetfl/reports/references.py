"""Paper reference tables shipped with the package (``hetfl/reports/references/*.csv``)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["PRINT_RESOLUTION", "available_references", "load_reference", "package_file", "reading_only"]

#: the reference tables' folder, relative to the hetfl package (hetfl.fingerprint hashes them from there)
PACKAGE_DIR = "reports/references"

#: half the last digit each paper table prints its accuracies with (reports.verdicts.verdict's resolution):
#: Ruan et al.'s Table 3 one decimal ("-0.6", "33.8"), Ma et al.'s Table 2 and FedFOR's Tables 2-5 two
#: ("98.30", "39.85"). The transcriptions drop trailing zeros (98.30 is "98.3"), so the digit is the
#: table's, not read from the CSV. Tables of counts (Ruan's Tables 4-5, FedFOR's rounds to x %) are
#: exact: absent here, resolution 0.
PRINT_RESOLUTION = {"ruan2021_table3_accuracy_difference": 0.05, "ma2022_efl_table2_bmta": 0.005,
                    "tian2022_fedfor_table2_imbalanced_cifar10": 0.005,
                    "tian2022_fedfor_table3_domainnet": 0.005, "tian2022_fedfor_table4_digits": 0.005,
                    "tian2022_fedfor_table5_concept_shift": 0.005}


#: (who, the names it may read, where they are declared) while a reading_only block runs
_READABLE: ContextVar[tuple[str, tuple[str, ...], str] | None] = ContextVar("hetfl_readable_references",
                                                                            default=None)


def package_file(name: str) -> str:
    """The reference table ``<name>.csv``'s path relative to the hetfl package."""
    return f"{PACKAGE_DIR}/{name}.csv"


@contextlib.contextmanager
def reading_only(who: str, names: Iterable[str], declared: str) -> Iterator[None]:
    """Within the block, load_reference refuses any name but `names`: what `who` declared (in `declared`)
    it reads, and so what reruns it (a table's rule: hetfl.reports.tables.REFERENCES). A read it did not
    declare would be left stale by an edit of that file; refused, it says so instead."""
    token = _READABLE.set((who, tuple(names), declared))
    try:
        yield
    finally:
        _READABLE.reset(token)


def _references_dir() -> Traversable:
    return resources.files("hetfl.reports") / "references"


def available_references() -> list[str]:
    """Names (file stems) of all packaged reference tables, sorted."""
    return sorted(
        entry.name.removesuffix(".csv")
        for entry in _references_dir().iterdir()
        if entry.is_file() and entry.name.endswith(".csv")
    )


def load_reference(name: str) -> pd.DataFrame:
    """Load the packaged reference table ``<name>.csv`` as a DataFrame.

    Raises ``ValueError`` listing the available names when ``name`` is unknown.
    """
    available = available_references()
    if name not in available:
        raise ValueError(f"unknown reference table {name!r}; available: {', '.join(available)}")
    readable = _READABLE.get()
    if readable is not None and name not in readable[1]:
        who, names, declared = readable
        raise RuntimeError(f"{who} reads the reference table {name!r}, which {declared} does not give it (an "
                           f"edit of {package_file(name)} would not rebuild it); allowed: "
                           f"{', '.join(names) or 'none'}")
    import pandas as pd  # here: package_file's callers, Snakemake's start among them, need no pandas

    text = (_references_dir() / f"{name}.csv").read_text(encoding="utf-8")
    return pd.read_csv(io.StringIO(text))
