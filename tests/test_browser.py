"""The published book in a real browser: headless Chromium (Debian's ``chromium``, installed by
``make system-deps``) driven by Playwright opens the site served over HTTP, with the network outside
the site blocked, and checks what a reader sees: no console errors, rendered maths, loaded figures with
alt text and numbered captions, the table of contents, the downloads and the search page.

A full-page screenshot of every page is kept under ``_build/screenshots/`` for review.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from grader.course import Course

COURSE = Course.here()
CHAPTERS = COURSE.chapters()
SHOTS = COURSE.build / "screenshots"
FRONT = ["intro", "mistakes", "glossary", "bibliography", "instructors"]
# Visible text that means a formula was not typeset (code blocks excluded)
RAW_TEX = re.compile(r"\$\$|\\\(|\\\[|\\frac|\\sqrt|\\begin\{|\\mathrm|\\top|\\sum_")

# Text the reader sees outside code, maths and scripts, and every <img> with its state.
VISIBLE_TEXT_JS = """() => {
  const skip = new Set(['PRE', 'CODE', 'SCRIPT', 'STYLE', 'MJX-CONTAINER', 'TEXTAREA', 'NOSCRIPT']);
  const out = [];
  const walk = (node) => {
    if (node.nodeType === Node.TEXT_NODE) { out.push(node.textContent); return; }
    if (node.nodeType !== Node.ELEMENT_NODE || skip.has(node.tagName)) return;
    if (node.closest('.output') && node.tagName === 'PRE') return;
    for (const child of node.childNodes) walk(child);
  };
  walk(document.querySelector('article') || document.body);
  return out.join(' ');
}"""
# Display equations wider than the text column (their right part hides behind a scrollbar), and TeX errors.
WIDE_MATHS_JS = """() => Array.from(document.querySelectorAll('article mjx-container[display="true"]')).map(m => {
  const box = m.closest('.math-wrapper') || m.parentElement;
  return {over: m.scrollWidth - box.clientWidth,
          text: (m.querySelector('mjx-assistive-mml') || m).textContent.slice(0, 60)};
}).filter(x => x.over > 1)"""
IMAGES_JS = """() => Array.from(document.querySelectorAll('article img')).map(img => ({
  src: img.getAttribute('src'), alt: img.getAttribute('alt') || '', ok: img.complete && img.naturalWidth > 0,
  caption: (img.closest('figure') && img.closest('figure').querySelector('.caption-number'))
           ? img.closest('figure').querySelector('.caption-number').textContent.trim() : null}))"""


def chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    exe = chromium()
    if exe is None:
        pytest.skip("no chromium: `make system-deps` installs Debian's chromium (as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--disable-gpu", "--no-sandbox"])
        yield b
        b.close()


class Visit:
    """One page load: what the console said, which requests failed or left the site."""

    def __init__(self, browser, server: str, path: str):
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        origin = urlsplit(server).netloc

        def route(r):
            if urlsplit(r.request.url).netloc == origin or r.request.url.startswith("data:"):
                r.continue_()
            else:  # the book must work offline: nothing may be fetched from elsewhere
                self.errors.append(f"request outside the site: {r.request.url}")
                r.abort()

        self.page.route("**/*", route)
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.errors.append(f"failed: {r.url} {r.failure}"))
        self.page.on("response", lambda r: r.status >= 400 and self.errors.append(f"HTTP {r.status}: {r.url}"))
        self.page.goto(f"{server}/{path}", wait_until="networkidle")
        # MathJax typesets after load; wait for it where the page uses it
        self.page.wait_for_function(
            "() => !window.MathJax || (window.MathJax.startup && window.MathJax.startup.promise"
            " && (window.MathJax.startup.promise.then(() => window.__typeset = true), window.__typeset))",
            timeout=30_000)

    def screenshot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self):
        self.context.close()


def _page_path(name: str) -> str:
    for ch in CHAPTERS:
        if name == ch.id:
            return f"{ch.id}/{ch.slug}.html"
    return f"{name}.html"


@pytest.mark.parametrize("name", FRONT + [ch.id for ch in CHAPTERS])
def test_page_renders_in_a_browser(browser, server, name):
    visit = Visit(browser, server, _page_path(name))
    try:
        shot = visit.screenshot(name)
        assert shot.stat().st_size > 10_000, "the screenshot is blank"
        assert not visit.errors, "\n".join(visit.errors)
        page = visit.page
        text = page.evaluate(VISIBLE_TEXT_JS)
        raw = [text[max(m.start() - 60, 0):m.end() + 40] for m in RAW_TEX.finditer(text)]
        assert not raw, f"{name}: maths left as raw TeX: {raw[:5]}"
        if name not in ("bibliography", "instructors"):
            assert page.locator("mjx-container").count() > 0, f"{name}: MathJax typeset nothing"
        assert page.locator("mjx-merror").count() == 0, f"{name}: MathJax reports a TeX error"
        wide = page.evaluate(WIDE_MATHS_JS)
        assert not wide, f"{name}: equations wider than the text column at 1280 px (break them over lines): {wide}"
        images = page.evaluate(IMAGES_JS)
        for img in images:
            assert img["ok"], f"{name}: image {img['src']} did not load"
            alt = img["alt"].strip()
            assert len(alt) >= 20 and not re.search(r"\.(png|svg|jpe?g)$", alt), \
                f"{name}: image {img['src']} has no real alt text ({alt!r})"
        chapter = next((ch for ch in CHAPTERS if ch.id == name), None)
        if chapter is not None:
            figures = [img for img in images if img["caption"] is not None]
            assert len(figures) >= 2, f"{name}: expected numbered figures, found {len(figures)}"
            assert len(figures) == len(images), f"{name}: every figure needs a caption and a number"
            numbers = [img["caption"] for img in figures]
            assert all(n.startswith(f"Fig. {chapter.number}.") for n in numbers), numbers
            assert len(set(numbers)) == len(numbers), numbers
            equations = page.locator("span.eqno").all_inner_texts()
            assert equations, f"{name}: no numbered equations"
            assert all(re.match(rf"\({chapter.number}\.\d+\)", e.strip()) for e in equations), equations
    finally:
        visit.close()


def test_table_of_contents_lists_every_chapter(browser, server):
    visit = Visit(browser, server, "intro.html")
    try:
        links = visit.page.eval_on_selector_all(
            "nav.bd-links a", "els => els.map(a => [a.textContent.trim(), a.getAttribute('href')])")
        hrefs = [h for _, h in links]
        for ch in CHAPTERS:
            assert any(h.endswith(f"{ch.id}/{ch.slug}.html") for h in hrefs), f"{ch.id} missing from the TOC"
        titles = [t for t, h in links if "/" in h and h.split("/")[0].startswith("ch")]
        assert [t.split(".")[0] for t in titles] == [str(ch.number) for ch in CHAPTERS], titles
        for page in ("mistakes.html", "glossary.html", "bibliography.html", "instructors.html"):
            assert page in hrefs, f"{page} missing from the TOC"
    finally:
        visit.close()


def test_search_finds_softmax(browser, server):
    visit = Visit(browser, server, "search.html?q=softmax")
    try:
        visit.page.wait_for_selector("#search-results ul.search li", timeout=30_000)
        results = visit.page.eval_on_selector_all("#search-results ul.search li a",
                                                  "els => els.map(a => a.getAttribute('href'))")
        visit.screenshot("search-softmax")
        assert not visit.errors, "\n".join(visit.errors)
        assert any("ch02_qkv/qkv.html" in r for r in results), results
        assert len({r.split("#")[0] for r in results}) >= 5, "softmax should be found in many pages"
    finally:
        visit.close()


def test_download_button_serves_the_student_notebook(browser, server):
    ch = next(c for c in CHAPTERS if c.slug == "qkv")
    visit = Visit(browser, server, f"{ch.id}/{ch.slug}.html")
    try:
        href = visit.page.get_attribute(f"a[href$='_sources/{ch.id}/{ch.slug}.ipynb']", "href")
        assert href, "no download link"
        body = visit.page.request.get(f"{server}/{ch.id}/{href}").body()
        assert body == (COURSE.build / "release" / ch.id / ch.notebook.name).read_bytes()
    finally:
        visit.close()
