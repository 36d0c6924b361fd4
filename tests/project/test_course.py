"""`python -m gputrain_kit notebooks DIR` and `lab`: the notebooks out of the installed kit (issue 34, part 4)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gputrain_kit import course
from gputrain_kit.__main__ import main
from conftest import ROOT


def test_the_package_ships_every_notebook_of_the_clone():
    assert [p.name for p in course.notebook_files()] == sorted(p.name for p in (ROOT / "notebooks").glob(
        "[0-9][0-9]_*.ipynb"))


def test_copy_keeps_a_learners_work_unless_forced(tmp_path):
    copies = course.copy_notebooks(tmp_path / "course")
    assert len(copies) == len(course.notebook_files()) and all(p.stat().st_size > 1000 for p in copies)
    mine = copies[0]
    mine.write_text("my answers")
    with pytest.raises(FileExistsError, match="may hold your work.*--force"):
        course.copy_notebooks(tmp_path / "course")
    assert mine.read_text() == "my answers"
    course.copy_notebooks(tmp_path / "course", force=True)
    assert mine.read_text() != "my answers" and not list((tmp_path / "course").glob("*.partial"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        course.copy_notebooks(tmp_path / "file")
    with pytest.raises(TypeError, match="dest must be a folder path"):
        course.copy_notebooks(3)


def test_the_command_line(tmp_path, capsys):
    assert main(["notebooks", str(tmp_path / "c")]) == 0
    assert f"copied {len(course.notebook_files())} notebooks" in capsys.readouterr().out
    assert main(["notebooks", str(tmp_path / "c")]) == 2 and "may hold your work" in capsys.readouterr().err
    assert main(["notebooks"]) == 2 and "name one folder" in capsys.readouterr().err
    command = course.lab_command(tmp_path / "c")
    assert command[:3] == [sys.executable, "-m", "jupyterlab"] and "--ServerApp.ip=127.0.0.1" in command
    out = subprocess.run([sys.executable, "-m", "gputrain_kit", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "notebooks DIR" in out.stdout and "lab [DIR]" in out.stdout


def _lab_call(monkeypatch, args, *, root: bool):
    """The command `python -m gputrain_kit lab ...` would start (JupyterLab itself is not started)."""
    started = []
    monkeypatch.setattr(course, "running_as_root", lambda: root)
    monkeypatch.setattr(subprocess, "call", lambda command: started.append(command) or 0)
    code = main(["lab", *args])
    return code, (started[0] if started else None)


def test_lab_forwards_jupyters_arguments_and_allows_root_as_make_lab_does(tmp_path, monkeypatch, capsys):
    folder = str(tmp_path / "my-course")
    code, command = _lab_call(monkeypatch, [folder, "--", "--port", "8890", "--no-browser"], root=True)
    assert code == 0 and command[:3] == [sys.executable, "-m", "jupyterlab"]
    assert command[-3:] == ["--port", "8890", "--no-browser"]                    # last: JupyterLab's own win
    assert command.count("--allow-root") == 1 and f"--ServerApp.root_dir={folder}" in command
    assert (tmp_path / "my-course" / "00_start_here.ipynb").exists()
    code, command = _lab_call(monkeypatch, [folder], root=False)               # a second run opens the copies
    assert code == 0 and "--allow-root" not in command
    # the issue's own spelling: --allow-root before -- is forwarded, not taken for a second folder
    code, command = _lab_call(monkeypatch, [folder, "--allow-root"], root=True)
    assert code == 0 and command.count("--allow-root") == 1
    code, command = _lab_call(monkeypatch, [folder, "--port", "8890"], root=False)
    assert code == 2 and command is None
    assert "JupyterLab's own options go after --" in capsys.readouterr().err
    assert main(["notebooks", folder, "--", "--port", "1"]) == 2 and "for `lab` only" in capsys.readouterr().err
    with pytest.raises(TypeError, match="extra must be a list of strings"):
        course.lab_command(folder, "--port 8890")


def test_lab_without_jupyterlab_names_the_extra(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jupyterlab" else real(name, *a))
    code, command = _lab_call(monkeypatch, [str(tmp_path / "c")], root=False)
    err = capsys.readouterr().err
    assert code == 2 and command is None and not (tmp_path / "c").exists()         # refused before copying
    assert "JupyterLab is not installed" in err and "[lab,jax]" in err and "pip install gputrain-kit" not in err


def test_error_texts_name_only_commands_that_work_today():
    """The kit is not on PyPI: no message may tell a learner to `pip install gputrain-kit` (anyone could register
    the name); the clone or the wheel instead."""
    import re

    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "gputrain_kit").rglob("*.py")
                 if re.search(r"pip install (-U )?gputrain[-_]kit\b(?![-_.\w\[])", p.read_text())]
    assert offenders == []


def test_check_links_collects_every_address_a_learner_follows():
    """`make check-links` (run by a maintainer once published; it needs the internet): what it would try."""
    sys.path.insert(0, str(ROOT / "tools"))
    import check_links

    found = check_links.course_addresses()
    notebooks = course.notebook_files()
    assert found[0] == course.REPOSITORY and len(found) == len(set(found))
    for path in notebooks:
        assert course.colab_url(path.name) in found and course.kaggle_url(path.name) in found
    assert all(url.startswith(("https://colab.research.google.com/", "https://kaggle.com/", course.REPOSITORY))
               for url in found)
