"""Paper reference tables shipped with the package (``hetfl/reports/references/*.csv``)."""

from __future__ import annotations

import io
from importlib import resources
from importlib.resources.abc import Traversable

import pandas as pd

__all__ = ["available_references", "load_reference"]


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
    text = (_references_dir() / f"{name}.csv").read_text(encoding="utf-8")
    return pd.read_csv(io.StringIO(text))
