"""Arrivals and departures (Ruan et al. §4.2, §5.3–5.4) on tiny federations, and curve metrics."""

import numpy as np
import pandas as pd
import pytest

from hetfl.data.events import Event, build_schedule, fast_reboot_boost
from hetfl.reports.curves import format_rounds, observed_after, rounds_to_cross, rounds_to_recover


def test_fast_reboot_boost_schedule():
    # 3·p^l at τ0, then 1 + 2/(τ − τ0 + 1)²: O((τ − τ0)^−2) decay to p^l
    assert fast_reboot_boost(10, 10) == pytest.approx(3.0)
    assert fast_reboot_boost(11, 10) == pytest.approx(1.5)
    assert fast_reboot_boost(12, 10) == pytest.approx(1 + 2 / 9)
    assert fast_reboot_boost(9, 10) == 1.0
    tail = [(fast_reboot_boost(10 + t, 10) - 1) * (t + 1) ** 2 for t in range(1, 50)]
    assert np.allclose(tail, 2.0)


def test_the_relative_boost_decay_reading():
    """event.boost_decay: relative = 1 + 2(τ0/τ)², 3·p^l at τ0 and an O(τ^−2) excess like the default, but
    counted from round 1: at τ = 2τ0 it is 1.5, where the shifted decay is 1 + 2/(τ0 + 1)²."""
    assert fast_reboot_boost(10, 10, decay="relative") == pytest.approx(3.0)
    assert fast_reboot_boost(20, 10, decay="relative") == pytest.approx(1.5)
    assert fast_reboot_boost(20, 10) == pytest.approx(1 + 2 / 121)
    assert fast_reboot_boost(9, 10, decay="relative") == 1.0
    with pytest.raises(ValueError, match="boost decay 'linear' is not allowed; allowed: shifted, relative"):
        fast_reboot_boost(10, 10, decay="linear")
    s = build_schedule([Event("arrival", 4, (2,), "fast_reboot")], num_devices=3, rounds=8,
                       boost_decay="relative")
    np.testing.assert_allclose(s.boost[[3, 7], 2], [3.0, 1 + 2 * (4 / 8) ** 2])


def test_the_boost_decay_reading_in_a_config():
    """The default leaves the run specs as they were (no key); the readings axis makes fast-reboot variants
    only, and their schedule decays relatively."""
    from hetfl.config import expand_runs, validate_config
    from hetfl.pipeline import event_schedule

    exp = {"table": "fast_reboot", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
           "num_devices": 4, "sizes": {"distribution": "equal", "size": 20}, "schemes": ["C"],
           "num_traces": [1], "rounds": 12, "seeds": [0],
           "event": {"kind": "arrival", "rounds": [5], "policies": ["fast_reboot", "vanilla"]},
           "readings": {"boost_decay": ["relative"]}}
    runs = {r.run: r for r in expand_runs(validate_config({"experiments": {"e": exp}}))}
    assert sorted(runs) == ["N_T1_C_arr5_fast_reboot_s0", "N_T1_C_arr5_fast_reboot_s0__boost_decay-relative",
                            "N_T1_C_arr5_vanilla_s0"]
    assert "boost_decay" not in runs["N_T1_C_arr5_fast_reboot_s0"].event
    variant = runs["N_T1_C_arr5_fast_reboot_s0__boost_decay-relative"]
    assert variant.event["boost_decay"] == "relative"
    np.testing.assert_allclose(event_schedule(variant, 4).boost[9, 3], 1 + 2 * (5 / 10) ** 2)
    np.testing.assert_allclose(event_schedule(runs["N_T1_C_arr5_fast_reboot_s0"], 4).boost[9, 3], 1 + 2 / 36)


def test_the_boost_reading_makes_fast_reboot_variants_only():
    """Vanilla reboot has no boost (all ones), so additive and multiplicative give it the same weights: its
    boost=multiplicative variants were 20 runs of make reproduce, each bit-identical to its default run,
    where docs/readings.md says a reading that cannot change a run is not run again (an audit)."""
    from hetfl.config import expand_runs, validate_config

    exp = {"table": "fast_reboot", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
           "num_devices": 4, "sizes": {"distribution": "equal", "size": 20}, "schemes": ["C"],
           "num_traces": [1], "rounds": 12, "seeds": [0],
           "event": {"kind": "arrival", "rounds": [5], "policies": ["fast_reboot", "vanilla"]},
           "readings": {"boost": ["multiplicative"]}}
    runs = sorted(r.run for r in expand_runs(validate_config({"experiments": {"e": exp}})))
    assert runs == ["N_T1_C_arr5_fast_reboot_s0", "N_T1_C_arr5_fast_reboot_s0__boost-multiplicative",
                    "N_T1_C_arr5_vanilla_s0"]


def test_arrival_schedule_fast_reboot():
    s = build_schedule([Event("arrival", 4, (2,), "fast_reboot")], num_devices=3, rounds=6)
    p = np.array([0.25, 0.25, 0.5])
    # before τ0 the arriving device is outside the objective: the others are renormalised
    np.testing.assert_allclose(s.coefficients(p, 3), [0.5, 0.5, 0.0])
    assert not s.sending[2, 2] and not s.test_devices[2, 2]
    np.testing.assert_allclose(s.coefficients(p, 4), p)  # in the objective from τ0, unboosted
    np.testing.assert_allclose(s.boost[3], [1.0, 1.0, 3.0])  # 3·p^l at τ0 (engine.schemes.boosted_weights)
    np.testing.assert_allclose(s.boost[4], [1.0, 1.0, 1.5])  # (1 + 2/4)·p^l
    assert s.sending[3, 2] and s.test_devices[3, 2]
    # learning rate restarts: η0/(τ − τ0 + 1) from τ0 on
    assert [s.lr(1.0, t) for t in (1, 3, 4, 5, 6)] == [1.0, 1 / 3, 1.0, 0.5, 1 / 3]


def test_arrival_vanilla_has_no_boost_but_resets_lr():
    s = build_schedule([Event("arrival", 4, (2,), "vanilla")], num_devices=3, rounds=6)
    np.testing.assert_allclose(s.coefficients(np.array([0.25, 0.25, 0.5]), 4), [0.25, 0.25, 0.5])
    assert s.lr(2.0, 4) == 2.0


def test_departure_exclude_renormalises_and_resets_lr():
    s = build_schedule([Event("departure", 3, (0,), "exclude")], num_devices=3, rounds=5)
    p = np.array([0.5, 0.2, 0.3])
    c = s.coefficients(p, 3)
    assert c[0] == 0 and c[1:].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(c[1:], [0.4, 0.6])
    assert not s.sending[2, 0]
    assert s.lr(1.0, 3) == 1.0 and s.lr(1.0, 2) == 0.5


def test_departure_include_keeps_coefficient_sends_nothing_no_reset():
    s = build_schedule([Event("departure", 3, (0,), "include")], num_devices=3, rounds=5)
    p = np.array([0.5, 0.2, 0.3])
    np.testing.assert_allclose(s.coefficients(p, 4), p)
    assert not s.sending[3, 0]
    assert s.lr(1.0, 4) == 0.25
    # the paper's reading (Figure 4, Corollary 4.0.3): include is scored on every device's holdout (f0),
    # exclude on the remaining devices' (f1)
    exc = build_schedule([Event("departure", 3, (0,), "exclude")], 3, 5)
    assert s.test_devices.all()
    assert not exc.test_devices[2:, 0].any() and exc.test_devices[:2].all() and exc.test_devices[:, 1:].all()
    # remaining / all: both options on the same data
    rem = [build_schedule([Event("departure", 3, (0,), pol)], 3, 5, "remaining")
           for pol in ("include", "exclude")]
    np.testing.assert_array_equal(rem[0].test_devices, rem[1].test_devices)
    assert not rem[0].test_devices[3, 0]
    assert build_schedule([Event("departure", 3, (0,), "include")], 3, 5, "all").test_devices.all()


def test_bad_events_refused():
    with pytest.raises(ValueError, match="arrival policy 'boost'.*allowed: fast_reboot, vanilla"):
        Event("arrival", 3, (0,), "boost")
    with pytest.raises(ValueError, match="allowed: 0..2"):
        build_schedule([Event("departure", 2, (5,), "exclude")], 3, 4)
    with pytest.raises(ValueError, match="departure_test_set"):
        build_schedule([], 3, 4, "mine")


def _curve(values, start=1):
    return pd.Series(values, index=range(start, start + len(values)), dtype=float)


def test_recovery_on_hand_made_curves():
    acc = _curve([0.5, 0.6, 0.7, 0.4, 0.55, 0.69, 0.71, 0.8])  # arrival at τ0 = 4; level at round 3 = 0.7
    assert rounds_to_recover(acc, 4) == 4  # round 7: the 4th epoch from τ0 (rounds 4, 5, 6, 7)
    assert rounds_to_recover(_curve([0.5, 0.6, 0.7, 0.75]), 4) == 1  # no drop: back in its first epoch
    never = _curve([0.5, 0.6, 0.7, 0.4, 0.5, 0.6])
    assert rounds_to_recover(never, 4) is None
    assert observed_after(never, 4) == 3  # rounds 4, 5, 6
    assert format_rounds(rounds_to_recover(never, 4), 3) == "> 3"


def test_crossing_on_hand_made_curves():
    inc = _curve([1.0, 0.9, 0.8, 0.75, 0.72, 0.70, 0.69])
    exc = _curve([1.0, 0.9, 1.1, 0.9, 0.73, 0.69, 0.60])  # departure at τ0 = 3
    assert rounds_to_cross(inc, exc, 3) == 4  # round 6: 0.69 < 0.70, the 4th epoch from τ0
    assert rounds_to_cross(inc, _curve([1.0, 0.9, 0.9, 0.8, 0.8, 0.8, 0.8]), 3) is None
    assert rounds_to_cross(inc, _curve([1.0, 0.9, 0.7, 0.7, 0.7, 0.7, 0.7]), 3) == 1  # in round τ0


def _fake_run(path, metric, values):
    path.mkdir(parents=True)
    pd.DataFrame({"round": range(1, len(values) + 1), "metric": metric, "value": values}).to_parquet(
        path / "metrics.parquet")
    return str(path)


def test_fast_reboot_table_from_runs(tmp_path):
    from hetfl.reports.event_tables import fast_reboot, layout

    ref = pd.DataFrame({"dataset": ["SYNTHETIC"] * 2, "tau0": [3, 3],
                        "method": ["fast_reboot", "vanilla_reboot"], "rounds_to_recover": [1, 2]})
    rows = []
    for seed, (fast, vanilla) in enumerate([([.5, .7, .4, .7, .8], [.5, .7, .4, .5, .6]),
                                            ([.5, .7, .3, .6, .75], [.5, .7, .4, .5, .7])]):
        for method, vals in (("fast_reboot", fast), ("vanilla", vanilla)):
            run_dir = _fake_run(tmp_path / f"{method}{seed}", "test_accuracy", vals)
            rows.append({"dataset": "SYNTHETIC", "setting": "NIID", "event_round": 3, "event_policy": method,
                         "seed": seed, "run_dir": run_dir})
    tidy = fast_reboot(pd.DataFrame(rows), ref)
    fast = tidy[tidy.method == "fast_reboot"].iloc[0]
    # fast: seed 0 back in round 4 (2 epochs: rounds 3, 4), seed 1 in round 5 (3 epochs)
    assert fast.reproduced_mean == pytest.approx(2.5) and fast.n_never == 0 and fast.paper == 1
    van = tidy[tidy.method == "vanilla"].iloc[0]
    # seed 0 never recovers within the 3 epochs observed (rounds 3-5); seed 1 recovers in round 5 (3)
    # bounds rule: seed 0 lies in [4, ∞), seed 1 is 3; no mean is made up, the CI is [t-low of (4, 3), ∞)
    t1 = 12.706204736174707  # t_{1, 0.975}
    assert van.n_never == 1 and np.isnan(van.reproduced_mean) and van.paper == 2
    # a count of rounds is a level: an unbounded CI that holds the paper's 2 cannot agree with it
    # the t low end 3.5 − 6.35 is below any count of epochs: the interval is cut at 1
    assert van.ci_low == 1.0 and 3.5 - t1 * 0.5 < 1 and np.isinf(van.ci_high)
    assert van.verdict == "inconclusive"
    # the paired cell vanilla − fast: seed 0 in [4 − 2, ∞), seed 1 = 3 − 3 = 0; the paper's is 2 − 1 = 1
    diff = tidy[tidy.method == "vanilla_minus_fast"].iloc[0]
    assert diff.ci_low == pytest.approx(1.0 - t1 * 1.0) and np.isinf(diff.ci_high) and diff.paper == 1
    assert diff.verdict == "inconclusive"  # the CI holds 0 (it "agreed" before: it holds 1 too)
    cells = layout(tidy, ["dataset"]).iloc[0]
    assert cells["vanilla (reproduced)"] == "1 of 2 censored [1.0, ∞]"
    assert cells["fast (reproduced)"].startswith("2.5 [")


def test_crossing_table_from_runs(tmp_path):
    from hetfl.reports.event_tables import crossing

    ref = pd.DataFrame({"dataset": ["SYNTHETIC"], "alpha": [1.0], "beta": [1.0], "tau0": [2],
                        "rounds_to_cross": [9]})
    rows = []
    include = [1.0, .9, .8, .75, .7]
    excludes = [[1.0, .9, 1.0, .8, .6],  # crosses at round 5 (round 2 is a tie): r = 3
                [1.0, .9, .85, .7, .6],  # round 4: 0.7 < 0.75, r = 2
                [1.0, .9, 1.0, .9, .8]]  # never within the 3 rounds observed after τ0: in [4, ∞)
    for seed, exclude in enumerate(excludes):
        for policy, vals in (("include", include), ("exclude", exclude)):
            rows.append({"dataset": "SYNTHETIC", "setting": "S", "alpha": 1.0, "beta": 1.0, "event_round": 2,
                         "event_policy": policy, "seed": seed,
                         "run_dir": _fake_run(tmp_path / f"{policy}{seed}", "test_loss", vals)})
    row = crossing(pd.DataFrame(rows), ref).iloc[0]
    # epochs from τ0: 4 (round 5), 3 (round 4), never within the 4 observed (rounds 2-5): [5, ∞)
    t2 = 4.302652729749464  # t_{2, 0.975}; lower bounds 4, 3, 5: mean 4, s = 1
    assert row.n_seeds == 3 and row.n_never == 1 and np.isnan(row.reproduced_mean) and row.paper == 9
    assert row.ci_low == pytest.approx(4 - t2 / np.sqrt(3)) and np.isinf(row.ci_high)  # above 1: uncut
    assert row.verdict == "inconclusive"  # a level with a censored seed: unbounded, it cannot agree


def test_crossing_is_censored_where_either_curve_ends(tmp_path):
    """An exclude run that diverged (NaN from round 4 on) was observed for 2 epochs from τ0 = 2 (rounds 2, 3),
    not for the include run's 4: its seed lies in [3, ∞), not [5, ∞). A cell above the paper disagrees."""
    from hetfl.reports.event_tables import crossing

    ref = pd.DataFrame({"dataset": ["SYNTHETIC"], "alpha": [1.0], "beta": [1.0], "tau0": [2],
                        "rounds_to_cross": [1]})
    include = [1.0, .9, .8, .75, .7]
    rows = []
    for seed, exclude in enumerate([[1.0, .9, 1.0, np.nan, np.nan], [1.0, .9, .85, .7, .6]]):
        for policy, vals in (("include", include), ("exclude", exclude)):
            rows.append({"dataset": "SYNTHETIC", "setting": "S", "alpha": 1.0, "beta": 1.0, "event_round": 2,
                         "event_policy": policy, "seed": seed,
                         "run_dir": _fake_run(tmp_path / f"{policy}{seed}", "test_loss", vals)})
    row = crossing(pd.DataFrame(rows), ref).iloc[0]
    # lower bounds 3 (censored at R = 2: [3, ∞)) and 3 (crossed in round 4): s = 0, so the low end is 3
    assert row.n_never == 1 and row.ci_low == 3.0 and np.isinf(row.ci_high)
    assert row.verdict == "disagrees"  # every completion is at least 3 epochs, the paper's is 1


def test_an_infinite_loss_is_no_crossing_and_not_observed(tmp_path):
    """A diverged run's last row can hold test_loss = +inf (finite weights, an overflowing loss: runner.py
    records it and stops). An include run that diverged so is not crossed by the exclude run there, and R
    ends at the last finite value (docs/readings.md), as it does for NaN."""
    from hetfl.reports.event_tables import crossing

    include = _curve([1.0, .9, .8, .75, np.inf])
    exclude = _curve([1.0, .9, 1.0, .9, .8])
    assert rounds_to_cross(include, exclude, 2) is None  # was 4: 0.8 < inf in round 5
    assert observed_after(include, 2) == 3  # rounds 2, 3, 4; was 4
    ref = pd.DataFrame({"dataset": ["SYNTHETIC"], "alpha": [1.0], "beta": [1.0], "tau0": [2],
                        "rounds_to_cross": [4]})
    rows = [{"dataset": "SYNTHETIC", "setting": "S", "alpha": 1.0, "beta": 1.0, "event_round": 2,
             "event_policy": policy, "seed": seed,
             "run_dir": _fake_run(tmp_path / f"{policy}{seed}", "test_loss", list(vals))}
            for seed in (0, 1) for policy, vals in (("include", include), ("exclude", exclude))]
    row = crossing(pd.DataFrame(rows), ref).iloc[0]
    # both seeds censored at R = 3: [4, ∞) each; it read as crossed in 4 epochs, "agrees" with the paper's 4
    assert row.n_never == 2 and row.ci_low == 4.0 and np.isinf(row.ci_high) and row.observed_rounds == 3
    assert row.verdict == "inconclusive"


def test_training_with_an_arrival(tiny_fed):
    from hetfl.engine.runner import TrainSettings, train
    from hetfl.models import make_model

    sched = build_schedule([Event("arrival", 3, (3,), "fast_reboot")], num_devices=4, rounds=4)
    res = train(make_model("logreg", 60, 10), tiny_fed, np.ones((4, 4)), TrainSettings("C", 1, 10, 1.0, 4),
                schedule=sched)
    rec = pd.DataFrame(res.records, columns=["round", "metric", "value"]).pivot(
        index="round", columns="metric", values="value")
    assert rec["lr"].tolist() == [1.0, 0.5, 1.0, 0.5]  # reset at τ0 = 3
    assert rec["active_devices"].tolist() == [3, 3, 4, 4]
    assert rec["test_samples"].tolist() == [9, 9, 12, 12]  # its holdout joins the test set at τ0


@pytest.mark.parametrize("table", ["fast_reboot", "crossing_epochs", "multiple_arrivals"])
def test_two_runs_of_one_seed_and_policy_are_refused_not_merged(tmp_path, table):
    """Two experiments on one event table with the same setting and τ0 (the grid's FedAvg and a copy with
    another step size, or another algorithm before validation refused that) were paired by seed silently:
    the later run replaced the earlier in the cell. Table 3 refused such runs; the event tables now do."""
    from hetfl.reports.event_tables import crossing, fast_reboot
    from hetfl.reports.multiple_arrivals import multiple_arrivals

    policies = ("include", "exclude") if table == "crossing_epochs" else ("fast_reboot", "vanilla")
    rows = []
    for experiment in ("grid", "grid_copy"):
        for policy in policies:
            rows.append({"experiment": experiment, "dataset": "SYNTHETIC", "setting": "S", "alpha": 1.0,
                         "beta": 1.0, "event_round": 2, "event_policy": policy, "seed": 0,
                         "run_dir": _fake_run(tmp_path / f"{experiment}_{policy}", "test_loss"
                                              if table == "crossing_epochs" else "test_accuracy",
                                              [1.0, .9, .8, .7])})
    ref = pd.DataFrame(columns=["dataset", "alpha", "beta", "tau0", "method", "rounds_to_cross",
                                "rounds_to_recover"])
    build = {"fast_reboot": lambda r: fast_reboot(r, ref), "multiple_arrivals": multiple_arrivals,
             "crossing_epochs": lambda r: crossing(r, ref)}[table]
    message = (rf"table {table}: seed 0 of the cell \(dataset SYNTHETIC, setting S, τ0 2\) has several .* "
               r"runs, from the experiments grid, grid_copy")
    with pytest.raises(ValueError, match=message):
        build(pd.DataFrame(rows))
    build(pd.DataFrame(rows[:2]))  # one experiment: a cell
