"""Reading a course notebook's nbgrader cells: exercises, their graded test cells, hidden blocks."""

from __future__ import annotations

from dataclasses import dataclass

import nbformat

BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"


def nbgrader_meta(cell: nbformat.NotebookNode) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def title(nb: nbformat.NotebookNode, default: str) -> str:
    """The notebook's first ``# `` heading (a chapter's title), or ``default``."""
    return next((line[2:].strip() for cell in nb.cells if cell.cell_type == "markdown"
                 for line in cell.source.splitlines() if line.startswith("# ")), default)


def split_hidden(source: str) -> tuple[str, str]:
    """``(visible, hidden)``: the test cell's lines outside and inside its hidden-test region."""
    visible, hidden, inside = [], [], False
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped == BEGIN_HIDDEN:
            inside = True
        elif stripped == END_HIDDEN:
            inside = False
        else:
            (hidden if inside else visible).append(line)
    return "\n".join(visible), "\n".join(hidden)


def hidden_blocks(nb: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id of each graded test cell -> the text of its hidden-test block."""
    return {nbgrader_meta(c)["grade_id"]: split_hidden(c.source)[1] for c in nb.cells if nbgrader_meta(c).get("grade")}


def solution_regions(source: str) -> list[str]:
    regions, current = [], None
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped == BEGIN_SOLUTION:
            current = []
        elif stripped == END_SOLUTION and current is not None:
            regions.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return regions


@dataclass
class Exercise:
    name: str
    solution: nbformat.NotebookNode
    tests: list[nbformat.NotebookNode]

    @property
    def points(self) -> float:
        return sum(float(nbgrader_meta(c).get("points", 0)) for c in self.tests)


def exercises(nb: nbformat.NotebookNode) -> list[Exercise]:
    """Each solution cell (``grade_id`` = exercise name) with the graded cells ``test_<name>...``."""
    found = [Exercise(nbgrader_meta(c)["grade_id"], c, []) for c in nb.cells
             if nbgrader_meta(c).get("solution") and c.cell_type == "code"]
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("grade") and cell.cell_type == "code":
            owners = [ex for ex in found if meta["grade_id"].startswith(f"test_{ex.name}")]
            if owners:
                max(owners, key=lambda ex: len(ex.name)).tests.append(cell)
    return found
