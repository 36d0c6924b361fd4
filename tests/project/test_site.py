"""The course's website (`make site`), read as a reader would: built once from the stored outputs, served on
127.0.0.1, every page opened in headless Chromium (Debian's, as tests/project/test_browser.py). No page may log a
console error or ask another host for anything (a request that leaves 127.0.0.1 is refused and counted), every
internal link and anchor must resolve, every image must load, and the saved views of an explorer must render as
widgets. The site is built once per run, under build/site-test (about a minute)."""
from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "project"))
from test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_FLAGS, require_chromium  # noqa: E402

SITE = ROOT / "build" / "site-test"


class _Links(HTMLParser):
    """Every href, src and id of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "a" and values.get("name"):
            self.ids.add(values["name"])
        if tag == "a" and values.get("href"):
            self.hrefs.append(values["href"])


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> _Links:
    links = _Links()
    links.feed(path.read_text(encoding="utf-8"))
    return links


@pytest.fixture(scope="module")
def site() -> Path:
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "build_site.py"), "--out", str(SITE)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert proc.returncode == 0, f"make site failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert re.search(r"site: .* \(\d+ pages, [\d.]+ MB\) in \d+ s", proc.stdout), proc.stdout
    return SITE


def _page_file(site: Path, url_path: str) -> Path | None:
    path = site / unquote(url_path).lstrip("/")
    if path.is_dir() or url_path.endswith("/"):
        path = path / "index.html"
    return path if path.is_file() else None


def test_every_internal_link_and_anchor_resolves(site):
    pages = sorted(site.rglob("*.html"))
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert {p.parent.name for p in pages} >= set(notebooks), "a notebook has no page"
    broken = []
    for page in pages:
        base = "/" + page.relative_to(site).as_posix()
        for href in _parsed(page).hrefs:
            target = urlparse(urljoin(base, href))
            if target.scheme or target.netloc or href.startswith(("mailto:", "javascript:")):
                continue                                              # another site: not this test's to judge
            file = _page_file(site, target.path)
            if file is None:
                broken.append(f"{base}: {href} (no such file)")
            elif target.fragment and file.suffix == ".html" and unquote(target.fragment) not in _parsed(file).ids:
                broken.append(f"{base}: {href} (no anchor {target.fragment!r})")
    assert broken == [], "\n".join(broken[:40])


def test_the_glossary_links_of_every_notebook_land_on_its_entries(site):
    """The notebooks link their terms to notebook 00's glossary: on the site those are anchors of 00's page."""
    glossary = _parsed(site / "notebooks" / "00_start_here" / "index.html").ids
    linked = set()
    for page in (site / "notebooks").rglob("index.html"):
        linked |= {urlparse(h).fragment for h in _parsed(page).hrefs if "00_start_here/#" in h}
    assert len(linked) >= 5 and linked <= glossary, sorted(linked - glossary)


@pytest.fixture(scope="module")
def served(site):
    require_chromium("SITE BROWSER TEST")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _open_every_page(base: str, pages: list[str]) -> dict[str, dict]:
    from playwright.sync_api import sync_playwright

    report: dict[str, dict] = {}
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            context = chromium.new_context()
            outside: list[str] = []

            def route(r):
                if urlparse(r.request.url).hostname == "127.0.0.1":
                    r.continue_()
                else:
                    outside.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            for path in pages:
                page = context.new_page()
                errors: list[str] = []
                page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.on("response", lambda r, errors=errors: errors.append(f"{r.status} for {r.url}")
                        if r.status >= 400 else None)
                outside.clear()
                page.goto(base + path, wait_until="load")
                page.wait_for_timeout(300)
                images = page.evaluate("""() => Array.from(document.images).map(
                    i => [i.getAttribute('src').slice(0, 80), i.complete && i.naturalWidth > 0])""")
                widgets = page.evaluate("""() => document.querySelectorAll(
                    '.jupyter-widgets, .widget-inline-hbox, .widget-slider').length""")
                report[path] = {"errors": list(errors), "outside": list(outside), "images": images,
                                "widgets": widgets, "title": page.title()}
                if path.endswith("05_batchnorm_nan/"):
                    ARTIFACTS.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(ARTIFACTS / "site-05.png"), full_page=False)
                page.close()
        finally:
            chromium.close()
    return report


def test_every_page_opens_in_chromium_cleanly(site, served):
    pages = sorted("/" + p.relative_to(site).parent.as_posix() + "/" for p in site.rglob("index.html"))
    pages = [p.replace("/./", "/") for p in pages]
    report = _open_every_page(served, pages)
    problems = []
    for path, seen in report.items():
        problems += [f"{path}: console error: {e[:200]}" for e in seen["errors"]]
        problems += [f"{path}: asked another host for {u[:120]}" for u in seen["outside"]]
        problems += [f"{path}: image did not load: {src}" for src, ok in seen["images"] if not ok]
    assert problems == [], "\n".join(problems[:40])
    figures = sum(len(seen["images"]) for path, seen in report.items() if "/notebooks/" in path)
    assert figures >= 10, f"the notebook pages show {figures} figures"           # plots are stored outputs
    # the explorers' saved views render as widgets (notebook 05's split explorer among them)
    assert report["/notebooks/05_batchnorm_nan/"]["widgets"] > 0, report["/notebooks/05_batchnorm_nan/"]
    assert "gputrain-kit" in report["/"]["title"]
