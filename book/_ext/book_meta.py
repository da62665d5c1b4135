"""Where the book's metadata comes from, each fact in one place.

- the repository URL: ``_config.yml`` (``repository.url``); the GitHub Pages URL is derived from it by
  ``pages_url`` of tests/repository_url.py, the module that also keeps every written-out copy in step;
- the version: ``posenc/__init__.py`` (``__version__``; ``tests/test_book_pages.py`` checks that
  pyproject.toml, CITATION.cff and the top entry of CHANGELOG.md agree with it);
- how to cite: ``CITATION.cff``; the BibTeX entry on the citation page is generated from it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from repository_url import pages_url  # noqa: E402,F401  (one rule for the Pages address, shared with set-repository)


def package_version(root: Path = ROOT) -> str:
    """posenc's ``__version__``, read from the source (importing posenc would import torch)."""
    text = (root / "posenc" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE).group(1)


def read_citation(root: Path = ROOT) -> dict:
    return yaml.safe_load((root / "CITATION.cff").read_text())


def bibtex(citation: dict, key: str = "posenc2026") -> str:
    """A BibTeX ``@book`` entry from CITATION.cff's preferred citation (falling back to the top level)."""
    preferred = citation.get("preferred-citation", citation)
    authors = " and ".join(
        f"{{{a['name']}}}" if "name" in a else f"{a['family-names']}, {a['given-names']}"
        for a in preferred.get("authors", citation["authors"]))
    year = preferred.get("year") or str(citation["date-released"])[:4]
    fields = [
        ("author", authors),
        ("title", preferred.get("title", citation["title"])),
        ("year", str(year)),
        ("version", str(preferred.get("version", citation["version"]))),
        ("url", preferred.get("url", citation.get("url"))),
        ("note", f"Source: \\url{{{preferred.get('repository-code', citation['repository-code'])}}}"),
    ]
    width = max(len(name) for name, _ in fields)
    body = ",\n".join(f"  {name.ljust(width)} = {{{value}}}" for name, value in fields)
    return f"@book{{{key},\n{body}\n}}"
