"""Per-device sample counts (hetfl.data.sizes)."""

import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetfl.data.sizes import SizeSpec, least_count, sample_sizes


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_equal_sizes() -> None:
    n = sample_sizes(7, SizeSpec("equal", size=40), rng())
    assert n.dtype == np.int64 and n.shape == (7,)
    assert np.all(n == 40)


def test_equal_is_clipped() -> None:
    assert np.all(sample_sizes(3, SizeSpec("equal", size=5000, max_size=1000), rng()) == 1000)
    assert np.all(sample_sizes(3, SizeSpec("equal", size=1, min_size=2), rng()) == 2)


def test_pareto_respects_floor_and_cap() -> None:
    n = sample_sizes(5000, SizeSpec("pareto", size=20, index=0.5, max_size=1000, min_size=2), rng())
    assert n.dtype == np.int64
    assert n.min() >= 20  # scale x_m = 20 is the minimum before the cap
    assert n.max() == 1000  # index 0.5: P(X > 50) = 50^-0.5 ≈ 14 %, so the cap binds
    frac_capped = np.mean(n == 1000)
    assert 0.10 < frac_capped < 0.18, frac_capped


def test_pareto_heavy_tail() -> None:
    n = sample_sizes(2000, SizeSpec("pareto", size=10, index=0.5, max_size=10**6), rng(1))
    # Median of Pareto(0.5, x_m=10) is 10 · 2^2 = 40; the maximum is orders of magnitude larger.
    assert 30 <= np.median(n) <= 55
    assert n.max() > 100 * np.median(n)


def test_pareto_floor_applies_below_scale() -> None:
    n = sample_sizes(100, SizeSpec("pareto", size=1, index=0.5, min_size=5, max_size=50), rng())
    assert n.min() >= 5 and n.max() <= 50


def test_lognormal_sums_to_target() -> None:
    n = sample_sizes(500, SizeSpec("lognormal", size=100, sigma=0.3), rng())
    assert abs(n.sum() - 100 * 500) <= 500  # rounding and clipping only
    assert n.std() > 10  # genuinely unbalanced


def test_seeded_reproducible() -> None:
    spec = SizeSpec("pareto", size=20)
    np.testing.assert_array_equal(sample_sizes(50, spec, rng(3)), sample_sizes(50, spec, rng(3)))
    assert not np.array_equal(sample_sizes(50, spec, rng(3)), sample_sizes(50, spec, rng(4)))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"distribution": "zipf"}, "distribution"),
        ({"distribution": "pareto", "index": 0.0}, "index"),
        ({"distribution": "pareto", "index": -1.0}, "index"),
        ({"distribution": "equal", "size": 0}, "size"),
        ({"distribution": "equal", "max_size": 1, "min_size": 2}, "max_size"),
        ({"distribution": "equal", "min_size": 0}, "min_size"),
        ({"distribution": "lognormal", "sigma": 0.0}, "sigma"),
        ({"distribution": "equal", "size": 2.5}, "size"),
    ],
)
def test_bad_spec_names_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SizeSpec(**kwargs)


def test_bad_num_devices() -> None:
    with pytest.raises(ValueError, match="num_devices"):
        sample_sizes(0, SizeSpec("equal"), rng())


def test_uncapped_pareto_allowed_when_finite() -> None:
    n = sample_sizes(100, SizeSpec("pareto", size=2, index=3.0, max_size=None), rng())
    assert n.min() >= 2


@settings(max_examples=40, deadline=None)
@given(
    dist=st.sampled_from(["equal", "pareto", "lognormal"]),
    size=st.integers(1, 500),
    lo=st.integers(1, 50),
    span=st.integers(0, 2000),
    seed=st.integers(0, 2**32 - 1),
)
def test_counts_always_within_bounds(dist: str, size: int, lo: int, span: int, seed: int) -> None:
    spec = SizeSpec(dist, size=size, min_size=lo, max_size=lo + span)
    n = sample_sizes(64, spec, rng(seed))
    assert n.shape == (64,) and n.dtype == np.int64
    assert n.min() >= lo and n.max() <= lo + span


@given(
    dist=st.sampled_from(["equal", "pareto", "lognormal"]),
    size=st.integers(1, 500),
    lo=st.integers(1, 50),
    span=st.integers(0, 2000),
    capped=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_least_count_bounds_every_draw_and_is_the_equal_count(dist: str, size: int, lo: int, span: int,
                                                              capped: bool, seed: int) -> None:
    """cluster.check_memory refuses a SYNTHETIC split whose least counts do not fit: a lower bound of every
    draw, reached by every device under equal sizes (and by a Pareto draw of X near 1)."""
    spec = SizeSpec(dist, size=size, min_size=lo, max_size=lo + span if capped else None)
    n = sample_sizes(64, spec, rng(seed))
    assert n.min() >= least_count(spec)
    if dist == "equal":
        assert (n == least_count(spec)).all()


@pytest.mark.parametrize("seed", range(0, 200, 7))
def test_size_draws_are_bitwise_scipy_stats(seed):
    """sizes.pareto_rvs and the lognormal draw stand in for scipy.stats.pareto / lognorm (whose import
    dominated a split job): from the same generator they must give bitwise the same draws, or every split
    would move. The lognormal one is checked through the sizes it gives (FedDyn's normalisation)."""
    from scipy import stats

    from hetfl.data.sizes import pareto_rvs

    n = int(np.random.default_rng(seed).integers(1, 500))
    for b in (0.5, 1.0, 1.7, 3.0):
        expect = stats.pareto(b=b).rvs(size=n, random_state=np.random.default_rng(seed))
        assert np.array_equal(pareto_rvs(b, n, np.random.default_rng(seed)), expect)
    for s in (0.3, 1.0, 2.0):
        lk = stats.lognorm(s=s).rvs(size=n, random_state=np.random.default_rng(seed))
        expect = np.clip(np.rint(25 * n * lk / lk.sum()), 2, None).astype(np.int64)
        spec = SizeSpec("lognormal", size=25, sigma=s, min_size=2, max_size=None)
        got = sample_sizes(n, spec, np.random.default_rng(seed))
        assert np.array_equal(got, expect)


@pytest.mark.parametrize("sigma", [1e3, 1e300, sys.float_info.max])
def test_lognormal_sizes_finite_at_any_sigma(sigma):
    """A σ whose draws overflow exp (inf / inf) once gave NaN sizes, cast to int64's minimum, and the split
    job failed with "sizes must all be >= 1, got min -9223372036854775808". The shares are the same ratios
    taken relative to the largest draw: the device with the largest draw takes the whole total and the
    others get the floor."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        n = sample_sizes(8, SizeSpec("lognormal", size=20, sigma=sigma, min_size=2), rng(0))
    z = rng(0).standard_normal(8)
    assert n.dtype == np.int64
    assert n[np.argmax(z)] == 160 and np.all(np.delete(n, np.argmax(z)) == 2)


def test_lognormal_sizes_finite_when_every_draw_underflows():
    """All of σ · z_k below exp's underflow (σ huge, every z_k < 0) gave 0 / 0: the device with the largest
    draw still takes the whole total."""
    g = np.random.default_rng(0)
    while (z := np.random.default_rng(seed := int(g.integers(1 << 30))).standard_normal(3)).max() >= 0:
        pass
    n = sample_sizes(3, SizeSpec("lognormal", size=10, sigma=1e300, min_size=2), np.random.default_rng(seed))
    assert n[np.argmax(z)] == 30 and np.all(np.delete(n, np.argmax(z)) == 2)
