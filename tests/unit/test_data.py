"""gputrain_kit.data: real digits and synthetic blobs, offline, seeded."""
from __future__ import annotations

import socket

import numpy as np
import pytest

from gputrain_kit import data


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("gputrain_kit.data tried to open a network connection")
    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_digits_arrays_offline(no_network):
    (x_train, y_train), (x_val, y_val) = data.digits()
    assert x_train.shape == (1438, 64) and x_val.shape == (359, 64)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert set(np.unique(np.concatenate([y_train, y_val]))) == set(range(10))


def test_digits_split_is_seeded():
    a, b, c = data.digits(seed=0), data.digits(seed=0), data.digits(seed=1)
    np.testing.assert_array_equal(a.train[0], b.train[0])
    assert not np.array_equal(a.train[1], c.train[1])
    # a split, not a copy: no sample is in both parts
    x = np.concatenate([a.train[0], a.validation[0]])
    assert len(x) == 1797


def test_digits_images():
    split = data.digits(image=True, validation_fraction=0.5)
    assert split.train[0].shape[1:] == (8, 8, 1)
    assert len(split.train[0]) + len(split.validation[0]) == 1797


def test_digits_pipelines_batch_shuffle_and_drop_remainder():
    train, val = data.digits(batch_size=100)
    sizes = [int(x.shape[0]) for x, _ in train]
    assert sizes == [100] * 14 + [38]
    assert [int(x.shape[0]) for x, _ in val][-1] == 59
    epoch1 = np.concatenate([y.numpy() for _, y in train])
    epoch2 = np.concatenate([y.numpy() for _, y in train])
    assert not np.array_equal(epoch1, epoch2), "training order must change each epoch"
    assert sorted(epoch1) == sorted(epoch2)
    fresh = data.digits(batch_size=100).train   # a new pipeline replays the same epochs
    first, second = (np.concatenate([y.numpy() for _, y in fresh]) for _ in range(2))
    np.testing.assert_array_equal(second, epoch1)  # `train` was iterated once already, for `sizes`
    np.testing.assert_array_equal(np.concatenate([y.numpy() for _, y in fresh]), epoch2)
    dropped, _ = data.digits(batch_size=100, drop_remainder=True)
    assert [int(x.shape[0]) for x, _ in dropped] == [100] * 14


def test_synthetic_exact_size_and_learnable():
    split = data.synthetic(1030, validation_fraction=0.0, n_features=8, n_classes=3)
    x, y = split.train
    assert x.shape == (1030, 8) and split.validation is None
    # blobs are separable enough that nearest-centre classification beats chance by far
    centres = np.stack([x[y == c].mean(0) for c in range(3)])
    predicted = np.argmin(((x[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)
    assert (predicted == y).mean() > 0.8
    np.testing.assert_array_equal(x, data.synthetic(1030, validation_fraction=0.0, n_features=8, n_classes=3).train[0])


@pytest.mark.parametrize("call, fragment", [
    (lambda: data.digits(validation_fraction=1.0), "validation_fraction"),
    (lambda: data.digits(batch_size=0), "batch_size must be at least 1"),
    (lambda: data.digits(drop_remainder=True), "pass batch_size"),
    (lambda: data.synthetic(1), "n_samples must be at least 2"),
    (lambda: data.synthetic(100, noise=-1), "noise must be a number >= 0"),
    (lambda: data.synthetic(100, n_classes=1), "n_classes must be at least 2"),
])
def test_bad_arguments(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()
