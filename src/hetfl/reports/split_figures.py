"""The client × class bubble chart of a partition (as in NIID-Bench and FedLab's split plots), for one split
(`hetfl split --describe`) or for an experiment's settings side by side with the report's caption
(`hetfl split-figure`, the workflow's rule split_figure).

Drawn on a bare ``matplotlib.figure.Figure`` with the Agg canvas, so it needs no display and leaves
pyplot's global state alone. Everything is read from the splits' manifest.json files (written beside
split.npz: ``label_histogram``, ``train_sizes``, ``test_sizes``, ``global_test_size`` and the split spec).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from hetfl.data.partition import SKEW_KEYS
from hetfl.io import atomic_write, atomic_write_text
from hetfl.reports.catalog import UNLABELLED_DATASETS, has_class_labels

__all__ = ["SplitPanel", "build_split_figure", "draw_split_panels", "load_panels", "plot_label_distribution",
           "save_png", "split_caption", "split_stats"]

_MAX_AREA = 400.0  # points² of the largest bubble
_MAX_HEIGHT = 60.0  # inches of a figure of many panels (Agg refuses images above 2^16 pixels a side)


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


def _size(n_clients: int, n_classes: int) -> tuple[float, float]:
    """Width and height in inches of one chart: a column per client, a row per class, within bounds."""
    return min(max(4.0, 0.12 * n_clients + 2), 24.0), min(max(3.0, 0.25 * n_classes + 1.5), 16.0)


def _draw_bubbles(ax: Axes, counts: np.ndarray, title: str, max_clients: int | None) -> None:
    """The bubbles of [clients, classes] counts on `ax`; with more than `max_clients` clients only the
    first are drawn and the title says so."""
    n_clients, n_classes = counts.shape
    shown = n_clients if max_clients is None else min(n_clients, max_clients)
    counts = counts[:shown]
    clients, classes = np.nonzero(counts)
    peak = counts.max() if counts.size and counts.max() > 0 else 1
    ax.scatter(clients, classes, s=_MAX_AREA * counts[clients, classes] / peak, alpha=0.6,
               color="tab:blue", edgecolors="none")
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.set_xlim(-0.6, max(shown, 1) - 0.4)
    ax.set_ylim(n_classes - 0.4, -0.6)  # class 0 on top, as in the usual client × class charts
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if shown < n_clients:
        title += f" (first {shown} of {n_clients} clients)"
    ax.set_title(title)


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
    shown = counts.shape[0] if max_clients is None else min(counts.shape[0], max_clients)
    fig = Figure(figsize=_size(shown, counts.shape[1]))
    FigureCanvasAgg(fig)
    _draw_bubbles(fig.add_subplot(), counts, title or "label distribution per client", max_clients)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


@dataclass(frozen=True)
class SplitPanel:
    """One setting's split: its name (the manifest's folder data_splits/<experiment>/<setting>/seed<s>/),
    where its manifest is, and the manifest."""

    setting: str
    path: Path
    manifest: dict[str, Any]

    @property
    def hist(self) -> np.ndarray:
        return np.asarray(self.manifest["label_histogram"], dtype=np.int64)


def _setting_of(path: Path) -> str:
    """data_splits/<experiment>/<setting>/seed<s>/manifest.json → <setting>; elsewhere the folder
    holding it."""
    folder = path.parent
    return folder.parent.name if re.fullmatch(r"seed\d+", folder.name) and folder.parent.name else folder.name


_NEEDED = ("label_histogram", "train_sizes", "global_test_size", "seed")


def _load_panel(path: Path) -> SplitPanel:
    """One manifest, checked: it exists, is a JSON object of a labelled dataset, has the keys drawn and a
    non-negative histogram with a row per device."""
    if not path.is_file():
        raise ValueError(f"manifest {path} does not exist; allowed: the manifest.json `hetfl split` writes "
                         "beside split.npz")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"manifest {path} is not valid JSON ({err.msg} at line {err.lineno}); allowed: the "
                         "manifest.json `hetfl split` writes") from None
    except UnicodeDecodeError:  # an .npz given as a manifest: "'utf-8' codec can't decode ...", no file named
        raise ValueError(f"manifest {path} is not a text file; allowed: the manifest.json `hetfl split` "
                         "writes beside split.npz") from None
    missing = [k for k in _NEEDED if not isinstance(manifest, dict) or k not in manifest]
    if missing:
        raise ValueError(f"manifest {path} has no {', '.join(missing)}; allowed: a manifest.json written by "
                         "`hetfl split` (make the split again)")
    dataset = manifest.get("dataset")
    if not has_class_labels(dataset):
        raise ValueError(f"manifest {path} is a split of dataset '{dataset}', which has no class labels to "
                         f"draw; allowed: splits of a labelled dataset (not "
                         f"{', '.join(sorted(UNLABELLED_DATASETS))})")
    panel = SplitPanel(_setting_of(path), path, manifest)
    hist, devices = panel.hist, len(manifest["train_sizes"])
    if hist.ndim != 2 or hist.shape[0] != devices or (hist.size and hist.min() < 0):
        raise ValueError(f"manifest {path} has label_histogram of shape {hist.shape} for {devices} devices; "
                         "allowed: non-negative counts, one row per device")
    return panel


def load_panels(paths: list[str | Path]) -> list[SplitPanel]:
    """The splits' manifests, every one checked before anything is drawn; a ValueError names the first path
    that fails, what it holds and what is allowed."""
    if not paths:
        raise ValueError("no manifest given; allowed: one or more data_splits/<experiment>/<setting>/seed<s>/"
                         "manifest.json files")
    return [_load_panel(Path(p)) for p in paths]


def _min_median_max(values) -> str:
    v = np.asarray(values, dtype=np.float64)
    return f"{v.min():g} / {np.median(v):g} / {v.max():g}" if v.size else "—"


# The keys each label skew and size distribution reads (hetfl.data.partition.SKEW_KEYS, which config
# validation also holds a partition to; hetfl.data.sizes.SizeSpec): a manifest records every default, and the
# caption shows only what shaped the split. A kind not listed here shows all its keys.
_SIZE_KEYS = {"equal": ("size",), "pareto": ("size", "index", "min_size", "max_size"),
              "lognormal": ("size", "sigma", "min_size", "max_size")}


def _kind_text(kind_key: str, spec: dict[str, Any], keys_of: dict[str, tuple[str, ...]]) -> str:
    """'pareto (size 20, index 0.5)': a spec's kind and the values of the keys that kind reads."""
    kind = spec.get(kind_key)
    keys = keys_of.get(kind, tuple(k for k in sorted(spec) if k != kind_key))
    values = ", ".join(f"{k} {spec[k] if isinstance(spec[k], str) else json.dumps(spec[k])}"
                       for k in keys if k in spec)
    return f"{kind} ({values})" if values else str(kind)


def _spec_text(manifest: dict[str, Any]) -> str:
    """The data, partition and sizes the split was made from, as the manifest records them."""
    dataset = manifest.get("dataset")
    sizes = manifest.get("sizes") or {}
    if dataset == "synthetic":
        data = f"SYNTHETIC(α = {manifest.get('alpha')}, β = {manifest.get('beta')})"
        data += ", IID (shared W, b)" if manifest.get("iid") else ""
    else:
        partition = manifest.get("partition") or {"label_skew": "iid"}
        data = f"{dataset}, partition {_kind_text('label_skew', partition, SKEW_KEYS)}"
        if sizes.get("distribution") == "equal":  # a real source's "equal" reads no size (hetfl split --help)
            trimmed = partition.get("equal_counts") is True  # else the label skew deals the whole split
            return (f"{data}; sizes "
                    f"{'equal (trimmed to one count)' if trimmed else 'as the label skew deals them'}")
    return f"{data}; sizes {_kind_text('distribution', sizes, {**_SIZE_KEYS, 'equal': _equal_keys(sizes)})}"


def _equal_keys(sizes: dict[str, Any]) -> tuple[str, ...]:
    """Equal sizes deal clip(size, min_size, max_size) a device: `size` and the bound that moved it, if any
    (size 1 under the floor 2 was captioned "size 1" where every device held 2)."""
    size, low, high = sizes.get("size"), sizes.get("min_size"), sizes.get("max_size")
    if not isinstance(size, int | float):
        return ("size",)
    return ("size", *(("min_size",) if isinstance(low, int | float) and low > size else ()),
            *(("max_size",) if isinstance(high, int | float) and high < size else ()))


def split_stats(panel: SplitPanel) -> dict[str, str]:
    """What the caption states about one setting's split (the caption's table row, in its column order)."""
    m = panel.manifest
    return {"setting": panel.setting, "seed": str(m["seed"]), "devices": str(len(m["train_sizes"])),
            "train size min / median / max": _min_median_max(m["train_sizes"]),
            "classes per device min / median / max": _min_median_max((panel.hist > 0).sum(axis=1)),
            "global test size": str(m["global_test_size"]), "partition / sizes": _spec_text(m)}


def split_caption(name: str, panels: list[SplitPanel]) -> str:
    """The chart's caption fragment (HTML, the report's figure.rst pulls it in): what is drawn, a row per
    setting (devices, train sizes, classes per device, global test size, spec, seed), and which seed."""
    rows = [split_stats(p) for p in panels]
    seeds = sorted({r["seed"] for r in rows}, key=int)
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r.values()) + "</tr>" for r in rows)
    return (f"<p><strong>Data splits: {html.escape(name)}</strong>. Label distribution of each setting's "
            "split: a column per device, a row per class, bubble area ∝ the device's training samples of "
            f"that class. Drawn from the split of seed {', '.join(seeds)} (data_splits/&lt;experiment&gt;/"
            "&lt;setting&gt;/seed&lt;s&gt;/manifest.json); the other seeds' splits are drawn the same way "
            "(same partition and sizes, another seed). Global test size: samples of the source's own test "
            "split, 0 = none (docs/metrics.md).</p>\n"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n")


def draw_split_panels(panels: list[SplitPanel], title: str = "") -> Figure:
    """A bubble chart per split, stacked, each titled by its setting, seed and devices, under `title`."""
    sizes = [_size(min(p.hist.shape[0], 200), p.hist.shape[1]) for p in panels]
    heights = [h for _, h in sizes]
    fig = Figure(figsize=(max(w for w, _ in sizes), min(sum(heights), _MAX_HEIGHT)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, p in zip(axes, panels, strict=True):
        m = p.manifest
        _draw_bubbles(ax, p.hist, f"{p.setting}, seed {m['seed']}: {len(m['train_sizes'])} devices", 200)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def save_png(fig: Figure, path: str | Path) -> Path:
    """`fig` as PNG, byte for byte the same on every run (no software metadata), written atomically."""
    out = Path(path)
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=100, bbox_inches="tight", metadata={"Software": None}))
    return out


def build_split_figure(manifests: list[str | Path], out: str | Path) -> None:
    """<out>.png (a panel per manifest) and <out>.caption.html; every manifest is checked first, so a bad
    one leaves nothing written."""
    panels = load_panels(manifests)
    out = Path(out)
    fig = draw_split_panels(panels,
                            f"{out.name}: training samples per device and class (bubble area ∝ count)")
    save_png(fig, out.with_name(out.name + ".png"))
    atomic_write_text(out.with_name(out.name + ".caption.html"), split_caption(out.name, panels))
