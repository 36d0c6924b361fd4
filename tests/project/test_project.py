"""The project's promises about itself: packaging, set-up commands, notebook conventions, README."""
from __future__ import annotations

import json
import re
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_pyproject_dependencies():
    deps = PYPROJECT["project"]["dependencies"]
    # the supported range (docs/versions.md, checked by `make test-versions`)
    for needed in ("tensorflow>=2.18,<2.22", "keras>=3.10", "ipywidgets>=7.7", "matplotlib", "scikit-learn"):
        assert needed in deps
    # a kernel (Colab, Kaggle, a hub) needs no server side: JupyterLab comes with the `lab` extra only, so that the
    # first cell never replaces a platform's Jupyter stack under its running kernel (issue 46)
    assert not any(d.startswith(("jupyterlab", "notebook", "jupyter-server")) for d in deps)
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "jupyterlab>=4" in extras["lab"] and "ipywidgets>=8" in extras["lab"]
    assert any(d.startswith("mkdocs-jupyter") for d in extras["site"])
    assert any(d.startswith("pytest") for d in extras["test"]) and any(d.startswith("nbval") for d in extras["test"])
    assert any(d.startswith("tensorflow[and-cuda]") for d in extras["gpu"])


def test_environment_yml_agrees_with_pyproject():
    text = (ROOT / "environment.yml").read_text()
    lines = [l.split("#")[0].rstrip() for l in text.splitlines() if l.split("#")[0].strip()]
    assert "  - conda-forge" in lines
    conda_deps, pip_deps, section = [], [], None
    for line in lines:
        if line.startswith("dependencies:"):
            section = "conda"
        elif re.match(r"^\s+- pip:$", line):
            section = "pip"
        elif section == "conda" and re.match(r"^  - ", line):
            conda_deps.append(line.strip()[2:])
        elif section == "pip" and line.strip().startswith("- "):
            pip_deps.append(line.strip()[2:])
    assert sorted(conda_deps) == ["pip", "python=3.11"], "conda must bring only Python and pip"
    assert pip_deps == ["-e .[test,jax,lab,site]"], "pyproject.toml must stay the one list of dependencies"
    low = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert tuple(map(int, low.split("."))) <= (3, 11)


def test_constraints_satisfy_pyproject_ranges():
    from test_install import pins_for
    pins = pins_for()     # this Python's pins (constraints.txt forks some by python_version markers)
    assert tuple(map(int, pins["tensorflow"].split(".")[:2])) >= (2, 16)
    assert pins["keras"].startswith("3.")
    assert int(pins["ipywidgets"].split(".")[0]) >= 8 and int(pins["jupyterlab"].split(".")[0]) >= 4


def test_make_lab_binds_loopback_with_a_token():
    makefile = (ROOT / "Makefile").read_text()
    lab = re.search(r"^lab:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "--ServerApp.ip=127.0.0.1" in lab and "0.0.0.0" not in makefile
    assert "token=''" not in lab and 'token=""' not in lab and "disable_check_xsrf" not in lab
    assert "python3 -m venv" in makefile.replace("$(PYTHON)", "python3")


def test_make_lab_opens_on_notebook_00_without_news():
    makefile = (ROOT / "Makefile").read_text()
    lab = re.search(r"^lab:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "--LabApp.news_url=None" in lab and "--LabApp.default_url=/lab/tree/00_start_here.ipynb" in lab
    assert "tools/lab-overrides.json" in lab and (ROOT / "notebooks" / "00_start_here.ipynb").exists()
    overrides = json.loads((ROOT / "tools" / "lab-overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_learners_see_no_test_plumbing_or_source_numbers(path):
    """nbval markers are cell tags, sources are cited by title (never 'seed 003'), widgets are drawn from state."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        assert "NBVAL_" not in text, f"nbval marker in a cell source: use the nbval-ignore-output tag\n{text[:80]}"
        found = re.search(r"\bseeds? (?:article )?0\d\d\b|\bseed article\b|\bseeds? 0\d\d and", text, re.I)
        assert not found, f"'{found.group(0)}' in {path.name}: cite the source by title, site or author and year"
        assert "SEED_0" not in text, f"a 'SEED_0..' name in {path.name}: use the names that cite the source"
        for out in cell.get("outputs", []):
            shown = "".join(out.get("text", "")) + "".join(out.get("data", {}).get("text/plain", ""))
            assert not re.search(r"\bseed 0\d\d\b", shown, re.I), f"an output of {path.name} says {shown[:80]!r}"
    views = [out for cell in nb["cells"] for out in cell.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in out.get("data", {})]
    if views:
        state = nb["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
        missing = [v["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] for v in views
                   if v["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] not in state]
        assert not missing, f"{path.name}: widgets without stored state ({len(missing)}): run `make notebooks`"


def test_the_github_workflow_is_a_thin_wrapper_over_ci_run():
    """A fork gets the same CI: the workflow runs .ci/run on push and pull request and holds no test logic."""
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))           # YAML 1.1 reads a bare `on` as True
    assert {"push", "pull_request"} <= set(triggers)
    job = workflow["jobs"]["test"]
    assert job["runs-on"].startswith("ubuntu")
    commands = "\n".join(step.get("run", "") for step in job["steps"])
    assert ".ci/run" in commands
    for logic in ("pytest", "make test", "nbval", "pip install"):
        assert logic not in commands, f"{logic!r} in the workflow: keep test logic in .ci/run"
    uses = [step.get("uses", "") for step in job["steps"]]
    assert any(u.startswith("actions/upload-artifact") for u in uses)
    # Apple Silicon (issue 29): every notebook runs there, through make; outputs are Linux x86's, so not compared
    mac = workflow["jobs"]["notebooks-macos-arm64"]
    assert mac["runs-on"] == "macos-14"                                   # GitHub's Apple Silicon runner
    mac_commands = "\n".join(step.get("run", "") for step in mac["steps"])
    assert "make install doctor" in mac_commands and "--nbval-lax" in mac_commands and "notebooks" in mac_commands
    assert any(u.startswith("actions/setup-python") for u in uses) and any(u.startswith("actions/cache") for u in uses)


def test_ci_runs_make_test_strict():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and "set -euo pipefail" in ci
    makefile = (ROOT / "Makefile").read_text()
    assert "--nbval " in makefile and "--nbval-lax" not in makefile


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_conventions(path):
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    src = lambda c: "".join(c["source"])
    first, bootstrap, second = cells[0], cells[1], cells[2]
    assert first["cell_type"] == "markdown" and src(first).startswith("# ")
    assert "Goals" in src(first) and re.search(r"\*\*Time:\*\* about \d+ minutes", src(first))
    # the Colab/Kaggle install cell (tools/platform_cells.py, tests/project/test_platform_cells.py), then the setup
    assert bootstrap["cell_type"] == "code" and bootstrap["metadata"]["tags"] == ["bootstrap"]
    assert second["cell_type"] == "code" and "kit.setup(devices=" in src(second)
    code = [c for c in cells if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), "run `make notebooks`: outputs must come from one fresh run"
    for c in code:
        for out in c["outputs"]:
            assert not (out["output_type"] == "stream" and out["name"] == "stderr"), f"stderr in {src(c)[:60]!r}"
            assert out["output_type"] != "error", f"error stored in {src(c)[:60]!r}"
        ignored = "# NBVAL_IGNORE_OUTPUT" in src(c) or "nbval-ignore-output" in c["metadata"].get("tags", [])
        # a displayed explorer (a headless one whose cell only prints verdicts is compared like any cell)
        shows_widget = any("application/vnd.jupyter.widget-view+json" in out.get("data", {}) for out in c["outputs"])
        if shows_widget or "interact(" in src(c) or (re.search(r"\w*Explorer\(|visibility_explorer\(", src(c))
                                                     and any(o["output_type"] != "stream" for o in c["outputs"])):
            assert ignored, "explorer cells (their state varies as you use them) must be tagged nbval-ignore-output"
    text = "\n".join(src(c) for c in cells)
    assert "## Summary" in text and "## Exercises" in text and "<details>" in text
    assert "kit.check." in text


def test_readme_lists_every_notebook_and_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        assert f"(notebooks/{path.name})" in readme, f"{path.name} missing from the README table"
    assert "make lab" in readme and "make test" in readme and "doctor" in readme
    assert "pip install -e '.[gpu]'" in readme


def test_readme_times_are_the_notebooks_own():
    """Each notebook's 'Time:' line, the README table's minutes and the README's total agree (issue 30)."""
    readme = (ROOT / "README.md").read_text()
    total = 0
    for path in NOTEBOOKS:
        first = "".join(json.loads(path.read_text())["cells"][0]["source"])
        minutes = int(re.search(r"\*\*Time:\*\* about (\d+) minutes", first).group(1))
        row = next(line for line in readme.splitlines() if line.startswith(f"| [{path.stem}]"))
        assert f"| {minutes} min |" in row, (path.name, minutes)
        total += minutes
    hours, rest = divmod(total, 60)
    assert f"About **{hours} hours" + (f" {rest} minutes**" if rest else "**") in readme, total
