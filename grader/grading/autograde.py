"""Autograde a folder of submissions (``<student>/<chapter>/<notebook>.ipynb``).

Each submission goes through intake (one well-formed notebook of the right chapter, or a reason) and is
copied into nbgrader's ``submitted`` folder. Its cells then run in a sandbox forked from a warm
interpreter (:mod:`grader.grading.sandbox`), with the instructor's test cells in place of whatever the student
handed in; the points are decided afterwards in this process, from plain data, by the hidden checks
(:mod:`grader.grading.verdict`). Grades go into nbgrader's gradebook, so ``grader report``, nbgrader's feedback
and formgrader work as with ``nbgrader autograde``. Whatever happens to one submission is recorded
(``runs``: graded, flagged -- the notebook crashed or ran out of time, and only the tests it reached
count -- failed at intake, or error: the grader's own trouble, never the student's) and the run goes on.
``--shard i/N`` takes a stable 1/N of the submissions so that N machines can share one gradebook.

``--jobs N`` grades in N worker *processes* (fresh interpreters, each with its own sandbox zygote), never threads:
nothing of one submission's grading shares an interpreter with another's (CPython's AST machinery,
nbformat's validators, ``warnings`` filters and SQLAlchemy engines are process-global). The workers start
first (importing torch and starting a zygote takes seconds) while this process does the per-chapter work
once (release, hidden checks parsed, cases and reference outputs, read from the cache of prepared
chapters, :mod:`grader.grading.prepared`, when it is fresh) and then hands it to them; this process alone
writes the gradebook, one submission at a time.
An exception of the grader's own code, a worker or sandbox that dies, or a notebook killed from outside
its sandbox (the machine's OOM killer, an operator's signal) is retried once and, if it happens again,
recorded as ``error`` -- never ``failed`` with a score of 0.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for
from pathlib import Path

import nbformat
import psutil

from ..cells import exercises, grade_ids, nbgrader_meta
from ..course import Chapter, Course, GraderError, UsageError, Workspace
from ..plan import plan
from ..release import ReleaseFailed, release
from ..submission import Rejected, printable
from . import holds, intake, items, prepared, runs, tamper, verdict, wire
from .intake import accept
from .sandbox import Limits, Zygote

ERROR = "error"  # a grader-side problem, never the student's: retried once, then recorded so
#: tests only: ``<where>:<once|always>:<student>[,...]`` makes the grader's own code raise at ``where``
#: (``verdict``: in the worker before the verdict; ``record``: the gradebook write) for that student
FAULT_ENV = "GRADER_TEST_FAULT"


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
    ``submitted`` nothing is resolved through a link: a student or chapter folder that is a link fails. A
    student folder whose name is not UTF-8 fails too, whatever it holds: no gradebook, report or terminal
    can carry its name, so it is recorded under the name's bytes, escaped (``b"\\xff"`` as ``\\xff``)."""
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
        if printable(student) != student:
            shown = printable(student)
            if shown in students:  # a folder really named like the escape: the records must not meet
                shown += " (not UTF-8)"
            problems.append(runs.Run(shown, "-", "failed", f"the student folder's name is not UTF-8 (its bytes: "
                                     f"{printable(student)}): not graded; rename it and grade it again"))
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
    return zlib.crc32(job_key.encode("utf-8", "surrogatepass")) % count == index - 1


class _Progress:
    """A one-line progress display with counts and an ETA (plain lines when not on a terminal)."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.counts = {"graded": 0, "flagged": 0, "failed": 0, ERROR: 0}
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


def _injected(where: str, student: str, attempt: int) -> None:
    """The test-only fault hook (:data:`FAULT_ENV`): raise here, as a bug of the grader would."""
    for item in filter(None, os.environ.get(FAULT_ENV, "").split(",")):
        w, when, who = (item.split(":", 2) + ["", ""])[:3]
        if w == where and who == student and (when == "always" or (when == "once" and attempt == 1)):
            raise RuntimeError(f"injected grader fault at {where} ({FAULT_ENV})")


@dataclass
class Outcome:
    """One attempt at one submission, as a worker hands it back: the run record and, when there is
    something to record, the verdicts and the autograded notebook; or ``fault``, a grader-side problem."""

    run: runs.Run
    verdicts: list = field(default_factory=list)
    notebook: dict | None = None
    fault: str = ""
    hold: holds.Hold | None = None
    only: set = field(default_factory=set)  # the tests this attempt judged, when not all (``--exercise``)


class _Worker:
    """One grading worker (a process of its own) with its sandbox zygote: intake, plan, the sandboxed
    run and the verdict of one submission at a time. It writes nothing to the gradebook."""

    def __init__(self, setup: dict, zygote: Zygote):
        self.course, self.ws, self.kits = setup["course"], setup["ws"], setup["kits"]
        self.limits, self.hide, self.slot = setup["limits"], setup["hide"], setup["slot"]
        self.source_ids, self.course_cells = setup["source_ids"], setup["course_cells"]
        # a regrade of some tests only (``--exercise``): their grade ids, and every submission's stored verdicts
        self.only, self.previous = setup.get("only") or set(), setup.get("previous") or {}
        self.jobs = self.ws.path("sandbox", "jobs")
        self.zygote = zygote

    def close(self) -> None:
        self.zygote.close()

    def grade(self, job: Job, attempt: int) -> Outcome:
        start = time.perf_counter()
        try:
            out = self._attempt(job, attempt)
        except Exception as exc:  # noqa: BLE001 -- the grader's own trouble: retried, never the student's
            out = Outcome(runs.Run(job.student, job.chapter.id, ERROR), fault=f"{type(exc).__name__}: {exc}"[:500])
            if self.zygote.proc.poll() is not None:  # the sandbox's zygote is gone: a fresh one for the retry
                self.zygote.close()
                self.zygote = Zygote(self.slot, self.hide)
        out.run.seconds = time.perf_counter() - start
        if out.run.status == "failed":
            _forget(self.ws, out.run.student, out.run.chapter)
        return out

    def _attempt(self, job: Job, attempt: int) -> Outcome:
        ch = job.chapter
        try:
            accepted = accept(self.course, ch, job.root, job.parts, self.source_ids)
        except Rejected as exc:
            return Outcome(runs.Run(job.student, ch.id, "failed", str(exc)))
        self._keep_submitted(job, accepted)
        kit = self.kits[ch.id]
        the_plan = plan(kit, accepted.notebook)
        before = self.previous.get(job.parts, {})
        only = self.only & set(kit.tests)
        if only and not set(kit.tests) - only <= set(before):
            only = set()  # a test of it was never judged (a first grading): every test is judged now
        if only:  # the other tests keep their verdicts: their hidden checks need not run again
            for cell in the_plan.cells:
                if cell["kind"] == "test" and cell["grade_id"] not in only:
                    cell["checks"] = []
        # the job's folder: private to root, named at random (never after a student or a chapter)
        folder = Path(tempfile.mkdtemp(prefix="job-", dir=self.jobs))
        try:
            (folder / "plan.json").write_text(json.dumps({"cells": the_plan.cells}))
            cases = [check["cases"] for cell in the_plan.cells for check in cell.get("checks", [])]
            key = os.urandom(wire.KEY_BYTES)  # this job's seal: only the grader's code in the sandbox holds it
            finished = self.zygote.run(folder, self.limits, cases, key)
            results = wire.read_stream(folder / "results.stream", len(the_plan.cells), key)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if finished.outside:  # killed from outside, or the sandbox machinery failed: not the notebook's doing
            crash = results.crash.strip().splitlines()[-1][:200] if results.crash.strip() else ""
            return Outcome(runs.Run(job.student, ch.id, ERROR),
                           fault=finished.detail + (f" ({crash})" if crash else ""))
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
        _injected("verdict", job.student, attempt)
        verdicts = verdict.decide(kit, the_plan, results, stopped)
        if only:
            verdicts = [v if v.grade_id in only else verdict.CellVerdict.again(before[v.grade_id]) for v in verdicts]
        found = tamper.findings(accepted.notebook, self.course_cells[ch.id], set(kit.tests))
        hold = None
        if found:
            reaches = tamper.describe(tamper.lines(found))
            held = verdict.hold_after(the_plan, verdicts, found)
            points = sum(v.score for v in verdicts if v.held)
            hold = holds.Hold(reaches, found, held)
            reaches = (f"{points:g} point(s) of {len(held)} test(s) held for review (`grader review`): {reaches}"
                       if held else reaches)
        notebook = verdict.autograded_notebook(kit, accepted.notebook, the_plan, results, verdicts)
        notes = list(accepted.notes)
        if the_plan.restored:
            notes.append(f"test cells restored from the original: {', '.join(the_plan.restored)}")
        if the_plan.given_restored:
            notes.append(f"{len(the_plan.given_restored)} given cell(s) edited or missing: the course's ran instead")
        flags = ([finished.detail] if finished.status != "finished" else []) + ([reaches] if found else [])
        run = runs.Run(job.student, ch.id, "flagged" if flags else "graded", "; ".join([*flags, *notes]),
                       peak_memory=finished.peak_rss)
        return Outcome(run, verdicts, notebook, hold=hold, only=only)

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
                tmp = f".{name}.{os.getpid()}.tmp"
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                              dir_fd=fd)
                with os.fdopen(out, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            os.close(fd)


def _warm() -> None:
    """What judging loads on first use, loaded while the main process still prepares the chapters:
    ``torch.broadcast_shapes`` imports torch's symbolic shapes (sympy), over a second."""
    import torch

    torch.broadcast_shapes((2, 1), (1, 2))


def _worker_main(fd: int) -> None:
    """A worker process (``python -c``, the connection's descriptor inherited). It is started before the
    chapters are prepared: it receives only its slot and what the sandbox must hide (``boot``), starts the
    zygote, says it is ready, and waits for the setup with the chapters' kits (sent once they are
    prepared); then it grades ``("grade", job, attempt)`` requests until told to stop. A zygote is a
    program of its own (``exec``'d, never a fork of this process, whose descriptors it does not inherit):
    no kit and no reference output ever reaches its memory, nor so the sandboxes forked from it."""
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)
    try:
        boot = pickle.loads(conn.recv_bytes())
        zygote = Zygote(boot["slot"], boot["hide"])
    except Exception as exc:  # noqa: BLE001 -- reported to the parent, which decides
        conn.send(("broken", f"{type(exc).__name__}: {exc}"))
        return
    worker = None
    try:
        conn.send(("ready", zygote.isolation))
        _warm()
        while True:
            try:
                request = conn.recv()
            except EOFError:
                break
            if request is None:
                break
            if request[0] == "setup":
                worker = _Worker({**request[1], **boot}, zygote)
                continue
            conn.send(("done", worker.grade(*request[1:])))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the parent is gone (a killed run): nothing to report to
    finally:
        (worker.zygote if worker else zygote).close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # nothing left to tidy: skip tearing down torch and friends (seconds)


class _Pool:
    """The worker processes: a fresh interpreter each (``python -c``, not a fork: no state inherited from
    this one), talking over a socket pair (pickled messages, :mod:`multiprocessing.connection`). They
    start at once, before the chapters are prepared; :meth:`share` hands them the kits."""

    def __init__(self, slots: int, hide: list[Path]):
        self.hide = hide
        self.setup: bytes | None = None  # ("setup", ...) pickled, once shared: a restarted worker gets it too
        self.procs: dict[int, subprocess.Popen] = {}
        self.conns: dict[int, object] = {}
        for slot in range(slots):
            self.start(slot)

    def start(self, slot: int) -> None:
        mine, theirs = multiprocessing.Pipe()
        fd = theirs.fileno()
        code = f"from grader.grading.autograde import _worker_main; _worker_main({fd})"
        proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[fd], cwd=Path.cwd(),
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    filter(None, [str(Path(__file__).resolve().parents[2]),
                                                  os.environ.get("PYTHONPATH")]))})
        theirs.close()
        self.procs[slot], self.conns[slot] = proc, mine
        # a few bytes, which wait in the socket's buffer while the worker imports: this process goes on
        self._send_bytes(slot, pickle.dumps({"slot": slot, "hide": self.hide}))
        if self.setup is not None:
            self._send_bytes(slot, self.setup)

    def _send_bytes(self, slot: int, data: bytes) -> None:
        try:
            self.conns[slot].send_bytes(data)
        except OSError:
            pass  # the worker is gone already: wait() reports it as died, and it is restarted

    def share(self, setup: dict) -> None:
        """Hand every worker the setup, the prepared chapters' kits included (each reads it once its zygote
        has started). Plain pickle: torch's own reducers (shared memory) would need a multiprocessing
        child's key."""
        self.setup = pickle.dumps(("setup", setup))
        for slot in list(self.conns):
            self._send_bytes(slot, self.setup)

    def restart(self, slot: int) -> None:
        self.stop(slot)
        self.start(slot)

    def send(self, slot: int, request) -> None:
        self.conns[slot].send(request)

    def wait(self) -> list[tuple[int, tuple]]:
        """The messages that arrived, as ``(slot, message)``; a worker that died says ``("died", why)``."""
        by_conn = {id(c): s for s, c in self.conns.items()}
        got = []
        for conn in wait_for(list(self.conns.values())):
            slot = by_conn[id(conn)]
            try:
                got.append((slot, conn.recv()))
            except (EOFError, OSError):
                proc = self.procs[slot]
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
                got.append((slot, ("died", f"exit code {proc.returncode}")))
        return got

    def _ask_to_stop(self, slot: int) -> None:
        try:
            self.conns[slot].send(None)
        except (OSError, ValueError):
            pass

    def _reap(self, slot: int) -> None:
        proc, conn = self.procs.pop(slot), self.conns.pop(slot)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            # A worker too slow to stop (still importing under load) is terminated; its zygote and that
            # zygote's sandboxes go with it, never left behind as orphans.
            try:
                below = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                below = []
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for child in below:
                try:
                    child.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(below, timeout=5)
        conn.close()

    def stop(self, slot: int) -> None:
        self._ask_to_stop(slot)
        self._reap(slot)

    def close(self) -> None:
        """Stop every worker: all asked first, then waited for, so that they wind down side by side."""
        for slot in list(self.procs):
            self._ask_to_stop(slot)
        for slot in list(self.procs):
            self._reap(slot)


class _Books:
    """What this process writes, opened once per run (a class is hundreds of writes; opening nbgrader's
    gradebook costs more than a submission's grades): the gradebook and the run records. After a failed
    write both are closed, so the next write starts on a fresh connection."""

    def __init__(self, ws: Workspace):
        self.ws, self.gb, self.runs = ws, None, runs.Recorder(ws.db_url)

    def store(self, kits: dict, job: Job, out: Outcome, attempt: int) -> None:
        try:
            if self.gb is None and out.run.status != "failed":
                from nbgrader.api import Gradebook
                self.gb = Gradebook(self.ws.db_url)
            _store(self.ws, kits, job, out, attempt, self.gb)
        except BaseException:
            self.close()
            raise

    def record(self, run: runs.Run) -> None:
        try:
            self.runs.record(run)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        gb, self.gb = self.gb, None
        for closing in ((gb.close,) if gb is not None else ()) + (lambda: self.runs.__exit__(None, None, None),):
            try:
                closing()
            except Exception:  # noqa: BLE001,S110 -- a broken connection: nothing more to lose
                pass


def autograde(course: Course, submitted: Path, *, chapters: list[Chapter] | None = None,
              workspace: Workspace | None = None, jobs: int = 1, timeout: float = 600,
              shard: tuple[int, int] | None = None, dry_run: bool = False, limits: Limits | None = None,
              log=print, progress: bool = True, students: list[str] | None = None,
              exercise: str | None = None) -> list[runs.Run]:
    """Grade every submission under ``submitted``; return one run record per (student, chapter).

    ``students``: only theirs. ``exercise`` (an exercise's name, ``softmax``, or one of its test cells'
    grade id, ``test_softmax``): only that exercise's tests are judged again, in the chapters that have it;
    every other test of a submission graded before keeps its grade, hold and feedback."""
    ws = workspace or course.workspace()
    raws = {ch.id: ch.notebook.read_bytes() for ch in course.chapters()}  # one read: key and kit from it
    sources = {cid: nbformat.reads(raw.decode("utf-8"), as_version=4) for cid, raw in raws.items()}
    only: set[str] = set()
    if exercise:
        chapters, only = _exercise_tests(course, sources, chapters, exercise)
    found, results = discover(course, submitted, chapters)
    if students:
        wanted = set(students)
        missing = wanted - {job.student for job in found} - {run.student for run in results}
        if missing:
            raise UsageError(f"no submission of {', '.join(sorted(missing))} in {submitted}")
        found = [job for job in found if job.student in wanted]
        results = [run for run in results if run.student in wanted]
    found = [job for job in found if in_shard(f"{job.student}/{job.chapter.id}", shard)]
    results = [run for run in results if in_shard(f"{run.student}/{run.chapter}", shard)]
    source_ids = {cid: grade_ids(nb) for cid, nb in sources.items()}
    course_cells = {cid: tamper.course_cells(nb) for cid, nb in sources.items()}
    if dry_run:
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
    if not found:
        for run in results:
            runs.record(ws.db_url, run)
            log(f"  {run.student:<16} {run.chapter:<16} failed: {run.reason}")
        return results
    jobs_folder = ws.path("sandbox", "jobs")
    jobs_folder.mkdir(parents=True, exist_ok=True)
    os.chmod(jobs_folder, 0o700)
    # everything a sandbox must not see, known before any worker starts: the course (the cache of prepared
    # chapters, _build/cache/grading, is inside it), the workspace (the cases' copies), the submissions
    hide = sorted({course.root.resolve(), ws.folder.resolve(), submitted.resolve()})
    slots = max(1, min(jobs, len(found)))
    limits.threads = max(1, (os.cpu_count() or 1) // slots)
    kits: dict = {}
    bar = None
    pending = deque((job, 1, "") for job in found)  # (job, attempt, the first attempt's grader fault)
    idle: list[int] = []
    busy: dict[int, tuple[Job, int, str]] = {}
    said_isolation = False

    def finish(item: tuple[Job, int, str], out: Outcome) -> None:
        job, attempt, first = item
        if not out.fault:
            try:
                books.store(kits, job, out, attempt)
            except Exception as exc:  # noqa: BLE001 -- the gradebook write failed: the grader's trouble
                out.fault = f"recording the grades failed: {type(exc).__name__}: {exc}"[:500]
        if out.fault and attempt == 1:
            log(f"  {job.student:<16} {job.chapter.id:<16} grader error, trying again: {out.fault}")
            pending.appendleft((job, 2, out.fault))
            return
        run = out.run
        if out.fault:
            _forget(ws, job.student, job.chapter.id)
            run = runs.Run(job.student, job.chapter.id, ERROR,
                           f"grader error, not the student's (needs the instructor: grade it again): {out.fault}"
                           + ("" if first == out.fault else f"; first attempt: {first}"), run.seconds)
        elif first:
            run.reason = "; ".join(filter(None, [run.reason, f"graded on a second attempt after: {first}"]))
        try:
            books.record(run)
        except Exception as exc:  # noqa: BLE001 -- keep going; the summary and the exit code say so
            run = runs.Run(run.student, run.chapter, ERROR, f"the run record could not be written: "
                           f"{type(exc).__name__}: {exc}"[:500], run.seconds)
        results.append(run)
        if bar:
            bar.update(run)
        detail = run.reason or run.status
        if run.status != "graded":
            detail = f"{run.status}: {run.reason}"
        log(f"  {run.student:<16} {run.chapter:<16} {detail} ({run.seconds:.1f} s)")

    # The workers start first (each imports torch and starts its zygote: seconds) and wait for the kits,
    # while this process records the chapters in the gradebook and prepares them (the cache makes that a
    # read). Grading starts once every kit is shared, so a chapter whose preparation raises stops the run
    # before any grade is written, as it always has.
    pool = _Pool(slots, hide)
    books = _Books(ws)
    try:
        _release(course, needed, ws)
        items.prepare(ws.db_url)  # before any transaction needs it (one made inside one would wait on SQLite)
        kits.update(_prepare(course, needed, ws, raws, sources, log))
        previous = {}
        if only:
            for it in items.load(ws.db_url):
                if it.chapter in {ch.id for ch in needed}:
                    previous.setdefault((it.student, it.chapter), {})[it.grade_id] = it
        pool.share({"course": course, "ws": ws, "kits": kits, "limits": limits, "source_ids": source_ids,
                    "course_cells": course_cells, "only": only, "previous": previous})
        for run in results:
            books.record(run)
            log(f"  {run.student:<16} {run.chapter:<16} failed: {run.reason}")
        bar = _Progress(len(found)) if progress else None

        def dispatch() -> None:
            while pending and idle:
                slot = idle.pop()
                item = pending.popleft()
                busy[slot] = item
                pool.send(slot, ("grade", item[0], item[1]))

        while pending or busy:
            dispatch()
            for slot, message in pool.wait():
                kind = message[0]
                if kind == "ready":
                    if not said_isolation:
                        log(f"  sandbox: {message[1]}")
                        said_isolation = True
                    idle.append(slot)
                    continue
                if kind == "broken":
                    raise GraderError(f"a grading worker could not start: {message[1]}")
                item = busy.pop(slot, None)
                if kind == "died":
                    pool.restart(slot)
                    if item is None:
                        continue
                    out = Outcome(runs.Run(item[0].student, item[0].chapter.id, ERROR),
                                  fault=f"the grading worker process died ({message[1]})")
                else:
                    idle.append(slot)
                    dispatch()  # the worker's next submission first, then this one's grades: it never waits
                    out = message[1]
                finish(item, out)
    finally:
        books.close()
        pool.close()
    return results


def _exercise_tests(course: Course, sources: dict, chapters: list[Chapter] | None,
                    name: str) -> tuple[list[Chapter], set[str]]:
    """The chapters (of ``chapters``, default all) with an exercise ``name`` or a test cell ``name``, and the
    grade ids of the test cells to judge again."""
    picked, tests = [], set()
    for ch in chapters or course.chapters():
        for ex in exercises(sources[ch.id]):
            ids = {nbgrader_meta(c)["grade_id"] for c in ex.tests}
            if name == ex.name or name in ids:
                picked.append(ch)
                tests |= ids if name == ex.name else {name}
    if not picked:
        raise UsageError(f"no exercise or test cell named {name!r}" + (
            f" in {', '.join(ch.id for ch in chapters)}" if chapters else ""))
    return picked, tests


def _prepare(course: Course, chapters: list[Chapter], ws: Workspace, raws: dict[str, bytes], sources: dict,
             log) -> dict:
    """Every chapter's kit, once, in this process: from the cache of prepared chapters where it is fresh
    (:mod:`grader.grading.prepared`), else prepared and stored; the cases land in the workspace."""
    start = time.perf_counter()
    shared = prepared.sources(course)
    kits, cached = {}, 0
    for ch in chapters:
        kits[ch.id], hit = prepared.chapter_kit(course, ch, ws.path("sandbox", "cases", ch.id), raws[ch.id],
                                                sources[ch.id], shared)
        cached += hit
    log(f"  {len(chapters)} chapter(s) ready to grade ({cached} from the cache of prepared chapters) in "
        f"{time.perf_counter() - start:.1f} s")
    return kits


def _store(ws: Workspace, kits: dict, job: Job, out: Outcome, attempt: int, gb=None) -> None:
    """Write one submission's grades (one transaction) and its autograded notebook: only this process
    writes the gradebook, one submission at a time."""
    if out.run.status == "failed":
        return
    _forget(ws, job.student, job.chapter.id)
    _injected("record", job.student, attempt)
    verdict.record(ws, kits[job.chapter.id], job.student, out.verdicts, nbformat.from_dict(out.notebook), gb,
                   out.hold, only=out.only)
