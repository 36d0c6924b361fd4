"""`make check-links`: once the course is published, every address a learner follows into it answers. A maintainer
runs it after publishing (or after changing `gputrain_kit.course.REPOSITORY`); it needs the internet, so no test
suite runs it. What it checks: each notebook's Colab and Kaggle badge, the repository the first cell installs
from, each notebook's page on the repository, and the README's links into the repository.

    python tools/check_links.py [--timeout 20]
Exit 0 when every address answers below 400, 1 otherwise (each failure named).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gputrain_kit.course import REPOSITORY  # noqa: E402

_LINK = re.compile(r"\]\((https?://[^)\s]+)\)")


def course_addresses() -> list[str]:
    """Every published address the course sends a learner to, in a stable order, each once."""
    found = [REPOSITORY, f"{REPOSITORY}/releases"]
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        title = "".join(json.loads(path.read_text())["cells"][0]["source"])
        found += [url for url in _LINK.findall(title) if "colab.research.google.com/github" in url
                  or "kaggle.com/kernels" in url]
        found.append(f"{REPOSITORY}/blob/main/notebooks/{path.name}")
    found += [url for url in _LINK.findall((ROOT / "README.md").read_text()) if url.startswith(REPOSITORY)]
    return list(dict.fromkeys(found))


def answers(url: str, timeout: float) -> str | None:
    """None when ``url`` answers below 400, else what went wrong."""
    request = urllib.request.Request(url, headers={"User-Agent": "gputrain-kit check-links"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return None if response.status < 400 else f"HTTP {response.status}"
    except urllib.error.HTTPError as err:
        return f"HTTP {err.code}"
    except (urllib.error.URLError, OSError) as err:
        return f"{type(err).__name__}: {err}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per address")
    args = parser.parse_args(argv)
    failed = []
    for url in course_addresses():
        problem = answers(url, args.timeout)
        print(f"{'ok  ' if problem is None else 'FAIL'} {url}" + (f"  ({problem})" if problem else ""))
        if problem:
            failed.append(url)
    print(f"{len(failed)} of {len(course_addresses())} addresses failed" if failed else "every address answers")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
