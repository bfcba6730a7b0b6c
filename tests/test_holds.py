"""Points held for review (issue 27, grader/grading/holds.py), through `grader autograde`, `grader report`
and `grader review`: a cell the grader's reading cannot vouch for holds the points of every test after it
(the tests before it count), the student's feedback says so, formgrader sees a manual grade to give, the
instructor's decision counts and lasts while the cells behind the hold are unchanged."""

from __future__ import annotations

import copy
import subprocess
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook

from grader.cells import exercises, nbgrader_meta
from grader.course import Course
from grader.dev import samples
from grader.grading import holds
from grader.grading.report import collect
from grader.grading.verdict import HELD_NOTE

pytestmark = pytest.mark.usefixtures("release")

COURSE = Course.here()
CH = next(ch for ch in COURSE.chapters() if samples.student_code(COURSE, ch))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=COURSE.root, capture_output=True,
                          text=True, timeout=900)


def _after_first_test(nb: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    at = next(i for i, c in enumerate(nb.cells)
              if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution"))
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(source))
    return nb


def test_held_points_wait_for_the_instructors_decision(tmp_path):
    released = samples.released(COURSE, CH)
    points = samples.exercise_points(released)
    first = exercises(released)[0].name
    good = samples.fill(released, {ex: v["correct"] for ex, v in samples.student_code(COURSE, CH).items()})
    full = sum(points.values())
    ws = COURSE.workspace(tmp_path / "work")

    def grade(nb, plain=False):
        inbox = tmp_path / f"in-{len(list(tmp_path.iterdir()))}"
        samples.hand_in(inbox, "h-late", CH, nb)
        if plain:
            samples.hand_in(inbox, "h-plain", CH, good)
        result = cli("autograde", str(inbox), "--workdir", str(ws.folder), "--chapter", CH.id)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        return {r.student: r for r in collect(ws)}

    late = _after_first_test(good, "import gc  # after the first exercise's test")
    rows = grade(late, plain=True)
    row = rows["h-late"]
    assert (row.status, row.score, row.held) == ("flagged", points[first], full - points[first]), row
    assert "held for review" in row.reason and "imports gc" in row.reason, row.reason
    notebook = nbformat.read(ws.path("autograded", "h-late", CH.id) / CH.notebook.name, as_version=4)
    shown = [o.get("text", "") for c in notebook.cells for o in c.get("outputs", [])]
    assert sum(HELD_NOTE in t for t in shown) == len(points) - 1, "every test after the cell says it is held"
    with Gradebook(ws.db_url) as gb:
        assert gb.find_submission(CH.id, "h-late").needs_manual_grade  # formgrader lists it
    listing = cli("review", "--workdir", str(ws.folder))
    assert listing.returncode == 0 and "h-late" in listing.stdout and "import gc  # after" in listing.stdout, \
        listing.stdout
    table = cli("report", "--workdir", str(ws.folder), "--no-feedback")
    assert f"{full - points[first]:g}" in next(line for line in table.stdout.splitlines() if "h-late" in line)

    released_ = cli("review", "--workdir", str(ws.folder), "--release", "h-late", CH.id)
    assert released_.returncode == 0, released_.stderr
    row = {r.student: r for r in collect(ws)}["h-late"]
    assert (row.score, row.held) == (full, 0), row
    with Gradebook(ws.db_url) as gb:
        assert not gb.find_submission(CH.id, "h-late").needs_manual_grade
    # graded again unchanged: the decision stands; edited: held afresh, and a kept hold stays at 0
    assert grade(late)["h-late"].score == full
    edited = _after_first_test(good, "import gc  # edited since the review")
    row = grade(edited)["h-late"]
    assert (row.score, row.held) == (points[first], full - points[first]), row
    assert cli("review", "--workdir", str(ws.folder), "--keep", "h-late", CH.id).returncode == 0
    row = {r.student: r for r in collect(ws)}["h-late"]
    assert (row.score, row.held) == (points[first], 0), row
    # nothing to hold any more: the hold and its zero are gone
    row = grade(good)["h-late"]
    assert (row.status, row.score, row.held) == ("graded", full, 0), row
    assert not [h for h in holds.load(ws.db_url) if h.student == "h-late"]
    assert rows["h-plain"].score == full and rows["h-plain"].held == 0
    nothing = cli("review", "--workdir", str(ws.folder), "--release", "h-plain", CH.id)
    assert nothing.returncode == 2 and "nothing of h-plain" in nothing.stderr, nothing.stderr
