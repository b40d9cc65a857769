"""Partitioners: properties over random seeds and parameters, plus hand-checked definitions."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetfl.data.partition import (
    PartitionSpec,
    describe,
    label_histogram,
    local_holdout,
    longtail_profile,
    partition,
    temporal_holdout,
)
from hetfl.data.sizes import SizeSpec, sample_sizes
from hetfl.reports.split_figures import plot_label_distribution

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEEDS = st.integers(0, 2**31 - 1)


@st.composite
def labelled(draw, min_per_class=1, max_per_class=40, max_classes=8):
    """A shuffled label vector: 2..max_classes classes, each with min..max samples."""
    n_classes = draw(st.integers(2, max_classes))
    counts = draw(st.lists(st.integers(min_per_class, max_per_class), min_size=n_classes, max_size=n_classes))
    y = np.repeat(np.arange(n_classes), counts)
    return np.random.default_rng(draw(SEEDS)).permutation(y)


def assert_disjoint(parts, n):
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    assert flat.dtype == np.int64
    assert len(flat) == len(np.unique(flat)), "a sample landed in two clients"
    assert flat.size == 0 or (flat.min() >= 0 and flat.max() < n)
    return flat


def assert_keeps_all(parts, n):
    flat = assert_disjoint(parts, n)
    np.testing.assert_array_equal(np.sort(flat), np.arange(n))


# ---------------------------------------------------------------------------------------------------
# coverage: disjoint always, complete where the definition keeps everything


@FAST
@given(y=labelled(), n_clients=st.integers(1, 10), seed=SEEDS)
def test_iid_keeps_every_sample_once(y, n_clients, seed):
    parts = partition(y, PartitionSpec("iid"), min(n_clients, len(y)), seed)
    assert_keeps_all(parts, len(y))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


@FAST
@given(y=labelled(min_per_class=4), n_clients=st.integers(1, 12), s=st.integers(1, 3), seed=SEEDS)
def test_shards_keep_every_sample_and_near_equal_sizes(y, n_clients, s, seed):
    n_clients = min(n_clients, len(y) // s)
    parts = partition(y, PartitionSpec("shards", shards_per_client=s), n_clients, seed)
    assert_keeps_all(parts, len(y))
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() - sizes.min() <= s  # s shards each, shard sizes differ by at most one


@FAST
@given(data=st.data(), y=labelled(min_per_class=12), seed=SEEDS)
def test_pathological_exactly_m_classes_and_keeps_everything(data, y, seed):
    n_classes = len(np.unique(y))
    m = data.draw(st.integers(1, n_classes))
    n_clients = data.draw(st.integers(-(-n_classes // m), 12))  # N·m >= C so no class is orphaned
    parts = partition(y, PartitionSpec("pathological", m=m), n_clients, seed)
    assert_keeps_all(parts, len(y))
    hist = label_histogram(parts, y, n_classes)
    np.testing.assert_array_equal((hist > 0).sum(axis=1), m)


@FAST
@given(y=labelled(min_per_class=30), n_clients=st.integers(1, 6), seed=SEEDS)
def test_pathological_m1_is_one_label_per_device(y, n_clients, seed):
    n_classes = len(np.unique(y))
    parts = partition(y, PartitionSpec("pathological", m=1), max(n_clients, n_classes), seed)
    hist = label_histogram(parts, y, n_classes)
    assert ((hist > 0).sum(axis=1) == 1).all()


def test_pathological_cyclic_is_unchanged_niid_bench():
    """label_choice="cyclic" (the default) is pinned: stored splits depend on these exact draws."""
    y = np.repeat(np.arange(5), 4)
    expected = [[0, 1, 2, 3, 4, 5], [6, 7, 16, 18], [8, 9, 10, 11, 17], [12, 13, 14, 15, 19]]
    for choice in ({}, {"label_choice": "cyclic"}):
        spec = PartitionSpec("pathological", m=2, **choice)
        assert [p.tolist() for p in partition(y, spec, 4, 3)] == expected
    # client i holds class i mod C
    parts = partition(y, PartitionSpec("pathological", m=1), 5, 11)
    assert [np.unique(y[p]).tolist() for p in parts] == [[0], [1], [2], [3], [4]]


def test_equal_counts_gives_every_device_the_smallest_count():
    """Ruan et al. §5.3, "All devices are given the same number of samples": a one-label random split of
    10 × 6 samples to 5 devices (seed 2 draws labels 8, 2, 1, 2, 4: label 2 is split two ways, 3 each)
    trims every device to 3, one class each; the rng's draws are those of the untrimmed split."""
    y = np.repeat(np.arange(10), 6)
    loose = partition(y, PartitionSpec("pathological", m=1, label_choice="random"), 5, 2)
    assert [len(p) for p in loose] == [6, 3, 6, 3, 6]
    spec = PartitionSpec("pathological", m=1, label_choice="random", equal_counts=True)
    parts = partition(y, spec, 5, 2)
    assert [len(p) for p in parts] == [3] * 5
    for tight, full in zip(parts, loose, strict=True):
        assert set(tight) <= set(full) and len(np.unique(y[tight])) == 1
    assert_disjoint(parts, len(y))


def test_equal_counts_keeps_each_held_class_in_proportion():
    """m = 2 cyclic on 4 classes of 12 and 3 devices: trimmed to the smallest device, each device keeps
    at least one sample of both its classes, the rest in proportion to what it held."""
    y = np.repeat(np.arange(4), 12)
    loose = partition(y, PartitionSpec("pathological", m=2), 3, 1)
    parts = partition(y, PartitionSpec("pathological", m=2, equal_counts=True), 3, 1)
    smallest = min(len(p) for p in loose)
    assert [len(p) for p in parts] == [smallest] * 3
    for tight, full in zip(parts, loose, strict=True):
        np.testing.assert_array_equal(np.unique(y[tight]), np.unique(y[full]))


def test_equal_counts_iid_drops_the_remainder():
    parts = partition(np.repeat(np.arange(10), 7), PartitionSpec("iid", equal_counts=True), 4, 0)
    assert [len(p) for p in parts] == [17] * 4  # 70 = 18 + 18 + 17 + 17 untrimmed
    loose = partition(np.repeat(np.arange(10), 7), PartitionSpec("iid"), 4, 0)
    assert all(set(t) <= set(f) for t, f in zip(parts, loose, strict=True))


@FAST
@given(data=st.data(), y=labelled(min_per_class=12), seed=SEEDS)
def test_pathological_random_m_classes_keeps_drawn_classes(data, y, seed):
    """Ruan et al.: m classes per client drawn uniformly; classes nobody draws are dropped, no error."""
    n_classes = len(np.unique(y))
    m = data.draw(st.integers(1, n_classes))
    n_clients = data.draw(st.integers(1, 12))  # N·m < C allowed; <= 12 holders per class of >= 12 samples
    parts = partition(y, PartitionSpec("pathological", m=m, label_choice="random"), n_clients, seed)
    flat = assert_disjoint(parts, len(y))
    hist = label_histogram(parts, y, n_classes)
    np.testing.assert_array_equal((hist > 0).sum(axis=1), m)
    drawn = np.flatnonzero(hist.sum(axis=0) > 0)
    np.testing.assert_array_equal(np.sort(flat), np.flatnonzero(np.isin(y, drawn)))


def test_pathological_random_is_not_i_mod_c():
    y = np.repeat(np.arange(10), 20)
    spec = PartitionSpec("pathological", m=1, label_choice="random")
    first = {int(y[partition(y, spec, 10, s)[0][0]]) for s in range(200)}
    assert first == set(range(10))  # client 0's class varies over seeds (cyclic: always 0)
    parts = partition(y, spec, 10, 0)
    held = [int(np.unique(y[p])[0]) for p in parts]
    assert held != list(range(10))
    assert len(set(held)) < 10  # independent draws collide: some classes are left out (p ≈ 0.9996)


def test_pathological_random_fewer_clients_than_classes():
    y = np.repeat(np.arange(4), 5)
    parts = partition(y, PartitionSpec("pathological", m=1, label_choice="random"), 3, 0)  # cyclic refuses
    assert all(len(np.unique(y[p])) == 1 for p in parts)
    drawn = {int(y[p[0]]) for p in parts}
    assert sum(len(p) for p in parts) == 5 * len(drawn) < len(y)  # the undrawn classes are dropped


@FAST
@given(y=labelled(min_per_class=5), alpha=st.floats(0.05, 100), n_clients=st.integers(1, 6), seed=SEEDS)
def test_dirichlet_keeps_every_sample_and_min_size(y, alpha, n_clients, seed):
    min_size = 2
    n_clients = min(n_clients, len(y) // (2 * min_size))
    spec = PartitionSpec("dirichlet", alpha=alpha, min_size=min_size)
    try:
        parts = partition(y, spec, n_clients, seed)
    except ValueError as err:  # the bounded NIID-Bench redraw may give up for tiny data and small α
        assert "min_size" in str(err)
        return
    assert_keeps_all(parts, len(y))
    assert min(len(p) for p in parts) >= min_size


@FAST
@given(y=labelled(), n_ids=st.integers(1, 8), data=st.data(), seed=SEEDS)
def test_natural_one_client_per_id(y, n_ids, data, seed):
    ids = np.random.default_rng(seed).integers(0, n_ids, len(y)).astype(str)
    ids = np.char.add("writer", ids)
    distinct = len(np.unique(ids))
    n_clients = data.draw(st.integers(1, distinct))
    parts = partition(y, PartitionSpec("natural"), n_clients, seed, client_ids=ids)
    flat = assert_disjoint(parts, len(y))
    for p in parts:
        assert len(np.unique(ids[p])) == 1  # one writer per client ...
        assert len(p) == (ids == ids[p[0]]).sum()  # ... with all of its samples
    if n_clients == distinct:
        assert len(flat) == len(y)


# ---------------------------------------------------------------------------------------------------
# Dirichlet concentration


def test_dirichlet_min_size_no_draw_reaches_names_the_key_and_the_largest_that_one_did():
    """min_size at its count limit (min_size x num_devices = the samples) passed validation and then failed
    after 1,000 draws with no value to use instead. No bound on min_size is sound before the split (at that
    limit 2 devices succeed in a few % of draws, 10 almost never; it depends on alpha, num_devices and the
    class counts: docs/datasets.md), so the split job's error names the key, the value and the largest
    min_size one of its draws reached, which the same seed then meets (the draws are the same)."""
    y = np.repeat(np.arange(10), 40)  # 400 samples, 10 devices: the count limit is 40
    with pytest.raises(ValueError) as err:
        partition(y, PartitionSpec("dirichlet", alpha=0.5, min_size=40), 10, seed=0)
    text = str(err.value)
    assert "partition key 'min_size' has value 40, which no split of 1000 draws reached" in text, text
    best = int(re.search(r"allowed: at most (\d+) for this seed", text).group(1))
    assert 0 < best < 40, text
    parts = partition(y, PartitionSpec("dirichlet", alpha=0.5, min_size=best), 10, seed=0)
    assert min(len(p) for p in parts) >= best


@settings(max_examples=8, deadline=None)
@given(seed=SEEDS)
def test_dirichlet_large_alpha_is_near_iid(seed):
    y = np.random.default_rng(seed).permutation(np.repeat(np.arange(10), 400))
    parts = partition(y, PartitionSpec("dirichlet", alpha=1000.0), 10, seed)
    hist = label_histogram(parts, y, 10).astype(float)
    local = hist / hist.sum(axis=1, keepdims=True)
    total_variation = 0.5 * np.abs(local - 0.1).sum(axis=1)
    assert total_variation.max() < 0.1


@settings(max_examples=8, deadline=None)
@given(seed=SEEDS)
def test_dirichlet_small_alpha_is_near_single_class(seed):
    # 20 clients for 10 classes: with N = C, NIID-Bench's int() truncation leaves a client one sample
    # short of its n/N cap, so it takes a second whole class (see docs/datasets.md)
    y = np.random.default_rng(seed).permutation(np.repeat(np.arange(10), 400))
    parts = partition(y, PartitionSpec("dirichlet", alpha=0.01, min_size=0), 20, seed)
    hist = label_histogram(parts, y, 10).astype(float)
    size = hist.sum(axis=1)
    held = size > 0
    assert hist.max(axis=1).sum() / size.sum() > 0.85  # samples in their client's dominant class
    share = hist[held] / size[held, None]
    effective_classes = 1.0 / (share**2).sum(axis=1)  # inverse Simpson index: 1 = a single class
    assert np.average(effective_classes, weights=size[held]) < 1.5


@settings(max_examples=10, deadline=None)
@given(seed=SEEDS, alpha=st.sampled_from([0.01, 0.3, 10.0]))
def test_dirichlet_with_size_skew_follows_feddyn_sizes(seed, alpha):
    y = np.random.default_rng(seed).permutation(np.repeat(np.arange(5), 200))
    sizes = SizeSpec("lognormal", size=80, sigma=0.5, max_size=None)
    parts = partition(y, PartitionSpec("dirichlet", alpha=alpha, sizes=sizes), 10, seed)
    assert_disjoint(parts, len(y))
    expected = sample_sizes(10, sizes, np.random.default_rng(seed))  # the size draw comes first
    assert expected.sum() <= len(y)
    np.testing.assert_array_equal([len(p) for p in parts], expected)


def test_dirichlet_feddyn_small_alpha_concentrates_each_client():
    y = np.repeat(np.arange(10), 500)
    sizes = SizeSpec("equal", size=100)
    parts = partition(y, PartitionSpec("dirichlet", alpha=0.01, sizes=sizes), 20, seed=3)
    hist = label_histogram(parts, y, 10)
    assert (hist.max(axis=1) / hist.sum(axis=1)).mean() > 0.9


# ---------------------------------------------------------------------------------------------------
# long tail (FedFOR / Cao et al.)


@FAST
@given(
    n_per_class=st.integers(200, 600),
    n_classes=st.integers(2, 10),
    ratio=st.sampled_from([0.01, 0.05, 0.1, 0.5, 1.0]),
    n_clients=st.integers(1, 8),
    seed=SEEDS,
)
def test_longtail_ratio_per_client(n_per_class, n_classes, ratio, n_clients, seed):
    y = np.random.default_rng(seed).permutation(np.repeat(np.arange(n_classes), n_per_class))
    spec = PartitionSpec("longtail", imbalance_ratio=ratio, client_fraction=1.0 / n_clients)
    try:
        parts = partition(y, spec, n_clients, seed)
    except ValueError as err:  # the tail rounds to zero samples
        assert "rounds to 0" in str(err)
        assert int(n_per_class / n_clients * ratio) < 1
        return
    assert_disjoint(parts, len(y))
    hist = label_histogram(parts, y, n_classes)
    head = int(n_per_class / n_clients)
    for row in hist:
        assert (row > 0).all()
        assert row.max() == head
        assert abs(row.min() - ratio * row.max()) <= 1  # the configured ratio within rounding
        profile = (head * longtail_profile(n_classes, ratio)).astype(int)
        np.testing.assert_array_equal(np.sort(row)[::-1], profile)


def test_longtail_fedfor_imbalanced_cifar10_shape():
    """CIFAR-10 sized labels: each client ≈ 2.5 % of the data, ratio 0.01, different tails."""
    y = np.repeat(np.arange(10), 5000)
    parts = partition(y, PartitionSpec("longtail", imbalance_ratio=0.01, client_fraction=0.1), 20, seed=0)
    assert_disjoint(parts, len(y))
    fractions = np.array([len(p) for p in parts]) / len(y)
    assert np.allclose(fractions, 0.025, atol=0.002)
    hist = label_histogram(parts, y, 10)
    assert (hist.max(axis=1) == 500).all() and (hist.min(axis=1) == 5).all()
    assert len({tuple(np.argsort(-row, kind="stable")) for row in hist}) > 10  # class orders differ


def test_longtail_independent_draws_are_fedfor_fresh_clients():
    """FedFOR's draws: 100 clients of ≈ 2.5 % each from CIFAR-10-sized labels (disjoint dealing stops at
    40), each with its own long tail of ratio 0.01; clients overlap, a client holds no sample twice."""
    y = np.random.default_rng(1).permutation(np.repeat(np.arange(10), 5000))
    spec = PartitionSpec("longtail", imbalance_ratio=0.01, client_fraction=0.1, draw="independent")
    parts = partition(y, spec, 100, seed=0)
    hist = label_histogram(parts, y, 10)
    # head 500, then int(500 · 0.01^(r/9)): e.g. r = 6: 500 · 10^(−4/3) = 23.2 → 23; 1,236 in all
    expected = [500, 299, 179, 107, 64, 38, 23, 13, 8, 5]
    for row in hist:
        np.testing.assert_array_equal(np.sort(row)[::-1], expected)
        assert row.min() / row.max() == pytest.approx(0.01)  # the per-client imbalance ratio
    np.testing.assert_allclose([len(p) / len(y) for p in parts], sum(expected) / 50000)  # 2.47 %
    assert all(len(np.unique(p)) == len(p) for p in parts)
    assert len(np.unique(np.concatenate(parts))) < sum(len(p) for p in parts)  # clients overlap
    assert len({tuple(np.argsort(-row, kind="stable")) for row in hist}) > 50  # their own class orders
    again = partition(y, spec, 100, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_longtail_draw_is_checked():
    with pytest.raises(ValueError, match="draw='independent' applies to label_skew='longtail' only"):
        PartitionSpec("iid", draw="independent")
    with pytest.raises(ValueError, match="draw='fresh' is unknown"):
        PartitionSpec("longtail", draw="fresh")


def test_longtail_reports_exhaustion():
    y = np.repeat(np.arange(10), 100)
    with pytest.raises(ValueError, match="runs out"):
        partition(y, PartitionSpec("longtail", imbalance_ratio=0.1, client_fraction=0.5), 10, seed=0)


# ---------------------------------------------------------------------------------------------------
# size skew composed with label skew


@FAST
@given(y=labelled(min_per_class=20), n_clients=st.integers(1, 8), seed=SEEDS,
       dist=st.sampled_from(["pareto", "lognormal", "equal"]))
def test_iid_size_skew_follows_sample_sizes(y, n_clients, seed, dist):
    sizes = SizeSpec(dist, size=5, max_size=60)
    parts = partition(y, PartitionSpec("iid", sizes=sizes), n_clients, seed)
    assert_disjoint(parts, len(y))
    drawn = sample_sizes(n_clients, sizes, np.random.default_rng(seed))
    got = np.array([len(p) for p in parts])
    if drawn.sum() <= len(y):
        np.testing.assert_array_equal(got, drawn)
    else:  # shrunk to fit, relative order kept
        assert got.sum() <= len(y)
        assert (np.diff(got[np.argsort(drawn, kind="stable")]) >= 0).all()


@FAST
@given(y=labelled(min_per_class=15), n_clients=st.integers(2, 8), m=st.integers(1, 2), seed=SEEDS)
def test_pathological_size_skew_keeps_m_classes(y, n_clients, m, seed):
    n_classes = len(np.unique(y))
    n_clients = max(n_clients, -(-n_classes // m))
    sizes = SizeSpec("pareto", size=3, max_size=50)
    parts = partition(y, PartitionSpec("pathological", m=m, sizes=sizes), n_clients, seed)
    assert_disjoint(parts, len(y))
    hist = label_histogram(parts, y, n_classes)
    np.testing.assert_array_equal((hist > 0).sum(axis=1), m)


@pytest.mark.parametrize("label_choice", ["cyclic", "random"])
def test_pathological_size_skew_gives_the_drawn_sizes(label_choice):
    """Each client holds max(n_k, m) samples, n_k drawn first from the size spec with the split's rng
    (classes of 200 leave room for every draw); before, only the class counts were checked."""
    from hetfl.data.sizes import sample_sizes

    y = np.repeat(np.arange(10), 200)
    sizes = SizeSpec("pareto", size=3, max_size=50)
    for seed in range(4):
        spec = PartitionSpec("pathological", m=2, sizes=sizes, label_choice=label_choice)
        parts = partition(y, spec, 6, seed)
        drawn = np.maximum(sample_sizes(6, sizes, np.random.default_rng(seed)), 2)
        np.testing.assert_array_equal([len(p) for p in parts], drawn)


def test_trim_keeps_one_of_each_class_and_splits_the_rest_by_what_is_left():
    """_trim weights classes by what each holds beyond its one kept sample: a 1-sample class gets no more
    (weighting by the whole count gives it the remainder, then the cap loses a sample: 4 kept, not 5)."""
    from hetfl.data.partition import _trim

    kept = _trim({0: np.arange(1), 1: np.arange(10, 15)}, 5)
    assert {c: len(v) for c, v in kept.items()} == {0: 1, 1: 4}
    kept = _trim({0: np.arange(4), 1: np.arange(10, 22)}, 8)  # beyond one each: 3 and 11 → 6 ∝ (3, 11)
    assert {c: len(v) for c, v in kept.items()} == {0: 2, 1: 6}


@FAST
@given(y=labelled(min_per_class=15), n_clients=st.integers(1, 8), m=st.integers(1, 2), seed=SEEDS)
def test_pathological_random_size_skew_keeps_m_classes(y, n_clients, m, seed):
    n_classes = len(np.unique(y))
    sizes = SizeSpec("pareto", size=3, max_size=50)
    spec = PartitionSpec("pathological", m=m, sizes=sizes, label_choice="random")
    parts = partition(y, spec, n_clients, seed)
    assert_disjoint(parts, len(y))
    hist = label_histogram(parts, y, n_classes)
    np.testing.assert_array_equal((hist > 0).sum(axis=1), m)


# ---------------------------------------------------------------------------------------------------
# determinism, holdout, describe, figure


@pytest.mark.parametrize(
    "spec",
    [PartitionSpec("iid"), PartitionSpec("dirichlet", alpha=0.5, min_size=1),
     PartitionSpec("pathological", m=2), PartitionSpec("pathological", m=2, label_choice="random"),
     PartitionSpec("shards"), PartitionSpec("longtail", imbalance_ratio=0.1, client_fraction=0.2)],
    ids=lambda s: s.label_skew if s.label_choice == "cyclic" else f"{s.label_skew}-{s.label_choice}",
)
def test_same_seed_same_partition_other_seed_other(spec):
    y = np.random.default_rng(0).permutation(np.repeat(np.arange(5), 100))
    a, b, c = (partition(y, spec, 5, s) for s in (7, 7, 8))
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c, strict=True))
    assert all((np.diff(p) > 0).all() for p in a)  # sorted index arrays


@FAST
@given(sizes=st.lists(st.integers(2, 50), min_size=1, max_size=8), frac=st.floats(0.05, 0.5), seed=SEEDS)
def test_local_holdout_splits_each_client(sizes, frac, seed):
    parts = np.split(np.random.default_rng(seed).permutation(sum(sizes)), np.cumsum(sizes)[:-1])
    train, test = local_holdout(parts, frac, seed)
    for p, tr, te in zip(parts, train, test, strict=True):
        assert len(tr) >= 1 and len(te) >= 1
        assert len(te) == max(1, round(frac * len(p)))
        assert not set(tr) & set(te)
        np.testing.assert_array_equal(np.sort(np.concatenate([tr, te])), np.sort(p))


def test_temporal_holdout_keeps_the_test_windows_clear_of_the_training_ones():
    """LEAF's -t sample split of a Shakespeare user: training first, test from n_train + 79 on."""
    parts = [np.arange(100, 300), np.arange(0, 100), np.array([400, 401, 402, 420, 500, 600, 700, 800, 900])]
    train, test = temporal_holdout(parts, 0.1, gap=79)
    assert test[0].tolist() == list(range(280, 300)) and train[0].tolist() == list(range(100, 201))
    assert test[1].tolist() == list(range(90, 100)) and train[1].tolist() == list(range(0, 11))
    assert test[2].tolist() == [900] and train[2].tolist() == [400, 401, 402, 420, 500, 600, 700, 800]
    for tr, te in zip(train, test, strict=True):
        assert tr.max() < te.min() - 79  # no training window overlaps a test window (80-char windows)
    again = temporal_holdout(parts, 0.1, gap=79)  # no randomness
    assert [a.tolist() for a in again[0] + again[1]] == [a.tolist() for a in train + test]
    with pytest.raises(ValueError, match=r"client 0 holds 88 samples; a temporal.*9 test samples, then a gap "
                                         r"of 79.*needs >= 89: raise partition.min_samples to at least 89"):
        temporal_holdout([np.arange(88)], 0.1, gap=79)
    with pytest.raises(ValueError, match="gap=-1"):
        temporal_holdout(parts, 0.1, gap=-1)


def test_local_holdout_rejects_tiny_clients():
    with pytest.raises(ValueError, match="client 1 holds 1"):
        local_holdout([np.arange(5), np.array([9])], 0.2, 0)


def test_describe_counts_and_plot(tmp_path):
    y = np.array([0, 0, 1, 2, 2, 2])
    parts = [np.array([0, 1, 2]), np.array([3, 4]), np.array([5])]
    frame = describe(parts, y, 4)
    assert list(frame.columns) == ["size", "classes", "0", "1", "2", "3"]
    assert frame["size"].tolist() == [3, 2, 1]
    assert frame["classes"].tolist() == [2, 1, 1]
    assert frame.loc[0, ["0", "1", "2", "3"]].tolist() == [2, 1, 0, 0]
    out = plot_label_distribution(frame, tmp_path / "fig" / "split.png", title="toy")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plot_label_distribution(label_histogram(parts, y, 4), tmp_path / "split.svg", max_clients=2)
    assert "first 2 of 3 clients" in svg.read_text()


# ---------------------------------------------------------------------------------------------------
# bad specs name the field, the value and what is allowed


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"label_skew": "quantity"}, "label_skew"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"m": 0}, "m"),
        ({"m": 1.5}, "m"),
        ({"shards_per_client": 0}, "shards_per_client"),
        ({"imbalance_ratio": 0.0}, "imbalance_ratio"),
        ({"imbalance_ratio": 100}, "imbalance_ratio"),
        ({"client_fraction": 1.5}, "client_fraction"),
        ({"sizes": "pareto"}, "sizes"),
        ({"label_skew": "shards", "sizes": SizeSpec("pareto")}, "sizes"),
        ({"label_skew": "natural", "sizes": SizeSpec("equal")}, "sizes"),
        ({"min_size": -1}, "min_size"),
        ({"label_choice": "uniform"}, "label_choice"),
        ({"label_choice": None}, "label_choice"),
        ({"equal_counts": 1}, "equal_counts"),
        ({"label_skew": "dirichlet", "equal_counts": True}, "equal_counts"),
        ({"equal_counts": True, "label_skew": "pathological", "sizes": SizeSpec("pareto")}, "equal_counts"),
    ],
)
def test_bad_spec_names_field_and_value(kwargs, field):
    with pytest.raises(ValueError, match=rf"PartitionSpec\.{field}=") as info:
        PartitionSpec(**kwargs)
    assert repr(next(iter(kwargs.values())))[:6] in str(info.value) or field == "sizes"


def test_bad_label_choice_lists_allowed_values():
    with pytest.raises(ValueError, match=r"label_choice='Random'.*allowed: \('cyclic', 'random'\)"):
        PartitionSpec("pathological", label_choice="Random")


@pytest.mark.parametrize(
    ("spec", "n_clients", "kwargs", "match"),
    [
        (PartitionSpec("natural"), 2, {}, "needs client_ids"),
        (PartitionSpec("natural"), 5, {"client_ids": np.array(["a", "b"] * 10)},
         "num_devices has value 5, which exceeds the 2 distinct client ids"),
        (PartitionSpec("pathological", m=1), 3, {}, "classes nobody holds"),
        (PartitionSpec("pathological", m=5), 4, {}, "exceeds the 4 classes"),
        (PartitionSpec("pathological", m=5, label_choice="random"), 4, {}, "exceeds the 4 classes"),
        (PartitionSpec("pathological", m=4, label_choice="random"), 6, {}, "has 5 samples but 6 clients"),
        (PartitionSpec("shards", shards_per_client=3), 10, {}, "exceed the 20 samples"),
        (PartitionSpec("dirichlet", min_size=10), 3, {}, "min_size=10"),
        (PartitionSpec("iid"), 21, {}, "num_devices=21 exceeds"),
        (PartitionSpec("iid"), 0, {}, "num_devices=0"),
    ],
)
def test_impossible_partitions_raise(spec, n_clients, kwargs, match):
    y = np.repeat(np.arange(4), 5)
    with pytest.raises(ValueError, match=match):
        partition(y, spec, n_clients, seed=0, **kwargs)


def test_labels_and_seed_are_checked():
    with pytest.raises(ValueError, match="1-D integer"):
        partition(np.array([0.5, 1.0]), PartitionSpec(), 1, 0)
    with pytest.raises(ValueError, match="seed=-1"):
        partition(np.array([0, 1]), PartitionSpec(), 1, -1)
    with pytest.raises(ValueError, match="longtail needs at least 2 classes"):
        partition(np.zeros(10, dtype=int), PartitionSpec("longtail"), 1, 0)


def test_natural_min_samples_leaves_out_small_writers():
    ids = np.array(["a"] * 5 + ["b"] * 1 + ["c"] * 3 + ["d"] * 2)
    y = np.zeros(len(ids), dtype=np.int64)
    parts = partition(y, PartitionSpec("natural", min_samples=3), 2, seed=0, client_ids=ids)
    assert sorted(len(p) for p in parts) == [3, 5]  # b and d are too small
    with pytest.raises(ValueError, match="min_samples=3"):
        partition(y, PartitionSpec("natural", min_samples=3), 3, seed=0, client_ids=ids)
    with pytest.raises(ValueError, match="min_samples=-1"):
        PartitionSpec("natural", min_samples=-1)
    # 0 (the default) keeps the split it always gave: rng.choice over all ids, as before min_samples
    rng = np.random.default_rng(4)
    old = np.sort(rng.choice(4, 3, replace=False))
    groups = {"a": np.arange(5), "b": np.array([5]), "c": np.arange(6, 9), "d": np.array([9, 10])}
    want = [groups["abcd"[j]] for j in old]
    got = partition(y, PartitionSpec("natural"), 3, seed=4, client_ids=ids)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_natural_equal_counts_trims_every_domain_to_the_smallest():
    """FedFOR Tables 3-5 (seed 003): Algorithm 1 averages W^t = 1/K Σ_k W_k^t over the K domain clients,
    and FedBN's set-up it follows cuts every domain to the smallest one's length. natural with
    equal_counts: each client keeps a random subset of its own writer's/domain's samples, all of the
    smallest client's size; the clients drawn are those of the untrimmed split."""
    ids = np.array(["a"] * 7 + ["b"] * 3 + ["c"] * 5 + ["d"] * 4)
    y = np.arange(len(ids)) % 3
    loose = partition(y, PartitionSpec("natural"), 3, seed=1, client_ids=ids)
    parts = partition(y, PartitionSpec("natural", equal_counts=True), 3, seed=1, client_ids=ids)
    smallest = min(len(p) for p in loose)
    assert [len(p) for p in parts] == [smallest] * 3
    for tight, full in zip(parts, loose, strict=True):
        assert set(tight) <= set(full)
    assert_disjoint(parts, len(y))


def test_natural_equal_counts_fraction_keeps_fedbns_share_of_the_smallest_domain():
    """FedBN's DomainNet code (federated/fed_domainnet.py) trains every domain on
    int(0.05 * min_data_len) images, not the smallest domain's whole count. Domains of 40, 20 and 30:
    fraction 0.25 keeps int(0.25 * 20) = 5 of each, a subset of what fraction 1 keeps of the same seed's
    domains; a fraction that keeps nothing, or one on a split it cannot apply to, is refused naming it."""
    ids = np.array(["a"] * 40 + ["b"] * 20 + ["c"] * 30)
    y = np.arange(len(ids)) % 4
    whole = partition(y, PartitionSpec("natural", equal_counts=True), 3, seed=2, client_ids=ids)
    share = partition(y, PartitionSpec("natural", equal_counts=True, equal_counts_fraction=0.25), 3, seed=2,
                      client_ids=ids)
    assert [len(p) for p in whole] == [20, 20, 20]
    assert [len(p) for p in share] == [5, 5, 5]
    assert [set(ids[p]) for p in share] == [{"a"}, {"b"}, {"c"}]
    assert_disjoint(share, len(y))
    with pytest.raises(ValueError, match=r"int\(0.01 \* 20\) = 0"):
        partition(y, PartitionSpec("natural", equal_counts=True, equal_counts_fraction=0.01), 3, seed=2,
                  client_ids=ids)
    with pytest.raises(ValueError, match=r"equal_counts_fraction=1.5 is not allowed; allowed: a number in "
                                         r"\(0, 1\]"):
        PartitionSpec("natural", equal_counts=True, equal_counts_fraction=1.5)
    with pytest.raises(ValueError, match="equal_counts_fraction=0.5 applies to label_skew='natural' with "
                                         "equal_counts=True only"):
        PartitionSpec("natural", equal_counts_fraction=0.5)


def test_natural_equal_counts_pick_first_keeps_each_domains_first_samples_as_fedbn():
    """FedBN's code keeps the first samples of every domain (fed_domainnet.py:161,
    Subset(trainset, list(range(min_data_len)))), not a random subset. Domains interleaved in sample order,
    a (indices 0, 3, 6, ...), b (1, 4, ...), c (2, 5, ...), 10 each: fraction 0.3 with pick "first" keeps
    each domain's first 3 in sample order, whatever the seed; "random" (the default) keeps a seeded subset."""
    ids = np.array(["a", "b", "c"] * 10)
    y = np.arange(len(ids)) % 4
    spec = PartitionSpec("natural", equal_counts=True, equal_counts_fraction=0.3, equal_counts_pick="first")
    want = [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    for seed in (0, 1, 7):
        assert [p.tolist() for p in partition(y, spec, 3, seed=seed, client_ids=ids)] == want
    random = [partition(y, PartitionSpec("natural", equal_counts=True, equal_counts_fraction=0.3), 3, seed=s,
                        client_ids=ids) for s in (0, 1, 7)]
    assert any(p.tolist() != w for parts in random for p, w in zip(parts, want, strict=True))
    assert all([set(ids[p]) for p in parts] == [{"a"}, {"b"}, {"c"}] for parts in random)
    with pytest.raises(ValueError,
                       match=r"equal_counts_pick='last' is unknown; allowed: \('random', 'first'\)"):
        PartitionSpec("natural", equal_counts=True, equal_counts_pick="last")
    with pytest.raises(ValueError, match="equal_counts_pick='first' applies to label_skew='natural' with "
                                         "equal_counts=True only"):
        PartitionSpec("iid", equal_counts=True, equal_counts_pick="first")


def test_rest_holdout_tests_on_samples_the_trim_left_out_as_fedbns_validation_set():
    """FedBN's DomainNet code trains a domain on its first m images and validates on its last m
    (fed_domainnet.py:157-161): val apart from train. Domains a = 0..9 and b = 10..15 (sample order), m = 3
    kept ("first": 0..2, 10..12). test_fraction 0.5 holds out as many as are kept (3 / (3 + 3)): the last 3
    of each domain, 7..9 and 13..15; test_fraction 0.25 holds out round(3 · 0.25 / 0.75) = 1. "random"
    draws them from the samples left out. Too few left is an error naming the device."""
    from hetfl.data.partition import rest_holdout

    kept = [np.arange(0, 3), np.arange(10, 13)]
    whole = [np.arange(0, 10), np.arange(10, 16)]
    train, test = rest_holdout(kept, whole, 0.5, "first", seed=0)
    assert [t.tolist() for t in train] == [[0, 1, 2], [10, 11, 12]]
    assert [t.tolist() for t in test] == [[7, 8, 9], [13, 14, 15]]
    _, one = rest_holdout(kept, whole, 0.25, "first", seed=0)
    assert [t.tolist() for t in one] == [[9], [15]]
    for seed in range(5):
        train, test = rest_holdout(kept, whole, 0.5, "random", seed=seed)
        assert [t.tolist() for t in train] == [[0, 1, 2], [10, 11, 12]]
        assert [len(t) for t in test] == [3, 3]
        assert set(test[0]) <= set(range(3, 10)) and set(test[1]) <= set(range(13, 16))
    with pytest.raises(ValueError, match="device 1 keeps 3 samples and has 3 left, fewer than the 7 its "
                                         "local test part needs"):
        rest_holdout(kept, whole, 0.7, "first", seed=0)  # round(3 · 0.7 / 0.3) = 7: device 0 has 7 left
    with pytest.raises(ValueError, match="equal_counts_holdout='rest' needs equal_counts_fraction < 1"):
        PartitionSpec("natural", equal_counts=True, equal_counts_holdout="rest")
    with pytest.raises(ValueError, match="equal_counts_holdout='rest' applies to label_skew='natural' with "
                                         "equal_counts=True only"):
        PartitionSpec("natural", equal_counts_holdout="rest")
