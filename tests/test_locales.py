"""The Chinese book's catalogs cannot fall behind the English: every message of the current staged book is
translated and none is fuzzy (``grader locales --check``), a broken catalog is caught, translations keep
what is never translated (code, maths, citations, references, glued numbers), and the glossary's terms are
used as the glossary gives them. The sites themselves are checked in test_book (files) and test_browser
(rendering, the switch, CJK fonts)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

from grader.book import locales
from grader.book.site import extract_messages
from grader.course import Course

COURSE = Course.here()
PAIRS = locales.glossary_pairs(COURSE)


@pytest.fixture(scope="module")
def templates(site):
    """The message templates of the book the ``site`` fixture staged and built."""
    return extract_messages(COURSE, COURSE.build / "stage", COURSE.build / "gettext-test")


def test_every_message_is_translated_and_none_is_fuzzy(templates):
    problems = locales.check(COURSE, templates, "zh_CN")
    assert not problems, f"{len(problems)} problem(s) in book/locales (fix them, or run `grader locales` " \
                         "after changing the English):\n" + "\n".join(problems[:60])


def test_the_catalogs_cover_every_page_and_the_alt_texts(templates):
    docs = locales.templates(templates)
    assert {"intro", "glossary", "mistakes", "bibliography", "instructors"} <= set(docs)
    assert {ch.id + "/" + ch.slug for ch in COURSE.chapters()} <= set(docs)
    alts = locales.alt_texts(COURSE.build / "stage")
    assert sum(len(v) for v in alts.values()) >= 30, "every figure's alt text is a message"
    with (templates / "ch02_qkv" / "qkv.pot").open("rb") as fh:
        pot = read_po(fh)
    assert any(m.context == locales.ALT_CONTEXT for m in pot)


def _write(path, catalog):
    with path.open("wb") as fh:
        write_po(fh, catalog, width=0)


def _read(path):
    with path.open("rb") as fh:
        return read_po(fh)


def test_a_broken_catalog_fails_the_check(templates, tmp_path):
    """The deliberately broken copy: one message emptied, one fuzzy, one with its code span translated,
    one stale message, one page missing: each is reported, and the command exits 1."""
    broken = tmp_path / "zh_CN" / "LC_MESSAGES"
    shutil.copytree(locales.catalogs(COURSE, "zh_CN"), broken)
    po = broken / "ch02_qkv" / "qkv.po"
    catalog = _read(po)
    prose = [m for m in catalog if m.id and not locales.nothing_to_translate(m.id) and m.context is None]
    with_code = next(m for m in prose if "`" in m.id and "{" not in m.id)
    emptied, fuzzied = prose[0], prose[1]
    emptied.string = ""
    fuzzied.flags.add("fuzzy")
    with_code.string = with_code.string.replace("`", "")
    catalog.add("A sentence the English no longer has.", "英文里已经没有的一句话。")
    _write(po, catalog)
    (broken / "intro.po").unlink()
    problems = locales.check(COURSE, templates, "zh_CN", folder=broken)
    text = "\n".join(problems)
    assert "untranslated" in text and locales._short(emptied.id) in text
    assert "fuzzy" in text and locales._short(fuzzied.id) in text
    assert "changed or lost what is never translated" in text
    assert "stale message" in text
    assert "intro.po: missing" in text
    # the translator's lint finds the same without the templates, by number
    assert subprocess.run([sys.executable, "-m", "grader.book.locales", "lint", str(po)], capture_output=True,
                          cwd=COURSE.root).returncode == 1


def test_update_keeps_translations_marks_changes_fuzzy_and_fills_what_has_no_words(tmp_path):
    pot_dir, folder = tmp_path / "pot", tmp_path / "po"
    pot_dir.mkdir()
    old = Catalog()
    for msgid in ("Masks and padding", "The softmax of `x` is computed row by row."):
        old.add(msgid)
    _write(pot_dir / "page.pot", old)
    locales.update(COURSE, pot_dir, "zh_CN", folder=folder)
    catalog = _read(folder / "page.po")
    catalog["Masks and padding"].string = "掩码与填充"
    catalog["The softmax of `x` is computed row by row."].string = "`x` 的 softmax 逐行计算。"
    _write(folder / "page.po", catalog)
    new = Catalog()
    for msgid in ("Masks and padding", "The softmax of `x` is computed column by column.", "\n\\sum_i x_i\n", "42"):
        new.add(msgid)
    _write(pot_dir / "page.pot", new)
    counts = locales.update(COURSE, pot_dir, "zh_CN", folder=folder)
    catalog = _read(folder / "page.po")
    assert catalog["Masks and padding"].string == "掩码与填充" and not catalog["Masks and padding"].fuzzy
    changed = catalog["The softmax of `x` is computed column by column."]
    assert changed.fuzzy and changed.string == "`x` 的 softmax 逐行计算。", "a changed message keeps its old " \
        "translation, marked fuzzy for review"
    assert catalog["\n\\sum_i x_i\n"].string == "\n\\sum_i x_i\n" and catalog["42"].string == "42"
    assert "The softmax of `x` is computed row by row." not in [m.id for m in catalog]
    assert counts["fuzzy"] == 1 and counts["filled"] == 2
    problems = locales.check(COURSE, pot_dir, "zh_CN", folder=folder)
    assert len(problems) == 1 and "fuzzy" in problems[0]


@pytest.mark.parametrize(("msgid", "msgstr", "wanted"), [
    ("See {cite}`vaswani2017attention`.", "见 {cite}`vaswani2017attention`。", None),
    ("See {cite}`vaswani2017attention`.", "见 Vaswani 等人的论文。", "never translated: {cite}`vaswani2017attention`"),
    ("Call `softmax(x, dim=-1)` here.", "在这里调用 `softmax(x, dim=-1)`。", None),
    ("Call `softmax(x, dim=-1)` here.", "在这里调用 `softmax(x, 维度=-1)`。", "never translated"),
    ("The mean is $\\mu = 0$.", "均值为 $\\mu = 0$。", None),
    ("The mean is $\\mu = 0$.", "均值为 $\\mu=0$。", "never translated"),
    ("It took {glue:text}`ms_fwd` ms.", "用了 {glue:text}`ms_fwd` 毫秒。", None),
    ("It took {glue:text}`ms_fwd` ms.", "用了 12.5 毫秒。", "never translated"),
    ("In {term}`self-attention` every token reads.", "在{term}`自注意力 <self-attention>`中，每个词元都能读取。", None),
    ("In {term}`self-attention` every token reads.", "在{term}`自我关注 <self-attention>`中，每个词元都能读取。",
     "should show the glossary's 自注意力"),
    ("In {term}`self-attention` every token reads.", "在{term}`自注意力 <attention>`中，每个词元都能读取。",
     "never translated: {term}<self-attention>"),
    ("A causal mask hides the future.", "因果掩码遮住未来。", None),
    ("A causal mask hides the future.", "因果遮罩遮住未来。", "names the glossary's 'causal mask'"),
    ("Read section {ref}`mask-convention`.", "请读{ref}`掩码约定 <mask-convention>`一节。", None),
    ("Links [the paper](https://arxiv.org/abs/1706.03762).", "链接[论文](https://arxiv.org/abs/1706.03762)。", None),
    ("Links [the paper](https://arxiv.org/abs/1706.03762).", "链接[论文](https://arxiv.org/)。", "never translated"),
    ("Learning goals", "Learning goals", "is the English text"),
    ("Learning goals", "", "untranslated"),
    ("\n\\begin{aligned} a &= b \\end{aligned}\n", "\n\\begin{aligned} a &= c \\end{aligned}\n",
     "translates a display equation"),
    # the words of a display equation stay English too: Sphinx drops a translated math block ('::' on the site)
    ("\nm_{ij} = 0 \\text{ if } j \\le i\n", "\nm_{ij} = 0 \\text{ 若 } j \\le i\n", "translates a display equation"),
    ("\nm_{ij} = 0 \\text{ if } j \\le i\n", "\nm_{ij} = 0 \\text{ if } j \\le i\n", None),
    # a {math} directive's body (or a one-line $$ block) has no newlines around it: LaTeX alone is maths too
    ("m_{ij} = 0 \\quad \\text{if } j \\le i", "m_{ij} = 0 \\quad \\text{若 } j \\le i",
     "translates a display equation"),
    # a chapter is named by its number, not by its whole title dropped into the sentence
    ("As {doc}`chapter 2 <../ch02_qkv/qkv>` shows.", "正如{doc}`../ch02_qkv/qkv`所示。",
     "puts chapter 2's whole title into the sentence: write {doc}`第 2 章 <../ch02_qkv/qkv>`"),
    ("As {doc}`chapter 2 <../ch02_qkv/qkv>` shows.", "正如{doc}`第 2 章 <../ch02_qkv/qkv>`所示。", None),
    ("See {doc}`ch04_masks/masks`.", "见{doc}`ch04_masks/masks`。", "puts chapter 4's whole title"),
    # no space between Chinese text and a link whose text is Chinese
    ("The {doc}`glossary` defines every term.", "{doc}`glossary` 定义了每个术语。", "a space between Chinese text"),
    ("The {doc}`glossary` defines every term.", "{doc}`glossary`定义了每个术语。", None),
    ("Checked in {ref}`the appendix <mistakes-qkv>`.", "在 {ref}`附录 <mistakes-qkv>` 中检验过。",
     "a space between Chinese text"),
    ("Checked in {ref}`the appendix <mistakes-qkv>`.", "在{ref}`附录 <mistakes-qkv>`中检验过。", None),
    ("Uses {term}`FlashAttention` here.", "这里用到 {term}`FlashAttention` 的做法。", None),
])
def test_a_translation_keeps_markup_and_follows_the_glossary(msgid, msgstr, wanted):
    problems = locales.check_message(msgid, msgstr, PAIRS)
    if wanted is None:
        assert not problems, problems
    else:
        assert any(wanted in p for p in problems), problems


def test_a_glue_alias_lets_a_translation_show_the_same_number_in_its_own_unit():
    """A translator's "glue-alias: A -> B: <why>" comment: the translation may show value B of the page in place of
    the English value A (1.7 million is 171 万), and only that one."""
    msgid = "It reaches {glue:text}`n_tokens:.1f` million tokens."
    msgstr = "它达到约 {glue:text}`n_tokens_wan` 万个词元。"
    assert "never translated" in " ".join(locales.check_message(msgid, msgstr, PAIRS))
    assert not locales.check_message(msgid, msgstr, PAIRS, glue_aliases={"n_tokens:.1f": "n_tokens_wan"})
    other = "它达到约 {glue:text}`n_other` 万个词元。"
    assert "never translated" in " ".join(locales.check_message(msgid, other, PAIRS,
                                                                glue_aliases={"n_tokens:.1f": "n_tokens_wan"}))
    message = type("Message", (), {"user_comments": ["glue-alias: n_tokens:.1f -> n_tokens_wan: 万, not millions"]})
    assert locales._glue_aliases(message) == {"n_tokens:.1f": "n_tokens_wan"}


def test_keep_english_and_glossary_exemptions_are_explicit():
    assert not locales.check_message("FlashAttention-2", "FlashAttention-2", PAIRS, keep=True)
    assert locales.check_message("FlashAttention-2", "FlashAttention-2", PAIRS)
    said = "The mask of a painter is not a causal mask here."
    assert locales.check_message(said, "画家的面具。", PAIRS)
    assert not locales.check_message(said, "画家的面具。", PAIRS, exempt={"mask", "causal mask"})


def test_glossary_pairs_come_from_the_glossary():
    assert PAIRS["self-attention"][0] == "自注意力"
    assert PAIRS["causal mask"][0] == "因果掩码"
    assert PAIRS["query"][0] == "查询" and PAIRS["key"][0] == "键" and PAIRS["value"][0] == "值"
    assert "FlashAttention" in PAIRS["FlashAttention"]
    assert len(PAIRS) >= 45


def _catalog_file(path, messages):
    catalog = Catalog(locale="zh_CN")
    for msgid, msgstr in messages:
        catalog.add(msgid, msgstr)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, catalog)


EQUATION = ("\n\\tilde s_{ij} = \\begin{cases} s_{ij} & \\text{if } m_{ij} \\\\ -\\infty & \\text{otherwise} "
            "\\end{cases}\n")


def test_a_translated_display_equation_fails_the_check_by_page_and_message(tmp_path):
    """The guard of review_zh R1: a display equation whose translation differs from the English (here its
    \\text{} translated) renders as '::' on the site; `grader locales --check` names the page and the message,
    and the translator's lint finds it too. The same catalog with the equation left as it is passes."""
    pot_dir, folder = tmp_path / "pot", tmp_path / "po"
    messages = [("Masked scores are set to $-\\infty$:", "被屏蔽的分数设为 $-\\infty$："), (EQUATION, EQUATION)]
    _catalog_file(pot_dir / "ch02_qkv" / "qkv.pot", [(m, "") for m, _ in messages])
    _catalog_file(folder / "ch02_qkv" / "qkv.po", messages)
    assert locales.check(COURSE, pot_dir, "zh_CN", folder=folder) == []
    broken = EQUATION.replace("\\text{if }", "\\text{若 }").replace("\\text{otherwise}", "\\text{否则}")
    _catalog_file(folder / "ch02_qkv" / "qkv.po", [messages[0], (EQUATION, broken)])
    problems = locales.check(COURSE, pot_dir, "zh_CN", folder=folder)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"ch02_qkv/qkv.po: {locales._short(EQUATION)}: translates a display equation")
    assert any("translates a display equation" in p
               for p in locales.lint_catalog(COURSE, folder / "ch02_qkv" / "qkv.po"))


def test_a_recurring_message_has_one_translation(tmp_path):
    pot_dir, folder = tmp_path / "pot", tmp_path / "po"
    for page, translation in (("a", "学完本章，你将能够"), ("b", "学完本章，你将能够"), ("c", "学完本章，你能够")):
        _catalog_file(pot_dir / f"{page}.pot", [("After this chapter you can", "")])
        _catalog_file(folder / f"{page}.po", [("After this chapter you can", translation)])
    problems = locales.check(COURSE, pot_dir, "zh_CN", folder=folder)
    assert len(problems) == 1 and problems[0].startswith("c.po: 'After this chapter you can': translated otherwise")


def test_the_real_catalogs_pass_the_guards_on_their_own():
    """Every catalog of the repository, judged message by message as `--check` judges them (no templates
    needed, so no site): no translated display equation, no chapter's title dropped into a sentence, no
    space beside a Chinese link text, nothing else either. And every display equation of the book is there
    to be judged: a message that starts with a newline or is LaTeX alone."""
    folder = locales.catalogs(COURSE, "zh_CN")
    problems = [f"{po.relative_to(folder)}: {p}" for po in sorted(folder.rglob("*.po"))
                for p in locales.lint_catalog(COURSE, po)]
    assert not problems, "\n".join(problems[:40])
    equations = [m for po in folder.rglob("*.po") for m in _read(po) if m.id and locales._display_maths(m.id)]
    assert len(equations) >= 80 and all(m.string == m.id for m in equations)


def test_babels_previous_msgid_remnants_never_stay_in_a_catalog(tmp_path):
    """babel reads the continuation lines of a fuzzy message's ``#|`` old English back as translator comments
    and wraps them again on the next update ('# | ...' lines, lone words): the catalogs' writer drops them and
    keeps the comments translators write."""
    catalog = Catalog(locale="zh_CN")
    catalog.add("Hello", "你好", user_comments=["| msgid \"Hello there, a long", "because", "| old English",
                                                 "glue-alias: a -> b: Chinese counts in 万"])
    path = tmp_path / "page.po"
    locales._write(path, catalog)
    text = path.read_text()
    assert "# |" not in text and "# because" not in text, text
    assert "# glue-alias: a -> b: Chinese counts in 万" in text, text
    for po in sorted(locales.catalogs(COURSE, "zh_CN").rglob("*.po")):
        body = po.read_text(encoding="utf-8").split("\n\n", 1)[-1]
        junk = [line for line in body.splitlines() if line.startswith("# ") and locales._junk(line[2:])]
        assert not junk, f"{po.name}: babel's remnants {junk[:3]} (rewrite it with grader.book.locales._write)"
