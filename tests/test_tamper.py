"""The grader's outside reading of a submission for code that reaches into its internals
(grader/grading/tamper.py): attacks of every kind it names are flagged, the course's own code and every
bundled student answer are not."""

import nbformat
import pytest

from grader.cells import nbgrader_meta
from grader.course import Course
from grader.dev.samples import is_correct, released, student_code
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
    # issue 27, class 2: attributes reached by a string, magics, unpickling
    ("f = object.__getattribute__(obj, 'x')", "uses .__getattribute__"),
    ("import torch\nf = torch.__dict__['soft' + 'max']", "uses .__dict__"),
    ("import operator\nf = operator.attrgetter('nn.functional.softmax')(torch)", "uses .attrgetter"),
    ("from operator import attrgetter", "imports operator.attrgetter"),
    ("import functools\nf = functools.reduce(getattr, ['nn', 'functional'], torch)", "passes getattr as a value"),
    ("import pkgutil\nf = pkgutil.resolve_name('torch.softmax')", "imports pkgutil"),
    ("from unittest import mock\nmock.patch('grader.checks.judge').start()", "imports unittest"),
    ("get_ipython().run_cell('import gc')", "uses get_ipython"),
    ("%time import gc", "imports gc"),
    ("%%timeit\nimport gc", "imports gc"),
    ("%%capture\nimport gc", "uses get_ipython"),
    ("%run other.py", "uses get_ipython"),
    ("!ls /", "uses get_ipython"),
    ("m = torch.load('w.pt', weights_only=False)", "unpickles (weights_only=False)"),
    ("a = np.load('a.npy', allow_pickle=True)", "unpickles (allow_pickle=True)"),
    ("def f(x):\n    return x +", "cannot be read (SyntaxError), so what it runs is unknown"),
    # issue 27, class 5: a banned family's other implementations are private names
    ("p = torch._refs.softmax(x, -1)", "uses private torch._refs"),
    ("from torch._decomp.decompositions import _softmax", "imports private torch._decomp.decompositions"),
    ("p = torch._masked_softmax(x, m, -1, 0)", "uses private torch._masked_softmax"),
    ("import torch as t\np = t.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)",
     "uses private t.ops.aten._scaled_dot_product_flash_attention_for_cpu"),
    ("p = getattr(torch, '_refs').softmax(x, -1)", "uses getattr(..., '_refs')"),
    # the allow-list: what is not listed is held (issue 27: "an allow-list, not a deny-list")
    ("f = open('/proc/self/mem', 'wb')", "uses open"),
    ("m = memoryview(b'x')", "uses memoryview"),
    ("def f(x, open=open):\n    return open", "uses open"),  # a default is read in the module's scope
    ("x = open('f')\nopen = None", "uses open"),  # read before the cell binds it
    ("import os\nos.fork()", "uses os.fork"),
    ("import os as o\no.dup2(1, 3)", "uses o.dup2"),
    ("from os import fork", "imports os.fork"),
    ("import os\ngetattr(os, 'write')(3, b'x')", "uses getattr(..., 'write')"),
    ("import sys\nsys.path.insert(0, '/tmp')", "uses sys.path"),
    ("import pickle", "imports pickle"),
    ("import antigravity", "imports antigravity"),
    ("t = torch\nu = t\np = u._refs.softmax(x, -1)", "uses private u._refs"),
    ("p = [torch][0]._refs.softmax(x, -1)", "uses private (...)._refs"),
    ("cache._k = 1", "uses private cache._k"),
    ("f = torch.compile(g)", "uses torch.compile"),
    ("g = torch.jit.script(f)", "uses torch.jit"),
    ("f = torch.ops.aten.softmax", "uses torch.ops"),
    ("d = type(x).__mro__", "uses .__mro__"),
    ("help(x)", "uses help"),
])
def test_code_that_reaches_into_internals_is_named(source, hit):
    assert hit in tamper.scan_source(source)


def test_ordinary_exercise_code_is_not_flagged():
    assert tamper.scan_source("import math, sys, torch\nimport threading\n\ndef f(x):\n"
                              "    print(sys.version, getattr(x, 'shape'))\n    return torch.exp(x) / math.e") == []
    assert tamper.scan_source("class Cache:\n    def __init__(self):\n        self._k = None\n"
                              "w = torch.load('w.pt', weights_only=True)\n%matplotlib inline\n%time y = f(x)") == []



def test_what_the_allow_list_lets_through():
    for source in ("def f(open):\n    return open('x')",  # a parameter of the cell's own
                   "class A:\n    def f(self):\n        return self.blocks[0]._k",
                   "print(x.__class__.__name__, torch.__version__)\nsuper().__init__()",
                   "import os, sys\nprint(os.cpu_count(), os.path.join('a', 'b'), sys.version_info)\nsys.exit(0)",
                   "from torch.nn import functional as G\np = G.softmax(x, -1)\nimport numpy.linalg as la",
                   "def add(self, other):\n    return self.__add__(other) + x.__rmatmul__(y)"):
        assert tamper.scan_source(source) == [], source
    assert tamper.scan_source("v = vars(x)", frozenset({"vars"})) == []  # an earlier cell's own vars


def test_a_name_is_the_cells_own_only_after_an_earlier_cell_binds_it():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("f = open('/proc/self/mem', 'wb')  # the builtin: held"),
        nbformat.v4.new_code_cell("def open(path, mode='r'):\n    return path"),
        nbformat.v4.new_code_cell("f = open('x')  # the cell above's own open"),
    ])
    assert [i for i, _, _ in tamper.findings(nb)] == [0]

@pytest.mark.parametrize("ch", [ch for ch in COURSE.chapters() if student_code(COURSE, ch)], ids=lambda c: c.id)
def test_no_correct_answer_and_no_released_notebook_is_flagged(ch):
    """Wrong variants may be flagged (``uses_builtin_backward`` reaches a private kernel): they lose their
    points anyway. Correct ones, in whatever style, may not."""
    source = nbformat.read(ch.notebook, as_version=4)
    tests = {nbgrader_meta(c)["grade_id"] for c in source.cells
             if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")}
    assert tamper.scan(released(COURSE, ch), tamper.course_cells(source), tests) == []
    for exercise, variants in student_code(COURSE, ch).items():
        for variant, code in variants.items():
            if is_correct(variant):
                assert tamper.scan_source(code) == [], f"{exercise}__{variant}"


def test_the_reason_names_the_cell_and_ignores_the_course_cells():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import gc  # the course's setup"),
        nbformat.v4.new_code_cell("import gc", metadata={"nbgrader": {"solution": True, "grade_id": "x"}}),
        nbformat.v4.new_code_cell("import gc  # marked locked by the student, run all the same",
                                  metadata={"nbgrader": {"locked": True, "grade_id": "mine"}}),
        nbformat.v4.new_code_cell("import gc  # a test cell: the course's runs instead",
                                  metadata={"nbgrader": {"locked": True, "grade": True, "grade_id": "test_x"}}),
        nbformat.v4.new_code_cell("import gc  # a demo: never run", metadata={"tags": ["demo"]}),
    ])
    text = tamper.reason(nb, known={"import gc  # the course's setup"}, tests={"test_x"})
    assert "cell 1: imports gc" in text and "cell 2: imports gc" in text, text
    assert "cell 0" not in text and "cell 3" not in text and "cell 4" not in text, text
    assert tamper.reason(nbformat.v4.new_notebook()) == ""
