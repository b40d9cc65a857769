"""LEAF's on-disk format and text encodings (Caldas et al. 2018, github.com/TalwalkarLab/leaf).

A LEAF split directory (``data/<dataset>/data/train`` or ``.../test``) holds JSON files of the form
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``. FEMNIST's x is
a list of 784 floats in [0, 1], Shakespeare's x an 80-character string and y the next character,
Sent140's x a list ``[tweet id, date, query, user, text, "training" | "test"]`` (``data_to_json.py``
keeps a row of ``combine_data.py``'s CSV less its polarity; the last field names the Sentiment140 file the
tweet came from) and y 0 (negative) or 1 (positive).

Encodings follow LEAF's ``models/utils/language_utils.py``: Shakespeare characters index into LEAF's
80-letter alphabet; Sent140 uses LEAF's tokenizer (``[\\w']+|[.,!?;]``, first 25 words) but hashes
words into a fixed vocabulary instead of looking them up in GloVe (no word-vector file offline).
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "LEAF_LETTERS",
    "LeafSplit",
    "encode_chars",
    "hash_tokens",
    "read_leaf_dir",
    "tokenize",
]

# LEAF's ALL_LETTERS (models/utils/language_utils.py): 80 symbols, the Shakespeare classes.
LEAF_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
# LEAF's word_to_indices returns ALL_LETTERS.find(c) = −1 for other characters; hetfl maps them to the
# space, a valid class, rather than to a negative index.
_OOV_CHAR = LEAF_LETTERS.index(" ")
_CHAR_TABLE = np.full(128, _OOV_CHAR, dtype=np.int64)
_CHAR_TABLE[[ord(ch) for ch in LEAF_LETTERS]] = np.arange(len(LEAF_LETTERS))
_WORD_RE = re.compile(r"[\w']+|[.,!?;]")  # LEAF's split_line


@dataclass
class LeafSplit:
    """All samples of one LEAF split, flattened in file then user order."""

    users: np.ndarray  # str, one per sample
    x: list[Any]
    y: list[Any]
    files: list[Path]
    starts: list[int]  # index of each file's first sample


def read_leaf_dir(path: str | Path) -> LeafSplit:
    """Read every ``*.json`` LEAF file in ``path`` (sorted by name) into one :class:`LeafSplit`."""
    files = sorted(Path(path).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no LEAF *.json files in {path}")
    users: list[str] = []
    xs: list[Any] = []
    ys: list[Any] = []
    starts: list[int] = []
    for file in files:
        starts.append(len(ys))
        with open(file, encoding="utf-8") as fh:
            blob = json.load(fh)
        for key in ("users", "num_samples", "user_data"):
            if not isinstance(blob, dict) or key not in blob:
                raise ValueError(f"{file} is not a LEAF file: key {key!r} is missing")
        if len(blob["users"]) != len(blob["num_samples"]):
            raise ValueError(f"{file}: 'users' and 'num_samples' differ in length")
        for user, n in zip(blob["users"], blob["num_samples"], strict=True):
            data = blob["user_data"].get(user)
            if data is None or "x" not in data or "y" not in data:
                raise ValueError(f"{file}: user_data[{user!r}] needs 'x' and 'y'")
            if not len(data["x"]) == len(data["y"]) == n:
                raise ValueError(
                    f"{file}: user {user!r} has num_samples={n} but {len(data['x'])} x and {len(data['y'])} y"
                )
            users.extend([str(user)] * n)
            xs.extend(data["x"])
            ys.extend(data["y"])
    return LeafSplit(users=np.asarray(users, dtype=str), x=xs, y=ys, files=files, starts=starts)


def encode_chars(texts: list[str] | np.ndarray, length: int | None = None) -> np.ndarray:
    """Strings → int64 [n, length] indices into :data:`LEAF_LETTERS`.

    ``length=None`` requires equal lengths (LEAF's Shakespeare x are all 80); otherwise each string is cut
    to its last ``length`` characters or left-padded with spaces.
    """
    texts = [str(t) for t in texts]
    if length is None:
        lengths = {len(t) for t in texts}
        if len(lengths) > 1:
            raise ValueError(f"strings of different lengths {sorted(lengths)[:5]}; pass length=")
        length = lengths.pop() if lengths else 0
    fixed = [t[-length:].rjust(length) if length else "" for t in texts]
    codes = np.frombuffer("".join(fixed).encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    out = np.where(codes < 128, _CHAR_TABLE[np.minimum(codes, 127)], _OOV_CHAR)
    return out.reshape(len(texts), length)


def tokenize(text: str) -> list[str]:
    """LEAF's ``split_line`` (words, apostrophes and .,!?;), lower-cased as GloVe's vocabulary is."""
    return _WORD_RE.findall(str(text).lower())


def hash_tokens(texts: list[str] | np.ndarray, vocab_size: int, max_words: int) -> np.ndarray:
    """int64 [n, max_words]: the first ``max_words`` tokens hashed to 1…vocab_size−1, 0-padded.

    CRC-32 keeps the ids identical across processes and machines (Python's ``hash`` is salted).
    """
    if vocab_size < 2 or max_words < 1:
        raise ValueError(f"vocab_size={vocab_size} must be >= 2 and max_words={max_words} >= 1")
    out = np.zeros((len(texts), max_words), dtype=np.int64)
    for i, text in enumerate(texts):
        ids = [1 + zlib.crc32(w.encode("utf-8")) % (vocab_size - 1) for w in tokenize(text)[:max_words]]
        out[i, : len(ids)] = ids
    return out
