"""Every notebook's Colab/Kaggle badges and its first cell, which installs the kit only where it is missing
(tools/platform_cells.py writes both; tests/project/test_bootstrap.py runs the cell in a clean venv)."""
from __future__ import annotations

import json
import subprocess
import sys
from unittest import mock

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import platform_cells  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_every_notebook_has_the_badges_and_the_install_cell_the_tool_writes():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "platform_cells.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        title = "".join(cells[0]["source"])
        assert f"colab.research.google.com/github/gputrain-kit/gputrain-kit/blob/main/notebooks/{path.name})" in title
        assert f"kaggle.com/kernels/welcome?src=https://github.com/gputrain-kit/gputrain-kit/blob/main/notebooks/" \
               f"{path.name})" in title
        code = [c for c in cells if c["cell_type"] == "code"]
        assert code[0]["metadata"]["tags"] == ["bootstrap"] and "".join(code[0]["source"]) == platform_cells.BOOTSTRAP
        assert code[0]["outputs"] == []                      # the kit is installed where the outputs were made
        assert "kit.setup(" in "".join(code[1]["source"])    # ... and setup comes right after


def test_the_install_cell_does_nothing_where_the_kit_is_installed():
    with mock.patch("subprocess.run") as run:
        exec(compile(platform_cells.BOOTSTRAP, "<bootstrap>", "exec"), {})
    run.assert_not_called()


def _without_the_kit(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gputrain_kit" else real_find_spec(name, *a))


def test_without_the_kit_it_pins_every_package_the_runtime_has(monkeypatch, capsys):
    """What the cell asks pip for where the kit is missing: the kit from the repository (or GPUTRAIN_KIT_SOURCE) and
    every package of the running kernel that pip could replace (TensorFlow, Keras, JAX, NumPy, the Jupyter stack),
    at its installed version, so that pip keeps them."""
    import importlib.metadata

    _without_the_kit(monkeypatch)
    for source, expected in ((None, "gputrain-kit @ git+https://github.com/gputrain-kit/gputrain-kit"),
                             ("file:///srv/course", "gputrain-kit @ file:///srv/course")):
        if source:
            monkeypatch.setenv("GPUTRAIN_KIT_SOURCE", source)
        with mock.patch("subprocess.run", return_value=mock.Mock(returncode=0, stdout="", stderr="")) as run:
            exec(compile(platform_cells.BOOTSTRAP, "<bootstrap>", "exec"), {})
        args = run.call_args.args[0]
        assert args[:4] == [sys.executable, "-m", "pip", "install"] and expected in args
        pins = {a.split("==")[0]: a.split("==")[1] for a in args if "==" in a}
        tf_dist = importlib.metadata.packages_distributions()["tensorflow"][0]
        for name in (tf_dist, "keras", "jax", "numpy", "ipywidgets", "ipykernel", "ipython", "jupyter_client",
                     "tornado", "traitlets"):
            found = {k.lower().replace("-", "_"): v for k, v in pins.items()}.get(name.lower().replace("-", "_"))
            assert found == importlib.metadata.version(name), (name, pins)
        assert "jupyterlab" not in " ".join(args)             # never the server side in a kernel
        assert "installed the kit; kept" in capsys.readouterr().out


def test_a_failing_pip_shows_its_own_words_and_the_fix(monkeypatch, capsys):
    import pytest

    _without_the_kit(monkeypatch)
    failed = mock.Mock(returncode=1, stdout="Collecting gputrain-kit",
                       stderr="ERROR: Cannot install keras==3.10.0 because these package versions have conflicting "
                              "dependencies.")
    with mock.patch("subprocess.run", return_value=failed):
        with pytest.raises(RuntimeError, match="pip could not install the kit.*Fix: a fresh runtime"):
            exec(compile(platform_cells.BOOTSTRAP, "<bootstrap>", "exec"), {})
    out = capsys.readouterr().out
    assert "conflicting dependencies" in out and "Collecting gputrain-kit" in out
