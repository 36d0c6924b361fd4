"""``run_python``'s fork server (tests/forkexec.py): a forked child behaves as ``python -c`` does, in output, exit
status, exit handling, time limit and CPU kernel family; code the import would mislead runs fresh."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import run_python
from forkexec import can_fork

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux only")

PROGRAMS = {
    "prints": "print('out'); import sys; print('err', file=sys.stderr)",
    "exit status": "import sys; print('before'); sys.exit(3)",
    "exit message": "import sys; sys.exit('a message')",
    "exception": "def f():\n    raise ValueError('boom')\nf()",
    "atexit and threads": ("import atexit, threading, time\n"
                           "atexit.register(lambda: print('atexit ran'))\n"
                           "t = threading.Thread(target=lambda: (time.sleep(0.3), print('thread ran')))\n"
                           "t.start()\nprint('main done')"),
    "C stdio": "import ctypes; libc = ctypes.CDLL(None); libc.printf(b'from C\\n'); print('from Python')",
    "main module": ("import sys, pickle\nclass A: pass\n"
                    "print(sys.argv, __name__, type(pickle.loads(pickle.dumps(A()))).__name__)"),
}


def _fresh(code: str) -> subprocess.CompletedProcess:
    return run_python(code, check=False, fresh=True)


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_forked_child_answers_as_a_fresh_interpreter(name):
    code = PROGRAMS[name]
    assert can_fork(code, {})
    forked, fresh = run_python(code, check=False), _fresh(code)
    assert forked.returncode == fresh.returncode
    assert forked.stdout == fresh.stdout
    # A fresh interpreter's traceback ends the same way (the forked one has one frame more at its top).
    assert forked.stderr.strip().splitlines()[-1:] == fresh.stderr.strip().splitlines()[-1:]


def test_children_share_one_server_per_environment_and_start_their_own_runtime():
    code = ("import os, json, tensorflow as tf\n"
            "from tensorflow.python.util import _pywrap_util_port as port\n"
            "print(json.dumps([os.getppid(), port.IsMklEnabled(), len(tf.config.list_logical_devices('CPU'))]))")
    one = [run_python(code, env={"TF_ENABLE_ONEDNN_OPTS": f}).stdout.split("\n")[-2] for f in "1010"]
    parents = [line.split(",")[0] for line in one]
    assert parents[0] == parents[2] and parents[1] == parents[3] and parents[0] != parents[1]
    assert [line.split(",")[1].strip() for line in one] == ["true", "false"] * 2


def test_a_child_over_its_time_is_killed_and_the_server_goes_on():
    with pytest.raises(subprocess.TimeoutExpired):
        run_python("import time; print('started', flush=True); time.sleep(60)", timeout=3)
    assert run_python("print(6 * 7)").stdout.strip() == "42"


@pytest.mark.parametrize("code", ["import sys; print('tensorflow' in sys.modules)",
                                  "import os; os.environ['TF_ENABLE_ONEDNN_OPTS'] = '0'",
                                  "import os; os.environ.update(A='1')",
                                  "import multiprocessing",
                                  "import os; os.environ.setdefault('KERAS_BACKEND', 'jax')",
                                  "import gputrain_kit as kit; kit.setup(devices=8, backend='jax')",
                                  "import jax; print(jax.devices())"])
def test_code_the_import_would_mislead_runs_fresh(code):
    assert not can_fork(code, {})


def test_another_keras_backend_runs_fresh():
    assert not can_fork("print(1)", {"KERAS_BACKEND": "jax"})
    assert can_fork("print(1)", {"KERAS_BACKEND": "tensorflow"})
