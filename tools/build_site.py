"""`make site`: the course as a static website, from the notebooks' stored outputs (nothing is executed).

    python tools/build_site.py [--out build/site]

MkDocs with the Material theme reads a staging folder (build/site-src) that this script fills: the landing page
(website/index.md, its notebook table taken from the README's), every notebook (mkdocs-jupyter renders its stored
outputs, plots and saved widget views), and the reader-facing pages of docs/. Links between them are rewritten to
the site's pages; links to files that are not pages (the workshop folder, the changelog) point at the repository.
website/hooks.py gives the saved widget views a renderer served by the site itself (website/vendor), so a page
loads nothing from another host. Why MkDocs: docs/contributing.md.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gputrain_kit.course import REPOSITORY, colab_url, kaggle_url  # noqa: E402

STAGE = ROOT / "build" / "site-src"
#: The pages of docs/ a reader (a learner, an instructor) needs; contributing.md is for developers, in the repository.
DOC_PAGES = ("install.md", "instructors.md", "gpu.md", "memory.md", "versions.md", "errors.md", "performance.md")
DOC_FILES = ("gpu-report.json",)
NOTEBOOK_ROW = re.compile(r"^\| \[(\d\d_[a-z0-9_]+)\]\(notebooks/\1\.ipynb\) \| (.*) \| (.*) \| (.*) \|$")


def notebook_rows(readme: str) -> list[tuple[str, str, str]]:
    """(name, what you will see, time) for each row of the README's notebook table."""
    rows = [(m.group(1), m.group(2), m.group(3)) for line in readme.splitlines() if (m := NOTEBOOK_ROW.match(line))]
    if not rows:
        raise SystemExit("build_site: the README has no notebook table (rows like | [00_start_here](notebooks/...")
    return rows


def notebook_table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| notebook | what you will see | time | run it |", "|---|---|---|---|"]
    for name, what, minutes in rows:
        lines.append(f"| [{name}](notebooks/{name}.ipynb) | {what} | {minutes} | "
                     f"[Colab]({colab_url(name + '.ipynb')}) · [Kaggle]({kaggle_url(name + '.ipynb')}) · "
                     f"[download](notebooks/{name}.ipynb){{: download }} |")
    return "\n".join(lines)


def _repository_link(target: str) -> str:
    kind = "tree" if target.endswith("/") or "." not in Path(target).name else "blob"
    return f"{REPOSITORY}/{kind}/main/{target.lstrip('./')}"


def rewrite_doc_links(text: str, pages: set[str]) -> str:
    """A docs/ page's links: to another site page as they are, to a notebook as its page, to anything else in the
    repository as its address there."""
    def fix(match: re.Match) -> str:
        label, target = match.group(1), match.group(2)
        path, _, anchor = target.partition("#")
        if re.match(r"^[a-z]+:", path) or not path:                  # an address, or an anchor on this page
            return match.group(0)
        name = Path(path).name
        if path.startswith("../notebooks/") and name.endswith(".ipynb"):
            return f"[{label}](../notebooks/{name}{'#' + anchor if anchor else ''})"
        if "/" not in path and (name in pages or name in DOC_FILES):
            return match.group(0)
        return f"[{label}]({_repository_link(str(Path('docs', path)) if not path.startswith('../') else path[3:])})"
    return re.sub(r"\[([^\]]*)\]\(([^)\s]+)\)", fix, text)


def stage() -> None:
    """Fill build/site-src with the pages MkDocs reads."""
    if STAGE.exists():
        shutil.rmtree(STAGE)
    (STAGE / "notebooks").mkdir(parents=True)
    (STAGE / "docs").mkdir()
    readme = (ROOT / "README.md").read_text()
    landing = (ROOT / "website" / "index.md").read_text()
    landing = landing.replace("{{ notebook_table }}", notebook_table(notebook_rows(readme)))
    landing = landing.replace("{{ repository }}", REPOSITORY)
    (STAGE / "index.md").write_text(landing)
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        shutil.copyfile(path, STAGE / "notebooks" / path.name)
    pages = {name for name in DOC_PAGES if (ROOT / "docs" / name).exists()}
    for name in sorted(pages):
        (STAGE / "docs" / name).write_text(rewrite_doc_links((ROOT / "docs" / name).read_text(), pages))
    for name in DOC_FILES:
        shutil.copyfile(ROOT / "docs" / name, STAGE / "docs" / name)
    shutil.copytree(ROOT / "website" / "vendor", STAGE / "vendor")
    shutil.copyfile(ROOT / "website" / "extra.css", STAGE / "extra.css")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "site"), help="the site's folder")
    args = parser.parse_args(argv)
    begun = time.perf_counter()
    stage()
    out = Path(args.out).resolve()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--config-file", str(ROOT / "website" / "mkdocs.yml"), "--site-dir", str(out)], cwd=ROOT)
    if proc.returncode:
        return proc.returncode
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"site: {out} ({len(list(out.rglob('*.html')))} pages, {size / 1e6:.1f} MB) in "
          f"{time.perf_counter() - begun:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
