"""``grader validate PATH.ipynb``: a student's check of their notebook before handing it in.

The notebook runs the way grading runs it: a fresh kernel in the notebook's folder, the cells tagged
``demo`` skipped, every graded test cell placed by the same :func:`grader.plan.plan` that grading uses.
Every cell runs, also after an error, each under a time limit. Then each exercise gets one verdict --
passed, not yet implemented, or failed with the error and the failing line -- and the notebook's own
problems (edited or deleted test cells, another file name) are listed as warnings. Only the visible tests
run here: the hidden tests that decide the grade try more cases.

Two modes, one code path; only where the test cells come from differs:

* **course mode** (inside the course repository): the instructor's visible test cells, from the chapter's
  source notebook, replace the student's copies, so an edited or deleted test cell is put back as grading
  puts it back;
* **student mode** (outside it, where students work, or with ``--student``): the notebook is all there
  is, so its exercises and test cells are read from its own nbgrader metadata and its own test cells run.
  An edited test cell ran as edited and a deleted one could not run: both are warned about, and an
  exercise without its test cell gets the verdict ``test missing``.

Nothing here reads ``solutions/`` or the hidden tests: the ``grader`` package is published with the
student notebooks (``grader release``) so that ``python -m grader validate`` works there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from ..cells import checksum, exercises, grade_ids, is_demo, nbgrader_meta, title
from ..course import CHAPTER_DIR, Chapter, Course, GraderError, UsageError
from ..execute import QUIET_KERNEL
from ..plan import Kit, Plan, TestCell, given_cells, plan
from ..submission import Rejected, read_submission

TIMEOUT, DIED = "Timeout", "DeadKernelError"
SETUP = "the setup cell"
VISIBLE_ONLY = "visible tests only: the hidden tests that decide the grade try more cases"
STUDENT_MODE = ("Student mode (no course repository here): the notebook's own test cells run; grading runs "
                "the original ones")
TEST_MISSING = "test missing"
FRAME = re.compile(r"Cell In\[(\d+)\], line (\d+)")
MESSAGE_LINES = 6
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class Error:
    """What one run cell raised: the exception, and where in the notebook's own cells."""

    name: str
    message: str  # up to MESSAGE_LINES lines
    frames: list[tuple[int, int]]  # (run cell, line) of each frame in the notebook's cells, outermost first


def read_notebook(path: Path) -> nbformat.NotebookNode:
    if not path.exists():
        raise UsageError(f"no such file: {path}")
    if path.is_dir():
        raise UsageError(f"{path} is a folder: give the notebook file inside it (PATH.ipynb)")
    try:
        return read_submission(path)
    except Rejected as exc:
        raise UsageError(str(exc)) from None


@dataclass
class Reference:
    """What a notebook is checked against: grading's test cells (course mode) or its own (student mode)."""

    kit: Kit  # the test cells that run, by grade_id
    exercises: list[str]  # in the notebook's order
    heading: str  # "chapter 4: Masks", or "Masks" when the chapter's number is unknown
    hand_in_as: str | None  # the file name grading expects; None when unknown
    restores: bool  # course mode: grading's original test cells replace the notebook's
    missing: dict[str, str]  # grade_id -> exercise of each test cell the notebook lacks


def tests_of(chapter: Chapter | None, nb: nbformat.NotebookNode) -> tuple[Kit, list[str]]:
    """The notebook's exercises and the visible part of their test cells (hidden checks stay with grading).
    Of duplicated test cells the first counts, as :func:`grader.plan.plan` runs it in the first's place."""
    tests: dict[str, TestCell] = {}
    found = exercises(nb)
    for ex in found:
        for cell in ex.tests:
            tests.setdefault(nbgrader_meta(cell)["grade_id"], TestCell.of(cell, ex.name))
    names = list(dict.fromkeys(ex.name for ex in found))
    return Kit(chapter, tests, set(names)), names  # chapter: None in student mode (nothing here reads it)


def course_reference(course: Course, nb: nbformat.NotebookNode, path: Path) -> Reference:
    """The chapter whose graded cells the notebook shares most: its source notebook's visible tests."""
    ids = grade_ids(nb)
    best, best_shared = None, 0
    for ch in course.chapters():
        source = nbformat.read(ch.notebook, as_version=4)
        shared = len(ids & grade_ids(source))
        if shared > best_shared:
            best, best_shared = (ch, source), shared
    if best is None:
        raise UsageError(f"{path.name} has none of the course's exercise or test cells "
                         "(was it made from a released notebook?)")
    chapter, source = best
    kit, names = tests_of(chapter, source)
    kit.given = given_cells(source)  # as grading runs them: the course's given cells, not the notebook's copies
    present = grade_ids(nb)
    return Reference(kit, names, f"chapter {chapter.number}: {title(source, chapter.slug)}",
                     chapter.notebook.name, restores=True,
                     missing={g: t.exercise for g, t in kit.tests.items() if g not in present})


def chapter_number(path: Path) -> int | None:
    """The chapter's number, when the released notebook's folder (``ch04_masks/``) or name tells it."""
    for name in (path.resolve().parent.name, path.stem):
        m = CHAPTER_DIR.match(name)
        if m:
            return int(m.group(1))
    return None


def own_reference(nb: nbformat.NotebookNode, path: Path) -> Reference:
    """Student mode: the notebook's own exercises and test cells, from the nbgrader metadata that the
    released notebook carries. A test cell is named ``test_<exercise>``; one the notebook lacks cannot run."""
    try:
        kit, names = tests_of(None, nb)
    except (KeyError, TypeError, ValueError, AttributeError):  # grading reads the source's, never these
        raise UsageError(f"{path.name} has damaged nbgrader metadata on its exercise or test cells "
                         "(start again from the released notebook, keeping your code)") from None
    if not names:
        raise UsageError(f"{path.name} has no exercise cells (no nbgrader metadata on its cells: "
                         "was it made from a released notebook?)")
    tested = {t.exercise for t in kit.tests.values()}
    number = chapter_number(path)
    name = title(nb, path.stem)
    return Reference(kit, names, f"chapter {number}: {name}" if number is not None else name,
                     hand_in_as=None, restores=False,
                     missing={f"test_{name}": name for name in names if name not in tested})


def notebook_warnings(nb: nbformat.NotebookNode, ref: Reference, path: Path) -> list[str]:
    found = []
    if ref.hand_in_as and path.name != ref.hand_in_as:
        found.append(f"the notebook is named {path.name}: hand it in as {ref.hand_in_as}")
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        grade_id = meta.get("grade_id")
        if grade_id not in ref.kit.tests:
            continue
        try:
            edited = "checksum" in meta and checksum(cell) != meta["checksum"]
        except Exception:  # metadata too damaged to checksum: certainly not as released
            edited = True
        if edited and ref.restores:
            found.append(f"{grade_id} was edited: grading restores the original, so your edits don't count "
                         "(the original ran here)")
        elif edited:
            found.append(f"{grade_id} was edited: grading restores the original, so this check ran your "
                         "edited version; undo your edits")
    for grade_id in ref.missing:
        found.append(f"{grade_id} was deleted: grading puts the original back (it ran here too)" if ref.restores
                     else f"{grade_id} is missing: grading puts the original back; this check could not run it")
    return found


def run_cells(sources: list[str], folder: Path, timeout: int) -> list[Error | None | str]:
    """Run the cells in one fresh kernel; for each: ``None`` (fine), its :class:`Error`, or why it never ran."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    replies: dict[int, dict] = {}
    started: list[int] = []
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
        error_on_timeout={"ename": TIMEOUT, "evalue": f"it ran longer than {timeout} s (--timeout)",
                          "traceback": []},
        record_timing=False, extra_arguments=QUIET_KERNEL, resources={"metadata": {"path": str(folder)}},
        on_cell_start=lambda cell, cell_index: started.append(cell_index),
        on_cell_error=lambda cell, cell_index, execute_reply: replies.__setitem__(cell_index, execute_reply["content"]))
    died = None
    try:
        client.execute()
    except DeadKernelError:
        died = started[-1] if started else 0
    except Exception as exc:  # the kernel could not start, or nbclient gave up
        raise GraderError(f"could not run the notebook: {type(exc).__name__}: {exc}") from None
    counts = {cell.get("execution_count"): i for i, cell in enumerate(nb.cells)}
    results: list[Error | None | str] = []
    for i in range(len(sources)):
        if died is not None and i >= died:
            results.append(Error(DIED, "the kernel died while running it (a crash, or out of memory)", [])
                           if i == died else "never ran: the kernel died before it")
        elif i in replies:
            reply = replies[i]
            tb = ANSI.sub("", "\n".join(reply.get("traceback", [])))
            frames = [(counts.get(int(n), -1), int(line)) for n, line in FRAME.findall(tb)]
            message = [ln[:200] for ln in str(reply.get("evalue", "")).strip().splitlines()[:MESSAGE_LINES]]
            results.append(Error(reply.get("ename", "Error"), "\n".join(message), frames))
        else:
            results.append(None)
    return results


@dataclass
class Cell:
    """One run cell: what it is to the student, and the exercise it belongs to (if any)."""

    label: str  # "the setup cell", "your cell for softmax", "test_softmax", "the cell that starts `...`"
    exercise: str | None


def roles(the_plan: Plan, nb: nbformat.NotebookNode, kit: Kit) -> list[Cell]:
    cells, seen_exercise = [], False
    for planned, origin in zip(the_plan.cells, the_plan.origin):
        if planned["kind"] == "test":
            cells.append(Cell(planned["grade_id"], kit.tests[planned["grade_id"]].exercise))
            continue
        grade_id = nbgrader_meta(nb.cells[origin]).get("grade_id") if origin is not None else None
        if grade_id in kit.solution_ids:
            seen_exercise = True
            cells.append(Cell(f"your cell for {grade_id}", grade_id))
        else:
            first = next((ln.strip() for ln in planned["source"].splitlines() if ln.strip()), "")
            cells.append(Cell(SETUP, None) if not seen_exercise else
                         Cell(f"the cell that starts `{first[:40]}`", None))
    return cells


def _line(source: str, number: int) -> str:
    lines = source.splitlines()
    return lines[number - 1].strip() if 0 < number <= len(lines) else ""


def explain(error: Error | str, me: int, cells: list[Cell], sources: list[str]) -> list[str]:
    """What went wrong in run cell ``me``, in a student's words."""
    where = cells[me].label
    if isinstance(error, str) or error.name in (TIMEOUT, DIED):
        return [f"{where}: {error if isinstance(error, str) else error.message}"]
    first, *more = (error.message or "(no message)").splitlines()
    what = f"{error.name}: {first}"
    if not where.startswith("test_"):
        lines = [f"{where} raised {what}", *more]
    elif error.name == "AssertionError":
        lines = [what, *more]
    else:
        lines = [f"{what}, raised while running {where}", *more]
    frames = [(index, line) for index, line in error.frames if 0 <= index < len(sources)]
    # the failing line of this cell, then the line that raised in another cell (the student's function)
    shown = frames[:1] + [frames[-1]] if frames and frames[-1][0] != frames[0][0] else frames[:1]
    for index, line in shown:
        if _line(sources[index], line):
            lines.append(f"in {cells[index].label}: {_line(sources[index], line)}")
    return lines


def verdict(name: str, cells: list[Cell], results: list, sources: list[str]) -> tuple[str, list[str]]:
    mine = [i for i, c in enumerate(cells) if c.exercise == name or c.label == SETUP]
    failure = next((i for i in mine if results[i] is not None), None)
    if failure is None:
        return "passed", []
    error = results[failure]
    if isinstance(error, Error) and error.name == "NotImplementedError":
        culprit = error.frames[-1][0] if error.frames else failure
        other = cells[culprit].exercise if 0 <= culprit < len(cells) else None
        return "not yet implemented", ([f"(raised in {cells[culprit].label}, which {cells[failure].label} uses)"]
                                       if other not in (None, name) else [])
    return "failed", explain(error, failure, cells, sources)


def validate(course: Course | None, path: Path, *, timeout: int = 60, out=print) -> int:
    """Check the notebook at ``path``: against the course's test cells, or (``course=None``, student mode)
    against its own. 0: every exercise passes its visible tests; 1: not all do."""
    nb = read_notebook(path)
    ref = course_reference(course, nb, path) if course is not None else own_reference(nb, path)
    kit = ref.kit
    out(f"{path.name} — {ref.heading}")
    warnings = notebook_warnings(nb, ref, path)

    demo = sum(is_demo(c) for c in nb.cells)
    out(f"Running it as grading does: a fresh kernel in {path.resolve().parent}, {demo} cell(s) tagged demo "
        "skipped (grading skips them too) ...")
    if not ref.restores:
        out(STUDENT_MODE)
    the_plan = plan(kit, nb)
    sources = [planned["source"] for planned in the_plan.cells]
    results = run_cells(sources, path.resolve().parent, timeout)
    cells = roles(the_plan, nb, kit)

    rows = []
    untested = set() if ref.restores else set(ref.missing.values())
    for name in ref.exercises:
        points = sum(t.points for t in kit.tests.values() if t.exercise == name)
        result, detail = verdict(name, cells, results, sources)
        if name in untested:  # whatever its own cell did, no test of it ran
            result, points, detail = TEST_MISSING, None, detail if result == "failed" else []
        rows.append((name, points, result, detail))
    others = [(cell, result) for cell, result in zip(cells, results)  # the book's examples between exercises
              if cell.exercise is None and cell.label != SETUP and isinstance(result, Error)
              and result.name != "NotImplementedError"]  # a stub's error is no news
    if others:
        cell, result = others[0]
        warnings.append(f"{len(others)} of the book's example cells raised an error (they use your functions; "
                        f"grading does not score them); the first is {cell.label}: {result.name}: "
                        f"{result.message.splitlines()[0] if result.message else ''}")

    width = max(len("exercise"), *(len(r[0]) for r in rows))
    out("")
    out(f"  {'exercise':<{width}}  points  result")
    for name, points, result, detail in rows:
        out(f"  {name:<{width}}  {'?' if points is None else format(points, 'g'):>6}  {result}")
        for line in detail:
            out(f"  {'':<{width}}          {line}")
    out("")
    for warning in warnings:
        out(f"warning: {warning}")
    passed = sum(r[2] == "passed" for r in rows)
    out(f"{passed} of {len(rows)} exercises pass their visible tests")
    out(VISIBLE_ONLY)
    return 0 if passed == len(rows) else 1
