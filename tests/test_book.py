"""The published book: built from the staged student view, it shows the chapters' figures and never
leaks a solution, a hidden test or a marker anywhere under _build/site (HTML, _sources, search index,
downloads, the Chinese site under _build/site/html/zh). The student release is made by nbgrader and holds
stubs, not answers. The Chinese site shares the English one's code cells, outputs and figures."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import nbformat
import pytest

from grader.book.view import MARKERS, student_view
from grader.cells import exercises, is_claim, solution_regions, split_hidden
from grader.course import Course

from .conftest import JUPYTERHUB, SITE, STUDENT_REPO

# the sample submissions are made from the student release: made once per test run (conftest)
pytestmark = pytest.mark.usefixtures("release")

COURSE = Course.here()
CHAPTERS = COURSE.chapters()
MIN_LINE = 12  # shorter lines ("return out") are too common to mean anything


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def readable_text(path: Path) -> str:
    raw = path.read_text(errors="replace")
    if path.suffix == ".html":
        # syntax highlighting splits code into spans: compare the text a reader sees
        return normalise(html.unescape(re.sub(r"<[^>]+>", "", raw))) + "\n" + raw
    if path.suffix == ".ipynb" or path.name.endswith(".ipynb.txt"):
        try:
            nb = json.loads(raw)
            parts = [c.get("source", "") if isinstance(c.get("source"), str) else "".join(c.get("source", []))
                     for c in nb.get("cells", [])]
            return normalise("\n".join(parts)) + "\n" + raw
        except json.JSONDecodeError:
            return raw
    return raw


def secrets() -> set[str]:
    """Lines only instructors may see: solution regions, hidden tests and the solutions modules, minus
    whatever the student view legitimately shows (docstrings, signatures)."""
    found: set[str] = set()
    public: set[str] = set()
    for ch in CHAPTERS:
        nb = nbformat.read(ch.notebook, as_version=4)
        view = student_view(nb, label=ch.id)
        for cell in view.cells:
            public.update(line.strip() for line in cell.source.splitlines())
        for ex in exercises(nb):
            for region in solution_regions(ex.solution.source):
                found.update(line.strip() for line in region.splitlines())
            for cell in ex.tests:
                found.update(line.strip() for line in split_hidden(cell.source)[1].splitlines())
        module = COURSE.root / "solutions" / f"{ch.slug}.py"
        found.update(line.strip() for line in module.read_text().splitlines() if len(line.strip()) >= 25)
    # a line the student view shows (whole, or inside a longer line: a signature on one line) is public
    shown = "\n".join(normalise(line) for line in public)
    candidates = {normalise(s) for s in found if len(s) >= MIN_LINE and not s.startswith("#")}
    return {s for s in candidates if s not in shown}


def test_every_chapter_page_exists_with_its_figures(site):
    for ch in CHAPTERS:
        page = site / ch.folder.name / f"{ch.slug}.html"
        assert page.is_file(), f"no page for {ch.id}"
        text = page.read_text()
        images = re.findall(r'<img[^>]+src="([^"]+)"', text)
        figures = [src for src in images if "_images/" in src]
        assert len(figures) >= 3, f"{ch.id}: expected the demos' figures, found {figures}"
        for src in figures:
            assert (page.parent / src).resolve().is_file(), f"{ch.id}: missing image {src}"
        assert "NotImplementedError" in text, f"{ch.id}: the published page should show the exercise stubs"


def test_front_matter_pages_are_built(site):
    for page in ("intro.html", "glossary.html", "bibliography.html"):
        assert (site / page).is_file(), page
    assert "自注意力" in (site / "glossary.html").read_text()
    assert "Vaswani" in (site / "bibliography.html").read_text()


def test_nothing_under_the_site_leaks_solutions_or_hidden_tests(site):
    hidden = secrets()
    assert len(hidden) > 10, "the leak scan found too few secret lines to be meaningful"
    files = [p for p in site.parent.rglob("*") if p.is_file()
             and p.suffix not in {".png", ".jpg", ".svg", ".woff", ".woff2", ".ttf", ".eot", ".ico", ".gif"}]
    assert any(p.name == "searchindex.js" for p in files)
    leaks = []
    for path in files:
        text = readable_text(path)
        leaks += [f"{path.relative_to(COURSE.root)}: marker {m!r}" for m in MARKERS if m in text]
        leaks += [f"{path.relative_to(COURSE.root)}: {line[:60]!r}" for line in hidden if line in text]
        for word in ("grader.checks", "solutions.cases", "from solutions"):
            if word in text:
                leaks.append(f"{path.relative_to(COURSE.root)}: {word!r}")
    assert not leaks, "\n".join(leaks[:40])


def _code_blocks(page: Path) -> list[str]:
    return [normalise(html.unescape(re.sub(r"<[^>]+>", "", m)))
            for m in re.findall(r'<div class="highlight[^"]*"><pre>(.*?)</pre>', page.read_text(), flags=re.S)]


def test_the_chinese_site_has_every_page_with_the_same_code_outputs_and_figures(site):
    zh = site / "zh"
    english = sorted(p.relative_to(site) for p in site.rglob("*.html")
                     if p.relative_to(site).parts[0] not in ("zh", "_static"))
    assert english and all((zh / p).is_file() for p in english), [p for p in english if not (zh / p).is_file()]
    for ch in CHAPTERS:
        en_page, zh_page = site / ch.id / f"{ch.slug}.html", zh / ch.id / f"{ch.slug}.html"
        text = zh_page.read_text()
        assert '<html lang="zh-CN"' in text, f"{ch.id}: the Chinese page is not lang=zh-CN"
        assert re.search(r"[\u4e00-\u9fff]{20}", re.sub(r"<[^>]+>", "", text)), f"{ch.id}: no Chinese prose"
        assert _code_blocks(zh_page) == _code_blocks(en_page), f"{ch.id}: the code cells or outputs differ"
        figures = lambda page: sorted(re.findall(r'src="[^"]*_images/([^"]+)"', page.read_text()))  # noqa: E731
        assert figures(zh_page) == figures(en_page), f"{ch.id}: the figures differ"
        for name in figures(zh_page):
            assert (zh / "_images" / name).read_bytes() == (site / "_images" / name).read_bytes()
        assert 'class="admonition note lang-note"' in text, f"{ch.id}: no note that the notebook stays English"
        # a translated display equation is dropped by Sphinx's i18n pass and shows as \[::\] (review_zh R1)
        assert not re.search(r"\\\[\s*::\s*\\\]", text), f"{ch.id}: a display equation renders as '::'"
        displays = lambda page: page.read_text().count('class="math notranslate nohighlight"')  # noqa: E731
        assert displays(zh_page) == displays(en_page), f"{ch.id}: the display equations differ"
        assert f'href="../../{ch.id}/{ch.slug}.html"' in text and \
            f'href="../zh/{ch.id}/{ch.slug}.html"' in en_page.read_text(), f"{ch.id}: no switch between the two"
    appendix = (zh / "mistakes.html").read_text()  # its helper cells are hidden: myst-nb's toggle speaks Chinese
    assert "显示代码" in appendix and "Show code cell" not in appendix, "the Chinese appendix's toggles are English"


# review_zh R3: the themes' tooltips, buttons and landmarks, left English by their catalogs or templates
_UI_ATTRIBUTE = re.compile(r'\b(?:title|aria-label|data-bs-title|placeholder)="([^"]*)"')


def _interface_english(page: Path) -> list[str]:
    """What a Chinese page's interface says in English: every tooltip or accessible name (a citation's title, the
    reference itself, and the switch to the English page aside) and every text outside the article (code, keys,
    file types and the switch's "English" aside) made of Latin words with no Chinese."""
    body = page.read_text().partition("<body")[2]
    found = []
    for tag in re.findall(r"<[a-z][^>]*>", body):
        if "bibliography.html#" in tag or 'href="#id' in tag or "lang-switch" in tag:
            continue
        found += [v for v in map(html.unescape, _UI_ATTRIBUTE.findall(tag))
                  if re.search(r"[A-Za-z]{3}", v) and not re.search(r"[\u4e00-\u9fff]", v)]
    outside = re.sub(r"<article\b.*?</article>|<script\b.*?</script>|<style\b.*?</style>|<code\b.*?</code>"
                     r"|<kbd\b.*?</kbd>|<a class=\"btn lang-switch\".*?</a>|<title>.*?</title>", "", body, flags=re.S)
    found += [t.strip() for t in re.findall(r">([^<>]*)<", outside)
              if re.search(r"[A-Za-z]{3}", t) and not re.search(r"[\u4e00-\u9fff]", t)
              and not re.fullmatch(r"\s*\.\w+\s*", t)]  # the downloads' file types: .ipynb, .pdf
    return found


def test_the_chinese_interface_has_no_english(site):
    from grader.book.locales import LANGUAGES

    wording = LANGUAGES["zh_CN"].interface
    pages = sorted(p for p in (site / "zh").rglob("*.html") if "_static" not in p.parts)
    assert len(pages) >= 18
    left = {}
    for page in pages:
        for text in _interface_english(page):
            left.setdefault(text, []).append(page.relative_to(site).as_posix())
    assert not left, "English in the Chinese interface:\n" + "\n".join(
        f"{text!r} ({len(where)} pages, {where[0]}...)" for text, where in sorted(left.items()))
    chapter = (site / "zh" / CHAPTERS[1].id / f"{CHAPTERS[1].slug}.html").read_text()
    # sphinx-book-theme's zh_CN catalog words the print button in Taiwanese usage (列印成 PDF)
    assert f'title="{wording["Print to PDF"]}"' in chapter and "列印" not in chapter
    for english in ("Link to this heading", "Link to this equation", "Toggle primary sidebar", "Color mode"):
        assert f'"{wording[english]}"' in chapter, english
    # sphinx-togglebutton's hint on the folded answers, which its script writes into the page ("Click to show")
    hints = {h for p in pages for h in re.findall(r"let toggleHint(?:Show|Hide) = '([^']*)'", p.read_text())}
    assert hints == {LANGUAGES["zh_CN"].words["click to show"], LANGUAGES["zh_CN"].words["click to hide"]}, hints
    english_page = (site / CHAPTERS[1].id / f"{CHAPTERS[1].slug}.html").read_text()
    assert 'title="Link to this heading"' in english_page and 'title="Toggle primary sidebar"' in english_page


# review_zh R4: the search page's script, run on the built index (Node, or the one Playwright ships)
_SEARCH_HARNESS = r"""
const fs = require("fs"), vm = require("vm"), path = require("path");
const [site, ...queries] = process.argv.slice(2);
const ctx = {console, _: (s) => s, _ready() {}, localStorage: {setItem() {}}, DOCUMENTATION_OPTIONS: {},
  SPHINX_HIGHLIGHT_ENABLED: false,
  document: {readyState: "loading", addEventListener() {}, getElementById() { return null; }}};
ctx.window = ctx;
vm.createContext(ctx);
for (const file of ["_static/searchtools.js", "_static/language_data.js", "searchindex.js"])
  vm.runInContext(fs.readFileSync(path.join(site, file), "utf8"), ctx, {filename: file});
console.log(vm.runInContext(`JSON.stringify(Object.fromEntries(${JSON.stringify(queries)}.map((q) => {
  const [, terms, excluded] = Search._parseQuery(q);
  const docs = Search.performTermsSearch(terms, excluded).map((r) => r[0]);
  return [q, {terms: [...terms], docs: [...new Set(docs)].sort()}];
})))`, ctx));
"""


def _node() -> str | None:
    import shutil

    found = shutil.which("node")
    if found:
        return found
    try:
        import playwright
    except ImportError:
        return None
    bundled = Path(playwright.__file__).parent / "driver" / "node"
    return str(bundled) if bundled.is_file() else None


def search(site_dir: Path, queries: list[str], tmp_path: Path) -> dict:
    """Each query's search terms and the pages it finds, by the site's own searchtools.js, language_data.js
    (the language's splitter and stemmer) and searchindex.js."""
    node = _node()
    if node is None:
        pytest.skip("no Node.js to run the search page's script")
    harness = tmp_path / "search.js"
    harness.write_text(_SEARCH_HARNESS)
    result = subprocess.run([node, str(harness), str(site_dir), *queries], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_the_chinese_search_finds_latin_and_han_written_together(site, tmp_path):
    """"KV缓存" finds what "KV 缓存" finds (Sphinx's splitter made it one word no entry matches), and a Han
    run that the index holds as two words ("注意力机制") finds the pages that have both."""
    pairs = [("KV缓存", "KV 缓存"), ("在线softmax", "在线 softmax"), ("softmax函数", "softmax 函数"),
             ("GPU显存", "GPU 显存"), ("注意力机制", "注意力 机制")]
    found = search(site / "zh", [q for pair in pairs for q in pair], tmp_path)
    for joined, spaced in pairs:
        assert found[spaced]["docs"], f"{spaced!r} finds nothing"
        assert found[joined] == found[spaced], (joined, found[joined], spaced, found[spaced])
    assert found["KV缓存"]["terms"] == ["kv", "缓存"]
    assert "language_data.js" in (site / "zh" / "search.html").read_text()
    # the English search is Sphinx's own
    assert "splitQuery" not in (site / "_static" / "language_data.js").read_text()


def test_download_offers_the_released_student_notebook(site):
    for ch in CHAPTERS:
        released = COURSE.build / "release" / ch.id / ch.notebook.name
        for root in (site, site / "zh"):
            download = root / "_sources" / ch.id / ch.notebook.name
            assert download.read_bytes() == released.read_bytes(), f"{ch.id}: the download is not the release"
        download = site / "_sources" / ch.id / ch.notebook.name
        assert "NotImplementedError" in download.read_text()
        page = (site / ch.folder.name / f"{ch.slug}.html").read_text()
        assert f"_sources/{ch.folder.name}/{ch.slug}.ipynb" in page, "no download link to the notebook"


def test_the_published_book_has_no_placeholder_links(site):
    """Built without --student-repo, the book has no launch buttons, hence nothing pointing at examples."""
    for page in sorted(site.rglob("*.html")):
        hrefs = re.findall(r'href="([^"]+)"', page.read_text())
        placeholders = [h for h in hrefs if re.search(r"example\.(com|edu|org)|example-course|/ORG/REPO", h)]
        assert not placeholders, (page, placeholders)
    for ch in CHAPTERS:
        page = (site / ch.id / f"{ch.slug}.html").read_text()
        assert "mybinder.org" not in page and "colab.research.google.com" not in page, ch.id


def test_launch_buttons_open_the_student_copy(launch_site):
    owner_repo = STUDENT_REPO.removeprefix("https://github.com/")
    release = COURSE.build / "release"
    footer = (launch_site / "intro.html").read_text()
    assert f'href="{STUDENT_REPO}"' in footer, "the footer links the repository"
    for ch in CHAPTERS:
        page = (launch_site / ch.id / f"{ch.slug}.html").read_text()
        links = [urlsplit(html.unescape(h)) for h in re.findall(r'href="([^"]+)"', page)]
        path = f"{ch.id}/{ch.notebook.name}"
        colab = [u for u in links if u.netloc == "colab.research.google.com"]
        binder = [u for u in links if u.netloc == "mybinder.org"]
        hub = [u for u in links if JUPYTERHUB.endswith(u.netloc) and u.path.endswith("/git-pull")]
        assert [u.path for u in colab] == [f"/github/{owner_repo}/blob/main/{path}"], (ch.id, colab)
        assert len(binder) == 1 and binder[0].path == f"/v2/gh/{owner_repo}/main", (ch.id, binder)
        assert parse_qs(binder[0].query)["urlpath"][0].endswith("/" + path), binder
        assert len(hub) == 1, (ch.id, hub)
        query = parse_qs(hub[0].query)
        assert query["repo"] == [STUDENT_REPO] and query["urlpath"][0].endswith("/" + path), query
        # the launch buttons' repository is _build/release/: what they open is the student notebook
        assert (release / path).is_file(), path
    assert (release / "requirements.txt").is_file() and (release / "README.md").is_file()


def test_release_holds_stubs_and_visible_tests_only(release):
    """``release``: ``grader release`` as the README runs it (once per test run: conftest)."""
    for ch in CHAPTERS:
        released = COURSE.build / "release" / ch.id / ch.notebook.name
        nb = nbformat.read(released, as_version=4)
        for ex in exercises(nb):
            assert "raise NotImplementedError()" in ex.solution.source, ex.name
            assert not solution_regions(ex.solution.source)
            for cell in ex.tests:
                assert "assert" in cell.source, f"{ex.name}: the student should see visible asserts"
        text = nbformat.writes(nb)
        for m in MARKERS:
            assert m not in text
        assert "grader.checks" not in text and "from solutions" not in text
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
        assert not [c.id for c in nb.cells if is_claim(c)] and "claim (ch" not in text and "myst_nb" not in text, \
            f"{ch.id}: the book's claim cells stay out of the student notebook"


def test_instructor_preview_shows_solutions_and_stays_out_of_the_site(site):
    result = subprocess.run([sys.executable, "-m", "grader", "book", "--instructor"], cwd=COURSE.root,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "never publish" in result.stdout
    preview = COURSE.build / "instructor" / "html"
    for ch in CHAPTERS:
        text = readable_text(preview / ch.folder.name / f"{ch.slug}.html")
        assert f"from {ch.solutions_module} import" in text and "BEGIN HIDDEN TESTS" in text
    assert not (SITE.parent / "instructor").exists() and preview.resolve() not in SITE.resolve().parents


def test_every_figure_output_is_a_numbered_figure(site):
    """Executed, each figure cell shows exactly its one figure, and no image is left without a caption."""
    for ch in CHAPTERS:
        nb = nbformat.read(COURSE.build / "stage" / ch.id / ch.notebook.name, as_version=4)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            images = [o for o in cell.outputs if {"image/png", "image/svg+xml"} & set(o.get("data", {}))]
            named = "figure" in cell.metadata.get("mystnb", {})
            assert named or not images, f"{ch.id} cell {index}: an image without figure metadata"
            if named:
                assert len(images) == 1 and len(cell.outputs) == 1, \
                    f"{ch.id} cell {index}: a figure cell must output its one figure and nothing else"

