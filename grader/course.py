"""Where things are: the course layout every step shares.

The book's chapters are the folders ``book/chNN_<slug>/`` that hold ``<slug>.ipynb``; each one is an
nbgrader assignment whose id is the folder name (``ch02_qkv``) and whose notebook id is the slug
(``qkv``). Everything generated lives under ``_build/``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

CHAPTER_DIR = re.compile(r"^ch(\d\d)_([a-z0-9_]+)$")


class GraderError(Exception):
    """A failure the user can act on: reported as its message, without a traceback."""


class UsageError(GraderError):
    """A user mistake (unknown chapter, missing folder): reported as one clear line."""


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    folder: Path  # book/chNN_<slug>

    @property
    def id(self) -> str:
        """The nbgrader assignment id, e.g. ``ch02_qkv``."""
        return self.folder.name

    @property
    def notebook(self) -> Path:
        """The source notebook, ``book/chNN_<slug>/<slug>.ipynb``."""
        return self.folder / f"{self.slug}.ipynb"

    @property
    def solutions_module(self) -> str:
        return f"solutions.{self.slug}"


def source_files(path: Path) -> list[Path]:
    """``path`` itself, or the files under it in a stable order, without Python's and Jupyter's caches: what a
    content key (the book's execution cache, the release's record) is computed over."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [f for f in files if "__pycache__" not in f.parts and ".ipynb_checkpoints" not in f.parts]


def find_root(start: Path | None = None) -> Path:
    """The course root: the nearest folder above ``start`` holding ``nbgrader_config.py`` and ``book/``."""
    env = os.environ.get("COURSE_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "nbgrader_config.py").is_file() and (folder / "book").is_dir():
            return folder
    raise UsageError("not inside the course repository (no nbgrader_config.py and book/ found); "
                     "run from the repository root or set COURSE_ROOT")


@dataclass(frozen=True)
class Workspace:
    """A grading workspace: one gradebook and the nbgrader folders that go with it.

    The default is ``_build/`` with ``_build/gradebook.db`` (what plain ``nbgrader`` uses too); a demo or a
    test grades in a folder of its own so that its students never mix with the class's.
    """

    folder: Path
    db_url: str

    def path(self, step: str, student: str = "", chapter: str = "") -> Path:
        return self.folder.joinpath(step, student, chapter)

    def nbgrader_args(self) -> list[str]:
        return [f"--CourseDirectory.{step}_directory={self.folder / step}"
                for step in ("submitted", "autograded", "feedback")] + [f"--CourseDirectory.db_url={self.db_url}"]


@dataclass(frozen=True)
class Course:
    root: Path

    @classmethod
    def here(cls) -> Course:
        return cls(find_root())

    @property
    def book(self) -> Path:
        return self.root / "book"

    @property
    def build(self) -> Path:
        return self.root / "_build"

    @property
    def hardware(self) -> Path:
        """The cited hardware table (peak FLOP/s, HBM, SMs, shared memory, L2) that every chapter quoting a
        hardware figure reads; the student release carries a copy beside the chapter folders."""
        return self.book / "hardware.csv"

    def workspace(self, workdir: str | Path | None = None, db_url: str | None = None) -> Workspace:
        """Where a grading run keeps nbgrader's submitted/autograded/feedback folders and its gradebook."""
        folder = Path(workdir).resolve() if workdir else self.build
        return Workspace(folder, db_url or f"sqlite:///{folder / 'gradebook.db'}?timeout=60")

    def chapters(self) -> list[Chapter]:
        """All chapters, in order."""
        found = []
        for folder in sorted(self.book.iterdir()):
            m = CHAPTER_DIR.match(folder.name)
            if m and (folder / f"{m.group(2)}.ipynb").is_file():
                found.append(Chapter(int(m.group(1)), m.group(2), folder))
        return found

    def chapter(self, name: str) -> Chapter:
        """Find a chapter by id (``ch02_qkv``), slug (``qkv``) or number (``2``)."""
        chapters = self.chapters()
        for ch in chapters:
            if name in (ch.id, ch.slug) or (name.isdigit() and int(name) == ch.number):
                return ch
        known = ", ".join(ch.id for ch in chapters) or "none"
        raise UsageError(f"unknown chapter {name!r}; known chapters: {known}")

    def select(self, names: list[str] | None) -> list[Chapter]:
        return [self.chapter(n) for n in names] if names else self.chapters()
