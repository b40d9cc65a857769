"""matplotlib for the figures: pyplot imported on first use, and the one way a figure is written.

A module of its own, not reports.figures: the tables whose modules draw a figure too (communication_cost,
objective_inconsistency) import these two and nothing of the figure registry, so a table's code
(hetfl.fingerprint) holds no other table's or figure's module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hetfl.io import atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# metadata that would differ between runs or matplotlib versions (None removes the entry)
_METADATA = {".png": {"Software": None}, ".svg": {"Date": None, "Creator": None}}


def pyplot():
    """matplotlib.pyplot, headless (Agg). Imported on first use, not with this module: the workflow's
    Snakefile imports FIGURES to name the figures, and matplotlib with seaborn (which brings scipy.stats)
    was 1.5-2.5 s of each Snakemake start, the run's and the report's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Figure, out: Path) -> None:
    plt = pyplot()
    fig.tight_layout()
    with plt.rc_context({"svg.hashsalt": "hetfl"}):  # clip-path ids hashed from content, not random
        for suffix, metadata in _METADATA.items():  # the temporary file keeps the suffix (format)
            atomic_write(Path(out).with_suffix(suffix),
                         lambda tmp, m=metadata: fig.savefig(tmp, dpi=120, bbox_inches="tight", metadata=m))
    plt.close(fig)
