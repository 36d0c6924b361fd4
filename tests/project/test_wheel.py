"""`pip install gputrain-kit` without a clone (issue 34, part 4): the wheel ships the notebooks, a clean virtual
environment installs it with the pinned dependencies, `python -m gputrain_kit notebooks DIR` copies them out of
the installed package, and notebook 00 executes there. Minutes (TensorFlow is installed again, from pip's cache
where it has one): `make test-wheel` runs it, `make test` does not."""
from __future__ import annotations

import json
import tomllib
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.wheel


def _run(cmd: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_the_wheel_installs_in_a_clean_venv_and_runs_notebook_00(tmp_path):
    if os.environ.get("GPUTRAIN_WHEEL"):             # `make release-check` hands over the wheel it built
        wheel = Path(os.environ["GPUTRAIN_WHEEL"])
    else:
        wheels = tmp_path / "wheels"
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
              str(wheels), str(ROOT)], cwd=tmp_path)
        wheel = next(wheels.glob("gputrain_kit-*.whl"))
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert wheel.name.startswith(f"gputrain_kit-{version}-")       # one version source: pyproject.toml
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(ROOT / "constraints.txt"),
          f"{wheel}[lab,jax]", "nbclient", "ipykernel"], cwd=tmp_path)      # as the README says: JupyterLab, JAX
    where = _run([python, "-c", "import gputrain_kit, json; print(json.dumps(gputrain_kit.__file__))"], cwd=tmp_path)
    assert str(ROOT) not in json.loads(where.stdout)                     # the installed kit, not the clone's
    present = _run([python, "-c", "import importlib.util as u, json; print(json.dumps([u.find_spec(m) is not None "
                                  "for m in ('jupyterlab', 'jax')]))"], cwd=tmp_path)
    assert json.loads(present.stdout) == [True, True]      # notebook 09 needs JAX; `lab` needs JupyterLab
    course = tmp_path / "my-course"
    _run([python, "-m", "gputrain_kit", "notebooks", str(course)], cwd=tmp_path)
    assert sorted(p.name for p in course.glob("*.ipynb")) == sorted(p.name for p in (ROOT / "notebooks").glob(
        "[0-9][0-9]_*.ipynb"))
    again = subprocess.run([python, "-m", "gputrain_kit", "notebooks", str(course)], cwd=tmp_path,
                           capture_output=True, text=True)
    assert again.returncode == 2 and "may hold your work" in again.stderr       # kept, not overwritten
    _run([python, "-c", f"""
import nbformat
from nbclient import NotebookClient
nb = nbformat.read({str(course / '00_start_here.ipynb')!r}, as_version=4)
NotebookClient(nb, timeout=300, kernel_name="python3", resources={{"metadata": {{"path": {str(course)!r}}}}}).execute()
errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
assert not errors, errors
"""], cwd=course)
