"""nbgrader preprocessor for feedback: students see their scores and errors, never the hidden tests.

nbgrader's gradebook keeps each test cell's full source, hidden block included, and writes it back
into the autograded notebook; ``generate_feedback`` would show it. This step removes the hidden region
from graded cells and cuts every error in a graded test cell to its last line (a traceback quotes the
source lines it passed through, hidden ones too). ``nbgrader_config.py`` puts it in the feedback pipeline,
so plain ``nbgrader generate_feedback`` is safe as well.
"""

from __future__ import annotations

import re

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbgrader.preprocessors import NbGraderPreprocessor

from ..cells import split_hidden


def without_hidden(source: str) -> str:
    visible, hidden = split_hidden(source)
    return visible + ("\n# (hidden tests ran here)" if hidden.strip() else "")


class HideHiddenTests(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade"):
            cell.source = without_hidden(cell.source)
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


# nbconvert's HTMLExporter re-parses every page it writes with BeautifulSoup (html.parser) only to give
# images without one an alt text and make cells focusable: a third of the time of a feedback page, whose
# highlighted code is thousands of tags. The same edits as string substitutions (the feedback template
# writes plain <img ...> and <div class="..."> tags; an alt inside a data URI cannot occur: no quotes there).
NO_ALT = "No description has been provided for this image"
_IMG_WITHOUT_ALT = re.compile(r"<img\b(?![^>]*\salt=)")
_FOCUSABLE = re.compile(r'<div class="([^"]*\b(?:jp-Cell-inputWrapper|jp-OutputArea-output)\b[^"]*)"')


def accessible(html: str) -> str:
    html = _IMG_WITHOUT_ALT.sub(f'<img alt="{NO_ALT}"', html)
    return _FOCUSABLE.sub(r'<div class="\1" tabindex="0"', html)


class FeedbackHTML(HTMLExporter):
    """HTMLExporter with its accessibility pass done by `accessible` instead of a BeautifulSoup parse."""

    def from_notebook_node(self, nb, resources=None, **kw):
        info = nb.metadata.get("language_info", {})
        lexer = info.get("pygments_lexer", info.get("name", None))
        self.register_filter("highlight_code",
                             self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type",
                             WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self,
                                                   resources=resources))
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return accessible(html), resources
