"""Measure the chapters against their budgets: ``python -m grader.bench [CHAPTER ...]`` (``make bench``).

For each chapter it executes the source notebook in a fresh kernel (no cache) and prints the whole
notebook's wall time (budget: 60 s on 2 CPU cores), the time of its graded test cells with visible and
hidden tests together (budget for the visible ones: 5 s), and the slowest cell. It prints figures; it
asserts nothing.
"""

from __future__ import annotations

import datetime as dt
import sys
import time

import nbformat
from nbclient import NotebookClient

from .cells import nbgrader_meta
from .course import Course, GraderError
from .execute import QUIET_KERNEL


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
        NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True, extra_arguments=QUIET_KERNEL,
                       resources={"metadata": {"path": str(ch.folder)}}).execute()
        wall = time.perf_counter() - start
        per_cell = [(_seconds(c), i) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        tests = sum(_seconds(c) for c in nb.cells if nbgrader_meta(c).get("grade"))
        slowest, index = max(per_cell)
        rows.append({"chapter": ch.id, "wall_s": wall, "cells_s": sum(s for s, _ in per_cell),
                     "tests_s": tests, "slowest_cell": index, "slowest_s": slowest})
    return rows


def main(argv: list[str]) -> int:
    try:
        rows = bench(Course.here(), argv)
    except GraderError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print(f"{'chapter':<20} {'wall s':>7} {'cells s':>8} {'tests s':>8} {'slowest cell':>13}")
    for r in rows:
        slowest = f"#{r['slowest_cell']} {r['slowest_s']:.1f} s"
        print(f"{r['chapter']:<20} {r['wall_s']:>7.1f} {r['cells_s']:>8.1f} {r['tests_s']:>8.2f} {slowest:>13}")
    print("budgets: a chapter executes in <= 60 s on 2 CPU cores; its visible tests run in <= 5 s "
          "(wall includes the kernel start and imports)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
