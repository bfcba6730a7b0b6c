"""A notebook file a student handed in, read safely: size-bounded, UTF-8, JSON, a valid notebook, or
:class:`Rejected` with the reason. Grading's intake and the student's ``grader validate`` read through it."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024


class Rejected(Exception):
    """The submission cannot be graded; the message is the reason recorded for it."""


def read_submission(path: Path) -> nbformat.NotebookNode:
    """The notebook in ``path``, or :class:`Rejected` saying why not (too large, not UTF-8, not JSON, not a
    valid notebook). Grading and ``grader validate`` read a student's file through it."""
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise Rejected(f"{path.name} is {size / 2**20:.0f} MiB, over the {MAX_NOTEBOOK_BYTES // 2**20} MiB limit")
    return parse_submission(path.read_bytes(), path.name)


def parse_submission(raw: bytes, name: str) -> nbformat.NotebookNode:
    """The notebook in the bytes ``raw`` of the file ``name``, or :class:`Rejected` saying why not."""
    path = Path(name)
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise Rejected(f"{path.name} is {len(raw) / 2**20:.0f} MiB, over the {MAX_NOTEBOOK_BYTES // 2**20} MiB limit")
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
