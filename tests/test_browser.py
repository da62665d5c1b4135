"""The built book in a real browser: every page of the toc, as a reader sees it.

Run by ``make browser`` (part of ``make test``) after ``make book``. Needs Chromium: Debian's
``chromium`` (``apt-get install chromium``, as ``.ci/run`` does) or any path in ``POSENC_CHROMIUM``.
Without one the tests are skipped locally and fail in CI (``CI`` set), so CI can never pass them by
skipping. Every request that leaves 127.0.0.1 is blocked and counted as a failure: the book must read the
same offline. Screenshots of two pages are written to ``_build/browser/``.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
import urllib.parse
from pathlib import Path

import pytest
import yaml

from notebook_tools import ROOT, toc_files

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
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")


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
    binder = [link for link in links if link.startswith("https://mybinder.org")]
    assert binder == [f"https://mybinder.org/v2/gh/{owner_repo}/main?urlpath=tree/{notebook}"]
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
