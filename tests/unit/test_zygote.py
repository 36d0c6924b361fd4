"""Local workers forked from one process that imported TensorFlow once (gputrain_kit._zygote).

The workers must behave as fresh processes do: their own process, environment, random state,
network namespace and exit code; the fork only saves the import. Notebook 07 and every test in
test_multiworker.py run through it; these tests pin what is particular to it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from gputrain_kit import _zygote as zg
from gputrain_kit import multiworker as mw

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks: Linux only")


def who_am_i():
    import os
    import numpy as np
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
    return {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "random": float(np.random.rand()),
            "sum": float(total), "marker": os.environ.get("GPUTRAIN_TEST_MARKER"),
            "tf_config": os.environ["TF_CONFIG"]}


def _zygote_pid() -> int:
    assert zg._shared is not None and zg._shared.alive()
    return zg._shared.process.pid


def test_workers_are_forked_from_one_zygote_and_behave_as_fresh_processes(monkeypatch):
    monkeypatch.delenv("GPUTRAIN_FORK", raising=False)
    first = mw.launch_local_workers(who_am_i, 2, log=None, timeout=120).results
    zygote = _zygote_pid()
    second = mw.launch_local_workers(who_am_i, 2, log=None, timeout=60).results
    assert _zygote_pid() == zygote                        # kept for the next launch
    for result in first + second:
        assert result["ppid"] == zygote
        assert result["pgid"] == result["pid"]            # its own process group, killed as one
        assert result["sum"] == 2.0                       # the two formed one cluster
    assert len({r["pid"] for r in first + second}) == 4
    # NumPy's global generator is seeded per worker, as in a fresh process (a fork would copy one state)
    assert len({r["random"] for r in first + second}) == 4
    assert '"index": 0' in first[0]["tf_config"] and '"index": 1' in first[1]["tf_config"]


@pytest.mark.parametrize("switch", ["GPUTRAIN_FORK", "GPUTRAIN_FORK"])
def test_without_fork_each_worker_is_a_fresh_process_and_reports_the_same(monkeypatch, switch):
    monkeypatch.setenv(switch, "0")
    results = mw.launch_local_workers(who_am_i, 2, log=None, timeout=120).results
    for result in results:
        assert result["ppid"] == os.getpid()              # started by the launcher itself
        assert result["sum"] == 2.0


def test_another_environment_gets_another_zygote_and_the_old_one_stops(monkeypatch):
    monkeypatch.delenv("GPUTRAIN_FORK", raising=False)
    mw.launch_local_workers(who_am_i, 2, log=None, timeout=120)
    old = _zygote_pid()
    results = mw.launch_local_workers(who_am_i, 2, log=None, timeout=120,
                                      env={"GPUTRAIN_TEST_MARKER": "seen"}).results
    assert [r["marker"] for r in results] == ["seen", "seen"]
    new = _zygote_pid()
    assert new != old and results[0]["ppid"] == new
    assert mw.running([old]) == []


def test_an_idle_zygote_exits_and_the_next_launch_starts_another(monkeypatch):
    monkeypatch.delenv("GPUTRAIN_FORK", raising=False)
    monkeypatch.setenv("GPUTRAIN_ZYGOTE_IDLE_S", "1")
    mw.launch_local_workers(who_am_i, 2, log=None, timeout=120)
    idle = _zygote_pid()
    deadline = time.monotonic() + 20
    while mw.running([idle]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mw.running([idle]) == []                       # no TensorFlow import left in memory
    results = mw.launch_local_workers(who_am_i, 2, log=None, timeout=120).results
    assert results[0]["ppid"] == _zygote_pid() != idle and results[0]["sum"] == 2.0


def test_a_zygote_that_cannot_start_falls_back_to_fresh_processes(monkeypatch):
    monkeypatch.delenv("GPUTRAIN_FORK", raising=False)
    zg.close_shared()

    def broken(env):
        raise zg.ZygoteError("the zygote did not start: simulated")

    monkeypatch.setattr(zg, "Zygote", broken)
    results = mw.launch_local_workers(who_am_i, 2, log=None, timeout=120).results
    assert zg._shared is None
    assert [r["sum"] for r in results] == [2.0, 2.0]


def test_a_zygote_is_gone_with_its_launcher_and_so_are_its_workers(tmp_path):
    """A restarted notebook kernel leaves neither the zygote nor a worker running."""
    launcher = tmp_path / "launcher.py"
    launcher.write_text(
        "import gputrain_kit.multiworker as mw\n"
        "def pid_then_sleep():\n"
        "    import os, time\n"
        "    print('pid', os.getpid(), os.getppid(), flush=True)\n"
        "    time.sleep(3600)\n"
        "mw.launch_local_workers(pid_then_sleep, 2, timeout=600)\n")
    env = {k: v for k, v in os.environ.items() if k != "GPUTRAIN_FORK"}
    proc = subprocess.Popen([sys.executable, str(launcher)], stdout=subprocess.PIPE, text=True, env=env)
    pids: list[int] = []
    parents: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        while len(pids) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if "] pid " in line:
                pids.append(int(line.split()[-2]))
                parents.add(int(line.split()[-1]))
        assert len(pids) == 2, "the workers did not start"
        assert len(parents) == 1 and parents != {proc.pid}   # both forked by one zygote, not the launcher
        zygote = parents.pop()
        assert psutil.Process(zygote).ppid() == proc.pid
        proc.send_signal(signal.SIGKILL)              # the launcher dies without any clean-up
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while mw.running(pids + [zygote]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert mw.running(pids + [zygote]) == []
    finally:
        proc.kill()
        for pid in mw.running(pids):
            os.kill(pid, signal.SIGKILL)


def test_one_switch_turns_every_fork_off(monkeypatch):
    from gputrain_kit._children.runner import fork_enabled

    monkeypatch.delenv("GPUTRAIN_FORK", raising=False)
    assert fork_enabled() == sys.platform.startswith("linux")
    monkeypatch.setenv("GPUTRAIN_FORK", "0")
    assert not fork_enabled()
