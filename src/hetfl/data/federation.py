"""A federation on disk: every device's local train and test data, stored flat with offsets.

`split.npz` holds x_train, y_train, train_offsets, x_test, y_test, test_offsets: device k's train data is
x_train[train_offsets[k]:train_offsets[k+1]]. The flat layout lets the engine gather minibatches of all
clients with one index tensor, without padding. A real source's own test split, when it has one, is kept
as the global test set (x_global_test, y_global_test); SYNTHETIC has none (FedProx evaluates on the pooled
local holdouts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetfl.io import atomic_write, atomic_write_json, file_sha256

#: how global_test_* averages: "pooled" over the global test samples, or the mean of "domains" (FedBN's
#: per-domain test accuracies; the split records each sample's domain holder, `d_global`)
GLOBAL_TEST_AVERAGES = ("pooled", "domains")


@dataclass
class Federation:
    x_train: np.ndarray
    y_train: np.ndarray
    train_offsets: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    test_offsets: np.ndarray
    num_classes: int
    x_global: np.ndarray | None = None  # the source's own test split (global test set), if any
    y_global: np.ndarray | None = None
    # the device holding each global test sample's domain (-1: no device holds it); only for
    # global_test_average "domains" (FedBN's per-domain test accuracies, docs/fedfor.md)
    d_global: np.ndarray | None = None

    def __post_init__(self) -> None:
        if (self.x_global is None) != (self.y_global is None):
            raise ValueError("x_global and y_global must be given together")
        if self.x_global is not None and len(self.x_global) != len(self.y_global):
            raise ValueError(f"x_global has {len(self.x_global)} rows, y_global {len(self.y_global)}")
        if self.d_global is not None and (self.y_global is None or len(self.d_global) != len(self.y_global)):
            raise ValueError("d_global needs a global test set and one device (or -1) per sample of it")

    @property
    def has_global_test(self) -> bool:
        return self.x_global is not None and len(self.x_global) > 0

    @property
    def num_devices(self) -> int:
        return len(self.train_offsets) - 1

    @property
    def train_sizes(self) -> np.ndarray:
        return np.diff(self.train_offsets)

    @property
    def test_sizes(self) -> np.ndarray:
        return np.diff(self.test_offsets)

    @property
    def p(self) -> np.ndarray:
        """Ruan et al. §3.1: p^k = n_k / n over the local training sets."""
        n = self.train_sizes.astype(np.float64)
        return n / n.sum()

    def label_histogram(self) -> np.ndarray:
        """[N, C] per-device label counts of the training data."""
        dev = np.repeat(np.arange(self.num_devices), self.train_sizes)
        hist = np.zeros((self.num_devices, self.num_classes), dtype=np.int64)
        np.add.at(hist, (dev, self.y_train), 1)
        return hist


def from_device_lists(
    xs_train: list[np.ndarray],
    ys_train: list[np.ndarray],
    xs_test: list[np.ndarray],
    ys_test: list[np.ndarray],
    num_classes: int,
    global_test: tuple[np.ndarray, np.ndarray] | None = None,
    global_devices: np.ndarray | None = None,
) -> Federation:
    def offsets(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)

    def features(parts: list[np.ndarray]) -> np.ndarray:
        x = np.concatenate(parts)  # token ids (text) stay int64 for embeddings; everything else float32
        return x.astype(np.int64 if np.issubdtype(x.dtype, np.integer) else np.float32)

    return Federation(
        x_train=features(xs_train),
        y_train=np.concatenate(ys_train).astype(np.int64),
        train_offsets=offsets(xs_train),
        x_test=features(xs_test),
        y_test=np.concatenate(ys_test).astype(np.int64),
        test_offsets=offsets(xs_test),
        num_classes=num_classes,
        x_global=None if global_test is None else features([global_test[0]]),
        y_global=None if global_test is None else np.asarray(global_test[1], dtype=np.int64),
        d_global=None if global_devices is None else np.asarray(global_devices, dtype=np.int64),
    )


def save_federation(fed: Federation, npz_path: str | Path, manifest_path: str | Path,
                    meta: dict[str, Any]) -> dict[str, Any]:
    """Write split.npz and manifest.json (sizes, label histograms, content hash), each atomically."""
    arrays = {k: getattr(fed, k) for k in
              ("x_train", "y_train", "train_offsets", "x_test", "y_test", "test_offsets")}
    arrays["num_classes"] = np.array(fed.num_classes)
    if fed.x_global is not None:
        arrays.update(x_global_test=fed.x_global, y_global_test=fed.y_global)
    if fed.d_global is not None:
        arrays["d_global_test"] = fed.d_global

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    atomic_write(npz_path, write, suffix=".npz")
    manifest = {
        **meta,
        "num_devices": fed.num_devices,
        "num_classes": fed.num_classes,
        "train_sizes": fed.train_sizes.tolist(),
        "test_sizes": fed.test_sizes.tolist(),
        "global_test_size": 0 if fed.y_global is None else len(fed.y_global),
        "label_histogram": fed.label_histogram().tolist(),
        "sha256": file_sha256(npz_path),
    }
    atomic_write_json(manifest_path, manifest)
    return manifest


def load_federation(npz_path: str | Path) -> Federation:
    with np.load(npz_path) as z:
        return Federation(
            x_train=z["x_train"], y_train=z["y_train"], train_offsets=z["train_offsets"],
            x_test=z["x_test"], y_test=z["y_test"], test_offsets=z["test_offsets"],
            num_classes=int(z["num_classes"]),
            x_global=z["x_global_test"] if "x_global_test" in z else None,
            y_global=z["y_global_test"] if "y_global_test" in z else None,
            d_global=z["d_global_test"] if "d_global_test" in z else None,
        )
