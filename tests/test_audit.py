"""The notebook process's audit hook (grader/grading/audit.py): what tampering with the in-process recorders
needs is refused when it happens, from a cell's code (frames, code objects, exec) or from anywhere (foreign
memory, the heap's object lists, tracers, a process's memory), while ordinary exercise code, the standard
library's own use of frames and torch's autograd go on. Run in a process of its own: no hook can be removed."""

import json
import subprocess
import sys

from grader.course import Course

COURSE = Course.here()

REFUSED = {
    "import ctypes\nctypes.c_int.from_address(id(1))": "ctypes.cdata",
    "import ctypes\nctypes.CDLL(None)": "ctypes.dlopen",
    "import gc\ngc.get_objects()": "gc.get_objects",
    "import gc\ngc.get_referrers(print)": "gc.get_referrers",
    "import sys\nf = sys._getframe()": "sys._getframe",
    "import sys\nsys.settrace(None)": "sys.settrace",
    "import threading, sys\nsys.setprofile(None)": "sys.setprofile",
    "def f():\n    pass\nc = f.__code__": "object.__getattr__",
    "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    t = e.__traceback__.tb_frame": "object.__getattr__",
    "exec('x = 1')": "compile",
    "open('/proc/self/mem', 'rb')": "memory",
    "import os\nos.open('/proc/self/mem', os.O_RDONLY)": "memory",
}
ALLOWED = [
    "import torch\nx = torch.randn(3, 4, requires_grad=True)\ntorch.softmax(x, -1).sum().backward()\nprint(x.grad)",
    "import typing, collections\nT = typing.TypeVar('T')\nP = collections.namedtuple('P', 'a b')\nprint(P(1, 2))",
    "from dataclasses import dataclass\n@dataclass\nclass B:\n    a: int = 1\nprint(B())",
    "import warnings\nwarnings.warn('a warning')",
    "%time y = 1 + 1",
    "try:\n    1 / 0\nexcept ZeroDivisionError:\n    import traceback\n    traceback.print_exc()",
    "with open('notes.txt', 'w') as fh:\n    fh.write('ok')",
    "import triton\nimport triton.language as tl",
]

SCRIPT = """
import json, os, sys, tempfile
os.chdir(tempfile.mkdtemp())
from grader.grading import audit, harness
shell = harness._shell()
audit.install()
cells = json.loads(sys.argv[1])
print(json.dumps([harness._run_cell(shell, c) for c in cells]))
"""


def test_the_hook_refuses_tampering_and_lets_exercise_code_run():
    cells = [*REFUSED, *ALLOWED]
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cells)], cwd=COURSE.root, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    results = dict(zip(cells, json.loads(out.stdout.strip().splitlines()[-1])))
    for cell, event in REFUSED.items():
        ok, _, error = results[cell]
        assert not ok and error.startswith("Refused: ") and event in error, (cell, error)
    for cell in ALLOWED:
        ok, output, error = results[cell]
        assert ok, (cell, error)
