"""The grader's side of hardened autograding: what to run, and deciding the points where no student
code ever ran.

* :func:`prepare_chapter` reads the *instructor's* source notebook once per chapter: the test cells, their
  points, their visible asserts and their hidden checks (read statically, never executed); it generates
  every check's cases and computes the reference outputs here, in the trusted process
  (:mod:`grader.grading.prepared` keeps the result for later runs).
* :func:`plan` turns a student's notebook into the list of cells the sandbox runs: the student's code
  cells in their order, every graded test cell replaced by the instructor's visible part (a test cell the
  student edited, re-typed or deleted is restored, points included), demo cells skipped.
* :func:`decide` reads what the sandbox wrote (validated plain data), and awards a test cell's points when
  its visible asserts ran without error and every hidden check is satisfied, judged here against the
  reference outputs.
* :func:`record` writes the grades into nbgrader's gradebook in one transaction and the autograded
  notebook (visible tests and messages, never hidden tests) that nbgrader's feedback is made from. That
  notebook shows at most :data:`wire.MAX_OUTPUT_CHARS` characters of what the cells printed (a note says where
  the rest was cut; the test cells' verdicts are always shown), and no lone surrogate: it is made in memory
  and then written, so nothing a notebook prints reaches the host's disk beyond that bound.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import torch

from .. import checks
from ..cells import exercises, nbgrader_meta, split_hidden
from ..course import Chapter, Workspace
from ..plan import Kit, Plan, TestCell, given_cells
from ..submission import scrub
from . import wire

HIDDEN_NOTE = "# (hidden tests ran here)"
WITHHELD_NOTE = ("[output not shown: this cell ran after the hidden tests had given the notebook their inputs, "
                 "which stay hidden; run the notebook yourself to see it]\n")
HELD_NOTE = ("[held for review: this test passed, but it ran after a cell of yours that uses what the grader's "
             "reading does not let through (the reason is with your grade); its points count once your "
             "instructor has looked at it]\n")
CUT_NOTE = (f"\n[... output not kept: the autograded notebook shows at most {wire.MAX_OUTPUT_CHARS:,} characters "
            "of the notebook's output]\n")


@dataclass
class PreparedCheck:
    check: checks.Check
    cases: list[checks.Case]
    folder: Path
    expected: list[Any] | None


def build_kit(chapter: Chapter, nb: nbformat.NotebookNode,
              prepared: Callable[[str, int, checks.Check], PreparedCheck]) -> Kit:
    """The chapter's kit from its source notebook ``nb``: test cells, points, visible parts, and each hidden
    check (read statically) as ``prepared(grade_id, k, check)`` makes it, ``k`` the check's place in its
    cell. :func:`prepare_chapter` computes them; :mod:`grader.grading.prepared` reads them from its cache."""
    tests: dict[str, TestCell] = {}
    solution_ids = set()
    for ex in exercises(nb):
        solution_ids.add(ex.name)
        for cell in ex.tests:
            test = TestCell.of(cell, ex.name)
            for k, check in enumerate(checks.parse_checks(split_hidden(cell.source)[1])):
                test.checks.append(prepared(test.grade_id, k, check))
            tests[test.grade_id] = test
    return Kit(chapter, tests, solution_ids, given_cells(nb))


def prepare_chapter(chapter: Chapter, folder: Path, nb: nbformat.NotebookNode | None = None) -> Kit:
    """Read the source notebook's tests (``nb``, or the chapter's file), generate the cases (written under
    ``folder``) and the reference outputs."""
    if nb is None:
        nb = nbformat.read(chapter.notebook, as_version=4)
    shutil.rmtree(folder, ignore_errors=True)

    def prepared(grade_id: str, k: int, check: checks.Check) -> PreparedCheck:
        with torch.random.fork_rng(devices=[]):
            cases = checks.prepare(check)
            expected = checks.reference_outputs(check, cases)
        where = folder / grade_id / str(k)
        wire.write_cases(where, cases)
        return PreparedCheck(check, cases, where, expected)

    return build_kit(chapter, nb, prepared)


# ---------------------------------------------------------------------------------------------------
# the verdict


@dataclass
class CellVerdict:
    grade_id: str
    points: float
    score: float
    message: str  # empty when passed
    output: str = ""
    held: bool = False  # judged, but its points wait for the instructor's review (grader.grading.holds)
    # what failed, for the instructor's item analysis (grader.grading.items): {"kind", "target", "case",
    # "cases": [[label, kind], ...]}; None when the test passed
    failure: dict | None = None

    @classmethod
    def again(cls, item) -> CellVerdict:
        """A stored verdict (a grader.grading.items.Item) as it was judged: a regrade of another
        exercise keeps it."""
        failure = {"kind": item.kind, "target": item.target, "case": item.case, "cases": item.cases,
                   "of": item.n_cases} if item.kind else None
        return cls(item.grade_id, item.points, item.score, item.message, item.output, item.held, failure)


def decide(kit: Kit, the_plan: Plan, results: wire.Results, stopped: str) -> list[CellVerdict]:
    """Award each test cell of the chapter from the sandbox's results.

    The points of a test cell depend only on what is judged here: the values the student's objects
    returned on the grader's cases, compared with the reference outputs (and the banned-call and memory
    records, which can only cost points). Whether the visible asserts passed is reported by the
    student's own process, so it is feedback shown with the cell, never a reason to award or withhold
    points; every visible requirement that should cost points is also a hidden check. A failure of the
    judge itself costs that cell, never the submission."""
    where = {cell["grade_id"]: i for i, cell in enumerate(the_plan.cells) if cell["kind"] == "test"}
    verdicts = []
    for grade_id, test in kit.tests.items():
        cell = results.cells.get(where[grade_id])
        if cell is None:
            why = stopped or results.problem or "the notebook stopped before it"
            verdicts.append(CellVerdict(grade_id, test.points, 0.0, f"this test did not run: {why}",
                                        failure={"kind": "not run", "target": "", "case": "", "cases": []}))
            continue
        try:
            verdicts.append(_judge_cell(test, cell, where[grade_id], results.metered))
        except Exception as exc:  # noqa: BLE001 -- a judge failure (OverflowError...) costs this cell only
            verdicts.append(CellVerdict(grade_id, test.points, 0.0,
                                        f"the grader could not judge this test's results: {type(exc).__name__}: "
                                        f"{str(exc)[:300]}", cell.output,
                                        failure={"kind": "grader", "target": "", "case": "", "cases": []}))
    return verdicts


NOT_MEASURED = ("MemoryNotMeasured: the grader could not measure this case's memory (the notebook did not "
                "complete its measured run), so it is not passed")


def _metered(case: checks.Case, got: checks.Outcome, record: wire.Metered | None) -> checks.Outcome:
    """A metered case's outcome: the one the meter recorded, its memory growth the kernel's figure for the
    case's window (or, where no cgroup measured it, the notebook's own reading); none recorded: the case
    counts as not measured, whatever the cell's frame says."""
    if record is None:
        return checks.Outcome(error=NOT_MEASURED, error_types=("MemoryNotMeasured",))
    outcome = record.outcome
    if record.kernel:
        outcome.rss_growth, outcome.rss_kernel = record.peak, True  # -1 (unreadable) fails closed in the judge
    return outcome


def _judge_cell(test: TestCell, cell: wire.CellResult, index: int,
                metered: dict[tuple[int, int, int], wire.Metered]) -> CellVerdict:
    visible = "" if cell.ok else (cell.error or "the test cell failed")
    prepared, got = None, []
    try:
        outcomes = cell.decoded()
        if not isinstance(outcomes, list) or len(outcomes) != len(test.checks):
            raise wire.WireError("wrong number of check results")
        for j, (prepared, got) in enumerate(zip(test.checks, outcomes)):
            if not isinstance(got, list):
                raise wire.WireError("bad check results")
            got = [wire.outcome_from_wire(o) for o in got]
            if len(got) == len(prepared.cases):
                got = [_metered(case, o, metered.get((index, j, i))) if checks.metered(case) else o
                       for i, (case, o) in enumerate(zip(prepared.cases, got))]
            checks.judge(prepared.check, prepared.cases, got, prepared.expected)
    except checks.CheckFailed as exc:
        message = visible or f"CheckFailed: {exc}"
        return CellVerdict(test.grade_id, test.points, 0.0, message[:2000], cell.output,
                           failure=_failure(exc, prepared, got))
    except (wire.WireError, TypeError, ValueError) as exc:
        return CellVerdict(test.grade_id, test.points, 0.0,
                           (visible or f"the results of this test could not be read: {exc}")[:2000], cell.output,
                           failure={"kind": "unreadable", "target": "", "case": "", "cases": []})
    return CellVerdict(test.grade_id, test.points, test.points, visible[:2000], cell.output)


def _failure(exc: checks.CheckFailed, prepared: PreparedCheck | None, got: list) -> dict:
    """What the instructor's item analysis keeps of a failed check: the first failure (what the student is
    shown) and every case of that check that fails, judged one at a time."""
    target = prepared.check.target if prepared is not None else ""
    cases = []
    if prepared is not None:
        try:
            cases = checks.failing_cases(prepared.check, prepared.cases, got, prepared.expected)
        except Exception:  # noqa: BLE001 -- the analysis is a courtesy: the verdict stands without it
            cases = []
    if exc.case and (exc.case, exc.kind) not in cases:
        cases.insert(0, (exc.case, exc.kind))
    return {"kind": exc.kind, "target": target, "case": exc.case, "cases": [list(c) for c in cases[:50]],
            "of": len(prepared.cases) if prepared is not None else 0}


# ---------------------------------------------------------------------------------------------------
# recording


def autograded_notebook(kit: Kit, nb: nbformat.NotebookNode, the_plan: Plan, results: wire.Results,
                        verdicts: list[CellVerdict]) -> nbformat.NotebookNode:
    """The student's notebook with the instructor's test cells and what grading printed (for feedback),
    within the bound on output (:class:`_Shown`) and without lone surrogates."""
    out = nbformat.v4.new_notebook(metadata=nb.get("metadata", {}))
    shown = _Shown()
    by_id = {v.grade_id: v for v in verdicts}
    planned_at = {origin: i for i, origin in enumerate(the_plan.origin) if origin is not None}
    # from the first hidden check on, the notebook's process has held hidden inputs: what it printed or
    # raised after that is not shown (issue 27, class 8), only the grader's verdicts
    hidden_from = next((i for i, c in enumerate(the_plan.cells) if c["kind"] == "test" and c["checks"]),
                       len(the_plan.cells))
    test_at = {c["grade_id"]: i for i, c in enumerate(the_plan.cells) if c["kind"] == "test"}
    for index, cell in enumerate(nb.cells):
        meta = nbgrader_meta(cell) if cell.get("cell_type") == "code" else {}
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        if grade_id in kit.tests:
            if index not in planned_at:
                continue  # a duplicate
            out.cells.append(_test_cell(kit.tests[grade_id], by_id[grade_id], shown,
                                        test_at[grade_id] > hidden_from))
            continue
        new = nbformat.from_dict(dict(cell))
        new.pop("id", None)
        if new.cell_type == "code" and index in planned_at and the_plan.cells[planned_at[index]].get("given"):
            new.source = the_plan.cells[planned_at[index]]["source"]  # what ran: the course's copy
        if new.cell_type == "code":
            new.outputs, new.execution_count = [], None
            record = results.cells.get(planned_at[index]) if index in planned_at else None
            if record and planned_at[index] > hidden_from:
                if (record.output or record.error) and (note := shown.take(WITHHELD_NOTE)) is not None:
                    new.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=note))
            elif record:
                if record.output and (text := shown.take(record.output)) is not None:
                    new.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=text))
                if record.error and (line := shown.take(record.error)) is not None:
                    new.outputs.append(_error(line))
        out.cells.append(new)
    present = {nbgrader_meta(c).get("grade_id") for c in out.cells}
    for grade_id, test in kit.tests.items():
        if grade_id not in present:
            out.cells.append(_test_cell(test, by_id[grade_id], shown, test_at[grade_id] > hidden_from))
    for cell in out.cells:
        cell.setdefault("id", os.urandom(4).hex())
    scrub(out)  # a notebook printed them; no UTF-8 file can hold them
    return out


class _Shown:
    """How much printed output the autograded notebook still shows: :data:`wire.MAX_OUTPUT_CHARS` characters
    in all, in the notebook's order; the text that crosses the bound is cut with :data:`CUT_NOTE`, and
    whatever comes after it is left out."""

    def __init__(self, chars: int = wire.MAX_OUTPUT_CHARS):
        self.left, self.cut = chars, False

    def take(self, text: str) -> str | None:
        if len(text) <= self.left:
            self.left -= len(text)
            return text
        if self.cut:
            return None
        kept, self.left, self.cut = text[:self.left], 0, True
        return kept + CUT_NOTE


def _error(line: str) -> nbformat.NotebookNode:
    name, _, value = line.partition(": ")
    return nbformat.v4.new_output("error", ename=name or "Error", evalue=value, traceback=[line])


def _test_cell(test: TestCell, verdict: CellVerdict, shown: _Shown, late: bool = False) -> nbformat.NotebookNode:
    """The instructor's test cell with its verdict. ``late``: it ran after hidden inputs had reached the
    notebook's process, so what that process printed or raised in it is withheld; the grader's own verdict
    is shown."""
    source = test.visible + (("\n" + HIDDEN_NOTE) if test.checks else "")
    cell = nbformat.v4.new_code_cell(source, metadata=json.loads(json.dumps(test.metadata)))
    if late:
        if verdict.output and (note := shown.take(WITHHELD_NOTE)) is not None:
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=note))
        if verdict.message:
            cell.outputs.append(_error(_public(verdict.message)))
        if verdict.held:
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=HELD_NOTE))
        return cell
    if verdict.output and (text := shown.take(verdict.output)) is not None:
        cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=text))
    if verdict.message:  # the verdict itself, always shown
        cell.outputs.append(_error(verdict.message))
    if verdict.held:
        cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=HELD_NOTE))
    return cell


def _public(message: str) -> str:
    """A late test cell's verdict without the notebook's own words: a verdict of the grader's (``CheckFailed``,
    made only of the grader's text) as it is; an error the notebook's process raised in the visible test
    reduced to its class, when that is one of Python's."""
    if message.startswith("CheckFailed: ") or message.startswith("this test did not run") \
            or message.startswith("the grader could not judge"):
        return message
    name = message.partition(":")[0].strip()
    cls = getattr(builtins, name, None) if name.isidentifier() else None
    shown = name if isinstance(cls, type) and issubclass(cls, BaseException) else "an error"
    return f"{shown}: the visible test failed (its message is withheld: it ran after hidden tests; run the " \
           "notebook yourself to see it)"


def hold_after(the_plan: Plan, verdicts: list[CellVerdict], cells: list[tuple[int, str, list[str]]]) -> set[str]:
    """Mark held the verdicts of the tests that run after the first of ``cells`` (notebook indices the
    reading could not vouch for; :func:`grader.grading.tamper.findings`) and earned points; return their
    grade ids. What the process did before that cell ran is evidence, what it did after is not."""
    if not cells:
        return set()
    first = min(i for i, _, _ in cells)
    starts = [k for k, origin in enumerate(the_plan.origin) if origin is not None and origin >= first]
    start = starts[0] if starts else 0  # a cell the plan does not show: everything is held
    after = {c["grade_id"] for k, c in enumerate(the_plan.cells) if c["kind"] == "test" and k > start}
    held = set()
    for v in verdicts:
        if v.grade_id in after and v.score > 0:
            v.held = True
            held.add(v.grade_id)
    return held


def record(ws: Workspace, kit: Kit, student: str, verdicts: list[CellVerdict],
           notebook: nbformat.NotebookNode, gb=None, hold=None, only: set | None = None) -> None:
    """Write the grades and the autograded notebook; into ``gb``, an open nbgrader ``Gradebook`` of
    ``ws``, when one is given (a class batch keeps one open), else into one opened for this."""
    from nbgrader.api import Gradebook

    ch = kit.chapter
    dest = ws.path("autograded", student, ch.id)
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / f".{ch.notebook.name}.tmp"
    nbformat.write(notebook, tmp)
    os.replace(tmp, dest / ch.notebook.name)
    if only:  # a regrade of some tests: the others' grades, holds and verdicts stay as they are
        verdicts = [v for v in verdicts if v.grade_id in only]
    if gb is None:
        with Gradebook(ws.db_url) as own:
            return record_grades(own, kit, student, verdicts, hold)
    record_grades(gb, kit, student, verdicts, hold)


def record_grades(gb, kit: Kit, student: str, verdicts: list[CellVerdict], hold=None) -> None:
    """The verdicts as the submission's auto scores, and the points ``hold`` (a
    :class:`grader.grading.holds.Hold`) keeps for review as a manual 0 over them, in one transaction; on any
    failure the session is rolled back, so an open gradebook stays usable for the next submission. The
    verdicts of the test cells not in ``verdicts`` are left as they are."""
    from . import holds, items

    ch = kit.chapter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbgrader's own SQLAlchemy session warnings, harmless here
        try:
            gb.update_or_create_student(student)
            sub = gb.update_or_create_submission(ch.id, student)
            # the submission's grades, loaded with it: one query, not one per verdict
            grades = {(nb.name, g.name): g for nb in sub.notebooks for g in nb.grades}
            mine = {}
            for v in verdicts:
                grade = grades.get((ch.slug, v.grade_id)) or gb.find_grade(v.grade_id, ch.slug, ch.id, student)
                grade.auto_score = v.score
                mine[v.grade_id] = grade
            holds.apply(gb.db, student, ch.id, mine, {v.grade_id: v.score for v in verdicts}, hold)
            items.store(gb.db, student, ch.id, {g: t.exercise for g, t in kit.tests.items()}, verdicts)
            gb.db.commit()
        except BaseException:
            gb.db.rollback()
            raise
