"""Autograde a folder of submissions (``<student>/<chapter>/<notebook>.ipynb``).

Each submission goes through intake (one well-formed notebook of the right chapter, or a reason) and is
copied into nbgrader's ``submitted`` folder. Its cells then run in a sandbox forked from a warm
interpreter (:mod:`grader.grading.sandbox`), with the instructor's test cells in place of whatever the student
handed in; the points are decided afterwards in this process, from plain data, by the hidden checks
(:mod:`grader.grading.verdict`). Grades go into nbgrader's gradebook, so ``grader report``, nbgrader's feedback
and formgrader work as with ``nbgrader autograde``. Whatever happens to one submission is recorded
(``runs``: graded, flagged -- the notebook crashed or ran out of time, and only the tests it reached
count -- or failed at intake) and the run goes on. ``--jobs N`` runs N sandboxes at once; ``--shard
i/N`` takes a stable 1/N of the submissions so that N machines can share one gradebook.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..cells import grade_ids
from ..course import Chapter, Course, UsageError, Workspace
from ..plan import plan
from ..release import ReleaseFailed, release
from ..submission import Rejected
from . import intake, runs, tamper, verdict, wire
from .intake import accept
from .sandbox import Limits, Zygote


@dataclass(frozen=True)
class Job:
    student: str
    chapter: Chapter
    root: Path  # the submissions folder (the instructor's: trusted)

    @property
    def parts(self) -> tuple[str, str]:
        return (self.student, self.chapter.id)

    @property
    def folder(self) -> Path:
        return self.root.joinpath(*self.parts)


def discover(course: Course, submitted: Path, only: list[Chapter] | None) -> tuple[list[Job], list[runs.Run]]:
    """Find the submissions; folders that cannot be matched to a chapter become failed runs. Below
    ``submitted`` nothing is resolved through a link: a student or chapter folder that is a link fails."""
    if not submitted.is_dir():
        raise UsageError(f"no such folder: {submitted}")
    chapters = {ch.id: ch for ch in course.chapters()}
    wanted = {ch.id for ch in only} if only else set(chapters)
    jobs, problems = [], []
    top = os.open(submitted, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        students = intake.entries(top)
    finally:
        os.close(top)
    for student, kind in sorted(students.items()):
        if student.startswith("."):
            continue
        if kind != "dir":
            if kind == "other":
                problems.append(runs.Run(student, "-", "failed", "the submission is a link, not a folder: not graded"))
            continue
        try:
            fd = intake.open_beneath(submitted, [student])
        except OSError as exc:
            problems.append(runs.Run(student, "-", "failed", f"the submission folder cannot be read ({exc})"))
            continue
        try:
            found = {n: k for n, k in intake.entries(fd).items() if not n.startswith(".")}
        finally:
            os.close(fd)
        seen = set()
        for name, entry_kind in sorted(found.items()):
            if name in chapters:
                seen.add(name)
                if name not in wanted:
                    continue
                if entry_kind == "dir":
                    jobs.append(Job(student, chapters[name], submitted))
                else:
                    problems.append(runs.Run(student, name, "failed", f"{name}/ is a link or a file, not a folder: "
                                                                      "not graded"))
        if only:
            for cid in sorted(wanted - seen):
                problems.append(runs.Run(student, cid, "failed", f"no {cid}/ folder in the submission"))
        elif not seen:
            names = ", ".join(sorted(found)) or "nothing"
            problems.append(runs.Run(student, "-", "failed",
                                     f"no chapter folder in the submission (found: {names})"))
    return jobs, problems


def _forget(ws: Workspace, student: str, chapter: str) -> None:
    """Remove what an earlier grading of this submission left, so no stale notebook or feedback remains."""
    for step in ("autograded", "feedback"):
        shutil.rmtree(ws.path(step, student, chapter), ignore_errors=True)


def _release(course: Course, chapters: list[Chapter], ws: Workspace, attempts: int = 4) -> None:
    """Record the chapters' cells in the gradebook. Several machines sharing one gradebook may do this
    at the same moment; nbgrader then fails on a duplicate row, and trying again finds it in place."""
    for attempt in range(attempts):
        try:
            release(course, chapters, workspace=ws, log=lambda *_: None)
            return
        except ReleaseFailed:
            if attempt == attempts - 1:
                raise
            time.sleep(1.0 + attempt)


def in_shard(job_key: str, shard: tuple[int, int] | None) -> bool:
    """Stable split of the class over N machines: shard ``(i, n)`` takes the keys hashing to ``i - 1``."""
    if shard is None:
        return True
    index, count = shard
    return zlib.crc32(job_key.encode()) % count == index - 1


class _Progress:
    """A one-line progress display with counts and an ETA (plain lines when not on a terminal)."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.counts = {"graded": 0, "flagged": 0, "failed": 0}
        self.start = time.monotonic()
        self.tty = stream.isatty()

    def update(self, run: runs.Run) -> None:
        self.done += 1
        self.counts[run.status] = self.counts.get(run.status, 0) + 1
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        text = (f"[{self.done}/{self.total}] {100 * self.done // max(self.total, 1)}%  "
                + "  ".join(f"{k} {v}" for k, v in self.counts.items())
                + f"  elapsed {elapsed:.0f} s  ETA {eta:.0f} s")
        if self.tty:
            self.stream.write("\r" + text.ljust(78) + ("\n" if self.done == self.total else ""))
        elif self.done == self.total or self.done % 10 == 0:
            self.stream.write(text + "\n")
        self.stream.flush()


class _Grading:
    """State shared by the workers of one run."""

    def __init__(self, course: Course, ws: Workspace, kits: dict, limits: Limits):
        self.course, self.ws, self.kits, self.limits = course, ws, kits, limits
        sources = {ch.id: nbformat.read(ch.notebook, as_version=4) for ch in course.chapters()}
        self.source_ids = {cid: grade_ids(nb) for cid, nb in sources.items()}
        self.course_cells = {cid: tamper.course_cells(nb) for cid, nb in sources.items()}
        self.db_lock = threading.Lock()
        self.jobs = ws.path("sandbox", "jobs")
        self.jobs.mkdir(parents=True, exist_ok=True)
        os.chmod(self.jobs, 0o700)

    def grade(self, zygote: Zygote, job: Job) -> runs.Run:
        start = time.perf_counter()
        run = self._attempt(zygote, job)
        run.seconds = time.perf_counter() - start
        if run.status == "failed":
            _forget(self.ws, run.student, run.chapter)
        return run

    def _attempt(self, zygote: Zygote, job: Job) -> runs.Run:
        ws, ch = self.ws, job.chapter
        try:
            accepted = accept(self.course, ch, job.root, job.parts, self.source_ids)
        except Rejected as exc:
            return runs.Run(job.student, ch.id, "failed", str(exc))
        self._keep_submitted(job, accepted)
        kit = self.kits[ch.id]
        the_plan = plan(kit, accepted.notebook)
        # the job's folder: private to root, named at random (never after a student or a chapter)
        folder = Path(tempfile.mkdtemp(prefix="job-", dir=self.jobs))
        try:
            (folder / "plan.json").write_text(json.dumps({"cells": the_plan.cells}))
            cases = [check["cases"] for cell in the_plan.cells for check in cell.get("checks", [])]
            finished = zygote.run(folder, self.limits, cases)
            results = wire.read_stream(folder / "results.stream", len(the_plan.cells))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if finished.status == "finished" and not results.done:
            finished.status = "died"
            finished.detail = results.problem or "the notebook ended its own process before the end (os._exit?)"
        if finished.results_over:
            finished.status = "died"
            finished.detail = (f"the notebook sent more than {wire.MAX_STREAM_BYTES // 2**20} MiB of results; "
                               "the rest was dropped")
        if results.crash and finished.status == "died":
            finished.detail += f" ({results.crash.strip().splitlines()[-1][:200]})"
        stopped = "" if finished.status == "finished" else finished.detail
        verdicts = verdict.decide(kit, the_plan, results, stopped)
        notebook = verdict.autograded_notebook(kit, accepted.notebook, the_plan, results, verdicts)
        with self.db_lock:
            _forget(ws, job.student, ch.id)
            verdict.record(ws, kit, job.student, verdicts, notebook)
        notes = list(accepted.notes)
        if the_plan.restored:
            notes.append(f"test cells restored from the original: {', '.join(the_plan.restored)}")
        if finished.status != "finished":
            return runs.Run(job.student, ch.id, "flagged", "; ".join([finished.detail, *notes]))
        reaches = tamper.reason(accepted.notebook, self.course_cells[ch.id])
        if reaches:
            return runs.Run(job.student, ch.id, "flagged", "; ".join([reaches, *notes]))
        return runs.Run(job.student, ch.id, "graded", "; ".join(notes))

    def _keep_submitted(self, job: Job, accepted) -> None:
        """Copy the accepted notebook (and timestamp) into nbgrader's ``submitted`` folder. Every folder
        below the workspace is opened without following links, files are replaced by rename, so a
        submission graded in place (SUBMITTED_DIR is the workspace's own) cannot redirect the write."""
        ws, ch = self.ws, job.chapter
        in_place = job.root.resolve() == ws.path("submitted").resolve()
        if not in_place:
            shutil.rmtree(ws.path("submitted", job.student, ch.id), ignore_errors=True)
        fd = intake.open_beneath(ws.folder, ["submitted", job.student, ch.id], create=True)
        try:
            files = {ch.notebook.name: nbformat.writes(accepted.notebook).encode()}
            if accepted.timestamp is not None and not in_place:
                files["timestamp.txt"] = accepted.timestamp
            for name, data in files.items():
                tmp = f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                              dir_fd=fd)
                with os.fdopen(out, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)


def autograde(course: Course, submitted: Path, *, chapters: list[Chapter] | None = None,
              workspace: Workspace | None = None, jobs: int = 1, timeout: float = 600,
              shard: tuple[int, int] | None = None, dry_run: bool = False, limits: Limits | None = None,
              log=print, progress: bool = True) -> list[runs.Run]:
    """Grade every submission under ``submitted``; return one run record per (student, chapter)."""
    ws = workspace or course.workspace()
    found, results = discover(course, submitted, chapters)
    found = [job for job in found if in_shard(f"{job.student}/{job.chapter.id}", shard)]
    results = [run for run in results if in_shard(f"{run.student}/{run.chapter}", shard)]
    if dry_run:
        source_ids = {ch.id: grade_ids(nbformat.read(ch.notebook, as_version=4)) for ch in course.chapters()}
        for run in results:
            log(f"  {run.student:<16} {run.chapter:<16} would fail: {run.reason}")
        for job in found:
            try:
                accepted = accept(course, job.chapter, job.root, job.parts, source_ids)
                log(f"  {job.student:<16} {job.chapter.id:<16} would be graded {'; '.join(accepted.notes)}")
            except Rejected as exc:
                log(f"  {job.student:<16} {job.chapter.id:<16} would fail: {exc}")
        return []
    ws.folder.mkdir(parents=True, exist_ok=True)
    limits = limits or Limits(wall=timeout)
    needed = sorted({job.chapter for job in found}, key=lambda ch: ch.number)
    if needed:
        _release(course, needed, ws)
    kits = {ch.id: verdict.prepare_chapter(ch, ws.path("sandbox", "cases", ch.id)) for ch in needed}
    for run in results:
        runs.record(ws.db_url, run)
        log(f"  {run.student:<16} {run.chapter:<16} failed: {run.reason}")
    if not found:
        return results
    hide = sorted({course.root.resolve(), ws.folder.resolve(), submitted.resolve()})
    slots = max(1, min(jobs, len(found)))
    limits.threads = max(1, (os.cpu_count() or 1) // slots)
    with ThreadPoolExecutor(max_workers=slots) as starter:
        zygotes = list(starter.map(lambda i: Zygote(i, hide), range(slots)))
    log(f"  sandbox: {zygotes[0].isolation}")
    free: queue.Queue = queue.Queue()
    for z in zygotes:
        free.put(z)
    grading = _Grading(course, ws, kits, limits)
    bar = _Progress(len(found)) if progress else None

    def work(job: Job) -> runs.Run:
        zygote = free.get()
        try:
            return grading.grade(zygote, job)
        except Exception as exc:  # noqa: BLE001 -- one submission's trouble never stops the run
            return runs.Run(job.student, job.chapter.id, "failed", f"grading failed: {type(exc).__name__}: {exc}")
        finally:
            free.put(zygote)

    try:
        with ThreadPoolExecutor(max_workers=slots) as pool:
            for run in pool.map(work, found):
                runs.record(ws.db_url, run)
                results.append(run)
                if bar:
                    bar.update(run)
                detail = run.reason or run.status
                if run.status != "graded":
                    detail = f"{run.status}: {run.reason}"
                log(f"  {run.student:<16} {run.chapter:<16} {detail} ({run.seconds:.1f} s)")
    finally:
        for z in zygotes:
            z.close()
    return results
