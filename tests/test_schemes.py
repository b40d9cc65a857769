"""Ruan et al. §4 aggregation schemes, pinned to the paper's equations and its Figure 1 example."""

import numpy as np
import pytest

from hetfl.engine.schemes import aggregation_weights, local_steps


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
    done = local_steps(np.array([1.0, 0.55, 0.0, 0.01, 0.7]), full)
    # floor(s·full); an active device (s > 0) does at least one step; s = 0 is inactive.
    np.testing.assert_array_equal(done, [10, 5, 0, 1, 2])
