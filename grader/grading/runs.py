"""The record of every autograde attempt, kept in the gradebook's own database.

nbgrader's gradebook only knows submissions it could grade. A submission that could not be graded
(corrupt notebook, kernel death, timeout, ...) still needs a score and a reason: that is this table,
``grader_runs``, created beside nbgrader's tables in the same database (any SQLAlchemy URL).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa

from ..submission import printable

_meta = sa.MetaData()
runs_table = sa.Table(
    "grader_runs", _meta,
    sa.Column("student", sa.String(128), primary_key=True),
    sa.Column("chapter", sa.String(128), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),  # "graded" | "flagged" | "failed" | "error"
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("seconds", sa.Float, nullable=False, default=0.0),
    sa.Column("updated", sa.DateTime, nullable=False),
    # the kernel's peak resident memory of the notebook's processes, bytes (-1: not measured)
    sa.Column("peak_memory", sa.BigInteger, nullable=False, default=-1),
)


@dataclass
class Run:
    student: str
    chapter: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    peak_memory: int = -1

    def __post_init__(self):
        # a name or a reason can carry a folder name that is not UTF-8 (os.fsdecode's surrogates) or a lone
        # surrogate a notebook printed: neither the database, the log nor a terminal takes those
        self.student, self.chapter, self.reason = map(printable, (self.student, self.chapter, self.reason))


def _engine(db_url: str) -> sa.Engine:
    engine = sa.create_engine(db_url)
    _meta.create_all(engine)
    columns = {c["name"] for c in sa.inspect(engine).get_columns("grader_runs")}
    if "peak_memory" not in columns:  # a gradebook from before the column: add it, its rows unmeasured
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("ALTER TABLE grader_runs ADD COLUMN peak_memory BIGINT NOT NULL DEFAULT -1"))
        except sa.exc.DBAPIError:  # another machine of a sharded run added it at the same moment
            if "peak_memory" not in {c["name"] for c in sa.inspect(engine).get_columns("grader_runs")}:
                raise
    return engine


class Recorder:
    """One engine for many records (a class batch): ``with Recorder(url) as rec: rec.record(run)``."""

    def __init__(self, db_url: str):
        self.db_url, self.engine = db_url, None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None

    def record(self, run: Run) -> None:
        if self.engine is None:
            self.engine = _engine(self.db_url)
        _write(self.engine, run)


def record(db_url: str, run: Run) -> None:
    with Recorder(db_url) as rec:
        rec.record(run)


def _write(engine: sa.Engine, run: Run) -> None:
    with engine.begin() as conn:
        conn.execute(sa.delete(runs_table).where(runs_table.c.student == run.student,
                                                 runs_table.c.chapter == run.chapter))
        conn.execute(sa.insert(runs_table).values(
            student=run.student, chapter=run.chapter, status=run.status, reason=run.reason,
            seconds=run.seconds, peak_memory=int(run.peak_memory),
            updated=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)))


def load(db_url: str) -> dict[tuple[str, str], Run]:
    engine = _engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(runs_table)).all()
    engine.dispose()
    return {(r.student, r.chapter): Run(r.student, r.chapter, r.status, r.reason, r.seconds, r.peak_memory)
            for r in rows}
