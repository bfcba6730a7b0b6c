"""Sample submissions made from the released notebook and bundled student code.

Student code lives in ``tests/student_code/<slug>/``, in two forms that make the same thing: the complete
source a student would put in an exercise's solution cell (a *variant*).

* ``<exercise>__<variant>.py``: a whole cell, for answers written independently: ``__correct`` and
  ``__correct_<how>`` (right answers in different styles).
* ``<exercise>.md``: every other variant of the exercise, each written as the cell it starts from plus the
  edit that changes it, with the reason beside it, so that what is wrong is visible where it is wrong::

      ## no_factor_two
      from: correct
      Counts a multiply-add as one FLOP instead of two.

      ```diff
      -    return 2 * batch * heads * pairs * (d_k + d_v)
      +    return batch * heads * pairs * (d_k + d_v)
      ```

  ``from:`` names the right answer it starts from (default ``correct``; ``<Exercise>__<variant>`` for another
  exercise's, e.g. a cell that repeats an earlier exercise's class so that it stands alone); a right answer
  that shares most of its lines with another is written as an edit too. In a ``diff`` block, ``-`` lines are replaced by
  the ``+`` lines that follow them and lines starting with a space are context (kept); the ``-`` and context
  lines of a hunk must stand exactly once in the cell; a line ``@@`` starts another hunk.

A mistake marked with a line ``passes: visible`` is one the contract is about: it passes every visible test of
its exercise (the tests prove it) and only the hidden checks catch it.

``correct`` and ``correct_<how>`` variants are right answers; a ``uses_<builtin>`` variant is a right answer
through a banned built-in; every other variant is a realistic mistake. The tests grade submissions assembled
from them (every variant still handed in as a whole cell), and ``python -m grader.dev.samples OUT`` lays out a
small demo class for ``make grade-demo``.
"""

from __future__ import annotations

import copy
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..cells import exercises
from ..course import Chapter, Course
from ..release import is_released, release

WARNING_WRAPPER = '''

import functools as _functools
import warnings as _warnings


def _with_warning(fn):
    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _warnings.warn("a harmless warning from the student's code", UserWarning, stacklevel=2)
        return fn(*args, **kwargs)
    return wrapper


if isinstance({name}, type):
    {name}.forward = _with_warning({name}.forward)
else:
    {name} = _with_warning({name})
'''


def is_correct(variant: str) -> bool:
    """A mistake marked with a line ``passes: visible`` is one the contract is about: it passes every visible test of
its exercise (the tests prove it) and only the hidden checks catch it.

``correct`` and ``correct_<how>`` variants are right answers; every other variant is a mistake."""
    return variant == "correct" or variant.startswith("correct_")


class BadVariant(ValueError):
    """A variants file that does not say one clear thing (the message names the file and the variant)."""


@dataclass
class Edit:
    """One variant of an ``<exercise>.md`` file: the cell it starts from, why it differs, the hunks."""

    name: str
    base: str
    why: str
    hunks: list[tuple[list[str], list[str]]]  # (old lines, new lines)
    passes_visible: bool = False  # marked ``passes: visible``: only the hidden checks may catch it


VARIANT = re.compile(r"^## ([A-Za-z0-9_]+)\s*$")


def parse_edits(text: str, where: str = "<variants>") -> list[Edit]:
    """The variants of an ``<exercise>.md`` file, in order."""
    edits: list[Edit] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = VARIANT.match(lines[i])
        i += 1
        if not m:
            continue
        edit = Edit(m.group(1), "correct", "", [])
        why: list[str] = []
        while i < len(lines) and not VARIANT.match(lines[i]):
            line = lines[i]
            i += 1
            if line.startswith("from:"):
                edit.base = line[5:].strip()
            elif line.startswith("passes:"):
                if line[7:].strip() != "visible":
                    raise BadVariant(f"{where}: {edit.name}: the only marker is 'passes: visible'")
                edit.passes_visible = True
            elif line.strip() == "```diff":
                old: list[str] = []
                new: list[str] = []
                while i < len(lines) and lines[i].strip() != "```":
                    line = lines[i]
                    i += 1
                    if line.strip() == "@@":
                        edit.hunks.append((old, new))
                        old, new = [], []
                    elif line.startswith("-"):
                        old.append(line[1:])
                    elif line.startswith("+"):
                        new.append(line[1:])
                    elif line.startswith(" ") or line == "":
                        old.append(line[1:])
                        new.append(line[1:])
                    else:
                        raise BadVariant(f"{where}: {edit.name}: a diff line must start with -, + or a space: {line!r}")
                i += 1  # the closing fence
                edit.hunks.append((old, new))
            elif line.startswith("```"):
                raise BadVariant(f"{where}: {edit.name}: only ```diff blocks are edits")
            elif line.strip():
                why.append(line.strip())
        edit.why = " ".join(why)
        if not edit.why or not edit.hunks:
            raise BadVariant(f"{where}: {edit.name} needs a reason and at least one diff block")
        edits.append(edit)
    return edits


def apply_edit(base: str, edit: Edit, where: str = "<variants>") -> str:
    """The cell ``base`` with the edit's hunks applied, each at the one place its old lines stand."""
    lines = base.split("\n")
    for old, new in edit.hunks:
        if not old:
            raise BadVariant(f"{where}: {edit.name}: a hunk needs - or context lines to say where it goes")
        at = [k for k in range(len(lines) - len(old) + 1) if lines[k:k + len(old)] == old]
        if len(at) != 1:
            raise BadVariant(f"{where}: {edit.name}: the hunk starting {old[0].strip()!r} stands {len(at)} times "
                             f"in {edit.base}, not once")
        lines[at[0]:at[0] + len(old)] = new
    return "\n".join(lines)


def student_code(course: Course, chapter: Chapter) -> dict[str, dict[str, str]]:
    """``{exercise: {variant: source}}`` for a chapter (empty when it has none): whole cells and edits."""
    folder = course.root / "tests" / "student_code" / chapter.slug
    found: dict[str, dict[str, str]] = {}
    for path in sorted(folder.glob("*__*.py")):
        exercise, _, variant = path.stem.partition("__")
        found.setdefault(exercise, {})[variant] = path.read_text()
    pending = [(path.stem, str(path.relative_to(course.root)), edit)
               for path in sorted(folder.glob("*.md")) for edit in parse_edits(path.read_text(), path.name)]
    while pending:  # an edit may start from a cell that is itself an edit (of a right answer)
        waiting = []
        for exercise, where, edit in pending:
            base_exercise, _, base = edit.base.rpartition("__")
            base_exercise = base_exercise or exercise
            if not is_correct(base):
                raise BadVariant(f"{where}: {edit.name} starts from {edit.base!r}: start from a right answer")
            if base not in found.get(base_exercise, {}):
                waiting.append((exercise, where, edit))
                continue
            mine = found.setdefault(exercise, {})
            if edit.name in mine:
                raise BadVariant(f"{where}: {edit.name} is defined twice")
            mine[edit.name] = apply_edit(found[base_exercise][base], edit, where)
        if len(waiting) == len(pending):
            raise BadVariant("; ".join(f"{where}: {e.name} starts from {e.base!r}, which no file defines"
                                       for _, where, e in waiting))
        pending = waiting
    return found


def reasons(course: Course, chapter: Chapter) -> dict[str, dict[str, str]]:
    """``{exercise: {variant: why}}`` of the edited variants: what the tests print when one misbehaves."""
    folder = course.root / "tests" / "student_code" / chapter.slug
    return {p.stem: {e.name: e.why for e in parse_edits(p.read_text(), p.name)} for p in sorted(folder.glob("*.md"))}


def passing_visible(course: Course, chapter: Chapter) -> dict[str, set[str]]:
    """``{exercise: {variant}}`` of the mistakes marked ``passes: visible``."""
    folder = course.root / "tests" / "student_code" / chapter.slug
    return {p.stem: {e.name for e in parse_edits(p.read_text(), p.name) if e.passes_visible}
            for p in sorted(folder.glob("*.md"))}


def released(course: Course, chapter: Chapter) -> nbformat.NotebookNode:
    path = course.build / "release" / chapter.id / chapter.notebook.name
    if not is_released(course, chapter):  # missing, or made from an older source: hand in what students get
        release(course, [chapter], log=lambda *_: None)
    return nbformat.read(path, as_version=4)


def exercise_points(nb: nbformat.NotebookNode) -> dict[str, float]:
    """Points of each exercise (the sum over its graded test cells)."""
    return {ex.name: ex.points for ex in exercises(nb)}


def fill(nb: nbformat.NotebookNode, code: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of the student notebook with the solution cells of ``code``'s exercises replaced."""
    nb = copy.deepcopy(nb)
    missing = set(code)
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in code:
            cell.source = code[meta["grade_id"]]
            missing.discard(meta["grade_id"])
    if missing:
        raise KeyError(f"no solution cell for {sorted(missing)}")
    return nb


def with_warnings(code: dict[str, str]) -> dict[str, str]:
    """Correct code that also emits a ``UserWarning`` every time the exercise is called."""
    return {name: src + WARNING_WRAPPER.format(name=name) for name, src in code.items()}


def hand_in(inbox: Path, student: str, chapter: Chapter, notebook: nbformat.NotebookNode | None = None, *,
            name: str | None = None, raw: bytes | None = None) -> Path:
    """Put a submission at ``inbox/<student>/<chapter>/<name>``: a notebook, raw bytes, or nothing."""
    folder = inbox / student / chapter.id
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (name or chapter.notebook.name)
    if notebook is not None:
        nbformat.write(notebook, target)
    if raw is not None:
        target.write_bytes(raw)
    return target


def demo(course: Course, out: Path) -> list[str]:
    """Lay out a small class of submissions for every chapter that has bundled student code."""
    if out.exists():
        shutil.rmtree(out)
    made = []
    for ch in course.chapters():
        variants = student_code(course, ch)
        if not variants:
            continue
        nb = released(course, ch)
        correct = {ex: v["correct"] for ex, v in variants.items()}
        points = exercise_points(nb)
        hardest = max(variants, key=lambda ex: points.get(ex, 0))
        wrong = sorted(v for v in variants[hardest] if not is_correct(v))[0]

        def put(student: str, notebook: nbformat.NotebookNode | None = None, name: str | None = None,
                raw: bytes | None = None, ch: Chapter = ch) -> None:
            hand_in(out, student, ch, notebook, name=name, raw=raw)
            made.append(f"{student}/{ch.id}")

        put("alice", fill(nb, correct))
        put("bob", nb)  # handed in untouched
        put("carol", fill(nb, {**correct, hardest: variants[hardest][wrong]}))
        put("dan", fill(nb, with_warnings(correct)))
        put("erin", fill(nb, correct), name="my_attempt_final(2).ipynb")
        whole = nbformat.writes(fill(nb, correct)).encode()
        put("frank", raw=whole[: len(whole) // 2])  # cut off half-way: corrupt JSON
        put("gina")  # an empty chapter folder
    return made


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m grader.dev.samples OUT_DIR", file=sys.stderr)
        return 2
    made = demo(Course.here(), Path(argv[0]))
    print(f"{len(made)} sample submissions in {argv[0]}: " + ", ".join(made))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
