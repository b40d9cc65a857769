import numpy as np
import pytest

from hetfl.data.federation import from_device_lists


@pytest.fixture
def tiny_fed():
    """Four devices of a random 60-feature, 10-class problem, sizes 5..80 (one smaller than a batch)."""
    rng = np.random.default_rng(0)
    sizes = [5, 30, 80, 13]
    xs = [rng.normal(size=(n, 60)).astype(np.float32) for n in sizes]
    ys = [rng.integers(0, 10, n) for n in sizes]
    return from_device_lists(xs, ys, [x[:3] for x in xs], [y[:3] for y in ys], num_classes=10)
