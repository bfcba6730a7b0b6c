"""Which cells of a student's notebook run, in what order, with the instructor's test cells in place.

Grading (:mod:`grader.grading.verdict`) and the student's self-check (:mod:`grader.student.validate`) run
the same plan, so a notebook passes ``grader validate`` exactly when its visible tests pass in grading. A
:class:`Kit` is one chapter's test cells; grading adds each test's prepared hidden checks to it
(``TestCell.checks``: objects with ``check.target``, ``check.banned`` and ``folder``), validate none.
Nothing here imports torch, nbgrader or the sandbox: this module is part of the student kit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import nbformat

from .cells import is_demo, nbgrader_meta, split_hidden
from .course import Chapter


@dataclass
class TestCell:
    grade_id: str
    exercise: str
    points: float
    visible: str
    metadata: dict
    checks: list[Any] = field(default_factory=list)  # grading's PreparedCheck objects

    @classmethod
    def of(cls, cell, exercise: str) -> TestCell:
        """The test cell of ``exercise`` as the notebook has it: its visible part (no hidden checks yet)."""
        meta = nbgrader_meta(cell)
        return cls(meta["grade_id"], exercise, float(meta.get("points", 0)), split_hidden(cell.source)[0],
                   dict(cell.metadata))


@dataclass
class GivenCell:
    """A code cell the course gives every student (setup, helpers, launchers): not a solution, test or demo."""

    id: str | None  # its nbformat cell id, which the release keeps
    source: str
    before: str | None  # the grade_id of the first solution or test cell after it in the source (None: none)


def given_cells(nb: nbformat.NotebookNode) -> list[GivenCell]:
    """The source notebook's given cells, in order, each with the graded cell it precedes."""
    found: list[GivenCell] = []
    pending: list[GivenCell] = []
    for cell in nb.cells:
        if cell.get("cell_type") != "code" or is_demo(cell):
            continue
        meta = nbgrader_meta(cell)
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        if isinstance(meta, dict) and (meta.get("solution") or meta.get("grade")):
            for g in pending:
                g.before = grade_id
            pending = []
            continue
        source = cell.get("source", "")
        g = GivenCell(cell.get("id"), source if isinstance(source, str) else "".join(source), None)
        found.append(g)
        pending.append(g)
    return found


@dataclass
class Kit:
    """Everything the grader needs about one chapter, built from its source notebook."""

    chapter: Chapter | None  # None in validate's student mode, where nothing reads it
    tests: dict[str, TestCell]  # by grade_id, in notebook order
    solution_ids: set[str]
    #: the course's given cells: they run in place of the submission's copies, edited, moved or deleted
    #: (empty in validate's student mode, where the notebook is its own reference)
    given: list[GivenCell] = field(default_factory=list)

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests.values())



@dataclass
class Plan:
    cells: list[dict]  # what the sandbox runs (see grader.grading.harness)
    origin: list[int | None]  # for each planned cell, the index of the student's cell (None: restored)
    restored: list[str]  # test cells the submission lacked, put back
    #: given cells the submission had edited or lacked: the course's ran instead (their place in the source)
    given_restored: list[int] = field(default_factory=list)


def plan(kit: Kit, nb: nbformat.NotebookNode) -> Plan:
    cells: list[dict] = []
    origin: list[int | None] = []
    placed: set[str] = set()

    by_id = {g.id: g for g in kit.given if g.id}
    by_source = {g.source.strip(): g for g in kit.given}
    ran: set[int] = set()  # id() of the given cells placed
    given_restored: list[int] = []

    def add_given(g: GivenCell, index: int | None, edited: bool) -> None:
        cells.append({"kind": "code", "source": g.source, "given": True})
        origin.append(index)
        ran.add(id(g))
        if edited or index is None:
            given_restored.append(kit.given.index(g))

    def given_before(grade_id: str | None) -> None:
        """The given cells that precede ``grade_id`` in the source and have not run yet: before it, in order."""
        for g in kit.given:
            if g.before == grade_id and id(g) not in ran:
                add_given(g, None, False)

    def add_test(grade_id: str, index: int | None) -> None:
        given_before(grade_id)
        test = kit.tests[grade_id]
        cells.append({"kind": "test", "grade_id": grade_id, "source": test.visible,
                      "checks": [{"target": p.check.target, "banned": list(p.check.banned),
                                  "cases": str(p.folder)} for p in test.checks]})
        origin.append(index)
        placed.add(grade_id)

    missing_after: dict[str, list[str]] = {}
    present = {nbgrader_meta(c).get("grade_id") for c in nb.cells if isinstance(nbgrader_meta(c), dict)}
    for grade_id, test in kit.tests.items():
        if grade_id not in present:
            missing_after.setdefault(test.exercise, []).append(grade_id)

    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        meta = nbgrader_meta(cell)
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        graded = grade_id in kit.tests or grade_id in kit.solution_ids
        if graded:
            given_before(grade_id)
        else:
            source = cell.get("source", "")
            source = source if isinstance(source, str) else "".join(source)
            g = by_id.get(cell.get("id")) if isinstance(cell.get("id"), str) else None
            g = g or by_source.get(source.strip())
            if g is not None:  # the course's copy runs, whatever the submission made of it
                if id(g) not in ran:
                    add_given(g, index, source.strip() != g.source.strip())
                continue
        if grade_id in kit.tests:
            if grade_id not in placed:
                add_test(grade_id, index)
            continue  # a duplicate of a test cell runs nothing
        if is_demo(cell):
            continue
        source = cell.get("source", "")
        cells.append({"kind": "code", "source": source if isinstance(source, str) else "".join(source)})
        origin.append(index)
        for restored in missing_after.pop(grade_id, []) if grade_id in kit.solution_ids else []:
            add_test(restored, None)
    for g in kit.given:  # the given cells after the last graded one, and any whose graded cell is gone
        if id(g) not in ran:
            add_given(g, None, False)
    restored = [g for g in kit.tests if g not in placed]
    for grade_id in restored:
        add_test(grade_id, None)
    restored = sorted(set(restored) | {g for g in placed if g not in present})
    return Plan(cells, origin, restored, sorted(given_restored))
