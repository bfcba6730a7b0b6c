"""Intake: turn whatever a student handed in into one well-formed notebook, or a clear reason why not.

A submission folder is ``<student>/<chapter>/``. The notebook should be ``<slug>.ipynb``; a single
notebook under another name is accepted (and noted). The file must be UTF-8 JSON that nbformat reads,
and it must be this chapter's notebook: at least one of its graded cells must carry one of the
chapter's grade ids (a notebook of another chapter is named as such).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..cells import grade_ids
from ..course import Chapter, Course
from ..submission import Rejected, read_submission


@dataclass
class Accepted:
    notebook: nbformat.NotebookNode
    notes: list[str] = field(default_factory=list)


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
