"""Colab and Kaggle, simulated (issue 34, part 2): a clean venv with another supported TensorFlow and Keras already
installed, as a platform ships them, runs a notebook's first cell. It must install the kit (here from this clone,
through GPUTRAIN_KIT_SOURCE, since the machine cannot reach the repository) without replacing TensorFlow or Keras,
and the kit must then set up devices and train. Minutes (TensorFlow is downloaded): `make test-bootstrap`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv

import pytest

from conftest import ROOT

pytestmark = pytest.mark.platform

sys.path.insert(0, str(ROOT / "tools"))
import platform_cells  # noqa: E402

# A platform's pair (Colab shipped TensorFlow 2.19 with Keras 3.10 in 2025): override to try another.
PLATFORM_TF = os.environ.get("GPUTRAIN_PLATFORM_TF", "2.19.1")
PLATFORM_KERAS = os.environ.get("GPUTRAIN_PLATFORM_KERAS", "3.10.0")


def _run(cmd, cwd, env=None, timeout=1200):
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    full.update(env or {})
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


VERSIONS = "import json, tensorflow as tf, keras; print(json.dumps([tf.__version__, keras.__version__]))"


def test_the_first_cell_installs_the_kit_and_keeps_the_platforms_tensorflow(tmp_path):
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"tensorflow=={PLATFORM_TF}",
          f"keras=={PLATFORM_KERAS}"], cwd=tmp_path)
    before = json.loads(_run([python, "-c", VERSIONS], cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert before == [PLATFORM_TF, PLATFORM_KERAS]
    cell = tmp_path / "cell.py"
    cell.write_text(platform_cells.BOOTSTRAP + "\nprint('after:', importlib.util.find_spec('gputrain_kit') is not None)\n")
    env = {"GPUTRAIN_KIT_SOURCE": f"file://{ROOT}"}
    first = _run([python, str(cell)], cwd=tmp_path, env=env)
    assert "after: True" in first.stdout
    after = json.loads(_run([python, "-c", VERSIONS], cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert after == before, f"TensorFlow/Keras replaced: {before} -> {after}"
    # Installed now: the cell must not call pip again (a source pip cannot install would fail it if it did).
    again = _run([python, str(cell)], cwd=tmp_path, env={"GPUTRAIN_KIT_SOURCE": "file:///nonexistent/gputrain-kit"})
    assert "after: True" in again.stdout
    trained = _run([python, "-c", """
import json, numpy as np, gputrain_kit as kit
kit.setup(devices=2)
import tensorflow as tf, keras
s = tf.distribute.MirroredStrategy(kit.device_names(2))
with s.scope():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    m.compile("sgd", "mse")
h = m.fit(np.ones((16, 4), "float32"), np.zeros((16, 1), "float32"), batch_size=8, epochs=1, verbose=0)
print(json.dumps([s.num_replicas_in_sync, bool(np.isfinite(h.history["loss"]).all())]))
"""], cwd=tmp_path)
    assert json.loads(trained.stdout.strip().splitlines()[-1]) == [2, True]
