"""Stage the book: execute each chapter's source notebook (cached), take the student view, and lay the
book's pages out in a folder that ``jupyter-book`` builds with execution off.

An executed notebook is cached under ``_build/cache/`` keyed on everything that can change its outputs:
the chapter folder, its solutions module and case generators, the check API and the versions of the
libraries that draw the figures. Changing one chapter re-executes that chapter only.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import sys
import time
from importlib import metadata
from pathlib import Path

import nbformat

from ..cells import is_claim
from ..course import Chapter, Course, source_files
from ..execute import FIGURE_KERNEL, execute_many, parallel_kernels
from .deps import DEPENDENCIES, dependency_map
from .view import student_view

_VERSIONED = ("torch", "numpy", "matplotlib", "seaborn", "nbclient", "ipykernel")


def executable_part(path: Path) -> bytes:
    """What of a notebook can change its outputs: its code cells (source and metadata, in order) and the
    notebook's metadata (the kernel). Its markdown cannot: a sentence edited re-executes nothing."""
    nb = nbformat.read(path, as_version=4)
    code = [{"source": c.source, "metadata": c.metadata} for c in nb.cells if c.cell_type == "code"]
    return json.dumps({"metadata": nb.metadata, "code": code}, sort_keys=True).encode()


def _hash_tree(h: hashlib._Hash, path: Path, root: Path) -> None:
    for f in source_files(path):
        h.update(str(f.relative_to(root)).encode())
        h.update(executable_part(f) if f.suffix == ".ipynb" else f.read_bytes())


def with_current_text(executed: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The source notebook with each code cell's outputs taken from ``executed``, an execution of a notebook
    with the same code cells (the cache key says so) and possibly older markdown. The notebook's metadata
    is the execution's (the kernel adds ``language_info``), so a fresh execution and a cached one stage the
    same bytes, and Sphinx re-reads nothing."""
    ran = iter([c for c in executed.cells if c.cell_type == "code"])
    nb = copy.deepcopy(source)
    nb.metadata = copy.deepcopy(executed.metadata)
    for cell in nb.cells:
        if cell.cell_type == "code":
            done = next(ran)
            cell.outputs, cell.execution_count = done.outputs, done.execution_count
    return nb


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
    h.update(repr(FIGURE_KERNEL).encode())  # how figures are saved (their resolution) is part of the output
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


def _cache(course: Course) -> Path:
    cache = course.build / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def _store(course: Course, name: str, key: str, nb: nbformat.NotebookNode) -> None:
    cache = _cache(course)
    for stale in cache.glob(f"{name}-*.ipynb"):
        stale.unlink()
    tmp = cache / f".{name}-{key}.tmp"
    nbformat.write(nb, tmp)
    tmp.replace(cache / f"{name}-{key}.ipynb")  # a build killed while writing leaves no half notebook


def _page_key(course: Course, notebook: Path) -> tuple[str, str]:
    """A notebook of the book that is not a chapter (the appendix): it has no solutions to strip and
    imports nothing of the course, so its key is the file, the hardware table and the library versions."""
    h = _versions_hash()
    _hash_tree(h, notebook, course.root)
    if course.hardware.exists():
        _hash_tree(h, course.hardware, course.root)
    name = "page-" + str(notebook.relative_to(course.book).with_suffix("")).replace("/", "-")
    return name, h.hexdigest()[:20]


def execute_stale(course: Course, notebooks: list[tuple[str, str, Path]],
                  log=print) -> dict[str, nbformat.NotebookNode]:
    """``(name, key, notebook)`` executed, or read from the cache when ``key`` is fresh: the stale ones run
    side by side, one kernel per core (:func:`grader.execute.execute_many`), and are cached as each ends."""
    cache = _cache(course)
    out: dict[str, nbformat.NotebookNode] = {}
    todo = []
    sources = {name: nbformat.read(notebook, as_version=4) for name, _, notebook in notebooks}
    for name, key, _ in notebooks:
        hit = cache / f"{name}-{key}.ipynb"
        if hit.exists():
            out[name] = with_current_text(nbformat.read(hit, as_version=4), sources[name])
        else:
            todo.append((name, key))
    if len(out):
        log(f"  {len(out)} notebook(s) unchanged: executed notebooks from the cache")
    if not todo:
        return out
    kernels = min(parallel_kernels(), len(todo))
    log(f"  executing {len(todo)} notebook(s), {kernels} at a time: {', '.join(n for n, _ in todo)}")
    began = time.perf_counter()
    folders = {name: notebook.parent for name, _, notebook in notebooks}
    labels = {name: str(notebook.relative_to(course.root)) for name, _, notebook in notebooks}

    def done(i: int, nb: nbformat.NotebookNode, seconds: float) -> None:
        name, key = todo[i]
        _store(course, name, key, nb)
        out[name] = with_current_text(nb, sources[name])
        log(f"  {name}: executed in {seconds:.1f} s ({len(out)}/{len(notebooks)}, "
            f"{time.perf_counter() - began:.0f} s so far)")

    execute_many([(sources[name], folders[name], labels[name]) for name, _ in todo], parallel=kernels, done=done)
    return out


def hide_claims(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Claim cells ran (a failing claim stops the build, naming it) and glued their numbers; readers see
    neither their code nor their output (Jupyter Book's ``remove-cell``)."""
    for cell in nb.cells:
        if is_claim(cell) and "remove-cell" not in cell.metadata.setdefault("tags", []):
            cell.metadata["tags"].append("remove-cell")
    return nb


REFERENCE_NOTE = """:::{admonition} Outputs from the reference solution
:class: reference-outputs
In your notebook the function above raises `NotImplementedError()` until you write it. The results shown
on this page below it (the test's output, the figures) come from the course's reference solution.
:::"""


def mark_exercises(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """For the published page only: each exercise's stub is followed by a note that the outputs below it
    come from the reference solution, and each graded test cell is tagged ``graded-test`` (the stylesheet
    marks it) with its code folded (``hide-input``: a reader opens it with a click)."""
    cells = []
    for cell in nb.cells:
        grading = cell.get("metadata", {}).get("nbgrader", {})
        cells.append(cell)
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.setdefault("tags", [])
        if grading.get("solution") and not grading.get("grade"):
            if "exercise" not in tags:
                tags.append("exercise")
            # an id derived from the stub's, not a random one: an unchanged chapter stages the same bytes,
            # and Sphinx re-reads nothing (a random id made it re-read every chapter in both languages)
            note = nbformat.v4.new_markdown_cell(REFERENCE_NOTE)
            note.id = f"{cell.get('id') or len(cells)}-ref"[:64]
            cells.append(note)
        elif grading.get("grade"):
            tags.extend(t for t in ("graded-test", "hide-input") if t not in tags)
    nb.cells = cells
    return nb


def _write_if_changed(path: Path, data: bytes) -> None:
    # Sphinx rebuilds pages whose files are newer, so unchanged pages keep their mtime.
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _is_page(course: Course, src: Path) -> bool:
    """Whether a file under ``book/`` is staged. book/_static/ is not a page: the site's build serves it
    (staged, Jupyter Book would add every script under every static folder to every page, MathJax's
    components included)."""
    rel = src.relative_to(course.book)
    return not ("__pycache__" in rel.parts or rel.parts[0] == "_static" or ".ipynb_checkpoints" in rel.parts
                or rel.name == DEPENDENCIES)


def stage(course: Course, chapters: list[Chapter], out: Path, *, instructor: bool = False,
          log=print) -> Path:
    """Lay out the book under ``out``: the pages of ``book/`` plus each chapter's processed notebook."""
    wanted: set[Path] = set()
    notebooks = {ch.notebook for ch in course.chapters()}
    pages = {src: _page_key(course, src) for src in sorted(course.book.rglob("*.ipynb"))
             if src not in notebooks and _is_page(course, src)}
    executed = execute_stale(course, [(ch.id, cache_key(course, ch), ch.notebook) for ch in chapters]
                             + [(*key, src) for src, key in pages.items()], log)
    for src in sorted(course.book.rglob("*")):
        rel = src.relative_to(course.book)
        if not src.is_file() or src in notebooks or not _is_page(course, src):
            continue
        if src.suffix == ".ipynb":
            data = nbformat.writes(hide_claims(executed[pages[src][0]])).encode()
        else:
            data = src.read_bytes()
        _write_if_changed(out / rel, data)
        wanted.add(out / rel)
    for path, data in dependency_map(course).items():
        _write_if_changed(out / path, data)
        wanted.add(out / path)
    for ch in chapters:
        nb = hide_claims(executed[ch.id])
        if not instructor:
            nb = mark_exercises(student_view(nb, label=str(ch.notebook.relative_to(course.root))))
        dest = out / ch.notebook.relative_to(course.book)
        _write_if_changed(dest, nbformat.writes(nb).encode())
        wanted.add(dest)
    for path in sorted(out.rglob("*"), reverse=True):  # files removed from book/ leave the stage too
        if path.is_file() and path not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return out
