"""The grader's outside reading of a submission for code that reaches into its internals
(grader/grading/tamper.py): attacks of every kind it names are flagged, the course's own code and every
bundled student answer are not."""

import nbformat
import pytest

from grader.course import Course
from grader.dev.samples import released, student_code
from grader.grading import tamper

# the sample submissions are made from the student release: made once per test run (conftest)
pytestmark = pytest.mark.usefixtures("release")

COURSE = Course.here()


@pytest.mark.parametrize("source, hit", [
    ("import sys\nsys.modules['grader.checks']._recording_banned = None", "uses .modules"),
    ("from importlib import import_module\nm = import_module('grader.checks')", "imports importlib"),
    ("m = __import__('gr' + 'ader.checks')", "uses __import__"),
    ("f = getattr(__builtins__, 'ev' + 'al')", "uses __builtins__"),
    ("import gc\nfor o in gc.get_objects(): pass", "imports gc"),
    ("import ctypes\nctypes.memmove(1, 2, 3)", "imports ctypes"),
    ("def f(x):\n    return x\nf.__code__ = (lambda x: 0).__code__", "uses .__code__"),
    ("classes = ().__class__.__base__.__subclasses__()", "uses .__subclasses__"),
    ("import torch\ntorch.library.Library('aten', 'IMPL')", "uses .library"),
    ("from torch._C import _ExcludeDispatchKeyGuard", "imports torch._C"),
    ("import numpy as np\np = np.ctypeslib.as_array", "uses .ctypeslib"),
    ("exec(open('x').read())", "uses exec"),
    ("g = globals()", "uses globals"),
    ("import mmap\nm = mmap.mmap(-1, 1 << 30)", "imports mmap"),
    ("from sys import modules", "imports sys.modules"),
    ("import sys as s\nm = s.modules", "uses .modules"),
    ("import sys\nm = getattr(sys, 'mod' + 'ules')", "uses getattr with a computed name"),
    ("import sys\nf = getattr(sys, '_getframe')", "uses getattr(..., '_getframe')"),
])
def test_code_that_reaches_into_internals_is_named(source, hit):
    assert hit in tamper.scan_source(source)


def test_ordinary_exercise_code_and_broken_code_are_not_flagged():
    assert tamper.scan_source("import math, sys, torch\nimport threading\n\ndef f(x):\n"
                              "    print(sys.version, getattr(x, 'shape'))\n    return torch.exp(x) / math.e") == []
    assert tamper.scan_source("def f(:\n") == []  # the notebook run reports a syntax error


@pytest.mark.parametrize("ch", [ch for ch in COURSE.chapters() if student_code(COURSE, ch)], ids=lambda c: c.id)
def test_no_bundled_answer_and_no_released_notebook_is_flagged(ch):
    known = tamper.course_cells(nbformat.read(ch.notebook, as_version=4))
    assert tamper.scan(released(COURSE, ch), known) == []
    for exercise, variants in student_code(COURSE, ch).items():
        for variant, source in variants.items():
            assert tamper.scan_source(source) == [], f"{exercise}__{variant}"


def test_the_reason_names_the_cell_and_ignores_the_course_cells():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import gc  # the course's setup"),
        nbformat.v4.new_code_cell("import gc", metadata={"nbgrader": {"solution": True, "grade_id": "x"}}),
        nbformat.v4.new_code_cell("import gc  # a locked cell", metadata={"nbgrader": {"locked": True}}),
    ])
    text = tamper.reason(nb, known={"import gc  # the course's setup"})
    assert "cell 1: imports gc" in text and "cell 0" not in text and "cell 2" not in text
    assert tamper.reason(nbformat.v4.new_notebook()) == ""
