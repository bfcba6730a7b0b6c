"""Release: the student notebooks of the chosen chapters, made by ``nbgrader generate_assignment``."""

from __future__ import annotations

import shutil
from pathlib import Path

from .course import Chapter, Course, GraderError, Workspace
from .nbgrader_run import nbgrader


class ReleaseFailed(GraderError):
    pass


def release(course: Course, chapters: list[Chapter], *, workspace: Workspace | None = None,
            log=print) -> list[Path]:
    """Write ``_build/release/<chapter>/`` and record the chapters' cells in the workspace's gradebook."""
    course.build.mkdir(exist_ok=True)
    made = []
    for ch in chapters:
        result = nbgrader(course, ["generate_assignment", ch.id, "--force"], workspace=workspace,
                          log_file=course.build / "logs" / f"release-{ch.id}.log")
        if not result.ok:
            raise ReleaseFailed(f"nbgrader generate_assignment {ch.id} failed: {result.last_error()}")
        out = course.build / "release" / ch.id / ch.notebook.name
        made.append(out)
        log(f"  {ch.id}: {out.relative_to(course.root)}")
    write_student_repo_files(course)
    return made


STUDENT_REQUIREMENTS = """\
# The libraries the course's notebooks use (Binder reads this file). PyTorch's CPU wheels are enough:
# every exercise and demo runs on a CPU. Colab already has all of them.
--extra-index-url https://download.pytorch.org/whl/cpu
torch>=2.3
numpy
matplotlib
seaborn
jupyterlab
# `python -m grader validate` (the grader/ folder): runs a notebook as grading does
nbgrader
nbclient
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
    copy_grader(out / "grader")


def copy_grader(dest: Path) -> None:
    """The ``grader`` package's modules (``*.py`` only, no caches), for ``python -m grader validate``. It
    holds no solution and no hidden test: those live in ``book/`` and ``solutions/``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for module in sorted(Path(__file__).parent.glob("*.py")):
        shutil.copyfile(module, dest / module.name)


def release_if_stale(course: Course, chapters: list[Chapter], log=print) -> None:
    """Release the chapters whose student notebook is missing or older than their source folder."""
    stale = []
    for ch in chapters:
        released = course.build / "release" / ch.id / ch.notebook.name
        newest = max(p.stat().st_mtime for p in ch.folder.rglob("*") if p.is_file())
        if not released.is_file() or released.stat().st_mtime < newest:
            stale.append(ch)
    if stale:
        log(f"Releasing {len(stale)} chapter(s) whose student notebook is missing or out of date")
        release(course, stale, log=log)
