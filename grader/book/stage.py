"""Stage the book: execute each chapter's source notebook (cached), take the student view, and lay the
book's pages out in a folder that ``jupyter-book`` builds with execution off.

An executed notebook is cached under ``_build/cache/`` keyed on everything that can change its outputs:
the chapter folder, its solutions module and case generators, the check API and the versions of the
libraries that draw the figures. Changing one chapter re-executes that chapter only.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import time
from importlib import metadata
from pathlib import Path

import nbformat

from ..cells import is_claim
from ..course import Chapter, Course
from ..execute import execute
from .deps import DEPENDENCIES, dependency_map
from .view import student_view

_VERSIONED = ("torch", "numpy", "matplotlib", "seaborn", "nbclient", "ipykernel")


def _hash_tree(h: hashlib._Hash, path: Path, root: Path) -> None:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        if "__pycache__" in f.parts or ".ipynb_checkpoints" in f.parts:
            continue
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())


def solution_modules(course: Course, slug: str) -> list[Path]:
    """``solutions/<slug>.py``, its case generators ``solutions/cases/<slug>.py``, and every ``solutions``
    module they import, directly or not (chapter 5's reference builds on chapter 2's; several use
    ``solutions/_common.py``, judges ``solutions/cases/_common.py``)."""
    found: list[Path] = []
    todo = [course.root / "solutions" / f"{slug}.py", course.root / "solutions" / "cases" / f"{slug}.py"]
    while todo:
        path = todo.pop()
        if path in found or not path.is_file():
            continue
        found.append(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            todo += [course.root.joinpath(*n.split(".")).with_suffix(".py") for n in names
                     if n.startswith("solutions.")]
    return found


def _versions_hash() -> hashlib._Hash:
    h = hashlib.sha256()
    h.update(sys.version.encode())
    for dist in _VERSIONED:
        try:
            h.update(f"{dist}=={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist} missing".encode())
    return h


def cache_key(course: Course, chapter: Chapter) -> str:
    h = _versions_hash()
    _hash_tree(h, chapter.folder, course.root)
    for extra in (course.root / "solutions" / "__init__.py",
                  *solution_modules(course, chapter.slug),
                  course.root / "grader" / "checks.py", course.hardware):
        if extra.exists():
            _hash_tree(h, extra, course.root)
    return h.hexdigest()[:20]


def _cached_execution(course: Course, name: str, key: str, notebook: Path, log) -> nbformat.NotebookNode:
    cache = course.build / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    hit = cache / f"{name}-{key}.ipynb"
    if hit.exists():
        log(f"  {name}: executed notebook from cache")
        return nbformat.read(hit, as_version=4)
    start = time.perf_counter()
    nb = execute(nbformat.read(notebook, as_version=4), notebook.parent,
                 label=str(notebook.relative_to(course.root)))
    log(f"  {name}: executed in {time.perf_counter() - start:.1f} s")
    for stale in cache.glob(f"{name}-*.ipynb"):
        stale.unlink()
    nbformat.write(nb, hit)
    return nb


def executed_source(course: Course, chapter: Chapter, log=print) -> nbformat.NotebookNode:
    """The chapter's source notebook executed with the solutions in place (from cache when fresh)."""
    return _cached_execution(course, chapter.id, cache_key(course, chapter), chapter.notebook, log)


def executed_page(course: Course, notebook: Path, log=print) -> nbformat.NotebookNode:
    """A notebook of the book that is not a chapter (the appendix): it has no solutions to strip and
    imports nothing of the course, so its key is the file, the hardware table and the library versions."""
    h = _versions_hash()
    _hash_tree(h, notebook, course.root)
    if course.hardware.exists():
        _hash_tree(h, course.hardware, course.root)
    name = "page-" + str(notebook.relative_to(course.book).with_suffix("")).replace("/", "-")
    return _cached_execution(course, name, h.hexdigest()[:20], notebook, log)


def hide_claims(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Claim cells ran (a failing claim stops the build, naming it) and glued their numbers; readers see
    neither their code nor their output (Jupyter Book's ``remove-cell``)."""
    for cell in nb.cells:
        if is_claim(cell) and "remove-cell" not in cell.metadata.setdefault("tags", []):
            cell.metadata["tags"].append("remove-cell")
    return nb


def _write_if_changed(path: Path, data: bytes) -> None:
    # Sphinx rebuilds pages whose files are newer, so unchanged pages keep their mtime.
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def stage(course: Course, chapters: list[Chapter], out: Path, *, instructor: bool = False,
          log=print) -> Path:
    """Lay out the book under ``out``: the pages of ``book/`` plus each chapter's processed notebook."""
    wanted: set[Path] = set()
    notebooks = {ch.notebook for ch in course.chapters()}
    for src in sorted(course.book.rglob("*")):
        rel = src.relative_to(course.book)
        if not src.is_file() or src in notebooks or "__pycache__" in rel.parts \
                or ".ipynb_checkpoints" in rel.parts or rel.name == DEPENDENCIES:
            continue
        if src.suffix == ".ipynb":
            data = nbformat.writes(hide_claims(executed_page(course, src, log))).encode()
        else:
            data = src.read_bytes()
        _write_if_changed(out / rel, data)
        wanted.add(out / rel)
    for path, data in dependency_map(course).items():
        _write_if_changed(out / path, data)
        wanted.add(out / path)
    for ch in chapters:
        nb = hide_claims(executed_source(course, ch, log))
        if not instructor:
            nb = student_view(nb, label=str(ch.notebook.relative_to(course.root)))
        dest = out / ch.notebook.relative_to(course.book)
        _write_if_changed(dest, nbformat.writes(nb).encode())
        wanted.add(dest)
    for path in sorted(out.rglob("*"), reverse=True):  # files removed from book/ leave the stage too
        if path.is_file() and path not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return out
