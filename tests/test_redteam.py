"""The red-team class (grader/dev/redteam.py) through `grader autograde`: attacks on the grader earn
nothing, harmless extras cost nothing, fatal extras and broken input are recorded without stopping the
run, and nobody's grade moves because of someone else's submission. The attacks of issue 13 (escaping
the sandbox, forging results, links in the submissions, bad return values, sabotaged visible tests,
banned families, CPU hogs) are graded beside the correct victim `rt-correct-plain`, and no host file
they aim at may change."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from grader.course import Course
from grader.dev import redteam
from grader.grading.report import collect

# the sample submissions are made from the student release: made once per test run (conftest)
pytestmark = pytest.mark.usefixtures("release")

COURSE = Course.here()
TIMEOUT = 60  # seconds per notebook: the infinite loop must be stopped by it


def _fingerprint(folders: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for folder in folders
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    inbox = tmp_path_factory.mktemp("redteam")
    ws = COURSE.workspace(tmp_path_factory.mktemp("redteam-work"))
    host = tmp_path_factory.mktemp("redteam-host")
    host.chmod(0o777)
    (host / "canary.txt").write_text("canary\n")
    (host / "canary.txt").chmod(0o666)
    others = [ch for ch in COURSE.chapters() if ch.slug != "qkv"]
    expect = redteam.build(COURSE, inbox, workdir=ws.folder, other=others[0] if others else None, host=host)
    expect.update(redteam.build_memory(COURSE, inbox))
    course_files = [COURSE.root / "solutions", COURSE.book]
    before = _fingerprint(course_files)
    traces_before = redteam.host_traces(host)
    result = subprocess.run([sys.executable, "-m", "grader", "autograde", str(inbox), "--workdir", str(ws.folder),
                             "--jobs", "2", "--timeout", str(TIMEOUT)], cwd=COURSE.root, capture_output=True,
                            text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {r.student: r for r in collect(ws)}
    after = _fingerprint(course_files)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    return expect, rows, ws, result.stdout, {"traces": (traces_before, redteam.host_traces(host)),
                                             "course_changed": changed}


def test_every_red_team_case_gets_its_expected_grade(graded):
    expect, rows, _, log, _ = graded
    problems = []
    for name, want in sorted(expect.items()):
        if want.open:
            continue  # a known gap: test_known_gaps_are_still_open
        row = rows.get(name)
        if row is None:
            problems.append(f"{name}: no record")
            continue
        # the points judged: a flagged cell's later tests are judged and held for review (test_held_for_review...)
        got = f"{row.score:g} + {row.held:g} held {row.status} ({row.reason})"
        if row.status != want.status:
            problems.append(f"{name} [{want.about}]: expected {want.status}, got {got}")
        elif row.held and row.status != "flagged":
            problems.append(f"{name} [{want.about}]: points held without a flag, got {got}")
        elif want.score is not None and row.score + row.held != want.score:
            problems.append(f"{name} [{want.about}]: expected {want.score:g}, got {got}")
        elif want.reason and want.reason not in row.reason:
            problems.append(f"{name} [{want.about}]: expected a reason with {want.reason!r}, got {got}")
    assert not problems, "\n".join(problems) + "\n\n" + log[-4000:]


def test_what_the_reading_cannot_vouch_for_earns_nothing_until_reviewed(graded):
    """Correct answers beside a cell the reading holds: judged in full, earned only once released."""
    expect, rows, *_ = graded
    for name in ("rt-correct-locked-cell", "rt-correct-magic-cell", "rt-banned-private-softmax"):
        row = rows[name]
        assert row.status == "flagged" and row.held > 0 and row.score + row.held == expect[name].score, row
    assert rows["rt-correct-locked-cell"].score == 0  # its cell comes before every test


def test_the_sandbox_ran_with_full_isolation_here(graded):
    _, _, _, log, _ = graded
    assert "sandbox: full" in log, log[:2000]


def test_gradebook_attack_changed_nobody_and_max_scores_are_the_sources(graded):
    expect, rows, ws, _, _ = graded
    points = redteam.chapter_points(COURSE)
    with Gradebook(ws.db_url) as gb:
        for sub in gb.find_assignment("ch02_qkv").submissions:
            assert sub.max_score == points
            for nb in sub.notebooks:
                for grade in nb.grades:
                    assert grade.auto_score in (0, grade.max_score), (sub.student.id, grade.name, grade.auto_score)


def test_hidden_tests_never_reach_what_a_student_reads(graded):
    expect, rows, ws, _, _ = graded
    result = subprocess.run([sys.executable, "-m", "grader", "report", "--workdir", str(ws.folder)],
                            cwd=COURSE.root, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    pages = list(ws.path("feedback").rglob("*.html")) + list(ws.path("autograded").rglob("*.ipynb"))
    assert pages
    for page in pages:
        text = page.read_text()
        for secret in ("BEGIN HIDDEN TESTS", "check_close", "check_module", "check_property", "solutions.cases",
                       "grader.checks", redteam.LEAK_MARK):  # the last: hidden inputs a notebook kept (class 8)
            assert secret not in text, f"{page} shows {secret!r}"


def test_no_attack_changed_a_host_file(graded):
    *_, host = graded
    before, after = host["traces"]
    assert before == [] and after == [], after
    assert not host["course_changed"], sorted(host["course_changed"])[:10]


def test_the_victim_beside_the_attacks_keeps_its_grade(graded):
    expect, rows, *_ = graded
    victim = rows["rt-correct-plain"]
    assert (victim.status, victim.score) == ("graded", expect["rt-correct-plain"].score), victim


def test_a_linked_timestamp_is_not_copied_into_the_gradebook_folders(graded):
    _, _, ws, _, _ = graded
    copied = ws.path("submitted", "rt-timestamp-link", "ch02_qkv")
    assert (copied / "qkv.ipynb").is_file()
    assert not (copied / "timestamp.txt").exists()
    assert not list(ws.path("sandbox", "jobs").iterdir()), "job folders are removed after grading"


def test_no_case_is_left_open_and_open_ones_would_be_checked(graded):
    """Class 6 of issue 13 closed the last known gaps; a case marked ``open`` again must still say why and
    is reported here, so a gap cannot hide behind the mark."""
    expect, rows, *_ = graded
    still_open = {name: (want.open, rows[name].score) for name, want in expect.items() if want.open}
    assert not still_open, still_open
