"""The widgets where learners meet them: real JupyterLab, real (headless) Chromium.

nbval compares text and cannot render a widget. This test starts `jupyter lab` from this
environment on 127.0.0.1 (a free port, a random token) over a *copy* of the notebooks
(JupyterLab autosaves, and the committed outputs must stay the executor's), opens notebook
02's setup and explorer cells (``WIDGET_NOTEBOOKS``: nbval runs every cell), runs them, checks
that the explorer rendered as a real widget, moves its replica slider, presses Run and waits
for the new row. Then notebook 05's split explorer. `make screenshots` runs every notebook whole.

Chromium comes from Debian (`apt-get install chromium`; `.ci/run` installs it) and is
driven by Python Playwright with ``executable_path``, because Playwright's own browser
download is not available everywhere. Without Chromium the test is skipped with the reason,
except under CI=true, where that is a failure. Screenshots go to artifacts/browser/.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("GPUTRAIN_ARTIFACTS", ROOT / "artifacts")) / "browser"
CHROMIUM = os.environ.get("GPUTRAIN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# As root Chromium needs --no-sandbox; the rest keep it off this machine's closed network.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]
RUN_ALL_TIMEOUT_S = 240


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Python playwright is not installed (pip install -e '.[test]')"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"Chromium not found at {CHROMIUM} (Debian/Ubuntu: sudo apt-get install chromium)"
    return None


def require_chromium(what: str) -> None:
    """Skip, naming what was not checked, where Chromium or Playwright is missing; under CI=true, fail."""
    reason = _missing()
    if reason:
        message = f"{what} NOT RUN: {reason}."
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(message + " Under CI=true this is a failure: .ci/run installs Chromium.")
        pytest.skip(message)


@pytest.fixture(scope="module")
def browser_ready():
    require_chromium("BROWSER TEST (the widgets were not checked in a real browser)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    (ARTIFACTS / "chromium-version.txt").write_text(version + "\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the server between fork and exec
    """Linux: SIGTERM the server if pytest itself dies (a cancelled CI job), so it cannot outlive us."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except Exception:
        pass


def _stop_server(server: subprocess.Popen) -> None:
    """SIGTERM (the server shuts its kernels down), then SIGKILL whatever is left, kernels included:
    each kernel runs in a session of its own, so the server's process group does not reach them."""
    import psutil

    try:
        family = psutil.Process(server.pid).children(recursive=True)
    except psutil.Error:
        family = []
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
    for proc in family:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(family, timeout=10)


def _shutdown_kernels(base: str, token: str) -> None:
    """Stop every kernel of the server (between notebooks: two TensorFlow kernels would not fit)."""
    request = urllib.request.Request(f"{base}/api/kernels?token={token}")
    with urllib.request.urlopen(request, timeout=10) as reply:
        kernels = json.load(reply)
    for kernel in kernels:
        delete = urllib.request.Request(f"{base}/api/kernels/{kernel['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(delete, timeout=30).close()


#: notebook -> the explorer its widget test drives. nbval runs every cell of every notebook; here a copy keeps the
#: cells up to the setup cell (the platform cell and `kit.setup()`) and the explorer's own cell, which needs only `kit`,
#: so the widget is tested where learners meet it without training the whole notebook again (minutes on 2 cores).
WIDGET_NOTEBOOKS = {"02_data_parallel.ipynb": "ScalingExplorer(", "05_batchnorm_nan.ipynb": "SplitExplorer("}


def _widget_notebook(path: Path, explorer: str) -> Path:
    """Beside ``path``, a copy with its cells up to ``kit.setup(`` and the first code cell that calls ``explorer``
    (named ``<stem>.widget.ipynb``): refused if either is missing, so a renamed explorer fails here, not silently."""
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    setup = next((i for i, c in enumerate(code) if "kit.setup(" in "".join(c["source"])), None)
    widget = next((c for c in code if explorer in "".join(c["source"])), None)
    assert setup is not None and widget is not None, f"{path.name}: no setup cell or no {explorer} cell"
    nb["cells"] = code[:setup + 1] + [widget]
    target = path.with_name(path.stem + ".widget.ipynb")
    target.write_text(json.dumps(nb))
    return target


@pytest.fixture(scope="module")
def lab(browser_ready, tmp_path_factory):
    """A JupyterLab server over a copy of notebooks/; shut down on every path."""
    import secrets

    home = tmp_path_factory.mktemp("lab")
    notebooks = home / "notebooks"
    shutil.copytree(ROOT / "notebooks", notebooks, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for name, explorer in WIDGET_NOTEBOOKS.items():
        _widget_notebook(notebooks / name, explorer)
    settings = home / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # Render every cell (no windowing), so the DOM holds every output; no autosave of the copy.
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    docmanager = home / "settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": False}))
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    token = secrets.token_hex(16)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
               JUPYTER_PREFER_ENV_PATH="1")     # this environment's kernel, not a user's own kernelspec
    log_path = ARTIFACTS / "jupyterlab.log"
    server = None
    try:
        for _attempt in range(3):          # the free port can be taken before the server binds it
            port = _free_port()
            command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                       f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                       f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={notebooks}",
                       "--LabApp.expose_app_in_browser=True"]
            if os.getuid() == 0:
                command.append("--allow-root")
            with open(log_path, "w") as log:
                server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=home,
                                          preexec_fn=_die_with_parent)
            base = f"http://127.0.0.1:{port}"
            if _wait_until_up(server, base, token, log_path):
                break
            _stop_server(server)
        else:
            pytest.fail(f"jupyter lab did not start (3 tries):\n{log_path.read_text()[-3000:]}")
        yield base, token, log_path
    finally:
        if server is not None:
            _stop_server(server)


def _wait_until_up(server: subprocess.Popen, base: str, token: str, log_path: Path) -> bool:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            if "already in use" in log_path.read_text():
                return False
            pytest.fail(f"jupyter lab exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer within 90 s:\n{log_path.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


_STATE_JS = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.model || !panel.sessionContext) return null;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.model.cells;
  let pending = 0, errors = [];
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code') continue;
    if (!cell.executionCount) pending++;
    const outputs = cell.outputs;
    for (let j = 0; j < outputs.length; j++) {
      const out = outputs.get(j);
      if (out.type === 'error') errors.push(i + ': ' + JSON.stringify(out.toJSON()).slice(0, 800));
    }
  }
  return {kernel: kernel ? kernel.status : 'none', pending: pending, errors: errors};
}"""


def _state(page) -> dict | None:
    return page.evaluate(_STATE_JS)


def _wait_for(page, predicate, what: str, timeout_s: float, shot: str):
    deadline = time.monotonic() + timeout_s
    state = None
    while time.monotonic() < deadline:
        state = _state(page)
        if state and state["errors"]:
            page.screenshot(path=str(ARTIFACTS / f"{shot}-error.png"), full_page=True)
            pytest.fail(f"a cell failed in the browser: {state['errors']}")
        if state and predicate(state):
            return state
        time.sleep(0.5)
    page.screenshot(path=str(ARTIFACTS / f"{shot}-timeout.png"), full_page=True)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; last state {state}")


def _open_and_run_all(page, lab, name: str, shot: str) -> None:
    base, token, _ = lab
    page.goto(f"{base}/lab/tree/{name}?reset&token={token}")     # reset: no tabs restored from before
    _wait_for(page, lambda s: s["kernel"] == "idle", "the notebook and its kernel", 120, shot)
    # Clear the stored outputs (and execution counts) first, so "every cell has run" means this run.
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    _wait_for(page, lambda s: s["pending"] > 0, "the stored outputs to clear", 30, shot)
    # Not awaited: the wait below has its own time limit, whatever the cells do.
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); return true; }")
    _wait_for(page, lambda s: s["pending"] == 0 and s["kernel"] == "idle", "every cell to run",
              RUN_ALL_TIMEOUT_S, shot)


@contextlib.contextmanager
def _notebook_page(browser, lab, shot: str):
    """A browser page; on failure a full-page screenshot and the server log's tail; always closed,
    and the server's kernels shut down (two TensorFlow kernels would not fit a 2 GB machine)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        yield page
    except Exception as err:
        page.screenshot(path=str(ARTIFACTS / f"{shot}-failure.png"), full_page=True)
        if isinstance(err, AssertionError) or err.__class__.__name__ == "TimeoutError":
            log = lab[2].read_text()[-2000:] if lab[2].exists() else ""
            pytest.fail(f"notebook {shot} in the browser: {err}\nscreenshots: {ARTIFACTS}\n"
                        f"last lines of the JupyterLab log:\n{log}")
        raise
    finally:
        page.close()
        _shutdown_kernels(lab[0], lab[1])


def _panel(page):
    """The notebook on screen (another tab's stale outputs must not count)."""
    return page.locator(".jp-NotebookPanel:visible")


def _slider_in(page, label: str):
    """A slider labelled ``label`` (relative: for use inside other locators)."""
    return page.locator(".widget-slider", has=page.locator(".widget-label", has_text=label))


def _slider(page, label: str):
    return _panel(page).locator(".widget-slider", has=page.locator(".widget-label", has_text=label)).first


def _run_and_find_slider(page, lab, notebook: str, label: str, shot: str):
    """Run every cell, then return the slider ``label``, checked to be a real widget."""
    _open_and_run_all(page, lab, notebook, shot)
    slider = _slider(page, label)
    slider.wait_for(state="visible", timeout=30_000)
    # A real widget, not its text repr ("VBox(children=...)") in the output.
    assert _panel(page).locator(".jp-OutputArea-output", has_text="VBox(children=").count() == 0
    return slider


def test_notebook_02_explorer_renders_and_runs(browser, lab):
    with _notebook_page(browser, lab, "02") as page:
        slider = _run_and_find_slider(page, lab, "02_data_parallel.widget.ipynb", "replicas", "02")
        assert slider.locator(".noUi-handle, .slider-handle, [role=slider]").count() >= 1
        readout = slider.locator(".widget-readout")
        before = int(readout.inner_text())
        slider.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "02-after-run-all.png"))

        # Change the replica count, whatever it starts at (the slider goes from 1 to the device count).
        handle = slider.locator("[role=slider], .noUi-handle").first
        handle.focus()
        handle.press("ArrowLeft" if before > 1 else "ArrowRight")
        target = before - 1 if before > 1 else before + 1
        page.wait_for_function(
            "([el, v]) => el.innerText.trim() === String(v)", arg=[readout.element_handle(), target], timeout=10_000)

        rows_before = _panel(page).locator("table.scaling-results tr").count()
        _panel(page).locator("button.widget-button", has_text="Run").first.click()
        new_row = _panel(page).locator("table.scaling-results tr").nth(max(rows_before, 1))
        new_row.wait_for(state="visible", timeout=120_000)
        assert new_row.locator("td").first.inner_text().strip() == str(target)
        page.locator("table.scaling-results").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "02-after-run.png"))


def test_notebook_05_split_explorer_renders(browser, lab):
    with _notebook_page(browser, lab, "05") as page:
        slider = _run_and_find_slider(page, lab, "05_batchnorm_nan.widget.ipynb", "global batch", "05")
        explorer = _panel(page).locator(".widget-vbox", has=_slider_in(page, "global batch")).last
        # The kernel-drawn part: the HTML with the steps, not the slider's own readout.
        drawn = explorer.locator(".widget-html", has_text="step(s) per epoch").first
        drawn.wait_for(state="visible", timeout=30_000)
        before = drawn.inner_text()
        assert "replica 3" in before, before[:300]
        handle = slider.locator("[role=slider], .noUi-handle").first
        handle.focus()
        handle.press("ArrowRight")              # global batch 64 -> 65: the kernel redraws the split
        page.wait_for_function("([el, old]) => el.innerText !== old",
                               arg=[drawn.element_handle(), before], timeout=15_000)
        slider.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "05-split-explorer.png"))


def test_chinese_titles_render_with_a_cjk_font(browser, lab):
    """Notebook 04 quotes its source's title in Chinese: with no CJK font installed, Chromium draws boxes.
    `.ci/run` installs one (fonts-noto-cjk); the screenshot shows the title as a learner sees it."""
    fonts = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout.strip()
    if not fonts:
        message = "no CJK font installed (Debian: apt-get install fonts-noto-cjk): Chinese titles render as boxes"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(message + "; .ci/run installs one.")
        pytest.skip(message)
    base, token, _ = lab
    with _notebook_page(browser, lab, "04-chinese-title") as page:
        page.goto(f"{base}/lab/tree/04_saving_loading.ipynb?reset&token={token}")
        title = _panel(page).locator(".jp-RenderedMarkdown", has_text="Keras同时用多张显卡训练网络").first
        title.wait_for(state="visible", timeout=60_000)
        title.screenshot(path=str(ARTIFACTS / "04-chinese-title.png"))


ALL_NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.skipif(os.environ.get("GPUTRAIN_SCREENSHOTS") != "1",
                    reason="every notebook in the browser takes minutes: `make screenshots` runs it")
@pytest.mark.parametrize("name", ALL_NOTEBOOKS)
def test_every_notebook_runs_in_the_browser_with_a_screenshot(browser, lab, name):
    """Run All in real JupyterLab: no cell fails, widgets render as widgets; a full-page screenshot after."""
    shot = name.split("_")[0]
    with _notebook_page(browser, lab, shot) as page:
        _open_and_run_all(page, lab, name, shot)
        assert _panel(page).locator(".jp-OutputArea-output", has_text="VBox(children=").count() == 0
        page.screenshot(path=str(ARTIFACTS / f"{shot}-after-run-all.png"), full_page=True)
