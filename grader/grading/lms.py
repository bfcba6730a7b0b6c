"""Grades into the LMS: nbgrader export plugins for a Canvas gradebook import and a Moodle grade import.

They are nbgrader's own mechanism, so an nbgrader user keeps their habits::

    nbgrader export --exporter=grader.grading.lms.CanvasExporter --to=canvas.csv
    nbgrader export --exporter=grader.grading.lms.MoodleExporter --to=moodle.csv \\
        --MoodleExporter.id_field=email

``grader export --lms canvas|moodle`` runs the same in the grading workspace. Each student is matched by
``id_field``: ``id`` (nbgrader's student id, the default), ``email`` or ``lms_user_id`` (the fields of
nbgrader's student table; ``nbgrader db student import`` fills them from a CSV). A column per assignment
(chapter), named by ``names`` (``{"ch02_qkv": "Chapter 2 (12345)"}``) or after the assignment.

* **Canvas** (Grades, Import): the columns ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section``,
  then one per assignment, and a second row ``Points Possible`` with each assignment's maximum, as
  Canvas's own gradebook export writes them. Canvas matches a row by ``ID`` (its user id: ``lms_user_id``),
  ``SIS User ID`` (``id``) or ``SIS Login ID`` (``email``); the others are left empty. A column named
  ``Name (12345)`` updates Canvas's assignment 12345; a column with a new name creates an assignment.
* **Moodle** (Grades, Import, CSV file): the student's column, named ``ID number`` (``id``), ``Email address``
  (``email``) or ``User ID`` (``lms_user_id``), then ``First name``, ``Last name`` and one column per
  assignment; on import, map "Identify user by" from that column to the same field, and each assignment
  column to its grade item.

Scores are the gradebook's totals (held points count once released, ``grader review``); a failed submission
(an unreadable file) is 0, as in ``grader report``. A student with no submission, or whose grading hit a
grader error (no score: it needs the instructor), gets an empty cell,
which both LMSs leave unchanged, unless ``missing`` says what to write instead (``0``).
"""

from __future__ import annotations

import csv
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins.export import ExportPlugin
from traitlets import Dict, Enum, Unicode

from . import runs

ID_FIELDS = ("id", "email", "lms_user_id")


class _LmsExporter(ExportPlugin):
    id_field = Enum(ID_FIELDS, default_value="id",
                    help="the student field the LMS matches on: id, email or lms_user_id").tag(config=True)
    names = Dict({}, help="assignment name -> the LMS's column name for it").tag(config=True)
    missing = Unicode("", help="what a missing or ungraded score is written as (default: empty, "
                               "which the LMS leaves unchanged)").tag(config=True)
    default_to = "grades-lms.csv"

    def table(self, gradebook: Gradebook) -> tuple[list, list[tuple]]:
        """The assignments (name, column, max score) and the students' rows (student, {assignment: score})."""
        wanted = [str(a) for a in self.assignment]
        assignments = [a for a in gradebook.assignments if not wanted or a.name in wanted]
        if wanted and len(assignments) < len(wanted):
            unknown = sorted(set(wanted) - {a.name for a in assignments})
            raise ValueError(f"no such assignment in the gradebook: {', '.join(unknown)}")
        picked = [str(s) for s in self.student]
        recorded = _runs(gradebook)
        known = {s.id: s for s in gradebook.students}
        # a submission that could not be graded (a corrupt file: failed, score 0) has a run record only
        for student, _ in recorded:
            known.setdefault(student, _Unlisted(student))
        students = [known[k] for k in sorted(known) if not picked or k in picked]
        rows = []
        for s in students:
            if not getattr(s, self.id_field, None):
                self.log.warning("student %s has no %s: the LMS cannot match the row", s.id, self.id_field)
            scores = {}
            for a in assignments:
                run = recorded.get((s.id, a.name))
                if run is not None and run.status in ("error", "failed"):
                    scores[a.name] = None if run.status == "error" else 0.0  # error: no score, the instructor's
                    continue
                try:
                    scores[a.name] = float(gradebook.find_submission(a.name, s.id).score)
                except MissingEntry:
                    scores[a.name] = None
            rows.append((s, scores))
        return [(a.name, self.names.get(a.name, a.name), float(a.max_score)) for a in assignments], rows

    def cell(self, score: float | None) -> str:
        return self.missing if score is None else f"{score:g}"

    def export(self, gradebook: Gradebook) -> None:
        dest = Path(self.to or self.default_to)
        assignments, rows = self.table(gradebook)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("w", newline="", encoding="utf-8") as f:
            self.write(csv.writer(f), assignments, rows)
        self.log.info("Wrote %d student(s) x %d assignment(s) to %s", len(rows), len(assignments), dest)


def _runs(gradebook: Gradebook) -> dict:
    try:
        return runs.load(gradebook.engine.url.render_as_string(hide_password=False))
    except Exception:  # noqa: BLE001 -- a plain nbgrader gradebook: no run records, no grader errors
        return {}


class _Unlisted:
    """A student the gradebook does not list (every submission failed before grading): the id only."""

    def __init__(self, student: str):
        self.id, self.first_name, self.last_name, self.email, self.lms_user_id = student, "", "", "", ""


def _name(s) -> str:
    last, first = (s.last_name or "").strip(), (s.first_name or "").strip()
    return f"{last}, {first}" if last and first else last or first or s.id


class CanvasExporter(_LmsExporter):
    """A Canvas gradebook import CSV (see the module's docstring)."""

    default_to = "canvas-grades.csv"

    def write(self, w, assignments, rows) -> None:
        w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *[c for _, c, _ in assignments]])
        w.writerow(["Points Possible", "", "", "", "", *[f"{m:g}" for _, _, m in assignments]])
        for s, scores in rows:
            ids = {"lms_user_id": "", "id": "", "email": ""}
            ids[self.id_field] = getattr(s, self.id_field, "") or ""
            w.writerow([_name(s), ids["lms_user_id"], ids["id"], ids["email"], "",
                        *[self.cell(scores[a]) for a, _, _ in assignments]])


class MoodleExporter(_LmsExporter):
    """A Moodle grade import CSV (see the module's docstring)."""

    default_to = "moodle-grades.csv"
    HEADERS = {"id": "ID number", "email": "Email address", "lms_user_id": "User ID"}

    def write(self, w, assignments, rows) -> None:
        w.writerow([self.HEADERS[self.id_field], "First name", "Last name", *[c for _, c, _ in assignments]])
        for s, scores in rows:
            w.writerow([getattr(s, self.id_field, "") or "", s.first_name or "", s.last_name or "",
                        *[self.cell(scores[a]) for a, _, _ in assignments]])


EXPORTERS = {"canvas": "grader.grading.lms.CanvasExporter", "moodle": "grader.grading.lms.MoodleExporter"}
