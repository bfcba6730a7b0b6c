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
class Kit:
    """Everything the grader needs about one chapter, built from its source notebook."""

    chapter: Chapter | None  # None in validate's student mode, where nothing reads it
    tests: dict[str, TestCell]  # by grade_id, in notebook order
    solution_ids: set[str]

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests.values())



@dataclass
class Plan:
    cells: list[dict]  # what the sandbox runs (see grader.grading.harness)
    origin: list[int | None]  # for each planned cell, the index of the student's cell (None: restored)
    restored: list[str]  # test cells the submission lacked, put back


def plan(kit: Kit, nb: nbformat.NotebookNode) -> Plan:
    cells: list[dict] = []
    origin: list[int | None] = []
    placed: set[str] = set()

    def add_test(grade_id: str, index: int | None) -> None:
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
    restored = [g for g in kit.tests if g not in placed]
    for grade_id in restored:
        add_test(grade_id, None)
    restored = sorted(set(restored) | {g for g in placed if g not in present})
    return Plan(cells, origin, restored)
