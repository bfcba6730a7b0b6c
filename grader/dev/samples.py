"""Sample submissions made from the released notebook and bundled student code.

Student code lives in ``tests/student_code/<slug>/<exercise>__<variant>.py``: each file is the complete
source a student would put in that exercise's solution cell (``__correct`` and ``__correct_<how>``
variants are right answers, written as a student would; every other variant is a realistic mistake).
The tests grade submissions assembled from them, and ``python -m grader.dev.samples OUT`` lays out a small
demo class for ``make grade-demo``.
"""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path

import nbformat

from ..cells import exercises
from ..course import Chapter, Course
from ..release import release

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
    """``correct`` and ``correct_<how>`` variants are right answers; every other variant is a mistake."""
    return variant == "correct" or variant.startswith("correct_")


def student_code(course: Course, chapter: Chapter) -> dict[str, dict[str, str]]:
    """``{exercise: {variant: source}}`` for a chapter (empty when it has none)."""
    folder = course.root / "tests" / "student_code" / chapter.slug
    found: dict[str, dict[str, str]] = {}
    for path in sorted(folder.glob("*__*.py")):
        exercise, _, variant = path.stem.partition("__")
        found.setdefault(exercise, {})[variant] = path.read_text()
    return found


def released(course: Course, chapter: Chapter) -> nbformat.NotebookNode:
    path = course.build / "release" / chapter.id / chapter.notebook.name
    if not path.exists():
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
