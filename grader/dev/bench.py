"""Measure the chapters against their budgets: ``python -m grader.dev.bench [CHAPTER ...]`` (``make bench``),
grading against plain nbgrader: ``python -m grader.dev.bench --grading [--n 40]`` (``make bench-grading``), and
the book's build: ``python -m grader.dev.bench --build`` (``make bench-build``): cold, unchanged, one chapter changed;
the test suite: ``python -m grader.dev.bench --tests [PYTEST_ARGS]`` (``make bench-tests``): its wall time and the
time of each test module, slowest first.

For each chapter it executes the source notebook in a fresh kernel (no cache) and prints the whole
notebook's wall time (budget: 30 s on 2 CPU cores, demo cells included), the time of its graded test cells
with visible and hidden tests together (budget for the visible ones: 5 s), and the slowest cell. It prints
figures; it asserts nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbgrader.api import Gradebook

from ..cells import nbgrader_meta
from ..course import Course, GraderError, Workspace
from ..execute import FIGURE_KERNEL, KERNEL_ENV, QUIET_KERNEL
from ..grading.autograde import autograde
from ..grading.report import collect
from ..nbgrader_run import nbgrader
from ..release import release
from . import redteam, samples


def _seconds(cell) -> float:
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = dt.datetime.fromisoformat
    return (parse(end.replace("Z", "+00:00")) - parse(start.replace("Z", "+00:00"))).total_seconds()


def bench(course: Course, names: list[str]) -> list[dict]:
    rows = []
    for ch in course.select(names):
        nb = nbformat.read(ch.notebook, as_version=4)
        start = time.perf_counter()
        NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True,
                       extra_arguments=QUIET_KERNEL + FIGURE_KERNEL,
                       resources={"metadata": {"path": str(ch.folder)}}).execute(env={**os.environ, **KERNEL_ENV})
        wall = time.perf_counter() - start
        per_cell = [(_seconds(c), i) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        tests = sum(_seconds(c) for c in nb.cells if nbgrader_meta(c).get("grade"))
        slowest, index = max(per_cell)
        rows.append({"chapter": ch.id, "wall_s": wall, "cells_s": sum(s for s, _ in per_cell),
                     "tests_s": tests, "slowest_cell": index, "slowest_s": slowest})
    return rows


def _class(course: Course, inbox: Path, n: int, chapter: str = "qkv") -> None:
    """``n`` submissions of one chapter: correct, stub and every variant, in turn."""
    ch = course.chapter(chapter)
    released = samples.released(course, ch)
    variants = samples.student_code(course, ch)
    correct = {ex: v["correct"] for ex, v in variants.items()}
    pool = [released, samples.fill(released, correct)]
    pool += [samples.fill(released, {**correct, ex: code}) for ex, vs in variants.items()
             for name, code in sorted(vs.items()) if name != "correct"]
    for i in range(n):
        samples.hand_in(inbox, f"s{i:03d}", ch, pool[i % len(pool)])


def _plain(course: Course, inbox: Path, ws: Workspace, chapter: str = "qkv") -> tuple[float, dict]:
    """Plain ``nbgrader autograde`` (serial, one kernel per notebook) on the same submissions."""
    ch = course.chapter(chapter)
    ws.folder.mkdir(parents=True, exist_ok=True)
    release(course, [ch], workspace=ws, log=lambda *_: None)
    for student in sorted(p for p in inbox.iterdir() if p.is_dir()):
        src = student / ch.id
        dest = ws.path("submitted", student.name, ch.id)
        dest.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and not f.is_symlink():  # a FIFO or a link (the red team's) would hang or escape
                shutil.copy(f, dest / f.name)
    start = time.perf_counter()
    nbgrader(course, ["autograde", ch.id, "--force"], workspace=ws, timeout=7200,
             log_file=ws.path("logs") / "plain-autograde.log")
    seconds = time.perf_counter() - start
    scores = {}
    try:
        with Gradebook(ws.db_url) as gb:
            for sub in gb.find_assignment(ch.id).submissions:
                scores[sub.student.id] = float(sub.score)
    except Exception as exc:  # noqa: BLE001 -- a submission may have destroyed the gradebook
        print(f"plain nbgrader's gradebook {ws.db_url} is unreadable: {type(exc).__name__}")
    return seconds, scores


def _ours(course: Course, inbox: Path, ws: Workspace, jobs: int, timeout: float = 120) -> tuple[float, dict, dict]:
    start = time.perf_counter()
    results = autograde(course, inbox, workspace=ws, jobs=jobs, timeout=timeout, log=lambda *_: None,
                        progress=False)
    seconds = time.perf_counter() - start
    rows = {r.student: r for r in collect(ws)}
    # the points judged: earned, and held for review (a flagged cell's later tests) when the reading flags it
    return seconds, {k: r.score + r.held for k, r in rows.items()}, {r.student: r for r in results}


def grading(n: int) -> int:
    course = Course.here()
    root = Path(tempfile.mkdtemp(prefix="grader-bench-"))
    inbox = root / "inbox"
    _class(course, inbox, n)
    print(f"{n} submissions of ch02_qkv in {inbox}")
    plain_s, plain = _plain(course, inbox, course.workspace(root / "plain"))
    one_s, one, _ = _ours(course, inbox, course.workspace(root / "jobs1"), 1)
    two_s, two, _ = _ours(course, inbox, course.workspace(root / "jobs2"), 2)
    print(f"{'grader':<28} {'seconds':>8} {'s/notebook':>11} {'throughput vs plain':>20}")
    for name, secs in (("plain nbgrader autograde", plain_s), ("grader autograde --jobs 1", one_s),
                       ("grader autograde --jobs 2", two_s)):
        print(f"{name:<28} {secs:>8.1f} {secs / n:>11.2f} {plain_s / secs:>19.2f}x")
    same = one == two
    agree = {k for k in plain if plain.get(k) == two.get(k)}
    print(f"--jobs 1 and --jobs 2 scores identical: {same}; plain nbgrader agrees on {len(agree)}/{n}")
    for k in sorted(set(plain) | set(two)):
        if plain.get(k) != two.get(k) or one.get(k) != two.get(k):
            print(f"  {k}: plain {plain.get(k)}, --jobs 1 {one.get(k)}, --jobs 2 {two.get(k)}")
    print("(both run from this repository, so plain nbgrader uses nbgrader_config.py: demo cells skipped, "
          "stderr not an error)")
    return 0


def red_team() -> int:
    course = Course.here()
    root = Path(tempfile.mkdtemp(prefix="grader-redteam-"))
    inbox = root / "inbox"
    ws_plain, ws_ours = course.workspace(root / "plain"), course.workspace(root / "ours")
    others = [ch for ch in course.chapters() if ch.slug != "qkv"]
    # the gradebook attack aims at both workspaces (plain nbgrader runs it unconfined, so it can reach
    # its own gradebook: what it breaks there is part of the comparison), never at the course's
    host = root / "host"
    host.mkdir()
    host.chmod(0o777)
    (host / "canary.txt").write_text("canary\n")
    (host / "canary.txt").chmod(0o666)
    expect = redteam.build(course, inbox, workdir=root, other=others[0] if others else None, host=host)
    # plain nbgrader grades the gradebook attack on its own, last: unconfined, it destroys the databases
    # it finds, and the other cases' plain scores must be read before that
    attack_inbox = root / "inbox-gradebook-attack"
    attack_inbox.mkdir()
    shutil.move(str(inbox / "rt-wrong-gradebook"), str(attack_inbox / "rt-wrong-gradebook"))
    _, plain = _plain(course, inbox, ws_plain)
    plain_traces = redteam.host_traces(host, remove=True)
    for leftover in host.iterdir():  # reset what plain nbgrader's unconfined run changed
        leftover.unlink()
    (host / "canary.txt").write_text("canary\n")
    (host / "canary.txt").chmod(0o666)
    try:
        _, plain_attack = _plain(course, attack_inbox, course.workspace(root / "plain-attack"))
        plain.update(plain_attack)
    except Exception as exc:  # noqa: BLE001 -- the attack broke plain nbgrader's own gradebook
        print(f"plain nbgrader on the gradebook attack: {type(exc).__name__}: {str(exc)[:120]}")
    shutil.move(str(attack_inbox / "rt-wrong-gradebook"), str(inbox / "rt-wrong-gradebook"))
    _, ours, runs_ = _ours(course, inbox, ws_ours, 2, timeout=60)
    wrong_plain = wrong_ours = unscored_plain = 0
    print(f"{'case':<28} {'expected':>10} {'plain':>7} {'ours':>12}  about")
    for name, want in sorted(expect.items()):
        exp = "failed" if want.score is None else f"{want.score:g}" + ("*" if want.status == "flagged" else "")
        p = plain.get(name)
        run = runs_.get(name)
        o = ours.get(name)
        flag = "*" if run and run.status == "flagged" else ""
        ours_txt = "failed" if run and run.status == "failed" else f"{o:g}{flag}"
        plain_txt = "-" if p is None else f"{p:g}"
        if want.score is not None:
            unscored_plain += p is None
            wrong_plain += p is not None and p != want.score
            wrong_ours += o != want.score
        gap = f"  [open: {want.open}]" if want.open else ""
        print(f"{name[:28]:<28} {exp:>10} {plain_txt:>7} {ours_txt:>12}  {want.about}{gap}")
    scored = sum(w.score is not None for w in expect.values())
    print(f"{len(expect)} cases ({scored} with a score to earn): plain nbgrader wrong in {wrong_plain}, "
          f"no score in {unscored_plain}; ours wrong in {wrong_ours}.  * = flagged with a reason")
    print(f"host files the attacks wrote, graded by plain nbgrader: {plain_traces or 'none'}")
    print(f"host files the attacks wrote, graded by ours: {redteam.host_traces(host, remove=True) or 'none'}")
    return 0


def _timed(cmd: list[str], root: Path) -> float:
    import subprocess

    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=root, env={**os.environ, "COURSE_ROOT": str(root)},
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise GraderError(f"{' '.join(cmd)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return time.perf_counter() - start


def build_times(chapter: str = "masks") -> int:
    """What ``make book`` costs: cold (empty _build/), again with nothing changed, and after one chapter's
    text changed. It builds a copy of the course in a temporary folder, never the real _build/."""
    course = Course.here()
    book_cmd = [[sys.executable, "-m", "grader", "release"], [sys.executable, "-m", "grader", "book"]]
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        root = Path(tmp) / "course"
        shutil.copytree(course.root, root, ignore=shutil.ignore_patterns(
            "_build", ".venv", ".vendor", ".git", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache"))
        if (course.root / ".vendor").exists():
            (root / ".vendor").symlink_to(course.root / ".vendor")
        rows = []
        rows.append(("cold (empty _build/)", [_timed(c, root) for c in book_cmd]))
        rows.append(("nothing changed", [_timed(c, root) for c in book_cmd]))
        ch = Course(root).chapter(chapter)
        nb = nbformat.read(ch.notebook, as_version=4)
        last = [c for c in nb.cells if c.cell_type == "markdown"][-1]
        last.source += "\n\nThis sentence was added by the build benchmark."
        nbformat.write(nb, ch.notebook)
        rows.append((f"{ch.id} changed", [_timed(c, root) for c in book_cmd]))
    print(f"{'make book':<24} {'release s':>10} {'book s':>8} {'total s':>8}")
    for name, (rel, book) in rows:
        print(f"{name:<24} {rel:>10.1f} {book:>8.1f} {rel + book:>8.1f}")
    print("targets on 2 cores: cold <= 240 s, one sentence of one chapter changed <= 60 s (both languages)")
    return 0


def test_times(pytest_args: list[str]) -> int:
    """Run the test suite (``make test``'s pytest, with ``pytest_args``) and print where its time goes:
    per module, the summed test time (setup, call and teardown: a module's fixtures count in the module that
    first uses them) and the count of tests, then the wall time. With ``-n 2`` (pytest-xdist, which ``make
    test`` uses) the modules' times add up to more than the wall time."""
    import subprocess
    import xml.etree.ElementTree as ET
    from collections import Counter

    course = Course.here()
    with tempfile.TemporaryDirectory(prefix="bench-tests-") as tmp:
        report = Path(tmp) / "junit.xml"
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 f"--junitxml={report}", *pytest_args], cwd=course.root)
        wall = time.perf_counter() - start
        seconds, count = Counter(), Counter()
        if report.exists():
            for case in ET.parse(report).iter("testcase"):
                module = (case.get("classname") or "?").split(".")
                name = module[1] if len(module) > 1 else module[0]
                seconds[name] += float(case.get("time") or 0)
                count[name] += 1
    print(f"{'test module':<34} {'tests':>6} {'seconds':>8}")
    for name, secs in seconds.most_common():
        print(f"{name:<34} {count[name]:>6} {secs:>8.1f}")
    print(f"{'all modules':<34} {sum(count.values()):>6} {sum(seconds.values()):>8.1f}")
    print(f"wall time of the test suite: {wall:.0f} s ({wall / 60:.1f} min; target on 2 cores: <= 20 min "
          f"for `make test` with its set-up); pytest exit code {result.returncode}")
    return result.returncode


CHAPTER_BUDGET_S = 30  # issue 34: any one chapter's execution, on 2 cores


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--tests":
        return test_times(argv[1:])
    if argv and argv[0] == "--build":
        return build_times()
    if argv and argv[0] == "--grading":
        n = int(argv[argv.index("--n") + 1]) if "--n" in argv else 40
        return grading(n)
    if argv and argv[0] == "--redteam":
        return red_team()
    try:
        rows = bench(Course.here(), argv)
    except GraderError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print(f"{'chapter':<20} {'wall s':>7} {'cells s':>8} {'tests s':>8} {'slowest cell':>13}")
    for r in rows:
        slowest = f"#{r['slowest_cell']} {r['slowest_s']:.1f} s"
        over = "  over budget" if r["wall_s"] > CHAPTER_BUDGET_S else ""
        print(f"{r['chapter']:<20} {r['wall_s']:>7.1f} {r['cells_s']:>8.1f} {r['tests_s']:>8.2f} {slowest:>13}{over}")
    print(f"budgets: a chapter executes in <= {CHAPTER_BUDGET_S} s on 2 CPU cores, demo cells included; its "
          "visible tests run in <= 5 s (wall includes the kernel start and imports)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
