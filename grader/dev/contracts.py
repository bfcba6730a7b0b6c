"""Contract tables: every clause of an exercise's statement, and the hidden cases that exercise it.

An exercise statement is a contract: each of its clauses (shapes, dtypes, extreme values, masks, errors, bans,
memory, algorithm) is exercised by a hidden case, or the table says why not. A chapter's table lives beside
its case generators, as ``CONTRACT`` in ``solutions/cases/<slug>.py``::

    CONTRACT = {
        "causal_mask": {
            "returns a bool (T, T) tensor, True where key j <= query i": ["T=1", "odd T=5"],
            "is made on `device` when one is given": ["T=8, device='cpu'"],
            "must not call torch.tril": ["ban:torch.tril"],
            "prints nothing": "not gradable: output is not part of the grade",
        },
    }

A clause maps to a list of references, each the ``label`` of a case of one of the exercise's hidden checks, or
``ban:<name>`` for a built-in one of its checks bans, or ``memory`` for a case with a memory bound; or to a
single string that starts with ``visible only:`` or ``not gradable:`` and gives the reason.
``python -m grader.dev.contracts [CHAPTER ...]`` prints the tables (``--summary``: one line per chapter with
its exercises, clauses, hidden cases and student-code variants); ``tests/test_contracts.py`` fails when an
exercise has no table, a clause no case, or a reference names a case that does not exist.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field

import nbformat
import torch

from .. import checks
from ..cells import exercises, split_hidden
from ..course import Chapter, Course

EXCUSES = ("visible only:", "not gradable:")


@dataclass
class Row:
    exercise: str
    clause: str
    cases: list[str]  # the references, or [] with an excuse
    excuse: str = ""
    problems: list[str] = field(default_factory=list)


def has_table(chapter: Chapter) -> bool:
    return hasattr(importlib.import_module(f"solutions.cases.{chapter.slug}"), "CONTRACT")


def exercise_cases(chapter: Chapter) -> dict[str, tuple[set[str], set[str], bool]]:
    """For each exercise: the labels of its hidden cases, the names its checks ban, whether one is memory-bounded."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    found: dict[str, tuple[set[str], set[str], bool]] = {}
    for ex in exercises(nb):
        labels: set[str] = set()
        bans: set[str] = set()
        memory = False
        for cell in ex.tests:
            for check in checks.parse_checks(split_hidden(cell.source)[1]):
                with torch.random.fork_rng(devices=[]):
                    cases = checks.prepare(check)
                labels |= {c.label for c in cases}
                bans |= set(check.banned)
                memory |= any(c.max_numel is not None or c.max_live is not None for c in cases)
        found[ex.name] = (labels, bans, memory)
    return found


def table(chapter: Chapter) -> list[Row]:
    """The chapter's contract table, each row with what is wrong with it (empty when it holds)."""
    contract = getattr(importlib.import_module(f"solutions.cases.{chapter.slug}"), "CONTRACT", None)
    known = exercise_cases(chapter)
    if contract is None:
        return [Row(ex, "", [], problems=[f"no CONTRACT in solutions/cases/{chapter.slug}.py"]) for ex in known]
    rows: list[Row] = []
    for ex in sorted(set(contract) - set(known)):
        rows.append(Row(ex, "", [], problems=[f"{ex} is not an exercise of {chapter.id}"]))
    for ex, (labels, bans, memory) in known.items():
        clauses = contract.get(ex)
        if not clauses:
            rows.append(Row(ex, "", [], problems=[f"{ex} has no contract table"]))
            continue
        for clause, refs in clauses.items():
            if isinstance(refs, str):
                ok = refs.startswith(EXCUSES) and len(refs.split(":", 1)[1].strip()) >= 10
                rows.append(Row(ex, clause, [], refs, [] if ok else [
                    f"{ex}: {clause!r}: a clause without cases says 'visible only: <why>' or 'not gradable: <why>'"]))
                continue
            problems = [] if refs else [f"{ex}: {clause!r} has no case"]
            for ref in refs:
                if ref.startswith("ban:"):
                    if ref[4:] not in bans:
                        problems.append(f"{ex}: {clause!r}: no check of {ex} bans {ref[4:]}")
                elif ref == "memory":
                    if not memory:
                        problems.append(f"{ex}: {clause!r}: no case of {ex} has a memory bound")
                elif ref not in labels:
                    problems.append(f"{ex}: {clause!r}: no hidden case of {ex} is labelled {ref!r}")
            rows.append(Row(ex, clause, list(refs), "", problems))
    return rows


def render(chapter: Chapter, rows: list[Row]) -> str:
    lines = [f"{chapter.id}: {len(rows)} clauses, "
             f"{len({c for r in rows for c in r.cases})} cases referenced"]
    for row in rows:
        what = row.excuse or ", ".join(row.cases) or "-"
        lines.append(f"  {row.exercise:<24} {row.clause}\n  {'':<24}   -> {what}")
        lines += [f"  {'':<24}   !! {p}" for p in row.problems]
    return "\n".join(lines)


def summary(course: Course, chapter: Chapter) -> dict[str, int]:
    """Counts for one chapter: exercises, clauses, hidden cases (all, and referenced by the table), student
    code variants (right answers, mistakes, mistakes that pass the visible tests)."""
    from .samples import is_correct, passing_visible, student_code

    known = exercise_cases(chapter)
    rows = table(chapter) if has_table(chapter) else []
    variants = student_code(course, chapter)
    sneaky = passing_visible(course, chapter)
    return {
        "exercises": len(known), "clauses": sum(bool(r.clause) for r in rows),
        "uncovered": sum(bool(r.problems) for r in rows),
        "cases": sum(len(labels) for labels, _, _ in known.values()),
        "referenced": len({c for r in rows for c in r.cases}),
        "correct": sum(is_correct(v) for vs in variants.values() for v in vs),
        "wrong": sum(not is_correct(v) for vs in variants.values() for v in vs),
        "pass_visible": sum(len(v) for v in sneaky.values()),
    }


def main(argv: list[str]) -> int:
    course = Course.here()
    if argv[:1] == ["--summary"]:
        chapters = course.select(argv[1:]) if argv[1:] else course.chapters()
        keys = ["exercises", "clauses", "uncovered", "cases", "referenced", "correct", "wrong", "pass_visible"]
        print(f"{'chapter':<22}" + "".join(f"{k:>13}" for k in keys))
        total = dict.fromkeys(keys, 0)
        for ch in chapters:
            row = summary(course, ch)
            total = {k: total[k] + row[k] for k in keys}
            print(f"{ch.id:<22}" + "".join(f"{row[k]:>13}" for k in keys))
        print(f"{'total':<22}" + "".join(f"{total[k]:>13}" for k in keys))
        return 0
    chapters = course.select(argv) if argv else [ch for ch in course.chapters() if has_table(ch)]
    bad = 0
    for ch in chapters:
        rows = table(ch)
        bad += sum(bool(r.problems) for r in rows)
        print(render(ch, rows))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
