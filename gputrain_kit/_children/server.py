"""The program every kit child process runs: ``python -m gputrain_kit._children.server TASK FORK``.

It imports the task module once (``prepare()``: TensorFlow imported, never started), then reads jobs, one JSON
object a line (``{"id": ..., "args": {...}}``), from stdin until it closes. With FORK=1 (Linux) each job runs
in a child forked at once from this process: its own runtime and allocator, as in a fresh process, without a
new import; how many run at a time is the parent's decision (it sends a job when a slot is free). With FORK=0
the jobs run here, one after another (the parent sends one job per process). Every job's result is one
reported line: ``{"id", "values"}`` or ``{"id", "error"}``, also when a forked child dies without reporting.
"""
from __future__ import annotations

import importlib
import json
import os
import select
import sys
import traceback
from typing import Any

from .lifecycle import die_with_parent, end_child, fork, quiet_tensorflow
from .protocol import report


def _run_one(task: Any, job: dict) -> None:
    try:
        values = task.run(**job["args"])
    except BaseException:                         # the task's failure is its result
        report(id=job["id"], error=traceback.format_exc(limit=4)[-2000:])
    else:
        report(id=job["id"], values=values)


def _serve_forked(task: Any) -> None:
    running: dict[int, str] = {}
    reading, buffered = True, b""
    while reading or running:
        if reading and select.select([0], [], [], 0.02 if running else None)[0]:
            chunk = os.read(0, 65536)
            reading = bool(chunk)
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in filter(None, lines):
                job = json.loads(line)
                pid = fork()
                if pid == 0:
                    die_with_parent()
                    try:
                        _run_one(task, job)
                    finally:
                        end_child(0)                  # 0: reported; anything else means it died first
                running[pid] = job["id"]
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG if reading else 0)
            if pid == 0:
                break
            job_id = running.pop(pid)
            if status:
                report(id=job_id, error=f"the process running it died (wait status {status})", died=True)


def main(argv: list[str]) -> int:
    name, fork = argv[0], argv[1] == "1"
    quiet_tensorflow()
    die_with_parent()
    task = importlib.import_module(f"gputrain_kit._children.{name}")
    if hasattr(task, "prepare"):
        task.prepare()
    if fork:
        _serve_forked(task)
    else:
        for line in sys.stdin:
            if line.strip():
                _run_one(task, json.loads(line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
