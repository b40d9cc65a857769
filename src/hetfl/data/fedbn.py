"""FedBN's released benchmark files → the local copies ``digit5`` and ``domainnet`` read (FedFOR Tables 3-5).

FedBN (Li et al. 2021, github.com/med-air/FedBN) ships its data as Python pickles under its ``data/``
directory; hetfl reads none of them directly, so ``prepare_fedbn`` converts them once into the
``DatasetDict.save_to_disk`` copy that :func:`hetfl.data.sources.load_source` reads
(``python -m hetfl.data.sources prepare digit5 --from FEDBN/data``):

* Digits (``digit_dataset.zip``): ``<set>/partitions/train_part0.pkl`` (the 743 images FedBN trains each
  set on at its default ``--percent 0.1``) and ``<set>/test.pkl``, each a pickled ``(images, labels)`` pair
  of numpy arrays, for the sets MNIST, SVHN, USPS, SynthDigits, MNIST_M (``utils/data_utils.py``,
  ``DigitsDataset``). Every image becomes 28x28 RGB (FedBN's transforms: resize to 28, grey to 3 channels).
* DomainNet (``domainnet_dataset.zip`` plus DomainNet's six domain zips unpacked in ``DomainNet/``):
  ``DomainNet/<site>_{train,test}.pkl``, each a pickled ``(paths, class names)`` pair, the paths relative
  to FedBN's ``data/`` (``DomainNetDataset``); labels by FedBN's ``label_dict``. Every image becomes 64x64
  RGB (FedBN: 256x256, for an AlexNet hetfl does not have).

The pickles are FedBN's own files: unpickling runs code from the file, so convert only a copy you trust.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DIGIT_SETS", "DOMAINNET_CLASSES", "DOMAINNET_SITES", "prepare_fedbn"]

#: FedBN's Digits sets (folder names under its data/, the `domain` values of digit5), in FedBN's order
DIGIT_SETS = ("MNIST", "SVHN", "USPS", "SynthDigits", "MNIST_M")
#: FedBN's DomainNet sites and its label_dict order (federated/fed_domainnet.py, utils/data_utils.py)
DOMAINNET_SITES = ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")
DOMAINNET_CLASSES = ("bird", "feather", "headphones", "ice_cream", "teapot", "tiger", "whale", "windmill",
                     "wine_glass", "zebra")


def _pair(path: Path, what: str) -> tuple[Any, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: FedBN's {what} (docs/datasets.md, 'FedBN's benchmarks')")
    with open(path, "rb") as fh:
        blob = pickle.load(fh)  # FedBN writes pkl.dump((a, b)); its loaders read np.load(allow_pickle=True)
    if not isinstance(blob, tuple | list | np.ndarray) or len(blob) != 2 or len(blob[0]) != len(blob[1]):
        length = f" of length {len(blob)}" if hasattr(blob, "__len__") else ""
        raise ValueError(f"{path} is not FedBN's pair of equally long arrays ({what}); it holds "
                         f"{type(blob).__name__}{length}")
    return blob[0], blob[1]


def _rgb(image: Any, size: int) -> Any:
    from PIL import Image

    image = image.convert("RGB")
    return image if image.size == (size, size) else image.resize((size, size), Image.BILINEAR)


def _digits(source: Path, split: str) -> dict[str, list[Any]]:
    from PIL import Image

    cols: dict[str, list[Any]] = {"image": [], "label": [], "domain": []}
    for name in DIGIT_SETS:
        file = source / name / ("partitions/train_part0.pkl" if split == "train" else "test.pkl")
        part = "its 743 training images" if split == "train" else "its test split"
        images, labels = _pair(file, f"Digits set {name} ({part})")
        images = np.asarray(images)
        labels = np.asarray(labels).astype(np.int64).reshape(-1)
        if images.dtype != np.uint8 or images.ndim not in (3, 4):
            raise ValueError(f"{file}: images of dtype {images.dtype} and shape {images.shape}; FedBN's are "
                             "uint8 [n, H, W] or [n, H, W, 3]")
        if labels.size and (labels.min() < 0 or labels.max() > 9):
            raise ValueError(f"{file}: labels {labels.min()}..{labels.max()}; digits are 0..9")
        cols["image"] += [_rgb(Image.fromarray(im), 28) for im in images]
        cols["label"] += labels.tolist()
        cols["domain"] += [name] * len(labels)
    return cols


def _domainnet(source: Path, split: str) -> dict[str, list[Any]]:
    from PIL import Image

    index = {c: i for i, c in enumerate(DOMAINNET_CLASSES)}
    cols: dict[str, list[Any]] = {"image": [], "label": [], "domain": []}
    for site in DOMAINNET_SITES:
        file = source / "DomainNet" / f"{site}_{split}.pkl"
        paths, names = _pair(file, f"DomainNet split of {site} (domainnet_dataset.zip)")
        for path, name in zip(paths, names, strict=True):
            if str(name) not in index:
                raise ValueError(f"{file}: class {name!r} is not one of FedBN's ten: "
                                 + ", ".join(DOMAINNET_CLASSES))
            image_file = source / str(path)
            if not image_file.is_file():
                raise FileNotFoundError(f"{image_file} (listed in {file}) is missing: unzip DomainNet's "
                                        f"{site}.zip in {source / 'DomainNet'} as FedBN's README says")
            with Image.open(image_file) as im:
                cols["image"].append(_rgb(im, 64))
            cols["label"].append(index[str(name)])
            cols["domain"].append(site)
    return cols


def prepare_fedbn(name: str, source: str | Path, data_dir: str | Path | None = None) -> Path:
    """Convert FedBN's files under ``source`` (its ``data/`` directory) into ``<data_dir>/<name>``."""
    import datasets

    from hetfl.data.sources import data_root

    build = {"digit5": _digits, "domainnet": _domainnet}
    if name not in build:
        raise ValueError(f"prepare: {name!r} is not one of FedBN's benchmarks; allowed: {', '.join(build)}")
    source = Path(source).expanduser()
    if not source.is_dir():
        raise FileNotFoundError(f"prepare {name}: --from {source} is not a directory; give FedBN's data/ "
                                "directory (the one its README unzips the data sets into)")
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10),
                                  "domain": datasets.Value("string")})
    splits = {split: datasets.Dataset.from_dict(build[name](source, split), features=features)
              for split in ("train", "test")}
    target = data_root(data_dir) / name
    datasets.DatasetDict(splits).save_to_disk(str(target))
    return target
