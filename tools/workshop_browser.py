"""What an attendee's (or the instructor's) browser does on the workshop's hub, for ``make workshop-check``.

A cookie jar and the headers a browser sends (Sec-Fetch-Mode: navigate for pages, cors for the API calls JupyterLab
makes, websocket for the kernel), the hub's forms with their ``_xsrf`` token, NativeAuthenticator's sign-up,
approval and login pages, the hub's /hub/spawn, the OAuth round trip into the attendee's server, and notebook 00
run cell by cell through the kernel's websocket with the server's cookie, as JupyterLab does.
"""
from __future__ import annotations

import datetime
import http.cookiejar
import json
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

from workshop_logic import authorization_rows, form_with, login_error, signup_outcome

COURSE_FOLDER = "gputrain-course"
NOTEBOOK = "00_start_here.ipynb"
HUB_LOGIN_COOKIE = "jupyterhub-hub-login"
PROBE = """import importlib.util, json, os, sys
print(json.dumps({"env": {k: os.environ.get(k) for k in (
    "JUPYTERHUB_USER", "CUDA_VISIBLE_DEVICES", "GPUTRAIN_MEMORY_LIMIT_MB", "GPUTRAIN_GPU_MEMORY_MB",
    "GPUTRAIN_WORKSHOP_SEAT", "MEM_LIMIT", "CPU_LIMIT", "TF_FORCE_GPU_ALLOW_GROWTH")},
    "python": sys.executable, "kit": importlib.util.find_spec("gputrain_kit").origin, "cwd": os.getcwd()}))"""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102 (urllib's hook)
        return None                                      # urllib then raises HTTPError with the 3xx


class Browser:
    """One person's browser on the hub at ``base`` (http://127.0.0.1:PORT): a cookie jar shared by its requests."""

    def __init__(self, base: str, name: str):
        self.base, self.name = base, name
        self.jar = http.cookiejar.CookieJar()
        no_proxy = urllib.request.ProxyHandler({})
        cookies = urllib.request.HTTPCookieProcessor(self.jar)
        self.follow = urllib.request.build_opener(no_proxy, cookies)
        self.stay = urllib.request.build_opener(no_proxy, cookies, _NoRedirect())

    def url(self, path: str) -> str:
        return path if path.startswith("http") else self.base + path

    def page(self, path: str, form: dict[str, str] | None = None, follow: bool = True,
             timeout: float = 60) -> tuple[int, str, str]:
        """(HTTP status, the final URL or a redirect's Location, the body) of a page view or a form's POST."""
        data = None if form is None else urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(self.url(path), data=data, headers={
            "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Site": "same-origin", "User-Agent": "workshop-check"})
        try:
            with (self.follow if follow else self.stay).open(request, timeout=timeout) as response:
                return response.status, response.url, response.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            body = err.read().decode(errors="replace") if err.fp else ""
            return err.code, err.headers.get("Location") or request.full_url, body

    def xsrf(self, path: str) -> str:
        """The ``_xsrf`` cookie the hub or the server set for ``path`` (the longest matching cookie path)."""
        found = [c for c in self.jar if c.name == "_xsrf" and path.startswith(c.path.rstrip("/") or "/")]
        if not found:
            raise RuntimeError(f"{self.name}: no _xsrf cookie for {path} (no page of it was opened)")
        return max(found, key=lambda c: len(c.path)).value or ""

    def api(self, method: str, path: str, body=None, timeout: float = 60):
        """A JSON API call as JupyterLab makes it: the cookies, and X-XSRFToken from the ``_xsrf`` cookie."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url(path), data=data, method=method, headers={
            "Content-Type": "application/json", "X-XSRFToken": self.xsrf(path),
            "Sec-Fetch-Mode": "cors", "Sec-Fetch-Site": "same-origin", "User-Agent": "workshop-check"})
        with self.follow.open(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def cookie_header(self, url: str) -> str:
        request = urllib.request.Request(url.replace("ws://", "http://", 1))
        self.jar.add_cookie_header(request)
        return request.get_header("Cookie") or ""

    def has_cookie(self, name: str) -> bool:
        return any(c.name == name for c in self.jar)

    # ------------------------------------------------------------------------------------- the attendee's path
    def signup(self, password: str) -> tuple[str, str]:
        """Sign up at /hub/signup: ("pending" | "approved" | "refused", what the page said)."""
        status, url, html = self.page("/hub/signup")
        if status != 200:
            return "refused", f"GET /hub/signup answered HTTP {status}"
        action, fields = form_with(html, "signup_password", url)
        fields.update(username=self.name, signup_password=password, signup_password_confirmation=password)
        status, _, html = self.page(action, fields)
        if status != 200:
            return "refused", f"POST /hub/signup answered HTTP {status}: {html[:200]}"
        return signup_outcome(html)

    def login(self, password: str) -> tuple[bool, str]:
        """Log in at /hub/login: (logged in, what happened). Success is the hub's redirect and its login cookie."""
        status, url, html = self.page("/hub/login")
        if status != 200:
            return False, f"GET /hub/login answered HTTP {status}"
        action, fields = form_with(html, "password", url)
        fields.update(username=self.name, password=password)
        status, location, html = self.page(action, fields, follow=False)
        if status in (302, 303) and self.has_cookie(HUB_LOGIN_COOKIE):
            return True, f"redirected to {urllib.parse.urlparse(location).path}"
        return False, login_error(html) or f"HTTP {status}, no login cookie"

    def approve(self, names: list[str]) -> dict[str, tuple[bool, str]]:
        """As an admin at /hub/authorize: follow each waiting name's Authorize link, then read the table again."""
        status, _, html = self.page("/hub/authorize")
        if status != 200:
            return {n: (False, f"GET /hub/authorize answered HTTP {status} (is the instructor an admin?)")
                    for n in names}
        rows = authorization_rows(html)
        for name in names:
            row = rows.get(name)
            if row and not row["authorized"] and row["toggle"]:
                self.page(row["toggle"])                 # GET toggles: only rows that say "No"
        rows = authorization_rows(self.page("/hub/authorize")[2])
        return {n: ((True, "Is authorized? Yes") if rows.get(n, {}).get("authorized") else
                    (False, "not listed at /hub/authorize (no sign-up?)" if n not in rows else "still not authorized"))
                for n in names}

    def spawn(self) -> tuple[bool, str]:
        """GET /hub/spawn, as the home page's Start button (no options form: the hub starts the server)."""
        status, location, html = self.page("/hub/spawn", follow=False)
        path = urllib.parse.urlparse(location).path
        if status in (302, 303) and (path.startswith("/hub/spawn-pending/") or path.startswith(f"/user/{self.name}")):
            return True, f"redirected to {path}"
        return False, f"HTTP {status} to {path}: {html[:200]}"

    def open_lab(self) -> tuple[bool, str]:
        """Open /user/NAME/ as the spawn-pending page does: the hub's OAuth, then JupyterLab on notebook 00."""
        status, url, _ = self.page(f"/user/{self.name}/")
        path = urllib.parse.urlparse(url).path
        if status != 200 or "/lab" not in path:
            return False, f"HTTP {status} at {path}"
        try:
            self.xsrf(f"/user/{self.name}/api/")
        except RuntimeError as err:
            return False, str(err)
        return True, f"JupyterLab at {path}"

    def stop_server(self) -> None:
        """The home page's Stop My Server: DELETE /hub/api/users/NAME/server with the hub's cookie and _xsrf."""
        self.page("/hub/home")
        self.api("DELETE", f"/hub/api/users/{self.name}/server")


class CellFailed(RuntimeError):
    pass


class Kernel:
    """A kernel's websocket (jupyter_server's JSON protocol), through the hub's proxy, with the server's cookie."""

    def __init__(self, browser: Browser, base: str, kernel_id: str):
        import websocket                                # websocket-client (jupyter_server depends on it)

        self.session = uuid.uuid4().hex
        url = browser.base.replace("http://", "ws://", 1) + \
            f"{base}/api/kernels/{kernel_id}/channels?session_id={self.session}"
        self.ws = websocket.create_connection(url, timeout=60, origin=browser.base, header=[
            f"Cookie: {browser.cookie_header(url)}", "Sec-Fetch-Mode: websocket", "Sec-Fetch-Site: same-origin"])
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


class NotebookRun(threading.Thread):
    """Notebook 00 in one person's server, as JupyterLab runs it: a session, then every code cell in turn."""

    def __init__(self, browser: Browser, timeout: float, start_event: threading.Event, result: dict):
        super().__init__(daemon=True)
        self.browser, self.timeout, self.start_event, self.result = browser, timeout, start_event, result
        self.base = f"/user/{browser.name}"
        result.update({"error": None, "cells": 0, "cells_run": 0})

    def server_api(self, method: str, path: str, body=None, timeout: float = 60):
        return self.browser.api(method, self.base + path, body, timeout=timeout)

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
                raise CellFailed(f"no ~/{COURSE_FOLDER}/{NOTEBOOK} in the server: the first start did not copy the "
                                 "notebooks (can the kit's Python, --kit-python, import gputrain_kit?)") from None
            cells = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                     for c in model["content"]["cells"] if c["cell_type"] == "code"]
            self.result["cells"] = len(cells)
            session = self.server_api("POST", "/api/sessions", {
                "path": f"{COURSE_FOLDER}/{NOTEBOOK}", "name": NOTEBOOK, "type": "notebook",
                "kernel": {"name": "python3"}})
            with Kernel(self.browser, self.base, session["kernel"]["id"]) as kernel:
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
            self.result["total_s"] = round(time.monotonic() - started, 2)
        except Exception as err:  # noqa: BLE001 (any failure is this person's result)
            self.result["error"] = f"{type(err).__name__}: {err}"[:500]
        finally:
            self.result["elapsed_s"] = round(time.monotonic() - started, 2)
            if session is not None:
                try:
                    self.server_api("DELETE", f"/api/sessions/{session['id']}", timeout=20)
                except (OSError, urllib.error.URLError):
                    pass
