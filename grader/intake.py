"""Intake: turn whatever a student handed in into one well-formed notebook, or a clear reason why not.

A submission folder is ``<student>/<chapter>/``. The notebook should be ``<slug>.ipynb``; a single
notebook under another name is accepted (and noted). The file must be UTF-8 JSON that nbformat reads,
and it must be this chapter's notebook: at least one of its graded cells must carry one of the
chapter's grade ids (a notebook of another chapter is named as such).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .course import Chapter, Course

MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024


class Rejected(Exception):
    """The submission cannot be graded; the message is the reason recorded for it."""


@dataclass
class Accepted:
    notebook: nbformat.NotebookNode
    notes: list[str] = field(default_factory=list)


def grade_ids(nb: nbformat.NotebookNode) -> set[str]:
    ids = set()
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str):
            ids.add(meta["grade_id"])
    return ids


def _find_notebook(folder: Path, chapter: Chapter) -> tuple[Path, list[str]]:
    if not folder.is_dir():
        raise Rejected(f"no folder {folder.name}/ in the submission")
    expected = folder / chapter.notebook.name
    if expected.is_file():
        return expected, []
    found = sorted(p for p in folder.glob("*.ipynb") if p.is_file())
    if len(found) == 1:
        return found[0], [f"notebook was named {found[0].name}, graded as {expected.name}"]
    if not found:
        raise Rejected(f"no notebook in the submission (expected {expected.name})")
    names = ", ".join(p.name for p in found)
    raise Rejected(f"{len(found)} notebooks ({names}) and none named {expected.name}")


def read_submission(path: Path) -> nbformat.NotebookNode:
    """The notebook in ``path``, or :class:`Rejected` saying why not (too large, not UTF-8, not JSON, not a
    valid notebook). Grading and ``grader validate`` read a student's file through it."""
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise Rejected(f"{path.name} is {size / 2**20:.0f} MiB, over the {MAX_NOTEBOOK_BYTES // 2**20} MiB limit")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(f"{path.name} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Rejected(f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Rejected(f"{path.name} is JSON but not a notebook (no list of cells)")
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises several types for malformed notebooks
        raise Rejected(f"{path.name} is not a valid notebook: {str(exc).splitlines()[0][:200]}") from None
    return nb


def accept(course: Course, chapter: Chapter, folder: Path, source_ids: dict[str, set[str]]) -> Accepted:
    """Check one submission folder; ``source_ids`` maps chapter ids to their source grade ids."""
    path, notes = _find_notebook(folder, chapter)
    nb = read_submission(path)
    ids = grade_ids(nb)
    if not ids & source_ids[chapter.id]:
        other = [cid for cid, cids in source_ids.items() if cid != chapter.id and ids & cids]
        if other:
            raise Rejected(f"{path.name} is the notebook of {other[0]}, not {chapter.id}")
        raise Rejected(f"{path.name} has none of {chapter.id}'s graded cells "
                       "(was it made from the released notebook?)")
    return Accepted(nb, notes)
