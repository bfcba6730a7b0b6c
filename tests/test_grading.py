"""End to end through the real autograde path (`grader autograde`: the sandbox, out-of-process verdicts,
nbgrader's gradebook): correct student code earns full marks, the untouched release earns zero, every
known-wrong implementation loses exactly its exercise's points, and broken input is recorded, not fatal."""

from __future__ import annotations

import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from grader.cells import exercises, nbgrader_meta, solution_regions
from grader.course import Course
from grader.dev import samples
from grader.grading import tamper
from grader.grading.report import collect

# the sample submissions are made from the student release: made once per test run (conftest)
pytestmark = pytest.mark.usefixtures("release")

COURSE = Course.here()
CHAPTERS = [ch for ch in COURSE.chapters() if samples.student_code(COURSE, ch)]


def grader_cli(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=COURSE.root, capture_output=True,
                          text=True, timeout=timeout)


put = samples.hand_in


def expected_class(root: Path) -> dict[tuple[str, str], dict]:
    """Lay out the submissions; return what each must score (or why it must fail)."""
    expect: dict[tuple[str, str], dict] = {}
    for ch in CHAPTERS:
        released = samples.released(COURSE, ch)
        points = samples.exercise_points(released)
        full = sum(points.values())
        variants = samples.student_code(COURSE, ch)
        correct = {ex: v["correct"] for ex, v in variants.items()}
        assert set(correct) == set(points), "every exercise needs a __correct student variant"

        def student(name: str, ch=ch) -> str:
            return f"t-{ch.slug}-{name}"

        # The instructor's source notebook delegates to `solutions`, which no sandbox can import: handed
        # in, it earns nothing (the answer key is out of a submission's reach). The reference itself earns
        # full marks in test_notebooks.py, and its code written out by a student in the `correct` variants.
        source = nbformat.read(ch.notebook, as_version=4)
        put(root, student("source"), ch, source)
        # the answer key is not importable in the sandbox: the source notebook earns only the exercises whose
        # solution region holds the answer itself (chapter 9's Triton kernel) instead of importing it
        inline = [ex.name for ex in exercises(source)
                  if not any(re.search(r"^\s*(from|import) solutions", region, re.M)
                             for region in solution_regions(ex.solution.source))]
        # its cells import the answer key, which the tamper reading flags for the instructor
        expect[student("source"), ch.id] = {"score": sum(points[ex] for ex in inline), "status": "flagged",
                                            "reason": "imports solutions."}
        put(root, student("stub"), ch, released)
        expect[student("stub"), ch.id] = {"score": 0}
        put(root, student("correct"), ch, samples.fill(released, correct))
        expect[student("correct"), ch.id] = {"score": full}
        put(root, student("warning"), ch, samples.fill(released, samples.with_warnings(correct)))
        expect[student("warning"), ch.id] = {"score": full}
        # Every other variant goes through nbgrader too, packed: submission j gives each exercise its
        # j-th further variant (the correct one once an exercise has run out), so each wrong variant is
        # graded once, beside right answers to other exercises, without one notebook per variant.
        others = {ex: sorted(v for v in by_variant if v != "correct") for ex, by_variant in variants.items()}
        for exercise, names in others.items():
            assert sum(not samples.is_correct(v) for v in names) >= 2, \
                f"{exercise} needs at least two wrong variants"
        for j in range(max(len(names) for names in others.values())):
            picked = {ex: names[j] for ex, names in others.items() if j < len(names)}
            code = {**correct, **{ex: variants[ex][v] for ex, v in picked.items()}}
            name = student(f"mix{j}")
            put(root, name, ch, samples.fill(released, code))
            wrong = [ex for ex, v in picked.items() if not samples.is_correct(v)]
            # a wrong variant may reach for a private kernel (the tamper reading flags it; tests/test_tamper.py)
            reaches = any(tamper.scan_source(variants[ex][v]) for ex, v in picked.items())
            expect[name, ch.id] = {"score": full - sum(points[ex] for ex in wrong),
                                   "status": "flagged" if reaches else "graded",
                                   "zero": [f"test_{ex}" for ex in wrong],
                                   "variants": ", ".join(f"{ex}__{v}" for ex, v in picked.items())}

    ch = CHAPTERS[0]
    released = samples.released(COURSE, ch)
    variants = samples.student_code(COURSE, ch)
    points = samples.exercise_points(released)
    full = sum(points.values())
    # one mistake shared by three students (the report must show it as one line: test_the_report_...)
    exercise, wrong = next((ex, v) for ex, vs in sorted(variants.items()) for v in sorted(vs)
                           if not samples.is_correct(v) and not tamper.scan_source(vs[v]))
    for i in range(1, 4):
        put(root, f"t-shared-{i}", ch, samples.fill(released, {**{ex: v["correct"] for ex, v in variants.items()},
                                                               exercise: variants[exercise][wrong]}))
        expect[f"t-shared-{i}", ch.id] = {"score": full - points[exercise], "zero": [f"test_{exercise}"],
                                          "variants": f"{exercise}__{wrong}", "shared": exercise}
    correct = samples.fill(released, {ex: v["correct"] for ex, v in variants.items()})
    text = nbformat.writes(correct)
    put(root, "t-renamed", ch, correct, name="Copy of notebook (1).ipynb")
    expect["t-renamed", ch.id] = {"score": full, "reason": "named Copy of notebook (1).ipynb"}
    other_kernel = nbformat.reads(text, as_version=4)
    other_kernel.metadata["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    put(root, "t-kernelspec", ch, other_kernel)
    expect["t-kernelspec", ch.id] = {"score": full}
    put(root, "t-corrupt", ch, raw=text.encode()[: len(text) // 2])
    expect["t-corrupt", ch.id] = {"failed": "not valid JSON"}
    put(root, "t-utf16", ch, raw=b"\xff\xfe" + text.encode("utf-16-le"))  # saved by a Windows editor
    expect["t-utf16", ch.id] = {"failed": "not UTF-8"}
    put(root, "t-empty", ch)
    expect["t-empty", ch.id] = {"failed": "no notebook"}
    put(root, "t-two-notebooks", ch, correct, name="a.ipynb")
    put(root, "t-two-notebooks", ch, correct, name="b.ipynb")
    expect["t-two-notebooks", ch.id] = {"failed": "2 notebooks"}
    put(root, "t-not-a-notebook", ch, raw=b'{"hello": "world"}')
    expect["t-not-a-notebook", ch.id] = {"failed": "not a notebook"}
    blank = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hello')")])
    put(root, "t-foreign", ch, blank)
    expect["t-foreign", ch.id] = {"failed": "none of"}
    (root / "t-no-chapter").mkdir()
    (root / "t-no-chapter" / "notes.txt").write_text("I could not find the notebook")
    expect["t-no-chapter", "-"] = {"failed": "no chapter folder"}
    return expect


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("inbox")
    ws = COURSE.workspace(tmp_path_factory.mktemp("work"))
    expect = expected_class(root)
    result = grader_cli("autograde", str(root), "--workdir", str(ws.folder), "--jobs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {(r.student, r.chapter): r for r in collect(ws)}
    return expect, rows, ws, result.stdout


def test_every_submission_gets_exactly_its_expected_score(graded):
    expect, rows, ws, log = graded
    problems = []
    for key, want in sorted(expect.items()):
        row = rows.get(key)
        if row is None:
            problems.append(f"{key}: no record")
            continue
        if "failed" in want:
            if row.status != "failed" or want["failed"] not in row.reason or row.score != 0:
                problems.append(f"{key}: expected failed ({want['failed']}), got {row}")
        # a flagged submission's tests after the cell the reading could not vouch for are judged but held for
        # review: the points judged are the score and the held points together
        elif (row.status != want.get("status", "graded") or row.score + row.held != want["score"]
              or want.get("reason", "") not in row.reason or (row.held and row.status != "flagged")):
            problems.append(f"{key}: expected {want['score']}, got {row.score} + {row.held} held "
                            f"({row.status}: {row.reason})"
                            + (f" [{want['variants']}]" if "variants" in want else ""))
        elif "reason" in want and want["reason"] not in row.reason:
            problems.append(f"{key}: expected a note '{want['reason']}', got '{row.reason}'")
    assert not problems, "\n".join(problems) + "\n\n" + log


def test_a_wrong_implementation_loses_the_points_of_the_test_that_targets_it(graded):
    expect, rows, ws, _ = graded
    with Gradebook(ws.db_url) as gb:
        for (student, chapter), want in expect.items():
            if "zero" not in want:
                continue
            ch = COURSE.chapter(chapter)
            for cell in want["zero"]:
                grade = gb.find_grade(cell, ch.slug, chapter, student)
                assert grade.score == 0, f"{student} ({want['variants']}): {cell} scored {grade.score}"


def test_max_score_is_the_chapters_points(graded):
    _, rows, _, _ = graded
    for ch in CHAPTERS:
        points = sum(ex.points for ex in exercises(nbformat.read(ch.notebook, as_version=4)))
        assert {r.max_score for r in rows.values() if r.chapter == ch.id} == {points}


def test_report_prints_the_table_writes_csv_and_feedback_hides_hidden_tests(graded, tmp_path):
    expect, rows, ws, _ = graded
    csv_path = tmp_path / "grades.csv"
    result = grader_cli("report", "--workdir", str(ws.folder), "--csv", str(csv_path))
    assert result.returncode == 0, result.stderr
    assert "student" in result.stdout and "t-corrupt" in result.stdout
    lines = csv_path.read_text().splitlines()
    assert lines[0] == "student,chapter,score,max_score,held,status,reason"
    assert len(lines) == 1 + len(rows)
    explained = 0
    for (student, chapter), want in expect.items():
        if not want.get("zero"):
            continue
        ch = COURSE.chapter(chapter)
        html = (ws.path("feedback", student, chapter) / f"{ch.slug}.html").read_text()
        assert "hidden tests ran here" in html
        for secret in ("BEGIN HIDDEN TESTS", "check_close", "check_module", "check_property", "solutions.",
                       "grader.checks", "solutions/cases"):
            assert secret not in html, f"{student}'s feedback shows {secret!r}"
        explained += "CheckFailed" in html
    assert explained, "a wrong answer caught by a hidden check should show the check's message"


def test_the_feedback_exporter_writes_the_page_nbconverts_own_exporter_writes(graded):
    """FeedbackHTML does nbconvert's accessibility pass (alt texts, focusable cells) without BeautifulSoup."""
    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter

    from grader.grading.feedback import NO_ALT, FeedbackHTML, accessible

    _, _, ws, _ = graded
    nb = nbformat.read(next(ws.path("autograded").glob("*/*/*.ipynb")), as_version=4)
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    nb.cells.append(nbformat.v4.new_code_cell("plot()", outputs=[nbformat.v4.new_output(
        "display_data", data={"image/png": png, "text/plain": "<Figure>"})]))
    nb.cells.append(nbformat.v4.new_markdown_cell("![a described picture](x.png)"))
    for template in ("classic", "lab"):
        pages = [BeautifulSoup(cls(template_name=template).from_notebook_node(nb)[0], "html.parser")
                 for cls in (HTMLExporter, FeedbackHTML)]
        assert str(pages[0]) == str(pages[1]), template
        assert pages[1].find("img", alt=NO_ALT) and pages[1].find("img", alt="a described picture")
    assert 'tabindex="0"' in accessible('<div class="jp-Notebook"><div class="jp-Cell-inputWrapper x">')


@pytest.fixture(scope="module")
def report(graded, tmp_path_factory):
    """The instructor's pages of the graded class, built once through the CLI."""
    _, _, ws, _ = graded
    out = tmp_path_factory.mktemp("report")
    result = grader_cli("report", "--workdir", str(ws.folder), "--no-feedback", "--html", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Report: .*index\.html .*made in [\d.]+ s", result.stdout), result.stdout
    return out, json.loads((out / "summary.json").read_text())


def test_the_report_shows_the_numbers_the_gradebook_holds(graded, report):
    """Every count and score of the pages, recomputed here from nbgrader's gradebook and the run records;
    the planted shared mistake is one line with its three students, named by a clause of the contract; every
    flagged or held submission is listed for review; a student's name is escaped in the HTML."""
    expect, rows, ws, _ = graded
    out, summary = report
    assert set(summary) == {ch.id for ch in CHAPTERS}
    with Gradebook(ws.db_url) as gb:
        for ch in CHAPTERS:
            got = summary[ch.id]
            mine = [r for r in rows.values() if r.chapter == ch.id]
            counted = [r for r in mine if r.status in ("graded", "flagged")]
            assert got["counts"]["submissions"] == len(mine)
            for status in ("graded", "flagged", "failed", "error"):
                assert got["counts"][status] == sum(r.status == status for r in mine), (ch.id, status)
            assert got["counts"]["held"] == sum(1 for r in mine if r.held)
            assert got["scores"] == {r.student: r.score for r in counted}
            source = nbformat.read(ch.notebook, as_version=4)
            for ex in exercises(source):
                ids = [nbgrader_meta(c)["grade_id"] for c in ex.tests]
                scores = [sum(gb.find_grade(g, ch.slug, ch.id, r.student).auto_score or 0 for g in ids)
                          for r in counted]
                assert got["exercises"][ex.name]["graded"] == len(counted)
                assert got["exercises"][ex.name]["passed"] == sum(s >= ex.points for s in scores), (ch.id, ex.name)
            review = {r.student for r in mine if r.status == "flagged" or r.held}
            assert set(got["review"]) == review, ch.id
            page = (out / f"{ch.id}.html").read_text()
            for r in mine:
                assert html.escape(r.student) in page
    shared = {key for key, want in expect.items() if "shared" in want}
    (chapter,) = {c for _, c in shared}
    exercise = expect[next(iter(shared))]["shared"]
    students = {s for s, _ in shared}
    lines = [g for g in summary[chapter]["groups"] if students & set(g["students"])]
    assert len(lines) == 1 and students <= set(lines[0]["students"]), lines
    assert lines[0]["exercise"] == exercise and lines[0]["clauses"], lines[0]
    index = (out / "index.html").read_text()
    assert "Mistakes most students share" in index and all(f"{c.id}.html" in index for c in CHAPTERS)
    assert "<script" not in index and all("<script" not in (out / f"{c.id}.html").read_text() for c in CHAPTERS)


def test_the_report_pages_open_in_a_browser_at_390_and_1280_px(report):
    """One browser, the overview and every chapter page at a phone's and a laptop's width: no console error,
    no failed request, every figure loaded, nothing wider than the screen."""
    from tests.test_browser import chromium

    exe = chromium()
    if exe is None:
        pytest.skip("no chromium: `make system-deps` installs Debian's chromium (as root)")
    from playwright.sync_api import sync_playwright

    out, summary = report
    pages = ["index.html", *[f"{c}.html" for c in summary]]
    problems: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--disable-gpu", "--no-sandbox"])
        for width in (390, 1280):
            context = browser.new_context(viewport={"width": width, "height": 900})
            page = context.new_page()
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: errors.append(f"failed: {r.url}"))
            for name in pages:
                errors.clear()
                page.goto((out / name).as_uri(), wait_until="load")
                page.evaluate("() => Promise.all(Array.from(document.images).map(i => (i.loading = 'eager', "
                              "i.complete ? 0 : new Promise(ok => { i.onload = i.onerror = ok; }))))")
                state = page.evaluate("() => ({wide: document.documentElement.scrollWidth - innerWidth, "
                                      "broken: Array.from(document.images).filter(i => !i.naturalWidth).length, "
                                      "images: document.images.length})")
                if errors or state["wide"] > 0 or state["broken"] or not state["images"]:
                    problems.append(f"{name} at {width} px: {errors} {state}")
            context.close()
        browser.close()
    assert not problems, "\n".join(problems)


def test_the_lms_exports_follow_the_canvas_and_moodle_import_layouts(graded, tmp_path):
    """Canvas: Student, ID, SIS User ID, SIS Login ID, Section, an assignment column per chapter and the
    Points Possible row; Moodle: the identifying column, First name, Last name, the assignment columns. Every
    student once, the gradebook's totals, an empty cell where there is no score."""
    _, rows, ws, _ = graded
    canvas, moodle = tmp_path / "canvas.csv", tmp_path / "moodle.csv"
    ch = CHAPTERS[0]
    for lms, path, extra in (("canvas", canvas, ["--name", f"{ch.id}=Chapter {ch.number} (12345)"]),
                             ("moodle", moodle, ["--id-field", "email"])):
        result = grader_cli("export", "--lms", lms, "--workdir", str(ws.folder), "--to", str(path), *extra)
        assert result.returncode == 0, result.stdout + result.stderr
    with Gradebook(ws.db_url) as gb:
        assignments = [a.name for a in gb.assignments]
        maxima = {a.name: a.max_score for a in gb.assignments}
        students = sorted({s.id for s in gb.students} | {s for s, _ in rows})  # the failed ones too
    columns = [f"Chapter {ch.number} (12345)" if a == ch.id else a for a in assignments]
    table = list(csv.reader(canvas.open()))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *columns]
    assert table[1][:5] == ["Points Possible", "", "", "", ""]
    assert [float(x) for x in table[1][5:]] == [maxima[a] for a in assignments]
    body = {r[2]: r for r in table[2:]}
    assert sorted(body) == students
    for (student, chapter), row in rows.items():
        if chapter not in assignments:
            continue
        cell = body[student][5 + assignments.index(chapter)]
        if row.status == "error":
            assert cell == ""
        else:  # a failed submission scores 0, as in the report
            assert float(cell) == row.score, (student, chapter, row.status)
    table = list(csv.reader(moodle.open()))
    assert table[0] == ["Email address", "First name", "Last name", *assignments]
    assert len(table) == 1 + len(students)


def test_regrading_one_exercise_or_one_student_leaves_every_other_grade(tmp_path):
    """`--exercise` judges only that exercise's tests again (after a hidden test is fixed: here a grade the
    old test gave wrongly); every other grade stays, even one that is stale. `--student` grades only theirs."""
    import sqlalchemy as sa

    from grader.grading import items, runs

    ch = COURSE.chapter("qkv")
    released = samples.released(COURSE, ch)
    variants = samples.student_code(COURSE, ch)
    correct = {ex: v["correct"] for ex, v in variants.items()}
    exercise, wrong = next((ex, v) for ex, vs in sorted(variants.items()) for v in sorted(vs)
                           if not samples.is_correct(v) and not tamper.scan_source(vs[v]))
    other = next(ex for ex in sorted(variants) if ex != exercise)
    inbox, work = tmp_path / "inbox", tmp_path / "work"
    put(inbox, "r-right", ch, samples.fill(released, correct))
    put(inbox, "r-wrong", ch, samples.fill(released, {**correct, exercise: variants[exercise][wrong]}))
    result = grader_cli("autograde", str(inbox), "--workdir", str(work), "--jobs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    ws = COURSE.workspace(work)
    test_x, test_o = f"test_{exercise}", f"test_{other}"
    with Gradebook(ws.db_url) as gb:
        points = gb.find_grade_cell(test_x, ch.slug, ch.id).max_score
        assert gb.find_grade(test_x, ch.slug, ch.id, "r-wrong").auto_score == 0
        gb.find_grade(test_x, ch.slug, ch.id, "r-wrong").auto_score = points  # what the old, broken test gave
        gb.find_grade(test_o, ch.slug, ch.id, "r-right").auto_score = 0.25  # stale: must stay until regraded
        gb.db.commit()
    before = runs.load(ws.db_url)

    result = grader_cli("autograde", str(inbox), "--workdir", str(work), "--exercise", exercise)
    assert result.returncode == 0, result.stdout + result.stderr
    with Gradebook(ws.db_url) as gb:
        assert gb.find_grade(test_x, ch.slug, ch.id, "r-wrong").auto_score == 0  # judged again
        assert gb.find_grade(test_x, ch.slug, ch.id, "r-right").auto_score == points
        assert gb.find_grade(test_o, ch.slug, ch.id, "r-right").auto_score == 0.25  # not judged again
    kept = {it.grade_id: it for it in items.load(ws.db_url, ch.id, "r-wrong")}
    assert kept[test_x].kind and kept[test_x].cases and not kept[test_o].kind

    stamp = {k: v for k, v in sa.create_engine(ws.db_url).connect().execute(
        sa.select(runs.runs_table.c.student, runs.runs_table.c.updated)).all()}
    result = grader_cli("autograde", str(inbox), "--workdir", str(work), "--student", "r-right")
    assert result.returncode == 0, result.stdout + result.stderr
    with Gradebook(ws.db_url) as gb:
        assert gb.find_grade(test_o, ch.slug, ch.id, "r-right").auto_score > 0.25
    after = {k: v for k, v in sa.create_engine(ws.db_url).connect().execute(
        sa.select(runs.runs_table.c.student, runs.runs_table.c.updated)).all()}
    assert after["r-wrong"] == stamp["r-wrong"] and after["r-right"] > stamp["r-right"]
    assert set(before) == set(runs.load(ws.db_url))
    bad = grader_cli("autograde", str(inbox), "--workdir", str(work), "--exercise", "no_such_thing")
    assert bad.returncode == 2 and "no exercise or test cell named 'no_such_thing'" in bad.stderr
    bad = grader_cli("autograde", str(inbox), "--workdir", str(work), "--student", "nobody")
    assert bad.returncode == 2 and "no submission of nobody" in bad.stderr


def test_a_submission_that_never_finishes_is_stopped_and_recorded(tmp_path):
    ch = CHAPTERS[0]
    released = samples.released(COURSE, ch)
    code = {ex: v["correct"] for ex, v in samples.student_code(COURSE, ch).items()}
    first = exercises(released)[0].name  # no test cell comes before it: nothing is reached
    code[first] = "while True:\n    pass\n" + code[first]
    put(tmp_path / "in", "t-forever", ch, samples.fill(released, code))
    ws = COURSE.workspace(tmp_path / "work", f"sqlite:///{tmp_path / 'elsewhere.db'}")  # --db: any SQLAlchemy URL
    result = grader_cli("autograde", str(tmp_path / "in"), "--workdir", str(ws.folder), "--db", ws.db_url,
                        "--timeout", "20")
    assert result.returncode == 0, result.stderr
    (row,) = collect(ws)
    assert row.status == "flagged" and "longer than 20 s" in row.reason and row.score == 0


@pytest.mark.parametrize("args, words", [
    (["book", "ch99_nope"], "unknown chapter"),
    (["release", "nope"], "unknown chapter"),
    (["autograde", "/no/such/folder"], "no such folder"),
    (["autograde", ".", "--shard", "3/2"], "--shard"),
    (["autograde", ".", "--shard", "half"], "--shard takes I/N"),
    (["autograde", ".", "--jobs", "0"], "--jobs must be at least 1"),
])
def test_bad_arguments_give_one_clear_line(args, words):
    result = grader_cli(*args, timeout=120)
    assert result.returncode == 2
    assert words in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_dry_run_lists_and_grades_nothing(tmp_path):
    ch = CHAPTERS[0]
    put(tmp_path / "in", "t-dry", ch, samples.released(COURSE, ch))
    put(tmp_path / "in", "t-dry-empty", ch)
    result = grader_cli("autograde", str(tmp_path / "in"), "--workdir", str(tmp_path / "w"), "--dry-run",
                        timeout=300)
    assert result.returncode == 0, result.stderr
    assert "t-dry " in result.stdout and "would be graded" in result.stdout
    assert "would fail: no notebook" in result.stdout
    assert not (tmp_path / "w" / "gradebook.db").exists()


def test_plain_nbgrader_works_from_the_repository_root(tmp_path):
    """nbgrader_config.py alone is enough: generate_assignment and autograde, no `grader` involved."""
    course = tmp_path / "course"
    shutil.copytree(COURSE.book, course / "book")
    shutil.copy(COURSE.root / "nbgrader_config.py", course)
    ch = CHAPTERS[0]

    def nbgrader(*args):
        result = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, capture_output=True,
                                text=True, timeout=600, env={**os.environ, "PATH": f"{Path(sys.executable).parent}"
                                                             f"{os.pathsep}{os.environ.get('PATH', '')}"})
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]

    nbgrader("generate_assignment", ch.id)
    released = nbformat.read(course / "_build" / "release" / ch.id / ch.notebook.name, as_version=4)
    code = {ex: v["correct"] for ex, v in samples.student_code(COURSE, ch).items()}
    put(course / "_build" / "submitted", "plain", ch, samples.fill(released, code))
    nbgrader("autograde", ch.id)
    with Gradebook(f"sqlite:///{course / '_build' / 'gradebook.db'}") as gb:
        submission = gb.find_submission(ch.id, "plain")
        assert submission.score == submission.max_score == 10
