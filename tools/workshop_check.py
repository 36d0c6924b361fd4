"""``make workshop-check ATTENDEES=N``: a JupyterHub workshop on this machine, N attendees at once.

What it does, in order (docs/instructors.md, "How many attendees one machine holds"):

1. Installs JupyterHub (with the workshop's authenticator and spawner packages) into ``.venv-hub/`` and
   configurable-http-proxy with npm into ``.venv-hub/node/`` (once; a stamp file says what is there).
2. Starts the hub on 127.0.0.1 with ``workshop/jupyterhub_config.py`` itself, overriding only what a check on
   one machine must: a spawner that runs the servers as this user (SimpleLocalProcessSpawner: no system
   accounts, no systemd, so no memory limit is enforced here), free ports, a state folder of its own, an
   admin API token (a service), and the kit's Python (this clone's ``.venv``) as every attendee's kernel.
3. Creates N attendees through the hub's REST API, logs each in (a token of their own, from the API) and
   starts every attendee's single-user server; the workshop's ``pre_spawn_hook`` gives each one its GPU and
   memory caps, and the server's first start copies the notebooks into the attendee's home.
4. In every attendee's server at once: opens a session on ``gputrain-course/00_start_here.ipynb`` (as JupyterLab
   does), reads the notebook from the attendee's server, and runs every code cell through the kernel's
   websocket, after a probe cell that reports the kernel's environment (what the hook set).
5. Reports per attendee: ran to the end or the first error, the time, the peak memory of the attendee's
   process tree (server, kernel, its children: PSS and RSS, sampled), the CUDA_VISIBLE_DEVICES and memory caps
   the kernel got; and in total: attendees that finished, wall time, total memory peak, the lowest
   MemAvailable, how busy the cores were. Writes ``artifacts/workshop/attendees-N.json``.

Everything it started (hub, proxy, servers, kernels and their children) is stopped at the end, also on an
error or Ctrl-C: every such process carries a marker in its environment, and a last sweep ends any left.
Exit status: 0 when every attendee ran notebook 00 to the end without an error, 1 when one did not, 2 when the
workshop could not be set up.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUB_VENV = ROOT / ".venv-hub"
HUB_PACKAGES = ["jupyterhub==6.1.1", "jupyterhub-nativeauthenticator==1.3.0", "jupyterhub-systemdspawner==1.0.2",
                "jupyterlab", "jupyterlab_widgets"]           # the last two: as the kit's constraints.txt pins them
PROXY_PACKAGE = "configurable-http-proxy@5.3.0"
PROXY = HUB_VENV / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
WORKSHOP_CONFIG = ROOT / "workshop" / "jupyterhub_config.py"
COURSE_FOLDER = "gputrain-course"
NOTEBOOK = "00_start_here.ipynb"
MARKER = "WORKSHOP_CHECK_ID"
PROBE = """import importlib.util, json, os, sys
print(json.dumps({"env": {k: os.environ.get(k) for k in (
    "JUPYTERHUB_USER", "CUDA_VISIBLE_DEVICES", "GPUTRAIN_MEMORY_LIMIT_MB", "GPUTRAIN_GPU_MEMORY_MB",
    "GPUTRAIN_WORKSHOP_SEAT", "MEM_LIMIT", "CPU_LIMIT", "TF_FORCE_GPU_ALLOW_GROWTH")},
    "python": sys.executable, "kit": importlib.util.find_spec("gputrain_kit").origin, "cwd": os.getcwd()}))"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class SetupFailed(RuntimeError):
    """The workshop could not be set up (exit status 2)."""


# ------------------------------------------------------------------------------------------------ installation
def ensure_hub_env(python: str) -> None:
    want = json.dumps({"pip": HUB_PACKAGES, "npm": PROXY_PACKAGE,
                       "constraints": hashlib.sha256((ROOT / "constraints.txt").read_bytes()).hexdigest()})
    stamp = HUB_VENV / ".installed-workshop"
    if stamp.exists() and stamp.read_text() == want and PROXY.exists():
        return
    started = time.monotonic()
    log(f"installing JupyterHub into {HUB_VENV.name}/ and configurable-http-proxy into {HUB_VENV.name}/node/")
    steps = []
    if not (HUB_VENV / "bin" / "python").exists():
        steps.append([python, "-m", "venv", str(HUB_VENV)])
    steps.append([str(HUB_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  "-c", str(ROOT / "constraints.txt"), *HUB_PACKAGES])
    steps.append(["npm", "install", "--prefix", str(HUB_VENV / "node"), "--no-audit", "--no-fund",
                  "--loglevel=error", PROXY_PACKAGE])
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode:
            said = [line for line in (done.stdout + done.stderr).splitlines() if "is ignored" not in line]
            raise SetupFailed(f"{' '.join(step[:4])}... failed ({done.returncode}):\n" + "\n".join(said[-15:]))
    stamp.write_text(want)
    log(f"installed in {time.monotonic() - started:.0f} s")


# ------------------------------------------------------------------------------------------------ processes
def marked_processes(check_id: str) -> dict[int, str | None]:
    """pid -> JUPYTERHUB_USER (None for the hub and proxy) of every process carrying this run's marker."""
    found: dict[int, str | None] = {}
    needle = f"{MARKER}={check_id}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        fields = environ.split(b"\0")
        if needle in fields:
            user = next((f[len(b"JUPYTERHUB_USER="):].decode() for f in fields if f.startswith(b"JUPYTERHUB_USER=")),
                        None)
            found[int(entry)] = user
    return found


def memory_of(pid: int) -> tuple[int, int] | None:
    """(PSS, RSS) in bytes, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("Pss:", "Rss:"):
            values[parts[0]] = int(parts[1]) * 1024
    return values.get("Pss:", 0), values.get("Rss:", 0)


def cpu_ticks(pid: int) -> int | None:
    """User + system clock ticks of one process (its own, not its children's)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, sum(fields[:8])


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


class Sampler(threading.Thread):
    """Samples the memory of every marked process tree, grouped by attendee, until stopped."""

    def __init__(self, check_id: str, interval: float = 0.5):
        super().__init__(daemon=True)
        self.check_id, self.interval = check_id, interval
        self.stop_event = threading.Event()
        self.peak: dict[str, dict[str, int]] = {}       # group -> {"pss": , "rss": }
        self.peak_total_pss = self.peak_total_rss = 0
        self.min_available = mem_available()
        self.samples = 0
        self.groups: dict[int, str] = {}
        self.ticks: dict[int, tuple[str, int]] = {}     # pid -> (group, its CPU ticks at the last sample)
        self.ticks_base: dict[int, int] = {}             # pid -> ticks when the run started (reset)

    def run(self) -> None:
        last_scan = 0.0
        while not self.stop_event.is_set():
            if time.monotonic() - last_scan > 1.0:        # new processes: read their environment every second
                self.groups = {pid: user or "hub+proxy" for pid, user in marked_processes(self.check_id).items()}
                last_scan = time.monotonic()
            sums: dict[str, list[int]] = {}
            for pid, group in list(self.groups.items()):
                mem = memory_of(pid)
                ticks = cpu_ticks(pid)
                if mem is None or ticks is None:
                    self.groups.pop(pid, None)
                    continue
                self.ticks[pid] = (group, ticks)
                total = sums.setdefault(group, [0, 0])
                total[0] += mem[0]
                total[1] += mem[1]
            for group, (pss, rss) in sums.items():
                peak = self.peak.setdefault(group, {"pss": 0, "rss": 0})
                peak["pss"], peak["rss"] = max(peak["pss"], pss), max(peak["rss"], rss)
            self.peak_total_pss = max(self.peak_total_pss, sum(v[0] for v in sums.values()))
            self.peak_total_rss = max(self.peak_total_rss, sum(v[1] for v in sums.values()))
            self.min_available = min(self.min_available, mem_available())
            self.samples += 1
            self.stop_event.wait(self.interval)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per group since reset(); a process's last half second before it exits is missed."""
        per: dict[str, float] = {}
        for pid, (group, ticks) in self.ticks.items():
            per[group] = per.get(group, 0.0) + (ticks - self.ticks_base.get(pid, 0)) / os.sysconf("SC_CLK_TCK")
        return per

    def reset(self) -> None:
        self.ticks_base = {pid: ticks for pid, (_, ticks) in self.ticks.items()}
        self.peak.clear()
        self.peak_total_pss = self.peak_total_rss = 0
        self.min_available = mem_available()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------ the hub
class Hub:
    def __init__(self, args: argparse.Namespace, check_id: str):
        self.args, self.check_id = args, check_id
        self.state = Path(tempfile.mkdtemp(prefix="workshop-check-"))
        self.port, self.hub_port, self.api_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(32)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.state / "hub.log"

    def write_config(self) -> Path:
        home = self.state / "home"
        config = self.state / "check_config.py"
        config.write_text(f"""# make workshop-check: the workshop's own configuration, then only what a check on one machine must change.
c = get_config()  # noqa
load_subconfig({str(WORKSHOP_CONFIG)!r})
c.JupyterHub.spawner_class = "simple"          # servers run as this user: no system accounts, no systemd
c.SimpleLocalProcessSpawner.home_dir_template = {str(home)!r} + "/{{username}}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{self.hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.api_port}"
c.JupyterHub.services = [{{"name": "workshop-check", "api_token": {self.token!r}}}]
c.JupyterHub.load_roles = [{{"name": "workshop-check", "services": ["workshop-check"],
                            "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"]}}]
c.JupyterHub.cleanup_servers = True
c.Spawner.environment = dict(c.Spawner.environment, {MARKER}={self.check_id!r})
c.Spawner.start_timeout = c.Spawner.http_timeout = {self.args.spawn_timeout}
c.JupyterHub.concurrent_spawn_limit = 0
""" + ('c.Spawner.args.append("--ServerApp.allow_root=True")  # this check runs as root\n'
       if os.geteuid() == 0 else ""))
        return config

    def start(self) -> None:
        config = self.write_config()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKSHOP_", "JUPYTER", "VIRTUAL_ENV"))}
        env.update({
            MARKER: self.check_id, "HOME": str(self.state),
            "PATH": f"{HUB_VENV / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
            "WORKSHOP_BIND_URL": self.url, "WORKSHOP_STATE_DIR": str(self.state / "hub"),
            "WORKSHOP_KIT_PYTHON": str(Path(self.args.kit_python).absolute()), "WORKSHOP_PROXY": str(PROXY),
            "WORKSHOP_GPUS": self.args.gpus, "WORKSHOP_GPU_MEMORY_MB": self.args.gpu_memory_mb,
        })
        if self.args.attendees_per_gpu:
            env["WORKSHOP_ATTENDEES_PER_GPU"] = str(self.args.attendees_per_gpu)
        self.proc = subprocess.Popen([str(HUB_VENV / "bin" / "jupyterhub"), "-f", str(config)], cwd=self.state,
                                     env=env, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SetupFailed(f"the hub exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                self.api("GET", "/hub/api/", timeout=2)
                return
            except (OSError, urllib.error.URLError):
                time.sleep(0.5)
        raise SetupFailed(f"the hub did not answer within 90 s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no hub log)"

    def api(self, method: str, path: str, body=None, token: str | None = None, timeout: float = 30):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"token {token or self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)    # cleanup_servers: the hub stops every server, then the proxy
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def end_marked(check_id: str) -> int:
    """SIGTERM, then SIGKILL, every process this run started that is still there; how many there were."""
    left = marked_processes(check_id)
    for sig, wait in ((signal.SIGTERM, 8.0), (signal.SIGKILL, 3.0)):
        for pid in left:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and marked_processes(check_id):
            time.sleep(0.2)
        if not marked_processes(check_id):
            break
    return len(left)


# ------------------------------------------------------------------------------------------------ an attendee
class Attendee(threading.Thread):
    def __init__(self, hub: Hub, name: str, token: str, timeout: float, start_event: threading.Event):
        super().__init__(daemon=True)
        self.hub, self.name, self.token, self.timeout, self.start_event = hub, name, token, timeout, start_event
        self.base = f"/user/{name}"
        self.result: dict = {"attendee": name, "ok": False, "error": None, "cells": 0, "cells_run": 0}

    def server_api(self, method: str, path: str, body=None, timeout: float = 60):
        return self.hub.api(method, self.base + path, body, token=self.token, timeout=timeout)

    def run(self) -> None:
        self.start_event.wait()
        started = time.monotonic()
        self.result["started"] = time.time()
        session = None
        try:
            try:
                model = self.server_api("GET", f"/api/contents/{COURSE_FOLDER}/{NOTEBOOK}?content=1&type=notebook")
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise
                raise CellFailed(f"no ~/{COURSE_FOLDER}/{NOTEBOOK} in the attendee's server: the first start did not "
                                 "copy the notebooks (can the kit's Python, --kit-python, import gputrain_kit?)") from None
            cells = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                     for c in model["content"]["cells"] if c["cell_type"] == "code"]
            self.result["cells"] = len(cells)
            session = self.server_api("POST", "/api/sessions", {
                "path": f"{COURSE_FOLDER}/{NOTEBOOK}", "name": NOTEBOOK, "type": "notebook",
                "kernel": {"name": "python3"}})
            with Kernel(self.hub, self.base, session["kernel"]["id"], self.token) as kernel:
                deadline = started + self.timeout
                probe = kernel.execute(PROBE, deadline)
                self.result["kernel_ready_s"] = round(time.monotonic() - started, 2)
                if probe["status"] != "ok":
                    raise CellFailed(f"probe cell: {probe['error']}")
                self.result["kernel"] = json.loads(probe["stdout"].strip().splitlines()[-1])
                cells_started = time.monotonic()
                for index, code in enumerate(cells):
                    reply = kernel.execute(code, deadline)
                    if reply["status"] != "ok":
                        raise CellFailed(f"code cell {index + 1}: {reply['error']}")
                    self.result["cells_run"] = index + 1
                self.result["notebook_s"] = round(time.monotonic() - cells_started, 2)
            self.result["ok"] = True
        except Exception as err:  # noqa: BLE001 (any failure is this attendee's result)
            self.result["error"] = f"{type(err).__name__}: {err}"[:500]
        finally:
            self.result["total_s"] = round(time.monotonic() - started, 2)
            if session is not None:
                try:
                    self.server_api("DELETE", f"/api/sessions/{session['id']}", timeout=20)
                except (OSError, urllib.error.URLError):
                    pass


class CellFailed(RuntimeError):
    pass


class Kernel:
    """A kernel's websocket (jupyter_server's JSON protocol), through the hub's proxy."""

    def __init__(self, hub: Hub, base: str, kernel_id: str, token: str):
        import websocket                                # websocket-client (jupyter_server depends on it)

        self.session = uuid.uuid4().hex
        url = f"ws://127.0.0.1:{hub.port}{base}/api/kernels/{kernel_id}/channels?session_id={self.session}"
        self.ws = websocket.create_connection(url, header=[f"Authorization: token {token}"], timeout=60)
        self.ws.settimeout(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001
            pass

    def receive(self) -> dict | None:
        import websocket

        try:
            raw = self.ws.recv()
        except websocket.WebSocketTimeoutException:
            return None
        if isinstance(raw, bytes):                       # a message with binary buffers: JSON part only
            count = struct.unpack("!I", raw[:4])[0]
            offsets = struct.unpack(f"!{count}I", raw[4:4 + 4 * count])
            end = offsets[1] if count > 1 else len(raw)
            raw = raw[offsets[0]:end].decode()
        return json.loads(raw)

    def execute(self, code: str, deadline: float) -> dict:
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "username": "workshop-check", "session": self.session,
                       "msg_type": "execute_request", "version": "5.3",
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat()},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out = {"status": None, "error": None, "stdout": ""}
        idle = False
        while out["status"] is None or not idle:
            if time.monotonic() > deadline:
                raise TimeoutError("the notebook did not finish within --timeout")
            msg = self.receive()
            if msg is None:
                continue
            kind, content = msg.get("msg_type"), msg.get("content", {})
            if kind == "status" and content.get("execution_state") in ("dead", "restarting"):
                raise CellFailed(f"the kernel died ({content['execution_state']}): out of memory?")
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if kind == "stream" and content.get("name") == "stdout":
                out["stdout"] += content.get("text", "")
            elif kind == "error":
                out["error"] = f"{content.get('ename')}: {content.get('evalue')}"[:300]
            elif kind == "execute_reply":
                out["status"] = content.get("status")
                if out["status"] != "ok" and not out["error"]:
                    out["error"] = f"{content.get('ename')}: {content.get('evalue')}"[:300]
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
        return out


# ------------------------------------------------------------------------------------------------ the run
def wait_ready(hub: Hub, names: list[str], started: float, timeout: float) -> dict[str, float]:
    """Seconds from the first start request until each attendee's server was ready."""
    ready: dict[str, float] = {}
    while len(ready) < len(names):
        if time.monotonic() - started > timeout:
            raise SetupFailed(f"servers not ready after {timeout:.0f} s: {sorted(set(names) - set(ready))}\n"
                              f"{hub.log_tail()}")
        if hub.proc is not None and hub.proc.poll() is not None:
            raise SetupFailed(f"the hub exited ({hub.proc.returncode}):\n{hub.log_tail()}")
        for name in names:
            if name in ready:
                continue
            server = (hub.api("GET", f"/hub/api/users/{name}").get("servers") or {}).get("")
            if server and server.get("ready"):
                ready[name] = round(time.monotonic() - started, 1)
            elif not server and time.monotonic() - started > 5:
                raise SetupFailed(f"{name}'s server is not starting (the spawn failed):\n{hub.log_tail()}")
        time.sleep(0.5)
    return ready


def gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def mem_limit_text(value: str | None) -> str:
    return f"{int(value) / 2**30:g}G" if value and value.isdigit() else str(value)


def report(results: list[dict], sampler: Sampler, wall: float, busy: tuple[int, int], own: float, args,
           spawn: dict) -> dict:
    total_mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    cpu_s = sampler.cpu_seconds()
    busy_s = busy[0] / os.sysconf("SC_CLK_TCK")
    ours = sum(cpu_s.values())
    other = max(0.0, busy_s - ours - own)
    print()
    print(f"notebook 00 in {len(results)} attendee server(s) at once: {sum(r['ok'] for r in results)} of "
          f"{len(results)} ran to the end without an error; wall time {wall:.1f} s")
    print(f"machine: {os.cpu_count()} cores ({cpu}), {gib(total_mem)} GiB; cores busy {busy[0] / max(1, busy[1]):.0%} "
          f"during the run: {ours:.0f} CPU s by the workshop, {own:.0f} by this check, {other:.0f} by other processes")
    header = (f"{'attendee':<11} {'result':<6} {'kernel':>6} {'cells':>6} {'total':>6} {'CPU':>6} {'PSS GiB':>7} "
              f"{'RSS GiB':>7}  CUDA_VISIBLE_DEVICES  GPUTRAIN_MEMORY_LIMIT_MB  MEM_LIMIT")
    print(header)
    print("-" * len(header))
    for r in results:
        env = (r.get("kernel") or {}).get("env") or {}
        peak = sampler.peak.get(r["attendee"], {"pss": 0, "rss": 0})
        r["peak_pss_bytes"], r["peak_rss_bytes"] = peak["pss"], peak["rss"]
        r["cpu_s"] = round(cpu_s.get(r["attendee"], 0.0), 1)
        cvd = env.get("CUDA_VISIBLE_DEVICES")
        print(f"{r['attendee']:<11} {'ok' if r['ok'] else 'FAILED':<6} {r.get('kernel_ready_s', 0):>5.1f}s "
              f"{r.get('notebook_s', 0):>5.1f}s {r.get('total_s', 0):>5.1f}s {r['cpu_s']:>5.1f}s {gib(peak['pss']):>7} "
              f"{gib(peak['rss']):>7}  {'<unset>' if cvd is None else repr(cvd):<20}  "
              f"{str(env.get('GPUTRAIN_MEMORY_LIMIT_MB')):<24}  {mem_limit_text(env.get('MEM_LIMIT'))}")
        if r["error"]:
            print(f"    {r['error']}")
    hub_peak = sampler.peak.get("hub+proxy", {"pss": 0})["pss"]
    attendee_pss = [sampler.peak.get(r["attendee"], {"pss": 0})["pss"] for r in results]
    times = [r["total_s"] for r in results if r["ok"]]
    print(f"per attendee: kernel start + notebook median {statistics.median(times) if times else 0:.1f} s, "
          f"slowest {max(times) if times else 0:.1f} s; peak PSS median {gib(statistics.median(attendee_pss))} GiB, "
          f"largest {gib(max(attendee_pss))} GiB; CPU median "
          f"{statistics.median(r['cpu_s'] for r in results):.1f} s")
    print(f"in total: peak PSS {gib(sampler.peak_total_pss)} GiB (hub and proxy {gib(hub_peak)} GiB), peak RSS "
          f"{gib(sampler.peak_total_rss)} GiB; lowest MemAvailable {gib(sampler.min_available)} of "
          f"{gib(total_mem)} GiB; {sampler.samples} memory samples")
    summary = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "attendees": len(results),
        "ok": sum(r["ok"] for r in results), "wall_s": round(wall, 2), "cores": os.cpu_count(), "cpu": cpu,
        "cores_busy": round(busy[0] / max(1, busy[1]), 3), "workshop_cpu_s": round(ours, 1),
        "check_cpu_s": round(own, 1), "other_cpu_s": round(other, 1), "memory_total_bytes": total_mem,
        "peak_total_pss_bytes": sampler.peak_total_pss, "peak_total_rss_bytes": sampler.peak_total_rss,
        "hub_proxy_peak_pss_bytes": hub_peak, "min_mem_available_bytes": sampler.min_available,
        "servers_ready_s": spawn, "gpus_setting": args.gpus, "results": results,
    }
    out = ROOT / "artifacts" / "workshop"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"attendees-{len(results)}.json"
    path.write_text(json.dumps(summary, indent=1))
    print(f"written: {path.relative_to(ROOT)}")
    return summary


def run(args: argparse.Namespace, check_id: str) -> int:
    ensure_hub_env(args.python)
    hub = Hub(args, check_id)
    sampler = Sampler(check_id)
    names = [f"attendee{i + 1:02d}" for i in range(args.attendees)]
    status = 2
    try:
        log(f"starting the hub on {hub.url} (workshop/jupyterhub_config.py; state in {hub.state})")
        hub.start()
        hub.api("POST", "/hub/api/users", {"usernames": names})
        tokens = {name: hub.api("POST", f"/hub/api/users/{name}/tokens",
                                {"note": "workshop-check login", "expires_in": 3600})["token"] for name in names}
        log(f"{len(names)} attendees created and logged in (a token each); starting their servers")
        started = time.monotonic()
        for name in names:                              # as each attendee's browser would: their own token
            hub.api("POST", f"/hub/api/users/{name}/server", token=tokens[name])
        spawn = wait_ready(hub, names, started, args.spawn_timeout)
        log(f"all {len(names)} servers ready in {time.monotonic() - started:.1f} s")
        sampler.start()
        go = threading.Event()
        attendees = [Attendee(hub, name, tokens[name], args.timeout, go) for name in names]
        for attendee in attendees:
            attendee.start()
        time.sleep(1.0)
        sampler.reset()
        busy0, self0 = cpu_busy(), os.times()
        log(f"running {NOTEBOOK} in {len(names)} servers at once")
        wall_start = time.monotonic()
        go.set()
        for attendee in attendees:
            while attendee.is_alive():
                attendee.join(timeout=0.5)
        wall = time.monotonic() - wall_start
        busy1, self1 = cpu_busy(), os.times()
        sampler.stop_event.set()
        sampler.join(timeout=5)
        busy = (busy1[0] - busy0[0], busy1[1] - busy0[1])
        own = (self1.user + self1.system) - (self0.user + self0.system)     # this check: clients and sampler
        summary = report([a.result for a in attendees], sampler, wall, busy, own, args, spawn)
        status = 0 if summary["ok"] == len(names) else 1
        return status
    except SetupFailed:
        raise
    except (OSError, urllib.error.URLError) as err:
        raise SetupFailed(f"{type(err).__name__}: {err}\n{hub.log_tail()}") from err
    finally:
        sampler.stop_event.set()
        log("stopping the servers, the hub and the proxy")
        if hub.proc is not None and hub.proc.poll() is None:
            for name in names:
                try:
                    hub.api("DELETE", f"/hub/api/users/{name}/server", timeout=10)
                except (OSError, urllib.error.URLError):
                    pass
        hub.stop()
        left = end_marked(check_id)
        if left:
            log(f"ended {left} process(es) left behind")
        if status or args.keep_log:
            keep = ROOT / "artifacts" / "workshop" / "hub.log"
            keep.parent.mkdir(parents=True, exist_ok=True)
            if hub.log_path.exists():
                shutil.copyfile(hub.log_path, keep)
                log(f"hub log: {keep.relative_to(ROOT)}")
        shutil.rmtree(hub.state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attendees", type=int, default=4, help="attendees at once (default 4)")
    parser.add_argument("--gpus", default="auto", help="the workshop's GPUS setting: auto (nvidia-smi -L), a count, "
                        "or CUDA_VISIBLE_DEVICES values; on a CPU-only machine a count only exercises the hook")
    parser.add_argument("--gpu-memory-mb", default="auto", help="one GPU's memory in MB (auto: nvidia-smi)")
    parser.add_argument("--attendees-per-gpu", type=int, default=0, help="the workshop's ATTENDEES_PER_GPU "
                        "(default: the config's)")
    parser.add_argument("--kit-python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="the kit's Python: every attendee's kernel (default: this clone's .venv)")
    parser.add_argument("--python", default=shutil.which("python3") or sys.executable,
                        help="the Python that makes .venv-hub/")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for one attendee's notebook")
    parser.add_argument("--spawn-timeout", type=int, default=300, help="seconds for the servers to start")
    parser.add_argument("--keep-log", action="store_true", help="keep the hub's log in artifacts/workshop/")
    args = parser.parse_args(argv)
    if args.attendees < 1:
        parser.error("--attendees must be at least 1")
    check_id = uuid.uuid4().hex
    for key in ("no_proxy", "NO_PROXY"):                # the hub is on loopback: never through a proxy
        os.environ[key] = ",".join(filter(None, [os.environ.get(key), "127.0.0.1", "localhost"]))

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):   # SIGINT too: a background job inherits it ignored
        signal.signal(sig, stop)
    try:
        return run(args, check_id)
    except SetupFailed as err:
        log(f"could not set up the workshop: {err}")
        return 2
    except KeyboardInterrupt:
        log("interrupted: everything it started is stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
