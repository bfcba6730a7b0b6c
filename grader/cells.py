"""Reading a course notebook's nbgrader cells: exercises, their graded test cells, hidden blocks."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import nbformat

BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
# Cells tagged ``demo`` (training runs, timings, figures) are not run while grading or validating;
# ``claim`` cells (also ``demo``) assert what the book says of a demo and are left out of the release.
DEMO_TAG, CLAIM_TAG = "demo", "claim"
SKIPPED = "# (demo cell: not run while grading)"


def nbgrader_meta(cell: nbformat.NotebookNode) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def tags(cell: nbformat.NotebookNode) -> list[str]:
    found = cell.get("metadata", {}).get("tags", [])
    return found if isinstance(found, list) else []


def is_demo(cell: nbformat.NotebookNode) -> bool:
    """An ungraded code cell tagged ``demo`` or ``claim``: grading and ``grader validate`` skip it."""
    return (cell.get("cell_type") == "code" and not nbgrader_meta(cell)
            and (DEMO_TAG in tags(cell) or CLAIM_TAG in tags(cell)))


def is_claim(cell: nbformat.NotebookNode) -> bool:
    """A claim cell: it asserts (and glues) what the prose says of the demo above it. Staging hides it from
    readers (``remove-cell``), the student release leaves it out, grading skips it."""
    return cell.get("cell_type") == "code" and CLAIM_TAG in tags(cell) and not nbgrader_meta(cell)


def checksum(cell: nbformat.NotebookNode) -> str:
    """nbgrader's checksum of a cell (``nbgrader.utils.compute_checksum``, computed the same way so that the
    student kit needs no nbgrader): it changes when the source, type, role, grade id or points change."""
    meta = cell.metadata["nbgrader"]
    grade, solution = meta.get("grade", False), meta.get("solution", False)
    locked = False if solution else True if grade else meta.get("locked", False)
    md5 = hashlib.md5()
    for part in (cell.source, cell.cell_type, str(grade), str(solution), str(locked), meta["grade_id"]):
        md5.update(part.encode("utf-8"))
    if grade:
        md5.update(str(float(meta["points"])).encode("utf-8"))
    return md5.hexdigest()


def grade_ids(nb: nbformat.NotebookNode) -> set[str]:
    """The nbgrader ``grade_id`` of every cell that has one (metadata of any shape is tolerated)."""
    ids = set()
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str):
            ids.add(meta["grade_id"])
    return ids


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
