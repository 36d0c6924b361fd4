"""The repo's notebook executor (`make notebooks`): fresh kernel, top to bottom, in place.

Stored outputs are produced only by this script. It refuses to save a notebook
whose run raised an error or wrote to stderr (learners would see the noise and
strict nbval would trip on it), keeps the widgets' state so that saved notebooks
show their widgets, and writes each file atomically.

    python tools/build_notebooks.py                 # every notebook
    python tools/build_notebooks.py notebooks/01_*.ipynb
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def problems(nb: nbformat.NotebookNode) -> list[str]:
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                found.append(f"cell {index}: stderr output: {''.join(out.get('text', ''))[:300]!r}")
            if out.get("output_type") == "error":
                found.append(f"cell {index}: {out.get('ename')}: {out.get('evalue')}")
    return found


def build(path: Path, timeout: int = 600) -> float:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=True, resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    bad = problems(nb)
    if bad:
        raise SystemExit(f"{path.name}: not saved, fix these first:\n  " + "\n  ".join(bad))
    # nbclient stored the widgets' state (store_widget_state=True): JupyterLab and notebook viewers then
    # draw the widgets, not "VBox(children=...)", before the learner runs anything.
    if any("application/vnd.jupyter.widget-view+json" in out.get("data", {})
           for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])):
        assert "application/vnd.jupyter.widget-state+json" in nb.metadata.get("widgets", {}), \
            f"{path.name}: widgets shown but no widget state stored"
    else:
        nb.metadata.pop("widgets", None)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".ipynb.tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            nbformat.write(nb, handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        print("no notebooks found", file=sys.stderr)
        return 1
    os.environ.setdefault("PYTHONHASHSEED", "0")
    for path in paths:
        elapsed = build(path.resolve())
        print(f"{path.name}: executed in {elapsed:.1f} s (wall time on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
