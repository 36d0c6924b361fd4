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


def test_without_the_kit_it_pins_the_installed_tensorflow_and_keras(monkeypatch):
    """What the cell asks pip for where the kit is missing: the kit from the repository (or GPUTRAIN_KIT_SOURCE) and
    the TensorFlow and Keras already installed, at their versions, so that pip keeps them."""
    import importlib.metadata
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gputrain_kit" else real_find_spec(name, *a))
    for source, expected in ((None, "gputrain-kit @ git+https://github.com/gputrain-kit/gputrain-kit"),
                             ("file:///srv/course", "gputrain-kit @ file:///srv/course")):
        if source:
            monkeypatch.setenv("GPUTRAIN_KIT_SOURCE", source)
        with mock.patch("subprocess.run") as run:
            exec(compile(platform_cells.BOOTSTRAP, "<bootstrap>", "exec"), {})
        args = run.call_args.args[0]
        assert args[:5] == [sys.executable, "-m", "pip", "install", "--quiet"] and args[5] == expected
        tf_dist = importlib.metadata.packages_distributions()["tensorflow"][0]
        assert sorted(args[6:]) == sorted([f"{tf_dist}=={importlib.metadata.version(tf_dist)}",
                                           f"keras=={importlib.metadata.version('keras')}"])
