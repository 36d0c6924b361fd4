"""save_verified writes a file with the permissions Keras's own save gives it: a new file the umask's (mkstemp's
owner-only 0600 made a checkpoint unreadable to another user's process: a serving container, a shared folder, a
workshop hub), an overwritten file its own (Keras rewrites the file in place, which keeps them). Twelfth read."""
from __future__ import annotations

import os
import stat

import pytest

import gputrain_kit as kit


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_save_verified_gives_the_permissions_keras_gives(tmp_path, suffix):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    save = model.save_weights if suffix == ".weights.h5" else model.save
    old = os.umask(0o022)
    try:
        save(str(tmp_path / f"keras{suffix}"))
        kit.save_verified(model, tmp_path / f"kit{suffix}")
        assert _mode(tmp_path / f"kit{suffix}") == _mode(tmp_path / f"keras{suffix}") == 0o644
        os.chmod(tmp_path / f"kit{suffix}", 0o640)          # an existing file keeps its own
        os.chmod(tmp_path / f"keras{suffix}", 0o640)
        save(str(tmp_path / f"keras{suffix}"))
        kit.save_verified(model, tmp_path / f"kit{suffix}")
        assert _mode(tmp_path / f"kit{suffix}") == _mode(tmp_path / f"keras{suffix}") == 0o640
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"keras{suffix}", f"kit{suffix}"])  # no leftovers
