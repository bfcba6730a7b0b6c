"""Intake: turn whatever a student handed in into one well-formed notebook, or a clear reason why not.

A submission folder is ``<student>/<chapter>/``. The notebook should be ``<slug>.ipynb``; a single
notebook under another name is accepted (and noted). The file must be UTF-8 JSON that nbformat reads,
and it must be this chapter's notebook: at least one of its graded cells must carry one of the
chapter's grade ids (a notebook of another chapter is named as such).

Everything below the submissions folder was written by students, and the grader runs as root: the tree
is read through directory descriptors, one component at a time, never following a symbolic link
(``O_NOFOLLOW``, ``O_DIRECTORY``), and only regular files are read (``fstat`` on the open descriptor,
size-bounded, opened non-blocking so that a FIFO cannot hang the run). A link where a folder or the
notebook should be is refused, never resolved. nbgrader metadata is type-checked before anything reads
it (:func:`clean_metadata`): malformed metadata is dropped from that cell and noted. Lone surrogates
(``"\\ud800"`` in the JSON) are replaced by U+FFFD and noted, so that the notebook can be written again.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..cells import grade_ids
from ..course import Chapter, Course
from ..submission import MAX_NOTEBOOK_BYTES, Rejected, parse_submission, scrub

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_STAMP_BYTES = 4096


@dataclass
class Accepted:
    notebook: nbformat.NotebookNode
    notes: list[str] = field(default_factory=list)
    timestamp: bytes | None = None  # timestamp.txt, when the submission has one (a regular file)


def open_beneath(root: Path, parts: list[str] | tuple[str, ...], *, create: bool = False) -> int:
    """A descriptor of ``root/parts...``: ``root`` is trusted, every part below it is opened without
    following links (created, mode 0755, when ``create``). Raises ``OSError`` (ELOOP, ENOTDIR...)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if not part or "/" in part or part in (".", ".."):
                raise OSError(f"bad path component {part[:40]!r}")
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def entries(dir_fd: int) -> dict[str, str]:
    """The names in an open folder and what each is: "dir", "file" (regular) or "other" (links too)."""
    found = {}
    with os.scandir(dir_fd) as it:
        for entry in it:
            if entry.is_symlink():
                kind = "other"
            elif entry.is_dir(follow_symlinks=False):
                kind = "dir"
            elif entry.is_file(follow_symlinks=False):
                kind = "file"
            else:
                kind = "other"
            found[entry.name] = kind
    return found


def read_regular(dir_fd: int, name: str, limit: int) -> bytes:
    """The bytes of the regular file ``name`` in ``dir_fd`` (no link followed), or :class:`Rejected`."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise Rejected(f"{name} cannot be read: it is a link or not a file ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Rejected(f"{name} is not a regular file")
        if st.st_size > limit:
            raise Rejected(f"{name} is {st.st_size / 2**20:.0f} MiB, over the {limit // 2**20} MiB limit")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise Rejected(f"{name} is over the {limit // 2**20} MiB limit")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _find_notebook(dir_fd: int, chapter: Chapter) -> tuple[str, list[str]]:
    expected = chapter.notebook.name
    names = entries(dir_fd)
    if expected in names:
        if names[expected] != "file":
            raise Rejected(f"{expected} is not a regular file (a link or a folder): not graded")
        return expected, []
    found = sorted(n for n, kind in names.items() if n.endswith(".ipynb") and kind == "file")
    if len(found) == 1:
        return found[0], [f"notebook was named {found[0]}, graded as {expected}"]
    if not found:
        links = sorted(n for n, kind in names.items() if n.endswith(".ipynb"))
        if links:
            raise Rejected(f"{links[0]} is not a regular file (a link or a folder): not graded")
        raise Rejected(f"no notebook in the submission (expected {expected})")
    raise Rejected(f"{len(found)} notebooks ({', '.join(found)}) and none named {expected}")


_FLAGS = ("grade", "solution", "locked", "task")


def _valid_nbgrader(meta) -> bool:
    if not isinstance(meta, dict):
        return False
    if "grade_id" in meta and not (isinstance(meta["grade_id"], str) and 0 < len(meta["grade_id"]) <= 255):
        return False
    if "points" in meta:
        points = meta["points"]
        if isinstance(points, bool) or not isinstance(points, (int, float)) or not math.isfinite(points):
            return False
        if not 0 <= points <= 1e6:
            return False
    if any(k in meta and not isinstance(meta[k], bool) for k in _FLAGS):
        return False
    if "schema_version" in meta and (isinstance(meta["schema_version"], bool)
                                     or not isinstance(meta["schema_version"], int)):
        return False
    return all(not isinstance(meta.get(k), (dict, list)) for k in ("checksum", "cell_type"))


def clean_metadata(nb: nbformat.NotebookNode) -> list[str]:
    """Drop nbgrader metadata that is not of nbgrader's types (a list for ``grade_id``, a string for
    ``points``...) from its cell; return a note when any was dropped."""
    dropped = 0
    for cell in nb.cells:
        meta = cell.get("metadata")
        if not isinstance(meta, dict):
            cell["metadata"] = nbformat.NotebookNode()
            continue
        if "nbgrader" in meta and not _valid_nbgrader(meta["nbgrader"]):
            del meta["nbgrader"]
            dropped += 1
        if "tags" in meta and not (isinstance(meta["tags"], list) and all(isinstance(t, str) for t in meta["tags"])):
            del meta["tags"]
    return [f"malformed nbgrader metadata ignored in {dropped} cell(s)"] if dropped else []


def accept(course: Course, chapter: Chapter, root: Path, parts: tuple[str, ...],
           source_ids: dict[str, set[str]]) -> Accepted:
    """Check one submission folder, ``root/parts...`` (``root`` trusted, the rest read without following
    links); ``source_ids`` maps chapter ids to their source grade ids."""
    try:
        folder = open_beneath(root, parts)
    except OSError:
        raise Rejected(f"{'/'.join(parts)}/ is not a folder (a link?): not graded") from None
    try:
        name, notes = _find_notebook(folder, chapter)
        nb = parse_submission(read_regular(folder, name, MAX_NOTEBOOK_BYTES), name)
        stamp = None
        if entries(folder).get("timestamp.txt") == "file":
            try:
                stamp = read_regular(folder, "timestamp.txt", MAX_STAMP_BYTES)
            except Rejected:
                stamp = None
    finally:
        os.close(folder)
    notes += clean_metadata(nb)
    if replaced := scrub(nb):
        notes.append(f"{replaced} lone surrogate(s) in the notebook's text replaced by U+FFFD")
    ids = grade_ids(nb)
    if not ids & source_ids[chapter.id]:
        other = [cid for cid, cids in source_ids.items() if cid != chapter.id and ids & cids]
        if other:
            raise Rejected(f"{name} is the notebook of {other[0]}, not {chapter.id}")
        raise Rejected(f"{name} has none of {chapter.id}'s graded cells "
                       "(was it made from the released notebook?)")
    return Accepted(nb, notes, stamp)
