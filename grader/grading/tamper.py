"""Reading a submission, outside the sandbox, for code that reaches into the grader or the interpreter.

The ban recorders and memory meters run in the student's process (:mod:`grader.checks`); code there can
patch them (``sys.modules['grader.checks']``), walk the heap (``gc``), rewrite a function's code, or write
memory (``ctypes``). No attention exercise needs any of that, so the grader reads every cell that will run
from the submission (:func:`student_cells`: every code cell but the test cells, which the course's own
replace, and demo cells, which never run, *whatever their metadata says*) *before* running it. A cell it
cannot vouch for makes the submission **flagged**, and the points of every test that runs after that cell
are **held for review** (:mod:`grader.grading.holds`): judged as usual, counted only once the instructor
releases them, since the in-process recorders that judged them are not evidence.

The reading is an **allow-list**: what a cell may use is listed, anything else is held.

* imports of the modules an exercise can need (:data:`ALLOWED_IMPORTS`: torch, numpy, math, the standard
  library's pure helpers, the plotting libraries); any other module (``ctypes``, ``gc``, ``importlib``,
  ``pickle``, ``subprocess``, a module a new Python adds) is held;
* the builtins of :data:`ALLOWED_BUILTINS` (every exception class, ``len``, ``getattr`` with a constant
  name...); ``open``, ``eval``, ``exec``, ``compile``, ``globals``, ``vars``, ``__import__``,
  ``memoryview``, ``breakpoint``, and any builtin not listed, are held unless the notebook binds that name
  itself;
* of ``os`` and ``sys`` only the attributes of :data:`OS_ALLOWED` and :data:`SYS_ALLOWED` (``os.fork``,
  ``os.write``, ``sys.modules``, ``sys.settrace`` are not);
* dunder attributes of :data:`ALLOWED_DUNDERS` only (``__init__``, ``__name__``, the operators'; not
  ``__dict__``, ``__code__``, ``__globals__``, ``__subclasses__``, ``__getattribute__``);
* private attributes (``_x``) only of the cell's own objects (reached from ``self`` or ``cls``): a private
  name of a module or of anything else (``torch._refs.softmax``, ``torch.ops.aten._softmax``,
  ``[torch][0]._C``: the other implementations of a banned family) is held;
* attributes and names looked up by a constant string only (a computed ``getattr``, ``getattr`` passed as
  a value, ``operator.attrgetter``, ``pkgutil.resolve_name``, ``unittest.mock.patch``, IPython's
  ``get_ipython``: ``run_cell`` runs a string), no unpickling (``weights_only=False``,
  ``allow_pickle=True``), and none of torch's compilers or code loaders (``torch.compile``, ``torch.jit``,
  ``torch.library``, ``torch.hub``: a kernel they make is no ATen operator a ban can refuse).

A module reached through another name (``t = torch``, ``import torch as t``) is read as the module.
It fails closed: a cell is read as IPython runs it (magics turned into the calls they make), and a cell it
cannot read completely (a syntax error, nesting too deep to parse) is held as unreadable, not skipped.
"""

from __future__ import annotations

import ast
import builtins
import symtable
import threading

import nbformat

from ..cells import is_demo, nbgrader_meta

#: Modules whose import gives access to the interpreter's or the grader's internals, and torch's compilers
#: and code loaders (prefixes match submodules: ``torch._C._dispatch``); held even where a prefix of them
#: is allowed (``torch``, ``operator``, ``sys``).
MODULES = ("sys.modules", "sys._getframe", "sys.settrace", "sys.setprofile", "sys._current_frames", "grader",
           "solutions", "torch._C", "torch.library", "torch.overrides", "torch.utils._python_dispatch",
           "torch.utils.cpp_extension", "torch._dynamo", "torch._inductor", "torch._ops", "torch.compile",
           "torch.jit", "torch.hub", "torch.fx", "torch.export", "torch.classes", "torch.ops", "torch.package",
           "torch.multiprocessing", "torch.utils.data", "numpy.ctypeslib", "operator.attrgetter",
           "operator.methodcaller")
#: The modules a cell may import (and their submodules): what an attention exercise, a plot or a timing
#: can need. Anything else is held for review.
ALLOWED_IMPORTS = ("torch", "numpy", "math", "cmath", "random", "statistics", "functools", "itertools",
                   "collections", "dataclasses", "typing", "typing_extensions", "abc", "enum", "copy", "numbers",
                   "fractions", "decimal", "heapq", "bisect", "string", "re", "time", "timeit", "warnings",
                   "contextlib", "operator", "textwrap", "pprint", "json", "datetime", "__future__", "einops",
                   "matplotlib", "seaborn", "pandas", "scipy", "triton", "threading", "queue", "os", "sys",
                   "tqdm")
#: ``os`` and ``sys`` are imported for ordinary things (a core count, the version, ``sys.exit``); these are
#: those things. The rest of them (``os.fork``, ``os.write``, ``os.dup2``, ``sys.modules``, ``sys.path``)
#: is held.
OS_ALLOWED = ("path", "environ", "getenv", "getcwd", "cpu_count", "getpid", "sep", "linesep", "name", "listdir",
              "makedirs", "mkdir", "remove", "unlink", "rename", "replace", "urandom", "fspath", "devnull",
              "pathsep", "curdir", "stat", "scandir", "walk", "sched_getaffinity", "PathLike")
SYS_ALLOWED = ("version", "version_info", "float_info", "int_info", "maxsize", "platform", "argv", "exit",
               "stdout", "stderr", "getsizeof", "getrecursionlimit", "byteorder", "implementation",
               "hexversion", "float_repr_style", "executable")
#: The builtins a cell may name. The others (``open``, ``eval``, ``exec``, ``compile``, ``globals``,
#: ``vars``, ``locals``, ``__import__``, ``memoryview``, ``breakpoint``, ``help``, ``__build_class__``, and
#: any a later Python adds) are held, unless the notebook binds the name itself.
ALLOWED_BUILTINS = frozenset((
    "Ellipsis", "False", "None", "NotImplemented", "True", "__debug__", "__name__", "__doc__", "abs", "aiter",
    "all", "anext", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod",
    "complex", "delattr", "dict", "dir", "divmod", "enumerate", "exit", "filter", "float", "format",
    "frozenset", "getattr", "hasattr", "hash", "hex", "id", "input", "int", "isinstance", "issubclass", "iter",
    "len", "list", "map", "max", "min", "next", "object", "oct", "ord", "pow", "print", "property", "quit",
    "range", "repr", "reversed", "round", "set", "setattr", "slice", "sorted", "staticmethod", "str", "sum",
    "super", "tuple", "type", "zip",
    *(n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException))))
#: Dunder attributes a cell may name: construction, names, the operators and containers' protocols.
ALLOWED_DUNDERS = frozenset((
    "__init__", "__new__", "__call__", "__name__", "__qualname__", "__doc__", "__class__", "__module__",
    "__version__", "__len__", "__getitem__", "__setitem__", "__delitem__", "__iter__", "__next__",
    "__contains__", "__repr__", "__str__", "__format__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
    "__ge__", "__hash__", "__bool__", "__float__", "__int__", "__index__", "__complex__", "__enter__",
    "__exit__", "__array__", "__annotations__", "__all__", "__post_init__", "__torch_function__",
    *(f"__{p}{op}__" for op in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "and", "or",
                                 "xor", "lshift", "rshift") for p in ("", "r", "i")),
    "__neg__", "__pos__", "__abs__", "__invert__", "__round__"))
#: Names a cell may use for modules without importing them (the course's setup cells import them), and
#: the modules they stand for.
MODULE_NAMES = {"torch": "torch", "np": "numpy", "numpy": "numpy", "F": "torch.nn.functional", "nn": "torch.nn",
                "math": "math", "scipy": "scipy", "triton": "triton", "tl": "triton.language",
                "functools": "functools", "itertools": "itertools", "operator": "operator", "os": "os",
                "sys": "sys", "plt": "matplotlib.pyplot", "sns": "seaborn", "pd": "pandas", "random": "random",
                "time": "time", "warnings": "warnings", "typing": "typing"}
#: Attributes that expose frames, code, globals, the module registry or raw memory, on any object.
ATTRIBUTES = ("modules", "_getframe", "settrace", "setprofile", "_current_frames", "f_globals", "f_locals",
              "f_back", "f_builtins", "f_code", "gi_frame", "cr_frame", "ag_frame", "tb_frame", "tb_next",
              "cell_contents", "ctypes", "ctypeslib", "_C", "library", "_python_dispatch", "cpp_extension",
              "load_inline", "_start_new_thread", "_start_joinable_thread", "start_new_thread", "attrgetter",
              "methodcaller", "resolve_name", "mock", "run_cell", "run_line_magic", "run_cell_magic",
              "CodeType", "FunctionType", "co_code", "gi_code", "cr_code")
#: Builtins that look up an attribute by name: called with a constant name they are ordinary; passed as a
#: value (``functools.reduce(getattr, path, obj)``) they resolve a dotted path nobody can read.
LOOKUPS = ("getattr", "setattr", "delattr")
#: Names of the cell's own objects, whose private attributes (``self._cache``) are its own business.
OWN = ("self", "cls")
#: Magics the reader can see through: ``%matplotlib`` takes no code; ``%time``/``%timeit`` (line or cell)
#: run the code they are given, which is read like the cell's own. Every other magic, and ``!shell``, is a
#: call of IPython's shell with a string (``uses get_ipython``).
HARMLESS_MAGICS = ("matplotlib",)
TIMING_MAGICS = ("time", "timeit")
#: Keyword arguments that unpickle, that is run code chosen by the file (``torch.load``, ``numpy.load``).
UNPICKLING = {"weights_only": False, "allow_pickle": True}

_PARSE = threading.Lock()  # the AST machinery is not safe to drive from two threads at once


def _denied(path: str) -> bool:
    return any(path == m or path.startswith(m + ".") for m in MODULES)


def _not_allowed(path: str) -> bool:
    """A module path outside the allow-list: an unlisted module, a private component, a name of ``os`` or
    ``sys`` that is not among their ordinary ones."""
    parts = path.split(".")
    if not any(path == a or path.startswith(a + ".") for a in ALLOWED_IMPORTS):
        return True
    if any(_private(part) or _dunder(part) and part not in ALLOWED_DUNDERS for part in parts):
        return True
    allowed = {"os": OS_ALLOWED, "sys": SYS_ALLOWED}.get(parts[0])
    return allowed is not None and len(parts) > 1 and parts[1] not in allowed


def _module_hit(name: str) -> str | None:
    if _denied(name):
        return f"imports {name}"
    if any(_private(p) for p in name.split(".")):
        return f"imports private {name}"
    return f"imports {name}" if _not_allowed(name) else None


def _private(name: str) -> bool:
    """``_refs``, ``_masked_softmax``: a private name (dunders such as ``__version__`` are not)."""
    return name.startswith("_") and not _dunder(name)


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """``torch.ops.aten._softmax`` -> ("torch", ["ops", "aten", "_softmax"]); a chain not rooted at a name
    (``f().x``) has root None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), parts[::-1]


def _base(node: ast.AST) -> ast.AST:
    """What an expression is reached from, through attributes, subscripts and calls:
    ``self.blocks[0].cache()._k`` -> the name ``self``; ``[torch][0]._C`` -> the list."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _parse(source: str) -> tuple[str, ast.AST]:
    """The cell as IPython runs it: magics (``%time``, ``!ls``, ``%%capture``) turned into the calls they
    make, top-level ``await`` allowed."""
    from IPython.core.inputtransformer2 import TransformerManager

    code = TransformerManager().transform_cell(source)
    return code, compile(code, "<cell>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                         dont_inherit=True)


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


#: Names of the interpreter's and IPython's namespace that reach its machinery (not builtins, so listed).
HELD_GLOBALS = ("__builtins__", "__builtin__", "__loader__", "__spec__", "get_ipython")
_HELD_NAMES = frozenset(n for n in dir(builtins) if n not in ALLOWED_BUILTINS) | frozenset(HELD_GLOBALS)


def _unbound(code: str) -> set[str] | None:
    """The names some scope of the cell reads from the module or the builtins without the module binding
    them in this cell (None: the symbol table could not be made, so every use counts)."""
    try:
        top = symtable.symtable(code, "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: set[str] = set()
    todo = [top]
    while todo:
        table = todo.pop()
        todo.extend(table.get_children())
        for sym in table.get_symbols():
            if sym.get_name() in _HELD_NAMES and sym.is_referenced() and (table is top or sym.is_global()):
                out.add(sym.get_name())
    return out  # a name the cell binds too is re-checked by position in scan_source


def module_bindings(source: str) -> set[str]:
    """The names a cell binds at module level (what later cells may use as their own)."""
    try:
        code, _ = _parse(source)
        top = symtable.symtable(code, "<cell>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}


def _aliases(nodes: list[ast.AST]) -> dict[str, str]:
    """Names that stand for modules (or their attributes): the usual ones, the cell's imports, and names
    a module is assigned to (``t = torch``, ``ops = torch.ops``)."""
    aliases = dict(MODULE_NAMES)
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname] = a.name if a.asname else None
                if not a.asname:
                    top = a.name.split(".")[0]
                    aliases[top] = top
            aliases.pop(None, None)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module or ''}.{a.name}".lstrip(".")
    for _ in range(3):  # t = torch; u = t: a few steps of indirection
        for node in nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                path = _path(node.value, aliases)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if path and isinstance(t, ast.Name):
                        aliases[t.id] = path
    return aliases


def _path(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``torch.ops.aten`` -> "torch.ops.aten" when the chain starts at a module's name, else None."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        root, parts = _chain(node)
        if root in aliases:
            return ".".join([aliases[root], *parts])
    return None


def _attribute_hit(node: ast.Attribute, aliases: dict[str, str]) -> str | None:
    attr = node.attr
    if attr in ATTRIBUTES or _dunder(attr) and attr not in ALLOWED_DUNDERS:
        return f"uses .{attr}"
    root, parts = _chain(node)
    if root in aliases:
        path = ".".join([aliases[root], *parts])
        shown = ".".join([root, *parts])
        if any(_private(p) for p in path.split(".")):
            return f"uses private {shown}"
        return f"uses {shown}" if _denied(path) or _not_allowed(path) else None
    if _private(attr):
        base = _base(node)
        if not (isinstance(base, ast.Name) and base.id in OWN):
            shown = ".".join([root, *parts]) if root else f"(...).{attr}"
            return f"uses private {shown}"
    return None


def scan_source(source: str, bound: set[str] = frozenset()) -> list[str]:
    """What one cell's code uses that the allow-list does not let through (empty when nothing), in order of
    appearance, without repeats. ``bound``: names the notebook's earlier cells bind at module level (a cell
    may name its own ``input`` or ``vars``)."""
    try:
        with _PARSE:
            code, tree = _parse(source)
            nodes = list(ast.walk(tree))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [f"cannot be read ({type(exc).__name__}), so what it runs is unknown"]
    aliases = _aliases(nodes)
    unbound = _unbound(code)
    # a held name the cell binds at module level counts as its own only where it is read after that binding
    first_store: dict[str, tuple[int, int]] = {}
    for node in tree.body if isinstance(tree, ast.Module) else []:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in _HELD_NAMES:
                first_store.setdefault(n.id, (n.lineno, n.col_offset))
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    found: list[str] = []
    seen_through: set[int] = set()  # the get_ipython names of magics read through
    for node in nodes:
        magic = _magic(node)
        if magic is not None:
            name, inner = magic
            if name in HARMLESS_MAGICS or name in TIMING_MAGICS:
                seen_through.add(id(node.func.value.func))
                for hit in scan_source(inner, bound) if name in TIMING_MAGICS else []:
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
        elif isinstance(node, ast.Name) and node.id in _HELD_NAMES and node.id not in bound \
                and (unbound is None or node.id in unbound) and isinstance(node.ctx, ast.Load) \
                and (node.lineno, node.col_offset) < first_store.get(node.id, (1 << 30, 0)):
            hit = f"uses {node.id}"
        elif isinstance(node, ast.Name) and node.id in LOOKUPS and id(node) not in called:
            hit = f"passes {node.id} as a value"
        elif isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Call) and id(node.value.func) in seen_through):
                hit = _attribute_hit(node, aliases)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in LOOKUPS and len(node.args) >= 2):
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                hit = f"uses {node.func.id} with a computed name"
            elif (name.value in ATTRIBUTES or name.value in _HELD_NAMES or _private(name.value)
                  or _dunder(name.value) and name.value not in ALLOWED_DUNDERS):
                hit = f"uses {node.func.id}(..., {name.value!r})"
            elif (path := _path(node.args[0], aliases)) and (_denied(f"{path}.{name.value}")
                                                           or _not_allowed(f"{path}.{name.value}")):
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


def findings(nb: nbformat.NotebookNode, known: set[str] = frozenset(),
             tests: set[str] = frozenset()) -> list[tuple[int, str, list[str]]]:
    """``(index, source, hits)`` of every cell that runs from the submission and uses what the allow-list
    does not let through, in the notebook's order. Names bound at module level by the cells before a cell
    (the course's included) are that cell's own."""
    reads = {i: source for i, source in student_cells(nb, known, tests)}
    bound: set[str] = set()
    out = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code" or is_demo(cell):
            continue
        source = _text(cell.get("source", ""))
        if i in reads and (hits := scan_source(source, frozenset(bound))):
            out.append((i, source, hits))
        bound |= module_bindings(source)
    return out


def scan(nb: nbformat.NotebookNode, known: set[str] = frozenset(), tests: set[str] = frozenset()) -> list[str]:
    """One line per cell that uses what the allow-list does not let through, e.g.
    ``cell 4: imports sys, uses .modules``."""
    return lines(findings(nb, known, tests))


def lines(found: list[tuple[int, str, list[str]]]) -> list[str]:
    """:func:`findings` as one line per cell, its first four hits."""
    return [f"cell {i}: {', '.join(hits[:4])}{' ...' if len(hits) > 4 else ''}" for i, _, hits in found]


def reason(nb: nbformat.NotebookNode, known: set[str] = frozenset(), tests: set[str] = frozenset()) -> str:
    """The flag's reason, or "" when the submission reaches for nothing."""
    return describe(scan(nb, known, tests))


def describe(lines: list[str]) -> str:
    if not lines:
        return ""
    return ("reaches for the interpreter's or the grader's internals, or past what the grader's reading lets "
            "through, so its in-process checks (bans, memory) are not evidence: " + "; ".join(lines[:3])
            + (" ..." if len(lines) > 3 else ""))
