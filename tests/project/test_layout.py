"""The package's shape (issue 31): one child-process layer, no import circle, no program in a string, small
modules. Each check reads the sources, so a change that breaks the shape fails here with where it broke."""
from __future__ import annotations

import ast
import re
import subprocess
import sys

from conftest import ROOT

PACKAGE = ROOT / "gputrain_kit"
SOURCES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 500


def _module(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Every kit module -> the kit modules it imports, at the top or inside a function (a circle through a
    lazy import is still a circle). A module importing its own package's ``__init__`` is left out."""
    modules = {_module(p): p for p in SOURCES}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                deps.update(t for t in [target] + [f"{target}.{a.name}" for a in node.names] if t in modules)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".") and d != "gputrain_kit"}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    graph = import_graph()
    assert "gputrain_kit.activity" in graph and "gputrain_kit._children.runner" in graph
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_one_module_forks_and_no_kit_program_runs_from_a_string():
    """os.fork only in _children/lifecycle.py; ``python -c`` only in processes.run_child, whose snippets are the
    caller's (a notebook's cell shows its own code); every other child runs a module of the package."""
    forks = [str(p.relative_to(ROOT)) for p in SOURCES if "os.fork(" in p.read_text()]
    assert forks == ["gputrain_kit/_children/lifecycle.py"]
    dash_c = [str(p.relative_to(ROOT)) for p in SOURCES if re.search(r"""["']-c["']""", p.read_text())]
    assert dash_c == ["gputrain_kit/processes.py"]


def test_one_fork_switch():
    text = "\n".join(p.read_text() for p in SOURCES)
    assert sorted(set(re.findall(r"GPUTRAIN_\w*FORK\w*", text))) == ["GPUTRAIN_FORK"]


def test_every_child_task_is_a_module_with_run():
    import importlib

    tasks = [p.stem for p in (PACKAGE / "_children").glob("*.py")
             if p.stem not in ("__init__", "protocol", "lifecycle", "server", "runner")]
    assert sorted(tasks) == ["bn_case", "gpu_numbering", "lock_probe", "measure", "smoke", "xla_memory"]
    for task in tasks:
        assert callable(importlib.import_module(f"gputrain_kit._children.{task}").run), task


def test_importing_the_kit_imports_no_tensorflow_and_submodules_load_on_use():
    code = ("import sys, gputrain_kit as kit\n"
            "assert 'tensorflow' not in sys.modules\n"
            "assert 'gputrain_kit.widgets' not in sys.modules\n"
            "kit.widgets\n"
            "assert 'gputrain_kit.widgets' in sys.modules and 'tensorflow' not in sys.modules\n"
            "print(kit.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == _pyproject_version()


def _pyproject_version() -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
