"""Split a labelled data set among clients: label skew × size skew, pure and seeded.

``partition(labels, spec, num_clients, seed, client_ids)`` returns one int64 index array per client
(sorted, pairwise disjoint: every sample lands in at most one client). The label skew decides which
classes a client sees, the optional size skew (``spec.sizes``, a :class:`~hetfl.data.sizes.SizeSpec`)
how many samples it holds. Label skews and the code each one follows:

* ``iid`` — a uniform random split (McMahan et al. 2017, "IID").
* ``dirichlet`` — NIID-Bench ``noniid-labeldir`` (Li et al. 2022, ``utils.py``): per class, proportions
  over clients ~ Dir(α), zeroed for clients already holding ≥ n/N samples, redrawn until every client
  has ≥ ``min_size`` samples. With a size skew it follows FedDyn's unbalanced split instead (Acar et al.
  2021): each client's label prior ~ Dir(α) over classes, samples drawn one at a time from the prior
  until the client reaches its drawn size, exhausted classes removed from the prior.
* ``pathological`` — m classes per client, each class split evenly among its holders. Two readings of
  which classes, chosen by ``spec.label_choice``:

  - ``"cyclic"`` (default) — NIID-Bench ``noniid-#label{m}``: client i holds class i mod C plus m − 1
    more distinct random classes, so every class is held and every sample kept.
  - ``"random"`` — Ruan et al. (2021, §5.1): "each device is assigned data from one label chosen
    uniformly at random"; every client draws its m classes as a uniform m-subset, independently of the
    others. Classes nobody draws are not dealt: their samples are dropped.

  m = 1 is Ruan et al.'s one label per device. Splitting each class evenly among its holders gives
  devices different counts whenever classes have different numbers of holders; ``equal_counts`` trims
  every device to the smallest one's count (Ruan et al. §5.3: "All devices are given the same number of
  samples for fair comparison"), keeping at least one sample of each class it holds.
* ``shards`` — McMahan et al. (2017): sort by label, cut into N · s equal shards, s random shards per
  client (s = 2 in the paper).
* ``longtail`` — FedFOR's Imbalanced CIFAR-10 (Tian et al. 2022, §4.2): every client gets its own
  long-tail over a class order, counts ``int(h · ρ^(r/(C−1)))`` for rank r (Cao et al. 2019), head
  count h = ``client_fraction`` · n / C, so the ratio of its smallest to largest class is ρ. Two ways to
  draw the samples (``draw``): ``"disjoint"`` (default) deals every sample at most once, class orders
  being random rotations of a random permutation, one per block of C clients (see _longtail);
  ``"independent"`` is FedFOR's own "during each global iteration, we first randomly sample 10 %
  training data and further trim the data with a different long tail": every client draws its samples
  from the whole data set afresh, in its own random class order, so clients overlap and N is unbounded.
* ``natural`` — one client per writer/speaker id (LEAF's FEMNIST, Shakespeare, Sent140).

``local_holdout`` splits every client's indices into a local train and test part (for the mean
per-client accuracy, BMTA); the global test set is the source's own test split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hetfl.data.sizes import SizeSpec, sample_sizes
from hetfl.data.synthetic import holdout_split

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EQUAL_COUNT_HOLDOUTS",
    "EQUAL_COUNT_PICKS",
    "EQUAL_COUNT_SKEWS",
    "LABEL_CHOICES",
    "LABEL_SKEWS",
    "PartitionSpec",
    "SKEW_KEYS",
    "describe",
    "label_histogram",
    "local_holdout",
    "longtail_profile",
    "partition",
    "rest_holdout",
    "temporal_holdout",
]

LABEL_SKEWS: tuple[str, ...] = ("iid", "dirichlet", "pathological", "shards", "longtail", "natural")
LABEL_CHOICES: tuple[str, ...] = ("cyclic", "random")  # pathological: NIID-Bench i mod C | Ruan et al.
LONGTAIL_DRAWS: tuple[str, ...] = ("disjoint", "independent")  # longtail: hetfl's dealing | FedFOR's draws
_NO_SIZE_SKEW = ("shards", "natural")  # their sizes are part of the definition
EQUAL_COUNT_SKEWS: tuple[str, ...] = ("iid", "pathological", "natural")  # the skews equal_counts can trim
#: natural with equal_counts: which of its samples a domain keeps, a seeded random subset (hetfl) or the
#: first ones in sample order (FedBN's Subset(trainset, range(min_data_len)), federated/fed_domainnet.py)
EQUAL_COUNT_PICKS: tuple[str, ...] = ("random", "first")
#: natural with equal_counts: where a domain's local test part comes from, its kept samples (hetfl's
#: local_holdout) or the samples the trim left out (FedBN's DomainNet validation images, rest_holdout)
EQUAL_COUNT_HOLDOUTS: tuple[str, ...] = ("kept", "rest")
#: the PartitionSpec keys each label skew reads (besides label_skew and sizes); some only in part of their
#: splits: dirichlet's min_size and longtail's client_fraction without a size skew, natural's equal_counts_*
#: with equal_counts. The split figures' captions show these (reports.split_figures) and config validation
#: refuses any other key a config's partition gives (config._check_partition_keys)
SKEW_KEYS: dict[str, tuple[str, ...]] = {
    "iid": ("equal_counts",), "dirichlet": ("alpha", "min_size"),
    "pathological": ("m", "label_choice", "equal_counts"),
    "shards": ("shards_per_client",), "longtail": ("imbalance_ratio", "client_fraction", "draw"),
    "natural": ("min_samples", "equal_counts", "equal_counts_fraction", "equal_counts_pick",
                "equal_counts_holdout")}
_MAX_DIRICHLET_DRAWS = 1000  # NIID-Bench loops forever; hetfl gives up with an error instead


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


@dataclass(frozen=True)
class PartitionSpec:
    """How samples are dealt to clients.

    ``label_skew``: one of :data:`LABEL_SKEWS`. ``alpha``: Dirichlet concentration (dirichlet).
    ``m``: classes per client (pathological). ``shards_per_client``: shards per client (shards).
    ``imbalance_ratio``: smallest / largest class count within a client, in (0, 1] (longtail;
    FedFOR uses 0.01). ``client_fraction``: a longtail client's head-class count as a fraction of the
    mean class count (FedFOR samples 10 % of the data per client before trimming, ≈ 2.5 % kept).
    ``sizes``: optional size skew; not allowed with shards and natural. ``min_size``: fewest samples
    a client may get under dirichlet without a size skew (NIID-Bench uses 10; 0 disables the redraw).
    ``label_choice``: how pathological picks a client's m classes, one of :data:`LABEL_CHOICES`:
    ``"cyclic"`` (NIID-Bench, class i mod C first, every class held) or ``"random"`` (Ruan et al. 2021,
    a uniform m-subset per client; classes nobody draws are dropped).
    ``min_samples``: natural only, writers/speakers with fewer samples are not eligible (LEAF's ``-k``;
    a device needs 2 for its local train/test split; 0 keeps every id).
    ``draw``: longtail only, one of :data:`LONGTAIL_DRAWS`: ``"disjoint"`` (every sample dealt at most
    once) or ``"independent"`` (FedFOR: every client drawn from all the data afresh; clients overlap).
    ``equal_counts``: iid, pathological and natural without a size skew only; every client is trimmed to
    the smallest client's count (Ruan et al. §5.3, "the same number of samples"), per class in proportion
    to what it holds (natural: a uniform random subset of each writer's/domain's samples, as FedBN, the
    set-up FedFOR Tables 3-5 follow, cuts every domain to the smallest one's length), so the samples
    beyond it are dropped.
    ``equal_counts_fraction``: natural with ``equal_counts`` only; every client keeps
    ``int(fraction · smallest)`` samples instead of the smallest count (FedBN's DomainNet code,
    ``federated/fed_domainnet.py``: ``int(min_data_len * 0.05)`` per domain). 1 keeps the smallest count.
    ``equal_counts_pick``: natural with ``equal_counts`` only, one of :data:`EQUAL_COUNT_PICKS`: which
    samples a client keeps, ``"random"`` (a seeded uniform subset) or ``"first"`` (the first ones in
    sample order, the source's file order: FedBN's ``Subset(trainset, range(min_data_len))``).
    ``equal_counts_holdout``: natural with ``equal_counts`` only, one of :data:`EQUAL_COUNT_HOLDOUTS`:
    ``"kept"`` (a client's local test part is cut from its kept samples, :func:`local_holdout`) or
    ``"rest"`` (it trains on all of them and its test part comes from the samples the trim left out,
    :func:`rest_holdout`; needs ``equal_counts_fraction`` < 1, else the smallest domain has none left).
    :func:`partition` itself ignores it.
    """

    label_skew: str = "iid"
    alpha: float = 0.5
    m: int = 2
    shards_per_client: int = 2
    imbalance_ratio: float = 0.01
    client_fraction: float = 0.1
    sizes: SizeSpec | None = None
    min_size: int = 10
    label_choice: str = "cyclic"
    min_samples: int = 0
    draw: str = "disjoint"
    equal_counts: bool = False
    equal_counts_fraction: float = 1.0
    equal_counts_pick: str = "random"
    equal_counts_holdout: str = "kept"

    def __post_init__(self) -> None:
        if self.label_skew not in LABEL_SKEWS:
            raise ValueError(
                f"PartitionSpec.label_skew={self.label_skew!r} is unknown; allowed: {LABEL_SKEWS}"
            )
        if not _is_real(self.alpha) or not math.isfinite(self.alpha) or self.alpha <= 0:
            raise ValueError(f"PartitionSpec.alpha={self.alpha!r} must be a finite number > 0")
        if not _is_int(self.m) or self.m < 1:
            raise ValueError(f"PartitionSpec.m={self.m!r} must be an integer >= 1")
        if not _is_int(self.shards_per_client) or self.shards_per_client < 1:
            raise ValueError(
                f"PartitionSpec.shards_per_client={self.shards_per_client!r} must be an integer >= 1"
            )
        if not _is_real(self.imbalance_ratio) or not 0 < self.imbalance_ratio <= 1:
            raise ValueError(
                f"PartitionSpec.imbalance_ratio={self.imbalance_ratio!r} must be a number in (0, 1] "
                "(smallest / largest class count, e.g. 0.01)"
            )
        if not _is_real(self.client_fraction) or not 0 < self.client_fraction <= 1:
            raise ValueError(
                f"PartitionSpec.client_fraction={self.client_fraction!r} must be a number in (0, 1]"
            )
        if self.sizes is not None and not isinstance(self.sizes, SizeSpec):
            raise ValueError(f"PartitionSpec.sizes={self.sizes!r} must be None or a SizeSpec")
        if self.sizes is not None and self.label_skew in _NO_SIZE_SKEW:
            raise ValueError(
                f"PartitionSpec.sizes={self.sizes!r} cannot be combined with label_skew={self.label_skew!r} "
                f"(its client sizes are fixed by definition); allowed: sizes=None"
            )
        if not _is_int(self.min_size) or self.min_size < 0:
            raise ValueError(f"PartitionSpec.min_size={self.min_size!r} must be an integer >= 0")
        if not _is_int(self.min_samples) or self.min_samples < 0:
            raise ValueError(f"PartitionSpec.min_samples={self.min_samples!r} must be an integer >= 0")
        if not isinstance(self.draw, str) or self.draw not in LONGTAIL_DRAWS:
            raise ValueError(f"PartitionSpec.draw={self.draw!r} is unknown; allowed: {LONGTAIL_DRAWS}")
        if self.draw != "disjoint" and self.label_skew != "longtail":
            raise ValueError(f"PartitionSpec.draw={self.draw!r} applies to label_skew='longtail' only; "
                             f"label_skew={self.label_skew!r} allows draw='disjoint'")
        if not isinstance(self.equal_counts, bool):
            raise ValueError(f"PartitionSpec.equal_counts={self.equal_counts!r} must be true or false")
        if self.equal_counts and self.label_skew not in EQUAL_COUNT_SKEWS:
            raise ValueError(f"PartitionSpec.equal_counts=True applies to label_skew {EQUAL_COUNT_SKEWS} "
                             f"only; label_skew={self.label_skew!r} allows equal_counts=False")
        if self.equal_counts and self.sizes is not None:
            raise ValueError(f"PartitionSpec.equal_counts=True cannot be combined with sizes={self.sizes!r} "
                             "(a size skew); allowed: sizes=None (distribution equal)")
        if not _is_real(self.equal_counts_fraction) or not 0 < self.equal_counts_fraction <= 1:
            raise ValueError(f"PartitionSpec.equal_counts_fraction={self.equal_counts_fraction!r} is not "
                             "allowed; allowed: a number in (0, 1] (the share of the smallest count kept)")
        if self.equal_counts_fraction != 1 and not (self.equal_counts and self.label_skew == "natural"):
            raise ValueError(f"PartitionSpec.equal_counts_fraction={self.equal_counts_fraction!r} applies to "
                             "label_skew='natural' with equal_counts=True only; here label_skew="
                             f"{self.label_skew!r}, equal_counts={self.equal_counts!r} allow 1")
        for key, allowed, default in (("equal_counts_pick", EQUAL_COUNT_PICKS, "random"),
                                      ("equal_counts_holdout", EQUAL_COUNT_HOLDOUTS, "kept")):
            value = getattr(self, key)
            if not isinstance(value, str) or value not in allowed:
                raise ValueError(f"PartitionSpec.{key}={value!r} is unknown; allowed: {allowed}")
            if value != default and not (self.equal_counts and self.label_skew == "natural"):
                raise ValueError(f"PartitionSpec.{key}={value!r} applies to label_skew='natural' with "
                                 f"equal_counts=True only; here label_skew={self.label_skew!r}, "
                                 f"equal_counts={self.equal_counts!r} allow {default!r}")
        if self.equal_counts_holdout == "rest" and self.equal_counts_fraction == 1:
            raise ValueError("PartitionSpec.equal_counts_holdout='rest' needs equal_counts_fraction < 1 "
                             "(with 1 the smallest domain keeps all of its samples and has none left to hold "
                             "out); "
                             "allowed: a fraction below 1, or equal_counts_holdout='kept'")
        if not isinstance(self.label_choice, str) or self.label_choice not in LABEL_CHOICES:
            raise ValueError(
                f"PartitionSpec.label_choice={self.label_choice!r} is unknown; allowed: {LABEL_CHOICES}"
            )


# ----------------------------------------------------------------------------------------------------
# helpers


def _check_labels(labels: np.ndarray) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got shape {y.shape} and dtype {y.dtype}")
    if y.size and y.min() < 0:
        raise ValueError(f"labels must be >= 0, found {int(y.min())}")
    return y.astype(np.int64, copy=False)


def _class_pools(y: np.ndarray, classes: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled indices of every class (in the order of ``classes``)."""
    return [rng.permutation(np.flatnonzero(y == c)).astype(np.int64) for c in classes]


def _proportional_counts(total: int, weights: np.ndarray, minimum: int = 0) -> np.ndarray:
    """Integers summing to ``total``, each ≥ ``minimum``, the rest split ∝ ``weights`` (largest remainder)."""
    k = len(weights)
    spare = total - minimum * k
    if spare < 0:
        raise ValueError(f"cannot give {k} parts at least {minimum} of {total} samples")
    w = np.asarray(weights, dtype=np.float64)
    raw = spare * w / w.sum() if w.sum() > 0 else np.full(k, spare / k)
    counts = np.floor(raw).astype(np.int64)
    short = spare - int(counts.sum())
    if short:
        counts[np.argsort(-(raw - counts), kind="stable")[:short]] += 1
    return counts + minimum


def _target_sizes(sizes: SizeSpec, num_clients: int, available: int, rng: np.random.Generator) -> np.ndarray:
    """Client sizes drawn from ``sizes``; shrunk proportionally when their total exceeds ``available``.

    Shrinking keeps the relative skew (FedDyn likewise rescales its lognormal draws to the data size).
    """
    n_k = sample_sizes(num_clients, sizes, rng)
    total = int(n_k.sum())
    if total > available:
        n_k = np.maximum(np.floor(n_k * (available / total)).astype(np.int64), 1)
        if int(n_k.sum()) > available:
            raise ValueError(
                f"num_devices={num_clients} devices cannot each hold a sample of {available} samples"
            )
    return n_k


# ----------------------------------------------------------------------------------------------------
# label skews


def _iid(y: np.ndarray, spec: PartitionSpec, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    n_k = None if spec.sizes is None else _target_sizes(spec.sizes, n_clients, len(y), rng)
    perm = rng.permutation(len(y)).astype(np.int64)
    if n_k is None:
        parts = np.array_split(perm, n_clients)
        smallest = min(len(p) for p in parts)  # array_split: counts differ by at most one
        return [p[:smallest] for p in parts] if spec.equal_counts else list(parts)
    bounds = np.cumsum(n_k)
    return list(np.split(perm[: bounds[-1]], bounds[:-1]))


def _dirichlet_niid_bench(
    y: np.ndarray, classes: np.ndarray, n_clients: int, alpha: float, min_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """NIID-Bench ``noniid-labeldir``: redraw the whole split until every client has ≥ min_size samples."""
    n = len(y)
    if min_size * n_clients > n:
        raise ValueError(
            f"PartitionSpec.min_size={min_size} × num_devices={n_clients} exceeds the {n} samples; "
            "lower min_size or num_devices"
        )
    cap = n / n_clients
    best = 0  # the largest smallest-client count a draw reached: the min_size this seed meets
    for _ in range(_MAX_DIRICHLET_DRAWS):
        held: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        counts = np.zeros(n_clients, dtype=np.int64)
        for pool in _class_pools(y, classes, rng):
            p = rng.dirichlet(np.full(n_clients, alpha))
            eligible = counts < cap  # NIID-Bench: clients already holding n/N samples get no more
            p = np.where(eligible, p, 0.0)
            if not p.sum() > 0:
                # every eligible share underflowed (tiny α): the α → 0 limit puts the class on one client
                p = np.zeros(n_clients)
                p[rng.choice(np.flatnonzero(eligible))] = 1.0
            cuts = (np.cumsum(p / p.sum()) * len(pool)).astype(np.int64)[:-1]
            for k, piece in enumerate(np.split(pool, cuts)):
                held[k].append(piece)
                counts[k] += len(piece)
        if counts.min() >= min_size:
            return [np.concatenate(h) for h in held]
        best = max(best, int(counts.min()))
    # No bound on min_size is sound before the split (config validation checks only min_size × num_devices
    # against the samples): at that limit 2 devices succeed in a few % of draws, 10 almost never, and below
    # it the odds turn on alpha, num_devices and the class counts (docs/datasets.md). So the error gives the
    # largest min_size a draw reached: the same seed makes the same draws and meets it at that one at latest.
    raise ValueError(
        f"partition key 'min_size' has value {min_size}, which no split of {_MAX_DIRICHLET_DRAWS} draws "
        f"reached with label_skew 'dirichlet', alpha {alpha} and num_devices {n_clients} ({n} samples, "
        f"{n / n_clients:g} per device on average; the smallest device of the best draw held {best}); "
        f"allowed: at most {best} for this seed, or a larger alpha or fewer devices"
    )


def _dirichlet_feddyn(
    y: np.ndarray, classes: np.ndarray, n_k: np.ndarray, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """FedDyn's unbalanced Dirichlet split: per-sample draws from each client's Dir(α) label prior.

    FedDyn resamples a class until it finds one that is not exhausted; removing exhausted classes from
    the prior and renormalising draws from the same conditional law and always terminates.
    """
    n_classes = len(classes)
    prior = rng.dirichlet(np.full(n_classes, alpha), size=len(n_k))
    pools = _class_pools(y, classes, rng)
    left = np.array([len(p) for p in pools], dtype=np.int64)
    quota = n_k.astype(np.int64).copy()
    taken: list[list[int]] = [[] for _ in range(len(n_k))]
    active = list(np.flatnonzero(quota > 0))
    cum = np.cumsum(prior, axis=1)
    while active:
        slot = int(rng.integers(len(active)))
        k = active[slot]
        row = cum[k]
        if not row[-1] > 0:  # all of its prior mass sat on exhausted classes: uniform over the rest
            row = np.cumsum((left > 0).astype(np.float64))
        c = min(int(np.searchsorted(row, rng.random() * row[-1], side="right")), n_classes - 1)
        while left[c] == 0:  # only reachable through float ties at a zero-width bin
            c = int(rng.choice(np.flatnonzero(left > 0)))
        left[c] -= 1
        taken[k].append(int(pools[c][left[c]]))
        quota[k] -= 1
        if quota[k] == 0:
            active.pop(slot)
        if left[c] == 0:
            prior[:, c] = 0.0
            cum = np.cumsum(prior, axis=1)
    return [np.asarray(t, dtype=np.int64) for t in taken]


def _dirichlet(
    y: np.ndarray, spec: PartitionSpec, n_clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    classes = np.unique(y)
    if spec.sizes is None:
        return _dirichlet_niid_bench(y, classes, n_clients, spec.alpha, spec.min_size, rng)
    n_k = _target_sizes(spec.sizes, n_clients, len(y), rng)
    return _dirichlet_feddyn(y, classes, n_k, spec.alpha, rng)


def _pathological_classes(
    n_classes: int, n_clients: int, m: int, rng: np.random.Generator
) -> list[list[int]]:
    """Class positions held by each client: NIID-Bench's i mod C first, then distinct random extras.

    When N < C, the classes no ``i mod C`` reaches are handed out first (round-robin over a random client
    order) so that no class, and hence no sample, is lost.
    """
    held = [[i % n_classes] for i in range(n_clients)]
    uncovered = rng.permutation(np.arange(n_clients, n_classes)) if n_clients < n_classes else []
    order = rng.permutation(n_clients)
    for j, c in enumerate(uncovered):
        held[order[j % n_clients]].append(int(c))
    for h in held:
        missing = m - len(h)
        if missing > 0:
            others = np.setdiff1d(np.arange(n_classes), h)
            h.extend(int(c) for c in rng.choice(others, size=missing, replace=False))
    return held


def _random_classes(n_classes: int, n_clients: int, m: int, rng: np.random.Generator) -> list[list[int]]:
    """Class positions held by each client: a uniform random m-subset each, independent across clients.

    Ruan et al. (2021, §5.1): "each device is assigned data from one label chosen uniformly at random".
    Classes that no client draws are left out.
    """
    return [[int(c) for c in rng.choice(n_classes, size=m, replace=False)] for _ in range(n_clients)]


def _pathological(
    y: np.ndarray, spec: PartitionSpec, n_clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    classes = np.unique(y)
    n_classes, m = len(classes), spec.m
    if m > n_classes:
        raise ValueError(f"PartitionSpec.m={m} exceeds the {n_classes} classes present in labels")
    cyclic = spec.label_choice == "cyclic"
    if cyclic and n_clients * m < n_classes:
        raise ValueError(
            f"pathological: num_devices={n_clients} × m={m} < {n_classes} classes; the samples of the "
            "classes nobody holds would be lost. Raise m or num_devices, or use label_choice='random' "
            "(Ruan et al.), which drops the classes nobody draws"
        )
    weights = np.ones(n_clients)
    n_k = None
    if spec.sizes is not None:
        n_k = np.maximum(_target_sizes(spec.sizes, n_clients, len(y), rng), m)  # room for its m classes
        weights = n_k.astype(np.float64)
    choose = _pathological_classes if cyclic else _random_classes
    held = choose(n_classes, n_clients, m, rng)
    holders: list[list[int]] = [[] for _ in range(n_classes)]
    for k, h in enumerate(held):
        for c in h:
            holders[c].append(k)
    pieces: list[dict[int, np.ndarray]] = [{} for _ in range(n_clients)]
    for c, pool in enumerate(_class_pools(y, classes, rng)):
        ks = holders[c]
        if not ks:  # label_choice="random": a class nobody drew is not dealt
            continue
        if len(pool) < len(ks):
            raise ValueError(
                f"pathological: class {int(classes[c])} has {len(pool)} samples but {len(ks)} clients hold "
                f"it (label_choice={spec.label_choice!r}); every holder needs at least one. Lower "
                "num_devices or m"
            )
        counts = _proportional_counts(len(pool), weights[ks], minimum=1)
        for k, piece in zip(ks, np.split(pool, np.cumsum(counts)[:-1]), strict=True):
            pieces[k][c] = piece
    if n_k is not None:
        pieces = [_trim(p, int(t)) for p, t in zip(pieces, n_k, strict=True)]
    elif spec.equal_counts:  # Ruan et al. §5.3: the same number of samples on every device
        smallest = min(sum(len(v) for v in p.values()) for p in pieces)
        pieces = [_trim(p, smallest) for p in pieces]
    return [np.concatenate(list(p.values())) for p in pieces]


def _trim(pieces: dict[int, np.ndarray], target: int) -> dict[int, np.ndarray]:
    """Keep ``target`` samples of a client, per class ∝ what it holds and at least one of each class."""
    have = np.array([len(v) for v in pieces.values()])
    if have.sum() <= target:
        return pieces
    keep = _proportional_counts(target, have - 1, minimum=1)
    keep = np.minimum(keep, have)
    return {c: v[:q] for (c, v), q in zip(pieces.items(), keep, strict=True)}


def _shards(y: np.ndarray, spec: PartitionSpec, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    n_shards = n_clients * spec.shards_per_client
    if n_shards > len(y):
        raise ValueError(
            f"shards: num_devices={n_clients} × shards_per_client={spec.shards_per_client} = {n_shards} "
            f"shards exceed the {len(y)} samples"
        )
    perm = rng.permutation(len(y))
    order = perm[np.argsort(y[perm], kind="stable")].astype(np.int64)  # by label, random within a label
    shards = np.array_split(order, n_shards)
    owner = rng.permutation(n_shards).reshape(n_clients, spec.shards_per_client)
    return [np.concatenate([shards[s] for s in row]) for row in owner]


def longtail_profile(num_classes: int, imbalance_ratio: float) -> np.ndarray:
    """Cao et al. (2019) exponential profile ρ^(r/(C−1)) for ranks r = 0…C−1 (head = 1, tail = ρ)."""
    return imbalance_ratio ** (np.arange(num_classes) / (num_classes - 1))


def _longtail(
    y: np.ndarray, spec: PartitionSpec, n_clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    classes = np.unique(y)
    n_classes = len(classes)
    if n_classes < 2:
        raise ValueError(f"longtail needs at least 2 classes in labels, found {n_classes}")
    profile = longtail_profile(n_classes, spec.imbalance_ratio)
    if spec.sizes is None:
        head = math.floor(spec.client_fraction * len(y) / n_classes + 1e-9)  # 1e-9: float error, 1/3 · 300
        heads = np.full(n_clients, head, dtype=np.float64)
    else:
        heads = _target_sizes(spec.sizes, n_clients, len(y), rng) / profile.sum()
    pools = _class_pools(y, classes, rng)
    used = np.zeros(n_classes, dtype=np.int64)
    parts = []
    for k in range(n_clients):
        counts = (heads[k] * profile).astype(np.int64)  # Cao et al.: int(img_max * ratio ** (r / (C - 1)))
        if counts[-1] < 1:
            raise ValueError(
                f"longtail: client {k}'s head class holds {int(counts[0])} samples, so its tail "
                f"(× imbalance_ratio={spec.imbalance_ratio}) rounds to 0; raise client_fraction or the sizes"
            )
        if spec.draw == "independent":
            parts.append(_longtail_draw(pools, counts, k, rng))
            continue
        if k % n_classes == 0:  # a new block of C clients: a fresh class order and rotation per client
            base, shifts = rng.permutation(n_classes), rng.permutation(n_classes)
        # Within a block every class takes every rank exactly once, so all classes are drawn on equally
        # and disjoint clients last as long as the data can (independent random orders exhaust the class
        # that happens to lead most often).
        order = np.roll(base, -shifts[k % n_classes])  # this client's class at rank r is order[r]
        chunk = []
        for r, c in enumerate(order):
            if used[c] + counts[r] > len(pools[c]):
                raise ValueError(
                    f"longtail: class {int(classes[c])} runs out at client {k} of {n_clients}; clients are "
                    f"disjoint, so lower num_devices or client_fraction={spec.client_fraction}"
                )
            chunk.append(pools[c][used[c] : used[c] + counts[r]])
            used[c] += counts[r]
        parts.append(np.concatenate(chunk))
    return parts


def _longtail_draw(pools: list[np.ndarray], counts: np.ndarray, k: int, rng: np.random.Generator
                   ) -> np.ndarray:
    """FedFOR's fresh client: counts[r] samples of the class at rank r of its own random class order,
    drawn without replacement from all of that class (other clients may hold the same samples)."""
    order = rng.permutation(len(pools))
    chunk = []
    for r, c in enumerate(order):
        if counts[r] > len(pools[c]):
            raise ValueError(f"longtail: client {k}'s rank-{r} class needs {int(counts[r])} samples; "
                             f"class position {int(c)} has {len(pools[c])}: lower client_fraction")
        chunk.append(rng.choice(pools[c], size=int(counts[r]), replace=False))
    return np.concatenate(chunk)


def _natural(
    client_ids: np.ndarray | None, n: int, n_clients: int, rng: np.random.Generator, min_samples: int = 0
) -> list[np.ndarray]:
    if client_ids is None:
        raise ValueError("label_skew='natural' needs client_ids (writer/speaker id of every sample)")
    ids = np.asarray(client_ids)
    if ids.shape != (n,):
        raise ValueError(f"client_ids has shape {ids.shape}; expected ({n},), one id per label")
    _, inverse = np.unique(ids, return_inverse=True)
    n_ids = int(inverse.max()) + 1 if n else 0
    counts = np.bincount(inverse, minlength=n_ids)
    eligible = np.flatnonzero(counts >= min_samples)
    if n_clients > len(eligible):
        raise ValueError(f"natural (one device per writer or speaker): num_devices has value {n_clients}, "
                         f"which exceeds the {len(eligible)} distinct client ids with >= "
                         f"min_samples={min_samples} samples (of {n_ids} ids); allowed: num_devices <= "
                         f"{len(eligible)}")
    order = np.argsort(inverse, kind="stable").astype(np.int64)
    groups = np.split(order, np.cumsum(counts)[:-1])
    chosen = (eligible if n_clients == len(eligible)
              else np.sort(rng.choice(eligible, n_clients, replace=False)))
    return [groups[j] for j in chosen]


def partition(
    labels: np.ndarray,
    spec: PartitionSpec,
    num_clients: int,
    seed: int,
    client_ids: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Deal the samples behind ``labels`` to ``num_clients`` clients; one sorted int64 index array each.

    Pure: the result depends only on the arguments; one ``numpy.random.default_rng(seed)`` drives every
    draw (the size skew, when given, is drawn first). Clients are pairwise disjoint (except longtail with
    ``draw="independent"``, FedFOR's overlapping fresh clients); iid, shards,
    pathological with ``label_choice="cyclic"`` and natural (with all ids) keep every sample unless a size
    skew asks for fewer; pathological with ``"random"`` keeps every sample of the classes drawn.
    ``client_ids`` is used by ``natural`` only. Errors call ``num_clients`` num_devices, the config key and
    ``hetfl split`` flag it comes from.
    """
    if not isinstance(spec, PartitionSpec):
        raise TypeError(f"spec must be a PartitionSpec, got {type(spec).__name__}")
    y = _check_labels(labels)
    if not _is_int(num_clients) or num_clients < 1:
        raise ValueError(f"num_devices={num_clients!r} must be an integer >= 1")
    if not _is_int(seed) or seed < 0:
        raise ValueError(f"seed={seed!r} must be an integer >= 0")
    if num_clients > len(y):
        raise ValueError(f"num_devices={num_clients} exceeds the {len(y)} samples")
    n_clients = int(num_clients)
    rng = np.random.default_rng(int(seed))
    skew = spec.label_skew
    if skew == "iid":
        parts = _iid(y, spec, n_clients, rng)
    elif skew == "dirichlet":
        parts = _dirichlet(y, spec, n_clients, rng)
    elif skew == "pathological":
        parts = _pathological(y, spec, n_clients, rng)
    elif skew == "shards":
        parts = _shards(y, spec, n_clients, rng)
    elif skew == "longtail":
        parts = _longtail(y, spec, n_clients, rng)
    else:
        parts = _natural(client_ids, len(y), n_clients, rng, spec.min_samples)
        if spec.equal_counts:  # drawn after the clients, so the untrimmed split's draws are unchanged
            smallest = min(len(p) for p in parts)
            if spec.equal_counts_fraction != 1:  # FedBN's DomainNet: int(0.05 * min_data_len) per domain
                smallest = int(spec.equal_counts_fraction * smallest)
                if smallest < 1:
                    raise ValueError(f"partition equal_counts_fraction={spec.equal_counts_fraction!r} keeps "
                                     f"int({spec.equal_counts_fraction!r} * "
                                     f"{min(len(p) for p in parts)}) = 0 "
                                     "samples per device; allowed: a fraction that keeps at least one")
            # natural groups are in sample order (a stable sort by id): "first" is the source's file order
            parts = [p[:smallest] if spec.equal_counts_pick == "first" else rng.permutation(p)[:smallest]
                     for p in parts]
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def local_holdout(
    parts: list[np.ndarray], test_fraction: float, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split every client's indices into a local (train, test) pair.

    Per client ``n_test = max(1, round(test_fraction · n))`` and ``n_train ≥ 1``; LEAF's per-user split
    and FedProx's truncate the training share instead (``n_train = int((1 − f)·n)``), which gives a test
    set one sample larger for some n (docs/datasets.md). One ``default_rng(seed)`` serves the clients in
    order.
    """
    if not _is_int(seed) or seed < 0:
        raise ValueError(f"seed={seed!r} must be an integer >= 0")
    rng = np.random.default_rng(int(seed))
    train, test = [], []
    for k, part in enumerate(parts):
        idx = np.asarray(part, dtype=np.int64)
        if len(idx) < 2:
            raise ValueError(f"client {k} holds {len(idx)} samples; a local train/test split needs >= 2")
        tr, te = holdout_split(len(idx), test_fraction, rng)
        train.append(np.sort(idx[tr]))
        test.append(np.sort(idx[te]))
    return train, test


def rest_holdout(
    kept: list[np.ndarray], whole: list[np.ndarray], test_fraction: float, pick: str, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A local (train, test) pair per client for ``equal_counts_holdout="rest"``: client k trains on all of
    ``kept[k]`` (its trimmed samples) and its test part comes from the samples of ``whole[k]`` (the same
    client untrimmed) that the trim left out, as FedBN's DomainNet code validates on images apart from
    those it trains on (``federated/fed_domainnet.py:157-161``).

    ``n_test = max(1, round(test_fraction / (1 − test_fraction) · n_kept))``: ``test_fraction`` stays the
    test part's share of the client's samples, so 0.5 holds out as many as it trains on (FedBN's
    ``val_len`` = ``min_data_len``). ``pick`` "first": the last ``n_test`` samples of the client in sample
    order (FedBN's ``list(range(len(trainset)))[-val_len:]``); "random": a uniform subset of the samples
    left out, one ``default_rng(seed)`` serving the clients in order. A client with fewer samples left
    than ``n_test`` is an error naming it.
    """
    if not isinstance(test_fraction, int | float | np.floating) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction={test_fraction!r} must be a number in (0, 1)")
    if pick not in EQUAL_COUNT_PICKS:
        raise ValueError(f"pick={pick!r} is unknown; allowed: {EQUAL_COUNT_PICKS}")
    if len(kept) != len(whole):
        raise ValueError(f"rest_holdout: {len(kept)} trimmed clients but {len(whole)} untrimmed ones")
    rng = np.random.default_rng(int(seed))
    train, test = [], []
    for k, (tight, full) in enumerate(zip(kept, whole, strict=True)):
        tight = np.sort(np.asarray(tight, dtype=np.int64))
        rest = np.setdiff1d(np.asarray(full, dtype=np.int64), tight)  # sorted: sample order
        if len(rest) + len(tight) != len(full):
            raise ValueError(f"rest_holdout: client {k}'s kept samples are not all among its untrimmed ones")
        n_test = max(1, round(test_fraction / (1 - test_fraction) * len(tight)))
        if len(rest) < n_test:
            raise ValueError(f"partition equal_counts_holdout 'rest': device {k} keeps {len(tight)} samples "
                             f"and has {len(rest)} left, fewer than the {n_test} its local test part needs "
                             f"(test_fraction {test_fraction:g}); allowed: a smaller test_fraction or "
                             "equal_counts_fraction, or equal_counts_holdout 'kept'")
        part = rest[-n_test:] if pick == "first" else np.sort(rng.choice(rest, n_test, replace=False))
        train.append(tight)
        test.append(part)
    return train, test


def temporal_holdout(
    parts: list[np.ndarray], test_fraction: float, gap: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split every client's indices into a local (train, test) pair in sample order, LEAF's way for
    sliding-window text (Shakespeare): the last ``n_test = max(1, round(test_fraction · n))`` samples are
    the test part, and only samples more than ``gap`` positions before the first of them train.

    A window of Shakespeare's is its predecessor shifted by one character, so a random holdout gives test
    windows whose inputs and targets sit in the training windows next to them. LEAF's
    ``data/utils/split_data.py`` (``-t sample``) keeps a user's first samples for training and starts
    the test part ``seq_len − 1`` = 79 samples after them; ``gap=79`` does the same. Sample order must
    be text order within a client, its samples together (LEAF's JSON files are; ``hetfl split`` checks
    it with ``sources.check_text_order`` and the loader keeps a client's rows together). No randomness:
    the split is the same for every seed.
    """
    if not _is_int(gap) or gap < 0:
        raise ValueError(f"gap={gap!r} must be an integer >= 0")
    if not isinstance(test_fraction, int | float | np.floating) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction={test_fraction!r} must be a number in (0, 1)")
    train, test = [], []
    for k, part in enumerate(parts):
        idx = np.sort(np.asarray(part, dtype=np.int64))
        n_test = max(1, round(test_fraction * len(idx)))
        held = idx[len(idx) - n_test:]
        kept = idx[: max(len(idx) - n_test, 0)]
        kept = kept[kept < (held[0] - gap if len(held) else 0)]
        if len(kept) < 1:
            need = next(m for m in range(len(idx) + 1, len(idx) + 2 * gap + 10 ** 6)
                        if m - max(1, round(test_fraction * m)) - gap >= 1)  # for contiguous samples
            raise ValueError(
                f"client {k} holds {len(idx)} samples; a temporal train/test split (test_fraction "
                f"{test_fraction}: {n_test} test samples, then a gap of {gap} so that no test window "
                f"overlaps a training one) needs >= {need}: raise partition.min_samples to at least {need} "
                f"(LEAF's -k) so that smaller speakers are not drawn, or lower test_fraction")
        train.append(kept)
        test.append(held)
    return train, test


def label_histogram(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """[N, C] int64 count of each class at each client."""
    y = _check_labels(labels)
    if not _is_int(num_classes) or num_classes < 1 or (y.size and y.max() >= num_classes):
        raise ValueError(f"num_classes={num_classes!r} must be an integer > every label")
    hist = np.zeros((len(parts), int(num_classes)), dtype=np.int64)
    for k, part in enumerate(parts):
        hist[k] = np.bincount(y[np.asarray(part, dtype=np.int64)], minlength=int(num_classes))
    return hist


def describe(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> pd.DataFrame:
    """One row per client: ``size``, ``classes`` (how many are present) and the count of each class.

    The class columns are named ``"0"`` … ``"C-1"`` (strings, so the frame writes to Parquet/CSV as is).
    """
    import pandas as pd  # here only: a split job (`hetfl split`) needs none of pandas' 0.4 s import

    hist = label_histogram(parts, labels, num_classes)
    frame = pd.DataFrame(hist, columns=[str(c) for c in range(hist.shape[1])])
    frame.insert(0, "classes", (hist > 0).sum(axis=1))
    frame.insert(0, "size", hist.sum(axis=1))
    frame.index.name = "client"
    return frame
