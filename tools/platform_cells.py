"""Write every notebook's Colab/Kaggle badge row and its first cell, which installs the kit where it is missing.

    python tools/platform_cells.py          # rewrite both in every notebook (idempotent), then `make notebooks`
    python tools/platform_cells.py --check  # exit 1 if a notebook differs from what this writes (the tests use it)

The badge row goes under each notebook's title; the install cell (tagged ``bootstrap``) before its first code cell.
On Colab or Kaggle the cell installs the kit from ``gputrain_kit.course.REPOSITORY`` (``GPUTRAIN_KIT_SOURCE``
overrides it with any pip URL: a fork, ``file:///path/to/clone``, a wheel), pinning the platform's own TensorFlow and Keras so that pip keeps
them (or refuses, naming the conflict) instead of replacing them and forcing a restart. Where the kit is installed
(``make lab``, ``pip install``) the cell does nothing.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gputrain_kit.course import REPOSITORY, colab_url, kaggle_url  # noqa: E402

BADGE_MARK = "colab-badge.svg"

TAG = "bootstrap"

BOOTSTRAP = f'''\
# On Colab, Kaggle or any Jupyter without the kit: install it once per runtime. Every package the runtime already
# has that pip might replace under the running kernel (TensorFlow, Keras, JAX, NumPy, the Jupyter stack) is pinned
# to its installed version. Where the kit is installed, this does nothing.
# GPUTRAIN_KIT_SOURCE: another pip URL to install it from (a fork, file:///path/to/a/clone, a wheel).
import importlib, importlib.metadata, importlib.util, os, subprocess, sys

if importlib.util.find_spec("gputrain_kit") is None:
    providers = importlib.metadata.packages_distributions()
    kept = ("tensorflow", "keras", "jax", "jaxlib", "numpy", "matplotlib", "ipywidgets", "ipykernel", "IPython",
            "jupyter_client", "jupyter_server", "notebook", "tornado", "traitlets")
    keep = sorted({{f"{{name}}=={{importlib.metadata.version(name)}}"
                   for module in kept for name in providers.get(module, [])[:1]}})
    source = os.environ.get("GPUTRAIN_KIT_SOURCE", "git+{REPOSITORY}")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                          f"gputrain-kit @ {{source}}", *keep], capture_output=True, text=True)
    if pip.returncode != 0:
        print(pip.stdout[-4000:], pip.stderr[-4000:], sep="\\n")
        raise RuntimeError("pip could not install the kit without replacing what this runtime uses (pip's own words "
                           "are above). Fix: a fresh runtime; if pip names TensorFlow or Keras, "
                           "this platform's are outside the kit's range (TensorFlow 2.18-2.21, Keras 3.10 or later).")
    print("installed the kit; kept", ", ".join(keep) or "nothing (none of them was installed)")
    importlib.invalidate_caches()
'''


def badge_row(name: str) -> str:
    return (f"[![Open In Colab](https://colab.research.google.com/assets/{BADGE_MARK})]({colab_url(name)}) "
            f"[![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]({kaggle_url(name)})")


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def apply(path: Path) -> dict:
    """The notebook with the badge row under its title and the install cell first among its code cells."""
    nb = json.loads(path.read_text())
    title = nb["cells"][0]
    lines = [line for line in _source(title).split("\n") if BADGE_MARK not in line]
    while len(lines) > 1 and not lines[1].strip():
        del lines[1]                        # the blank lines a previous badge row left
    title["source"] = _lines("\n".join([lines[0], "", badge_row(path.name), "", *lines[1:]]))
    cells = [c for c in nb["cells"] if TAG not in c.get("metadata", {}).get("tags", [])]
    first_code = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    old = next((c for c in nb["cells"] if TAG in c.get("metadata", {}).get("tags", [])), None)
    cell = old or {"cell_type": "code", "execution_count": None, "id": f"bootstrap{path.name[:2]}", "metadata": {},
                   "outputs": []}                # an executed cell keeps its count and (empty) outputs
    cell["metadata"]["tags"] = [TAG]
    cell["source"] = _lines(BOOTSTRAP)
    cells.insert(first_code, cell)
    nb["cells"] = cells
    return nb


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"     # as nbformat writes


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        new = _dump(apply(path))
        if new != path.read_text():
            stale.append(path.name)
            if not check:
                path.write_text(new)
    if check and stale:
        print("badges or install cell out of date (run python tools/platform_cells.py, then make notebooks):",
              ", ".join(stale))
        return 1
    print(("rewrote " if stale else "up to date: ") + (", ".join(stale) if stale else "every notebook"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
