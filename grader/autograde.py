"""Autograde a folder of submissions (``<student>/<chapter>/<notebook>.ipynb``) with nbgrader.

Each submission goes through intake (one well-formed notebook of the right chapter, or a reason), is
placed in nbgrader's ``submitted`` folder, and is graded by its own ``nbgrader autograde`` process
under a wall-clock limit. Whatever happens to one submission is recorded (``runs``) and the run goes on.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import runs
from .course import Chapter, Course, UsageError, Workspace
from .intake import Rejected, accept, grade_ids
from .nbgrader_run import nbgrader
from .release import release


@dataclass(frozen=True)
class Job:
    student: str
    chapter: Chapter
    folder: Path


def discover(course: Course, submitted: Path, only: list[Chapter] | None) -> tuple[list[Job], list[runs.Run]]:
    """Find the submissions; folders that cannot be matched to a chapter become failed runs."""
    if not submitted.is_dir():
        raise UsageError(f"no such folder: {submitted}")
    chapters = {ch.id: ch for ch in course.chapters()}
    wanted = {ch.id for ch in only} if only else set(chapters)
    jobs, problems = [], []
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir() and not p.name.startswith(".")):
        student = student_dir.name
        entries = [p for p in student_dir.iterdir() if not p.name.startswith(".")]
        seen = set()
        for entry in sorted(entries):
            if entry.is_dir() and entry.name in chapters:
                seen.add(entry.name)
                if entry.name in wanted:
                    jobs.append(Job(student, chapters[entry.name], entry))
        if only:
            for cid in sorted(wanted - seen):
                problems.append(runs.Run(student, cid, "failed", f"no {cid}/ folder in the submission"))
        elif not seen:
            names = ", ".join(sorted(p.name for p in entries)) or "nothing"
            problems.append(runs.Run(student, "-", "failed",
                                     f"no chapter folder in the submission (found: {names})"))
    return jobs, problems


def _explain(error: str) -> str:
    if "DeadKernelError" in error:
        return "the kernel died while running the notebook (a crash, or sys.exit/os._exit in its code)"
    return f"nbgrader could not grade it: {error}"


def _forget(ws: Workspace, student: str, chapter: str) -> None:
    """Remove what an earlier grading of this submission left, so no stale notebook or feedback remains."""
    for step in ("autograded", "feedback"):
        shutil.rmtree(ws.path(step, student, chapter), ignore_errors=True)


def _grade_one(course: Course, ws: Workspace, job: Job, source_ids: dict[str, set[str]],
               timeout: float) -> runs.Run:
    run = _attempt(course, ws, job, source_ids, timeout)
    if run.status == "failed":
        _forget(ws, run.student, run.chapter)
    return run


def _attempt(course: Course, ws: Workspace, job: Job, source_ids: dict[str, set[str]],
             timeout: float) -> runs.Run:
    start = time.perf_counter()
    dest_dir = ws.path("submitted", job.student, job.chapter.id)
    try:
        accepted = accept(course, job.chapter, job.folder, source_ids)
    except Rejected as exc:
        return runs.Run(job.student, job.chapter.id, "failed", str(exc), time.perf_counter() - start)
    if job.folder.resolve() != dest_dir.resolve():
        if dest_dir.exists():
            shutil.rmtree(dest_dir)
        dest_dir.mkdir(parents=True)
        stamp = job.folder / "timestamp.txt"
        if stamp.is_file():
            shutil.copy(stamp, dest_dir / "timestamp.txt")
    nbformat.write(accepted.notebook, dest_dir / job.chapter.notebook.name)
    result = nbgrader(course, ["autograde", job.chapter.id, f"--student={job.student}", "--force"],
                      workspace=ws, timeout=timeout,
                      log_file=ws.path("logs", "autograde") / f"{job.student}-{job.chapter.id}.log")
    seconds = time.perf_counter() - start
    notes = "; ".join(accepted.notes)
    if result.returncode is None:
        return runs.Run(job.student, job.chapter.id, "failed",
                        f"grading took longer than {timeout:.0f} s and was stopped", seconds)
    if not result.ok:
        return runs.Run(job.student, job.chapter.id, "failed", _explain(result.last_error()), seconds)
    return runs.Run(job.student, job.chapter.id, "graded", notes, seconds)


def autograde(course: Course, submitted: Path, *, chapters: list[Chapter] | None = None,
              workspace: Workspace | None = None, jobs: int = 1, timeout: float = 600,
              log=print) -> list[runs.Run]:
    ws = workspace or course.workspace()
    ws.folder.mkdir(parents=True, exist_ok=True)
    found, results = discover(course, submitted, chapters)
    needed = sorted({job.chapter for job in found}, key=lambda ch: ch.number)
    if needed:
        release(course, needed, workspace=ws, log=lambda *_: None)  # the gradebook must know the cells
    source_ids = {ch.id: grade_ids(nbformat.read(ch.notebook, as_version=4)) for ch in course.chapters()}
    for run in results:
        runs.record(ws.db_url, run)
        log(f"  {run.student:<16} {run.chapter:<16} failed: {run.reason}")
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_grade_one, course, ws, job, source_ids, timeout) for job in found]
        for future in futures:
            run = future.result()
            runs.record(ws.db_url, run)
            results.append(run)
            detail = f"failed: {run.reason}" if run.status == "failed" else (run.reason or "graded")
            log(f"  {run.student:<16} {run.chapter:<16} {detail} ({run.seconds:.1f} s)")
    return results
