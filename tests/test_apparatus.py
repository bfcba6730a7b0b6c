"""The book-wide apparatus, checked on the sources: numbered figures with captions and alt text,
equations and figures that are referred to, colour-blind-safe palettes, every chapter's box of common
mistakes linked to its section of the appendix, and a dependency map that agrees with the code."""

from __future__ import annotations

import ast
import re

import nbformat
import pytest

from grader.book import deps
from grader.book.stage import solution_modules
from grader.course import Course

COURSE = Course.here()
CHAPTERS = COURSE.chapters()
APPENDIX = COURSE.book / "mistakes.ipynb"

EQ_LABEL = re.compile(r"\$\$\s*\(([^)\s]+)\)")
EQ_REF = re.compile(r"\{eq\}`([^`]+)`")
NUMREF = re.compile(r"\{numref\}`(?:[^`<]*<)?([^`>]+)>?`")
LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)
# Colour maps that are not perceptually ordered or that separate red from green; literal red/green.
BAD_CMAP = re.compile(r"""["'](jet|rainbow|gist_rainbow|nipy_spectral|hsv|Spectral|RdYlGn|PiYG|PRGn|RdGn)(_r)?["']""")
BAD_COLOUR = re.compile(r"""(colou?r|c|fc|ec|facecolor|edgecolor)\s*=\s*["'](red|green|r|g|lime)["']""")


def markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def book_text() -> str:
    parts = [p.read_text() for p in COURSE.book.glob("*.md")]
    parts += [markdown(nbformat.read(p, as_version=4)) for p in COURSE.book.rglob("*.ipynb")]
    return "\n".join(parts)


def figure_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and "figure" in c.metadata.get("mystnb", {})]


@pytest.fixture(scope="module")
def notebooks():
    return {ch.id: nbformat.read(ch.notebook, as_version=4) for ch in CHAPTERS}


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.id)
def test_figures_are_named_captioned_and_described(ch, notebooks):
    cells = figure_cells(notebooks[ch.id])
    assert len(cells) >= 2, f"{ch.id}: its figures need mystnb figure metadata (caption, name, alt)"
    for cell in cells:
        meta = cell.metadata["mystnb"]
        name = meta["figure"].get("name", "")
        assert name.startswith(f"fig-{ch.slug}-"), f"{ch.id}: figure name {name!r} should start fig-{ch.slug}-"
        assert len(meta["figure"].get("caption", "")) >= 20, f"{name}: caption too short"
        alt = meta.get("image", {}).get("alt", "")
        assert len(alt) >= 40 and "`" not in alt and "$" not in alt, f"{name}: alt text must describe the figure"


def test_every_figure_and_equation_is_referred_to(notebooks):
    text = book_text()
    names = [c.metadata["mystnb"]["figure"]["name"] for nb in notebooks.values() for c in figure_cells(nb)]
    assert len(names) == len(set(names)), "figure names must be unique"
    cited = set(NUMREF.findall(text))
    assert not [n for n in names if n not in cited], \
        f"figures never referred to with {{numref}}: {[n for n in names if n not in cited]}"
    labels = EQ_LABEL.findall(text)
    assert len(labels) >= len(CHAPTERS), "every chapter should number its key equations"
    assert len(labels) == len(set(labels)), "equation labels must be unique across the book"
    referenced = set(EQ_REF.findall(text))
    assert not [lb for lb in labels if lb not in referenced], \
        f"equations never referred to with {{eq}}: {[lb for lb in labels if lb not in referenced]}"
    assert referenced <= set(labels), f"references to no equation: {referenced - set(labels)}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.id)
def test_palettes_are_colour_blind_safe(ch, notebooks):
    code = [c.source for c in notebooks[ch.id].cells if c.cell_type == "code"]
    setup = code[0]
    assert re.search(r"""set_theme\([^)]*palette\s*=\s*["']colorblind["']""", setup), \
        f"{ch.id}: the setup cell should set seaborn's colour-blind palette"
    for src in code:
        assert not BAD_CMAP.search(src), f"{ch.id}: colour map {BAD_CMAP.search(src).group(0)} is not safe"
        assert not BAD_COLOUR.search(src), f"{ch.id}: {BAD_COLOUR.search(src).group(0)}: use the palette"


def test_appendix_collects_every_chapters_mistakes(notebooks):
    appendix = nbformat.read(APPENDIX, as_version=4)
    labels = set(LABEL.findall(markdown(appendix)))
    assert "appendix-mistakes" in labels
    for ch in CHAPTERS:
        assert f"mistakes-{ch.slug}" in labels, f"the appendix has no section for {ch.id}"
        boxes = [c.source for c in notebooks[ch.id].cells
                 if c.cell_type == "markdown" and "Common mistakes in popular explanations" in c.source]
        assert len(boxes) == 1, f"{ch.id}: one box of common mistakes expected"
        assert re.search(rf"\{{ref\}}`[^`<]+<mistakes-{ch.slug}>`", boxes[0]), \
            f"{ch.id}: the box should link to the appendix"
    code = [c.source for c in appendix.cells if c.cell_type == "code"]
    assert sum("assert" in src for src in code) >= 2 * len(CHAPTERS), "each mistake needs a check to run"
    for src in code:
        assert "solutions" not in src and "grader" not in src, "the appendix's checks must run on their own"
    assert all(not c.get("outputs") for c in appendix.cells if c.cell_type == "code")


def _imported_chapters(slug: str) -> set[str]:
    """Chapters whose reference module this chapter's reference or case generators import, directly or not."""
    by_slug = {ch.slug: ch.id for ch in CHAPTERS}
    return {by_slug[p.stem] for p in solution_modules(COURSE, slug)
            if p.parent.name == "solutions" and p.stem in by_slug and p.stem != slug}


def test_dependency_map_agrees_with_the_code():
    graph = deps.load(COURSE)
    ancestors = deps.ancestors(graph)
    for ch in CHAPTERS:
        missing = _imported_chapters(ch.slug) - ancestors[ch.id]
        assert not missing, f"{ch.id}'s reference imports {missing}, which the map does not show it building on"
        if ch.number > 1:
            assert graph[ch.id], f"{ch.id} builds on nothing?"
    assert deps.reduced(graph)["ch05_multihead"] == ["ch04_masks"], "edges implied by others are not drawn"
    svg = deps.draw(COURSE, graph)
    assert svg == deps.draw(COURSE, graph), "the map must be reproducible byte for byte (cache, mtimes)"
    assert svg.count(b"<path") >= len(CHAPTERS)
    alt = deps.describe(COURSE, graph)
    assert "chapter 9 builds on 7 and 8" in alt


def test_dependency_map_rejects_a_later_or_unknown_chapter(tmp_path):
    import shutil

    root = tmp_path / "course"
    shutil.copytree(COURSE.root / "book", root / "book", ignore=shutil.ignore_patterns("*.ipynb_checkpoints"))
    copy = Course(root)
    text = (root / "book" / deps.DEPENDENCIES).read_text()
    (root / "book" / deps.DEPENDENCIES).write_text(text.replace("ch02_qkv: [ch01_rnn_bottleneck]",
                                                                "ch02_qkv: [ch03_scaling]"))
    with pytest.raises(deps.BadDependencies, match="ch02_qkv cannot build on 'ch03_scaling'"):
        deps.load(copy)
    (root / "book" / deps.DEPENDENCIES).write_text(text.replace("ch09_flash:", "ch10_nope: []\nch09_flash:"))
    with pytest.raises(deps.BadDependencies, match="ch10_nope"):
        deps.load(copy)


def test_links_to_titles_with_maths_carry_their_own_text():
    """{doc}`ch03_scaling/scaling` or {ref}`label` prints the target's title as plain text, and a title
    with maths ("Why $\\sqrt{d_k}$") would show raw TeX: such links must give their own text."""
    sources = list(COURSE.book.glob("*.md")) + list(COURSE.book.rglob("*.ipynb"))
    texts = {p: (markdown(nbformat.read(p, as_version=4)) if p.suffix == ".ipynb" else p.read_text()) for p in sources}
    titled = {ch.id for ch in CHAPTERS if "$" in deps.chapter_title(ch.notebook)}
    labels = {m.group(1) for text in texts.values()
              for m in re.finditer(r"^\(([\w-]+)\)=\s*\n#+ [^\n]*\$", text, re.M)}
    found = []
    for text in texts.values():
        found += [m.group(0) for m in re.finditer(r"\{doc\}`(?:\.\./)?(ch\d\d_\w+)/\w+`", text) if m.group(1) in titled]
        found += [m.group(0) for m in re.finditer(r"\{ref\}`([\w-]+)`", text) if m.group(1) in labels]
    assert not found, "give these links a text, {doc}`chapter 3 <../ch03_scaling/scaling>`:\n" + "\n".join(found)


# ---------------------------------------------------------------------------------------------------
# claims are computed: glued numbers and claim cells (see the README, "Claims are computed")

GLUE_ROLE = re.compile(r"\{glue(?::[a-z]+)?\}`([^`:]+)(?::[^`]*)?`")
PAGES = [*((ch.id, ch.notebook) for ch in CHAPTERS), ("mistakes", APPENDIX)]


def glued_names(source: str) -> list[str]:
    """The names a cell glues: ``glue("name", ...)``, an f-string's fields read as wildcards (``*``)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "glue" \
                and node.args:
            name = node.args[0]
            if isinstance(name, ast.Constant):
                names.append(str(name.value))
            elif isinstance(name, ast.JoinedStr):
                names.append("".join(v.value if isinstance(v, ast.Constant) else "*" for v in name.values))
    return names


def claim_messages(source: str) -> list[str]:
    """The messages of the cell's asserts (literal or f-string text)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert) and node.msg is not None:
            msg = node.msg
            if isinstance(msg, ast.Constant):
                found.append(str(msg.value))
            elif isinstance(msg, ast.JoinedStr):
                found.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in msg.values))
    return found


@pytest.mark.parametrize("name, path", PAGES, ids=[p[0] for p in PAGES])
def test_claims_about_demos_are_asserted_and_numbers_glued(name, path):
    nb = nbformat.read(path, as_version=4)
    claims = [c for c in nb.cells if c.cell_type == "code" and "claim" in c.metadata.get("tags", [])]
    assert claims, f"{name}: no claim cell: assert what the prose says of its demos (tag a code cell `claim`)"
    defined: list[str] = []
    for cell in claims:
        assert not cell.metadata.get("nbgrader"), f"{name}: a claim cell is not an exercise or a test"
        messages, glued = claim_messages(cell.source), glued_names(cell.source)
        assert any(m.startswith("claim") for m in messages) or glued, \
            f"{name}: a claim cell asserts a claim (its message starts 'claim') or glues a number: {cell.source[:80]}"
        defined += glued
    other = [c for c in nb.cells if c.cell_type == "code" and c not in claims and glued_names(c.source)]
    assert not other, f"{name}: glue only in claim cells (students' notebooks have no myst_nb)"
    literal = [g for g in defined if "*" not in g]
    assert len(literal) == len(set(literal)), f"{name}: a glue name defined twice: {sorted(literal)}"
    patterns = [re.compile(re.escape(g).replace(r"\*", ".+") + "$") for g in defined]
    used = set(GLUE_ROLE.findall(markdown(nb)))
    missing = sorted(u for u in used if not any(p.match(u) for p in patterns))
    assert not missing, f"{name}: glued in the text but never computed: {missing}"
    prefix = "app-" if name == "mistakes" else name[:4] + "-"
    assert all(g.startswith(prefix) for g in defined), f"{name}: glue names start {prefix!r}"


PLAIN_HEADINGS = CHAPTERS


@pytest.mark.parametrize("path", [ch.notebook for ch in PLAIN_HEADINGS] + [APPENDIX], ids=lambda p: p.stem)
def test_headings_hold_no_tex(path):
    """Headings become the sidebar, the page contents, tab titles and search results, where MathJax does not
    run: they are plain text with Unicode (O(T²), √d_k), never $...$ (every chapter and the appendix)."""
    nb = nbformat.read(path, as_version=4)
    headings = [line for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()
                if re.match(r"#+ ", line)]
    assert headings and not [h for h in headings if "$" in h or "\\" in h], [h for h in headings if "$" in h]
