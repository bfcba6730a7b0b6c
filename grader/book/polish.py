"""Finish the built HTML for every screen: one small, idempotent rewrite per concern, applied to each page
after Sphinx wrote it (Sphinx rewrites only the pages that changed, so a page may be polished twice).

* plain-text titles: maths in the tab title, the chapter list, the page contents, previous/next links and
  the search index becomes Unicode text ("Why √d_k: ..."), which needs no MathJax (the bibliography,
  search and index pages load none);
* the landing page's tab title is the book's name once, every page has a meta description;
* figures open at full size (each image is a link to itself), load lazily, and an image far wider than
  the column is shown from a copy at twice the column's width (sharp on high-DPI screens, a fraction of
  the bytes), the link still opening the original;
* Chinese text is marked ``lang="zh-CN"`` (the stylesheet gives it a CJK font);
* every page links to the same page in the other languages (a switch in the page's header buttons and
  ``<link rel="alternate" hreflang>``); a translated page gets its figures' alt text from the catalogs, the
  themes' tooltips that their templates write in English in its language and, on a chapter, a note that the
  graded notebooks stay English;
* no Font Awesome script (``icons.css`` draws the icons), only the glyphs of its font that the themes'
  stylesheets draw, no sphinx-design assets on pages without its components and, outside the search page,
  none of the search scripts and index the theme loads for a search-as-you-type it leaves off;
* no source maps, and the themes' stylesheets without the rules for classes that no page or script of
  the site uses (most of Bootstrap).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from .icons import subset_icon_font

# An image wider than this (in pixels) is shown from a copy this wide: twice the widest column (~850 px)
SHOWN_WIDTH = 1760
_SUPERSCRIPT = str.maketrans("0123456789+-n", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻ⁿ")
_SYMBOLS = {
    "neq": "≠", "ne": "≠", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "cdot": "·", "times": "×",
    "to": "→", "rightarrow": "→", "infty": "∞", "sum": "Σ", "prod": "Π", "approx": "≈", "in": "∈",
    "ell": "ℓ", "odot": "⊙", "top": "ᵀ", "log": "log", "exp": "exp", "max": "max", "min": "min",
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "eta": "η",
    "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ",
    "omega": "ω", "Sigma": "Σ", "Delta": "Δ", "ldots": "…", "dots": "…", "mid": "|", "quad": " ",
}
_MATH_SPAN = re.compile(r'<span class="math notranslate nohighlight">\\\((.*?)\\\)</span>', re.S)
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]+")
_ZH_OPEN = '<span lang="zh-CN">'


def _group(tex: str, start: int) -> tuple[str, int]:
    """The braced group (or single token) at ``start``: its text and the index after it."""
    if start < len(tex) and tex[start] == "{":
        depth = 0
        for i in range(start, len(tex)):
            depth += {"{": 1, "}": -1}.get(tex[i], 0)
            if depth == 0:
                return tex[start + 1:i], i + 1
        return tex[start + 1:], len(tex)
    if start < len(tex) and tex[start] == "\\":
        m = re.match(r"\\[A-Za-z]+", tex[start:])
        if m:
            return m.group(0), start + m.end()
    return tex[start:start + 1], start + 1


def tex_to_text(tex: str) -> str:
    """Plain Unicode for the short maths of a title: ``\\sqrt{d_k}`` -> ``√d_k``, ``O(T^2)`` -> ``O(T²)``."""
    out, i = [], 0
    while i < len(tex):
        c = tex[i]
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", tex[i:])
            name, i = m.group(1), i + m.end()
            if name == "sqrt":
                arg, i = _group(tex, i)
                inner = tex_to_text(arg)
                out.append("√" + (inner if re.fullmatch(r"\w+", inner) else f"({inner})"))
            elif name == "frac":
                num, i = _group(tex, i)
                den, i = _group(tex, i)
                out.append(f"{tex_to_text(num)}/{tex_to_text(den)}")
            elif name in ("mathrm", "operatorname", "text", "mathbf", "mathcal", "boldsymbol", "mathit"):
                arg, i = _group(tex, i)
                out.append(tex_to_text(arg))
            elif name in ("left", "right", "big", "Big", "bigl", "bigr", "displaystyle"):
                continue
            elif name in (",", ";", ":", " "):
                out.append(" ")
            elif name == "!":
                continue
            else:
                out.append(_SYMBOLS.get(name, name))
        elif c == "^":
            arg, i = _group(tex, i + 1)
            inner = tex_to_text(arg)
            sup = inner.translate(_SUPERSCRIPT)
            out.append(inner if inner == "ᵀ" else sup if all(ch in "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻ⁿ" for ch in sup) else f"^{inner}")
        elif c in "{}":
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _plain_maths(fragment: str) -> str:
    return _MATH_SPAN.sub(lambda m: html.escape(tex_to_text(html.unescape(m.group(1))), quote=False), fragment)


def plain_titles(page: str) -> str:
    """Maths in the tab title and in every link's text (chapter list, contents, previous/next) as text."""
    page = re.sub(r"<title>(.*?)</title>",
                  lambda m: "<title>" + re.sub(r"\\\((.*?)\\\)", lambda t: tex_to_text(t.group(1)), m.group(1))
                  + "</title>", page, count=1, flags=re.S)
    page = re.sub(r"(<a\b[^>]*>)(.*?)(</a>)", lambda m: m.group(1) + _plain_maths(m.group(2)) + m.group(3),
                  page, flags=re.S)
    # the theme's printed table of contents is headed by the title as TeX without delimiters
    return re.sub(r'(<div id="jb-print-docs-body"[^>]*>\s*<h1>)(.*?)(</h1>)',
                  lambda m: m.group(0) if "\\" not in m.group(2) else
                  m.group(1) + html.escape(tex_to_text(html.unescape(m.group(2))), quote=False) + m.group(3),
                  page, count=1, flags=re.S)


def landing_title(page: str, book: str) -> str:
    """The landing page's tab title is the book's name once, not "<name> — <name>"."""
    return re.sub(r"<title>.*?</title>", f"<title>{html.escape(book)}</title>", page, count=1, flags=re.S)


def meta_description(page: str, description: str) -> str:
    if 'name="description"' in page:
        return page
    tag = f'<meta name="description" content="{html.escape(description)}" />'
    return re.sub(r"(<meta name=\"viewport\"[^>]*>)", lambda m: m.group(1) + "\n    " + tag, page, count=1)


def chinese(page: str) -> str:
    """Wrap each run of Chinese characters in the body's text (not in tags, scripts or styles)."""
    head, sep, body = page.partition("<body")
    if not sep:
        return page
    parts = re.split(r"(<script\b.*?</script>|<style\b.*?</style>|<[^>]+>)", body, flags=re.S)
    for k in range(0, len(parts), 2):  # even indices are text between tags
        if _CJK.search(parts[k]) and not (k > 0 and parts[k - 1] == _ZH_OPEN):
            parts[k] = _CJK.sub(lambda m: f"{_ZH_OPEN}{m.group(0)}</span>", parts[k])
    return head + sep + "".join(parts)


_CHAPTER_PAGE = re.compile(r"^ch\d\d_[^/]+/[^/]+\.html$")


def language_switch(page: str, rel: str, *, to_folder: str | None, label: str, hreflang: str, title: str) -> str:
    """A link to the same page in another language: into ``to_folder`` (``zh``) from the English site,
    out of it (``to_folder=None``) from a translation; ``rel`` is the page's path within its own site."""
    if 'class="btn lang-switch"' in page:
        return page
    depth = rel.count("/")
    href = "../" * depth + (f"{to_folder}/{rel}" if to_folder else f"../{rel}")
    link = (f'<a class="btn lang-switch" href="{href}" hreflang="{hreflang}" lang="{hreflang}" '
            f'title="{html.escape(title)}" aria-label="{html.escape(title)}">{html.escape(label)}</a>')
    page = page.replace('<div class="article-header-buttons">', f'<div class="article-header-buttons">\n{link}', 1)
    alternate = f'<link rel="alternate" hreflang="{hreflang}" href="{href}" />'
    return page.replace("</head>", f"    {alternate}\n  </head>", 1)


def translated_alts(page: str, alts: dict[str, str]) -> str:
    """Every image's alt text replaced by its translation (the browser tests fail a Chinese page whose
    figure kept an English one)."""
    def one(text: str) -> str:
        return html.escape(alts[html.unescape(text)]) if html.unescape(text) in alts else text

    return re.sub(r'(<img\b[^>]*?\balt=")([^"]*)(")', lambda m: m.group(1) + one(m.group(2)) + m.group(3), page)


def interface(page: str, wording: dict[str, str]) -> str:
    """The tooltips and accessible names that the themes' templates write in English ("Toggle primary sidebar")
    in the page's language: each ``title``, ``aria-label`` or ``data-bs-title`` that is exactly a string the
    language words (:attr:`.locales.Language.interface`)."""
    def one(m: re.Match) -> str:
        text = html.unescape(m.group(2))
        return f'{m.group(1)}="{html.escape(wording[text])}"' if text in wording else m.group(0)

    return re.sub(r'\b(title|aria-label|data-bs-title)="([^"]*)"', one, page)


def chapter_note(page: str, note: str, title: str) -> str:
    """The note under a translated chapter's title: the graded notebook is the English one."""
    if 'class="admonition note lang-note"' in page:
        return page
    box = (f'<div class="admonition note lang-note"><p class="admonition-title">{html.escape(title)}</p>'
           f"<p>{note}</p></div>")
    start = page.find('<article class="bd-article">')
    if start < 0:
        return page
    return page[:start] + re.sub(r"(<h1\b.*?</h1>)", lambda m: m.group(1) + box, page[start:], count=1, flags=re.S)


def _unwanted_script(tag: str, keep_search: bool, design: bool) -> bool:
    if "fontawesome.js" in tag or (not design and "design-tabs.js" in tag):
        return True
    return not keep_search and re.search(r"(searchtools|language_data|searchindex)\.js", tag) is not None


def drop_scripts(page: str, *, keep_search: bool) -> str:
    """No Font Awesome script; the search scripts on the search page only; sphinx-design's stylesheet and
    script on the pages that use its components only."""
    design = re.search(r'class="(?:[^"]* )?sd-', page) is not None
    page = re.sub(r"[ \t]*<script\b[^>]*\bsrc=\"[^\"]*\"[^>]*>\s*</script>\n?",
                  lambda m: "" if _unwanted_script(m.group(0), keep_search, design) else m.group(0), page)
    if not design:
        page = re.sub(r'[ \t]*<link rel="stylesheet" type="text/css" href="[^"]*sphinx-design\.min\.css[^"]*" />\n?',
                      "", page)
    return re.sub(r"[ \t]*<link rel=\"preload\" as=\"script\" href=\"[^\"]*fontawesome\.js[^\"]*\"\s*/?>\n?", "", page)


def _shown_copy(original: Path) -> Path | None:
    """A copy of ``original`` SHOWN_WIDTH pixels wide when it is wider (made once), else None."""
    from PIL import Image

    copy = original.with_name(f"{original.stem}-w{SHOWN_WIDTH}{original.suffix}")
    if copy.exists():
        return copy
    with Image.open(original) as img:
        if img.width <= SHOWN_WIDTH * 1.15:
            return None
        height = round(img.height * SHOWN_WIDTH / img.width)
        img.resize((SHOWN_WIDTH, height), Image.LANCZOS).save(copy, optimize=True)
    return copy


def figures(page: str, page_path: Path, full_size: str = "Open the figure at full size") -> str:
    """Every image under ``_images/`` becomes a link to its full-size file and loads lazily; an image far
    wider than the column is shown from a narrower copy."""
    def image(m: re.Match) -> str:
        tag = m.group(0)
        src = re.search(r'src="([^"]+)"', tag).group(1)
        if "loading=" in tag:
            return tag  # polished already
        original = (page_path.parent / src).resolve()
        new = tag
        if original.suffix == ".png" and original.is_file():
            copy = _shown_copy(original)
            if copy is not None:
                new = new.replace(f'src="{src}"', f'src="{src.rsplit("/", 1)[0]}/{copy.name}"')
        new = new.replace("<img ", '<img loading="lazy" decoding="async" ', 1)
        return f'<a class="figure-full" href="{src}" title="{html.escape(full_size)}">{new}</a>'

    return re.sub(r'<img\b[^>]*src="[^"]*_images/[^"]+"[^>]*>', image, page)


def searchindex(text: str) -> str:
    """The search index's titles in plain text (results show them where no MathJax runs)."""
    prefix, suffix = "Search.setIndex(", ")"
    if not (text.startswith(prefix) and text.rstrip().endswith(suffix)):
        return text
    data = json.loads(text[len(prefix):text.rstrip().rfind(suffix)])
    data["titles"] = [_plain_maths(t) for t in data.get("titles", [])]
    data["alltitles"] = {tex_to_text(k) if "\\" in k else k: v for k, v in data.get("alltitles", {}).items()}
    return prefix + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + suffix


def class_vocabulary(out_html: Path) -> set[str]:
    """Every class a page of the site has, and every word of its scripts (classes they may add)."""
    words: set[str] = set()
    for path in out_html.rglob("*.html"):
        for m in re.finditer(r'class="([^"]*)"', path.read_text(errors="replace")):
            words.update(m.group(1).split())
    for path in out_html.rglob("*.js"):
        words.update(re.findall(r"[A-Za-z_][\w-]*", path.read_text(errors="replace")))
    return words


def _closing(css: str, start: int) -> int:
    depth = 0
    for k in range(start, len(css)):
        depth += {"{": 1, "}": -1}.get(css[k], 0)
        if depth == 0:
            return k
    return len(css)


def purge_css(css: str, classes: set[str]) -> str:
    """``css`` without the selectors that name a class no page or script of the site uses (Bootstrap's
    utilities, Font Awesome's per-icon rules...); at-rules are kept, ``@media``/``@supports`` purged inside."""
    out, i = [], 0
    while i < len(css):
        j = css.find("{", i)
        if j < 0:
            out.append(css[i:])
            break
        head, k = css[i:j], _closing(css, j)
        body = css[j + 1:k]
        # a comment before a rule (a licence) is kept whole, never split into "selectors" at its commas
        comments = re.findall(r"/\*.*?\*/", head, flags=re.S)
        if comments:
            out.append("".join(comments) + "\n")
            head = re.sub(r"/\*.*?\*/", "", head, flags=re.S)
        if head.strip().startswith(("@media", "@supports", "@layer", "@container")):
            inner = purge_css(body, classes)
            if inner.strip():
                out.append(f"{head}{{{inner}}}")
        elif head.strip().startswith("@"):
            out.append(f"{head}{{{body}}}")
        else:
            kept = [sel for sel in head.split(",")
                    if all(c in classes for c in re.findall(r"\.(-?[_a-zA-Z][\w-]*)", sel))]
            if kept:
                out.append(f"{','.join(kept)}{{{body}}}")
        i = k + 1
    return "".join(out)


# The themes' stylesheets that ship far more than the book uses (Bootstrap 5 whole, in the first)
PURGED = ("styles/pydata-sphinx-theme.css", "styles/sphinx-book-theme.css", "mystnb.*.css", "basic.css", "pygments.css",
          "icons.css")


def purge_stylesheets(out_html: Path) -> None:
    classes = class_vocabulary(out_html)
    for pattern in PURGED:
        for path in (out_html / "_static").glob(pattern):
            css = path.read_text()
            purged = purge_css(css, classes)
            if purged != css:
                path.write_text(purged)


def drop_source_maps(static: Path) -> None:
    for path in static.rglob("*.map"):
        path.unlink()
    for path in list(static.rglob("*.js")) + list(static.rglob("*.css")):
        text = path.read_text(errors="surrogateescape")
        stripped = re.sub(r"\n?/[/*][#@] sourceMappingURL=[^\n]*", "", text)
        if stripped != text:
            path.write_text(stripped, errors="surrogateescape")


def polish_site(out_html: Path, *, book: str, description: str, landing: str, skip: set[str] = frozenset(),
                translations: list = (), language=None, alts: dict[str, str] | None = None,
                captions: dict[str, str] | None = None) -> None:
    """Polish every page of the site in ``out_html`` (the folders in ``skip``, other languages' sites,
    left alone). ``translations`` are the languages whose sites sit in ``out_html/<folder>/``; with
    ``language`` the site is that translation."""
    from .locales import ENGLISH

    for path in sorted(out_html.rglob("*.html")):
        parts = path.relative_to(out_html).parts
        if "_static" in parts or parts[0] in skip:
            continue
        rel = path.relative_to(out_html).as_posix()
        page = path.read_text()
        new = plain_titles(page)
        if rel == landing:
            new = landing_title(new, book)
        new = meta_description(new, description)
        new = drop_scripts(new, keep_search=path.name == "search.html" and path.parent == out_html)
        if language is None:
            new = figures(new, path)
            new = chinese(new)
            for other in translations:
                new = language_switch(new, rel, to_folder=other.folder, label=other.label,
                                      hreflang=other.html_lang, title=other.words["switch"])
        else:
            new = figures(new, path, language.words["full size"])
            new = language_switch(new, rel, to_folder=None, label=ENGLISH["label"], hreflang=ENGLISH["html_lang"],
                                  title=ENGLISH["switch"])
            new = translated_alts(new, alts or {})
            new = interface(new, language.interface or {})
            if _CHAPTER_PAGE.match(rel):
                new = chapter_note(new, language.note, language.words["note title"])
            for english, translated in (captions or {}).items():
                new = new.replace(f'<span class="caption-text">{html.escape(english)}</span>',
                                  f'<span class="caption-text">{html.escape(translated)}</span>')
        if new != page:
            path.write_text(new)
    index = out_html / "searchindex.js"
    if index.is_file():
        index.write_text(searchindex(index.read_text()))
    drop_source_maps(out_html / "_static")
    (out_html / "_static" / "scripts" / "fontawesome.js").unlink(missing_ok=True)  # no page loads it now
    subset_icon_font(out_html / "_static")
    purge_stylesheets(out_html)
