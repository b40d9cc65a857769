"""Cell statistics and verdicts against hand-computed numbers."""

import math

import numpy as np
import pandas as pd
import pytest

from hetfl.reports.verdicts import (
    RULE_TEXT,
    VERDICTS,
    Interval,
    bounded_interval,
    counts_text,
    interval_text,
    t_interval,
    verdict,
    verdict_counts,
)

T4 = 2.7764451051977987  # t_{4, 0.975}
T2 = 4.302652729749464  # t_{2, 0.975}


def test_t_interval_by_hand():
    iv = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = T4 * math.sqrt(2.5) / math.sqrt(5)  # s² = 10/4
    assert iv.mean == 3.0 and iv.n == 5 and iv.std == pytest.approx(math.sqrt(2.5))
    assert iv.low == pytest.approx(3.0 - half) and iv.high == pytest.approx(3.0 + half)
    assert iv.low == pytest.approx(1.0367568, abs=1e-6)


def test_one_seed_has_no_interval_and_constant_seeds_a_point():
    one = t_interval([0.7])
    assert one.mean == 0.7 and math.isnan(one.low) and math.isnan(one.high) and math.isnan(one.std)
    same = t_interval([2.0, 2.0, 2.0])
    assert (same.low, same.high) == (2.0, 2.0)


@pytest.mark.parametrize(("paper", "expected"), [
    (2.0, "agrees"),  # inside [1.04, 4.96]
    (6.0, "same direction"),  # CI > 0, paper positive, outside
    (-1.0, "disagrees"),  # CI > 0, paper negative
    (0.0, "disagrees"),  # the paper saw no difference, the CI excludes 0
    (float("nan"), "not comparable"),
    (None, "not comparable"),
    (np.float32("nan"), "not comparable"),  # read as "disagrees" when only Python floats were checked
    (pd.NA, "not comparable"),  # raised
])
def test_verdicts_of_a_positive_interval(paper, expected):
    iv = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert verdict(paper, iv.low, iv.high) == expected


def test_interval_across_zero_is_inconclusive_even_with_the_paper_inside():
    """A CI that holds 0 cannot tell the paper's effect from none: it used to "agree" whenever it also held
    the paper value, so wider intervals (fewer seeds) agreed more (an audit found 11 of 25 agreements)."""
    iv = t_interval([-1.0, 1.0, 0.5, -0.5, 0.0])
    assert iv.low < 0 < iv.high
    assert verdict(5.0, iv.low, iv.high) == "inconclusive"
    assert verdict(0.2, iv.low, iv.high) == "inconclusive"
    assert verdict(0.0, iv.low, iv.high) == "agrees"  # the paper saw no difference, nor do the seeds
    assert verdict(0.2, iv.low, iv.high, comparable=False) == "not comparable"
    assert verdict(0.2, math.nan, math.nan) == "inconclusive"  # one seed: no CI


@pytest.mark.parametrize(("paper", "low", "high", "expected"), [
    (9.0, 14.3, 52.1, "disagrees"),  # Table 5's a0.1, τ0 = 30: 33.2 [14.3, 52.1] rounds against the paper's 9
    (77.0, 37.4, 63.8, "disagrees"),  # a1, τ0 = 50: lower than the paper's
    (34.0, 24.4, 53.6, "agrees"),
    (2.0, -36.5, math.inf, "inconclusive"),  # a censored seed: unbounded, holds the paper value
    (2.0, 5.0, math.inf, "disagrees"),  # every completion is slower than the paper
    (0.0, 0.0, 0.0, "agrees"),
    (-1.0, -3.0, 4.0, "agrees"),  # a level's sign says nothing
])
def test_a_level_agrees_or_disagrees_never_same_direction(paper, low, high, expected):
    """Counts of rounds and accuracies have no null at 0: a CI above 0 says nothing about the paper."""
    assert verdict(paper, low, high, kind="level") == expected


@pytest.mark.parametrize(("paper", "low", "high", "expected"), [
    (2.0, 2.0, 2.0, "agrees"),  # equal seeds on the paper's value: the point interval holds it
    (3.0, 1.0, 3.0, "agrees"),  # the paper value on the CI's end is inside
    (1.0, 0.0, 0.0, "inconclusive"),  # seeds all 0: no effect seen, the paper saw one
    (3.0, 0.0, 3.0, "inconclusive"),  # 0 on the CI's end is inside
    (0.0, 0.0, 2.0, "agrees"),
    (0.0, 0.5, 2.0, "disagrees"),
])
def test_ends_of_the_interval_are_inside(paper, low, high, expected):
    """Round counts often tie across seeds, so a CI's end (or a point) falls on 0 or on the paper value."""
    assert verdict(paper, low, high) == expected


def test_an_unbounded_difference_gives_the_direction_not_agreement():
    assert verdict(5.0, 2.0, math.inf) == "same direction"  # a censored side: the size is unknown
    assert verdict(0.0, -1.0, math.inf) == "inconclusive"
    assert verdict(0.0, 2.0, math.inf) == "disagrees"
    with pytest.raises(ValueError, match="kind 'absolute' is unknown; allowed: difference, level"):
        verdict(1.0, 0.0, 2.0, kind="absolute")


def test_negative_interval_same_direction_as_a_negative_paper_value():
    assert verdict(-9.0, -5.0, -1.0) == "same direction"
    assert verdict(3.0, -5.0, -1.0) == "disagrees"


def test_bounds_rule_for_censored_seeds():
    # seeds: 30, 40, and one that never got there within 70 rounds (> 70, i.e. in [71, ∞))
    iv = bounded_interval([30, 40, 71], [30, 40, math.inf])
    s = math.sqrt(((30 - 47) ** 2 + (40 - 47) ** 2 + (71 - 47) ** 2) / 2)
    assert iv.low == pytest.approx(47 - T2 * s / math.sqrt(3))
    assert iv.high == math.inf and math.isnan(iv.mean) and iv.n_censored == 1
    assert verdict(34.0, iv.low, iv.high, kind="level") == "inconclusive"  # holds it, but unbounded
    every = bounded_interval([71, 71, 71], [math.inf] * 3)
    assert every.low == 71 and verdict(34.0, every.low, every.high, kind="level") == "disagrees"
    observed = bounded_interval([1, 2, 3], [1, 2, 3])
    assert observed == t_interval([1, 2, 3])
    # a paired difference of censored seeds (vanilla − fast, both "> R") is bounded neither way: it says
    # nothing, so it cannot agree with the paper (it read "agrees" before: [−∞, ∞] holds every value)
    both = bounded_interval([-math.inf, 3, 5], [math.inf, 3, 5])
    assert (both.low, both.high) == (-math.inf, math.inf)
    assert verdict(5.0, both.low, both.high) == "inconclusive"
    with pytest.raises(ValueError, match="lower bound exceeds"):
        bounded_interval([5], [4])


def test_counts_and_text():
    counts = verdict_counts(["agrees", "agrees", "disagrees"])
    assert list(counts) == list(VERDICTS) and counts["agrees"] == 2 and counts["inconclusive"] == 0
    assert counts_text(["agrees"]).startswith("1 agrees, 0 same direction")
    with pytest.raises(ValueError, match="unknown"):
        verdict_counts(["maybe"])
    assert interval_text(t_interval([1.0, 2.0, 3.0, 4.0, 5.0])) == "3.0 [1.0, 5.0]"
    # never "-0.0" (an audit found "0.4 [-0.0, 0.8]"): float noise is 0, a real bound shows its first digit
    assert interval_text(Interval(0.4, 0.1, -0.01, 0.8, 3)) == "0.4 [-0.01, 0.8]"
    assert interval_text(Interval(-1e-10, 0.0, -1e-10, 1e-10, 3), digits=4) == "0.0000 [0.0000, 0.0000]"
    assert interval_text(bounded_interval([71, 71], [math.inf, math.inf])) == "2 of 2 censored [71.0, ∞]"


def test_t_bounds_equal_scipys_interval_bit_for_bit():
    """_t_bounds keeps the standard quantiles per (confidence, df) and scales them itself; every table and
    figure band must still be scipy.stats.t.interval's, to the last bit."""
    import numpy as np
    from scipy import stats

    from hetfl.reports.verdicts import _t_bounds

    rng = np.random.default_rng(0)
    checked = 0
    for n in range(2, 30):
        for confidence in (0.9, 0.95, 0.99):
            for _ in range(40):
                v = rng.normal(rng.uniform(-100, 100), 10.0 ** rng.uniform(-8, 6), n)
                if rng.random() < 0.3:
                    v = np.round(v, 2)  # accuracies in points
                mean, sem = float(v.mean()), float(v.std(ddof=1)) / math.sqrt(n)
                if sem == 0:
                    continue
                low, high = stats.t.interval(confidence, df=n - 1, loc=mean, scale=sem)
                assert _t_bounds(v, confidence) == (float(low), float(high)), (n, confidence, v)
                checked += 1
    assert checked > 3000


def test_student_t_quantiles_without_scipy_stats():
    """The quantiles come from scipy.special, equal to scipy.stats.t.ppf's bit for bit, without importing
    scipy.stats (1.2-1.6 s of each table job): in a fresh process, as a table job runs."""
    import subprocess
    import sys

    probe = ("import sys; from hetfl.reports.verdicts import t_quantiles; "
             "q = [t_quantiles(c, df) for c in (0.5, 0.9, 0.95, 0.99) for df in (1, 2, 4, 29, 1000)]; "
             "print('scipy.stats' in sys.modules); print(repr(q))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded, values = out.stdout.splitlines()
    assert loaded == "False"
    from scipy import stats

    expect = [(float(stats.t.ppf((1 - c) / 2, df)), float(stats.t.ppf((1 + c) / 2, df)))
              for c in (0.5, 0.9, 0.95, 0.99) for df in (1, 2, 4, 29, 1000)]
    assert values == repr(expect)


def test_within_cuts_an_interval_to_its_quantitys_range():
    from hetfl.reports.verdicts import Interval, within

    iv = within(Interval(5.0, 2.0, -38.4, math.inf, 5, 2), low=1.0)  # epochs to recover: at least 1
    assert (iv.low, iv.high, iv.mean, iv.n_censored) == (1.0, math.inf, 5.0, 2)
    assert within(Interval(50.0, 1.0, 98.0, 102.0, 3), 0.0, 100.0).high == 100.0  # a BMTA in per cent
    nan = within(Interval(1.0, math.nan, math.nan, math.nan, 1), low=0.0)
    assert math.isnan(nan.low) and math.isnan(nan.high)


@pytest.mark.parametrize(("paper", "low", "high", "expected"), [
    (0.85, 0.09, 8.29, "same direction"),  # bmta FedGATE on mnist5k: the paper's size lies inside, yet
    (0.85, 2.0, 3.0, "same direction"),    # a stand-in's size is another scale's: never "agrees"
    (0.85, -1.0, 3.0, "inconclusive"),
    (0.85, -3.0, -1.0, "disagrees"),
    (0.0, 1.0, 2.0, "inconclusive"),       # no direction to share
])
def test_a_stand_ins_difference_is_judged_for_its_direction_only(paper, low, high, expected):
    """mnist5k stands in for MNIST (EFL Table 2) and CIFAR-10 (FedFOR Table 2) at reduced scale: the docs
    judged its differences because "their direction does not depend on the scale", yet a CI holding the
    paper's size read "agrees" (an audit)."""
    assert verdict(paper, low, high, kind="direction") == expected
    assert "never agrees" in RULE_TEXT["direction"]


def test_a_bound_that_rounds_to_zero_keeps_its_side_of_zero():
    """'0.4 [0.0, 0.8] · inconclusive' read as a CI excluding 0 beside a verdict saying it holds 0: its low
    end was −0.004 (an audit). A bound that rounds to 0 shows its first digit; float noise stays 0."""
    assert interval_text(Interval(0.4, 0.1, -0.004, 0.8, 3)) == "0.4 [-0.004, 0.8]"
    assert interval_text(Interval(0.0, 0.0, -1e-17, 1e-17, 3)) == "0.0 [0.0, 0.0]"
    assert interval_text(Interval(-0.04, 0.01, -0.06, -0.03, 3), digits=2) == "-0.04 [-0.06, -0.03]"


@pytest.mark.parametrize(("paper", "low", "high", "kind", "resolution", "expected"), [
    # the paper's 98.30 is any value in [98.295, 98.305]: a CI just above 98.30 holds it to that digit
    (98.3, 98.302, 98.4, "level", 0.005, "agrees"),
    (98.3, 98.302, 98.4, "level", 0.0, "disagrees"),
    (98.3, 98.31, 98.4, "level", 0.005, "disagrees"),  # beyond the printed digit
    # Ruan's Table 3 prints one decimal: 2.1 is [2.05, 2.15]
    (2.1, 2.12, 2.5, "difference", 0.05, "agrees"),
    (2.1, 2.12, 2.5, "difference", 0.0, "same direction"),
    (2.1, 2.16, 2.5, "difference", 0.05, "same direction"),
    # a printed 0.0 is |x| < 0.05: a CI excluding 0 but within that agrees; beyond it disagrees
    (0.0, 0.02, 0.04, "difference", 0.05, "agrees"),
    (0.0, 0.02, 0.04, "difference", 0.0, "disagrees"),
    (0.0, 0.06, 0.2, "difference", 0.05, "disagrees"),
    # a stand-in's direction: signs only, the resolution changes nothing
    (2.1, 2.12, 2.5, "direction", 0.05, "same direction"),
])
def test_a_paper_value_is_known_to_its_printed_digit(paper, low, high, kind, resolution, expected):
    """verdict's resolution: the paper prints 98.30, not the true value; a CI meeting the interval of that
    last digit holds the paper value. Without it, a narrow CI at paper scale "disagreed" with a value it
    matched to every printed digit."""
    assert verdict(paper, low, high, kind=kind, resolution=resolution) == expected


@pytest.mark.parametrize(("paper", "low", "high", "kind", "resolution", "expected"), [
    (98.3, 98.305, 98.4, "level", 0.005, "agrees"),  # 98.3 + 0.005 is 98.30499999999999 in floats
    (33.8, 33.85, 34.0, "level", 0.05, "agrees"),  # 33.849999999999994
    (0.3, 0.1, 0.25, "difference", 0.05, "agrees"),  # 0.3 − 0.05 is 0.25, exact: agreed already
    (0.2, 0.05, 0.15, "difference", 0.05, "agrees"),  # 0.2 − 0.05 is 0.15000000000000002
    # a difference of two printed values, 98.34 − 98.3 = 0.04000000000000625, known to [0.03, 0.05]
    (98.34 - 98.3, 0.01, 0.03, "difference", 0.01, "agrees"),
    (98.3, 98.306, 98.4, "level", 0.005, "disagrees"),  # just beyond the boundary stays outside
])
def test_a_ci_end_on_the_printed_digits_boundary_holds_the_paper_value(paper, low, high, kind, resolution,
                                                                       expected):
    """The paper's 98.30 is any value in [98.295, 98.305], ends included (verdict's docstring): a CI whose
    end is 98.305 meets it. Float arithmetic put the end 1e-14 inside, and such a CI "disagreed"."""
    assert verdict(paper, low, high, kind=kind, resolution=resolution) == expected


def test_an_exact_paper_value_below_the_rounding_is_kept():
    """The boundary's rounding (to 12 decimals) applies to printed values only: an exact value
    (resolution 0) of 3e-13 stays itself, so a CI of [1e-13, 2e-13] does not hold it."""
    assert verdict(3e-13, 1e-13, 2e-13, kind="level", resolution=0.0) == "disagrees"
    assert verdict(3e-13, 2e-13, 4e-13, kind="level", resolution=0.0) == "agrees"


def test_a_negative_resolution_is_refused():
    with pytest.raises(ValueError, match="resolution -0.1 is not allowed; allowed: 0 or more"):
        verdict(1.0, 0.5, 1.5, resolution=-0.1)


def test_each_paper_tables_resolution_is_its_printed_digit():
    """references.PRINT_RESOLUTION: Ruan's Table 3 prints one decimal, Ma et al.'s Table 2 and FedFOR's
    two; the transcriptions drop trailing zeros, so no value may print more digits than its table's, and
    at least one value of each table needs them all."""
    from hetfl.reports.references import PRINT_RESOLUTION, load_reference

    columns = {"ruan2021_table3_accuracy_difference": "pct_improvement", "ma2022_efl_table2_bmta": "bmta_pct",
               "tian2022_fedfor_table2_imbalanced_cifar10": "best_val_acc_pct",
               "tian2022_fedfor_table3_domainnet": "value", "tian2022_fedfor_table4_digits": "value",
               "tian2022_fedfor_table5_concept_shift": "avg_best_val_acc_pct"}
    assert set(columns) == set(PRINT_RESOLUTION)
    for name, column in columns.items():
        text = load_reference(name)[column].dropna().map(repr)
        digits = text.map(lambda t: len(t.split(".")[1].rstrip("0")) if "." in t else 0)
        assert 0.5 * 10.0 ** -digits.max() == pytest.approx(PRINT_RESOLUTION[name]), name


T1 = 12.706204736174698  # t_{1, 0.975}


def test_an_infinite_seed_makes_the_interval_unbounded_both_ways():
    """A seed at ±∞ (a loss recorded as inf at the round a run diverged, which the EFL λ table and the
    figures' bands read) makes the sample's s infinite: no finite end can be computed from all the seeds.
    _t_bounds took the finite end from the finite seeds only, here [1, 2]: 1.5 ∓ T1·0.5, a CI of 2 seeds
    under n = 3 that silently left the third out."""
    assert 1.5 - T1 * 0.5 == pytest.approx(-4.853102368)  # the low end it read: the finite seeds' interval
    iv = t_interval([1.0, 2.0, math.inf])
    assert iv.mean == math.inf and iv.n == 3
    assert (iv.low, iv.high) == (-math.inf, math.inf)
    for values in ([-math.inf, 1.0, 2.0], [math.inf, math.inf, 5.0]):  # high read 1.5 + T1·0.5; low NaN
        assert (t_interval(values).low, t_interval(values).high) == (-math.inf, math.inf)
    both = t_interval([-math.inf, 1.0, math.inf])  # was already unbounded both ways
    assert (both.low, both.high) == (-math.inf, math.inf)
    # every seed at the same infinity: equal values, the point [v, v] (it read (NaN, ∞): no CI printed)
    same = t_interval([math.inf] * 3)
    assert (same.mean, same.low, same.high) == (math.inf, math.inf, math.inf)
    assert (t_interval([-math.inf] * 2).low, t_interval([-math.inf] * 2).high) == (-math.inf, -math.inf)
    one = t_interval([math.inf])  # one seed: no CI, as for a finite one
    assert one.mean == math.inf and math.isnan(one.low) and math.isnan(one.high)
    # NaN is dropped by the callers; one left in makes the interval NaN, not that of the other seeds
    nan = t_interval([1.0, 2.0, math.nan])
    assert math.isnan(nan.low) and math.isnan(nan.high)
    # what the table prints and says: the seed is there, and the cell cannot agree or disagree
    assert interval_text(iv) == "∞ [−∞, ∞]"
    for kind in ("difference", "level", "direction"):
        assert verdict(3.0, iv.low, iv.high, kind=kind) == "inconclusive"
        assert verdict(3.0, same.low, same.high, kind=kind) == "inconclusive"


def test_the_bounds_rule_keeps_its_infinite_ends():
    """bounded_interval reads only the infinite side of a set of bounds that holds ∞ (the high end over
    upper bounds, the low end over lower bounds): unchanged by the rule for infinite seeds."""
    iv = bounded_interval([30, 40, 71], [30, 40, math.inf])
    s = math.sqrt(((30 - 47) ** 2 + (40 - 47) ** 2 + (71 - 47) ** 2) / 2)
    assert (iv.low, iv.high) == (pytest.approx(47 - T2 * s / math.sqrt(3)), math.inf)
    # a difference with one side censored per seed: seed 0 in (−∞, 2], seeds 1-2 exactly 3 and 5
    low_only = bounded_interval([-math.inf, 3, 5], [2, 3, 5])
    s = math.sqrt(((2 - 10 / 3) ** 2 + (3 - 10 / 3) ** 2 + (5 - 10 / 3) ** 2) / 2)
    assert low_only.low == -math.inf and low_only.high == pytest.approx(10 / 3 + T2 * s / math.sqrt(3))
    assert low_only.n_censored == 1 and math.isnan(low_only.mean)


def test_a_mean_undefined_without_censored_seeds_says_why():
    """A cell's mean is NaN in three ways: censored seeds (the bounds rule prints no made-up number), seeds
    at both +∞ and −∞ (∞ − ∞ has no value) and a NaN seed left in by a caller. interval_text printed "k of
    n censored" for all three: t_interval over [−∞, 1, ∞] read "0 of 3 censored [−∞, ∞]" where no seed is
    censored, and over [1, 2, NaN] "0 of 3 censored"."""
    both = t_interval([-math.inf, 1.0, math.inf])
    assert math.isnan(both.mean) and both.n_censored == 0
    assert interval_text(both) == "no mean (seeds at ∞ and −∞) [−∞, ∞]"
    assert interval_text(t_interval([math.inf, -math.inf]), digits=3) == "no mean (seeds at ∞ and −∞) [−∞, ∞]"
    # a NaN seed (callers drop them; one left in makes every number NaN): no CI to print
    assert interval_text(t_interval([1.0, 2.0, math.nan])) == "no mean (a seed is NaN)"
    assert interval_text(t_interval([math.nan])) == "no mean (a seed is NaN)"
    # censored seeds keep their text, whatever their bounds
    assert interval_text(bounded_interval([71, 71], [math.inf, math.inf])) == "2 of 2 censored [71.0, ∞]"
    assert interval_text(bounded_interval([-math.inf, 3, 5], [math.inf, 3, 5])) == "1 of 3 censored [−∞, ∞]"
    # an empty cell and a defined mean are unchanged
    assert interval_text(t_interval([])) == "—"
    assert interval_text(t_interval([1.0, 2.0, math.inf])) == "∞ [−∞, ∞]"


def test_the_bounds_rule_refuses_a_nan_bound():
    """A NaN bound is no censoring: NaN != NaN counted it as a censored seed, and its t-bounds came out NaN.
    No table passes one today (FedFOR skips ACC_x without a target); the rule refuses it, naming the seeds."""
    from hetfl.reports.verdicts import bounded_interval

    with pytest.raises(ValueError, match=r"bounds of seed\(s\) \[1\] are NaN"):
        bounded_interval([1.0, math.nan, 3.0], [1.0, math.nan, math.inf])
