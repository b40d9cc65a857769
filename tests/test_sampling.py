"""Per-round client sampling (engine.sampling): uniform K-subsets, seeded per round, aggregated by hand."""

import itertools

import numpy as np
import pytest
from scipy import stats

from hetfl.config import ConfigError, expand_runs, validate_config
from hetfl.data.quadratic import build_quadratic
from hetfl.engine.runner import TrainSettings, train
from hetfl.engine.sampling import sample_clients, sampled_coefficients
from hetfl.models.quadratic import Quadratic


def test_every_device_is_sampled_equally_often():
    n, k, rounds = 10, 3, 3000
    counts = sum(sample_clients(n, k, seed=7, tau=t).astype(int) for t in range(1, rounds + 1))
    assert counts.sum() == k * rounds
    # within a round draws are without replacement, which makes Pearson's statistic conservative here
    assert stats.chisquare(counts).pvalue > 0.01


def test_every_k_subset_is_equally_likely():
    n, k, rounds = 5, 2, 4000
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(n), k))}
    counts = np.zeros(len(subsets), dtype=int)
    for t in range(1, rounds + 1):
        counts[subsets[tuple(np.flatnonzero(sample_clients(n, k, seed=3, tau=t)))]] += 1
    assert (counts > 0).all()
    assert stats.chisquare(counts).pvalue > 0.01


def test_sampling_is_seeded_per_seed_and_round():
    a = sample_clients(50, 5, seed=1, tau=4)
    assert a.sum() == 5 and a.dtype == bool
    np.testing.assert_array_equal(a, sample_clients(50, 5, seed=1, tau=4))
    draws = {tuple(np.flatnonzero(sample_clients(50, 5, seed=s, tau=t)))
             for s in range(3) for t in range(1, 4)}
    assert len(draws) == 9  # other seeds and other rounds draw other sets
    assert sample_clients(4, None, 0, 1).all() and sample_clients(4, 4, 0, 1).all()
    with pytest.raises(ValueError, match="clients_per_round=0"):
        sample_clients(4, 0, 0, 1)


def test_coefficients_over_the_sampled_set():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    s = np.array([False, True, False, True])
    np.testing.assert_allclose(sampled_coefficients(p, s, "sampled"), [0, 1 / 3, 0, 2 / 3])
    np.testing.assert_allclose(sampled_coefficients(p, s, "population"), p)
    with pytest.raises(ValueError, match="allowed: sampled, population"):
        sampled_coefficients(p, s, "uniform")


# Four quadratic clients F_k = a_k (x − b_k)², n_k copies each (p = n/10); seed 0 samples {1, 3} in round 1.
A, B, N = (1.0, 2.0, 1.0, 2.0), (1.0, 5.0, 3.0, -1.0), (1, 2, 3, 4)
ETA = 0.1


def _one_round(scheme, reading, steps=1, fractions=(1.0, 1.0, 1.0, 1.0)):
    fed = build_quadratic(A, B, N)
    np.testing.assert_array_equal(np.flatnonzero(sample_clients(4, 2, 0, 1)), [1, 3])
    cfg = TrainSettings(scheme=scheme, local_epochs=1, batch_size=1, eta0=ETA, rounds=1, seed=0,
                        lr_schedule="constant", local_steps=(steps,) * 4, clients_per_round=2,
                        sampling_weights=reading)
    result = train(Quadratic(2), fed, np.array([fractions]), cfg)
    return float(result.params[0][0])


def test_fedavg_aggregate_with_sampling_by_hand():
    # one step from x = 0: x_k = 0 − η·2a_k(0 − b_k) = 2η a_k b_k → x_1 = 2.0, x_3 = −0.4
    # McMahan: n_1/(n_1 + n_3) = 2/6 and 4/6 → x = 2.0/3 − 0.8/3 = 0.4
    assert _one_round("B", "sampled") == pytest.approx(0.4, abs=1e-6)
    # Ruan et al. over all N: p_1 = 0.2, p_3 = 0.4 → x = 0.4 − 0.16 = 0.24
    assert _one_round("B", "population") == pytest.approx(0.24, abs=1e-6)


def test_scheme_a_with_sampling_by_hand():
    # two steps each; client 3 completes half (one step), so only client 1 is complete (K_τ = 1).
    # client 1: x = 2.0 after one step, 2.0 − 2η·2·(2.0 − 5) = 3.2 after two.
    # sampled: N = |S| = 2, p̃_1 = 1/3 → p_τ = 2·(1/3)/1 = 2/3 → x = 2/3·3.2
    frac = (1.0, 1.0, 1.0, 0.5)
    assert _one_round("A", "sampled", steps=2, fractions=frac) == pytest.approx(2 / 3 * 3.2, abs=1e-6)
    # population: N = 4, p_1 = 0.2 → p_τ = 4·0.2/1 = 0.8 → x = 0.8·3.2
    assert _one_round("A", "population", steps=2, fractions=frac) == pytest.approx(0.8 * 3.2, abs=1e-6)


def test_a_sampled_device_follows_its_trace():
    # client 3 inactive this round (s = 0): under Scheme B only client 1 moves, weight n_1/(n_1 + n_3) = 1/3
    assert _one_round("B", "sampled", fractions=(1.0, 1.0, 1.0, 0.0)) == pytest.approx(2.0 / 3, abs=1e-6)


def _config(**extra):
    exp = {"table": "none", "dataset": "synthetic", "settings": {"S": {"alpha": 1, "beta": 1}},
           "num_devices": 10, "schemes": ["B"], "num_traces": [1], "seeds": [0], **extra}
    return {"experiments": {"x": exp}}


def test_config_carries_sampling_into_the_run():
    run = next(expand_runs(validate_config(_config(clients_per_round=3))))
    assert run.clients_per_round == 3 and run.sampling_weights == "sampled"
    run = next(expand_runs(validate_config(_config())))
    assert run.clients_per_round is None


def test_config_refuses_more_clients_than_devices():
    with pytest.raises(ConfigError, match=r"'experiments.x.clients_per_round' has value 11.*allowed: 1..10"):
        validate_config(_config(clients_per_round=11))
    with pytest.raises(ConfigError, match=r"'experiments.x.sampling_weights' has value \"all\""):
        validate_config(_config(clients_per_round=3, sampling_weights="all"))
