"""Statistics of a reproduced cell: a Student-t interval over seeds and a verdict against the paper.

A reproduced cell is a paired per-seed difference (or a per-seed value) over n seeds. hetfl reports its
mean, a 95 % confidence interval mean ± t_{n−1, 0.975}·s/√n (`scipy.stats.t.interval`) and one verdict.

A **difference** (``kind="difference"``: B − A, vanilla − fast, a method − FedAvg), where 0 means no effect:

- ``agrees``          the CI is bounded, holds the paper value and, unless the paper reports 0, excludes 0:
                      the effect is there, of the paper's size;
- ``same direction``  the CI excludes 0 with the paper's sign, but the paper value lies outside it (or the
                      CI is unbounded on one side: censored seeds, so its size is unknown);
- ``inconclusive``    the CI contains 0 while the paper reports an effect, whether or not it also holds the
                      paper value: the seeds cannot tell the paper's effect from none (also: fewer than 2
                      seeds, so no CI; or a CI unbounded on both sides);
- ``disagrees``       the CI excludes 0 with the sign opposite to the paper's (also: the paper reports
                      exactly 0 and the CI excludes 0 — the paper saw no difference where hetfl sees one);
- ``not comparable``  no paper value, or a set-up that differs from the paper's in a way the caption names.

A **level** (``kind="level"``: a count of rounds, an accuracy), where 0 is no reference point and a sign
says nothing: ``agrees`` when a bounded CI holds the paper value, ``disagrees`` when the CI excludes it
(higher or lower), ``inconclusive`` when there is no CI or an unbounded one holds it. A level is never
"same direction".

A CI that holds both 0 and the paper value used to count as ``agrees``; an audit (2026-11-26) found 11 of
25 agreements were of that kind, the widest with 3 seeds, so fewer seeds gave more agreement.

Censored cells (Tables 4–5: a seed that never recovered or crossed within the rounds observed) use the
**bounds rule** (docs/readings.md): each seed's value is only known to lie in an interval [lo, hi]
(a censored count "> R" lies in [R + 1, ∞); a difference with a censored side is bounded the same way).
The CI's low end is the t-interval's low end over the seeds' lower bounds, its high end the t-interval's
high end over their upper bounds (∞ as soon as one upper bound is ∞). With no censored seed this is the
ordinary t-interval. The mean is reported only when no seed is censored: never a made-up number.
Why each end is a confidence bound for the mean: a seed's lower bound is the variable min(X, R + 1) ≤ X
(per seed), so its mean is at most E[X], and the t low end over the lower bounds, a 97.5 % lower bound on
that mean, is one on E[X] too; the high end likewise. It is not the widest of the t-intervals of every
possible completion of the censored seeds (that one is (−∞, ∞) as soon as a seed is unbounded: a huge
value makes the spread huge too), and it does not claim to be.

Seeds that all give the same value (counts of rounds often do) have s = 0: scipy's interval is then NaN,
hetfl's the point [v, v]. That point is also the order-statistic interval [min, max] of the median, whose
coverage is 1 − 2^(1−n) (93.75 % at 5 seeds, 75 % at 3) without any assumption on the distribution.

A seed whose value is ±∞ (a loss recorded as inf at the round its run diverged: the EFL λ table's final
loss, a figure's band at that round) makes the mean ±∞ and the CI (−∞, ∞) (`_t_bounds`): s is infinite,
so neither end can be computed from all the seeds. Such a cell is ``inconclusive``. Seeds at both +∞ and
−∞ leave the mean undefined (∞ − ∞): the cell prints "no mean (seeds at ∞ and −∞) [−∞, ∞]", never "0 of n
censored" (no seed is censored). Seeds all at the same infinity are equal values: the point [∞, ∞], also
``inconclusive`` (unbounded).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
VERDICTS = ("agrees", "same direction", "inconclusive", "disagrees", "not comparable")


@dataclass(frozen=True)
class Interval:
    """Mean, sample std (ddof = 1) and CI over n seeds; NaN where undefined (mean: any seed censored)."""

    mean: float
    std: float
    low: float
    high: float
    n: int
    n_censored: int = 0


@functools.cache
def t_quantiles(confidence: float, df: int) -> tuple[float, float]:
    """The standard Student-t quantiles at (1 − confidence)/2 and (1 + confidence)/2 (scipy.stats.t.ppf).

    Kept per (confidence, df): a figure's bands call _t_bounds once per round and line, thousands of
    times with a handful of dfs, and scipy's distribution machinery was ~0.3 ms of each call.
    scipy.special.stdtrit is the function scipy.stats.t.ppf evaluates (t_gen._ppf), with the same result
    bit for bit (checked at 7 confidences × 2,003 dfs); importing scipy.special takes 0.2–0.4 s where
    scipy.stats takes 1.2–1.6, in each table job."""
    from scipy import special  # lazily: tables and figures only

    low, high = special.stdtrit(df, (1.0 - confidence) / 2), special.stdtrit(df, (1.0 + confidence) / 2)
    return float(low), float(high)


def _t_bounds(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """(low, high) of the Student-t interval of the mean; NaN for fewer than 2 values.

    As scipy.stats.t.interval(confidence, df=n − 1, loc=mean, scale=sem) computes it, bit for bit: each
    end is the standard quantile × sem + mean. One departure: equal values (sem = 0) give the point
    [mean, mean] where scipy gives NaN (module docstring: the median's order-statistic interval).

    Non-finite values (scipy gives NaN for any): a NaN gives NaN ends (callers drop NaN seeds before).
    A value at ±∞ among values that are not all that same infinity gives (−∞, ∞): s is infinite, so no
    finite end can be computed from all the seeds, and one from the finite seeds only would silently
    leave the others out (it did, until 2026-11-27). As a finite stand-in M for the infinite values grows,
    the t-interval's ends go to ±∞: one such seed sends the other end to the other infinity (at 95 %:
    |t| > 1), several can send it to either; only (−∞, ∞) holds every case. Values all at the
    same infinity are equal values: the point [±∞, ±∞]. The bounds rule (bounded_interval) reads only
    the infinite side of a set of bounds that holds ∞, so it is unchanged."""
    n = len(values)
    if n < 2:
        return math.nan, math.nan
    if not np.isfinite(values).all():
        if np.isnan(values).any():
            return math.nan, math.nan
        if (values == values[0]).all():  # every seed at the same infinity
            return float(values[0]), float(values[0])
        return -math.inf, math.inf
    mean = float(values.mean())
    sem = float(values.std(ddof=1)) / math.sqrt(n)
    if sem == 0:
        return mean, mean
    q_low, q_high = t_quantiles(confidence, n - 1)
    return q_low * sem + mean, q_high * sem + mean


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Student-t CI of the mean of per-seed values (NaN values are dropped by the caller, not here)."""
    v = np.asarray(values, dtype=np.float64)
    low, high = _t_bounds(v, confidence)
    mean = float(v.mean()) if len(v) else math.nan
    std = float(v.std(ddof=1)) if len(v) > 1 else math.nan
    return Interval(mean, std, low, high, len(v))


def bounded_interval(lower: Sequence[float], upper: Sequence[float],
                     confidence: float = CONFIDENCE) -> Interval:
    """The bounds rule for censored seeds: seed i's value lies in [lower[i], upper[i]] (equal when observed).

    low = t-interval low end over `lower`, high = t-interval high end over `upper`; mean and std only when
    every seed is observed (lower == upper).
    """
    lo, hi = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    if lo.shape != hi.shape:
        raise ValueError(f"lower bounds {lo.shape} and upper bounds {hi.shape} differ in length")
    if (nan := np.isnan(lo) | np.isnan(hi)).any():  # NaN != NaN would count as a censored seed
        raise ValueError(f"bounds of seed(s) {np.flatnonzero(nan).tolist()} are NaN; allowed: numbers or ±∞ "
                         "(drop the seeds without a value before the bounds rule)")
    if (lo > hi).any():
        raise ValueError("a lower bound exceeds its upper bound")
    censored = int((lo != hi).sum())
    if censored == 0:
        return t_interval(lo, confidence)
    low = _t_bounds(lo, confidence)[0]
    high = _t_bounds(hi, confidence)[1]
    return Interval(math.nan, math.nan, low, high, len(lo), censored)


KINDS = ("difference", "level", "direction")
#: the rule as a caption states it, per kind
RULE_TEXT = {
    "difference": "agrees = a bounded CI holds the paper value and excludes 0 (or holds 0 where the paper "
                  "reports 0); same direction = the CI excludes 0 on the paper's side, the paper value "
                  "outside it or the CI unbounded; inconclusive = the CI contains 0 while the paper reports "
                  "an effect, or fewer than 2 seeds; disagrees = the CI excludes 0 on the other side (or at "
                  "all, where the paper reports 0); a paper value stands for the interval of its last "
                  "printed digit (0.3: [0.25, 0.35]; a difference of two printed values, both intervals')",
    "level": "agrees = a bounded CI holds the paper value; disagrees = the CI excludes it, above or below; "
             "inconclusive = no CI, or an unbounded one that holds it; a paper value with decimals stands "
             "for the interval of its last printed digit (98.30: [98.295, 98.305]), a count is exact",
    "direction": "a difference on an offline stand-in at reduced scale is judged for its direction only, "
                 "never its size (the paper's is another data set's and scale's): same direction = the CI "
                 "excludes 0 on the paper's side; inconclusive = the CI contains 0, or fewer than 2 seeds; "
                 "disagrees = the CI excludes 0 on the other side; never agrees",
}


def verdict(paper: float | None, low: float, high: float, comparable: bool = True,
            kind: str = "difference", resolution: float = 0.0) -> str:
    """The cell's verdict against the paper value (see the module docstring for the kinds).

    resolution: how far the paper's true value may lie from the value it prints, half its last printed
    digit (PRINT_RESOLUTION: 0.05 for Ruan et al.'s one decimal, 0.005 for two, the sum of both for a
    difference of two printed values; 0 for counts, which are exact). The CI "holds the paper value"
    when it meets [paper − resolution, paper + resolution]: the paper's 98.30 is any value in [98.295,
    98.305]. A printed 0 is such an interval too. Signs are unaffected: a non-zero printed value is at
    least one unit of its last digit, twice the resolution, from 0; a difference of two printed values
    (98.31 − 98.30, whose interval [0, 0.02] touches 0) has the sign of their order, as the true values
    can tie only on their shared rounding boundary, so the sign of its point value is the paper's."""
    if kind not in KINDS:
        raise ValueError(f"verdict kind {kind!r} is unknown; allowed: {', '.join(KINDS)}")
    try:
        paper = float(paper)  # ±∞: the paper gives a direction only (an unbounded CI can then never agree)
    except (TypeError, ValueError):  # None, pd.NA: no paper value
        return "not comparable"
    if not comparable or math.isnan(paper):
        return "not comparable"
    if math.isnan(low) or math.isnan(high):
        return "inconclusive"
    if math.isinf(low) and math.isinf(high):  # censored both ways (bounds rule): no information, no agreement
        return "inconclusive"
    if not resolution >= 0:
        raise ValueError(f"verdict resolution {resolution!r} is not allowed; allowed: 0 or more")
    bounded = math.isfinite(low) and math.isfinite(high)
    # the printed interval's ends are decimals: in floats 98.3 + 0.005 is 98.30499999999999, below a CI end
    # of 98.305, and a paper difference 98.34 − 98.3 is 0.04000000000000625; rounded to 12 places they are
    # the closed interval the docstring states. An exact value (resolution 0: a count) is not rounded: a
    # paper value below 1e-12 would have become 0
    paper_low, paper_high = ((round(paper - resolution, 12), round(paper + resolution, 12)) if resolution
                             else (paper, paper))
    holds_paper = low <= paper_high and paper_low <= high
    if kind == "level":
        if not holds_paper:
            return "disagrees"
        return "agrees" if bounded else "inconclusive"
    holds_zero = low <= 0 <= high
    if kind == "direction":  # a stand-in: the sign is comparable, the size is not
        if paper == 0 or holds_zero:
            return "inconclusive"
        return "same direction" if (low > 0) == (paper > 0) else "disagrees"
    if paper == 0:  # the paper saw no difference (to its printed digit)
        return ("agrees" if bounded else "inconclusive") if holds_paper else "disagrees"
    if holds_zero:
        return "inconclusive"
    if (1 if low > 0 else -1) != (1 if paper > 0 else -1):
        return "disagrees"
    return "agrees" if holds_paper and bounded else "same direction"


def within(iv: Interval, low: float = -math.inf, high: float = math.inf) -> Interval:
    """The interval cut to the range its quantity can take (a count of epochs ≥ 1, an accuracy in
    [0, 100], a variance ≥ 0): the t-interval knows no range, and no mean lies outside it (an audit found
    "[-38.4, ∞]" epochs to recover where every seed took at least 5). NaN ends stay NaN."""
    lo = iv.low if math.isnan(iv.low) else min(max(iv.low, low), high)
    hi = iv.high if math.isnan(iv.high) else max(min(iv.high, high), low)
    return Interval(iv.mean, iv.std, lo, hi, iv.n, iv.n_censored)


def verdict_counts(verdicts: Sequence[str]) -> dict[str, int]:
    """How many cells got each verdict, in the fixed order of VERDICTS (zeros included)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for v in verdicts:
        if v not in counts:
            raise ValueError(f"verdict {v!r} is unknown; allowed: {', '.join(VERDICTS)}")
        counts[v] += 1
    return counts


def counts_text(verdicts: Sequence[str]) -> str:
    """'3 agree, 1 same direction, ...' for captions (every verdict named, zeros included)."""
    counts = verdict_counts(verdicts)
    return ", ".join(f"{n} {name}" for name, n in counts.items())


#: below this a value is float noise (a difference of equal runs summed in another order), printed as 0
ZERO_NOISE = 1e-9


def interval_text(iv: Interval, digits: int = 1) -> str:
    """A cell as people read it: 'mean [low, high]'; '—' when empty. Where the mean is NaN the head says
    why instead: 'k of n censored [low, high]' (the bounds rule), 'no mean (seeds at ∞ and −∞) [−∞, ∞]'
    (∞ − ∞ has no value) or 'no mean (a seed is NaN)' (a NaN seed a caller left in; no CI either)."""
    if iv.n == 0:
        return "—"

    def fmt(x: float, bound: bool = False) -> str:
        if math.isinf(x):
            return "∞" if x > 0 else "−∞"
        shown = round(x, digits)
        if shown == 0 and bound and abs(x) >= ZERO_NOISE:
            # a bound's side of 0 decides the verdict: "[0.0, 0.8]" for a low end of −0.004 read as
            # excluding 0 beside an "inconclusive" (an audit); enough digits to show its first one
            return f"{x:.{max(digits, -math.floor(math.log10(abs(x))))}f}"
        return f"{shown if shown != 0 else 0.0:.{digits}f}"  # float noise below the digits is 0, not "-0.0"

    ci = "" if math.isnan(iv.low) else f" [{fmt(iv.low, True)}, {fmt(iv.high, True)}]"
    return _head(iv, fmt) + ci


def excluded_text(n_excluded: int) -> str:
    """A cell's note of the seeds left out of it (a relative change from 0, both runs diverged, a missing
    measure), or nothing when none was."""
    return f" ({int(n_excluded)} excl.)" if n_excluded > 0 else ""


def _head(iv: Interval, fmt: Callable[[float], str]) -> str:
    """The cell's first part: its mean, or, where the mean is NaN, why (each way it can be NaN)."""
    if not math.isnan(iv.mean):
        return fmt(iv.mean)
    if iv.n_censored:  # the bounds rule: the mean is never made up
        return f"{iv.n_censored} of {iv.n} censored"
    if iv.low == -math.inf and iv.high == math.inf:  # ∞ − ∞: seeds at both infinities (t_interval)
        return "no mean (seeds at ∞ and −∞)"
    if math.isnan(iv.low) and math.isnan(iv.high):  # a NaN seed left in: every number is NaN
        return "no mean (a seed is NaN)"
    return "no mean"
