"""Grading at load: ``python -m grader.dev.scale [--students 50] [--repeat 3] [--jobs 2]`` (``make bench-scale``).

Lays out a class of ``--students`` students, each handing in every chapter that has bundled student code,
correct and wrong samples mixed (:mod:`grader.dev.samples`: for student ``i`` and a chapter, the correct
answers, the untouched release, or one wrong variant of one exercise, in turn; one flagged submission per
chapter, which reads a file, and two stopped at the time limit), and grades the whole
class ``--repeat`` times through :func:`grader.grading.autograde.autograde`, each time into a fresh
workspace, to shake out races. For every round it prints the notebooks per second, the peak resident
memory of every kind of process (the grader, its workers, the sandbox zygotes, the notebooks: sampled
every 0.2 s, so a short-lived notebook's peak is a lower bound), the counts per status and the grader
errors; then it checks that every submission got the score its content earns and that identical
submissions got identical scores in every round. Exit status 1 when there was a grader error or a score
differed. ``--report DIR`` also builds the instructor's pages of the last round (``grader report --html``)
and prints the time they took. Run it with ``nice`` on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil

from ..course import Course
from ..grading.autograde import ERROR, autograde
from ..grading.report import collect
from . import samples

STOPPED_IN = (2, 3)  # the chapters where one student's notebook runs into the time limit


def build_class(course: Course, inbox: Path, students: int) -> tuple[dict, dict]:
    """Hand in every chapter for every student; return ``{(student, chapter): content key}`` and
    ``{content key: expected score}``. Submissions with one key are identical files."""
    content, expected = {}, {}
    for ch in course.chapters():
        variants = samples.student_code(course, ch)
        if not variants:
            continue
        released = samples.released(course, ch)
        points = samples.exercise_points(released)
        correct = {ex: v["correct"] for ex, v in variants.items()}
        pool = [("correct", samples.fill(released, correct), sum(points.values())),
                ("stub", released, 0.0)]
        for ex, by_name in sorted(variants.items()):
            for name in sorted(by_name):
                if name != "correct":
                    score = sum(points.values()) - (0.0 if samples.is_correct(name) else points[ex])
                    pool.append((f"{ex}__{name}", samples.fill(released, {**correct, ex: by_name[name]}), score))
        # one who reads a file (the reading flags it: its later tests are judged and held for review) and one
        # whose last cell never ends (stopped at the time limit: the tests before it count)
        flagged = samples.fill(released, correct)
        flagged.cells.insert(1, nbformat.v4.new_code_cell("notes = open('/etc/hostname').read()"))
        pool.append(("flagged", flagged, sum(points.values())))
        stopped = samples.fill(released, correct)
        stopped.cells.append(nbformat.v4.new_code_cell("import time\nwhile True:\n    time.sleep(1)"))
        pool.append(("stopped", stopped, sum(points.values())))
        # every third student correct, every fifth the stub, student 4 flagged, student 7 stopped in two
        # chapters, the others a wrong (or other right) variant
        for i in range(students):
            if i % 3 == 0:
                key, nb, score = pool[0]
            elif i % 5 == 1:
                key, nb, score = pool[1]
            elif i == 4:
                key, nb, score = pool[-2]
            elif i == 7 and ch.number in STOPPED_IN:
                key, nb, score = pool[-1]
            else:
                key, nb, score = pool[2 + (i * 7 + ch.number) % (len(pool) - 4)]
            samples.hand_in(inbox, f"s{i:03d}", ch, nb)
            content[f"s{i:03d}", ch.id] = (ch.id, key)
            expected[ch.id, key] = score
    return content, expected


class Sampler:
    """Peak RSS of this process and all its descendants, by role, sampled in a thread."""

    def __init__(self, every: float = 0.2):
        self.every, self.peaks, self.stop = every, {}, threading.Event()
        self.me = psutil.Process()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def role(proc: psutil.Process) -> str:
        try:
            cmd = " ".join(proc.cmdline())
            if proc.uids().real >= 61000:
                return "notebook"
            if "grader.grading.sandbox" in cmd:
                return "zygote (or its leader)"
            if "_worker_main" in cmd:
                return "worker"
            return proc.name()
        except psutil.Error:
            return "gone"

    def _loop(self) -> None:
        while not self.stop.is_set():
            procs = [self.me]
            try:
                procs += self.me.children(recursive=True)
            except psutil.Error:
                pass
            for proc in procs:
                try:
                    rss = proc.memory_info().rss
                except psutil.Error:
                    continue
                role = "grader (main)" if proc.pid == self.me.pid else self.role(proc)
                key = (role, proc.pid)
                self.peaks[key] = max(self.peaks.get(key, 0), rss)
            self.stop.wait(self.every)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def by_role(self) -> dict[str, tuple[int, int]]:
        """role -> (processes seen, largest peak in bytes)."""
        out: dict[str, tuple[int, int]] = {}
        for (role, _), rss in self.peaks.items():
            n, peak = out.get(role, (0, 0))
            out[role] = (n + 1, max(peak, rss))
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.dev.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--students", type=int, default=50)
    p.add_argument("--repeat", type=int, default=3, help="grade the whole class this many times")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60, help="each notebook's time limit (the stopped ones use it)")
    p.add_argument("--report", metavar="DIR", help="build the instructor's pages of the last round into DIR")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = p.parse_args(argv)
    course = Course.here()
    root = Path(tempfile.mkdtemp(prefix="grader-scale-"))
    content, expected = build_class(course, root / "inbox", args.students)
    chapters = sorted({c for _, c in content})
    print(f"{args.students} students x {len(chapters)} chapters = {len(content)} notebooks, {args.jobs} job(s), "
          f"{args.repeat} round(s); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPU(s)")
    head = (f"{'round':>5} {'notebooks':>9} {'wall s':>7} {'nb/s':>6} {'graded':>6} {'flagged':>7} {'failed':>6} "
            f"{'errors':>6} {'load':>5}  peak RSS MiB by process kind (count)")
    print(head)
    scores_seen: dict[tuple[str, str], set[float]] = {}
    bad = 0
    for round_ in range(1, args.repeat + 1):
        ws = course.workspace(root / f"round{round_}")
        with Sampler() as sampler:
            start = time.perf_counter()
            results = autograde(course, root / "inbox", workspace=ws, jobs=args.jobs, timeout=args.timeout,
                                log=lambda *_: None, progress=False)
            wall = time.perf_counter() - start
        counts = {s: sum(r.status == s for r in results) for s in ("graded", "flagged", "failed", ERROR)}
        memory = "  ".join(f"{role} {peak / 2**20:.0f} ({n})" for role, (n, peak) in sorted(sampler.by_role().items())
                           if role != "gone")
        print(f"{round_:>5} {len(results):>9} {wall:>7.1f} {len(results) / wall:>6.2f} {counts['graded']:>6} "
              f"{counts['flagged']:>7} {counts['failed']:>6} {counts[ERROR]:>6} {os.getloadavg()[0]:>5.1f}  {memory}",
              flush=True)
        for r in results:
            if r.status == ERROR:
                print(f"      grader error: {r.student} {r.chapter}: {r.reason}")
        bad += counts[ERROR]
        for row in collect(ws):
            key = content.get((row.student, row.chapter))
            if key is None:
                continue
            judged = row.score + row.held  # held points are judged, and wait for the instructor
            scores_seen.setdefault(key, set()).add(judged)
            if judged != expected[key]:
                bad += 1
                print(f"      {row.student} {row.chapter} ({key[1]}): score {row.score:g}, expected "
                      f"{expected[key]:g} ({row.status}: {row.reason[:120]})")
        if args.report and round_ == args.repeat:
            from ..grading import insights

            start = time.perf_counter()
            index = insights.build(course, ws, Path(args.report).resolve())
            print(f"      the instructor's report of this round: {time.perf_counter() - start:.1f} s to build, {index}")
        else:
            shutil.rmtree(ws.folder, ignore_errors=True)
    differing = {k: v for k, v in scores_seen.items() if len(v) > 1}
    for (chapter, key), values in sorted(differing.items()):
        print(f"      identical submissions, different scores: {chapter} {key}: {sorted(values)}")
    print(f"{len(scores_seen)} distinct submissions; identical submissions got identical scores in every round: "
          f"{not differing}; grader errors and unexpected scores: {bad}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if bad or differing else 0


if __name__ == "__main__":
    sys.exit(main())
