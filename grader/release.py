"""Release: the student notebooks of the chosen chapters, made by ``nbgrader generate_assignment``."""

from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

from .cells import is_claim
from .course import Chapter, Course, GraderError, Workspace, source_files
from .nbgrader_run import nbgrader


class ReleaseFailed(GraderError):
    pass


class RemoveClaimCells(NbGraderPreprocessor):
    """``nbgrader generate_assignment`` step (``nbgrader_config.py``): the book's claim cells check the
    reference's demos and glue numbers into the prose; a student's notebook has no use for them. (An
    nbgrader preprocessor, which is enabled by default: a plain nbconvert one is skipped unless enabled.)"""

    def preprocess(self, nb, resources):
        nb.cells = [cell for cell in nb.cells if not is_claim(cell)]
        return nb, resources


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        for f in source_files(path):
            h.update(str(f.relative_to(path.parent)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _release_record(course: Course, chapter: Chapter, db_url: str) -> Path:
    """Where the release of ``chapter`` into the gradebook ``db_url`` is recorded: one record per gradebook,
    so that grading into another one (a test's, a shard's) does not make this one's look stale."""
    return course.build / "cache" / "release" / hashlib.sha256(db_url.encode()).hexdigest()[:16] / f"{chapter.id}.json"


def _release_key(course: Course, chapter: Chapter, db_url: str) -> str:
    """What a chapter's release is made from: its source folder, the release's configuration and code, the
    nbgrader version and the gradebook it is recorded in."""
    from importlib import metadata

    here = Path(__file__).parent
    return _digest(chapter.folder, course.root / "nbgrader_config.py", here / "release.py", here / "cells.py") + \
        f"|nbgrader {metadata.version('nbgrader')}|{db_url}"


def _in_gradebook(db_url: str, chapter: Chapter) -> bool:
    if db_url.startswith("sqlite:///"):
        db = Path(db_url.removeprefix("sqlite:///").split("?", 1)[0])
        if not db.is_file():
            return False
    from nbgrader.api import Gradebook, MissingEntry

    try:
        with Gradebook(db_url) as gb:
            gb.find_assignment(chapter.id)
        return True
    except MissingEntry:
        return False


def is_released(course: Course, chapter: Chapter, workspace: Workspace | None = None) -> bool:
    """Whether the chapter's student notebook is the one its current source makes and its gradebook knows
    its cells: the record written by the last release matches (key, the released notebook's bytes) and the
    assignment is in the gradebook."""
    db_url = (workspace or course.workspace()).db_url
    released = course.build / "release" / chapter.id / chapter.notebook.name
    try:
        record = json.loads(_release_record(course, chapter, db_url).read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(record, dict) and record.get("key") == _release_key(course, chapter, db_url)
            and released.is_file() and record.get("released") == _digest(released)
            and _in_gradebook(db_url, chapter))


@contextlib.contextmanager
def _releasing(course: Course):
    """One release at a time in a course's build (an exclusive lock on a file beside the release records):
    whether a chapter is released is asked, and the chapter released and recorded, by one process at a time
    (two graders starting together would otherwise both make it, and write its record in turn).
    """
    lock = course.build / "cache" / "release.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def release(course: Course, chapters: list[Chapter], *, workspace: Workspace | None = None,
            log=print, force: bool = False) -> list[Path]:
    """Write ``_build/release/<chapter>/`` and record the chapters' cells in the workspace's gradebook, one
    release at a time per build (:func:`_releasing`; whether a chapter is already released is asked under it).
    """
    course.build.mkdir(exist_ok=True)
    with _releasing(course):
        return _release(course, chapters, workspace=workspace, log=log, force=force)


def _release(course: Course, chapters: list[Chapter], *, workspace: Workspace | None,
             log, force: bool) -> list[Path]:
    """:func:`release`, under the build's lock.

    A chapter already released from the same source into the same gradebook (:func:`is_released`) is left as
    it is, unless ``force``. When that leaves every chapter of the course, one ``nbgrader generate_assignment *``
    does them all (most of a process's time is its start). Otherwise one per chapter, as many at once as there
    are cores: the first alone, since it may create or migrate the
    gradebook, the others side by side (each writes its own assignment's rows; SQLite waits for the other's
    writes, see ``nbgrader_config.py``)."""
    from .execute import parallel_kernels

    db_url = (workspace or course.workspace()).db_url
    done = [] if force else [ch for ch in chapters if is_released(course, ch, workspace)]
    if done:
        log(f"  {len(done)} chapter(s) already released from their current source: "
            f"{', '.join(ch.id for ch in done)}")

    todo = [ch for ch in chapters if ch not in done]
    # nbgrader writes into a folder of this release's own, and each file then replaces its published copy
    # by a rename: a reader of _build/release (the book's download, a test, another grader) never finds
    # a chapter's folder emptied, as it would while nbgrader's --force deletes and rewrites it in place
    staging = Path(tempfile.mkdtemp(prefix="release-", dir=course.build / "cache")) if todo else None

    def generate(assignment: str) -> None:
        name = "all" if assignment == "*" else assignment
        result = nbgrader(course, ["generate_assignment", assignment, "--force",
                                   f"--CourseDirectory.release_directory={staging}"], workspace=workspace,
                          log_file=course.build / "logs" / f"release-{name}.log")
        if not result.ok:
            raise ReleaseFailed(f"nbgrader generate_assignment {assignment} failed: {result.last_error()}")

    def recorded(ch: Chapter) -> Path:
        made, published = staging / ch.id, course.build / "release" / ch.id
        new = {f.relative_to(made) for f in made.rglob("*") if f.is_file()}
        for rel in sorted(new):
            (published / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(made / rel, published / rel)
        for old in (f for f in published.rglob("*") if f.is_file() and f.relative_to(published) not in new):
            old.unlink()
        out = published / ch.notebook.name
        record = _release_record(course, ch, db_url)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"key": _release_key(course, ch, db_url), "released": _digest(out)}))
        return out

    def one(ch: Chapter) -> Path:
        generate(ch.id)
        return recorded(ch)

    try:
        if len(todo) > 1 and {ch.id for ch in todo} == {ch.id for ch in course.chapters()}:
            generate("*")  # every chapter: one process (a fresh gradebook, a changed course), 11 chapters in ~5 s
            made = [recorded(ch) for ch in todo]
        else:
            made = [one(ch) for ch in todo[:1]]
            if todo[1:]:
                with ThreadPoolExecutor(parallel_kernels()) as pool:  # threads that wait on nbgrader's processes
                    made += list(pool.map(one, todo[1:]))
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    for out in made:
        log(f"  {out.parent.name}: {out.relative_to(course.root)}")
    write_student_repo_files(course)
    return [course.build / "release" / ch.id / ch.notebook.name for ch in chapters]


STUDENT_REQUIREMENTS = """\
# The libraries the course's notebooks use (Binder reads this file). PyTorch's CPU wheels are enough:
# every exercise and demo runs on a CPU. Colab already has all of them.
--extra-index-url https://download.pytorch.org/whl/cpu
torch>=2.3
numpy
matplotlib
seaborn
jupyterlab
# `python -m grader validate` (the grader/ folder, the student kit): runs a notebook as grading does
nbclient
nbformat
"""

STUDENT_README = """\
# Self-Attention, from the RNN bottleneck to FlashAttention: student notebooks

One folder per chapter, each with the chapter's notebook. In each notebook, replace every
`raise NotImplementedError()` with your implementation and run the test cell below it. Hand the
notebook in under its original name. The book, with the explanations, is published by your instructor.

Install what the notebooks need with `pip install -r requirements.txt`.

Check your notebook before handing it in: `python -m grader validate ch04_masks/masks.ipynb`, run in
this folder, runs it as grading does (a fresh kernel, the cells tagged `demo` skipped) and prints, per
exercise, `passed`, `not yet implemented`, `failed` with the error and the failing line, or `test missing`,
and warns about edited or deleted test cells. Passing it means the visible tests pass, not the hidden ones.
"""


def write_student_repo_files(course: Course) -> None:
    """``_build/release/`` doubles as the public student repository that the launch buttons open."""
    out = course.build / "release"
    out.mkdir(parents=True, exist_ok=True)
    (out / "requirements.txt").write_text(STUDENT_REQUIREMENTS)
    (out / "README.md").write_text(STUDENT_README)
    shutil.copyfile(course.hardware, out / course.hardware.name)  # the demos read ../hardware.csv
    copy_grader(out / "grader")


# The student kit: what ``python -m grader validate`` imports, and nothing else (no sandbox, no nbgrader, no
# torch in the validating process; the notebook's own kernel imports what the notebook needs).
KIT_ROOTS = ("grader/__main__.py", "grader/student/validate.py")


def _module_imports(path: Path, package: Path) -> set[Path]:
    """The files of the ``grader`` package that the module at ``path`` imports at its top level (the packages
    those imports run are added by :func:`student_kit`)."""
    found: set[Path] = set()

    def add(base: Path, dotted: str) -> None:
        target = base.joinpath(*dotted.split(".")) if dotted else base
        found.update(c for c in (target.with_suffix(".py"), target / "__init__.py") if c.is_file())

    for node in ast.parse(path.read_text(), str(path)).body:  # module level: what importing the module runs
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parents[node.level - 1]
            elif (node.module or "").split(".")[0] == "grader":
                base = package.parent
            else:
                continue
            add(base, node.module or "")
            for alias in node.names:  # ``from . import wire`` imports a module
                add(base, f"{node.module}.{alias.name}" if node.module else alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "grader":
                    add(package.parent, alias.name)
    return found


def student_kit() -> list[Path]:
    """The kit's files, relative to the ``grader`` package's parent: the import closure of its roots."""
    package = Path(__file__).resolve().parent
    todo = [package.parent / root for root in KIT_ROOTS] + [package / "__init__.py"]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo.extend(_module_imports(path, package) - seen)
        if path.parent != package:  # importing a submodule runs its package's __init__ first
            todo.append(path.parent / "__init__.py")
    return sorted(p.relative_to(package.parent) for p in seen)


def copy_grader(dest: Path) -> None:
    """The student kit (:func:`student_kit`: ``*.py`` files only), for ``python -m grader validate``. It holds
    no solution and no hidden test: those live in ``book/`` and ``solutions/``."""
    shutil.rmtree(dest, ignore_errors=True)
    source = Path(__file__).resolve().parent.parent
    for rel in student_kit():
        target = dest.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, target)


def release_if_stale(course: Course, chapters: list[Chapter], log=print) -> None:
    """Release the chapters whose student notebook is missing or not made from their current source."""
    stale = [ch for ch in chapters if not is_released(course, ch)]
    if stale:
        log(f"Releasing {len(stale)} chapter(s) whose student notebook is missing or out of date")
        release(course, stale, log=log)
