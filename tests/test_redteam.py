"""The red-team class (grader/redteam.py) through `grader autograde`: attacks on the grader earn
nothing, harmless extras cost nothing, fatal extras and broken input are recorded without stopping the
run, and nobody's grade moves because of someone else's submission."""

from __future__ import annotations

import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from grader.course import Course
from grader.dev import redteam
from grader.grading.report import collect

COURSE = Course.here()
TIMEOUT = 60  # seconds per notebook: the infinite loop must be stopped by it


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    inbox = tmp_path_factory.mktemp("redteam")
    ws = COURSE.workspace(tmp_path_factory.mktemp("redteam-work"))
    others = [ch for ch in COURSE.chapters() if ch.slug != "qkv"]
    expect = redteam.build(COURSE, inbox, workdir=ws.folder, other=others[0] if others else None)
    result = subprocess.run([sys.executable, "-m", "grader", "autograde", str(inbox), "--workdir", str(ws.folder),
                             "--jobs", "2", "--timeout", str(TIMEOUT)], cwd=COURSE.root, capture_output=True,
                            text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {r.student: r for r in collect(ws)}
    return expect, rows, ws, result.stdout


def test_every_red_team_case_gets_its_expected_grade(graded):
    expect, rows, _, log = graded
    problems = []
    for name, want in sorted(expect.items()):
        row = rows.get(name)
        if row is None:
            problems.append(f"{name}: no record")
            continue
        got = f"{row.score:g} {row.status} ({row.reason})"
        if row.status != want.status:
            problems.append(f"{name} [{want.about}]: expected {want.status}, got {got}")
        elif want.score is not None and row.score != want.score:
            problems.append(f"{name} [{want.about}]: expected {want.score:g}, got {got}")
        elif want.reason and want.reason not in row.reason:
            problems.append(f"{name} [{want.about}]: expected a reason with {want.reason!r}, got {got}")
    assert not problems, "\n".join(problems) + "\n\n" + log[-4000:]


def test_the_sandbox_ran_with_full_isolation_here(graded):
    *_, log = graded
    assert "sandbox: full" in log, log[:2000]


def test_gradebook_attack_changed_nobody_and_max_scores_are_the_sources(graded):
    expect, rows, ws, _ = graded
    points = redteam.chapter_points(COURSE)
    with Gradebook(ws.db_url) as gb:
        for sub in gb.find_assignment("ch02_qkv").submissions:
            assert sub.max_score == points
            for nb in sub.notebooks:
                for grade in nb.grades:
                    assert grade.auto_score in (0, grade.max_score), (sub.student.id, grade.name, grade.auto_score)


def test_hidden_tests_never_reach_what_a_student_reads(graded):
    expect, rows, ws, _ = graded
    result = subprocess.run([sys.executable, "-m", "grader", "report", "--workdir", str(ws.folder)],
                            cwd=COURSE.root, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    pages = list(ws.path("feedback").rglob("*.html")) + list(ws.path("autograded").rglob("*.ipynb"))
    assert pages
    for page in pages:
        text = page.read_text()
        for secret in ("BEGIN HIDDEN TESTS", "check_close", "check_module", "check_property", "solutions.cases",
                       "grader.checks"):
            assert secret not in text, f"{page} shows {secret!r}"
