"""Metrics read off training curves (Ruan et al. Tables 4 and 5).

Both tables count "the number of global epochs after the arriving [departing] time τ0 until ...". The event
takes effect in round τ0 (docs/events.md), so round τ0 is the first epoch after it: a curve that is back
(has crossed) in round τ0 itself took 1 epoch, in round τ0 + r, r + 1. The learning-rate restart
η0/(τ − τ0 + 1) counts the same way, and none of the paper's 51 Table 4–5 values is 0. (Until 2026-11-26
hetfl counted r, one less.)

A curve that never gets there within the run is reported as "> R" (R = epochs observed from τ0 on),
never as a number it did not reach: the functions return None and `format_rounds` writes the bound.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def rounds_to_recover(acc: pd.Series, tau0: int) -> int | None:
    """Table 4: global epochs from τ0 on until test accuracy is back at its τ0 − 1 level.

    acc is indexed by round. Returns r + 1 for the first r ≥ 0 with acc[τ0 + r] ≥ acc[τ0 − 1], or None.
    """
    if tau0 - 1 not in acc.index:
        raise ValueError(f"the curve has no value at round τ0 − 1 = {tau0 - 1}")
    level = acc.loc[tau0 - 1]
    after = acc[acc.index >= tau0].sort_index()
    hit = after[after.to_numpy() >= level]
    return None if hit.empty else int(hit.index[0] - tau0) + 1


def rounds_to_cross(include: pd.Series, exclude: pd.Series, tau0: int) -> int | None:
    """Table 5: global epochs from τ0 on until the exclude test loss is below the include one.

    Right after a departure the include model (old objective) has the lower loss; the curves cross at
    the first r ≥ 0 with exclude[τ0 + r] < include[τ0 + r] (strict: a tie is not yet a crossing), which
    took r + 1 epochs; None if they never do. A round where either loss is not finite (a diverged run's
    last row: finite weights can still give an infinite loss) is not observed: an include loss of +inf is
    no crossing.
    """
    both = pd.concat({"inc": include, "exc": exclude}, axis=1)
    both = both[np.isfinite(both.to_numpy()).all(axis=1)]
    both = both[both.index >= tau0].sort_index()
    crossed = both[both["exc"].to_numpy() < both["inc"].to_numpy()]
    return None if crossed.empty else int(crossed.index[0] - tau0) + 1


def format_rounds(value: int | None, observed: int) -> str:
    return f"> {observed}" if value is None else str(value)


def observed_after(curve: pd.Series, tau0: int) -> int:
    """Epochs observed from τ0 on (the R of "> R"), rounds τ0 … the last finite value: a run that diverged
    (NaN or ±inf from then on) was not observed after it."""
    idx = np.asarray(curve[np.isfinite(curve.to_numpy())].index)
    return int(idx.max() - tau0) + 1 if len(idx) and idx.max() >= tau0 else 0
