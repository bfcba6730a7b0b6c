"""nbgrader preprocessor for feedback: students see their scores and errors, never the hidden tests.

nbgrader's gradebook keeps each test cell's full source, hidden block included, and writes it back
into the autograded notebook; ``generate_feedback`` would show it. This step removes the hidden region
from graded cells and cuts every error in a graded test cell to its last line (a traceback quotes the
source lines it passed through, hidden ones too). ``nbgrader_config.py`` puts it in the feedback pipeline,
so plain ``nbgrader generate_feedback`` is safe as well.
"""

from __future__ import annotations

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
