"""The pure half of ``make workshop-check``: reading the hub's pages, and judging a run against its bound.

Nothing here starts a process or opens a connection, so tests/project/test_workshop_logic.py runs it without a hub.
The bound is docs/instructors.md's "Holds" (section "How many attendees one machine holds"): N attendees run
notebook 00 at once, and (1) every attendee walks every step (sign-up, refused before the approval, approved,
login, server, JupyterLab, notebook 00 to the end), (2) each attendee's kernel start plus all cells takes at most
``BOUND_S`` seconds and at most ``BOUND_X_ALONE`` times what one attendee alone needs on the same machine, and
(3) the peak memory of all attendees' processes and the hub together leaves at least ``FREE_FRACTION`` of the RAM.
"""
from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urljoin

BOUND_S = 60.0          # docs/instructors.md: "... and at most 60 s"
BOUND_X_ALONE = 3.0     # "... at most 3 times what one attendee alone needs on the same machine"
FREE_FRACTION = 0.25    # "... leaves at least 25% of the RAM free"
STEPS = ("signup", "refused_before_approval", "approved", "login", "server", "lab", "notebook")
STEP_WORDS = {
    "signup": "signed up at /hub/signup (the form's answer: sent to the admin)",
    "refused_before_approval": "was refused at /hub/login before the approval",
    "approved": "was approved by the instructor at /hub/authorize",
    "login": "logged in at /hub/login (the hub's login cookie)",
    "server": "got a server from /hub/spawn",
    "lab": "opened JupyterLab in their server (the hub's OAuth, the server's cookie)",
    "notebook": "ran notebook 00 to the end without an error",
}


# ------------------------------------------------------------------------------------------------ the pages
class _PageParser(HTMLParser):
    """Forms (action, method, inputs), alert boxes, login errors and table rows (id, cell texts, links)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[dict] = []
        self.alerts: list[dict] = []
        self.login_errors: list[str] = []
        self.rows: list[dict] = []
        self._form: dict | None = None
        self._alert: dict | None = None
        self._alert_depth = 0
        self._error: list[str] | None = None
        self._row: dict | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v or "") for k, v in attrs}
        classes = a.get("class", "").split()
        if tag == "form":
            self._form = {"action": a.get("action", ""), "method": a.get("method", "get").lower(), "inputs": {}}
            self.forms.append(self._form)
        elif tag == "input" and self._form is not None and a.get("name"):
            if a.get("type", "text").lower() in ("checkbox", "radio") and "checked" not in a:
                return                                   # a browser sends an unchecked box not at all
            self._form["inputs"][a["name"]] = a.get("value", "")
        elif tag == "div" and self._alert is not None:
            self._alert_depth += 1
        elif tag == "div" and "alert" in classes:
            self._alert = {"level": next((c for c in classes if c.startswith("alert-")), ""), "text": []}
            self._alert_depth = 1
        elif tag == "p" and "login_error" in classes:
            self._error = []
        elif tag == "tr":
            self._row = {"id": a.get("id", ""), "cells": [], "links": []}
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "a" and self._row is not None and a.get("href"):
            self._row["links"].append(a["href"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "div" and self._alert is not None:
            self._alert_depth -= 1
            if self._alert_depth == 0:
                self.alerts.append({"level": self._alert["level"], "text": " ".join("".join(self._alert["text"]).split())})
                self._alert = None
        elif tag == "p" and self._error is not None:
            self.login_errors.append(" ".join("".join(self._error).split()))
            self._error = None
        elif tag == "td" and self._row is not None and self._cell is not None:
            self._row["cells"].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row["cells"]:
                self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        for sink in (self._alert["text"] if self._alert else None, self._error, self._cell):
            if sink is not None:
                sink.append(data)


def parse_page(html: str) -> _PageParser:
    parser = _PageParser()
    parser.feed(html)
    parser.close()
    return parser


def form_with(html: str, field: str, page_url: str) -> tuple[str, dict[str, str]]:
    """(absolute action URL, the form's inputs) of the page's form that has an input named ``field``.

    The hub's forms carry the ``_xsrf`` token that JupyterHub 6 checks on every POST from a browser; an empty
    action posts back to the page itself. ValueError when no form on the page has that input."""
    for form in parse_page(html).forms:
        if field in form["inputs"]:
            return urljoin(page_url, form["action"] or page_url), dict(form["inputs"])
    raise ValueError(f"form_with: no form with an input named {field!r} on {page_url}")


def signup_outcome(html: str) -> tuple[str, str]:
    """What /hub/signup answered: ("pending" | "approved" | "refused", the alert's words).

    NativeAuthenticator 1.3.0 answers alert-info "Your information has been sent to the admin." (waits for an
    approval), alert-success "The signup was successful!..." (admins, or open sign-up), alert-danger otherwise."""
    alerts = parse_page(html).alerts
    if not alerts:
        return "refused", "no answer on the page (no alert box)"
    level, text = alerts[-1]["level"], alerts[-1]["text"]
    if level == "alert-info":
        return "pending", text
    if level == "alert-success":
        return "approved", text
    return "refused", text


def login_error(html: str) -> str | None:
    """The login page's error line (``<p class="login_error">``), or None when the page shows none."""
    errors = [e for e in parse_page(html).login_errors if e]
    return errors[-1] if errors else None


def authorization_rows(html: str) -> dict[str, dict]:
    """/hub/authorize's table: user name -> {"authorized": bool, "toggle": the authorize/NAME link}.

    NativeAuthenticator 1.3.0's ``GET /hub/authorize/NAME`` toggles the approval: read the row before following
    it, or an approved attendee is unapproved again."""
    rows: dict[str, dict] = {}
    for row in parse_page(html).rows:
        name = row["id"] or row["cells"][0]
        toggle = next((link for link in row["links"] if link.rstrip("/").endswith(f"/authorize/{name}")), None)
        authorized = "Yes" in row["cells"][1:]               # "Is authorized?": Yes / No
        rows[name] = {"authorized": authorized, "toggle": toggle}
    return rows


# ------------------------------------------------------------------------------------------------ the verdict
def judge(summary: dict, bound_s: float = BOUND_S, x_alone: float = BOUND_X_ALONE,
          free_fraction: float = FREE_FRACTION) -> list[dict]:
    """The verdicts on one run: a list of {"check", "ok", "detail"}; the run holds when every "ok" is True.

    ``summary``: "results" (one dict per attendee: "attendee", "steps" {step: {"ok", "detail"}}, "total_s" the
    kernel start plus all cells), "alone_s" (the same, one attendee alone on the machine; None when not
    measured), "peak_total_pss_bytes" and "memory_total_bytes"."""
    if not isinstance(summary, dict) or not isinstance(summary.get("results"), list):
        raise ValueError(f"judge: summary must be a dict with a 'results' list, got {type(summary).__name__}; "
                         "pass the dict that workshop_check.report() builds")
    if bound_s <= 0 or x_alone <= 0 or not 0 <= free_fraction < 1:
        raise ValueError(f"judge: bounds must be positive (bound_s={bound_s}, x_alone={x_alone}) and free_fraction "
                         f"in [0, 1) (got {free_fraction})")
    verdicts: list[dict] = []
    results = summary["results"]
    if not results:
        verdicts.append({"check": "attendees", "ok": False, "detail": "no attendee ran: nothing was measured"})
    alone = summary.get("alone_s")
    limit = min(bound_s, x_alone * alone) if alone else bound_s
    limit_words = (f"{limit:.1f} s (the lower of {bound_s:g} s and {x_alone:g} x {alone:.1f} s alone)" if alone
                   else f"{bound_s:g} s (one attendee alone was not measured: the {x_alone:g}x bound is not judged)")
    for r in results:
        name, steps = r.get("attendee", "?"), r.get("steps") or {}
        failed = [s for s in STEPS if not (steps.get(s) or {}).get("ok")]
        if failed:
            first = failed[0]
            said = (steps.get(first) or {}).get("detail") or "not reached: an earlier step failed"
            verdicts.append({"check": f"{name}: steps", "ok": False,
                             "detail": f"did not walk every step: first missing, {first} ({STEP_WORDS[first]}): "
                                       f"{said}"})
        else:
            verdicts.append({"check": f"{name}: steps", "ok": True, "detail": "signed up, refused before the "
                             "approval, approved, logged in, got a server, opened JupyterLab, ran notebook 00"})
        total = r.get("total_s")
        if total is None or not (steps.get("notebook") or {}).get("ok"):
            verdicts.append({"check": f"{name}: time", "ok": False,
                             "detail": "no time: notebook 00 did not run to the end"})
        else:
            verdicts.append({"check": f"{name}: time", "ok": total <= limit,
                             "detail": f"kernel start + all cells {total:.1f} s, bound {limit_words}"})
    total_mem, peak = summary.get("memory_total_bytes"), summary.get("peak_total_pss_bytes")
    if total_mem and peak is not None:
        allowed = (1 - free_fraction) * total_mem
        verdicts.append({"check": "memory", "ok": peak <= allowed,
                         "detail": f"peak PSS of all attendees and the hub {peak / 2**30:.2f} GiB, bound "
                                   f"{allowed / 2**30:.2f} GiB ({1 - free_fraction:.0%} of {total_mem / 2**30:.2f} GiB)"})
    else:
        verdicts.append({"check": "memory", "ok": False, "detail": "not measured (no memory samples)"})
    return verdicts


def holds(verdicts: list[dict]) -> bool:
    """True when every verdict passed (and there is at least one)."""
    return bool(verdicts) and all(v["ok"] for v in verdicts)


def verdict_text(verdicts: list[dict]) -> str:
    """The verdicts as lines, the failed ones first, and a last line: HOLDS or DOES NOT HOLD with the count."""
    failed = [v for v in verdicts if not v["ok"]]
    lines = [f"  FAIL {v['check']}: {v['detail']}" for v in failed]
    lines += [f"  ok   {v['check']}: {v['detail']}" for v in verdicts if v["ok"]]
    lines.append(f"verdict: the bound HOLDS ({len(verdicts)} checks passed)" if holds(verdicts) else
                 f"verdict: the bound DOES NOT HOLD ({len(failed)} of {len(verdicts)} checks failed)")
    return "\n".join(lines)
