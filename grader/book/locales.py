"""The book in other languages: one source of code cells, prose translated through Sphinx's gettext catalogs.

The English book is the source. ``grader locales`` extracts its messages from the staged book
(:func:`.site.extract_messages`, Sphinx's ``gettext`` builder: every paragraph, title, list item, table
cell, caption and admonition of every page, plus the figures' alt text, which Sphinx does not translate,
under the context ``image alt``) and merges them into the catalogs kept in the repository,
``book/locales/<language>/LC_MESSAGES/<page>.po``: a new message arrives empty, a changed one arrives
*fuzzy* with its old translation, a removed one goes. A message with nothing to translate (display maths,
a number, a code span alone) is filled with itself.

``grader locales --check`` (and the test suite) fails when a message is untranslated or fuzzy, when a
catalog is out of date, or when a translation breaks what must never be translated: code spans, maths,
citations, cross-references and glued values are kept verbatim, a ``{term}`` keeps its glossary target
and shows the glossary's Chinese term, and the glossary's terms are translated as the glossary says
wherever the English names them (:func:`check`). It also fails on a translated display equation (it would
render as '::'), a bare ``{doc}`` that drops a chapter's whole title into a Chinese sentence, a space between
Chinese text and a Chinese link text, and a message that recurs on several pages translated two ways.

``grader book`` builds each language's site into ``<site>/<folder>/`` (``_build/site/html/zh/``) from the
same staged notebooks, so code cells, outputs and figures are shared; the catalogs are compiled under
``_build/locales/`` (never next to the sources).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from ..course import Course, GraderError

ALT_CONTEXT = "image alt"
PROJECT = "Self-Attention, from the RNN bottleneck to FlashAttention"
AUTHORS = "The Self-Attention course authors"
KEEP_FLAG = "keep-english"  # a translator's "#, keep-english": a proper name or code that stays as it is
_CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class Language:
    code: str       # Sphinx's language and the catalogs' folder: zh_CN
    folder: str     # where its site lives inside the English one: zh
    html_lang: str  # <html lang>: zh-CN
    label: str      # the switch's text, in the language itself
    note: str       # shown at the top of every chapter page: the graded notebooks stay English
    search: str     # the search box's placeholder
    title: str      # the book's title
    description: str  # every page's meta description
    words: dict     # the build's own strings: footer, switch, figure links
    # the themes' strings (Sphinx's, pydata-sphinx-theme's, sphinx-book-theme's, by their English msgid) that
    # their catalogs leave English ("Link to this heading") or word otherwise than the book ("列印成 PDF"), and
    # those their templates write in English ("Toggle primary sidebar"): :mod:`.i18n_glue` puts the first in
    # front of the themes' catalogs, :func:`.polish.interface` translates the second in the pages' attributes
    interface: dict = None


LANGUAGES = {
    "zh_CN": Language(
        code="zh_CN", folder="zh", html_lang="zh-CN", label="中文",
        note=("本章的学生笔记本（下载按钮提供的 <code>.ipynb</code> 文件）与自动评分使用英文版："
              "代码单元、练习说明与测试"
              "在两种语言的书中完全相同，请对照本页中文讲解完成英文笔记本中的练习。"),
        search="搜索本书……",
        title="自注意力：从 RNN 瓶颈到 FlashAttention",
        description=("一门动手实践、自动评分的注意力机制课程：从 RNN 编码器-解码器的瓶颈讲到查询、键和值，"
                     "掩码、多头注意力、反向传播、O(T²) 的代价、FlashAttention、KV 缓存与长上下文。"),
        words={"licence": "许可证", "source": "源代码", "built": "构建于", "full size": "打开原尺寸图片",
               "switch": "阅读本页的中文版", "note title": "关于练习", "show code": "显示代码",
               "hide code": "隐藏代码", "click to show": "点击显示", "click to hide": "点击隐藏"},
        interface={
            # Sphinx: the permalinks' tooltips (its zh_CN catalog leaves them empty)
            "Link to this heading": "链接到此标题", "Link to this equation": "链接到此公式",
            "Link to this image": "链接到此图片", "Link to this table": "链接到此表格",
            "Link to this code": "链接到此代码", "Link to this definition": "链接到此定义",
            "Link to this term": "链接到此术语",
            # pydata-sphinx-theme (its zh catalog leaves these English or empty, and says 初始页面 for home)
            "Color mode": "配色模式", "Light": "浅色", "Dark": "深色", "System Settings": "跟随系统",
            "Home": "首页", "Breadcrumb": "页面路径", "Skip to main content": "跳到正文",
            "Back to top": "回到顶部", "On this page": "本页内容", "Section Navigation": "本节导航",
            "Site navigation": "全书导航", "previous": "上一页", "next": "下一页",
            "previous page": "上一页", "next page": "下一页",
            "Collapse Sidebar": "收起侧栏", "Expand Sidebar": "展开侧栏", "Search": "搜索",
            # sphinx-book-theme (its zh_CN catalog: 列印成 PDF is the Taiwanese wording)
            "Print to PDF": "打印为 PDF", "Download this page": "下载本页", "Download source file": "下载源文件",
            "Download notebook file": "下载笔记本文件", "Fullscreen mode": "全屏模式", "Contents": "目录",
            "Toggle navigation": "显示或隐藏导航",
            # written in English by the templates: sphinx-book-theme's sidebar toggles and landmarks, myst-nb's
            # folded cells
            "Toggle primary sidebar": "显示或隐藏全书目录", "Toggle secondary sidebar": "显示或隐藏本页目录",
            "Main": "全书导航", "Page": "本页导航", "Toggle hidden content": "显示或隐藏内容",
        }),
}
ENGLISH = {"label": "English", "switch": "Read this page in English", "html_lang": "en"}


def catalogs(course: Course, language: str) -> Path:
    return course.book / "locales" / language / "LC_MESSAGES"


# ---------------------------------------------------------------------------------------------- extraction

def _sphinx_overrides(staged: Path, config: dict) -> dict:
    from jupyter_book.config import get_final_config

    extensions = get_final_config(user_yaml=config, cli_config={"latex_individualpages": False},
                                  sourcedir=staged)[0]["extensions"]
    return {"external_toc_path": str(staged / "_toc.yml"), "latex_individualpages": False,
            "extensions": [e for e in extensions if e != "sphinx_thebe"], "gettext_compact": False}


def add_alt_texts(pot_dir: Path, staged: Path) -> None:
    """Add every page's alt texts (context ``image alt``) to its template, which Sphinx made without them."""
    from babel.messages.pofile import read_po, write_po

    for doc, alts in alt_texts(staged).items():
        pot = pot_dir / f"{doc}.pot"
        if not pot.is_file():
            continue
        with pot.open("rb") as fh:
            template = read_po(fh)
        for alt in alts:
            template.add(alt, context=ALT_CONTEXT)
        buf = io.BytesIO()
        write_po(buf, template, width=0)
        pot.write_bytes(buf.getvalue())


def alt_texts(staged: Path) -> dict[str, list[str]]:
    """Every image's alt text in the staged book, per page (``ch02_qkv/qkv``): notebook figures
    (``mystnb.image.alt`` in a code cell's metadata) and images written in Markdown or HTML."""
    import nbformat

    found: dict[str, list[str]] = {}
    for path in sorted(staged.rglob("*")):
        if path.suffix not in (".ipynb", ".md"):
            continue
        doc = path.relative_to(staged).with_suffix("").as_posix()
        alts: list[str] = []
        if path.suffix == ".ipynb":
            nb = nbformat.read(path, as_version=4)
            for cell in nb.cells:
                alt = (cell.metadata.get("mystnb", {}).get("image", {}) or {}).get("alt")
                if alt:
                    alts.append(alt)
                if cell.cell_type == "markdown":
                    alts += _markdown_alts(cell.source)
        else:
            alts += _markdown_alts(path.read_text())
        if alts:
            found[doc] = list(dict.fromkeys(alts))
    return found


def _markdown_alts(text: str) -> list[str]:
    return (re.findall(r"!\[([^\]]+)\]\(", text) + re.findall(r"^:alt:\s*(.+)$", text, flags=re.M)
            + re.findall(r'<img\b[^>]*\balt="([^"]+)"', text))


def templates(pot_dir: Path) -> dict[str, Path]:
    return {p.relative_to(pot_dir).with_suffix("").as_posix(): p for p in sorted(pot_dir.rglob("*.pot"))}


# ------------------------------------------------------------------------------------------ what is text

# Inline markup whose text is never translated, kept verbatim: roles (citations, references, glued
# values, maths), code spans, inline and display maths, link targets, substitutions.
_ROLE = re.compile(r"\{([a-z][\w:.-]*)\}`([^`]*)`")
_CODE = re.compile(r"(?<![`}])(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?!\s)[^$\n]+?(?<![\s\\])\$", re.S)
_LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
_SUBST = re.compile(r"\{\{[^}]+\}\}")
# roles whose text may be translated when an explicit target is given, "{ref}`text <target>`"
_TEXT_ROLES = {"term", "ref", "numref", "doc"}


def _role_target(content: str) -> tuple[str, str]:
    m = re.fullmatch(r"(.*?)\s*<([^<>]+)>", content, flags=re.S)
    return (m.group(1), m.group(2)) if m else (content, content)


def protected(text: str) -> list[str]:
    """What a translation must keep exactly as it is, in order of appearance."""
    keep: list[str] = []
    rest = text
    for m in _ROLE.finditer(text):
        name, content = m.group(1), m.group(2)
        if name in _TEXT_ROLES:
            target = _role_target(content)[1].strip()
            keep.append(f"{{{name}}}<{target.lower() if name == 'term' else target}>")
        else:
            keep.append(m.group(0))
    rest = _ROLE.sub(" ", rest)
    keep += [m.group(0) for m in _MATH.finditer(rest)]
    rest = _MATH.sub(" ", rest)
    keep += [m.group(0) for m in _CODE.finditer(rest)]
    rest = _CODE.sub(" ", rest)
    keep += [m.group(1) for m in _LINK_TARGET.finditer(text)]
    keep += [m.group(0) for m in _SUBST.finditer(text)]
    return keep


def _shown_text(m: re.Match) -> str:
    """What a role shows the reader as words: a term's text (its own, or the explicit one), a reference's
    explicit text; a reference without one shows its target's title, translated where that is."""
    name, content = m.group(1), m.group(2)
    if name == "term":
        return " " + _role_target(content)[0]
    if name in _TEXT_ROLES and "<" in content:
        return " " + _role_target(content)[0]
    return " "


def plain_words(text: str) -> str:
    """The text a reader reads as words: markup that is never translated taken out."""
    rest = _ROLE.sub(_shown_text, text)
    rest = _MATH.sub(" ", rest)
    rest = _CODE.sub(" ", rest)
    rest = _LINK_TARGET.sub("]", rest)
    return re.sub(r"<[^>]+>", " ", rest)


# LaTeX commands, and the groups of those that hold words ("\\text{if}"), taken out to see whether words remain
_LATEX_WORDS = re.compile(r"\\(?:text|textrm|mathrm|operatorname|mathbf|mathit|mathsf|mbox)\s*\{[^{}]*\}|\\[A-Za-z]+")


def _display_maths(msgid: str) -> bool:
    """Display maths, as the catalogs hold it: the body of a ``$$`` block written on its own lines is the message
    between two newlines ("\\n m_{ij} = ...\\n"); the body of a ```` ```{math} ```` directive or of a one-line
    ``$$ ... $$`` has no newline around it, and is recognised as LaTeX alone: a command, no inline ``$``, no code,
    and no run of three words outside ``\\text{...}`` (prose always has one)."""
    if msgid.startswith("\n") or msgid.lstrip().startswith("\\begin"):
        return True
    body = msgid.strip()
    if not body or "$" in body or "`" in body or not re.search(r"\\[A-Za-z]+", body):
        return False
    rest = _LATEX_WORDS.sub(" ", body)
    return not re.search(r"[A-Za-z]{2,}[\s,;:.]+[A-Za-z]{2,}[\s,;:.]+[A-Za-z]{2,}", rest)


def nothing_to_translate(msgid: str) -> bool:
    """Display maths, a number, a code span or a reference alone: the translation is the message itself.
    Display maths is never translated, not even the words of its ``\\text{...}``: Sphinx parses a translated
    math block again as reST, which MyST reads as the text "::" and drops the equation (MyST-Parser #444,
    sphinx-doc #8852), so on the site it renders as ``\\[::\\]``. Its words are glossed in the sentence
    before it instead."""
    if _display_maths(msgid):
        return True
    words = re.findall(r"[A-Za-z]+", plain_words(msgid))
    return not any(len(w) >= 2 or w in ("a", "A", "I") for w in words)


# ------------------------------------------------------------------------------------------ update, check

def _read(path: Path):
    from babel.messages.pofile import read_po

    with path.open("rb") as fh:
        return read_po(fh, abort_invalid=True)


def _junk(comment: str) -> bool:
    """A translator comment that babel made from its own previous-msgid lines: it writes a fuzzy message's old
    English wrapped at 76 columns as ``#|`` lines, reads the continuation lines back as translator comments
    (``| ...``) and wraps those again, leaving ``# | ...`` lines and lone words behind on every update. A
    comment of one word is such a remnant (the comments translators write, ``glue-alias:`` and
    ``glossary-exempt:`` ones, have a reason after the colon)."""
    text = comment.strip()
    return not text or text.startswith("|") or (" " not in text and not text.endswith(":"))


def _write(path: Path, catalog) -> None:
    from babel.messages.pofile import write_po

    for message in catalog:
        message.user_comments = [c for c in message.user_comments if not _junk(c)]
    buf = io.BytesIO()
    write_po(buf, catalog, width=0, ignore_obsolete=True, include_previous=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_bytes() != buf.getvalue():
        path.write_bytes(buf.getvalue())


def update(course: Course, pot_dir: Path, language: str = "zh_CN", folder: Path | None = None) -> dict[str, int]:
    """Merge the templates into the language's catalogs (``folder``, by default the repository's); return
    counts of what needs a translator."""
    from babel.messages.catalog import Catalog

    folder = folder or catalogs(course, language)
    counts = {"messages": 0, "new": 0, "fuzzy": 0, "filled": 0, "removed pages": 0}
    docs = templates(pot_dir)
    for doc, pot in docs.items():
        template = _read(pot)
        path = folder / f"{doc}.po"
        if path.is_file():
            catalog = _read(path)
            catalog.update(template, update_header_comment=False, update_creation_date=False)
        else:
            catalog = Catalog(locale=language, project=PROJECT, fuzzy=False, copyright_holder=AUTHORS,
                              last_translator=AUTHORS, language_team=f"{AUTHORS} ({language})")
            catalog.update(template, update_creation_date=False)
        catalog.obsolete.clear()
        catalog.project, catalog.version, catalog.copyright_holder = PROJECT, "", AUTHORS
        catalog.last_translator = catalog.language_team = AUTHORS
        catalog.msgid_bugs_address = ""
        catalog.header_comment = (f"# {language} translation of the page {doc} of the book {PROJECT}.\n"
                                  "# Update with `grader locales`; `grader locales --check` must find nothing.")
        for message in catalog:
            if not message.id:
                continue
            counts["messages"] += 1
            empty = nothing_to_translate(message.id)
            if _display_maths(message.id) and message.string and message.string != message.id:
                message.string = message.id  # a translated display equation never renders (see nothing_to_translate)
                counts["filled"] += 1
            if message.string == message.id and KEEP_FLAG not in message.flags and not empty:
                message.string = ""  # filled by an earlier rule as having nothing to translate: it has
            if not message.string and empty:
                message.string = message.id
                counts["filled"] += 1
            elif not message.string:
                counts["new"] += 1
            elif message.fuzzy:
                counts["fuzzy"] += 1
        catalog.fuzzy = False
        _write(path, catalog)
    for path in sorted(folder.rglob("*.po")) if folder.is_dir() else []:
        if path.relative_to(folder).with_suffix("").as_posix() not in docs:
            path.unlink()
            counts["removed pages"] += 1
    return counts


def glossary_pairs(course: Course) -> dict[str, list[str]]:
    """``{English term: [Chinese term, other accepted forms]}`` from the glossary: each entry's definition
    opens with the term and its Chinese equivalents in parentheses, "Self-attention (自注意力) is ...",
    "Residual connection (残差连接, also skip connection 跳跃连接)"; the first is the one to use, the
    others (and the English name of an acronym or a proper name, "ALiBi", "FlashAttention") also count."""
    text = (course.book / "glossary.md").read_text()
    body = text.split("```{glossary}", 1)[1].split("\n```", 1)[0]
    lines = body.splitlines()
    pairs = {}
    for i, line in enumerate(lines):
        if line.strip() and not line.startswith(" ") and i + 1 < len(lines):
            m = re.search(r"\(([^)]*)\)", lines[i + 1])
            if not m:
                continue
            term = line.strip()
            forms = []
            for part in (p.strip() for p in m.group(1).split(",")):
                part = re.sub(r"^(?:also|as in)\b(?:\s+called)?(?:\s+[A-Za-z-]+)*\s*(?=[\u4e00-\u9fff])", "", part)
                if _CJK_CHAR.search(part) and "沿用" not in part:  # "中文文献通常沿用英文名 X": X stays English
                    forms.append(part)
                elif re.fullmatch(r"(?=(?:.*[A-Z]){2})[A-Za-z-]+", part):  # an acronym: RNN, GQA, Pre-LN
                    forms.append(part)
            if re.search(r"[A-Z]", term):
                forms.append(term)
            pairs[term] = forms
    return pairs


# English words too common for a mention of them to name the glossary's term (a {term} role still does)
_POLYSEMOUS = {"key", "value", "query", "softmax", "FLOP"}


def _mentions(term: str, words: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(term)}(s|es)?(?![\w-])", words, flags=re.I) is not None


def _has(forms: list[str], text: str) -> bool:
    return any(f.lower() in text.lower() for f in forms)


def check_message(msgid: str, msgstr: str, pairs: dict[str, list[str]], *, keep: bool = False,
                  exempt: set[str] = frozenset(), glue_aliases: dict[str, str] | None = None) -> list[str]:
    """What is wrong with one translation (an empty list when nothing is).

    ``glue_aliases`` maps a glued value of the English (``"ch10-cross-falcon:.1f"``) to another value of the same
    page that the translation shows in its place (``"ch10-cross-falcon-wan"``: the same number in the unit the
    language counts in, 万 rather than millions), as a translator's comment ``glue-alias: A -> B: <why>`` declares.
    """
    problems = []
    if not msgstr:
        return ["untranslated"]
    if _display_maths(msgid) and msgstr != msgid:
        return ["translates a display equation: it must stay as the English writes it (a translated math block "
                "renders as '::' on the site); gloss its words in the sentence before it"]
    if nothing_to_translate(msgid):
        return [] if msgstr == msgid else ["has nothing to translate: the translation must be the message itself"]
    if _CJK_CHAR.search(msgstr):
        problems += _link_problems(msgstr)
    shown_for = {shown: english for english, shown in (glue_aliases or {}).items()}
    want, got = protected(msgid), [_unalias(k, shown_for) for k in protected(msgstr)]
    missing = [k for k in want if got.count(k) < want.count(k)]
    extra = [k for k in got if want.count(k) < got.count(k)]
    if missing:
        problems.append(f"changed or lost what is never translated: {', '.join(dict.fromkeys(missing))}")
    if extra:
        problems.append(f"added markup the English has not: {', '.join(dict.fromkeys(extra))}")
    if msgstr == msgid and not keep:
        problems.append(f"is the English text (mark it '#, {KEEP_FLAG}' if it stays so)")
    elif not keep and not _CJK_CHAR.search(msgstr):
        problems.append(f"has no Chinese (mark it '#, {KEEP_FLAG}' if it stays English)")
    lowered = {t.lower(): c for t, c in pairs.items()}
    for m in _ROLE.finditer(msgid):
        if m.group(1) != "term":
            continue
        target = _role_target(m.group(2))[1].strip().lower()
        forms = lowered.get(target)
        if not forms:
            continue
        shown = [_role_target(r.group(2))[0] for r in _ROLE.finditer(msgstr)
                 if r.group(1) == "term" and _role_target(r.group(2))[1].strip().lower() == target]
        if shown and not any(_has(forms, s) for s in shown):
            problems.append(f"{{term}}`{target}` should show the glossary's {forms[0]} "
                            f"({{term}}`{forms[0]} <{target}>`)")
    english = plain_words(msgid)
    for term, forms in pairs.items():
        if term in _POLYSEMOUS or term.lower() in exempt or not forms:
            continue
        if _mentions(term, english) and not _has(forms, msgstr):
            problems.append(f"names the glossary's '{term}' without its Chinese term {forms[0]}"
                            f" (or a comment '# glossary-exempt: {term}: <why>')")
    return problems


_CHAPTER_DOC = re.compile(r"(?:\.\./)*ch(\d\d)_[\w-]+/[\w-]+")
_CJK_TEXT = re.compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")  # Han and full-width punctuation


def _link_problems(msgstr: str) -> list[str]:
    """A Chinese sentence's links: a bare ``{doc}`` to a chapter drops the chapter's whole Chinese title into the
    sentence as if it were a noun phrase ("查询、键和值会解释原因"), so it must say ``{doc}`第 N 章 <target>```;
    and no space may stand between Chinese text and a link whose text is Chinese at that side ("术语表 定义了").
    A bare ``{doc}`` shows its page's title, Chinese in the Chinese book."""
    problems = []
    for m in _ROLE.finditer(msgstr):
        name, content = m.group(1), m.group(2)
        explicit = name in _TEXT_ROLES and "<" in content
        if name == "doc" and not explicit and _CHAPTER_DOC.fullmatch(content.strip()):
            target = content.strip()
            n = int(_CHAPTER_DOC.fullmatch(target).group(1))
            problems.append(f"{m.group(0)} puts chapter {n}'s whole title into the sentence: write "
                            f"{{doc}}`第 {n} 章 <{target}>` (or 第 {n} 章“{{doc}}`...`” where the title matters)")
        if explicit:
            shown = _role_target(content)[0].strip()
        elif name == "doc":
            shown = "标题"
        else:
            continue
        if not shown:
            continue
        before, after = msgstr[:m.start()], msgstr[m.end():]
        if (_CJK_TEXT.match(shown[0]) and re.search(r"\S +$", before) and _CJK_TEXT.match(before.rstrip()[-1])
                or _CJK_TEXT.match(shown[-1]) and re.match(r" +\S", after) and _CJK_TEXT.match(after.lstrip()[0])):
            problems.append(f"a space between Chinese text and the Chinese text of the link {m.group(0)}: remove it")
    return problems


def _unalias(kept: str, shown_for: dict[str, str]) -> str:
    """A glued value of the translation named back by the English value it stands for (``shown_for``: the shown
    key to the English one, the aliases of check_message turned round)."""
    m = _ROLE.fullmatch(kept)
    if not m or not m.group(1).startswith("glue"):
        return kept
    english = shown_for.get(m.group(2))
    return kept if english is None else f"{{{m.group(1)}}}`{english}`"


def _judge(message, pairs: dict[str, list[str]]) -> list[str]:
    """The problems of one catalog entry: fuzzy, or what :func:`check_message` finds."""
    if message.fuzzy:
        return ["fuzzy (the English changed: review the translation, then drop 'fuzzy')"]
    return check_message(message.id, message.string, pairs, keep=KEEP_FLAG in message.flags,
                         exempt=_exemptions(message), glue_aliases=_glue_aliases(message))


def _glue_aliases(message) -> dict[str, str]:
    """Glued values a translator replaced, with a reason, in a comment "glue-alias: <english> -> <shown>: <why>"."""
    out = {}
    for comment in message.user_comments:
        m = re.match(r"\s*glue-alias:\s*(\S+)\s*->\s*(\S+?):\s*\S", comment)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _exemptions(message) -> set[str]:
    """Terms a translator exempted, with a reason, in a comment "glossary-exempt: <term>: <why>"."""
    out = set()
    for comment in message.user_comments:
        m = re.match(r"\s*glossary-exempt:\s*([^:]+):\s*\S", comment)
        if m:
            out.add(m.group(1).strip().lower())
    return out


def check(course: Course, pot_dir: Path, language: str = "zh_CN", folder: Path | None = None) -> list[str]:
    """Every problem of the language's catalogs against the current templates, one line each."""
    folder = folder or catalogs(course, language)
    pairs = glossary_pairs(course)
    problems: list[str] = []
    docs = templates(pot_dir)
    shared: dict[tuple, dict[str, list[str]]] = {}  # a message on several pages: {translation: [pages]}
    for doc, pot in docs.items():
        path = folder / f"{doc}.po"
        if not path.is_file():
            problems.append(f"{doc}.po: missing (run `grader locales`)")
            continue
        catalog = _read(path)
        template = _read(pot)
        have = {(m.context, m.id): m for m in catalog if m.id}
        want = {(m.context, m.id) for m in template if m.id}
        for key in sorted(set(have) - want, key=str):
            problems.append(f"{doc}.po: stale message (run `grader locales`): {_short(key[1])}")
        for message in template:
            if not message.id:
                continue
            got = have.get((message.context, message.id))
            where = f"{doc}.po: {_short(message.id)}"
            if got is None:
                problems.append(f"{where}: not in the catalog (run `grader locales`)")
                continue
            problems += [f"{where}: {p}" for p in _judge(got, pairs)]
            if got.string and not got.fuzzy and not nothing_to_translate(got.id):
                shared.setdefault((got.context, got.id), {}).setdefault(got.string, []).append(doc)
    problems += _one_translation_each(shared)
    for path in sorted(folder.rglob("*.po")) if folder.is_dir() else []:
        if path.relative_to(folder).with_suffix("").as_posix() not in docs:
            problems.append(f"{path.relative_to(folder)}: no such page (run `grader locales`)")
    return problems


def _one_translation_each(shared: dict[tuple, dict[str, list[str]]]) -> list[str]:
    """A message that recurs on several pages (a label: "Learning goals", "you implement", the reference
    solution's note) has one translation: the pages whose translation is not the most common one are named."""
    problems = []
    for (_, msgid), variants in shared.items():
        if len(variants) < 2:
            continue
        usual = max(variants, key=lambda s: len(variants[s]))
        for string, pages in variants.items():
            if string != usual:
                there = ", ".join(variants[usual])
                problems += [f"{doc}.po: {_short(msgid)}: translated otherwise than on {there} (there "
                             f"{_short(usual, 120)}): a message that recurs has one translation" for doc in pages]
    return problems


def _short(text: str, n: int = 70) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= n else text[:n - 1] + "…")


def compile_catalogs(course: Course, language: str) -> Path:
    """The language's catalogs as ``.mo`` files under ``_build/locales/`` (Sphinx's ``locale_dirs``);
    fuzzy messages are left out, as gettext does.

    Each ``.po`` is copied beside its ``.mo`` (the ``.mo`` written after it, so it is the newer): Sphinx finds a
    page's catalog by its ``.po`` and makes the ``.mo`` a dependency of the page, so a page whose translation
    changed is read again by an incremental build (without the ``.po`` it kept the old translation)."""
    from babel.messages.mofile import write_mo

    src = catalogs(course, language)
    root = course.build / "locales"
    out = root / language / "LC_MESSAGES"
    for path in sorted(src.rglob("*.po")):
        target = out / path.relative_to(src).with_suffix(".mo")
        target.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        write_mo(buf, _read(path), use_fuzzy=False)
        po_copy = target.with_suffix(".po")
        if not target.is_file() or target.read_bytes() != buf.getvalue() or not po_copy.is_file():
            po_copy.write_bytes(path.read_bytes())
            target.write_bytes(buf.getvalue())
    return root


def alt_translations(course: Course, language: str) -> dict[str, str]:
    """``{English alt text: translation}`` over every page's catalog."""
    out = {}
    folder = catalogs(course, language)
    for path in sorted(folder.rglob("*.po")) if folder.is_dir() else []:
        for m in _read(path):
            if m.context == ALT_CONTEXT and m.string and not m.fuzzy:
                out[m.id] = m.string
    return out


def toc_captions(course: Course, language: str, staged: Path) -> dict[str, str]:
    """``{English caption: translation}`` for the parts of the book's table of contents ("Chapters",
    "Appendix"): Sphinx extracts them into the root page's catalog, but sphinx-external-toc adds the
    sidebar's toctree after the translation step, so the build puts them in (:mod:`.polish`)."""
    import yaml

    toc = yaml.safe_load((staged / "_toc.yml").read_text())
    captions = {part["caption"] for part in toc.get("parts", []) if part.get("caption")}
    path = catalogs(course, language) / f"{toc['root']}.po"
    if not captions or not path.is_file():
        return {}
    return {m.id: m.string for m in _read(path) if m.id in captions and m.string and not m.fuzzy}


def search_dictionary(course: Course) -> Path:
    """A jieba user dictionary of the glossary's Chinese terms, so that the Chinese search index keeps
    自注意力 or 因果掩码 as words."""
    path = course.build / "locales" / "glossary.dict.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    words = sorted({f for forms in glossary_pairs(course).values() for f in forms
                    if _CJK_CHAR.search(f) and " " not in f})
    text = "".join(f"{w} 1000 n\n" for w in words)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


# ------------------------------------------------------------------------------ a translator's tools

def _numbered(catalog) -> list:
    return [m for m in catalog if m.id]


def lint_catalog(course: Course, path: Path) -> list[str]:
    """The problems of one catalog on its own (no templates needed), ``#N: problem`` each."""
    pairs = glossary_pairs(course)
    out = []
    for n, m in enumerate(_numbered(_read(path)), 1):
        out += [f"#{n}: {p}" for p in _judge(m, pairs)]
    return out


def todo(path: Path, every: bool = False) -> str:
    """The catalog's messages that need a translator (all with ``every``), numbered, for a translator to
    answer in a file of ``=== N ===`` blocks (:func:`fill`)."""
    blocks = []
    for n, m in enumerate(_numbered(_read(path)), 1):
        if every or not m.string or m.fuzzy:
            head = f"=== {n}" + (f" [{m.context}]" if m.context else "") + (" [fuzzy]" if m.fuzzy else "") + " ==="
            blocks.append(f"{head}\n{m.id}\n" + (f"--- current translation:\n{m.string}\n" if m.string else ""))
    return "\n".join(blocks)


def fill(path: Path, answers: str) -> int:
    """Set the translations given as ``=== N ===`` blocks (``=== N keep-english ===`` for a message that
    stays English; ``# comment`` lines right after the header become translator comments); a filled
    message is no longer fuzzy. Returns how many were set."""
    catalog = _read(path)
    messages = _numbered(catalog)
    count = 0
    for block in re.split(r"^(?==== \d+)", answers, flags=re.M):
        m = re.match(r"=== (\d+)([^\n]*?)===[ \t]*\n(.*)", block, flags=re.S)
        if not m:
            continue
        n, options, text = int(m.group(1)), m.group(2), m.group(3)
        comments = []
        while text.startswith("# "):
            line, _, text = text.partition("\n")
            comments.append(line[2:].strip())
        text = text.rstrip("\n")
        if not 1 <= n <= len(messages):
            raise GraderError(f"{path}: no message #{n} (it has {len(messages)})")
        message = messages[n - 1]
        if message.id.endswith("\n") and not text.endswith("\n"):
            text += "\n"
        message.string = text
        message.flags.discard("fuzzy")
        message.previous_id = []
        if KEEP_FLAG in options:
            message.flags.add(KEEP_FLAG)
        if comments:
            message.user_comments = comments
        count += 1
    _write(path, catalog)
    return count


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m grader.book.locales",
                                description="a translator's tools for one catalog (book/locales/.../X.po)")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("todo", help="print the messages that need a translation, numbered")
    t.add_argument("po", type=Path)
    t.add_argument("--all", action="store_true", help="every message, with its current translation")
    f = sub.add_parser("fill", help="set translations from a file of '=== N ===' blocks")
    f.add_argument("po", type=Path)
    f.add_argument("answers", type=Path)
    c = sub.add_parser("lint", help="check catalogs on their own: untranslated, fuzzy, markup, glossary")
    c.add_argument("po", type=Path, nargs="+")
    args = p.parse_args(argv)
    course = Course.here()
    if args.command == "todo":
        print(todo(args.po, args.all))
    elif args.command == "fill":
        print(f"{fill(args.po, args.answers.read_text())} translation(s) set in {args.po}")
    else:
        bad = 0
        for po in args.po:
            problems = lint_catalog(course, po)
            for line in problems:
                print(f"{po}: {line}")
            print(f"{po}: {len(problems)} problem(s)")
            bad += bool(problems)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
