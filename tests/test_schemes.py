"""Ruan et al. §4 aggregation schemes, pinned to the paper's equations and its Figure 1 example."""

import numpy as np
import pytest

from hetfl.engine.schemes import aggregation_weights, boosted_weights, complete_round_steps, local_steps


def test_figure1_scheme_c_is_unbiased_and_a_b_are_not():
    # Figure 1: E = 5; the top two devices completed 3 and 4 epochs, the bottom two all 5.
    E = 5
    full = np.full(4, E)
    done = np.array([3, 4, 5, 5])
    p = np.full(4, 0.25)
    g = np.array([4.0, -2.0, 1.0, 3.0])  # each device's (constant) gradient; lr = 1
    deltas = -done * g  # Eq. (1) over s_k steps
    unbiased = -E * np.sum(p * g)  # what full participation would give

    def aggregate(scheme):
        w, discarded = aggregation_weights(scheme, p, done, full)
        assert not discarded
        return float(np.sum(w * deltas)), w

    c, wc = aggregate("C")
    assert c == pytest.approx(unbiased)
    np.testing.assert_allclose(wc, p * np.array([5 / 3, 5 / 4, 1, 1]))  # "enlarges by 5/3 and 5/4"
    b, wb = aggregate("B")
    np.testing.assert_allclose(wb, p)
    assert b == pytest.approx(-np.sum(p * done * g))
    assert b != pytest.approx(unbiased)
    a, wa = aggregate("A")
    np.testing.assert_allclose(wa, [0, 0, 0.5, 0.5])  # N p_k q_k / K_τ = 4 · 1/4 / 2
    assert a != pytest.approx(unbiased)


def test_scheme_a_discards_round_without_complete_device():
    w, discarded = aggregation_weights("A", np.array([0.5, 0.5]), np.array([1, 0]), np.array([4, 4]))
    assert discarded
    assert np.all(w == 0)


def test_scheme_a_uses_data_weights():
    p = np.array([0.2, 0.3, 0.5])
    w, _ = aggregation_weights("A", p, np.array([4, 4, 2]), np.array([4, 4, 4]))
    np.testing.assert_allclose(w, [3 * 0.2 / 2, 3 * 0.3 / 2, 0.0])


def test_scheme_c_zero_for_inactive():
    w, _ = aggregation_weights("C", np.array([0.5, 0.5]), np.array([0, 2]), np.array([4, 4]))
    np.testing.assert_allclose(w, [0.0, 1.0])


def test_unknown_scheme_refused():
    with pytest.raises(ValueError, match="scheme 'D'.*allowed: A, B, C"):
        aggregation_weights("D", np.ones(1), np.ones(1, int), np.ones(1, int))


def test_local_steps_rounding():
    full = np.array([10, 10, 10, 10, 3])
    done = local_steps(np.array([1.0, 0.55, 0.0, 0.01, 0.7]), full, "floor")
    # floor(s·full); an active device (s > 0) does at least one step; s = 0 is inactive.
    np.testing.assert_array_equal(done, [10, 5, 0, 1, 2])
    # the default, nearest: 5.5 rounds up, 2.1 down (what devices submit keeps Table 2's mean)
    np.testing.assert_array_equal(local_steps(np.array([1.0, 0.55, 0.0, 0.01, 0.7]), full), [10, 6, 0, 1, 2])


def test_local_steps_nearest_rounds_half_up():
    full = np.array([5, 5, 5, 5, 5, 10])
    fractions = np.array([0.9, 0.89, 0.5, 0.05, 0.0, 0.95])
    # 0.9·5 = 4.5 -> 5 (complete), 4.45 -> 4, 2.5 -> 3, 0.25 -> 0 then at least 1, inactive stays 0, 9.5 -> 10
    np.testing.assert_array_equal(local_steps(fractions, full, "nearest"), [5, 4, 3, 1, 0, 10])
    np.testing.assert_array_equal(local_steps(fractions, full, "floor"), [4, 4, 2, 1, 0, 9])
    with pytest.raises(ValueError, match="completion 'ceil'.*allowed: nearest, floor"):
        local_steps(fractions, full, "ceil")


def test_complete_round_in_steps_or_epochs():
    sizes = np.array([20, 45, 5])
    # Ruan et al. footnote 1: E local updates per round, whatever the device's size
    np.testing.assert_array_equal(complete_round_steps(sizes, 5, 20, "steps"), [5, 5, 5])
    # E epochs of ceil(n/B) minibatches: 5·1, 5·3, 5·1
    np.testing.assert_array_equal(complete_round_steps(sizes, 5, 20, "epochs"), [5, 15, 5])
    with pytest.raises(ValueError, match="local_work 'rounds'.*allowed: steps, epochs"):
        complete_round_steps(sizes, 5, 20, "rounds")


def test_fast_reboot_boost_composes_with_scheme_c():
    # device 2 arrives: boost 3 (δ = 2p), it completed 2 of 5 steps (E/s = 5/2); the others are complete
    p = np.array([0.25, 0.25, 0.5])
    boost = np.array([1.0, 1.0, 3.0])
    done, full = np.array([5, 5, 2]), np.array([5, 5, 5])
    additive, _ = boosted_weights("C", p, boost, done, full, "additive")
    # the paper's p^l + δ^l on top of Scheme C: 2.5·0.5 + 2·0.5 = 2.25
    np.testing.assert_allclose(additive, [0.25, 0.25, 2.25])
    multiplicative, _ = boosted_weights("C", p, boost, done, full, "multiplicative")
    # E/s times the boosted 3p: 2.5·1.5 = 3.75
    np.testing.assert_allclose(multiplicative, [0.25, 0.25, 3.75])
    plain, _ = aggregation_weights("C", p, done, full)
    np.testing.assert_allclose(boosted_weights("C", p, np.ones(3), done, full)[0], plain)
    # a device the scheme does not aggregate (incomplete under A) gets no boost either
    a_weights, _ = boosted_weights("A", p, boost, done, full, "additive")
    np.testing.assert_allclose(a_weights, [0.375, 0.375, 0.0])  # N·p/K_τ = 3·0.25/2; no boost for device 2
