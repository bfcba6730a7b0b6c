"""The student view of an executed source notebook: solutions and hidden tests removed, outputs kept.

It uses nbgrader's own preprocessors (``ClearSolutions``, ``ClearHiddenTests``), exactly what
``nbgrader generate_assignment`` applies, and then refuses to return anything that still carries a marker.
"""

from __future__ import annotations

import copy

import nbformat
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

from ..course import GraderError

#: Text that must never reach a student or the published site.
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


class LeakError(GraderError):
    """Stripping left instructor-only text in a notebook."""


def student_view(nb: nbformat.NotebookNode, *, label: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    resources: dict = {}
    try:
        nb, resources = ClearSolutions().preprocess(nb, resources)
        nb, resources = ClearHiddenTests().preprocess(nb, resources)
    except RuntimeError as exc:  # nbgrader's word for an unbalanced or misplaced region
        raise LeakError(f"{label}: cannot strip it safely: {exc}") from None
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            cell.outputs = []  # whatever the reference printed in a solution cell stays private
    for index, cell in enumerate(nb.cells):
        text = cell.source + "".join(str(o) for o in cell.get("outputs", []))
        for marker in MARKERS:
            if marker in text:
                raise LeakError(f"{label}: cell {index} still contains '{marker}' after stripping")
    return nb
