"""Names of Ruan et al.'s participation traces (Table 2) and trace-set labels; no heavy imports."""

from __future__ import annotations

from collections.abc import Sequence

TRACE_NAMES: tuple[str, ...] = ("T_0", "T_30", "T_50", "T_70", "T_90", "T_hi", "T_mi", "T_lo")


def parse_traceset(traceset: str) -> tuple[str, ...]:
    """Trace names of a trace-set label: "T3" = the first 3 of TRACE_NAMES; "T_0-T_hi" = those names."""
    if traceset[1:].isdigit():
        k = int(traceset[1:])
        if 1 <= k <= len(TRACE_NAMES):
            return TRACE_NAMES[:k]
    names = tuple(traceset.split("-"))
    unknown = [n for n in names if n not in TRACE_NAMES]
    if unknown or len(set(names)) != len(names):
        raise ValueError(
            f"traceset '{traceset}' is not allowed; allowed: 'T<k>' with k in 1..{len(TRACE_NAMES)}, "
            f"or distinct names from {', '.join(TRACE_NAMES)} joined by '-'"
        )
    return names


def traceset_label(names: Sequence[str]) -> str:
    """Inverse of parse_traceset: "T<k>" when names are the first k of TRACE_NAMES."""
    names = tuple(names)
    return f"T{len(names)}" if names == TRACE_NAMES[: len(names)] else "-".join(names)
