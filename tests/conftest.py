"""Shared helpers. Device setup is per process, so anything that calls setup() runs in a child."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 300,
               check: bool = True, fresh: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` as ``python -c`` would in this environment; fail the test with its output on error.

    The child is forked from a process that has imported TensorFlow already (``forkexec``: one import per
    environment, not one per child), except where the import would change what the code sees (it reads
    ``sys.modules``, changes the environment, ...), ``fresh=True``, or ``GPUTRAIN_TEST_FORK=0``: then it is a
    new interpreter."""
    from forkexec import can_fork, run_forked

    full_env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    full_env["PYTHONHASHSEED"] = "0"
    # A child can import the tests' own helpers (support, bntrap) as the tests do.
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))
    full_env.update(env or {})
    code = textwrap.dedent(code)
    forked = not fresh and can_fork(code, full_env)
    start = time.monotonic()
    if forked:
        proc = run_forked(code, full_env, timeout)
    else:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=full_env, cwd=ROOT)
    if os.environ.get("GPUTRAIN_TEST_CALLS"):          # a log of every child: which test, forked or not, seconds
        with open(os.environ["GPUTRAIN_TEST_CALLS"], "a") as log:
            log.write(json.dumps([os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0], forked,
                                  round(time.monotonic() - start, 2)]) + "\n")
    if check and proc.returncode != 0:
        pytest.fail(f"child failed ({proc.returncode}):\nSTDOUT:\n{proc.stdout}\nSTDERR:\n{proc.stderr[-4000:]}")
    return proc


def last_json(proc: subprocess.CompletedProcess):
    """The JSON object printed on the child's last stdout line."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def nvidia_smi_gpus() -> int:
    """How many GPUs nvidia-smi lists (0 without nvidia-smi or a driver)."""
    import shutil
    if not shutil.which("nvidia-smi"):
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU (nvidia-smi, CUDA_VISIBLE_DEVICES unset); "
                            "skipped elsewhere, run by `make gpu-check` on a GPU machine")
    config.addinivalue_line("markers", "timing: asserts a wall-clock bound or a share of busy time, which other "
                            "tests running beside it would distort; `make unit` runs these alone, after the rest "
                            "has run on parallel processes")
    config.addinivalue_line("markers", "wheel: builds and installs the wheel in a clean venv (minutes); "
                            "`make test-wheel` runs it, `make unit` leaves it out")
    config.addinivalue_line("markers", "platform: a clean venv with another TensorFlow preinstalled, as on Colab or "
                            "Kaggle (minutes); `make test-bootstrap` runs it, `make unit` leaves it out")


def pytest_collection_modifyitems(config, items):
    """The slowest test files first (tests/file_seconds.json, measured), so that `make unit`'s workers do not end on
    one long file while the other waits (xdist's loadfile takes files in this order with --no-loadscope-reorder);
    then skip @pytest.mark.gpu tests, with the reason, where no GPU can be used."""
    seconds = json.loads((ROOT / "tests" / "file_seconds.json").read_text())["seconds"]
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0))      # stable: a file's order kept
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked:
        return
    gpus = nvidia_smi_gpus()
    if gpus and os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        return
    reason = ("GPU only: no GPU here (nvidia-smi lists none)" if not gpus else
              f"GPU only: CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} is set; unset it to run")
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter):
    """Say where the browser test left its screenshots and server log (CI keeps this log)."""
    folder = Path(os.environ.get("GPUTRAIN_ARTIFACTS", ROOT / "artifacts")) / "browser"
    if folder.is_dir() and any(folder.iterdir()):
        terminalreporter.section("browser test artifacts")
        version = folder / "chromium-version.txt"
        if version.exists():
            terminalreporter.write_line(version.read_text().strip())
        for path in sorted(folder.iterdir()):
            terminalreporter.write_line(str(path))
