"""The built book in a real browser: every page of the toc, as a reader sees it.

Run by ``make browser`` (part of ``make test``) after ``make book``. Needs Chromium: Debian's
``chromium`` (``apt-get install chromium``, as ``.ci/run`` does) or any path in ``POSENC_CHROMIUM``.
Without one the tests are skipped locally and fail in CI (``CI`` set), so CI can never pass them by
skipping. Every request that leaves 127.0.0.1 is blocked and counted as a failure: the book must read the
same offline. Screenshots of two pages, and a chapter printed to PDF, are written to ``_build/browser/``.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import struct
import threading
import tomllib
import urllib.parse
from pathlib import Path

import pytest
import yaml

from notebook_tools import ROOT, toc_files
from repository_url import configured, pages_url

pytestmark = pytest.mark.browser
HTML = ROOT / "_build" / "html"
ARTIFACTS = ROOT / "_build" / "browser"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGES = [f"{name}.html" for name in toc_files()]
# page -> (file, element to frame or None for the viewport)
SCREENSHOTS = {"book/intro.html": ("intro.png", None),
               "notebooks/03_sinusoidal.html": ("03_sinusoidal_animation.png", ".animation")}


def chromium_path() -> str | None:
    return os.environ.get("POSENC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _missing(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this check may not be skipped)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        _missing("the book is not built: run `make book` first")
    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    path = chromium_path()
    if path is None:
        _missing("no Chromium found: `apt-get install chromium` or set POSENC_CHROMIUM")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:  # launch() gives Chromium a fresh, temporary profile
        browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


class PageVisit:
    """Load one page, block everything that is not local, and record what went wrong."""

    def __init__(self, browser, url: str):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors, self.blocked, self.failed, self.bad_status = [], [], [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfailed", lambda r: self.failed.append(r.url))
        self.page.on("response", lambda r: self.bad_status.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.context.route(re.compile(r"^(?!http://127\.0\.0\.1:).*"), self._block)
        self.page.goto(url, wait_until="load")
        # MathJax typesets after load; wait for it (pages without math have nothing to wait for)
        self.page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")

    def _block(self, route):
        self.blocked.append(route.request.url)
        route.abort()

    def close(self):
        self.context.close()


def repository_url() -> str:
    return configured()["url"].rstrip("/")


@pytest.fixture(scope="module")
def visits(server, browser):
    """Every toc page loaded once; yields {page: facts}, facts gathered in the browser."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    results = {}
    for page_path in PAGES:
        visit = PageVisit(browser, f"{server}/{page_path}")
        facts = visit.page.evaluate(
            """() => {
                const math = [...document.querySelectorAll('.math')];
                const prose = [...document.querySelectorAll('article p, article li, article td')]
                    .map(e => e.innerText).join('\\n');
                return {
                    math: math.length,
                    typeset: math.filter(e => e.querySelector('mjx-container')).length,
                    raw_dollars: prose.includes('$$'),
                    images: [...document.images].map(i => ({src: i.src, ok: i.complete && i.naturalWidth > 0})),
                    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
                    title: document.title,
                    animation: document.querySelectorAll('.animation img, .anim-state').length,
                    icons: [...document.querySelectorAll('link[rel~="icon"]')].map(l => l.href),
                    og: Object.fromEntries([...document.querySelectorAll('meta[property^="og:"]')]
                        .map(m => [m.getAttribute('property'), m.getAttribute('content')])),
                    footer_version: document.querySelector('footer .posenc-version')?.innerText ?? null,
                    logo: [...document.querySelectorAll('.navbar-brand img.logo__image')]
                        .map(i => i.complete && i.naturalWidth > 0),
                    bibtex: document.querySelector('pre.citation-bibtex, .citation-bibtex pre')?.innerText ?? null,
                    code_blocks: [...document.querySelectorAll('article pre')].map(e => e.innerText),
                    table_rows: document.querySelectorAll('.chapter-table tbody tr').length,
                    h2: [...document.querySelectorAll('article h2')].map(h => h.innerText.replace(/#$/, '').trim()),
                };
            }""")
        # the favicon the page declares (a browser with a window asks for it; headless may not)
        facts["icon_status"] = [visit.page.request.get(href).status for href in facts["icons"]]
        facts.update(errors=visit.errors, blocked=visit.blocked, failed=visit.failed, bad_status=visit.bad_status)
        if page_path in SCREENSHOTS:
            name, selector = SCREENSHOTS[page_path]
            target = visit.page.locator(selector).first if selector else visit.page
            target.screenshot(path=str(ARTIFACTS / name))
        results[page_path] = facts
        visit.close()
    return results


@pytest.mark.parametrize("page_path", PAGES)
def test_page_loads_cleanly_and_offline(visits, page_path):
    facts = visits[page_path]
    assert facts["title"], page_path
    assert facts["errors"] == [], f"{page_path}: console errors {facts['errors']}"
    assert facts["bad_status"] == [], f"{page_path}: HTTP errors {facts['bad_status']}"
    assert facts["icons"] and facts["icon_status"] == [200] * len(facts["icons"]), \
        f"{page_path}: favicon {facts['icons']} -> {facts['icon_status']}"
    assert facts["blocked"] == [], f"{page_path}: requests that left the machine {facts['blocked']}"
    assert facts["failed"] == [], f"{page_path}: failed requests {facts['failed']}"


@pytest.mark.parametrize("page_path", PAGES)
def test_math_is_typeset_and_images_load(visits, page_path):
    facts = visits[page_path]
    assert facts["typeset"] == facts["math"], f"{page_path}: {facts['math'] - facts['typeset']} formulas left raw"
    assert not facts["raw_dollars"], f"{page_path}: '$$' left in the text"
    broken = [image["src"] for image in facts["images"] if not image["ok"]]
    assert broken == [], f"{page_path}: images that did not load {broken}"


def test_chapters_with_math_and_figures_show_them(visits):
    # guards the checks above against passing on empty pages
    assert visits["notebooks/06_rope.html"]["math"] > 20
    assert len(visits["notebooks/10_head_to_head.html"]["images"]) >= 2
    assert visits["notebooks/03_sinusoidal.html"]["animation"] >= 1  # the clocks-and-bits player


@pytest.mark.parametrize("page_path", [p for p in PAGES if p.startswith("notebooks/")])
def test_launch_and_download_buttons_point_at_this_chapter(visits, server, page_path):
    owner_repo = urllib.parse.urlparse(repository_url()).path.strip("/")
    notebook = f"{page_path.removesuffix('.html')}.ipynb"
    links = visits[page_path]["links"]
    colab = [link for link in links if link.startswith("https://colab.research.google.com")]
    assert colab == [f"https://colab.research.google.com/github/{owner_repo}/blob/main/{notebook}"]
    # no Binder button: a Binder environment would need a CPU build of PyTorch that nothing here tests
    assert [link for link in links if "binder" in link.lower()] == []
    assert f"{server}/_sources/{notebook}" in links  # download as .ipynb (resolves: see below)
    assert repository_url() in links


def test_internal_links_resolve(visits, server):
    targets = {}
    for page_path, facts in visits.items():
        for link in facts["links"]:
            if link.startswith(server):
                url, _, fragment = link.partition("#")
                targets.setdefault(url, set()).add(fragment)
    assert len(targets) > len(PAGES)  # the navigation alone links every page
    missing = []
    for url, fragments in targets.items():
        relative = urllib.parse.unquote(urllib.parse.urlparse(url).path).lstrip("/")
        path = HTML / relative
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            missing.append(url)
            continue
        if path.suffix == ".html":
            text = path.read_text(errors="replace")
            missing += [f"{url}#{f}" for f in fragments if f and f'id="{f}"' not in text]
    assert missing == []


def test_old_chapter_addresses_lead_to_the_renumbered_chapters(server, browser):
    """Every entry of book/redirects.json: the old address, with an anchor, opens the new page at it."""
    redirects = json.loads((ROOT / "book" / "redirects.json").read_text())
    assert redirects and set(redirects.values()) <= set(toc_files())
    context = browser.new_context()
    context.route(re.compile(r"^(?!http://127\.0\.0\.1:).*"), lambda route: route.abort())
    try:
        page = context.new_page()
        for old, new in redirects.items():
            page.goto(f"{server}/{old}.html#summary")
            page.wait_for_url(f"{server}/{new}.html#summary", timeout=10_000)
            assert page.locator("#summary").count() == 1, new
    finally:
        context.close()


def test_search_finds_rotary(server, browser):
    visit = PageVisit(browser, f"{server}/search.html?q=rotary")
    try:
        visit.page.wait_for_selector("#search-results ul.search li", timeout=20_000)
        hits = visit.page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.href)")
        assert any("06_rope" in hit for hit in hits), hits
        assert visit.errors == [] and visit.blocked == []
    finally:
        visit.close()


def test_screenshots_were_saved(visits):
    for name, _ in SCREENSHOTS.values():
        assert (ARTIFACTS / name).stat().st_size > 10_000


# --- what a reader sees first: metadata for link previews, the version, the logo ------------------------

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
CITATION = yaml.safe_load((ROOT / "CITATION.cff").read_text())
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SITE = pages_url(repository_url())


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


@pytest.mark.parametrize("page_path", PAGES)
def test_open_graph_metadata_for_link_previews(visits, page_path):
    og = visits[page_path]["og"]
    assert og.get("og:title") and visits[page_path]["title"].startswith(og["og:title"]), og
    assert og.get("og:site_name") == CONFIG["title"]
    assert og.get("og:url") == f"{SITE}{page_path}"  # the page's own address on GitHub Pages
    assert len(og.get("og:description", "")) >= 40, og  # the page's opening text
    assert og.get("og:image") == f"{SITE}_static/social-card.png"
    assert og.get("og:image:alt")


def test_social_card_is_in_the_build_at_the_size_previews_use():
    assert png_size(HTML / "_static" / "social-card.png") == (1200, 630)


@pytest.mark.parametrize("page_path", PAGES)
def test_version_and_logo_on_every_page(visits, page_path):
    facts = visits[page_path]
    assert facts["footer_version"] == f"Version {VERSION} · Changelog · How to cite", facts["footer_version"]
    assert facts["logo"] and all(facts["logo"]), f"{page_path}: logo {facts['logo']}"


def test_citation_page_shows_what_citation_cff_says(visits):
    facts = visits["book/citation.html"]
    bibtex = facts["bibtex"]
    assert bibtex and bibtex.startswith("@book{")
    for value in (CITATION["title"], CITATION["version"], CITATION["url"], CITATION["repository-code"]):
        assert str(value) in bibtex, value
    cff = [block for block in facts["code_blocks"] if block.startswith("cff-version: 1.2.0")]
    assert len(cff) == 1 and f'version: "{CITATION["version"]}"' in cff[0]


def test_changelog_page_starts_with_this_version(visits):
    """The first release shown is this version; Keep a Changelog's [Unreleased] may sit above it."""
    h2 = visits["book/changelog.html"]["h2"]
    releases = h2[1:] if h2 and h2[0] == "[Unreleased]" else h2
    assert releases and releases[0].startswith(f"[{VERSION}]"), h2


def test_teaching_page_has_the_graph_and_a_row_per_chapter(visits):
    facts = visits["book/teaching.html"]
    chapters = [p for p in PAGES if p.startswith("notebooks/")]
    assert facts["table_rows"] == len(chapters) + 1  # one per chapter, and the total
    graph = [image for image in facts["images"] if image["src"].endswith("chapter_graph.svg")]
    assert len(graph) == 1 and graph[0]["ok"]
    for chapter in chapters:  # every chapter is linked from its row
        assert any(link.endswith(chapter) for link in facts["links"]), chapter


# --- printing a chapter (the download button's ".pdf" calls window.print()) ----------------------------

PRINTED = {  # page -> what it must print: figures (at least), formulas (at least)
    "notebooks/06_rope.html": (3, 100),
    "notebooks/03_sinusoidal.html": (4, 100),  # with the clocks-and-bits animation's current frame
    "notebooks/10_head_to_head.html": (2, 10),
}
SCREEN_ONLY = [".bd-header", ".bd-header-article", ".bd-sidebar-primary", ".bd-sidebar-secondary", ".bd-footer",
               ".prev-next-area", "button.toggle-button", "details.hide:not([open])", ".anim-controls",
               ".headerlink"]


@pytest.mark.parametrize("page_path", list(PRINTED))
def test_print_layout_keeps_figures_and_math_and_drops_the_screen_furniture(server, browser, page_path):
    visit = PageVisit(browser, f"{server}/{page_path}")
    try:
        page = visit.page
        on_screen = page.evaluate("sel => sel.map(s => document.querySelectorAll(s).length)", SCREEN_ONLY)
        page.emulate_media(media="print")
        facts = page.evaluate(
            """(sel) => {
                const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
                const article = document.querySelector('article.bd-article');
                const visibleImages = [...article.querySelectorAll('img')]
                    .filter(i => !i.closest('details:not([open])'));
                return {
                    screen_only_shown: sel.map(s => [...document.querySelectorAll(s)].filter(shown).length),
                    width: article.getBoundingClientRect().width / document.documentElement.clientWidth,
                    images: visibleImages.map(i => [Math.round(i.getBoundingClientRect().width),
                                                    Math.round(i.getBoundingClientRect().height),
                                                    getComputedStyle(i).breakInside]),
                    math: [...article.querySelectorAll('mjx-container')]  // folded solutions aside
                        .filter(m => !m.closest('.toggle-hidden, details:not([open])')).map(shown),
                    display_math_whole: [...article.querySelectorAll('mjx-container[display="true"]')]
                        .every(m => getComputedStyle(m).breakInside === 'avoid'),
                    headings_keep_with_next: [...article.querySelectorAll('h2, h3')]
                        .every(h => getComputedStyle(h).breakAfter === 'avoid'),
                    code_overflowing: [...article.querySelectorAll('pre')]
                        .filter(p => shown(p) && p.scrollWidth > p.clientWidth + 1).length,
                };
            }""", SCREEN_ONLY)
        figures, formulas = PRINTED[page_path]
        assert on_screen[SCREEN_ONLY.index(".bd-sidebar-primary")] == 1  # the checks below see real elements
        assert on_screen[SCREEN_ONLY.index("button.toggle-button")] >= 1  # the exercises' folded solutions
        shown = dict(zip(SCREEN_ONLY, facts["screen_only_shown"]))
        assert set(shown.values()) == {0}, shown
        assert facts["width"] > 0.9  # the text takes the paper's width
        assert len(facts["images"]) >= figures
        assert all(w > 100 and h > 50 and brk == "avoid" for w, h, brk in facts["images"]), facts["images"]
        assert len(facts["math"]) >= formulas and all(facts["math"]) and facts["display_math_whole"]
        assert facts["headings_keep_with_next"]
        assert facts["code_overflowing"] == 0
        assert visit.errors == [] and visit.blocked == []
    finally:
        visit.close()


def test_a_chapter_prints_to_pdf_with_its_figures(server, browser):
    visit = PageVisit(browser, f"{server}/notebooks/06_rope.html")
    try:
        visit.page.emulate_media(media="print")
        path = ARTIFACTS / "06_rope_print.pdf"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        pdf = visit.page.pdf(path=str(path), format="A4", print_background=True)
        pages = len(re.findall(rb"/Type\s*/Page(?![s\w])", pdf))
        images = len(re.findall(rb"/Subtype\s*/Image", pdf))
        assert 8 <= pages <= 60, pages  # the whole chapter, not one screen of it
        assert images >= 3, images      # the chapter's three figures
        assert 100_000 < path.stat().st_size < 20_000_000
        assert visit.blocked == []
    finally:
        visit.close()


def test_printing_switches_a_dark_page_to_the_light_theme(server, browser):
    visit = PageVisit(browser, f"{server}/notebooks/06_rope.html")
    try:
        themes = visit.page.evaluate("""() => {
            const html = document.documentElement;
            html.dataset.theme = 'dark';
            window.dispatchEvent(new Event('beforeprint'));
            const printing = html.dataset.theme;
            window.dispatchEvent(new Event('afterprint'));
            return [printing, html.dataset.theme];
        }""")
        assert themes == ["light", "dark"]
    finally:
        visit.close()


INTERACTIVE_PAGE = "notebooks/19_interactive.html"
INTERACTIVE = ("rope-clock", "rope-base", "recipes", "longrope", "masks", "mrope")
# each figure also on the page of the chapter it illustrates
INTERACTIVE_PAGES = {INTERACTIVE_PAGE: INTERACTIVE,
                     "notebooks/06_rope.html": ("rope-clock", "rope-base"),
                     "notebooks/07_context_extension.html": ("recipes", "longrope"),
                     "notebooks/15_hybrid_layers.html": ("masks",),
                     "notebooks/18_images_video.html": ("mrope",)}


def test_every_interactive_figure_is_on_its_chapters_page():
    on_chapters = {name for page, names in INTERACTIVE_PAGES.items() if page != INTERACTIVE_PAGE for name in names}
    assert on_chapters == set(INTERACTIVE)
    for page, names in INTERACTIVE_PAGES.items():
        text = (HTML / page).read_text()
        assert [name for name in names if f'id="posenc-{name}"' not in text] == [], page


@pytest.mark.parametrize("page_path", list(INTERACTIVE_PAGES))
def test_interactive_figures_draw_offline_and_follow_their_sliders(server, browser, page_path):
    """Each posenc.interactive figure draws with the book's own plotly.js (every request that leaves the
    machine is blocked), and moving its slider changes the figure's data and its label: in the gallery
    and on the chapter pages."""
    visit = PageVisit(browser, f"{server}/{page_path}")
    try:
        page = visit.page
        for name in INTERACTIVE_PAGES[page_path]:
            root = f"#posenc-{name}"
            page.wait_for_selector(f"{root}[data-drawn]", timeout=20_000)
            read = f"""() => {{
                const root = document.querySelector("{root}");
                const plot = root.querySelector(".posenc-plot");
                return {{label: root.querySelector("output").textContent,
                         data: JSON.stringify(plot.data.map(t => [t.x, t.y, t.z])),
                         svg: plot.querySelectorAll(".main-svg").length}};
            }}"""
            before = page.evaluate(read)
            assert before["svg"] > 0, f"{name}: plotly drew nothing"
            last = page.eval_on_selector(f"{root} input", "e => e.max")
            page.eval_on_selector(f"{root} input", """(e, value) => {
                e.value = value; e.dispatchEvent(new Event("input", {bubbles: true})); }""", last)
            after = page.evaluate(read)
            assert after["label"] != before["label"], f"{name}: the slider's label did not change"
            assert after["data"] != before["data"], f"{name}: the figure did not change with its slider"
        assert visit.errors == [] and visit.blocked == [] and visit.failed == []
    finally:
        visit.close()
