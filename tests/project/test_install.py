"""The set-up resolves on every Python the README names (3.10 to 3.13), from one constraints.txt.

Each named Python resolves the install with pip's own resolver (a dry run: nothing is installed) and must get
exactly the versions constraints.txt pins for it. The dry runs of the oldest and the newest Python start
together when the module is collected by the first test, so they overlap on the two cores.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

OLDEST, NEWEST = "3.10", "3.13"
STORED_OUTPUTS_PYTHON = "3.11"


def pins_for(environment: dict[str, str] | None = None) -> dict[str, str]:
    """constraints.txt as {name: version} for one environment (the running one when None)."""
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(environment):
            name = canonicalize_name(req.name)
            assert name not in pins, f"constraints.txt pins {name} twice for one environment"
            pins[name] = str(req.specifier).removeprefix("==")
    return pins


def find_python(version: str) -> str | None:
    """An interpreter of this minor version: on PATH, or in pyenv's versions folder."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True)
    candidates.append(shutil.which(f"python{version}"))   # may be a pyenv shim that refuses: try it
    for python in filter(None, candidates):
        if subprocess.run([python, "-c", "import pip"], capture_output=True).returncode == 0:
            return python
    return None


_RUNS: dict[str, tuple[subprocess.Popen, Path]] = {}


def _start_dry_runs() -> None:
    """Start pip's dry-run resolution for the oldest and the newest Python, side by side."""
    for version in (OLDEST, NEWEST):
        python = find_python(version)
        if python is None or version in _RUNS:
            continue
        report = Path(tempfile.mkdtemp(prefix=f"resolve{version}-")) / "report.json"
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--disable-pip-version-check", "--report", str(report),
               "-c", str(ROOT / "constraints.txt"), "-e", f"{ROOT}[test,jax,lab,site]"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        _RUNS[version] = (proc, report)


def test_constraints_pin_every_package_of_this_environment():
    """The venv the tests run in has exactly the pinned versions, and nothing unpinned."""
    pins = pins_for()
    unpinned, wrong = [], []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in ("gputrain-kit", "pip"):
            continue
        if name not in pins:
            unpinned.append(name)
        elif dist.version != pins[name]:
            wrong.append(f"{name} {dist.version} (pinned {pins[name]})")
    assert not wrong, f"installed versions differ from constraints.txt: {wrong}; run `make install`"
    assert not unpinned, f"installed but not pinned: {unpinned}; run `make lock`"


def test_stored_outputs_python_is_named_in_readme_and_constraints():
    readme = (ROOT / "README.md").read_text()
    assert "3.10" in readme and "3.13" in readme                    # the README's first screen names the range
    install = (ROOT / "docs" / "install.md").read_text()           # ... and its install page the outputs' Python
    assert f"Python {STORED_OUTPUTS_PYTHON}" in install and "docs/install.md" in readme
    header = (ROOT / "constraints.txt").read_text().splitlines()[:3]
    assert any(f"Python {STORED_OUTPUTS_PYTHON}" in line for line in header)


def test_oldest_python_is_requires_python():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(rf'requires-python = ">={re.escape(OLDEST)}"', text)
    assert 'license = "Apache-2.0"' in text, "use the SPDX string form (the table form is deprecated)"


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_install_resolves_on_python(version):
    _start_dry_runs()
    if version not in _RUNS:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no python{version} on this CI machine: the install check for it cannot run")
        pytest.skip(f"no python{version} found (PATH or pyenv)")
    proc, report = _RUNS[version]
    try:
        out, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"pip's resolution on Python {version} took over 10 minutes")
    noise = re.compile(r"^WARNING: Location '.*' is ignored")
    out = "\n".join(l for l in out.splitlines() if not noise.match(l))
    assert proc.returncode == 0, f"the install does not resolve on Python {version}:\n{out[-3000:]}"
    data = json.loads(report.read_text())
    shutil.rmtree(report.parent, ignore_errors=True)
    environment = data["environment"]
    assert environment["python_version"] == version
    pins = pins_for(environment)
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in data["install"]}
    resolved.pop("gputrain-kit")
    differs = {n: (v, pins.get(n)) for n, v in resolved.items() if pins.get(n) != v}
    assert not differs, f"Python {version} resolves to versions constraints.txt does not pin: {differs}"
    assert Marker(f'python_version == "{version}"').evaluate(environment)
