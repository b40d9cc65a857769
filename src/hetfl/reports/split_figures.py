"""The client × class bubble chart of a partition (as in NIID-Bench and FedLab's split plots).

Drawn on a bare ``matplotlib.figure.Figure`` with the Agg canvas, so it needs no display and leaves
pyplot's global state alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = ["plot_label_distribution"]

_MAX_AREA = 400.0  # points² of the largest bubble


def _as_hist(hist: np.ndarray | pd.DataFrame) -> np.ndarray:
    """[N, C] counts from an array or from :func:`hetfl.data.partition.describe`'s frame."""
    if isinstance(hist, pd.DataFrame):
        label_cols = [c for c in hist.columns if str(c).isdigit()]
        label_cols.sort(key=lambda c: int(c))
        hist = hist[label_cols].to_numpy()
    arr = np.asarray(hist)
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.number) or (arr.size and arr.min() < 0):
        raise ValueError(f"hist must be a non-negative [clients, classes] array, got shape {arr.shape}")
    return arr


def plot_label_distribution(
    hist: np.ndarray | pd.DataFrame,
    path: str | Path,
    *,
    title: str | None = None,
    max_clients: int | None = 200,
) -> Path:
    """Write the bubble chart of ``hist`` ([clients, classes] counts) to ``path`` (format by suffix).

    Bubble area ∝ count (largest count = largest bubble). With more than ``max_clients`` clients only
    the first ``max_clients`` are drawn and the title says so.
    """
    counts = _as_hist(hist)
    n_clients, n_classes = counts.shape
    shown = n_clients if max_clients is None else min(n_clients, max_clients)
    counts = counts[:shown]
    clients, classes = np.nonzero(counts)
    peak = counts.max() if counts.size and counts.max() > 0 else 1
    fig = Figure(figsize=(min(max(4.0, 0.12 * shown + 2), 24.0), min(max(3.0, 0.25 * n_classes + 1.5), 16.0)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.scatter(clients, classes, s=_MAX_AREA * counts[clients, classes] / peak, alpha=0.6,
               color="tab:blue", edgecolors="none")
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.set_xlim(-0.6, max(shown, 1) - 0.4)
    ax.set_ylim(n_classes - 0.4, -0.6)  # class 0 on top, as in the usual client × class charts
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    text = title or "label distribution per client"
    if shown < n_clients:
        text += f" (first {shown} of {n_clients} clients)"
    ax.set_title(text)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out
