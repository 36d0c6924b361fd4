"""``make workshop-check ATTENDEES=N``: a JupyterHub workshop on this machine, N attendees walking in at once.

What it does, in order (docs/instructors.md, "How many attendees one machine holds"):

1. Installs JupyterHub (with the workshop's authenticator and spawner packages) into ``.venv-hub/`` and
   configurable-http-proxy with npm into ``.venv-hub/node/`` (once; a stamp file says what is there).
2. Starts the hub on 127.0.0.1 with ``workshop/jupyterhub_config.py`` itself, NativeAuthenticator included,
   overriding only what a check on one machine must: the spawner (SimpleLocalProcessSpawner: the servers run as
   this user, because a check makes no system accounts and needs no systemd; so no memory limit is enforced
   here), free ports, a state folder of its own, the kit's Python (this clone's ``.venv``) as every kernel, and
   a service token with which the check only watches (is a server ready?) and cleans up.
3. The instructor's path, over HTTP with a cookie jar like a browser (tools/workshop_browser.py): signs up as
   ``instructor`` at /hub/signup (the config's admin: approved at sign-up), logs in at /hub/login, starts a
   server at /hub/spawn, opens JupyterLab (the hub's OAuth into the server) and runs notebook 00 alone: the
   "alone" time the bound compares with; then stops that server from the home page's API call.
4. Each attendee's path, all N at once: signs up at /hub/signup (the form's ``_xsrf`` token), is refused at
   /hub/login while waiting; the instructor approves each at /hub/authorize (NativeAuthenticator 1.3.0: GET
   /hub/authorize/NAME toggles, so only the rows that say "No"); each logs in at /hub/login (the hub's login
   cookie), starts a server at /hub/spawn (the workshop's ``pre_spawn_hook`` gives the GPU and memory caps; the
   first start copies the notebooks), opens JupyterLab, then, all at once, runs notebook 00 as JupyterLab does:
   a session through the server's API (cookie and X-XSRFToken), every code cell through the kernel's websocket.
5. Reports per attendee every step, the time, the peak memory of the attendee's process tree (PSS and RSS,
   sampled), the CUDA_VISIBLE_DEVICES and caps the kernel got; in total the wall time, memory, lowest
   MemAvailable, how busy the cores were; then JUDGES the run against docs/instructors.md's bound
   (tools/workshop_logic.py: every step walked, each attendee within 60 s and 3x alone, 25% of the RAM left).
   Writes ``artifacts/workshop/attendees-N.json``.

Everything it started (hub, proxy, servers, kernels and their children) is stopped at the end, also on an
error or Ctrl-C: every such process carries a marker in its environment, and a last sweep ends any left.
Exit status: 0 when the bound holds, 1 when a step or a bound failed (the report says which), 2 when the
workshop could not be set up.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workshop_browser import Browser, NotebookRun  # noqa: E402 (tools/ is not a package)
from workshop_logic import holds, judge, verdict_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HUB_VENV = ROOT / ".venv-hub"
HUB_PACKAGES = ["jupyterhub==6.1.1", "jupyterhub-nativeauthenticator==1.3.0", "jupyterhub-systemdspawner==1.0.2",
                "jupyterlab", "jupyterlab_widgets"]           # the last two: as the kit's constraints.txt pins them
PROXY_PACKAGE = "configurable-http-proxy@5.3.0"
PROXY = HUB_VENV / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
WORKSHOP_CONFIG = ROOT / "workshop" / "jupyterhub_config.py"
MARKER = "WORKSHOP_CHECK_ID"
INSTRUCTOR = "instructor"                                       # the config's ADMINS default


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
                            "scopes": ["admin:users", "admin:servers"]}}]
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



# ------------------------------------------------------------------------------------------------ the run
def in_parallel(fn, items: list) -> list:
    """fn(item) for every item at once (one thread each, as a room of browsers), results in order."""
    if not items:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))


def step(result: dict, name: str, ok: bool, detail: str, since: float) -> bool:
    result["steps"][name] = {"ok": bool(ok), "detail": detail, "s": round(time.monotonic() - since, 2)}
    return bool(ok)


def wait_ready(hub: Hub, names: list[str], timeout: float) -> dict[str, str]:
    """Watches (service token) until each named server is ready: name -> "" when ready, or why not."""
    started, state = time.monotonic(), {name: None for name in names}
    while any(v is None for v in state.values()):
        if hub.proc is not None and hub.proc.poll() is not None:
            raise SetupFailed(f"the hub exited ({hub.proc.returncode}):\n{hub.log_tail()}")
        for name in [n for n, v in state.items() if v is None]:
            server = (hub.api("GET", f"/hub/api/users/{name}").get("servers") or {}).get("")
            if server and server.get("ready"):
                state[name] = ""
            elif not server and time.monotonic() - started > 5:
                state[name] = "the spawn failed (no server, not pending): see the hub's log"
            elif time.monotonic() - started > timeout:
                state[name] = f"not ready after {timeout:.0f} s (--spawn-timeout)"
        time.sleep(0.5)
    return {n: v or "" for n, v in state.items()}


def wait_stopped(hub: Hub, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not (hub.api("GET", f"/hub/api/users/{name}").get("servers") or {}).get(""):
            return
        time.sleep(0.5)
    raise SetupFailed(f"{name}'s server did not stop within {timeout:.0f} s:\n{hub.log_tail()}")


def person(hub: Hub, name: str) -> dict:
    return {"attendee": name, "password": secrets.token_urlsafe(15), "browser": Browser(hub.url, name),
            "steps": {}, "ok": False}


def into_lab(hub: Hub, people: list[dict], timeout: float) -> list[dict]:
    """Logged-in people: /hub/spawn, wait until ready, open JupyterLab. Those that got there."""
    started = time.monotonic()
    spawned = [p for p, (ok, said) in zip(people, in_parallel(lambda p: p["browser"].spawn(), people))
               if step(p, "server", ok, said, started)]
    state = wait_ready(hub, [p["attendee"] for p in spawned], timeout)
    ready = []
    for p in spawned:
        p["steps"]["server"].update(ok=not state[p["attendee"]], detail=state[p["attendee"]] or "ready",
                                    s=round(time.monotonic() - started, 1))
        if not state[p["attendee"]]:
            ready.append(p)
    t = time.monotonic()
    return [p for p, (ok, said) in zip(ready, in_parallel(lambda p: p["browser"].open_lab(), ready))
            if step(p, "lab", ok, said, t)]


def run_notebooks(people: list[dict], timeout: float, sampler: Sampler | None = None) -> float:
    """Notebook 00 in every person's server at once; the wall time. Marks each person's "notebook" step."""
    go = threading.Event()
    runs = [NotebookRun(p["browser"], timeout, go, p) for p in people]
    for r in runs:
        r.start()
    time.sleep(1.0)
    if sampler is not None:
        sampler.reset()
    started = time.monotonic()
    go.set()
    for r in runs:
        while r.is_alive():
            r.join(timeout=0.5)
    for p in people:
        p["ok"] = p.get("total_s") is not None
        p["steps"]["notebook"] = {"ok": p["ok"], "s": p.get("elapsed_s"),
                                  "detail": f"{p.get('cells_run', 0)} of {p.get('cells', 0)} code cells"
                                            + (f": {p['error']}" if p.get("error") else "")}
    return time.monotonic() - started


def instructor_alone(hub: Hub, args, sampler: Sampler) -> tuple[dict, float | None]:
    """The instructor signs up, logs in, and runs notebook 00 alone; then stops that server."""
    me = person(hub, INSTRUCTOR)
    b, t = me["browser"], time.monotonic()
    outcome, said = b.signup(me["password"])
    if step(me, "signup", outcome == "approved", f"{outcome}: {said}", t):
        t = time.monotonic()
        if step(me, "login", *b.login(me["password"]), t) and into_lab(hub, [me], args.spawn_timeout):
            log("the instructor runs notebook 00 alone (the time the bound compares with)")
            busy0 = cpu_busy()
            wall = run_notebooks([me], args.timeout, sampler)
            busy = cpu_busy()[0] - busy0[0]
            me["cpu_s"] = round(sampler.cpu_seconds().get(INSTRUCTOR, 0.0), 1)
            me["peak_pss_bytes"] = sampler.peak.get(INSTRUCTOR, {"pss": 0})["pss"]
            others = busy / os.sysconf("SC_CLK_TCK") - me["cpu_s"]     # this check's own clients included
            me["others_cores"] = round(max(0.0, others) / (wall * (os.cpu_count() or 1)), 2)
            b.stop_server()
            wait_stopped(hub, INSTRUCTOR)
    alone = me.get("total_s")
    steps = ", ".join(f"{k} {'ok' if v['ok'] else 'FAILED'}" for k, v in me["steps"].items())
    log(f"instructor: {steps}" + (f"; notebook 00 alone {alone:.1f} s ({me['cpu_s']:.1f} CPU s; other processes "
                                  f"used {me['others_cores']:.0%} of the cores meanwhile)" if alone else ""))
    return me, alone


def walk_in(hub: Hub, me: dict, people: list[dict], timeout: float) -> list[dict]:
    """Sign-up, the refusal while waiting, the instructor's approval, login; then server and JupyterLab."""
    def signup(p):
        t = time.monotonic()
        outcome, said = p["browser"].signup(p["password"])
        return step(p, "signup", outcome == "pending", f"{outcome}: {said}", t)

    def refused(p):
        t = time.monotonic()
        ok, said = p["browser"].login(p["password"])
        return step(p, "refused_before_approval", not ok and "not been authorized" in said,
                    "logged in before any approval" if ok else said, t)

    def login(p):
        t = time.monotonic()
        return step(p, "login", *p["browser"].login(p["password"]), t)

    started = time.monotonic()
    signed = [p for p, ok in zip(people, in_parallel(signup, people)) if ok]
    waiting = [p for p, ok in zip(signed, in_parallel(refused, signed)) if ok]
    log(f"{len(signed)} of {len(people)} signed up, {len(waiting)} refused at /hub/login while waiting "
        f"({time.monotonic() - started:.1f} s); the instructor approves them at /hub/authorize")
    t = time.monotonic()
    approvals = me["browser"].approve([p["attendee"] for p in waiting])
    approved = [p for p in waiting if step(p, "approved", *approvals[p["attendee"]], t)]
    logged = [p for p, ok in zip(approved, in_parallel(login, approved)) if ok]
    log(f"{len(approved)} approved, {len(logged)} logged in; starting their servers at /hub/spawn")
    t = time.monotonic()
    ready = into_lab(hub, logged, timeout)
    log(f"{len(ready)} of {len(people)} in JupyterLab ({time.monotonic() - t:.1f} s after /hub/spawn)")
    return ready


def gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def mem_limit_text(value: str | None) -> str:
    return f"{int(value) / 2**30:g}G" if value and value.isdigit() else str(value)


def report(people: list[dict], me: dict, alone: float | None, sampler: Sampler, wall: float,
           busy: tuple[int, int], own: float, args) -> dict:
    total_mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    cpu_s = sampler.cpu_seconds()
    busy_s = busy[0] / os.sysconf("SC_CLK_TCK")
    ours = sum(cpu_s.values())
    other = max(0.0, busy_s - ours - own)
    results = [{k: v for k, v in p.items() if k not in ("browser", "password")} for p in people]
    print()
    print(f"notebook 00 in {len(results)} attendee server(s) at once: {sum(r['ok'] for r in results)} of "
          f"{len(results)} ran to the end without an error; wall time {wall:.1f} s; the instructor alone "
          + (f"{alone:.1f} s" if alone else "did not run it"))
    print(f"machine: {os.cpu_count()} cores ({cpu}), {gib(total_mem)} GiB; cores busy {busy[0] / max(1, busy[1]):.0%} "
          f"during the run: {ours:.0f} CPU s by the workshop, {own:.0f} by this check, {other:.0f} by other processes")
    header = (f"{'attendee':<11} {'sign-up':>7} {'login':>6} {'server':>6} {'lab':>5} {'kernel':>6} {'cells':>6} "
              f"{'total':>6} {'CPU':>6} {'PSS GiB':>7} {'RSS GiB':>7}  CUDA_VISIBLE_DEVICES  MEMORY_LIMIT_MB  MEM_LIMIT")
    print(header)
    print("-" * len(header))

    def t(r, s):
        v = (r["steps"].get(s) or {})
        return f"{v['s']:.1f}s" if v.get("ok") and v.get("s") is not None else ("-" if not v else "FAIL")

    for r in results:
        env = (r.get("kernel") or {}).get("env") or {}
        peak = sampler.peak.get(r["attendee"], {"pss": 0, "rss": 0})
        r["peak_pss_bytes"], r["peak_rss_bytes"] = peak["pss"], peak["rss"]
        r["cpu_s"] = round(cpu_s.get(r["attendee"], 0.0), 1)
        cvd = env.get("CUDA_VISIBLE_DEVICES")
        print(f"{r['attendee']:<11} {t(r, 'signup'):>7} {t(r, 'login'):>6} {t(r, 'server'):>6} {t(r, 'lab'):>5} "
              f"{r.get('kernel_ready_s', 0):>5.1f}s {r.get('notebook_s', 0):>5.1f}s {r.get('total_s') or 0:>5.1f}s "
              f"{r['cpu_s']:>5.1f}s {gib(peak['pss']):>7} {gib(peak['rss']):>7}  "
              f"{'<unset>' if cvd is None else repr(cvd):<20}  {str(env.get('GPUTRAIN_MEMORY_LIMIT_MB')):<15}  "
              f"{mem_limit_text(env.get('MEM_LIMIT'))}")
    hub_peak = sampler.peak.get("hub+proxy", {"pss": 0})["pss"]
    attendee_pss = [r["peak_pss_bytes"] for r in results] or [0]
    times = [r["total_s"] for r in results if r.get("total_s") is not None]
    print(f"per attendee: kernel start + notebook median {statistics.median(times) if times else 0:.1f} s, "
          f"slowest {max(times) if times else 0:.1f} s; peak PSS median {gib(statistics.median(attendee_pss))} GiB, "
          f"largest {gib(max(attendee_pss))} GiB")
    cpu_each = statistics.median(r["cpu_s"] for r in results) if results else 0.0
    least = len(results) * cpu_each / (os.cpu_count() or 1)
    print(f"the cores' floor: {len(results)} x {cpu_each:.1f} CPU s per attendee / {os.cpu_count()} cores = {least:.1f} s "
          "of wall time at the least, however the scheduler shares them")
    print(f"in total: peak PSS {gib(sampler.peak_total_pss)} GiB (hub and proxy {gib(hub_peak)} GiB), peak RSS "
          f"{gib(sampler.peak_total_rss)} GiB; lowest MemAvailable {gib(sampler.min_available)} of "
          f"{gib(total_mem)} GiB; {sampler.samples} memory samples")
    summary = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "attendees": len(results),
        "ok": sum(r["ok"] for r in results), "wall_s": round(wall, 2), "alone_s": alone,
        "alone_cpu_s": me.get("cpu_s"), "alone_others_cores": me.get("others_cores"), "cores": os.cpu_count(),
        "cpu_s_per_attendee": round(cpu_each, 1), "cores_floor_s": round(least, 1),
        "cpu": cpu, "cores_busy": round(busy[0] / max(1, busy[1]), 3), "workshop_cpu_s": round(ours, 1),
        "check_cpu_s": round(own, 1), "other_cpu_s": round(other, 1), "memory_total_bytes": total_mem,
        "peak_total_pss_bytes": sampler.peak_total_pss if sampler.samples else None,
        "peak_total_rss_bytes": sampler.peak_total_rss, "hub_proxy_peak_pss_bytes": hub_peak,
        "min_mem_available_bytes": sampler.min_available, "gpus_setting": args.gpus,
        "instructor": {k: v for k, v in me.items() if k not in ("browser", "password")}, "results": results,
    }
    summary["verdicts"] = judge(summary)
    if not me["steps"].get("notebook", {}).get("ok"):
        first = next((f"{k}: {v['detail']}" for k, v in me["steps"].items() if not v["ok"]), "not reached")
        summary["verdicts"].insert(0, {"check": "instructor", "ok": False, "detail": f"did not walk the instructor's "
                                       f"path (sign-up, login, server, notebook 00 alone): {first}"})
    summary["holds"] = holds(summary["verdicts"])
    print(verdict_text(summary["verdicts"]))
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
        sampler.start()
        me, alone = instructor_alone(hub, args, sampler)
        people = [person(hub, name) for name in names]
        if me["steps"].get("login", {}).get("ok"):
            ready = walk_in(hub, me, people, args.spawn_timeout)
        else:
            ready = []
            for p in people:
                p["steps"]["signup"] = {"ok": False, "detail": "not tried: the instructor could not log in"}
        busy0, self0 = cpu_busy(), os.times()
        log(f"running notebook 00 in {len(ready)} servers at once")
        wall = run_notebooks(ready, args.timeout, sampler)
        busy1, self1 = cpu_busy(), os.times()
        sampler.stop_event.set()
        sampler.join(timeout=5)
        busy = (busy1[0] - busy0[0], busy1[1] - busy0[1])
        own = (self1.user + self1.system) - (self0.user + self0.system)     # this check: clients and sampler
        summary = report(people, me, alone, sampler, wall, busy, own, args)
        status = 0 if summary["holds"] else 1
        return status
    except SetupFailed:
        raise
    except (OSError, urllib.error.URLError) as err:
        raise SetupFailed(f"{type(err).__name__}: {err}\n{hub.log_tail()}") from err
    finally:
        sampler.stop_event.set()
        log("stopping the servers, the hub and the proxy")
        if hub.proc is not None and hub.proc.poll() is None:
            for name in [INSTRUCTOR, *names]:
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
