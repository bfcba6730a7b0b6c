"""Report: one row per (student, chapter) with score and reason, as a terminal table and a CSV,
plus nbgrader's feedback HTML for every graded submission. A submission whose grading hit a grader error
(status ``error``) has no score (``-`` in the table, empty in the CSV): it needs the instructor, not a 0.
Points held for review (:mod:`grader.grading.holds`) are not in the score until released; the ``held``
column says how many wait for a decision (``grader review``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from ..course import Course, Workspace
from ..nbgrader_run import nbgrader
from . import holds, runs


@dataclass
class Row:
    student: str
    chapter: str
    score: float
    max_score: float
    status: str
    reason: str
    held: float = 0.0  # points judged but held for the instructor's review


def collect(ws: Workspace) -> list[Row]:
    db_url = ws.db_url
    recorded = runs.load(db_url)
    held = holds.held_points(holds.load(db_url))
    rows = []
    with Gradebook(db_url) as gb:
        max_scores = {a.name: float(a.max_score) for a in gb.assignments}
        keys = set(recorded)
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                keys.add((sub.student.id, assignment.name))
        for student, chapter in sorted(keys):
            run = recorded.get((student, chapter))
            max_score = max_scores.get(chapter, 0.0)
            if run is not None and run.status in ("failed", "error"):
                rows.append(Row(student, chapter, 0.0, max_score, run.status, run.reason))
                continue
            try:
                score = float(gb.find_submission(chapter, student).score)
            except MissingEntry:
                score = 0.0
            rows.append(Row(student, chapter, score, max_score, run.status if run else "graded",
                            run.reason if run else "", held.get((student, chapter), 0.0)))
    return rows


def _fmt(x: float) -> str:
    return f"{x:g}"


def _score(r: Row, none: str) -> str:
    return none if r.status == "error" else _fmt(r.score)


def _held(r: Row) -> str:
    return _fmt(r.held) if r.held else ""


def needs_attention(rows: list[Row]) -> list[Row]:
    """The rows a grader error left without a score."""
    return [r for r in rows if r.status == "error"]


def table(rows: list[Row]) -> str:
    head = ("student", "chapter", "score", "max", "held", "status", "reason")
    body = [(r.student, r.chapter, _score(r, "-"), _fmt(r.max_score), _held(r), r.status, r.reason) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    widths[-1] = min(widths[-1], 70)
    lines = ["  ".join(str(x)[:w].ljust(w) for x, w in zip(line, widths)).rstrip() for line in (head, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_csv(rows: list[Row], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "chapter", "score", "max_score", "held", "status", "reason"])
        for r in rows:
            w.writerow([r.student, r.chapter, _score(r, ""), _fmt(r.max_score), _held(r) or "0", r.status,
                        r.reason])
    return path


def feedback(course: Course, ws: Workspace, rows: list[Row]) -> list[str]:
    """Generate feedback HTML for each chapter with graded submissions; return problems, if any.

    One nbgrader process for them all (assignment ``*``) when they are every chapter the autograded
    folder holds, which is the usual case; otherwise one per chapter."""
    chapters = sorted({r.chapter for r in rows if r.status == "graded"})
    present = {p.name for p in ws.path("autograded").glob("*/*") if p.is_dir()}
    runs_ = [("*", "feedback.log")] if chapters and present <= set(chapters) else \
        [(ch, f"feedback-{ch}.log") for ch in chapters]
    problems = []
    for assignment, log in runs_:
        result = nbgrader(course, ["generate_feedback", assignment, "--force"], workspace=ws,
                          log_file=ws.path("logs") / log)
        if not result.ok:
            problems.append(f"feedback for {'every chapter' if assignment == '*' else assignment}: "
                            f"{result.last_error()}")
    return problems
