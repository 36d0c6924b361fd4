"""The kit's one way to run work in child processes.

A *task* is a module of this package with a ``run(**args) -> dict`` function (and optionally ``prepare()``,
run once before any job: imports, shared data). ``runner.run_jobs`` sends each job to ``server.py``, a
program that imports the task once and, on Linux, forks a child per job from that process, so each job
gets its own TensorFlow runtime without paying the import again; elsewhere (or with ``GPUTRAIN_FORK=0``)
each job gets a fresh interpreter. Results come back as JSON lines marked by ``protocol.MARK``.

The tasks are ordinary files (``bn_case``, ``measure``, ``lock_probe``): importable, linted, tested, and a
notebook can show one with ``inspect.getsource``.
"""
from __future__ import annotations

from .runner import Job, Outcome, run_jobs

__all__ = ["Job", "Outcome", "run_jobs"]
