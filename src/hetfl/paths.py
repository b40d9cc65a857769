"""Canonical output paths; the Snakemake rules write the same patterns with wildcards."""

from __future__ import annotations

from pathlib import Path

from hetfl.config import RunSpec


def split_dir(spec: RunSpec, root: str | Path = "data_splits") -> Path:
    return Path(root) / spec.experiment / spec.setting / f"seed{spec.seed}"


def trace_stem(spec: RunSpec, root: str | Path = "data_splits") -> Path:
    return Path(root) / "traces" / spec.trace_key


def run_dir(spec: RunSpec, root: str | Path = "results") -> Path:
    return Path(root) / spec.experiment / spec.run
