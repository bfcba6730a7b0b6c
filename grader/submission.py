"""A notebook file a student handed in, read safely: size-bounded, UTF-8, JSON nested no deeper than a
notebook needs, a valid notebook, or :class:`Rejected` with the reason. Grading's intake and the student's
``grader validate`` read through it.

Text that came from a student can hold what no file or database takes: a lone surrogate (JSON's
``"\\ud800"`` decodes to one, and so does a file name that is not UTF-8, through ``os.fsdecode``).
:func:`scrub` replaces them in a notebook before it is written; :func:`printable` shows them escaped in a
name or a reason that is stored, logged or printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat

MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
#: Levels of nested JSON a notebook may have. Its own structure takes about ten (outputs and widget state in
#: metadata a few more); far deeper, the readers and writers that follow (nbformat, pickle, json) recurse
#: past Python's limit, so such a file is rejected here, as unreadable, before any of them sees it.
MAX_JSON_DEPTH = 100
_SURROGATE = re.compile("[\ud800-\udfff]")


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
    except RecursionError:
        data = None
    if data is None or _deeper_than(data, MAX_JSON_DEPTH):
        raise Rejected(f"{path.name} is JSON nested deeper than {MAX_JSON_DEPTH} levels: not a notebook")
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Rejected(f"{path.name} is JSON but not a notebook (no list of cells)")
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises several types for malformed notebooks
        raise Rejected(f"{path.name} is not a valid notebook: {str(exc).splitlines()[0][:200]}") from None
    return nb


def _deeper_than(data, limit: int) -> bool:
    """Whether the JSON value ``data`` nests lists and objects more than ``limit`` levels (no recursion)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def clean(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many there were."""
    return _SURROGATE.subn("\ufffd", text)


def scrub(tree) -> int:
    """Replace the lone surrogates in every string (keys included) of a JSON-like tree of dicts and lists,
    in place, so that it can be written as UTF-8; return how many were replaced. Iterative: the depth of a
    student's tree costs no recursion."""
    count, stack = 0, [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in [k for k in item if isinstance(k, str) and _SURROGATE.search(k)]:
                new, n = clean(key)
                count += n
                item[new] = item.pop(key)
            slots = list(item.items())
        elif isinstance(item, list):
            slots = list(enumerate(item))
        else:
            continue
        for slot, value in slots:  # a dict's keys or a list's indices: one way to clean what they hold
            if isinstance(value, str):
                new, n = clean(value)
                if n:
                    item[slot], count = new, count + n
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return count


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every surrogate written as an escape, so that it can be stored, logged and printed: an
    undecodable byte of a file name (which ``os.fsdecode`` turns into U+DC80..U+DCFF) as ``\\xNN``, the byte
    it was, and any other as ``\\uNNNN``. Text without surrogates is returned unchanged."""
    return _SURROGATE.sub(_escape, text) if _SURROGATE.search(text) else text
