"""MkDocs hooks for the course's site (website/mkdocs.yml): what mkdocs-jupyter's pages need to load nothing from
another host and to link as the site does."""
from __future__ import annotations

import re

# nbconvert's widget renderer comes from unpkg; the site serves the same renderer itself (website/vendor: the npm
# package @jupyter-widgets/html-manager 1.0.14, which renders ipywidgets 8 views; its licence is beside it).
_RENDERER = re.compile(r"'https://unpkg\.com/@jupyter-widgets/html-manager@[^']*'")
_OLD_RENDERER = re.compile(r"'https://unpkg\.com/@jupyter-js-widgets@[^']*'")
_EMPTY_SCRIPT = '<script src=""> </script>'          # MathJax's, with no address: the notebooks use no formulas
# Badges drawn by other hosts' images become text links.
_BADGE = re.compile(r'<img alt="(Open In Colab|Open In Kaggle)" src="https://[^"]+"\s*/?>')
# A notebook's link to another notebook: its page on the site.
_NOTEBOOK_LINK = re.compile(r'href="(\d\d_[a-z0-9_]+)\.ipynb(#[^"]*)?"')
_HEADING_ID = re.compile(r'<h[1-6] id="([^"]+)"')
_TOC_LINK = re.compile(r'(<a href="#)([^"]+)(" class="md-(?:nav__link|skip)")')


def _words_within(slug: str, heading_id: str) -> bool:
    """Whether the slug's words appear in the heading id, in order (the id may hold more: the code the slug drops)."""
    words = iter(heading_id.split("-"))
    # a word may end a longer one: "`MirroredStrategy`'s idea" slugs to "s-idea", the id to "mirroredstrategys-idea"
    return all(any(w == word or w.endswith(word) for w in words) for word in slug.split("-"))


def _toc_fixed(output: str) -> str:
    """The table of contents slugs a heading without its code (`setup()`), nbconvert's heading ids keep it, and both
    list the headings in the same order (the contents without the page's title): each contents link takes the id of
    the next heading whose words hold its own."""
    ids = _HEADING_ID.findall(output)
    mapping: dict[str, str] = {}
    at = 0
    for slug in dict.fromkeys(m.group(2) for m in _TOC_LINK.finditer(output)):
        for index in range(at, len(ids)):
            if ids[index] == slug or _words_within(slug, ids[index]):
                mapping[slug], at = ids[index], index + 1
                break
    return _TOC_LINK.sub(lambda m: m.group(1) + mapping.get(m.group(2), m.group(2)) + m.group(3), output)


def on_post_page(output: str, page, config) -> str:
    if not page.file.src_uri.endswith(".ipynb"):
        return output
    root = "../" * page.url.count("/")                    # from notebooks/NN_name/ back to the site's root
    output = _RENDERER.sub(f"'{root}vendor/html-manager-embed.js'", output)
    output = _OLD_RENDERER.sub(f"'{root}vendor/html-manager-embed.js'", output)
    output = output.replace(_EMPTY_SCRIPT, "")
    output = _BADGE.sub(lambda m: f'<span class="gk-badge">{m.group(1)}</span>', output)
    output = _NOTEBOOK_LINK.sub(lambda m: f'href="../{m.group(1)}/{m.group(2) or ""}"', output)
    return _toc_fixed(output)
