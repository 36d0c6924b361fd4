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
