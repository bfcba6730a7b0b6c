"""Build the HTML site from a staged book with Jupyter Book 1 (execution off, strict)."""

from __future__ import annotations

import shutil
from pathlib import Path

from .course import Course, GraderError


class BuildFailed(GraderError):
    pass


def build_site(course: Course, staged: Path, out_html: Path, *, strict: bool = True,
               fresh: bool = False) -> Path:
    from jupyter_book.sphinx import build_sphinx

    if fresh and out_html.exists():
        shutil.rmtree(out_html)
    result = build_sphinx(
        str(staged),
        str(out_html),
        noconfig=True,
        path_config=str(course.root / "_config.yml"),
        confoverrides={"external_toc_path": str(staged / "_toc.yml"), "latex_individualpages": False},
        builder="html",
        warningiserror=strict,
        keep_going=True,
        freshenv=fresh,
        quiet=True,
    )
    if result != 0:
        raise BuildFailed(f"jupyter-book build of {staged} failed ({result}); see the warnings above")
    return out_html
