"""Canonical output paths; the Snakemake rules write the same patterns with wildcards."""

from __future__ import annotations

from pathlib import Path

from hetfl.config import RunSpec


def split_dir(spec: RunSpec, root: str | Path = "data_splits") -> Path:
    """The run's split directory, data_splits/<split key> as the workflow writes it: a reading that changes
    the data (iid: false) has a split of its own, <setting>__<reading>, beside the setting's."""
    return Path(root) / spec.split_key


def trace_file(spec: RunSpec, root: str | Path = "data_splits") -> Path:
    """The run's trace file (appended, not with_suffix: a key such as ..._pi0.02 has a dot of its own)."""
    return Path(root) / "traces" / f"{spec.trace_key}.npz"


def run_dir(spec: RunSpec, root: str | Path = "results") -> Path:
    return Path(root) / spec.experiment / spec.run
