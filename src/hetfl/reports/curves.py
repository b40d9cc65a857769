"""Metrics read off training curves (Ruan et al. Tables 4 and 5).

A curve that never gets there within the run is reported as "> R" (R = rounds observed after τ0),
never as a number it did not reach: the functions return None and `format_rounds` writes the bound.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def rounds_to_recover(acc: pd.Series, tau0: int) -> int | None:
    """Table 4: rounds after τ0 until test accuracy is back at its τ0 − 1 level.

    acc is indexed by round. Returns r ≥ 0 with acc[τ0 + r] ≥ acc[τ0 − 1] for the first such r, or None.
    """
    if tau0 - 1 not in acc.index:
        raise ValueError(f"the curve has no value at round τ0 − 1 = {tau0 - 1}")
    level = acc.loc[tau0 - 1]
    after = acc[acc.index >= tau0].sort_index()
    hit = after[after.to_numpy() >= level]
    return None if hit.empty else int(hit.index[0] - tau0)


def rounds_to_cross(include: pd.Series, exclude: pd.Series, tau0: int) -> int | None:
    """Table 5: rounds after τ0 until the exclude test loss is no longer above the include one.

    Right after a departure the include model (old objective) has the lower loss; the curves cross at
    the first r ≥ 0 with exclude[τ0 + r] < include[τ0 + r] (strict: a tie is not yet a crossing), or None.
    """
    both = pd.concat({"inc": include, "exc": exclude}, axis=1).dropna()
    both = both[both.index >= tau0].sort_index()
    crossed = both[both["exc"].to_numpy() < both["inc"].to_numpy()]
    return None if crossed.empty else int(crossed.index[0] - tau0)


def format_rounds(value: int | None, observed: int) -> str:
    return f"> {observed}" if value is None else str(value)


def observed_after(curve: pd.Series, tau0: int) -> int:
    """Rounds observed after τ0 (the R of "> R"): up to the last finite value, since a run that diverged
    (NaN from then on) was not observed after it."""
    idx = np.asarray(curve.dropna().index)
    return int(idx.max() - tau0) if len(idx) and idx.max() >= tau0 else 0
