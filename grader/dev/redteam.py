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
          other: Chapter | None = None) -> dict[str, Expect]:
    """Lay out the red-team class under ``inbox`` (one student per case); return the expectations.

    The gradebook attack writes to every database under ``workdir`` (and ``workdir`` itself should be a
    scratch folder): graded by plain nbgrader, which runs it unconfined, it really does destroy them.
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
        put(f"rt-wrong-{attack.replace('_', '-')}", _insert_after_setup(bad, ATTACKS[attack]),
            about=f"wrong answers + {attack.replace('_', ' ')}", score=0)
    if workdir is None:
        raise ValueError("the red team needs a scratch workdir: its gradebook attack is real")
    attack = ATTACKS["write_gradebook"].format(workdir=workdir)
    put("rt-wrong-gradebook", _insert_after_setup(bad, attack),
        about="wrong answers + writes to every gradebook it can find", score=0)
    names = list(correct)
    stolen = {ex: wrong[ex] + _steal([ex]) for ex in names}
    put("rt-wrong-read-hidden", _insert_after_setup(samples.fill(released, stolen), _read_hidden(course.root, ch)),
        about="wrong answers + reads the source, the solutions and hidden tests from disk", score=0)
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
    put("rt-wrong-retype-tests", retyped, about="wrong answers + test cells un-graded and renamed", score=0)
    inflated = copy.deepcopy(good)
    for cell in _test_cells(inflated):
        cell.metadata["nbgrader"]["points"] = 1000
    put("rt-correct-inflate-points", inflated, about="correct answers + test points set to 1000", score=full)

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
        about="correct answers + a segmentation fault", score=0, status="flagged", reason="SIGSEGV")
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


def chapter_points(course: Course, chapter: str = "qkv") -> float:
    ch = course.chapter(chapter)
    return sum(ex.points for ex in exercises(nbformat.read(ch.notebook, as_version=4)))
