"""Points held for the instructor's review (issue 27: "holds that exercise's points for instructor review").

When the grader's outside reading (:mod:`grader.grading.tamper`) cannot vouch for a cell that runs from a
submission, the bans and memory bounds measured inside the student's process after that cell are not
evidence. The tests that ran after it are judged as usual, but their points are **held**: the gradebook
keeps the judged score as nbgrader's ``auto_score`` and a ``manual_score`` of 0 over it, with
``needs_manual_grade`` set, so the total, the CSV, the feedback and nbgrader's formgrader all show the
points as not (yet) earned and formgrader lists the submission as needing a manual grade. The hold, its
reason and the cells behind it are kept in ``grader_holds`` beside nbgrader's tables.

The instructor decides per submission (``grader review``): **release** (the judged points count: the
manual score is cleared) or **keep** (0 stays); a score typed into formgrader is a decision too. A decision
lasts while the cells behind the hold are the same: grading the same submission again keeps it, an edited
one is held afresh. A submission graded again without a reason to hold loses its hold, and with it the
zero the hold put there, never a manual score the instructor gave without one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field

import sqlalchemy as sa

from ..submission import printable

PENDING, RELEASED, KEPT, FORMGRADER = "pending", "released", "kept", "formgrader"
#: what of the flagged cells a hold keeps for the review (the whole cell up to this many characters)
CELL_CHARS = 4000

_meta = sa.MetaData()
holds_table = sa.Table(
    "grader_holds", _meta,
    sa.Column("student", sa.String(128), primary_key=True),
    sa.Column("chapter", sa.String(128), primary_key=True),
    sa.Column("grade_id", sa.String(128), primary_key=True),
    sa.Column("points", sa.Float, nullable=False),  # the judged score the hold keeps back
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("cells", sa.Text, nullable=False, default="[]"),  # JSON: [[index, source, [hits]], ...]
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("decision", sa.String(16), nullable=False),  # pending | released | kept | formgrader
    sa.Column("updated", sa.DateTime, nullable=False),
)


@dataclass
class Hold:
    """Why a submission's later tests are held: the cells the reading could not vouch for."""
    reason: str
    cells: list[tuple[int, str, list[str]]] = field(default_factory=list)
    grade_ids: set[str] = field(default_factory=set)  # the tests that ran after the first such cell

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps([[i, s] for i, s, _ in self.cells]).encode()).hexdigest()

    def cells_json(self) -> str:
        return json.dumps([[i, printable(s[:CELL_CHARS]), [printable(h) for h in hits]]
                           for i, s, hits in self.cells])


@dataclass
class HeldRow:
    student: str
    chapter: str
    grade_id: str
    points: float
    reason: str
    cells: list
    decision: str
    updated: dt.datetime | None = None


def ensure(bind) -> None:
    _meta.create_all(bind)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def apply(session, student: str, chapter: str, grades: dict, scores: dict[str, float], hold: Hold | None) -> None:
    """Inside the gradebook's transaction (``session``, nbgrader's): set each grade's manual score and
    ``needs_manual_grade`` from the hold and the decisions already taken. ``grades``: grade id -> nbgrader
    ``Grade`` (its ``auto_score`` already the judged score); ``scores``: grade id -> judged score."""
    ensure(session.get_bind())
    t = holds_table
    rows = {r.grade_id: r for r in session.execute(
        sa.select(t).where(t.c.student == student, t.c.chapter == chapter)).all()}
    for grade_id, grade in grades.items():
        row = rows.get(grade_id)
        held = hold is not None and grade_id in hold.grade_ids and scores.get(grade_id, 0.0) > 0
        if not held:
            if row is not None:  # the hold is gone, and the zero it put there with it
                session.execute(sa.delete(t).where(t.c.student == student, t.c.chapter == chapter,
                                                   t.c.grade_id == grade_id))
                if row.decision in (PENDING, KEPT):
                    grade.manual_score = None
            grade.needs_manual_grade = grade.manual_score is not None
            continue
        decision = row.decision if row is not None and row.fingerprint == hold.fingerprint else PENDING
        if decision == PENDING and row is not None and row.fingerprint == hold.fingerprint \
                and grade.manual_score not in (None, 0.0):
            decision = FORMGRADER  # the instructor typed a score over the hold
        if decision == PENDING:
            grade.manual_score, grade.needs_manual_grade = 0.0, True
        elif decision == KEPT:
            grade.manual_score, grade.needs_manual_grade = 0.0, False
        elif decision == RELEASED:
            grade.manual_score, grade.needs_manual_grade = None, False
        else:
            grade.needs_manual_grade = False  # formgrader's score stands
        values = dict(points=float(scores[grade_id]), reason=printable(hold.reason)[:4000],
                      cells=hold.cells_json(), fingerprint=hold.fingerprint, decision=decision, updated=_now())
        if row is None:
            session.execute(sa.insert(t).values(student=student, chapter=chapter, grade_id=grade_id, **values))
        else:
            session.execute(sa.update(t).where(t.c.student == student, t.c.chapter == chapter,
                                               t.c.grade_id == grade_id).values(**values))


def load(db_url: str, pending_only: bool = False) -> list[HeldRow]:
    engine = sa.create_engine(db_url)
    try:
        ensure(engine)
        with engine.connect() as conn:
            q = sa.select(holds_table).order_by(holds_table.c.student, holds_table.c.chapter,
                                                holds_table.c.grade_id)
            if pending_only:
                q = q.where(holds_table.c.decision == PENDING)
            rows = conn.execute(q).all()
    finally:
        engine.dispose()
    return [HeldRow(r.student, r.chapter, r.grade_id, r.points, r.reason, json.loads(r.cells), r.decision,
                    r.updated) for r in rows]


def decide(db_url: str, student: str, chapter: str, decision: str) -> int:
    """Release (``released``) or keep (``kept``) every held test of one submission; returns how many."""
    from nbgrader.api import Gradebook

    if decision not in (RELEASED, KEPT):
        raise ValueError(decision)
    with Gradebook(db_url) as gb:
        session = gb.db
        ensure(session.get_bind())
        t = holds_table
        rows = session.execute(sa.select(t).where(t.c.student == student, t.c.chapter == chapter)).all()
        try:
            for r in rows:
                grade = gb.find_grade(r.grade_id, _notebook(gb, chapter), chapter, student)
                grade.manual_score = None if decision == RELEASED else 0.0
                grade.needs_manual_grade = False
                session.execute(sa.update(t).where(t.c.student == student, t.c.chapter == chapter,
                                                   t.c.grade_id == r.grade_id)
                                .values(decision=decision, updated=_now()))
            session.commit()
        except BaseException:
            session.rollback()
            raise
    return len(rows)


def _notebook(gb, chapter: str) -> str:
    notebooks = gb.find_assignment(chapter).notebooks
    return notebooks[0].name


def held_points(rows: list[HeldRow]) -> dict[tuple[str, str], float]:
    """Per (student, chapter): the points still waiting for a decision."""
    out: dict[tuple[str, str], float] = {}
    for r in rows:
        if r.decision == PENDING:
            out[(r.student, r.chapter)] = out.get((r.student, r.chapter), 0.0) + r.points
    return out
