"""The batched engine equals the per-client reference loop, and runs are bitwise reproducible."""

import numpy as np
import pytest
import torch

from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import SharedStreams, full_steps, minibatch_indices, pcg64_states
from hetfl.engine.oracle import local_sgd_reference
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model


def _tensors(fed):
    return torch.from_numpy(fed.x_train), torch.from_numpy(fed.y_train)


def test_minibatch_stream_covers_each_epoch(tiny_fed):
    steps = full_steps(tiny_fed.train_sizes, 1, 5)  # one epoch of B = 5
    idx = minibatch_indices(tiny_fed.train_offsets, np.arange(4), steps, 5, seed=3, round_=1)
    for k in range(4):
        lo, hi = tiny_fed.train_offsets[k], tiny_fed.train_offsets[k + 1]
        used = idx[k, : steps[k]].reshape(-1)
        assert used.min() >= lo and used.max() < hi
        if (hi - lo) % 5 == 0:  # whole batches: one epoch is one permutation
            assert sorted(used.tolist()) == list(range(lo, hi))


def test_minibatch_stream_independent_of_client_subset(tiny_fed):
    a = minibatch_indices(tiny_fed.train_offsets, np.arange(4), np.array([2, 3, 4, 1]), 7, 0, 5)
    b = minibatch_indices(tiny_fed.train_offsets, np.array([2]), np.array([4]), 7, 0, 5)
    np.testing.assert_array_equal(a[2], b[0])


def _per_client_stream(offsets, client_ids, steps, batch_size, seed, round_):
    """The definition the vectorised minibatch_indices must reproduce bitwise: one default_rng per
    (seed, round, client), fresh permutations concatenated, cut into batches (rows past the client's
    steps hold its first sample)."""
    out = np.empty((len(client_ids), int(max(steps, default=0)), batch_size), dtype=np.int64)
    for row, (k, s) in enumerate(zip(client_ids, steps, strict=True)):
        lo, n = int(offsets[k]), int(offsets[k + 1] - offsets[k])
        out[row] = lo
        need = int(s) * batch_size
        if need:
            rng = np.random.default_rng([seed, round_, int(k)])
            stream = np.concatenate([rng.permutation(n) for _ in range(-(-need // n))])[:need]
            out[row, :s] = (stream + lo).reshape(int(s), batch_size)
    return out


def test_vectorised_seeding_is_default_rng():
    """pcg64_states reproduces NumPy's SeedSequence + PCG64 seeding for every entropy size (a seed or round
    of 2**32 and above takes two 32-bit words; client id 0 is the word [0])."""
    ids = np.array([0, 1, 7, 2**31, 2**32 - 1])
    for seed in (0, 3, 2**32 - 1, 2**32, 2**70 + 5):
        for round_ in (0, 1, 200, 2**33):
            for k, got in zip(ids, pcg64_states((seed, round_), ids), strict=True):
                want = np.random.default_rng([seed, round_, int(k)]).bit_generator.state["state"]
                assert got == (want["state"], want["inc"]), (seed, round_, k)
    with pytest.raises(ValueError, match="2\\*\\*32"):
        pcg64_states((0, 0), np.array([2**32]))


def test_minibatch_indices_are_the_per_client_streams():
    """Bitwise the streams of one default_rng([seed, round, k]) per client: results did not change."""
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 400, 60)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    for round_ in range(6):
        clients = np.sort(rng.choice(60, 25, replace=False))
        steps = rng.integers(0, 90, 25)
        batch = int(rng.integers(1, 40))  # batches larger than some clients' data: several epochs each
        got = minibatch_indices(offsets, clients, steps, batch, 11 * round_, round_)
        np.testing.assert_array_equal(got, _per_client_stream(offsets, clients, steps, batch, 11 * round_,
                                                              round_))
    assert minibatch_indices(offsets, np.array([3, 4]), np.array([0, 0]), 5, 0, 1).shape == (2, 0, 5)


def test_shared_streams_equal_minibatch_indices():
    """The runs of a cell draw their minibatches through one SharedStreams: every request, whatever its
    order, clients, step counts and batch size, gets exactly minibatch_indices' array, including requests
    longer than the stream already drawn for a client, a new round, and another split's offsets."""
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 120, 40)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    other = np.concatenate([[0], np.cumsum(rng.integers(1, 120, 40))])
    shared = SharedStreams()
    for round_ in (1, 1, 2, 5):
        for _ in range(6):  # runs of the cell: different clients and steps (traces, schemes, readings)
            offs = other if rng.random() < 0.2 else offsets
            clients = np.sort(rng.choice(40, int(rng.integers(1, 40)), replace=False))
            steps = rng.integers(0, 12, len(clients))  # 0: sends nothing; growing requests redraw
            batch = int(rng.integers(1, 30))
            np.testing.assert_array_equal(shared(offs, clients, steps, batch, 3, round_),
                                          minibatch_indices(offs, clients, steps, batch, 3, round_))
    with pytest.raises(ValueError, match="no training samples"):
        shared(np.array([0, 0, 4]), np.array([0, 1]), np.array([1, 1]), 2, 0, 1)


def test_batched_round_equals_per_client_loop(tiny_fed):
    model = make_model("logreg", 60, 10)
    g = torch.Generator().manual_seed(1)
    global_params = [torch.randn(10, 60, generator=g) * 0.1, torch.randn(10, generator=g) * 0.1]
    steps = np.array([3, 0, 7, 5])  # heterogeneous, including an inactive client
    idx = minibatch_indices(tiny_fed.train_offsets, np.arange(4), steps, 20, 0, 1)
    x, y = _tensors(tiny_fed)
    batched = local_sgd(model, global_params, x, y, idx, steps, 0.5)
    oracle = local_sgd_reference(model, global_params, x, y, idx, steps, 0.5)
    for b, o in zip(batched, oracle, strict=True):
        torch.testing.assert_close(b, o, rtol=1e-5, atol=1e-6)
    # the inactive client still holds the broadcast model
    torch.testing.assert_close(batched[0][1], global_params[0])


@pytest.mark.parametrize("scheme", ["A", "B", "C"])
def test_training_equals_oracle_over_rounds(tiny_fed, scheme):
    model = make_model("logreg", 60, 10)
    fractions = np.random.default_rng(0).choice([0.0, 0.3, 0.7, 1.0], size=(4, 4))
    cfg = TrainSettings(scheme=scheme, local_epochs=2, batch_size=10, eta0=0.5, rounds=4, seed=0)
    a = train(model, tiny_fed, fractions, cfg)
    b = train(model, tiny_fed, fractions, cfg, local_trainer=local_sgd_reference)
    for pa, pb in zip(a.params, b.params, strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


def test_same_run_twice_gives_identical_metrics(tiny_fed):
    model = make_model("logreg", 60, 10)
    fractions = np.random.default_rng(1).uniform(0, 1, size=(5, 4))
    cfg = TrainSettings(scheme="C", local_epochs=2, batch_size=10, eta0=1.0, rounds=5, seed=7)
    a, b = train(model, tiny_fed, fractions, cfg), train(model, tiny_fed, fractions, cfg)
    assert a.records == b.records
    assert a.status == "ok"
    c = train(model, tiny_fed, fractions, TrainSettings(**{**cfg.__dict__, "seed": 8}))
    assert c.records != a.records  # the seed does reach the minibatch order


def test_staircase_learning_rate(tiny_fed):
    res = train(make_model("logreg", 60, 10), tiny_fed, np.ones((4, 4)), TrainSettings("B", 1, 10, 2.0, 4))
    assert [v for _, m, v in res.records if m == "lr"] == [2.0, 1.0, 2 / 3, 0.5]  # η0/τ


def test_scheme_a_round_without_complete_device_keeps_model(tiny_fed):
    model = make_model("logreg", 60, 10)
    fractions = np.full((1, 4), 0.5)  # nobody complete
    res = train(model, tiny_fed, fractions, TrainSettings("A", 4, 10, 1.0, 1))  # ≥ 4 steps each
    assert all(bool((p == 0).all()) for p in res.params)  # zero init, untouched
    rec = {m: v for _, m, v in res.records}
    assert rec["discarded"] == 1.0


def test_divergence_is_recorded_not_raised(tiny_fed):
    model = make_model("logreg", 60, 10)
    fed = tiny_fed
    fed.x_train = fed.x_train * 1e30  # overflow to inf/nan in the first steps
    res = train(model, fed, np.ones((3, 4)), TrainSettings("B", 1, 10, 1e10, 3))
    assert res.status == "diverged"
    assert res.rounds_done < 3 or np.isnan([v for _, m, v in res.records if m == "test_accuracy"]).any()


@pytest.mark.parametrize("model_name", ["logreg", "mlp"])
def test_stacked_runs_end_bitwise_where_each_run_alone_ends(tiny_fed, model_name):
    """train_stacked trains several runs' clients in one local_sgd call per round: every run's records and
    final model equal those of `train` on that run alone (schemes, traces, E, seeds and lengths differ)."""
    from hetfl.algorithms import make_algorithm
    from hetfl.data.events import Event, build_schedule
    from hetfl.engine.runner import Data, RunLoop, train_stacked

    rng = np.random.default_rng(4)
    fractions = [np.ones((6, 4)), rng.uniform(0.2, 1.0, (6, 4)), rng.uniform(0.0, 1.0, (6, 4))]
    fractions[2][fractions[2] < 0.3] = 0.0  # inactive rounds
    cfgs = [TrainSettings("A", 3, 10, 0.5, 6, seed=0), TrainSettings("B", 3, 10, 0.5, 6, seed=0),
            TrainSettings("C", 2, 10, 0.5, 6, seed=0), TrainSettings("C", 3, 10, 0.5, 4, seed=1),
            TrainSettings("C", 3, 10, 0.5, 6, seed=0)]
    plans = list(zip(cfgs, [fractions[0], fractions[1], fractions[2], fractions[1][:4], fractions[1]],
                     strict=True))
    arrival = build_schedule([Event("arrival", 3, (3,), "fast_reboot")], 4, 6)  # lr restarts: its own group
    schedules = [None, None, None, None, arrival]

    def model():
        return make_model(model_name, 60, 10) if model_name == "logreg" else make_model("mlp", 60, 10,
                                                                                          hidden=(8,))

    alone = [train(model(), tiny_fed, fr, cfg, schedule=sched, algorithm=make_algorithm("fedavg"))
             for (cfg, fr), sched in zip(plans, schedules, strict=True)]
    data = Data.of(tiny_fed)
    loops = [RunLoop(model(), data, fr, cfg, make_algorithm("fedavg"), sched)
             for (cfg, fr), sched in zip(plans, schedules, strict=True)]
    stacked = train_stacked(loops)
    for a, s in zip(alone, stacked, strict=True):
        assert a.records == s.records  # bitwise: every metric of every round
        for pa, ps in zip(a.params, s.params, strict=True):
            assert torch.equal(pa, ps)


def _wrong_aggregate(returns):
    from hetfl.algorithms.base import Algorithm, deltas
    from hetfl.engine import comm

    class Wrong(Algorithm):
        name = "wrong"

        def aggregate(self, state, params, finals, info):
            metrics = comm.round_metrics(up=deltas(params, finals), down=params, clients=len(info.clients))
            return returns(state, params, finals, metrics)

    return Wrong()


@pytest.mark.parametrize(("returns", "error", "message"), [
    # the clients' stacked finals [K, ...] as the new model: a shape error in the next round's local step
    (lambda state, params, finals, m: (finals, state, m), ValueError,
     r"'wrong' \(.*Wrong\)\.aggregate returned parameter entry 0 of shape \(2, 1\); allowed: the shape of "
     r"the global parameter it replaces, \(1,\) \(the new global model, without the client axis"),
    (lambda state, params, finals, m: (params[:0], state, m), ValueError,
     r"aggregate returned 0 parameter entries; allowed: 1, one per entry of the global model"),
    (lambda state, params, finals, m: (params, m), TypeError,
     r"aggregate returned a tuple of 2; allowed: a tuple \(new global parameters, new state, metrics dict\)"),
])
def test_an_aggregate_that_returns_the_wrong_shape_is_named_at_its_round(returns, error, message):
    """A plugin's aggregate that returned the clients' stacked models failed a round later inside the
    model's gradient ("shape '[2, 2, 1]' is invalid for input of size 40", an audit); on other models a
    stray [1, ...] axis can broadcast on. The engine checks what aggregate returns, every round."""
    from hetfl.data.quadratic import build_quadratic
    from hetfl.models.quadratic import Quadratic

    cfg = TrainSettings("B", 1, 1, 0.1, 2, lr_schedule="constant", local_steps=(2, 3))
    with pytest.raises(error, match=r"algorithm 'wrong'|aggregate returned") as err:
        train(Quadratic(), build_quadratic((1.0, 2.0), (1.0, 5.0)), np.ones((2, 2)), cfg,
              algorithm=_wrong_aggregate(returns))
    import re

    assert re.search(message, str(err.value)), str(err.value)
