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

# A platform's runtime, approximated: Colab's TensorFlow, Keras and Jupyter stack of 2025 (override the pair with
# GPUTRAIN_PLATFORM_TF / GPUTRAIN_PLATFORM_KERAS to try another). The first cell must replace none of them.
PLATFORM_TF = os.environ.get("GPUTRAIN_PLATFORM_TF", "2.19.1")
PLATFORM_KERAS = os.environ.get("GPUTRAIN_PLATFORM_KERAS", "3.10.0")
COLAB_PINS = {"tensorflow": PLATFORM_TF, "keras": PLATFORM_KERAS, "ipykernel": "6.17.1", "ipython": "7.34.0",
              "notebook": "6.5.7", "ipywidgets": "7.7.1", "tornado": "6.4.2", "jupyter-client": "6.1.12",
              "jupyter-server": "1.16.0"}


def _run(cmd, cwd, env=None, timeout=1200):
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    full.update(env or {})
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


FREEZE = ("import json, importlib.metadata as m; print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): "
          "d.version for d in m.distributions()}))")

# The explorers' logic under the platform's ipywidgets (7.7 on Colab): each built, each control moved, each answer
# read; their rendering in Colab's own front end is not something this machine can show.
EXPLORERS = """
import json, ipywidgets, gputrain_kit as kit
from gputrain_kit.widgets import MemoryExplorer, SplitExplorer, MeshExplorer
from gputrain_kit import check
e = MemoryExplorer(preset="Dense stack 8 x 8192 + head (notebook 08)", batch=32768, devices=1, strategy="single")
before = e.estimate.peak
e.precision.value = "mixed_bfloat16"
s = SplitExplorer()
s.drop.value = True
m = MeshExplorer(list(check.NB09_MLP), mesh=(2, 4))
m.mesh.value = (8, 1)
print(json.dumps([ipywidgets.__version__, e.estimate.peak < before, "splits evenly" in s.output.value,
                  "nothing is cut" in m.summary.value]))
"""


def test_the_first_cell_installs_the_kit_and_keeps_the_platforms_packages(tmp_path):
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--only-binary", ":all:",
          *[f"{name}=={version}" for name, version in COLAB_PINS.items()]], cwd=tmp_path, timeout=2400)
    before = json.loads(_run([python, "-c", FREEZE], cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert {name: before.get(name) for name in COLAB_PINS} == COLAB_PINS
    cell = tmp_path / "cell.py"
    cell.write_text(platform_cells.BOOTSTRAP + "\nprint('after:', importlib.util.find_spec('gputrain_kit') is not None)\n")
    env = {"GPUTRAIN_KIT_SOURCE": f"file://{ROOT}"}
    first = _run([python, str(cell)], cwd=tmp_path, env=env)
    assert "after: True" in first.stdout and "installed the kit; kept" in first.stdout
    after = json.loads(_run([python, "-c", FREEZE], cwd=tmp_path).stdout.strip().splitlines()[-1])
    replaced = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    assert replaced == {}, f"the first cell replaced or removed the platform's packages: {replaced}"
    assert "jupyterlab" not in after                     # the server side is the kit's `lab` extra, not a kernel's
    # Installed now: the cell must not call pip again (a source pip cannot install would fail it if it did).
    again = _run([python, str(cell)], cwd=tmp_path, env={"GPUTRAIN_KIT_SOURCE": "file:///nonexistent/gputrain-kit"})
    assert "after: True" in again.stdout
    assert json.loads(_run([python, "-c", EXPLORERS], cwd=tmp_path).stdout.strip().splitlines()[-1]) == [
        "7.7.1", True, True, True]
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
