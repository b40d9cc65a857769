"""Participation traces of Ruan et al. (2021), Table 2 — a documented reconstruction.

Ruan et al. §5.1 record, per round, the fraction of the E required local epochs a Raspberry Pi submits
before a deadline (T_0…T_90: 0–90 % competing CPU load, no inactive rounds; T_hi, T_mi, T_lo: high,
medium, low bandwidth, with inactive rounds). Only the mean and standard deviation of each trace are
published, so each trace here is a distribution that matches those two moments:

    s / E = 0                                   with probability p_inactive (T_hi, T_mi, T_lo only)
    s / E = clip(Z, low, 1),  Z ~ N(mu, sigma²)  otherwise

T_0 is the constant 1. The clip at 1 gives the point mass of complete rounds Scheme A needs; ``low``
keeps active rounds away from 0. (mu, sigma) are fitted so the mixture's exact mean and std equal
Table 2. Each device gets one trace from the first ``num_traces`` traces — drawn uniformly and
independently (``random``, Ruan et al. §5.1: "each simulated device is randomly assigned a trace") or
spread evenly (``stratified``, a reading: docs/readings.md) — and samples its fraction i.i.d. from it
every round.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from hetfl.data.tracesets import TRACE_NAMES, parse_traceset, traceset_label
from hetfl.io import atomic_savez, atomic_write

__all__ = [
    "ASSIGNMENTS",
    "DEFAULT_LOW",
    "DEFAULT_P_INACTIVE",
    "NoFitError",
    "TRACE_NAMES",
    "TraceDistribution",
    "Traces",
    "generate_traces",
    "load_traces",
    "make_traces",
    "parse_traceset",
    "reference_moments",
    "save_traces",
    "trace_distribution",
    "traceset_label",
]

DEFAULT_P_INACTIVE = 0.05  # for the traces with inactive rounds (T_hi, T_mi, T_lo)
ASSIGNMENTS = ("random", "stratified")
DEFAULT_LOW = 0.05  # lower clip of active fractions: low * E >= 1 epoch for E >= 20
_REFERENCE_CSV = "reports/references/ruan2021_table2_traces.csv"
# (mu, sigma) that _fit finds for each trace at the default p_inactive and low, as _fit computes them:
# least_squares with scipy took 2.4 of a trace job's 4 s (its import and seven fits), and make reproduce
# runs 60 trace jobs. tests/test_traces.py recomputes every row with _fit and requires the same floats;
# write_fit_table() rewrites the file. Other p_inactive values are fitted when asked for.
_FITS_CSV = "reports/references/ruan2021_table2_fits.csv"
_FIT_COLUMNS = ("trace", "p_inactive", "low", "mean", "std", "mu", "sigma")
_FIT_TOL = 1e-9


def _package_csv(name: str) -> list[dict[str, str]]:
    """The rows of a CSV shipped in the package, read with the csv module (pandas alone was a third of a
    trace job)."""
    with resources.files("hetfl").joinpath(name).open("r", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@functools.lru_cache(maxsize=1)
def _reference_rows() -> dict[str, tuple[float, float, bool]]:
    """trace -> (mean %, std % of epochs, has inactive rounds): Ruan et al. Table 2."""
    rows = _package_csv(_REFERENCE_CSV)
    if tuple(r["trace"] for r in rows) != TRACE_NAMES:
        raise ValueError(f"{_REFERENCE_CSV}: traces {tuple(r['trace'] for r in rows)} != {TRACE_NAMES}")
    return {r["trace"]: (float(r["mean_pct_epochs"]), float(r["std_pct_epochs"]),
                         r["has_inactive"].strip().lower() in ("1", "true")) for r in rows}


def reference_moments():
    """Ruan et al. Table 2: columns trace, mean_pct_epochs, std_pct_epochs, has_inactive (a DataFrame)."""
    import pandas as pd

    return pd.DataFrame([(t, *row) for t, row in _reference_rows().items()],
                        columns=["trace", "mean_pct_epochs", "std_pct_epochs", "has_inactive"])


def _clipped_normal_moments(mu: float, sigma: float, low: float) -> tuple[float, float]:
    from scipy import stats  # lazily: loading traces for training needs no scipy

    """E[Y], E[Y²] for Y = clip(Z, low, 1), Z ~ N(mu, sigma²) (closed form via Φ, φ)."""
    if sigma == 0:
        y = min(max(mu, low), 1.0)
        return y, y * y
    a, b = (low - mu) / sigma, (1.0 - mu) / sigma
    cdf_a, cdf_b = stats.norm.cdf(a), stats.norm.cdf(b)
    pdf_a, pdf_b = stats.norm.pdf(a), stats.norm.pdf(b)
    mass = cdf_b - cdf_a
    upper = stats.norm.sf(b)
    m1 = low * cdf_a + upper + mu * mass + sigma * (pdf_a - pdf_b)
    m2 = (
        low * low * cdf_a
        + upper
        + mu * mu * mass
        + 2.0 * mu * sigma * (pdf_a - pdf_b)
        + sigma * sigma * (mass + a * pdf_a - b * pdf_b)
    )
    return float(m1), float(m2)


def _mixture_moments(p_inactive: float, mu: float, sigma: float, low: float) -> tuple[float, float]:
    m1, m2 = _clipped_normal_moments(mu, sigma, low)
    mean = (1.0 - p_inactive) * m1
    var = (1.0 - p_inactive) * m2 - mean * mean
    return mean, math.sqrt(max(var, 0.0))


@dataclass(frozen=True)
class TraceDistribution:
    """One trace: 0 w.p. ``p_inactive``, else clip(N(mu, sigma²), low, 1); ``mean``, ``std``: Table 2."""

    name: str
    mean: float
    std: float
    p_inactive: float
    mu: float
    sigma: float
    low: float

    def sample(self, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
        """i.i.d. fractions in [0, 1]; exactly 0 only for inactive draws (probability ``p_inactive``)."""
        out = np.clip(rng.normal(self.mu, self.sigma, size), self.low, 1.0)
        if self.p_inactive > 0:
            out[rng.random(out.shape) < self.p_inactive] = 0.0
        return out

    def moments(self) -> tuple[float, float]:
        """Exact mean and std of the distribution (closed-form clipped-normal moments)."""
        return _mixture_moments(self.p_inactive, self.mu, self.sigma, self.low)


class NoFitError(ValueError):
    """A p_inactive whose zeros alone exceed a trace's Table 2 std: no (mu, sigma) fits. `why` says so
    and gives the bound, for the callers that name their own key or flag (config, hetfl trace)."""

    def __init__(self, p_inactive: float, std: float, bound: float) -> None:
        self.why = (f"the zeros alone give a std above the target {std:.4f}; allowed: p_inactive < "
                    f"{bound:.4f}")
        super().__init__(f"p_inactive={p_inactive}: {self.why}")


def _fit(mean: float, std: float, p_inactive: float, low: float) -> tuple[float, float]:
    """Solve for (mu, sigma) so that the mixture's mean/std equal (mean, std)."""
    m_act = mean / (1.0 - p_inactive)
    var_act = (std * std - p_inactive * (1.0 - p_inactive) * m_act * m_act) / (1.0 - p_inactive)
    if var_act <= 0:
        # var_act <= 0  <=>  std² <= p·mean²/(1 − p)  <=>  p >= std²/(std² + mean²)
        raise NoFitError(p_inactive, std, std * std / (std * std + mean * mean))

    def residual(theta: np.ndarray) -> np.ndarray:
        got = _mixture_moments(p_inactive, float(theta[0]), math.exp(float(theta[1])), low)
        return np.array([got[0] - mean, got[1] - std])

    x0 = np.array([m_act, 0.5 * math.log(var_act)])
    from scipy import optimize

    sol = optimize.least_squares(residual, x0, xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=2000)
    if np.max(np.abs(sol.fun)) > _FIT_TOL:
        raise ValueError(
            f"cannot match mean={mean}, std={std} with p_inactive={p_inactive}, low={low}: residual {sol.fun}"
        )
    return float(sol.x[0]), math.exp(float(sol.x[1]))


@functools.lru_cache(maxsize=1)
def _fit_table() -> dict[tuple[str, float, float, float, float], tuple[float, float]]:
    """(trace, p_inactive, low, mean, std) -> (mu, sigma) from _FITS_CSV (floats written with repr: exact)."""
    return {(r["trace"], *(float(r[k]) for k in _FIT_COLUMNS[1:5])): (float(r["mu"]), float(r["sigma"]))
            for r in _package_csv(_FITS_CSV)}


def fit_rows(p_inactive: float = DEFAULT_P_INACTIVE, low: float = DEFAULT_LOW) -> list[dict[str, object]]:
    """The rows of _FITS_CSV, computed with _fit: every trace with a spread (T_0 needs no fit), at
    `p_inactive` for the traces with inactive rounds and 0 for the others."""
    rows = []
    for name, (mean_pct, std_pct, has_inactive) in _reference_rows().items():
        if std_pct == 0:
            continue
        p = p_inactive if has_inactive else 0.0
        mean, std = mean_pct / 100.0, std_pct / 100.0
        mu, sigma = _fit(mean, std, p, low)
        rows.append(dict(zip(_FIT_COLUMNS, (name, p, low, mean, std, mu, sigma), strict=True)))
    return rows


def write_fit_table(path: str | os.PathLike[str]) -> None:
    """Write fit_rows() as _FITS_CSV (`python -c "from hetfl.data.traces import write_fit_table;
    write_fit_table('src/hetfl/reports/references/ruan2021_table2_fits.csv')"` after changing _fit)."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(_FIT_COLUMNS)
        for row in fit_rows():
            w.writerow([row[k] if isinstance(row[k], str) else repr(row[k]) for k in _FIT_COLUMNS])


@functools.lru_cache(maxsize=64)
def _trace_distribution(name: str, p_inactive: float) -> TraceDistribution:
    mean_pct, std_pct, _ = _reference_rows()[name]
    mean, std = mean_pct / 100.0, std_pct / 100.0
    if std == 0:
        return TraceDistribution(name, mean, std, p_inactive, mu=mean, sigma=0.0, low=DEFAULT_LOW)
    fitted = _fit_table().get((name, p_inactive, DEFAULT_LOW, mean, std))
    mu, sigma = fitted if fitted is not None else _fit(mean, std, p_inactive, DEFAULT_LOW)
    return TraceDistribution(name, mean, std, p_inactive, mu=mu, sigma=sigma, low=DEFAULT_LOW)


def trace_distribution(name: str, p_inactive: float | None = None) -> TraceDistribution:
    """The fitted distribution of trace ``name`` (cached; pure function of its arguments).

    ``p_inactive`` defaults to 0.05 for T_hi, T_mi, T_lo and must be 0 for T_0…T_90 (Table 2: no zeros).
    """
    if name not in TRACE_NAMES:
        raise ValueError(f"name={name!r} is not a trace; allowed: {TRACE_NAMES}")
    has_inactive = _has_inactive(name)
    if p_inactive is None:
        p_inactive = DEFAULT_P_INACTIVE if has_inactive else 0.0
    if isinstance(p_inactive, bool) or not isinstance(p_inactive, int | float | np.floating):
        raise ValueError(f"p_inactive={p_inactive!r} must be a number in [0, 1)")
    p_inactive = float(p_inactive)
    if not has_inactive and p_inactive != 0:
        raise ValueError(
            f"p_inactive={p_inactive} for {name}: Table 2 has no inactive rounds there; allowed: 0"
        )
    if not 0 <= p_inactive < 1:
        raise ValueError(f"p_inactive={p_inactive} must be in [0, 1)")
    return _trace_distribution(name, p_inactive)


@dataclass
class Traces:
    """Per-round participation: ``fractions[τ-1, k]`` is the fraction of E device k completes in round τ."""

    fractions: np.ndarray  # float64 [R, N], 0 = inactive
    assignment: np.ndarray  # int64 [N], index into trace_names
    trace_names: tuple[str, ...]  # the first num_traces names
    params: dict | None = None  # how they were made (make_traces): traceset, N, R, seed, assignment, ...

    def devices_per_trace(self) -> dict[str, int]:
        """How many devices each trace got (run.json records it: a multinomial draw varies by seed)."""
        counts = np.bincount(self.assignment, minlength=len(self.trace_names))
        return {name: int(c) for name, c in zip(self.trace_names, counts, strict=True)}

    @property
    def rounds(self) -> int:
        return int(self.fractions.shape[0])

    @property
    def num_devices(self) -> int:
        return int(self.fractions.shape[1])


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        allowed = f"an integer in {low}..{high}" if high is not None else f"an integer >= {low}"
        raise ValueError(f"{name}={value!r} is not allowed; allowed: {allowed}")
    return int(value)  # type: ignore[arg-type]


def generate_traces(num_traces: int, num_devices: int, rounds: int, seed: int,
                    names: Sequence[str] = TRACE_NAMES, assignment: str = "random",
                    p_inactive: float | None = None) -> Traces:
    """Assign each device a trace from the first ``num_traces`` of ``names`` and sample ``rounds`` fractions.

    assignment "random": each device's trace uniformly and independently (a multinomial count per trace);
    "stratified": a random permutation of N devices over the traces in turn (N // |T| or N // |T| + 1 each).
    p_inactive: the inactive probability of the traces that have inactive rounds (None = 0.05).
    Deterministic in ``seed`` (``np.random.default_rng(seed)``): the assignment is drawn first, then each
    trace's devices' [rounds, n_t] block in trace order.
    """
    names = tuple(names)
    unknown = [n for n in names if n not in TRACE_NAMES]
    if unknown:
        raise ValueError(f"trace name(s) {', '.join(unknown)} unknown; allowed: {', '.join(TRACE_NAMES)}")
    num_traces = _check_int("num_traces", num_traces, 1, len(names))
    num_devices = _check_int("num_devices", num_devices, 1)
    rounds = _check_int("rounds", rounds, 1)
    seed = _check_int("seed", seed, 0)
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"assignment={assignment!r} is not allowed; allowed: {', '.join(ASSIGNMENTS)}")
    rng = np.random.default_rng(seed)
    if assignment == "random":
        assigned = rng.integers(0, num_traces, size=num_devices).astype(np.int64)
    else:
        assigned = rng.permutation(np.arange(num_devices, dtype=np.int64) % num_traces)
    fractions = np.empty((rounds, num_devices), dtype=np.float64)
    for t in range(num_traces):
        cols = np.flatnonzero(assigned == t)
        if cols.size:
            inactive = None if p_inactive is None or not _has_inactive(names[t]) else p_inactive
            fractions[:, cols] = trace_distribution(names[t], inactive).sample(rng, (rounds, cols.size))
    return Traces(fractions=fractions, assignment=assigned, trace_names=names[:num_traces])


def _has_inactive(name: str) -> bool:
    return _reference_rows()[name][2]


def make_traces(out_npz: str | os.PathLike[str], *, traceset: str, num_devices: int, rounds: int, seed: int,
                assignment: str = "random", p_inactive: float = DEFAULT_P_INACTIVE) -> Traces:
    """Traces of a trace set ("T8", or names joined by '-'), written with the parameters that made them."""
    names = parse_traceset(traceset)
    tr = generate_traces(len(names), num_devices, rounds, seed, names=names, assignment=assignment,
                         p_inactive=p_inactive)
    tr.params = {"traceset": traceset, "num_devices": num_devices, "rounds": rounds, "seed": seed,
                 "assignment": assignment, "p_inactive": float(p_inactive)}
    out = Path(out_npz)
    save_traces(tr, out, out.with_suffix(".csv"))
    return tr


def save_traces(traces: Traces, npz_path: str | os.PathLike[str], csv_path: str | os.PathLike[str]) -> None:
    """Write ``traces`` atomically as NPZ (exact) and long CSV: round (1-based), device, trace, fraction."""
    fr, asg = np.asarray(traces.fractions, dtype=np.float64), np.asarray(traces.assignment, dtype=np.int64)
    names = np.array(traces.trace_names, dtype=np.str_)
    params = np.array(json.dumps(traces.params or {}, sort_keys=True))
    atomic_savez(npz_path, fractions=fr, assignment=asg, trace_names=names, params=params)
    r, n = fr.shape
    trace_of = np.asarray(traces.trace_names, dtype=object)[asg]

    def write_csv(tmp) -> None:  # the bytes pandas' to_csv wrote: floats as repr, "\n" line ends
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(("round", "device", "trace", "fraction"))
            w.writerows((tau + 1, k, trace_of[k], repr(float(fr[tau, k])))
                        for tau in range(r) for k in range(n))

    atomic_write(csv_path, write_csv)


def load_traces(npz_path: str | os.PathLike[str]) -> Traces:
    """Read traces written by :func:`save_traces`."""
    with np.load(npz_path, allow_pickle=False) as z:
        fractions = np.asarray(z["fractions"], dtype=np.float64)
        assignment = np.asarray(z["assignment"], dtype=np.int64)
        names = tuple(str(s) for s in z["trace_names"])
        params = json.loads(str(z["params"])) if "params" in z else None
    if fractions.ndim != 2 or assignment.shape != (fractions.shape[1],):
        raise ValueError(
            f"{npz_path}: fractions {fractions.shape} and assignment {assignment.shape} disagree"
        )
    return Traces(fractions=fractions, assignment=assignment, trace_names=names, params=params or None)
