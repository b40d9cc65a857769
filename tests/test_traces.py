"""Participation traces reconstructed from Ruan et al. Table 2 (hetfl.data.traces)."""

import numpy as np
import pandas as pd
import pytest

from hetfl.data.traces import (
    TRACE_NAMES,
    generate_traces,
    load_traces,
    reference_moments,
    save_traces,
    trace_distribution,
)

TABLE2 = reference_moments().set_index("trace")
WITH_ZEROS = {"T_hi", "T_mi", "T_lo"}


def test_reference_table() -> None:
    assert tuple(TABLE2.index) == TRACE_NAMES
    assert TABLE2.loc["T_30", "mean_pct_epochs"] == pytest.approx(75.3)
    assert set(TABLE2.index[TABLE2["has_inactive"].astype(bool)]) == WITH_ZEROS


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_moments_match_table2(name: str) -> None:
    dist = trace_distribution(name)
    target_mean = TABLE2.loc[name, "mean_pct_epochs"] / 100
    target_std = TABLE2.loc[name, "std_pct_epochs"] / 100
    mean, std = dist.moments()
    assert mean == pytest.approx(target_mean, abs=0.005)
    assert std == pytest.approx(target_std, abs=0.005)
    s = dist.sample(np.random.default_rng(7), 200_000)
    assert s.min() >= 0.0 and s.max() <= 1.0
    assert s.mean() == pytest.approx(target_mean, abs=0.01)
    assert s.std() == pytest.approx(target_std, abs=0.01)
    zeros = np.mean(s == 0)
    if name in WITH_ZEROS:
        assert dist.p_inactive == 0.05
        assert zeros == pytest.approx(0.05, abs=0.005)
        assert s[s > 0].min() >= dist.low
    else:
        assert zeros == 0.0


def test_t0_is_constant_one() -> None:
    s = trace_distribution("T_0").sample(np.random.default_rng(0), 1000)
    np.testing.assert_array_equal(s, 1.0)


def test_complete_rounds_occur() -> None:
    s = trace_distribution("T_30").sample(np.random.default_rng(0), 10_000)
    assert 0.02 < np.mean(s == 1.0) < 0.2
    # Scheme A: the last traces have far fewer complete rounds than T_30 (Ruan et al. §5.2)
    s_lo = trace_distribution("T_lo").sample(np.random.default_rng(0), 10_000)
    assert np.mean(s_lo == 1.0) < np.mean(s == 1.0) / 5


def test_p_inactive_override() -> None:
    d = trace_distribution("T_mi", p_inactive=0.02)
    assert d.moments() == pytest.approx((0.741, 0.223), abs=1e-6)
    assert d.mu != trace_distribution("T_mi").mu
    with pytest.raises(ValueError, match="p_inactive"):
        trace_distribution("T_mi", p_inactive=0.1)  # zeros alone would exceed the published std
    assert trace_distribution("T_mi", p_inactive=0.0).p_inactive == 0.0
    with pytest.raises(ValueError, match="p_inactive"):
        trace_distribution("T_30", p_inactive=0.05)
    with pytest.raises(ValueError, match="name"):
        trace_distribution("T_99")


def test_generate_assignment_uses_first_traces() -> None:
    tr = generate_traces(3, 400, 20, seed=0)
    assert tr.fractions.shape == (20, 400) and tr.fractions.dtype == np.float64
    assert tr.assignment.dtype == np.int64
    assert set(np.unique(tr.assignment)) == {0, 1, 2}
    assert tr.trace_names == ("T_0", "T_30", "T_50")
    np.testing.assert_array_equal(tr.fractions[:, tr.assignment == 0], 1.0)
    assert np.all(tr.fractions > 0)  # no zeros in the first five traces
    tr8 = generate_traces(8, 400, 50, seed=0)
    zero_cols = np.flatnonzero((tr8.fractions == 0).any(axis=0))
    assert set(tr8.assignment[zero_cols]) <= {5, 6, 7}
    assert len(zero_cols) > 0


def test_generate_seeded() -> None:
    a, b, c = generate_traces(8, 30, 10, 1), generate_traces(8, 30, 10, 1), generate_traces(8, 30, 10, 2)
    np.testing.assert_array_equal(a.fractions, b.fractions)
    np.testing.assert_array_equal(a.assignment, b.assignment)
    assert not np.array_equal(a.fractions, c.fractions)


@pytest.mark.parametrize(
    ("args", "argname"),
    [
        ((0, 10, 10, 0), "num_traces"),
        ((9, 10, 10, 0), "num_traces"),
        ((1.5, 10, 10, 0), "num_traces"),
        ((3, 0, 10, 0), "num_devices"),
        ((3, 10, 0, 0), "rounds"),
        ((3, 10, 10, -1), "seed"),
    ],
)
def test_bad_arguments_refused(args: tuple, argname: str) -> None:
    with pytest.raises(ValueError, match=argname):
        generate_traces(*args)


def test_traces_saved_under_any_name_are_in_that_file(tmp_path) -> None:
    """`hetfl trace --out x.npy`: np.savez given a file name appends ".npz" to one without it, so x.npy
    was left empty and the traces went to a hidden temporary file beside it (an audit found it)."""
    tr = generate_traces(2, 5, 3, seed=1)
    out = tmp_path / "x.npy"
    save_traces(tr, out, tmp_path / "x.csv")
    np.testing.assert_array_equal(load_traces(out).fractions, tr.fractions)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.csv", "x.npy"]


def test_save_load_round_trip(tmp_path) -> None:
    tr = generate_traces(8, 12, 6, seed=5)
    npz, csv = tmp_path / "sub" / "traces.npz", tmp_path / "sub" / "traces.csv"
    save_traces(tr, npz, csv)
    back = load_traces(npz)
    np.testing.assert_array_equal(back.fractions, tr.fractions)
    np.testing.assert_array_equal(back.assignment, tr.assignment)
    assert back.trace_names == tr.trace_names
    df = pd.read_csv(csv)
    assert list(df.columns) == ["round", "device", "trace", "fraction"]
    assert len(df) == 6 * 12 and df["round"].min() == 1 and df["round"].max() == 6
    row = df[(df["round"] == 3) & (df["device"] == 4)].iloc[0]
    assert row["fraction"] == tr.fractions[2, 4]
    assert row["trace"] == TRACE_NAMES[tr.assignment[4]]
    assert sorted(p.name for p in npz.parent.iterdir()) == ["traces.csv", "traces.npz"]  # no temp files left


def test_the_shipped_fits_are_what_the_fit_computes(tmp_path) -> None:
    """reports/references/ruan2021_table2_fits.csv caches _fit's (mu, sigma) so that a trace job needs no
    scipy: rewritten from the code now, it must be the same bytes (a changed fit, low or Table 2 shows)."""
    from importlib import resources

    from hetfl.data.traces import _FITS_CSV, write_fit_table

    write_fit_table(tmp_path / "fits.csv")
    shipped = resources.files("hetfl").joinpath(_FITS_CSV).read_text(encoding="utf-8")
    assert (tmp_path / "fits.csv").read_text(encoding="utf-8") == shipped


def test_default_traces_use_the_shipped_fits_and_other_p_inactive_is_fitted(monkeypatch) -> None:
    from hetfl.data import traces

    traces._trace_distribution.cache_clear()
    fitted = []
    real_fit = traces._fit
    monkeypatch.setattr(traces, "_fit", lambda *a: fitted.append(a) or real_fit(*a))
    for name in TRACE_NAMES:
        trace_distribution(name)
    assert fitted == []  # every default distribution came from the table
    dist = trace_distribution("T_hi", 0.02)
    assert len(fitted) == 1 and dist.moments() == pytest.approx((0.825, 0.233), abs=1e-9)
    traces._trace_distribution.cache_clear()


def test_trace_csv_is_the_long_table_pandas_wrote(tmp_path) -> None:
    """save_traces writes its CSV with the csv module: the bytes of the pandas to_csv it replaced."""
    tr = generate_traces(8, 13, 9, seed=2)
    save_traces(tr, tmp_path / "t.npz", tmp_path / "t.csv")
    r, n = tr.fractions.shape
    expect = pd.DataFrame({"round": np.repeat(np.arange(1, r + 1), n), "device": np.tile(np.arange(n), r),
                           "trace": np.tile(np.asarray(tr.trace_names, dtype=object)[tr.assignment], r),
                           "fraction": tr.fractions.reshape(-1)}).to_csv(index=False)
    assert (tmp_path / "t.csv").read_text() == expect
