"""Item analysis: what each test cell of each submission got, and why it failed, kept for the instructor.

Every autograded submission's verdicts are written beside nbgrader's tables (``grader_verdicts``, in the
same transaction as the grades): per test cell the points, the judged score, whether it is held, and for a
failed test what failed: its kind (``wrong``, ``error``, ``raises``, ``banned``, ``memory``, ``inputs``,
``property``, ``not run``, ``unreadable``, ``grader``), the exercise's object, the first failing hidden case
(what the student is shown) and every failing case of that check, judged one at a time
(:func:`grader.checks.failing_cases`), and the message the student saw.

:func:`clauses` names a failing case by the clauses of the exercise's statement that it exercises, from the
chapter's contract table (``CONTRACT`` in ``solutions/cases/<slug>.py``; a ban is the clause that lists
``ban:<name>``, a memory bound the clause that lists ``memory``). :func:`groups` folds identical failures
(the same exercise, kind and failing cases) into one line with the students who share it, so "one
misconception shared by 30 students" reads as one line. The report (:mod:`grader.grading.insights`) and a
regrade of one exercise (``grader autograde --exercise``) read this table.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field

import sqlalchemy as sa

from ..submission import printable

_meta = sa.MetaData()
verdicts_table = sa.Table(
    "grader_verdicts", _meta,
    sa.Column("student", sa.String(128), primary_key=True),
    sa.Column("chapter", sa.String(128), primary_key=True),
    sa.Column("grade_id", sa.String(128), primary_key=True),
    sa.Column("exercise", sa.String(128), nullable=False, default=""),
    sa.Column("points", sa.Float, nullable=False),
    sa.Column("score", sa.Float, nullable=False),
    sa.Column("held", sa.Boolean, nullable=False, default=False),
    sa.Column("kind", sa.String(32), nullable=False, default=""),  # "" when passed
    sa.Column("target", sa.String(128), nullable=False, default=""),
    sa.Column("case_label", sa.Text, nullable=False, default=""),
    sa.Column("cases", sa.Text, nullable=False, default="[]"),  # JSON [[label, kind], ...]
    sa.Column("n_cases", sa.Integer, nullable=False, default=0),  # the failed check's cases, all of them
    sa.Column("message", sa.Text, nullable=False, default=""),
    sa.Column("output", sa.Text, nullable=False, default=""),
    sa.Column("updated", sa.DateTime, nullable=False),
)


@dataclass
class Item:
    student: str
    chapter: str
    grade_id: str
    exercise: str
    points: float
    score: float
    held: bool = False
    kind: str = ""
    target: str = ""
    case: str = ""
    cases: list = field(default_factory=list)
    message: str = ""
    output: str = ""
    n_cases: int = 0

    @property
    def passed(self) -> bool:
        return not self.kind and self.score >= self.points


def ensure(bind) -> None:
    _meta.create_all(bind)


def prepare(db_url: str, attempts: int = 4) -> None:
    """Make the table before a grading run writes (machines of a sharded run may race to make it: the
    loser finds it made)."""
    engine = sa.create_engine(db_url)
    try:
        for attempt in range(attempts):
            try:
                ensure(engine)
                return
            except sa.exc.DBAPIError:
                if attempt == attempts - 1:
                    raise
    finally:
        engine.dispose()


def store(session, student: str, chapter: str, exercise_of: dict[str, str], verdicts: list) -> None:
    """Inside the gradebook's transaction: replace the rows of these verdicts' test cells (a regrade of one
    exercise replaces only its own). The table is made on the session's own connection: another one would
    wait for the lock this transaction holds (SQLite)."""
    ensure(session.connection())
    t = verdicts_table
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    for v in verdicts:
        session.execute(sa.delete(t).where(t.c.student == student, t.c.chapter == chapter,
                                           t.c.grade_id == v.grade_id))
        failure = v.failure or {}
        session.execute(sa.insert(t).values(
            student=student, chapter=chapter, grade_id=v.grade_id, exercise=exercise_of.get(v.grade_id, ""),
            points=float(v.points), score=float(v.score), held=bool(v.held), kind=failure.get("kind", ""),
            target=printable(failure.get("target", ""))[:128], case_label=printable(failure.get("case", "")),
            cases=json.dumps([[printable(str(a)), str(b)] for a, b in failure.get("cases", [])]),
            n_cases=int(failure.get("of", 0)), message=printable(v.message)[:2000],
            output=printable(v.output or "")[:4000], updated=now))


def forget(session, student: str, chapter: str) -> None:
    ensure(session.connection())
    t = verdicts_table
    session.execute(sa.delete(t).where(t.c.student == student, t.c.chapter == chapter))


def load(db_url: str, chapter: str | None = None, student: str | None = None) -> list[Item]:
    engine = sa.create_engine(db_url)
    try:
        ensure(engine)
        t = verdicts_table
        q = sa.select(t).order_by(t.c.chapter, t.c.student, t.c.grade_id)
        if chapter is not None:
            q = q.where(t.c.chapter == chapter)
        if student is not None:
            q = q.where(t.c.student == student)
        with engine.connect() as conn:
            rows = conn.execute(q).all()
    finally:
        engine.dispose()
    return [Item(r.student, r.chapter, r.grade_id, r.exercise, r.points, r.score, bool(r.held), r.kind, r.target,
                 r.case_label, json.loads(r.cases), r.message, r.output, r.n_cases) for r in rows]


# ---------------------------------------------------------------------------------------------------
# clauses and groups


def contract(slug: str) -> dict:
    """The chapter's contract table, ``{}`` when it has none (or its module cannot be imported)."""
    try:
        return getattr(importlib.import_module(f"solutions.cases.{slug}"), "CONTRACT", {}) or {}
    except Exception:  # noqa: BLE001 -- a report without clause names is still a report
        return {}


def clauses(table: dict, exercise: str, case: str, kind: str) -> list[str]:
    """The clauses of ``exercise``'s statement that the failing ``case`` exercises (a ban's and a memory
    bound's clause for those kinds), in the table's order."""
    rows = table.get(exercise, {})
    named = []
    for clause, refs in rows.items():
        if isinstance(refs, str):
            continue
        if case and case in refs:
            named.append(clause)
        elif kind == "banned" and any(r.startswith("ban:") for r in refs):
            named.append(clause)
        elif kind == "memory" and "memory" in refs:
            named.append(clause)
    if kind in ("banned", "memory"):  # the ban or the bound is the point, not the case's other clauses
        special = [c for c in named if any(r.startswith("ban:") or r == "memory" for r in rows[c])]
        named = special or named
    return named


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def shape_of(message: str) -> str:
    """A message with its numbers blanked: two students' failures of one kind read alike."""
    return _NUMBER.sub("#", message)


_EXCEPTION = re.compile(r"^(?:CheckFailed: )?`?[^`\s]*`?\s*(?:raised on [^:]*: )?"
                        r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Failed|Interrupt))\b")


def exception_of(message: str) -> str:
    """The exception a failure's message names first (``NotImplementedError``), or ""."""
    m = _EXCEPTION.search(message) or re.search(r"\b([A-Z]\w*(?:Error|Exception))\b", message)
    return m.group(1) if m else ""


def kind_of(it: Item) -> str:
    """The kind shown: an exercise left as released (its stub raises NotImplementedError) is ``not attempted``."""
    if it.kind in ("error", "not run") and "NotImplementedError" in it.message:
        return "not attempted"
    return it.kind


@dataclass
class Group:
    """One failure shared by ``students``: the same exercise, kind, exception and failing cases."""
    chapter: str
    exercise: str
    kind: str
    cases: tuple[str, ...]
    clauses: list[str]
    students: list[str]
    message: str  # the most common message among them
    grade_ids: list[str]
    every: bool = False  # every case of the check failed: nothing of it works

    @property
    def shown_cases(self) -> list[str]:
        if self.kind == "not attempted":
            return ["the released stub (NotImplementedError)"]
        return [f"every case ({len(self.cases)})"] if self.every and len(self.cases) > 1 else list(self.cases)


def groups(items: list[Item], tables: dict[str, dict], slugs: dict[str, str]) -> list[Group]:
    """Identical failures folded together, most students first. ``tables``: chapter slug -> contract;
    ``slugs``: chapter id -> slug."""
    found: dict[tuple, list[Item]] = {}
    for it in items:
        if it.passed or not it.kind:
            continue
        labels = tuple(sorted({c[0] for c in it.cases if c and c[0]})) or ((it.case,) if it.case else ())
        kind = kind_of(it)
        found.setdefault((it.chapter, it.exercise, kind, exception_of(it.message), labels), []).append(it)
    out = []
    for (chapter, exercise, kind, _, labels), members in found.items():
        table = tables.get(slugs.get(chapter, ""), {})
        every = bool(labels) and all(m.n_cases and len(labels) >= m.n_cases for m in members)
        named: list[str] = []
        if kind != "not attempted" and not (every and len(labels) > 1):
            for label in labels or ("",):
                for clause in clauses(table, exercise, label, kind):
                    if clause not in named:
                        named.append(clause)
        message = Counter(shape_of(m.message) for m in members).most_common(1)[0][0]
        example = next(m.message for m in members if shape_of(m.message) == message)
        out.append(Group(chapter, exercise, kind, labels, named, sorted({m.student for m in members}), example,
                         sorted({m.grade_id for m in members}), every))
    out.sort(key=lambda g: (-len(g.students), g.chapter, g.exercise, g.kind, g.cases))
    return out


def case_counts(items: list[Item]) -> Counter:
    """(chapter, exercise, case label) -> how many students' submissions fail that case."""
    counts: Counter = Counter()
    for it in items:
        if it.passed:
            continue
        for label in {c[0] for c in it.cases if c and c[0]} or ({it.case} if it.case else set()):
            counts[(it.chapter, it.exercise, label)] += 1
    return counts
