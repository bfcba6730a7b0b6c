"""Release: the student notebooks of the chosen chapters, made by ``nbgrader generate_assignment``."""

from __future__ import annotations

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
    return made
