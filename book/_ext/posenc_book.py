"""The book's own Sphinx extension: small fixes to the HTML the Jupyter Book 1 stack produces (found by
tests/test_browser.py), and what the book derives at build time instead of typing it twice.

- ``ogp_site_url`` (sphinxext-opengraph) is the GitHub Pages URL derived from ``repository.url`` in
  _config.yml, which jupyter-book hands to Sphinx as ``html_theme_options["repository_url"]``;
  ``ogp_site_name`` is the book's title (``html_title``).
- The version (posenc's ``__version__``) and links to the changelog and the citation page are in every
  page's footer.
- ``{citation-bibtex}`` prints the BibTeX entry generated from CITATION.cff; ``{chapter-table}`` the
  teaching page's table of chapters (prerequisites, reading estimate, exercises, measured run time), read
  from the notebooks (book_chapters.py).
- Some extensions (sphinx-thebe, sphinx-togglebutton) register their inline scripts twice; the second
  ``const THEBE_JS_URL`` is a JavaScript error in every page's console. Each page keeps one copy.
- pydata-sphinx-theme reports "invalid theme mode" when no default mode is set; set it to "auto", the
  theme's own default (follow the reader's system setting).
- Pages with an interactive figure (``posenc.interactive``) load plotly.js, copied into the build from the
  ``plotly`` package, so that they work offline.
- A chapter renamed by ``tests/notebook_tools.py renumber`` keeps its old address: a redirect page for each
  entry of ``book/redirects.json`` (old docname -> new), anchors kept.
"""

import html
import json
import os
import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

sys.path.insert(0, str(Path(__file__).resolve().parent))
import book_chapters  # noqa: E402
import book_meta  # noqa: E402

FOOTER_LINKS = [("book/changelog", "Changelog"), ("book/citation", "How to cite")]


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (getattr(script, "filename", str(script)) or "",  # None and "" both mean an inline script
               tuple(sorted((k, str(v)) for k, v in getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _default_mode(app, config):
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}


def _site_url_and_version(app, config):
    repository = (config.html_theme_options or {}).get("repository_url")
    if repository and not config.ogp_site_url:
        config.ogp_site_url = book_meta.pages_url(repository)
    if config.ogp_site_name is None:  # its default, `project`, is not set by jupyter-book; the title is
        config.ogp_site_name = config.html_title
    config.version = config.release = book_meta.package_version()


def _footer(app, pagename, templatename, context, doctree):
    pathto = context["pathto"]
    links = " · ".join(f'<a href="{pathto(doc)}">{text}</a>' for doc, text in FOOTER_LINKS if doc in app.env.all_docs)
    context["theme_extra_footer"] = (f'<p class="posenc-version">Version {app.config.version}'
                                     + (f" · {links}" if links else "") + "</p>")


class CitationBibtex(SphinxDirective):
    """The BibTeX entry for the book, generated from CITATION.cff."""

    def run(self):
        path = book_meta.ROOT / "CITATION.cff"
        self.env.note_dependency(str(path))
        text = book_meta.bibtex(book_meta.read_citation())
        block = nodes.literal_block(text, text, language="bibtex")
        block["classes"].append("citation-bibtex")
        return [block]


class ChapterTable(SphinxDirective):
    """The chapters, with what each builds on, a reading estimate, its exercises and its measured run time."""

    def run(self):
        chapter_list = book_chapters.chapters()
        for chapter in chapter_list:
            self.env.note_dependency(str(book_chapters.ROOT / f"{chapter.docname}.ipynb"))
        lines = ["| Chapter | Builds on | Reading (estimate) | Exercises | Run time (recorded) |",
                 "| :-- | :-- | --: | --: | --: |"]
        for c in chapter_list:
            builds_on = book_chapters.format_numbers(c.prerequisites)
            lines.append(f"| {{doc}}`{c.number}. {c.short_title} </{c.docname}>` | {builds_on} "
                         f"| {c.reading_minutes} min | {c.exercises} "
                         f"| {book_chapters.format_run_time(c.run_seconds)} |")
        recorded = [c.run_seconds for c in chapter_list]
        total_run = sum(recorded) if None not in recorded else None
        lines.append(f"| **All {len(chapter_list)} chapters** | | "
                     f"**{sum(c.reading_minutes for c in chapter_list) / 60:.0f} h** "
                     f"| **{sum(c.exercises for c in chapter_list)}** "
                     f"| **{book_chapters.format_run_time(total_run)}** |")
        container = nodes.container(classes=["chapter-table"])
        self.state.nested_parse(StringList(lines, source="chapter-table"), self.content_offset, container)
        return [container]


PLOTLY = "plotly.min.js"  # plotly.js as the `plotly` package ships it, copied into the build's _static


def _plotly_on_interactive_pages(app, pagename, templatename, context, doctree):
    """Pages with a posenc.interactive figure load plotly.js from the build (the rest do not: it is 4.8 MB)."""
    if "posenc-interactive" in context.get("body", ""):
        from sphinx.builders.html._assets import _JavaScript
        context.setdefault("script_files", []).append(_JavaScript(f"_static/{PLOTLY}"))


def _copy_plotly(app, exception):
    if exception is None and app.builder.format == "html":
        import shutil

        import plotly
        source = Path(plotly.__file__).parent / "package_data" / PLOTLY
        shutil.copyfile(source, Path(app.outdir) / "_static" / PLOTLY)


def redirect_page(old: str, new: str) -> str:
    """The HTML that sends a reader of ``old``'s address (a docname) to ``new``'s, with the same anchor."""
    target = html.escape(os.path.relpath(f"{new}.html", os.path.dirname(old) or "."))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Moved to {target}</title>\n'
            f'<link rel="canonical" href="{target}">\n<meta name="robots" content="noindex">\n'
            f'<meta http-equiv="refresh" content="0; url={target}">\n'
            f'<script>location.replace("{target}" + location.hash);</script>\n</head>\n'
            f'<body><p>This chapter has moved: <a href="{target}">{target}</a>.</p></body>\n</html>\n')


def _write_redirects(app, exception):
    path = book_meta.ROOT / "book" / "redirects.json"
    if exception is not None or app.builder.format != "html" or not path.exists():
        return
    for old, new in json.loads(path.read_text()).items():
        if new not in app.env.all_docs:
            raise ValueError(f"book/redirects.json sends {old} to {new}, which is not a page of the book")
        out = Path(app.outdir) / f"{old}.html"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(redirect_page(old, new))


def setup(app):
    app.connect("build-finished", _write_redirects)
    app.connect("html-page-context", _plotly_on_interactive_pages)
    app.connect("build-finished", _copy_plotly)
    app.connect("config-inited", _default_mode)
    app.connect("config-inited", _site_url_and_version)
    app.connect("html-page-context", _footer)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)  # after the others
    app.add_directive("citation-bibtex", CitationBibtex)
    app.add_directive("chapter-table", ChapterTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
