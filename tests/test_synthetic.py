"""SYNTHETIC(α, β) generator (hetfl.data.synthetic), checked against FedProx's construction."""

import numpy as np
import pytest

from hetfl.data.synthetic import feature_covariance_diagonal, generate_synthetic, holdout_split


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (0.5, 0.25), (0.0, 1.0)])
def test_alpha_beta_are_standard_deviations(alpha: float, beta: float) -> None:
    fed = generate_synthetic(alpha, beta, np.full(2000, 2), rng(1), dim=5, num_classes=3)
    assert fed.u.shape == (2000,) and fed.B.shape == (2000,)
    assert fed.u.std() == pytest.approx(alpha, abs=0.05)
    assert fed.B.std() == pytest.approx(beta, abs=0.05)
    # W_k ~ N(u_k, 1), b_k ~ N(u_k, 1), v_k ~ N(B_k, 1)
    assert (fed.W - fed.u[:, None, None]).std() == pytest.approx(1.0, abs=0.02)
    assert (fed.W.mean(axis=(1, 2)) - fed.u).std() < 0.3
    assert (fed.b - fed.u[:, None]).std() == pytest.approx(1.0, abs=0.03)
    assert (fed.v - fed.B[:, None]).std() == pytest.approx(1.0, abs=0.03)


def test_shapes_dtypes_and_labels() -> None:
    sizes = np.array([3, 10, 1, 25])
    fed = generate_synthetic(1.0, 1.0, sizes, rng())
    assert fed.num_devices == 4
    assert fed.W.shape == (4, 60, 10) and fed.b.shape == (4, 10) and fed.v.shape == (4, 60)
    for k, n in enumerate(sizes):
        assert fed.xs[k].shape == (n, 60) and fed.xs[k].dtype == np.float32
        assert fed.ys[k].shape == (n,) and fed.ys[k].dtype == np.int64
        assert fed.ys[k].min() >= 0 and fed.ys[k].max() < 10


def test_labels_are_argmax_of_stored_model() -> None:
    fed = generate_synthetic(1.0, 1.0, np.full(5, 200), rng(2))
    for k in range(5):
        logits = fed.xs[k].astype(np.float64) @ fed.W[k] + fed.b[k]
        agree = np.mean(np.argmax(logits, axis=1) == fed.ys[k])
        assert agree > 0.995  # only float32 rounding of x may flip a near-tie


def test_feature_covariance_scaling() -> None:
    diag = feature_covariance_diagonal(60)
    assert diag[0] == 1.0 and diag[9] == pytest.approx(10**-1.2)
    fed = generate_synthetic(0.0, 0.0, np.array([20000]), rng(3))
    x = fed.xs[0].astype(np.float64)
    np.testing.assert_allclose(x.var(axis=0) / diag, 1.0, atol=0.06)
    np.testing.assert_allclose(x.mean(axis=0), fed.v[0], atol=0.03)


def test_zero_zero_is_not_iid() -> None:
    fed = generate_synthetic(0.0, 0.0, np.full(3, 10), rng())
    np.testing.assert_array_equal(fed.u, 0.0)
    np.testing.assert_array_equal(fed.B, 0.0)
    assert not np.allclose(fed.W[0], fed.W[1])
    assert not np.allclose(fed.v[0], fed.v[1])
    assert fed.W.std() == pytest.approx(1.0, abs=0.1)


def test_iid_variant_shares_model() -> None:
    fed = generate_synthetic(0.0, 0.0, np.full(4, 50), rng(), iid=True)
    for k in range(1, 4):
        np.testing.assert_array_equal(fed.W[k], fed.W[0])
        np.testing.assert_array_equal(fed.b[k], fed.b[0])
    np.testing.assert_array_equal(fed.v, 0.0)
    np.testing.assert_array_equal(fed.u, 0.0)
    with pytest.raises(ValueError, match="iid"):
        generate_synthetic(1.0, 0.0, np.full(4, 5), rng(), iid=True)


def test_seeded_reproducibility() -> None:
    sizes = np.array([5, 7, 9])
    a = generate_synthetic(1.0, 1.0, sizes, rng(11))
    b = generate_synthetic(1.0, 1.0, sizes, rng(11))
    c = generate_synthetic(1.0, 1.0, sizes, rng(12))
    for xa, xb, ya, yb in zip(a.xs, b.xs, a.ys, b.ys, strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    np.testing.assert_array_equal(a.W, b.W)
    assert not np.array_equal(a.xs[0], c.xs[0])
    assert not np.array_equal(a.W, c.W)


@pytest.mark.parametrize(
    ("alpha", "beta", "name"), [(-0.1, 0.0, "alpha"), (0.0, -1.0, "beta"), (np.nan, 0, "alpha")]
)
def test_negative_alpha_beta_refused(alpha: float, beta: float, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        generate_synthetic(alpha, beta, np.array([3]), rng())


def test_bad_sizes_refused() -> None:
    with pytest.raises(ValueError, match="sizes"):
        generate_synthetic(1.0, 1.0, np.array([3, 0]), rng())
    with pytest.raises(ValueError, match="sizes"):
        generate_synthetic(1.0, 1.0, np.array([], dtype=np.int64), rng())


def test_holdout_split() -> None:
    train, test = holdout_split(100, 0.1, rng())
    assert len(test) == 10 and len(train) == 90
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(100))
    assert not np.array_equal(np.sort(train), train)  # shuffled
    train, test = holdout_split(2, 0.1, rng())
    assert len(train) == 1 and len(test) == 1
    with pytest.raises(ValueError, match="n_train"):
        holdout_split(1, 0.1, rng())
    with pytest.raises(ValueError, match="test_fraction"):
        holdout_split(10, 1.5, rng())
