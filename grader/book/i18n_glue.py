"""A Sphinx extension for the translated sites: glued values in translated text, and a Chinese search
index built in linear time.

Sphinx translates a paragraph by parsing its translation as a small document of its own (source
``<translated>``), which MyST-NB parses as plain MyST without the notebook's renderer, so that a
``{glue:text}`` role in a translation finds no glue data ("No key ... found in glue data for this
document"). This extension remembers each notebook's renderer when MyST-NB parses the page and hands it to
the translations parsed for that page, so a translated sentence shows the same computed number as the
English one.

Sphinx 7.4's Chinese search language keeps every Latin word of every page in one list and asks, for each
word it stems, whether the word is in that list: quadratic in the size of the book (34 of the Chinese
build's 80 s). :class:`SearchChinese` keeps them in a set, with the same answers.
"""

from __future__ import annotations

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


def _search_language():
    """Sphinx's Chinese search language, the Latin words it has seen kept in a set (a membership test
    only: the index it builds is the same)."""
    from sphinx.search import zh

    class SearchChinese(zh.SearchChinese):
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
    return {"parallel_read_safe": False, "parallel_write_safe": True}
