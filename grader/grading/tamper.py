"""Reading a submission, outside the sandbox, for code that reaches into the grader or the interpreter.

The ban recorders and memory meters run in the student's process (:mod:`grader.checks`); code there can
patch them (``sys.modules['grader.checks']``), walk the heap (``gc``), rewrite a function's code, or write
memory (``ctypes``). No attention exercise needs any of that, so the grader reads every cell that will run
from the submission (:func:`student_cells`: every code cell but the test cells, which the course's own
replace, and demo cells, which never run, *whatever their metadata says*) *before* running it, and a
submission that uses one of these means is graded as usual but **flagged** with the reason, for the
instructor to look at: the points it earned through the in-process recorders are not evidence.

``import sys`` alone is not flagged (``sys.argv``, ``sys.exit`` are ordinary); its registry of modules,
frames and tracing are. The list names capabilities, not tricks: importing a module of introspection or
foreign memory, naming the builtins that run or look up code by string, an attribute that exposes frames,
code objects, globals or the registry of loaded modules, a name that resolves a dotted path or an attribute
by string (``operator.attrgetter``, ``pkgutil.resolve_name``, ``unittest.mock.patch``, ``getattr`` passed
as a value), IPython's own shell (``get_ipython``: ``run_cell`` runs a string), unpickling
(``weights_only=False``, ``allow_pickle=True``), and any private name of a module (``torch._refs``,
``torch._masked_softmax``, ``torch.ops.aten._softmax``: the other implementations of a banned family).
Obfuscation needs one of them to start from (``__import__``, ``getattr`` on ``__builtins__``, ``importlib``,
``eval``), so it is flagged too.

It fails closed: a cell is read as IPython runs it (magics turned into the calls they make), and a cell it
cannot read completely (a syntax error, nesting too deep to parse) is flagged as unreadable, not skipped.
"""

from __future__ import annotations

import ast
import threading

import nbformat

from ..cells import is_demo, nbgrader_meta

#: Modules whose import gives access to the interpreter's or the grader's internals (prefixes match
#: submodules: ``torch._C._dispatch``).
MODULES = ("ctypes", "gc", "inspect", "importlib", "builtins", "sys.modules", "sys._getframe", "sys.settrace",
           "sys.setprofile", "sys._current_frames", "mmap", "marshal", "pickle", "dill",
           "multiprocessing", "subprocess", "signal", "resource", "_thread", "faulthandler", "tracemalloc",
           "grader", "solutions", "torch._C", "torch.library", "torch.overrides", "torch.utils._python_dispatch",
           "torch.utils.cpp_extension", "torch._dynamo", "torch._ops", "numpy.ctypeslib", "cffi", "pkgutil",
           "pydoc", "runpy", "code", "codeop", "shelve", "copyreg", "unittest.mock", "operator.attrgetter",
           "operator.methodcaller", "IPython")
#: Builtins that run, compile or look up code and names by string.
NAMES = ("__import__", "eval", "exec", "compile", "globals", "vars", "locals", "breakpoint", "__builtins__",
         "__loader__", "__spec__", "get_ipython")
#: Attributes that expose frames, code, globals, the module registry or raw memory.
ATTRIBUTES = ("modules", "_getframe", "settrace", "setprofile", "_current_frames", "__code__", "__globals__",
              "__closure__", "__subclasses__", "__bases__",
              "__mro__", "__base__", "f_globals", "f_locals", "f_back", "f_builtins", "gi_frame", "cr_frame",
              "tb_frame", "cell_contents", "ctypes", "ctypeslib", "_C", "library", "_python_dispatch",
              "cpp_extension", "load_inline", "__reduce__", "__reduce_ex__", "__setstate__",
              "_start_new_thread", "_start_joinable_thread", "start_new_thread", "__getattribute__", "__dict__",
              "__getattr__", "__setattr__", "__delattr__", "attrgetter", "methodcaller", "resolve_name", "mock",
              "run_cell", "run_line_magic", "run_cell_magic", "CodeType", "FunctionType")
#: Builtins that look up an attribute by name: called with a constant name they are ordinary; passed as a
#: value (``functools.reduce(getattr, path, obj)``) they resolve a dotted path nobody can read.
LOOKUPS = ("getattr", "setattr", "delattr")
#: Names a cell may use for modules without importing them (the course's setup cells import them): an
#: attribute chain from one of these, or from a name the cell imports, is a module path, and a private
#: component of it (``torch._refs``) is flagged.
MODULE_NAMES = ("torch", "np", "numpy", "F", "nn", "math", "scipy", "triton", "tl", "functools", "itertools",
                "operator", "os", "sys", "plt", "sns", "pd", "random", "time", "warnings", "typing")
#: Magics the reader can see through: ``%matplotlib`` takes no code; ``%time``/``%timeit`` (line or cell)
#: run the code they are given, which is read like the cell's own. Every other magic, and ``!shell``, is a
#: call of IPython's shell with a string (``uses get_ipython``).
HARMLESS_MAGICS = ("matplotlib",)
TIMING_MAGICS = ("time", "timeit")
#: Keyword arguments that unpickle, that is run code chosen by the file (``torch.load``, ``numpy.load``).
UNPICKLING = {"weights_only": False, "allow_pickle": True}

_PARSE = threading.Lock()  # the AST machinery is not safe to drive from two threads at once


def _module_hit(name: str) -> str | None:
    for m in MODULES:
        if name == m or name.startswith(m + "."):
            return f"imports {name}"
    if any(_private(part) for part in name.split(".")):
        return f"imports private {name}"
    return None


def _private(name: str) -> bool:
    """``_refs``, ``_masked_softmax``: a private name (dunders such as ``__version__`` are not)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """``torch.ops.aten._softmax`` -> ("torch", ["ops", "aten", "_softmax"]); a chain not rooted at a name
    (``f().x``) has root None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), parts[::-1]


def _parse(source: str) -> ast.AST:
    """The cell as IPython runs it: magics (``%time``, ``!ls``, ``%%capture``) turned into the calls they
    make, top-level ``await`` allowed."""
    from IPython.core.inputtransformer2 import TransformerManager

    code = TransformerManager().transform_cell(source)
    return compile(code, "<cell>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def _magic(node: ast.AST) -> tuple[str, str] | None:
    """``get_ipython().run_line_magic('time', 'f(x)')`` -> ("time", "f(x)"); the cell magic's body for
    ``run_cell_magic``; None for anything else."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("run_line_magic", "run_cell_magic")
            and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "get_ipython" and not node.func.value.args and not node.keywords):
        return None
    args = node.args
    if not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args) or len(args) < 2:
        return None
    if node.func.attr == "run_line_magic":
        return args[0].value, args[1].value
    return (args[0].value, args[2].value) if len(args) == 3 and not args[1].value.strip() else None


def scan_source(source: str) -> list[str]:
    """What one cell's code reaches for (empty when nothing), in order of appearance, without repeats."""
    try:
        with _PARSE:
            tree = _parse(source)
            nodes = list(ast.walk(tree))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [f"cannot be read ({type(exc).__name__}), so what it runs is unknown"]
    modules = set(MODULE_NAMES)
    for node in nodes:
        if isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.update(a.asname or a.name for a in node.names)
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    found: list[str] = []
    seen_through: set[int] = set()  # the get_ipython names of magics read through
    for node in nodes:
        magic = _magic(node)
        if magic is not None:
            name, code = magic
            if name in HARMLESS_MAGICS or name in TIMING_MAGICS:
                seen_through.add(id(node.func.value.func))
                for hit in scan_source(code) if name in TIMING_MAGICS else []:
                    if hit not in found:
                        found.append(hit)
    for node in nodes:
        hit = None
        if id(node) in seen_through:
            continue
        if isinstance(node, ast.Import):
            hit = next((h for a in node.names if (h := _module_hit(a.name))), None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            hit = _module_hit(base) or next((h for a in node.names if (h := _module_hit(f"{base}.{a.name}"))), None)
        elif isinstance(node, ast.Name) and node.id in NAMES:
            hit = f"uses {node.id}"
        elif isinstance(node, ast.Name) and node.id in LOOKUPS and id(node) not in called:
            hit = f"passes {node.id} as a value"
        elif isinstance(node, ast.Attribute) and node.attr in ATTRIBUTES:
            if not (isinstance(node.value, ast.Call) and id(node.value.func) in seen_through):
                hit = f"uses .{node.attr}"
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            root, parts = _chain(node)
            if root in modules:
                hit = f"uses private {'.'.join([root, *parts])}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in LOOKUPS and len(node.args) >= 2):
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                hit = f"uses {node.func.id} with a computed name"
            elif name.value in ATTRIBUTES or name.value in NAMES or _private(name.value):
                hit = f"uses {node.func.id}(..., {name.value!r})"
        elif isinstance(node, ast.keyword) and node.arg in UNPICKLING:
            value = node.value
            if not (isinstance(value, ast.Constant) and value.value is not UNPICKLING[node.arg]):
                hit = f"unpickles ({node.arg}={ast.unparse(value)[:40]})"
        if hit and hit not in found:
            found.append(hit)
    return found


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def course_cells(source_nb: nbformat.NotebookNode) -> set[str]:
    """The code the course itself gives every student: the source notebook's code cells other than
    solution cells (setup cells, launchers), which a submission may keep unchanged."""
    return {_text(c.get("source", "")).strip() for c in source_nb.get("cells", [])
            if c.get("cell_type") == "code" and not (c.get("metadata", {}).get("nbgrader") or {}).get("solution")}


def student_cells(nb: nbformat.NotebookNode, known: set[str] = frozenset(),
                  tests: set[str] = frozenset()) -> list[tuple[int, str]]:
    """``(index, source)`` of the code cells that run from the submission (as :func:`grader.plan.plan` runs
    them): every code cell except the test cells (``tests``: their grade ids; the course's own cells run in
    their place) and demo cells (never run), whatever else their metadata says -- a cell a student marks
    ``locked`` is read like any other -- less cells that are the course's own code unchanged (``known``,
    from :func:`course_cells`)."""
    out = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code" or is_demo(cell):
            continue
        meta = nbgrader_meta(cell)
        if isinstance(meta, dict) and meta.get("grade_id") in tests:
            continue
        source = _text(cell.get("source", ""))
        if source.strip() not in known:
            out.append((i, source))
    return out


def scan(nb: nbformat.NotebookNode, known: set[str] = frozenset(), tests: set[str] = frozenset()) -> list[str]:
    """One line per cell that reaches for the grader's or the interpreter's internals, e.g.
    ``cell 4: imports sys, uses .modules``."""
    lines = []
    for i, source in student_cells(nb, known, tests):
        hits = scan_source(source)
        if hits:
            lines.append(f"cell {i}: {', '.join(hits[:4])}{' ...' if len(hits) > 4 else ''}")
    return lines


def reason(nb: nbformat.NotebookNode, known: set[str] = frozenset(), tests: set[str] = frozenset()) -> str:
    """The flag's reason, or "" when the submission reaches for nothing."""
    lines = scan(nb, known, tests)
    if not lines:
        return ""
    return ("reaches into the grader's or the interpreter's internals, so its in-process checks (bans, memory) "
            "are not evidence: " + "; ".join(lines[:3]) + (" ..." if len(lines) > 3 else ""))
