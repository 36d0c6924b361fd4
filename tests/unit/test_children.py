"""The kit's one way to run child processes (gputrain_kit._children.runner) and the measuring queue.

A fake server (a small Python program standing in for ``python -m gputrain_kit._children.server``) logs when
it starts and which jobs it is sent, so the scheduling is checked without TensorFlow."""
from __future__ import annotations

import sys
import textwrap
import threading
import time

import pytest

from gputrain_kit import measure
from gputrain_kit._children import Job, runner

FAKE_SERVER = textwrap.dedent("""\
    import json, os, sys, time
    from gputrain_kit._children.protocol import report
    log = os.environ["FAKE_LOG"]
    with open(log, "a") as f:
        f.write(f"start {os.environ['FAKE_ENV']}\\n")
    for line in sys.stdin:
        job = json.loads(line)
        with open(log, "a") as f:
            f.write(f"job {job['id']}\\n")
        time.sleep(0.05)
        report(id=job["id"], values={"env": os.environ["FAKE_ENV"], "pid": os.getpid()})
    """)


@pytest.fixture
def fake_server(tmp_path, monkeypatch):
    """run_jobs starts this program instead of the kit's server; returns the log it writes."""
    program = tmp_path / "fake_server.py"
    program.write_text(FAKE_SERVER)
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {program}\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(runner.sys, "executable", str(wrapper))
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    return log


def test_one_environments_jobs_run_before_the_next_environments_server_starts(fake_server):
    """Two kernel families, three jobs each, two at a time: the second family's TensorFlow import starts only
    when the first has no job left to send, not beside it (half a GB each, notebook 05's memory budget)."""
    jobs = [Job(f"{env}{i}", env={"FAKE_ENV": env}) for env in ("a", "b") for i in range(3)]
    results = runner.run_jobs("measure", jobs, processes=2, fork=True)
    assert all(outcome.ok for outcome in results.values())
    assert {outcome.values["env"] for outcome in results.values()} == {"a", "b"}
    log = fake_server.read_text().split()
    events = [" ".join(log[i:i + 2]) for i in range(0, len(log), 2)]
    first = events[0].split()[1]
    assert events[:4] == [f"start {first}", f"job {first}0", f"job {first}1", f"job {first}2"], events
    assert sorted(events) == sorted(["start a", "start b"] + [f"job {job.id}" for job in jobs])


def test_a_limit_given_as_a_function_is_asked_again_while_the_jobs_run(fake_server):
    """start_cases raises its limit once the notebook waits for the cases: run_jobs asks a callable limit again
    even when no job is reporting. Here it starts at 0 (nothing may start) and rises after half a second."""
    limit = {"now": 0}
    threading.Timer(0.5, lambda: limit.update(now=2)).start()
    begun = time.monotonic()
    jobs = [Job(f"a{i}", env={"FAKE_ENV": "a"}) for i in range(3)]
    results = runner.run_jobs("measure", jobs, processes=lambda: limit["now"], fork=False, timeout=60)
    assert all(outcome.ok for outcome in results.values()) and time.monotonic() - begun >= 0.5


def test_without_fork_every_job_still_gets_its_own_server(fake_server):
    jobs = [Job(f"a{i}", env={"FAKE_ENV": "a"}) for i in range(3)]
    results = runner.run_jobs("measure", jobs, processes=2, fork=False)
    assert len({outcome.values["pid"] for outcome in results.values()}) == 3
    assert fake_server.read_text().split().count("start") == 3


def test_measurements_queue_first_come_first_served(monkeypatch):
    """Notebook 08 starts the levers, then the families, then measures once more in the foreground: each waits
    for the ones before it, in the order asked, so that one measuring run's processes are alive at a time."""
    running, order, overlaps = [], [], []

    def fake_measure_now(func, source, name, jobs, processes, env, on_result=None):
        running.append(name)
        overlaps.append(len(running))
        order.append(jobs[0][0])
        time.sleep(0.2)
        running.remove(name)
        return {job_name: job_name for job_name, _, _ in jobs}

    monkeypatch.setattr(measure, "_measure_now", fake_measure_now)

    def build():
        import keras
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    first = measure.start_measuring(build, {"first": {}}, batch_size=8)
    time.sleep(0.05)
    second = measure.start_measuring(build, {"second": {}}, batch_size=8)
    time.sleep(0.05)
    assert measure.measure_memory(build, batch_size=8) == "one"       # waited for both, then ran
    assert first.result(timeout=5) == {"first": "first"} and second.result(timeout=5) == {"second": "second"}
    assert order == ["first", "second", "one"] and max(overlaps) == 1


def test_the_queue_serves_in_ticket_order_one_at_a_time():
    queue, served, inside = measure._Queue(), [], []

    def client(i):
        with queue:
            inside.append(i)
            assert len(inside) == 1
            served.append(i)
            time.sleep(0.01)
            inside.remove(i)

    with queue:                       # hold it while the clients line up, in a known order
        threads = []
        for i in range(5):
            threads.append(threading.Thread(target=client, args=(i,)))
            threads[-1].start()
            time.sleep(0.05)
    for thread in threads:
        thread.join(5)
    assert served == [0, 1, 2, 3, 4]


def test_a_run_child_snippet_sends_values_back_under_either_name():
    """Notebooks name setup()'s report `report`, so the snippets they show call `send_back`; the first name stays."""
    from gputrain_kit.processes import run_child
    child = run_child("send_back(a=1, b=[2, 3])\nreport(c='four')\nprint('plain output')")
    assert child.values == {"a": 1, "b": [2, 3], "c": "four"}
    assert child.stdout.strip() == "plain output"
