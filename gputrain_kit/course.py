"""The course's notebooks from an installed kit: ``python -m gputrain_kit notebooks DIR`` copies them out,
``python -m gputrain_kit lab [DIR]`` opens them in JupyterLab (on 127.0.0.1). The wheel ships them as package
data (``gputrain_kit/notebooks``); in a clone that folder is a link to the clone's ``notebooks/``.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

from ._args import ArgumentTypeError, short

__all__ = ["REPOSITORY", "INSTALL_LAB", "notebook_files", "copy_notebooks", "lab_command", "lab_missing",
           "running_as_root", "colab_url", "kaggle_url"]

#: Where the course is published: the notebooks' Colab and Kaggle badges open it, and their first cell installs the
#: kit from it where it is missing (``tools/platform_cells.py`` writes both; change it here, then run that tool).
REPOSITORY = "https://github.com/gputrain-kit/gputrain-kit"

#: How to install the kit's JupyterLab side (the ``lab`` extra), with commands that work today: the kit is not on
#: PyPI, so from a clone or from the wheel a release attaches.
INSTALL_LAB = ("in a clone, pip install -e '.[lab,jax]' -c constraints.txt (or make lab); with the wheel, "
               "pip install 'gputrain_kit-VERSION-py3-none-any.whl[lab,jax]' -c constraints.txt")


def _blob(name: str) -> str:
    return f"{REPOSITORY.removeprefix('https://github.com/')}/blob/main/notebooks/{name}"


def colab_url(name: str) -> str:
    """The address that opens notebook ``name`` (e.g. "00_start_here.ipynb") in Google Colab."""
    return f"https://colab.research.google.com/github/{_blob(name)}"


def kaggle_url(name: str) -> str:
    """The address that opens notebook ``name`` in a new Kaggle notebook."""
    return f"https://kaggle.com/kernels/welcome?src={REPOSITORY}/blob/main/notebooks/{name}"


def notebook_files() -> list[Path]:
    """The course's notebooks shipped with this kit, in order (00_start_here.ipynb first)."""
    folder = Path(__file__).resolve().parent / "notebooks"
    found = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise FileNotFoundError(f"no notebooks in {folder}: this kit was installed without them. Install it from "
                                "a clone (pip install -e '.[lab,jax]' -c constraints.txt in it) or from the wheel "
                                f"({REPOSITORY}/releases), which ship them.")
    return found


def copy_notebooks(dest: str | Path, *, force: bool = False) -> list[Path]:
    """Copy every notebook into ``dest`` (created if needed) and return the copies' paths. A notebook already there
    is kept unless ``force=True`` (it may hold your answers): the error names them all."""
    func = "copy_notebooks"
    if not isinstance(dest, (str, Path)) or not str(dest).strip():
        raise ArgumentTypeError(f"{func}: dest must be a folder path (str or pathlib.Path), got {short(dest)}.")
    folder = Path(dest).expanduser()
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{func}: {folder} is a file, not a folder; name a folder, e.g. 'gputrain-course'.")
    sources = notebook_files()
    existing = [s.name for s in sources if (folder / s.name).exists()]
    if existing and not force:
        raise FileExistsError(f"{func}: {folder} already has {', '.join(existing)}; they may hold your work. Pass "
                              "another folder, or --force (force=True) to overwrite them.")
    folder.mkdir(parents=True, exist_ok=True)
    copies = []
    for source in sources:
        target = folder / source.name
        partial = target.with_name(target.name + ".partial")
        shutil.copyfile(source, partial)          # whole or not at all: a copy cut short never replaces a notebook
        partial.replace(target)
        copies.append(target)
    return copies


def running_as_root() -> bool:
    """Whether this process runs as root (containers, CI boxes), where JupyterLab refuses to start without
    ``--allow-root``."""
    import os

    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(folder: str | Path, extra: Sequence[str] = ()) -> list[str]:
    """The command that opens JupyterLab on ``folder`` at notebook 00, listening on 127.0.0.1 only; ``extra``
    arguments go to JupyterLab as they are (after the kit's, so that they win). As root ``--allow-root`` is added,
    as ``make lab`` does."""
    import sys

    func = "lab_command"
    if isinstance(extra, str) or not all(isinstance(a, str) for a in extra):
        raise ArgumentTypeError(f"{func}: extra must be a list of strings (JupyterLab's arguments), got "
                                f"{short(extra)}; e.g. ['--port', '8890'].")
    root = ["--allow-root"] if running_as_root() and "--allow-root" not in extra else []
    return [sys.executable, "-m", "jupyterlab", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={folder}",
            "--LabApp.news_url=None", "--LabApp.default_url=/lab/tree/00_start_here.ipynb", *root, *extra]


def lab_missing() -> str | None:
    """What to install when JupyterLab is missing (a kernel-side install, as on Colab, leaves it out: it is the
    kit's ``lab`` extra), or None when it is there."""
    import importlib.util

    if importlib.util.find_spec("jupyterlab") is not None:
        return None
    return ("lab: JupyterLab is not installed here (the kit installs it only with its 'lab' extra: a kernel on "
            f"Colab, Kaggle or a hub needs none). Install it: {INSTALL_LAB}")
