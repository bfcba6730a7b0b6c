"""Student code against the notebooks' own tests, in-process and fast (the slow, end-to-end version
through nbgrader is test_grading.py).

Each variant (``tests/student_code/<slug>/``: a whole cell ``<exercise>__<variant>.py``, or an edit of one in
``<exercise>.md``, see :mod:`grader.dev.samples`) is the complete source a student might put in that
exercise's solution cell. ``correct`` / ``correct_<how>`` variants must pass the visible
asserts and the hidden checks; every other variant is a realistic mistake that the hidden checks alone
must fail (a grader that runs only the declarative checks relies on that layer); a ``uses_<builtin>``
variant computes the right values with a forbidden built-in, so only the ban can catch it.
"""

from __future__ import annotations

import ast
import re

import nbformat
import pytest
import torch

from grader.cells import exercises, solution_regions, split_hidden
from grader.checks import parse_checks, run_local
from grader.course import Course
from grader.dev.samples import BadVariant, apply_edit, is_correct, parse_edits, passing_visible, reasons, student_code

COURSE = Course.here()
CHAPTERS = [ch for ch in COURSE.chapters() if student_code(COURSE, ch)]


def notebook(ch):
    return nbformat.read(ch.notebook, as_version=4)


def prelude(ch) -> str:
    """The chapter's setup cell (by convention its first code cell: imports and seeds)."""
    return next(c.source for c in notebook(ch).cells if c.cell_type == "code")


def graded_sources(ch) -> dict[str, list[str]]:
    return {ex.name: [c.source for c in ex.tests] for ex in exercises(notebook(ch))}


def define(ch, source: str) -> dict:
    """Run a solution cell's source after the chapter's setup cell, as the student's kernel would."""
    namespace: dict = {"__name__": "__student__"}
    exec(compile(prelude(ch) + "\n" + source, "<solution cell>", "exec"), namespace)
    return namespace


def run_visible(ch, exercise: str, namespace: dict) -> None:
    for source in graded_sources(ch)[exercise]:
        torch.manual_seed(0)
        exec(compile(split_hidden(source)[0], f"<test_{exercise}>", "exec"), namespace)


def probe_definitions(source: str):
    """The classes, functions and imports of a test cell's visible part: a probe a check targets lives there
    (chapter 12's GenerationProbe), and its visible asserts need not run for it."""
    tree = ast.parse(split_hidden(source)[0])
    tree.body = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.Import, ast.ImportFrom))]
    return compile(tree, "<test cell definitions>", "exec")


def run_hidden(ch, exercise: str, namespace: dict) -> None:
    for source in graded_sources(ch)[exercise]:
        for check in parse_checks(split_hidden(source)[1]):
            if check.target not in namespace:  # a probe its test cell defines around the exercise
                exec(probe_definitions(source), namespace)
            run_local(check, namespace[check.target])


VARIANTS = [(ch, exercise, variant, source) for ch in CHAPTERS
            for exercise, by_variant in student_code(COURSE, ch).items()
            for variant, source in sorted(by_variant.items())]


def ids(item) -> str:
    return f"{item[0].slug}-{item[1]}__{item[2]}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda ch: ch.id)
def test_every_exercise_has_a_correct_variant_and_two_mistakes(ch):
    found = student_code(COURSE, ch)
    assert set(found) == {ex.name for ex in exercises(notebook(ch))}, "student code for every exercise"
    for exercise, variants in found.items():
        assert "correct" in variants, exercise
        assert sum(not is_correct(v) for v in variants) >= 2, exercise


@pytest.mark.parametrize("item", VARIANTS, ids=ids)
def test_variant_is_self_contained_student_code(item):
    ch, exercise, variant, source = item
    assert "solutions" not in source and "grader" not in source
    assert f"def {exercise}(" in source or f"class {exercise}(" in source
    assert not solution_regions(source)


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda ch: ch.id)
def test_the_source_notebooks_solutions_pass_their_visible_asserts(ch):
    for ex in exercises(notebook(ch)):
        run_visible(ch, ex.name, define(ch, ex.solution.source))


@pytest.mark.parametrize("item", [v for v in VARIANTS if is_correct(v[2])], ids=ids)
def test_correct_variant_passes_visible_and_hidden_tests(item):
    ch, exercise, _, source = item
    run_visible(ch, exercise, define(ch, source))
    run_hidden(ch, exercise, define(ch, source))


@pytest.mark.parametrize("item", [v for v in VARIANTS if not is_correct(v[2])], ids=ids)
def test_wrong_variant_fails_the_hidden_checks(item):
    ch, exercise, _, source = item
    with pytest.raises(AssertionError):
        run_hidden(ch, exercise, define(ch, source))


SNEAKY = [v for v in VARIANTS if v[2] in passing_visible(COURSE, v[0]).get(v[1], set())]


@pytest.mark.parametrize("item", SNEAKY, ids=ids)
def test_a_mistake_marked_passes_visible_passes_them_and_fails_the_hidden_checks(item):
    ch, exercise, _, source = item
    assert not is_correct(item[2]), "only mistakes carry the marker"
    run_visible(ch, exercise, define(ch, source))
    with pytest.raises(AssertionError):
        run_hidden(ch, exercise, define(ch, source))


@pytest.mark.parametrize("item", [v for v in VARIANTS if v[2].startswith("uses_")], ids=ids)
def test_a_banned_builtin_passes_the_visible_asserts_but_loses_the_points(item):
    ch, exercise, _, source = item
    run_visible(ch, exercise, define(ch, source))
    with pytest.raises(AssertionError, match="must not call"):
        run_hidden(ch, exercise, define(ch, source))


# ---------------------------------------------------------------------------------------------------
# the form of the variants: whole cells for right answers, every mistake an edit with its reason beside it


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda ch: ch.id)
def test_mistakes_are_written_as_edits_with_their_reason(ch):
    folder = COURSE.root / "tests" / "student_code" / ch.slug
    whole = [p.stem.partition("__")[2] for p in folder.glob("*__*.py")]
    assert all(is_correct(v) for v in whole), "a mistake is an edit in <exercise>.md, not a whole file"
    for exercise, why in reasons(COURSE, ch).items():
        for variant, text in why.items():
            generated = variant.replace("_", " ").capitalize() + "."
            assert text != generated and len(text) > 25, f"{exercise}.md: {variant} needs its reason"


EDITS = """
## correct_loop
from: correct
Right, a loop.

```diff
-    return x * 2
+    return sum([x, x])
```

## doubles_once
Adds instead of doubling twice: wrong for every x but 0.

```diff
     y = x
-    return x * 2
+    return x + 1
@@
-def f(x):
+def f(x):  # student
```
"""


def test_an_edit_is_the_cell_with_its_hunks_replaced():
    base = "def f(x):\n    y = x\n    return x * 2\n"
    edits = {e.name: e for e in parse_edits(EDITS)}
    assert edits["doubles_once"].base == "correct" and edits["doubles_once"].why.startswith("Adds instead")
    assert apply_edit(base, edits["doubles_once"]) == "def f(x):  # student\n    y = x\n    return x + 1\n"
    assert apply_edit(base, edits["correct_loop"]) == "def f(x):\n    y = x\n    return sum([x, x])\n"


@pytest.mark.parametrize("text, message", [
    ("## v\nNo diff at all.\n", "needs a reason and at least one diff block"),
    ("## v\n\n```diff\n-a\n+b\n```\n", "needs a reason"),
    ("## v\nWhy.\n\n```diff\n*a\n```\n", "must start with -, + or a space"),
    ("## v\nWhy.\n\n```python\nx = 1\n```\n", "only ```diff blocks"),
    ("## v\npasses: hidden\nWhy.\n\n```diff\n-a\n+b\n```\n", "only marker is 'passes: visible'"),
])
def test_a_malformed_variant_is_named(text, message):
    with pytest.raises(BadVariant, match=re.escape(message)):
        parse_edits(text, "x.md")


def test_a_hunk_must_stand_exactly_once():
    edit = parse_edits("## v\nWhy.\n\n```diff\n-    return x\n+    return y\n```\n")[0]
    with pytest.raises(BadVariant, match="stands 2 times"):
        apply_edit("def f(x):\n    return x\ndef g(x):\n    return x\n", edit)
    with pytest.raises(BadVariant, match="stands 0 times"):
        apply_edit("def f(x):\n    return z\n", edit)
