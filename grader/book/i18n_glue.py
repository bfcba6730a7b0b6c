"""A Sphinx extension for the translated sites: glued values in translated text, the themes' strings in the
book's wording, a Chinese search index built in linear time, and a query splitter that finds "KV缓存" as
"KV 缓存".

Sphinx translates a paragraph by parsing its translation as a small document of its own (source
``<translated>``), which MyST-NB parses as plain MyST without the notebook's renderer, so that a
``{glue:text}`` role in a translation finds no glue data ("No key ... found in glue data for this
document"). This extension remembers each notebook's renderer when MyST-NB parses the page and hands it to
the translations parsed for that page, so a translated sentence shows the same computed number as the
English one.

Sphinx 7.4's Chinese search language keeps every Latin word of every page in one list and asks, for each
word it stems, whether the word is in that list: quadratic in the size of the book (34 of the Chinese
build's 80 s). :class:`SearchChinese` keeps them in a set, with the same answers.

The themes' catalogs leave some of their strings English on a Chinese page (Sphinx's zh_CN catalog has no
"Link to this heading", pydata-sphinx-theme's none for "Color mode") and word others otherwise than the
book (sphinx-book-theme's "列印成 PDF"). :class:`_Wording` puts the language's own wording of those
(:attr:`.locales.Language.interface`) in front of the catalogs of both gettext domains the templates use.

The search page splits a query as Sphinx does, on what is not a letter, a digit or an underscore, so that a
query mixing Latin and Han without a space ("KV缓存", "在线softmax") was one word that no index entry
matched, while jieba had indexed the page's "KV 缓存" as "kv" and "缓存"; a Han run that jieba cut into
words ("注意力机制") was one unknown word too. :data:`SPLITTER_JS` (the search language's
``js_splitter_code``, in ``language_data.js``) cuts a word at each boundary between Han and Latin letters or
digits, and a Han run that the index does not hold whole into the longest words it holds.
"""

from __future__ import annotations

import gettext

_RENDERERS: dict[str, object] = {}


def _patch() -> None:
    from myst_nb import sphinx_

    parser = sphinx_.Parser
    if getattr(parser.parse, "_keeps_glue", False):
        return
    original, load_renderer = parser.parse, sphinx_.load_renderer
    made: list[object] = []

    def loading(name):
        """MyST-NB's renderer class, whose instances are remembered (the parse removes its own reference)."""
        cls = load_renderer(name)

        def make(*args, **kwargs):
            renderer = cls(*args, **kwargs)
            made.append(renderer)
            return renderer

        return make

    def parse(self, inputstring, document):
        env = document.settings.env
        if document.current_source and document.current_source.endswith("<translated>"):
            renderer = _RENDERERS.get(env.docname)
            if renderer is not None and "nb_renderer" not in document:
                document.attributes["nb_renderer"] = renderer
            try:
                return original(self, inputstring, document)
            finally:
                document.attributes.pop("nb_renderer", None)
        made.clear()
        result = original(self, inputstring, document)
        if made:
            _RENDERERS[env.docname] = made[-1]
        return result

    parse._keeps_glue = True
    parser.parse = parse
    sphinx_.load_renderer = loading


# the splitter of Sphinx 7.4's searchtools.js, then each word cut at the Han/Latin boundaries and a Han run unknown
# to the index cut into the longest words it knows (a lone character is no word of the index: jieba's words
# shorter than two characters are left out of it)
SPLITTER_JS = r"""
var splitQuery = (query) => {
  const index = (typeof Search !== "undefined" && Search._index) || {};
  const known = (word) => [index.terms, index.titleterms].some(
    (terms) => terms && Object.prototype.hasOwnProperty.call(terms, word));
  const words = [];
  for (const run of query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)) {
    for (const part of run.match(/\p{Script=Han}+|[^\p{Script=Han}]+/gu) || []) {
      if (!/\p{Script=Han}/u.test(part) || part.length < 3 || known(part)) {
        words.push(part);
        continue;
      }
      const found = [];
      for (let i = 0; i < part.length;) {
        let j = Math.min(part.length, i + 8);
        while (j > i + 1 && !known(part.slice(i, j))) j--;
        if (j > i + 1) found.push(part.slice(i, j));
        i = j > i + 1 ? j : i + 1;
      }
      words.push(...(found.length ? found : [part]));
    }
  }
  return words;
};
"""


class _Wording(gettext.NullTranslations):
    """A language's wording of the themes' strings, asked before their catalogs (its fallback)."""

    def __init__(self, table: dict[str, str], behind: gettext.NullTranslations | None):
        super().__init__()
        self._table = table
        if behind is not None:
            self.add_fallback(behind)

    def gettext(self, message):
        return self._table.get(message) or super().gettext(message)


def _theme_wording(app, config) -> None:
    """Put the language's wording in front of the ``sphinx`` domain (Sphinx's strings and pydata-sphinx-theme's,
    which adds its catalog to that domain; the templates' ``_``, installed from ``app.translator`` when the builder
    starts) and the ``booktheme`` domain (sphinx-book-theme's ``translate``)."""
    from sphinx import locale

    from .locales import LANGUAGES

    lang = LANGUAGES.get(config.language)
    if lang is None or not lang.interface:
        return
    for domain in ("sphinx", "booktheme"):
        current = locale.translators.get(("general", domain))
        if isinstance(current, _Wording):
            continue
        wording = _Wording(lang.interface, current)
        locale.translators["general", domain] = wording
        if domain == "sphinx":
            app.translator = wording


def _search_language():
    """Sphinx's Chinese search language, the Latin words it has seen kept in a set (a membership test
    only: the index it builds is the same)."""
    from sphinx.search import zh

    class SearchChinese(zh.SearchChinese):
        js_splitter_code = SPLITTER_JS

        def init(self, options):
            super().init(options)
            self.latin_terms = set()

        def split(self, input):
            chinese = list(zh.jieba.cut_for_search(input)) if zh.JIEBA else []
            latin = [term.strip() for term in self.latin1_letters.findall(input)]
            self.latin_terms.update(latin)
            return chinese + latin

    return SearchChinese


def _quiet_jieba() -> None:
    """jieba logs its dictionary loading at DEBUG on every build; a build prints progress, not that."""
    import logging

    try:
        import jieba
    except ImportError:
        return
    jieba.setLogLevel(logging.WARNING)


def setup(app):
    from sphinx import search

    _patch()
    _quiet_jieba()
    search.languages["zh"] = _search_language()
    app.connect("config-inited", _theme_wording)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
