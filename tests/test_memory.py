"""Peak memory of a round: the clients' models plus at most two more stacks of them (issue 12 item 3).

A round of K clients must hold the K trained models (one stack of parameters); everything else local
training and aggregation allocate is bounded by two more stacks, so memory per client is at most three
copies of the model. Measured as the growth of the peak of torch's allocations from K to 2K clients
(what does not grow with K, e.g. a block's activations or the entropy's chunks, cancels). The models
are ones whose parameters dwarf a minibatch, so the count is of parameter copies, not of input data.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hetfl.algorithms import make_algorithm
from hetfl.algorithms.base import RoundInfo, Task
from hetfl.bench import peak_allocated_bytes
from hetfl.engine.local import local_sgd
from hetfl.engine.minibatch import minibatch_indices
from hetfl.models import make_model

BATCH, STEPS = 10, 4


def _round_peak(name: str, kwargs: dict, shape: tuple[int, ...], K: int) -> tuple[int, int]:
    """(peak bytes of one FedAvg round of K clients: local SGD + aggregation, bytes of one model)."""
    model = make_model(name, shape if len(shape) > 1 else shape[0], 10, **kwargs)
    params = model.init_params(torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(K * BATCH * STEPS, *shape, generator=gen)
    y = torch.randint(0, 10, (K * BATCH * STEPS,), generator=gen)
    offsets = np.arange(K + 1) * BATCH * STEPS
    steps = np.random.default_rng(0).integers(0, STEPS + 1, K)  # unequal work: the stack is reordered
    idx = minibatch_indices(offsets, np.arange(K), steps, BATCH, 0, 1)
    algorithm = make_algorithm("fedavg", {})
    algorithm.setup(Task(model, x, y, offsets))
    state = algorithm.init_state(params, K)
    info = RoundInfo(tau=1, lr=0.1, clients=np.arange(K), done=steps, full=np.full(K, STEPS),
                     weights=np.full(K, 1 / K), p=np.full(K, 1 / K))

    def one_round():
        finals = local_sgd(model, params, x, y, idx, steps, 0.1)
        return algorithm.aggregate(state, params, finals, info)

    peak, _ = peak_allocated_bytes(one_round)
    return peak, sum(p.numel() * p.element_size() for p in params)


@pytest.mark.parametrize(("name", "kwargs", "shape"), [
    ("mlp", {"hidden": (200, 200)}, (784,)),  # the 2NN: 6 copies per client before issue 12
    ("mlp", {"hidden": (200, 100)}, (1, 28, 28)),  # FedDyn's MLP, on image-shaped input
])
def test_fedavg_round_holds_at_most_three_models_per_client(name, kwargs, shape):
    (small, size), (large, _) = (_round_peak(name, kwargs, shape, K) for K in (16, 32))
    copies = (large - small) / 16 / size
    assert copies <= 3.05, f"{copies:.2f} copies of the model per client"
